"""kill -9 of a SYNC_MASTER under load loses nothing it acknowledged, in a 2-master/2-slave
cluster, and clients carry on.

Method: a real NameServer and four brokers (broker-a and broker-b, each SYNC_MASTER with one
SLAVE; pybroker/_testbase/ha_cluster.py). The Python client produces without pause (sync
sends, every body unique) to a topic on both masters while a Python push consumer consumes it.
Mid-load broker-a's master is killed with SIGKILL: sends must fail over to broker-b, the
consumer must go on reading broker-a's queues from its slave (the route then lists only the
slave; the client follows suggestWhichBrokerId / falls back to any broker of the set, as
Java's), and after broker-a restarts its slave must resume from its own offset. At the end an
independent reader (raw PULL_MESSAGE requests, not the client library) counts every
acknowledged message back: broker-a's from its slave, broker-b's from its master - zero may be
missing - and the push consumer must have received each of them at least once.
"""
import asyncio
import time

import pytest

from pybroker._testbase.ha_cluster import HACluster
from pybroker.client.admin import Admin
from pybroker.client.consumer import PushConsumer
from pybroker.client.listener import ConsumeStatus
from pybroker.client.message import Message, SendStatus
from pybroker.client.producer import Producer
from pybroker.protocol.constants import ConsumeFromWhere
from tests.ha_support import client_for, read_queue, wait_for, wait_topic_synced

pytestmark = [pytest.mark.crash, pytest.mark.slow, pytest.mark.timeout(300)]

TOPIC = "HaClusterTopic"
QUEUES = 4
CLIENT = {"poll_name_server_interval_ms": 1000}
FAST = dict(CLIENT, rebalance_interval_ms=1000, persist_consumer_offset_interval_ms=1000)


class _Load:
    """A producer coroutine and a push consumer in one loop; acknowledged and seen bodies."""

    def __init__(self, namesrv_addr: str):
        self.namesrv_addr = namesrv_addr
        self.acked: dict[tuple[str, int, int], bytes] = {}     # (broker, queue, offset) -> body
        self.not_ok: dict[str, int] = {}
        self.seen: set[bytes] = set()
        self.stop = asyncio.Event()

    async def produce(self) -> None:
        sequence = 0
        async with Producer("ha_cluster_producer", self.namesrv_addr, send_timeout_ms=3000,
                            **CLIENT) as producer:
            while not self.stop.is_set():
                body = b"ha-%08d" % sequence
                sequence += 1
                try:
                    result = await producer.send(Message(TOPIC, body))
                except Exception as error:      # noqa: BLE001 (every failure is counted)
                    name = type(error).__name__
                    self.not_ok[name] = self.not_ok.get(name, 0) + 1
                    await asyncio.sleep(0.05)
                    continue
                if result.status is SendStatus.SEND_OK:
                    queue = result.message_queue
                    self.acked[(queue.broker_name, queue.queue_id, result.queue_offset)] = body
                else:
                    self.not_ok[result.status.name] = self.not_ok.get(result.status.name, 0) + 1
                await asyncio.sleep(0.002)

    def consumer(self) -> PushConsumer:
        async def listener(messages, context):
            self.seen.update(bytes(m.body) for m in messages)
            return ConsumeStatus.CONSUME_SUCCESS
        consumer = PushConsumer("ha_cluster_consumer", self.namesrv_addr,
                                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                **FAST)
        consumer.subscribe(TOPIC)
        consumer.register_message_listener(listener)
        return consumer


async def _until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        await asyncio.sleep(0.1)


def _slaves_synced(cluster: HACluster) -> None:
    """Wait until every slave has the topic from its master's config (3 s after start, then
    every 10 s, as Java's SlaveSynchronize): a master killed sooner leaves a slave that answers
    TOPIC_NOT_EXIST to every pull (a Java slave too), and the kill comes seconds after the
    topic's creation."""
    for slaves in cluster.slaves:
        for slave in slaves:
            with client_for(slave.address) as client:
                wait_topic_synced(client, TOPIC)


def _count_back(cluster: HACluster, acked: dict) -> list:
    """Acknowledged messages missing from where an independent reader finds them now."""
    sources = {"broker-a": cluster.slaves[0][0].address, "broker-b": cluster.masters[1].address}
    stored = {}
    for broker, address in sources.items():
        with client_for(address) as client:
            for queue_id in range(QUEUES):
                for offset, body in enumerate(read_queue(client, TOPIC, queue_id)):
                    stored[(broker, queue_id, offset)] = body
    return [where for where, body in acked.items() if stored.get(where) != body]


def test_sync_master_kill_in_a_two_by_two_cluster(tmp_path):
    with HACluster(tmp_path, groups=2, role="SYNC_MASTER",
                   overrides={"remotingWorkers": "1"}) as cluster:
        master_a, slave_a = cluster.masters[0], cluster.slaves[0][0]

        async def scenario() -> _Load:
            async with Admin(cluster.namesrv.address) as admin:
                for master in cluster.masters:
                    await admin.create_topic(TOPIC, QUEUES, broker_addr=master.address)
            await asyncio.get_running_loop().run_in_executor(None, _slaves_synced, cluster)
            load = _Load(cluster.namesrv.address)
            consumer = load.consumer()
            await consumer.start()
            producing = asyncio.create_task(load.produce())
            try:
                await _until(lambda: len({w[0] for w in load.acked}) == 2
                             and len(load.acked) > 400, 60, "load on both masters")
                acked_before = len(load.acked)
                master_a.kill()
                await _until(lambda: sum(w[0] == "broker-b" for w in load.acked) > acked_before
                             // 2 + 300, 60, "sends failing over to broker-b")
                a_acked = {body for w, body in load.acked.items() if w[0] == "broker-a"}
                # broker-a's queues are read from its slave now.
                await _until(lambda: a_acked <= load.seen, 90, "consumption from the slave")
                master_a.start()
                await asyncio.get_running_loop().run_in_executor(None, master_a.wait_slaves, 1)
                await _until(lambda: sum(w[0] == "broker-a" for w in load.acked)
                             > len(a_acked) + 100, 60, "sends to the restarted master")
            finally:
                load.stop.set()
                await producing
            await _until(lambda: set(load.acked.values()) <= load.seen, 90,
                         "every acknowledged message consumed")
            await consumer.shutdown()
            return load

        load = asyncio.run(scenario())
        end = master_a.published("written_position")
        wait_for(lambda: slave_a.published("written_position") == end, 30, "slave resumed")
        # The slave resumed from its own offset, not from the master's last file.
        assert "request offset 0," not in master_a.log_text().split("boot success")[-1]
        missing = _count_back(cluster, load.acked)
        print(f"acknowledged {len(load.acked)}, missing {len(missing)}, "  # noqa: T201
              f"not acknowledged {load.not_ok}")
        assert missing == []
