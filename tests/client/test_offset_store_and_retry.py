"""Offset stores (local file and broker) and producer retries across brokers.

Method: the local file store is exercised on real files in tmp_path (round trip, atomic
replacement with a backup, recovery from a corrupt file). The remote store and the send
retries run against one pybroker standalone per module: offsets are written oneway and
synchronously and read back by a fresh store; for retries the producer's route gets a second
broker whose master address is a fault proxy (pybroker/_testbase/fault_proxy.py) that accepts
connections and drops them, so the counts of accepted connections and stored messages show
exactly where each attempt went.
"""
import asyncio
import dataclasses
import json
import time

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker._testbase.fault_proxy import FaultProxy
from pybroker.client.admin import Admin
from pybroker.client.instance import ClientInstance
from pybroker.client.message import Message, SendStatus
from pybroker.client.offset_store import (OFFSET_UNKNOWN, LocalFileOffsetStore,
                                          RemoteOffsetStore)
from pybroker.client.producer import Producer
from pybroker.protocol.bodies import BrokerData, MessageQueue, QueueData
from tests.client.scenario import create_topic as _create_topic, unique_name as _name

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
DEAD_BROKER = "broker-dead"


# --- local file store ----------------------------------------------------------------------------

def test_local_file_store_round_trip_and_backup(tmp_path):
    queues = [MessageQueue("T", "b", i) for i in range(3)]

    async def scenario():
        store = LocalFileOffsetStore(tmp_path, "10.0.0.1@77", "G")
        assert await store.read_offset(queues[0]) == OFFSET_UNKNOWN
        await store.persist_all()
        assert not store.path.exists()   # nothing to write yet
        for offset, queue in enumerate(queues):
            store.update_offset(queue, offset * 10)
        store.update_offset(queues[2], 5, increase_only=True)   # never lowered this way
        await store.persist_all()
        store.update_offset(queues[0], 99)
        await store.persist(queues[0])
        document = json.loads(store.path.read_text())
        assert {(e["queueId"], e["offset"]) for e in document["offsetTable"]} == {
            (0, 99), (1, 10), (2, 20)}
        backup = store.path.with_suffix(".json.bak")
        assert {e["offset"] for e in json.loads(backup.read_text())["offsetTable"]} == {0, 10,
                                                                                        20}
        fresh = LocalFileOffsetStore(tmp_path, "10.0.0.1@77", "G")
        assert [await fresh.read_offset(q) for q in queues] == [99, 10, 20]
        store.path.write_bytes(b"{not json")   # a torn file: the backup is used
        recovered = LocalFileOffsetStore(tmp_path, "10.0.0.1@77", "G")
        assert [await recovered.read_offset(q) for q in queues] == [0, 10, 20]
        other = LocalFileOffsetStore(tmp_path, "10.0.0.1@77", "OtherGroup")
        assert await other.read_offset(queues[0]) == OFFSET_UNKNOWN
    asyncio.run(scenario())


# --- against a broker ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with StandaloneBroker(tmp_path_factory.mktemp("pybroker-retry")) as running:
        yield running


def test_remote_store_persists_and_reads_back(broker):
    async def scenario():
        topic, group = _name("off"), _name("cg")
        await _create_topic(broker, topic)
        instance = ClientInstance(broker.namesrv_addr)
        await instance.start()
        try:
            await instance.update_route(topic)
            queues = [MessageQueue(topic, "broker-a", i) for i in range(4)]
            store = RemoteOffsetStore(instance, group)
            # Java answers 0, not QUERY_NOT_FOUND, for a queue whose first message is in memory.
            assert await store.read_offset(queues[0], from_store=True) == 0
            store.update_offset(queues[0], 7)
            await store.persist(queues[0], oneway=False)
            store.update_offset(queues[1], 3)
            store.update_offset(queues[2], 11)
            await store.persist_all()   # oneway: visible shortly after
            fresh = RemoteOffsetStore(instance, group)
            assert await fresh.read_offset(queues[0], from_store=True) == 7
            deadline = time.monotonic() + 10
            while await fresh.read_offset(queues[2], from_store=True) != 11:
                assert time.monotonic() < deadline, "oneway offset never arrived"
                await asyncio.sleep(0.1)
            assert await fresh.read_offset(queues[1], from_store=True) == 3
            assert await fresh.read_offset(queues[3], from_store=True) == 0
            fresh.update_offset(queues[0], 50)   # advanced locally, not persisted yet
            assert await fresh.read_offset(queues[0], from_store=True) == 50
            store.remove(queues[0])
            assert store.cached_offset(queues[0]) == OFFSET_UNKNOWN
        finally:
            await instance.shutdown()
    asyncio.run(scenario())


