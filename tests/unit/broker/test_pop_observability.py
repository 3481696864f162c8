# POP's figures: Java's stats items, consume stats' in-flight, the Prometheus families.
"""Goal: what an operator reads about POP is measured and means what Java 5.3.3's figures mean:
GROUP_CK_NUMS / GROUP_ACK_NUMS and BROKER_CK_NUMS / BROKER_ACK_NUMS count check-points and acks
as Java's processors do; GET_CONSUME_STATS's pullOffset - consumerOffset (mqadmin
consumerProgress's #Inflight) is the popped, unacknowledged messages of a queue;
rocketmq_consumer_inflight_messages / ready / lag follow Java's ConsumerLagCalculator for a
POP queue; the revive families count what the revive service read and re-put, and its lag
drops to 0 once it is done.

Method: the POP harness (a real store, metadata, POP table, directory and revive service, one
clock) with a real instrument region whose remoting section the handlers' Recorder writes;
GET_CONSUME_STATS through the admin handler with the directory in its context; the Prometheus
collector registered in a prometheus_client registry, its text parsed back.
"""
import asyncio
import importlib.util
import pathlib

import orjson
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pybroker._fast.stats import StatsCounter as C
from pybroker._fast.stats import StatsKeyKind as K
from pybroker.broker.admin import HANDLERS as ADMIN_HANDLERS
from pybroker.broker.context import MetadataContext, StoreTopicDeleter
from pybroker.protocol import constants, fastjson
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.command import RemotingCommand
from pybroker.stats.prometheus import BrokerCollector
from pybroker.stats.recorder import Recorder
from pybroker.stats.region import StatsRegion
from pybroker.stats.service import StatsService
from pybroker.store.control_block import ControlBlock, remoting_worker, stats_section_count

_spec = importlib.util.spec_from_file_location(
    "pop_harness", pathlib.Path(__file__).with_name("pop_harness.py"))
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)

TOPIC, GROUP = harness.TOPIC, harness.GROUP
KEY = f"{TOPIC}@{GROUP}"


class _Owner:
    """What the collector asks of the supervisor's PopOwner: the directory and the revive."""

    def __init__(self, broker):
        self.directory = broker.directory
        self.revive = broker.revive


@pytest.fixture
def broker(tmp_path):
    broker = harness.PopBroker(tmp_path)
    broker.region = StatsRegion.create(str(tmp_path / "stats"), stats_section_count(1),
                                       harness.START_MS)
    broker.ctx.stats = Recorder(broker.region.writer(remoting_worker(0).stats_section))
    broker.control = ControlBlock(str(tmp_path / "control"), create=True)
    yield broker
    broker.ctx.stats.writer.close()
    broker.control.close()
    broker.region.close()
    broker.close()


def _consume_stats(broker, service) -> dict[int, dict]:
    ctx = MetadataContext(broker.config, broker.store, broker.putter, broker.metadata,
                          broker.ctx.store_host, stats_service=service,
                          topic_deleter=StoreTopicDeleter(broker.store),
                          pop_directory=broker.directory)
    request = RemotingCommand(RequestCode.GET_CONSUME_STATS,
                              int(constants.LanguageCode.JAVA), 479, 1, 0, None,
                              {"consumerGroup": GROUP, "topic": TOPIC}, None)
    response = asyncio.run(ADMIN_HANDLERS[RequestCode.GET_CONSUME_STATS](ctx, broker.channel,
                                                                         request))
    table = fastjson.loads(response.body)["offsetTable"]
    return {orjson.loads(queue)["queueId"]: offsets for queue, offsets in table.items()}


# The consumer families' labels but the common ones, sorted by name (consumer_group, is_retry,
# is_system, topic: Java's ConsumerLagCalculator labels).
LAG_LABELS = (GROUP, "false", "false", TOPIC)


def _metrics(broker, service) -> dict[str, dict[tuple, float]]:
    """{sample name: {label values other than the common ones: value}} of one scrape."""
    registry = CollectorRegistry()
    registry.register(BrokerCollector(broker.config, service, broker.metadata, broker.store,
                                      pop=lambda: _Owner(broker)))
    common = {"cluster", "node_type", "node_id"}
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            labels = tuple(value for name, value in sorted(sample.labels.items())
                           if name not in common)
            samples.setdefault(sample.name, {})[labels] = sample.value
    return samples


