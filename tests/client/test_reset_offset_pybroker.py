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
from pybroker.client.consumer import ConsumeStatus, PushConsumer
from pybroker.client.message import Message, SendStatus
from pybroker.client.producer import Producer
from pybroker.protocol import bodies, fastjson
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.protocol.constants import ConsumeFromWhere
from pybroker.remoting.client import RemotingClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
QUEUES = 4
COUNT = 40
TIMEOUT_MS = 5000


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with StandaloneBroker(tmp_path_factory.mktemp("pybroker-reset")) as value:
        yield value


async def _wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def _committed_total(admin: Admin, group: str, topic: str) -> int:
    progress = await admin.consumer_progress(group, topic)
    return sum(max(p.consumer_offset, 0) for p in progress.values())


async def _reset(broker_addr: str, group: str, topic: str, timestamp_ms: int):
    client = RemotingClient()
    try:
        await client.connect(broker_addr)
        fields = {"topic": topic, "group": group, "timestamp": str(timestamp_ms),
                  "isForce": "false"}
        return await client.invoke(
            create_request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields), TIMEOUT_MS)
    finally:
        client.close()


async def _consumer_status(broker_addr: str, group: str, topic: str):
    """INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223): the broker asks each live client (221)."""
    client = RemotingClient()
    try:
        await client.connect(broker_addr)
        fields = {"topic": topic, "group": group, "clientAddr": ""}
        return await client.invoke(
            create_request(RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, fields), 15000)
    finally:
        client.close()


def test_reset_by_time_redelivers_everything(broker):
    async def scenario():
        topic, group = f"reset_{uuid.uuid4().hex[:8]}", f"cg_{uuid.uuid4().hex[:8]}"
        seen: list[tuple[int, int]] = []

        async def listener(messages, context):
            seen.extend((m.queue_id, m.queue_offset) for m in messages)
            return ConsumeStatus.CONSUME_SUCCESS
        async with Admin(broker.namesrv_addr) as admin:
            await admin.create_topic(topic, QUEUES, broker_addr=broker.broker_addr)
            await _wait_until(lambda: _is_routed(admin, topic), 20, "the topic route")
            consumer = PushConsumer(group, broker.namesrv_addr, instance_name="reset",
                                    consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                    rebalance_interval_ms=1000,
                                    persist_consumer_offset_interval_ms=1000)
            consumer.subscribe(topic)
            consumer.register_message_listener(listener)
            await consumer.start()
            try:
                before_ms = time.time_ns() // 1_000_000 - 1
                sent = set()
                async with Producer(f"pg_{uuid.uuid4().hex[:8]}", broker.namesrv_addr) as p:
                    for index in range(COUNT):
                        result = await p.send(Message(topic, b"m%d" % index))
                        assert result.status == SendStatus.SEND_OK
                        sent.add((result.message_queue.queue_id, result.queue_offset))
                await _wait_until(lambda: _true(set(seen) >= sent), 30, "the first delivery")
                await _wait_until(lambda: _equals(_committed_total(admin, group, topic), COUNT),
                                  30, "the commits")
                first = len(seen)
                response = await _reset(broker.broker_addr, group, topic, before_ms)
                assert response.code == ResponseCode.SUCCESS, response.remark
                table = fastjson.loads(response.body)["offsetTable"]
                assert len(table) == QUEUES and set(table.values()) == {0}
                assert {bodies.message_queue_from_json(fastjson.loads(key), "key").topic
                        for key in table} == {topic}
                await _wait_until(lambda: _true(set(seen[first:]) >= sent), 30,
                                  "the second delivery")
                await _wait_until(lambda: _equals(_committed_total(admin, group, topic), COUNT),
                                  30, "the commits after the reset")
                assert set(seen[first:]) == sent
                status = await _consumer_status(broker.broker_addr, group, topic)
                assert status.code == ResponseCode.SUCCESS, status.remark
                clients = fastjson.loads(status.body)["consumerTable"]
                assert len(clients) == 1, clients
                offsets = next(iter(clients.values()))
                assert len(offsets) == QUEUES and sum(offsets.values()) == COUNT
            finally:
                await consumer.shutdown()
    asyncio.run(scenario())


async def _true(value: bool) -> bool:
    return value


async def _equals(awaitable, expected) -> bool:
    return await awaitable == expected


async def _is_routed(admin: Admin, topic: str) -> bool:
    return await admin.topic_route(topic) is not None