def _with_dead_broker(route, dead_address: str, keep_live: bool):
    """The route plus a broker whose master is ``dead_address`` (listed first)."""
    live_brokers = [b for b in route.broker_datas] if keep_live else []
    live_queues = [q for q in route.queue_datas] if keep_live else []
    dead = BrokerData(cluster="DefaultCluster", broker_name=DEAD_BROKER,
                      broker_addrs={0: dead_address})
    dead_queues = QueueData(broker_name=DEAD_BROKER, read_queue_nums=4, write_queue_nums=4,
                            perm=6, topic_sys_flag=0)
    return dataclasses.replace(route, broker_datas=[dead] + live_brokers,
                               queue_datas=[dead_queues] + live_queues)


async def _stored_count(broker, topic: str, at_least: int = 0) -> int:
    """The topic's messages in its consume queues, once ``at_least`` are (or after 10 s): the
    queues are written by the dispatcher after SEND_OK, as Java's reput writes them."""
    deadline = time.monotonic() + 10
    async with Admin(broker.namesrv_addr) as admin:
        while True:
            stats = await admin.topic_stats(topic)
            count = sum(s.max_offset for s in stats.values())
            if count >= at_least or time.monotonic() > deadline:
                return count
            await asyncio.sleep(0.05)


async def _producer_with_route(broker, topic, proxy_address, keep_live, **options):
    producer = Producer(_name("pg"), broker.namesrv_addr, **options)
    await producer.start()
    route = await producer.instance.update_route(topic)
    producer.instance._store_route(topic, _with_dead_broker(route, proxy_address, keep_live))
    assert {q.broker_name for q in producer.instance.publish_infos[topic].message_queues} == {
        DEAD_BROKER, "broker-a"} if keep_live else {DEAD_BROKER}
    return producer


@pytest.mark.parametrize("fault_avoidance", [False, True])
def test_send_retries_on_another_broker(broker, fault_avoidance):
    async def scenario():
        topic = _name("retry")
        await _create_topic(broker, topic)
        proxy = FaultProxy()
        address = await proxy.start()
        producer = await _producer_with_route(broker, topic, address, True,
                                              send_latency_fault_enable=fault_avoidance)
        try:
            results = [await producer.send(Message(topic, f"m{i}")) for i in range(16)]
            accepted = proxy.accepted   # before shutdown's UNREGISTER_CLIENT reaches it too
        finally:
            await producer.shutdown()
            await proxy.stop()
        assert all(r.status == SendStatus.SEND_OK for r in results)
        assert {r.message_queue.broker_name for r in results} == {"broker-a"}
        assert len({r.msg_id for r in results}) == 16
        assert await _stored_count(broker, topic, 16) == 16   # each stored once
        if fault_avoidance:
            assert accepted == 1   # isolated after its first failure
        else:
            assert accepted >= 4   # round robin keeps trying it, every try moved on
    asyncio.run(scenario())


def test_send_gives_up_after_all_attempts(broker):
    async def scenario():
        topic = _name("dead")
        await _create_topic(broker, topic)
        proxy = FaultProxy()
        address = await proxy.start()
        producer = await _producer_with_route(broker, topic, address, False,
                                              retry_times_when_send_failed=2)
        try:
            with pytest.raises(ConnectionError):
                await producer.send(Message(topic, b"lost"))
            accepted = proxy.accepted   # before shutdown's UNREGISTER_CLIENT reaches it too
        finally:
            await producer.shutdown()
            await proxy.stop()
        assert accepted == 3   # the first attempt and two retries
        assert await _stored_count(broker, topic) == 0
    asyncio.run(scenario())
