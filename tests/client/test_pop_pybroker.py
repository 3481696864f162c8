# The Python client's POP scenarios (pop_scenarios.py) against pybroker.
"""Goal: the 5.x POP consumers of pybroker.client work against pybroker's broker, as they do
against Java 5.3.3 (test_pop_java.py runs the very same scenarios there).

Method: one `pybroker standalone` per module with two remoting workers (StandaloneBroker's
test profile), so the clients' connections land on both workers and the POP state they share
is the cross-process one; the scenarios of tests/client/pop_scenarios.py, unchanged (the Java
push consumer's through a Java 5.3.3 client class path, skipped without Java). One
pybroker-only check on the same broker: what consumerProgress, brokerStatus and the metrics
endpoint say about messages a POP consumer holds.
"""
import asyncio
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pybroker._testbase.cluster import StandaloneBroker, free_port
from pybroker.client import Admin
from tests import peers
from tests.client import pop_scenarios
from tests.client.conftest import Peer
from tests.client.pop_scenarios import (  # noqa: F401 (collected here against pybroker)
    test_a_held_pop_is_answered_when_a_message_arrives,
    test_java_push_consumer_in_pop_mode,
    test_order_pop_holds_a_queue_until_its_run_is_acknowledged,
    test_pop_hands_each_message_to_one_consumer,
    test_push_over_pop_retries_then_dead_letters,
    test_unacknowledged_messages_come_back_acknowledged_ones_never,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


_METRICS_PORT = free_port()


@pytest.fixture(scope="module")
def rocketmq_peer(tmp_path_factory):
    with StandaloneBroker(tmp_path_factory.mktemp("pybroker-pop"),
                          {"metricsExporterType": "PROM",
                           "metricsPromExporterPort": str(_METRICS_PORT)}) as broker:
        yield Peer(broker.namesrv_addr, broker.broker_addr)


@pytest.fixture(scope="module")
def java_pop_client(rocketmq_peer, tmp_path_factory):
    """The Java 5.3.3 client's class path pointed at this module's pybroker (skips without
    Java unless PYBROKER_REQUIRE_PEERS=1)."""
    install = peers.java_install("5.3.3")
    port = int(rocketmq_peer.namesrv_addr.rsplit(":", 1)[1])
    client = peers.java_rocketmq.JavaRocketMQ(tmp_path_factory.mktemp("java-client"), install,
                                              namesrv_port=port)
    client.write_files()
    return client, install


def _inflight_metric(topic: str, group: str) -> float | None:
    url = f"http://127.0.0.1:{_METRICS_PORT}/metrics"
    with urllib.request.urlopen(url, timeout=5) as answer:
        text = answer.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "rocketmq_consumer_inflight_messages" and \
                    (sample.labels["topic"], sample.labels["consumer_group"]) == (topic, group):
                return sample.value
    return None


def test_held_messages_show_as_in_flight(rocketmq_peer):
    """Six popped, two acknowledged: consumerProgress's #Inflight (pullOffset -
    consumerOffset) and rocketmq_consumer_inflight_messages say four; brokerStatus has
    Java 5.x's ack pool keys; after the last acks both say zero."""
    async def scenario():
        topic = await pop_scenarios._topic(rocketmq_peer, 2)
        await pop_scenarios._send(rocketmq_peer, topic, [b"m%d" % i for i in range(6)])
        group = pop_scenarios._name("pop_group")
        consumer = pop_scenarios._consumer(rocketmq_peer, group, topic)
        admin = Admin(rocketmq_peer.namesrv_addr)
        await consumer.start()
        await admin.start()

        async def inflight() -> tuple[int, float | None]:
            stats = await admin.consume_stats(rocketmq_peer.broker_addr, group, topic)
            progress = sum(entry["pullOffset"] - entry["consumerOffset"]
                           for entry in stats["offsetTable"].values())
            return progress, await asyncio.to_thread(_inflight_metric, topic, group)

        async def wait_for(expected: tuple) -> None:
            for _ in range(100):
                if await inflight() == expected:
                    return
                await asyncio.sleep(0.1)
            assert await inflight() == expected
        try:
            held = await pop_scenarios._collect(consumer, 6, ack=False)
            assert len(held) == 6
            await consumer.ack_all(held[:2])
            await wait_for((4, 4.0))
            runtime = await admin.broker_runtime_info(rocketmq_peer.broker_addr)
            assert runtime["ackThreadPoolQueueCapacity"] == "100000"
            assert int(runtime["ackThreadPoolQueueSize"]) >= 0
            await consumer.ack_all(held[2:])
            await wait_for((0, 0.0))
        finally:
            await admin.shutdown()
            await consumer.shutdown()
    asyncio.run(scenario())