def test_pop_figures_count_what_java_counts(broker):
    for index in range(5):
        broker.send(b"m%d" % index, 0)
    region, writer = broker.region, broker.ctx.stats.writer

    async def consume():
        messages = harness.popped(await broker.pop(queue_id=0, max_nums=5))
        assert len(messages) == 5
        for message in messages[:2]:
            assert (await broker.ack(message)).code == 0
        assert (await broker.change_invisible(messages[2], 1000)).code == 0
        return messages
    asyncio.run(consume())
    # One check-point per POP and per change of invisible time; an ack per ack and per change.
    assert writer.get(C.BROKER_CK_NUMS) == 2 and writer.get(C.BROKER_ACK_NUMS) == 3
    keys = region.snapshot().keys()
    assert keys[(K.KEY_GROUP_CK, KEY)].messages == 2
    assert (keys[(K.KEY_GROUP_ACK, KEY)].messages, keys[(K.KEY_GROUP_ACK, KEY)].size_bytes) \
        == (3, 3)                               # acks, ack records stored
    service = StatsService(region, broker.config.broker.broker_cluster_name,
                           clock_ms=broker.clock, control=lambda: broker.control)
    service.tick()
    assert service.view("GROUP_CK_NUMS", KEY) is not None
    assert service.view("GROUP_ACK_NUMS", KEY) is not None
    assert service.view("BROKER_ACK_NUMS", broker.config.broker.broker_cluster_name) is not None

    # Three popped messages are neither acknowledged nor revived: in flight.
    broker.directory.harvest()
    by_queue = _consume_stats(broker, service)
    assert by_queue[0]["consumerOffset"] == 5
    assert by_queue[0]["pullOffset"] - by_queue[0]["consumerOffset"] == 3
    assert by_queue[1]["pullOffset"] == by_queue[1]["consumerOffset"] == 0
    broker.send(b"m5", 0)
    broker.send(b"m6", 0)
    metrics = _metrics(broker, service)
    assert metrics["rocketmq_consumer_inflight_messages"][LAG_LABELS] == 3
    assert metrics["rocketmq_consumer_ready_messages"][LAG_LABELS] == 2
    assert metrics["rocketmq_consumer_lag_messages"][LAG_LABELS] == 2 + 3
    assert metrics["rocketmq_pop_revive_in_message_total"][(GROUP, "PUT_OK", "CK", TOPIC)] == 2
    assert metrics["rocketmq_pop_revive_in_message_total"][(GROUP, "PUT_OK", "ACK", TOPIC)] == 3
    # Unread on the revive log: the changed message's check-point, due at once (invisible
    # 1 s) so stored there directly; the other CK and the acks are parked in the timer. None
    # held in a buffer (there is none: Java's buffer families read 0, no scan timed).
    assert sum(metrics["rocketmq_pop_revive_lag_milliseconds"].values()) == 1
    assert metrics["rocketmq_pop_checkpoint_buffer_size"][()] == 0
    assert metrics["rocketmq_pop_offset_buffer_size"][()] == 0
    assert metrics["rocketmq_pop_buffer_scan_time_consume_milliseconds_count"][()] == 0

    # Past every invisible time the revive service re-puts the three: nothing in flight.
    broker.clock.advance(70_000)
    assert broker.revive_round() == 3
    broker.directory.harvest()
    by_queue = _consume_stats(broker, service)
    assert by_queue[0]["pullOffset"] == by_queue[0]["consumerOffset"] == 5
    metrics = _metrics(broker, service)
    assert metrics["rocketmq_consumer_inflight_messages"][LAG_LABELS] == 0
    assert metrics["rocketmq_consumer_lag_messages"][LAG_LABELS] == 2
    assert metrics["rocketmq_pop_revive_retry_messages_total"][(GROUP, "PUT_OK", TOPIC)] == 3
    read = metrics["rocketmq_pop_revive_out_message_total"]
    assert sum(value for labels, value in read.items() if "CK" in labels) == 2
    assert sum(value for labels, value in read.items() if "ACK" in labels) == 3
    assert set(metrics["rocketmq_pop_revive_lag_milliseconds"].values()) == {0}
    assert set(metrics["rocketmq_pop_revive_latency_milliseconds"].values()) == {0}
    # The retry topic the three went to: its own series, under the topic with is_retry=true
    # (Java's ConsumerLagCalculator for a POP group).
    assert metrics["rocketmq_consumer_lag_messages"][(GROUP, "true", "false", TOPIC)] == 3
