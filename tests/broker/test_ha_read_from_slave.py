"""Reads move to the slave as Java moves them: suggestWhichBrokerId per slaveReadEnable and
accessMessageInMemoryMaxRatio, and the Python client follows the suggestion.

Method: a real master/slave pair (pybroker/_testbase/ha_cluster.py). With slaveReadEnable and
accessMessageInMemoryMaxRatio=0 every pull reads "from disk" (the memory budget is 0 bytes),
so Java's rule suggests whichBrokerWhenConsumeSlowly (1, the slave): checked on raw pull
answers of both brokers, then a Python push consumer must consume everything with most of
the messages transferred by the slave (its getMessageTransferedMsgCount). Without
slaveReadEnable both brokers suggest the master (0). The slave also answers the raw pull of a
queue and offset that only it can vouch for.
"""
import asyncio
import time

import pytest

from pybroker._testbase.ha_cluster import HACluster
from pybroker.client.consumer import PushConsumer
from pybroker.client.listener import ConsumeStatus
from pybroker.protocol import fastjson
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.protocol.constants import ConsumeFromWhere
from tests.ha_support import client_for, pull, send, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "HaReadTopic"
QUEUES = 4
COUNT = 200


def _fill_and_sync(cluster: HACluster) -> set[bytes]:
    master, slave = cluster.masters[0], cluster.slaves[0][0]
    bodies = set()
    with client_for(master.address) as client:
        for index in range(COUNT):
            body = b"read-%04d" % index
            assert send(client, TOPIC, body, index % QUEUES, f"r{index}").code == \
                ResponseCode.SUCCESS
            bodies.add(body)
    end = master.published("written_position")
    wait_for(lambda: slave.published("dispatched_position") == end, 30, "replication")
    with client_for(slave.address) as client:
        wait_for(lambda: pull(client, TOPIC, 0, 0).code == ResponseCode.SUCCESS, 30,
                 "slave topic sync", interval_s=0.5)
    return bodies


def _suggestions(cluster: HACluster) -> tuple[str, str]:
    answers = []
    for broker in (cluster.masters[0], cluster.slaves[0][0]):
        with client_for(broker.address) as client:
            answer = pull(client, TOPIC, 1, 0)
            assert answer.code == ResponseCode.SUCCESS
            answers.append(answer.ext_fields["suggestWhichBrokerId"])
    return answers[0], answers[1]


def _transferred(address: str) -> int:
    with client_for(address) as client:
        answer = client.invoke(create_request(RequestCode.GET_BROKER_RUNTIME_INFO, {}), 5000)
    return int(fastjson.loads(answer.body)["table"]["getMessageTransferedMsgCount"])


def test_without_slave_read_every_broker_suggests_the_master(tmp_path):
    with HACluster(tmp_path) as cluster:
        _fill_and_sync(cluster)
        assert _suggestions(cluster) == ("0", "0")


def test_slave_read_enable_moves_the_python_client_to_the_slave(tmp_path):
    overrides = {"slaveReadEnable": "true", "accessMessageInMemoryMaxRatio": "0"}
    with HACluster(tmp_path, overrides=overrides) as cluster:
        bodies = _fill_and_sync(cluster)
        assert _suggestions(cluster) == ("1", "1")
        slave = cluster.slaves[0][0]
        before = _transferred(slave.address)

        async def consume() -> set[bytes]:
            seen: set[bytes] = set()

            async def listener(messages, context):
                seen.update(bytes(m.body) for m in messages)
                return ConsumeStatus.CONSUME_SUCCESS
            consumer = PushConsumer("ha_read_group", cluster.namesrv.address,
                                    consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                    rebalance_interval_ms=1000, pull_batch_size=8)
            consumer.subscribe(TOPIC)
            consumer.register_message_listener(listener)
            await consumer.start()
            deadline = time.monotonic() + 60
            while not bodies <= seen:
                assert time.monotonic() < deadline, f"consumed {len(seen)} of {len(bodies)}"
                await asyncio.sleep(0.1)
            await consumer.shutdown()
            return seen
        asyncio.run(consume())
        # The first pull of each queue goes to the master, which suggests the slave; the
        # rest come from the slave (pulls of 8: about 17 of 25 batches per queue, at least).
        assert _transferred(slave.address) - before >= COUNT // 2
