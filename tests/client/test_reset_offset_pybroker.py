# End to end: INVOKE_BROKER_TO_RESET_OFFSET rewinds a live Python push consumer on pybroker.
"""Goal: prove that resetting a group's offsets by time on pybroker (request 222, what
``mqadmin resetOffsetByTime`` sends) makes a live Python push consumer deliver again every
message stored after that time, and that the broker's committed offsets follow.

Method: one `pybroker standalone` (StandaloneBroker) in a temp directory; a push consumer
consumes N messages and commits them; the test sends 222 with a timestamp taken before the
sends over a raw RemotingClient and checks the ResetOffsetBody (every queue at 0), that each
(queue id, queue offset) is then consumed a second time, and that QUERY_CONSUMER_OFFSET ends
at the queue ends again; then asks the broker for the group's status (223), which it collects
from the live client (221). Every wait is bounded.
"""
import asyncio
import time
import uuid

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.client.admin import Admin
from pybroker.protocol import bodies, fastjson
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.remoting.client import RemotingClient
from tests.reset_offsets import (QUEUES, RecordingConsumer, committed_offsets, send_numbered,
                                 wait_until)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
COUNT = 40
TIMEOUT_MS = 5000


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with StandaloneBroker(tmp_path_factory.mktemp("pybroker-reset")) as value:
        yield value


async def _invoke(broker_addr: str, code: int, fields: dict, timeout_ms: int):
    client = RemotingClient()
    try:
        await client.connect(broker_addr)
        return await client.invoke(create_request(code, fields), timeout_ms)
    finally:
        client.close()


def test_reset_by_time_redelivers_everything(broker):
    async def scenario():
        topic, group = f"reset_{uuid.uuid4().hex[:8]}", f"cg_{uuid.uuid4().hex[:8]}"
        async with Admin(broker.namesrv_addr) as admin:
            await admin.create_topic(topic, QUEUES, broker_addr=broker.broker_addr)

            async def routed() -> bool:
                return await admin.topic_route(topic) is not None

            async def committed_all() -> bool:
                committed = await committed_offsets(admin, group, topic)
                return sum(max(offset, 0) for offset in committed.values()) == COUNT
            await wait_until(routed, 20, "the topic route")
            async with RecordingConsumer(broker.namesrv_addr, group, topic, "reset") as consumer:
                before_ms = time.time_ns() // 1_000_000 - 1
                sent = await send_numbered(broker.namesrv_addr, topic, COUNT)
                await wait_until(consumer.delivered(0, sent), 30, "the first delivery")
                await wait_until(committed_all, 30, "the commits")
                first = len(consumer.seen)
                response = await _invoke(broker.broker_addr,
                                         RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                                         {"topic": topic, "group": group,
                                          "timestamp": str(before_ms), "isForce": "false"},
                                         TIMEOUT_MS)
                assert response.code == ResponseCode.SUCCESS, response.remark
                table = fastjson.loads(response.body)["offsetTable"]
                assert len(table) == QUEUES and set(table.values()) == {0}
                assert {bodies.message_queue_from_json(fastjson.loads(key), "key").topic
                        for key in table} == {topic}
                await wait_until(consumer.delivered(first, sent), 30, "the second delivery")
                await wait_until(committed_all, 30, "the commits after the reset")
                assert set(consumer.seen[first:]) == sent
                # INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223): the broker asks each client (221).
                status = await _invoke(broker.broker_addr,
                                       RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
                                       {"topic": topic, "group": group, "clientAddr": ""},
                                       15000)
                assert status.code == ResponseCode.SUCCESS, status.remark
                clients = fastjson.loads(status.body)["consumerTable"]
                assert len(clients) == 1, clients
                offsets = next(iter(clients.values()))
                assert len(offsets) == QUEUES and sum(offsets.values()) == COUNT
    asyncio.run(scenario())
