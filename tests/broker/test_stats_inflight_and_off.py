# Inflight messages (Java's pull offset minus committed offset) and the instruments' off switch.
"""Goal: rocketmq_consumer_inflight_messages counts what pulls handed out and the group has not
committed, as Java 5.x's ConsumerLagCalculator does (pull offset - committed offset); and with
statsInstrumentsEnable=false nothing is recorded and brokerStatus / the metrics endpoint /
statsAll say so instead of showing untouched zeros as figures.

Method: a real `pybroker standalone` per case, raw remoting frames (SEND_MESSAGE_V2,
PULL_MESSAGE without the commit flag, UPDATE_CONSUMER_OFFSET, GET_BROKER_RUNTIME_INFO,
VIEW_BROKER_STATS_DATA) on 127.0.0.1, the endpoint scraped over HTTP and parsed with
prometheus_client's parser; the instrument region file read directly for the off case. Every
wait is on a condition with a deadline.
"""
import asyncio
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pybroker._testbase.cluster import StandaloneBroker, free_port
from pybroker.protocol.bodies import decode_kv_table
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.stats.region import StatsRegion
from pybroker.store import paths
from tests.client.scenario import create_topic
from tests.ha_support import client_for, pull, records_of, send, wait_for

pytestmark = [pytest.mark.timeout(180)]

TOPIC = "InflightTopic"
GROUP = "inflight_group"
TIMEOUT_MS = 5000


def _metrics(port: int) -> dict[str, list]:
    """{family name: [(labels, value), ...]} of one scrape."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    families: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            families.setdefault(sample.name, []).append((sample.labels, sample.value))
    return families


def _inflight(port: int) -> float | None:
    for labels, value in _metrics(port).get("rocketmq_consumer_inflight_messages", []):
        if labels.get("topic") == TOPIC and labels.get("consumer_group") == GROUP:
            return value
    return None


def _commit(client, offset: int) -> None:
    update = create_request(RequestCode.UPDATE_CONSUMER_OFFSET,
                            {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0",
                             "commitOffset": str(offset)})
    assert client.invoke(update, TIMEOUT_MS).code == ResponseCode.SUCCESS


def _broker(tmp_path, port: int, **extra: str) -> StandaloneBroker:
    return StandaloneBroker(tmp_path, {"metricsExporterType": "PROM",
                                       "metricsPromExporterPort": str(port), **extra})


def _send(client, count: int) -> None:
    """Send ``count`` messages to queue 0 and wait until the queue holds them (dispatch runs
    after the acknowledgement; a pull before it would find fewer)."""
    for index in range(count):
        answer = send(client, TOPIC, b"inflight-%d" % index, 0, f"k{index}", queues=1)
        assert answer.code == ResponseCode.SUCCESS, answer.remark

    def queue_size() -> int:
        answer = client.invoke(create_request(RequestCode.GET_MAX_OFFSET,
                                              {"topic": TOPIC, "queueId": "0"}), TIMEOUT_MS)
        return int(answer.ext_fields["offset"]) if answer.code == ResponseCode.SUCCESS else -1
    wait_for(lambda: queue_size() == count, 20, f"{count} messages dispatched")


def test_inflight_is_pulled_minus_committed(tmp_path):
    port = free_port()
    with _broker(tmp_path, port) as broker:
        asyncio.run(create_topic(broker, TOPIC, queue_nums=1))
        client = client_for(broker.broker_addr)
        try:
            _send(client, 10)
            _commit(client, 0)
            wait_for(lambda: _inflight(port) == 0, 20, "inflight 0 before any pull")
            first = pull(client, TOPIC, 0, 0, group=GROUP, max_nums=6)
            assert first.code == ResponseCode.SUCCESS and len(records_of(first.body)) == 6
            wait_for(lambda: _inflight(port) == 6, 20, "inflight 6 after pulling 6")
            second = pull(client, TOPIC, 0, 6, group=GROUP, max_nums=32)
            assert len(records_of(second.body)) == 4
            wait_for(lambda: _inflight(port) == 10, 20, "inflight 10 after pulling all 10")
            _commit(client, 4)
            wait_for(lambda: _inflight(port) == 6, 20, "inflight 6 after committing 4")
            _commit(client, 10)
            wait_for(lambda: _inflight(port) == 0, 20, "inflight 0 after committing all")
            # A pull that finds nothing hands nothing out: still 0.
            empty = pull(client, TOPIC, 0, 10, group=GROUP)
            assert empty.code != ResponseCode.SUCCESS
            assert _inflight(port) == 0
        finally:
            client.close()


def _runtime_info(client) -> dict[str, str]:
    answer = client.invoke(create_request(RequestCode.GET_BROKER_RUNTIME_INFO), TIMEOUT_MS)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return decode_kv_table(answer.body)


def test_instruments_off_record_nothing_and_say_so(tmp_path):
    port = free_port()
    with _broker(tmp_path, port, statsInstrumentsEnable="false") as broker:
        asyncio.run(create_topic(broker, TOPIC, queue_nums=1))
        client = client_for(broker.broker_addr)
        try:
            _send(client, 20)
            _commit(client, 0)
            assert len(records_of(pull(client, TOPIC, 0, 0, group=GROUP).body)) == 20
            info = _runtime_info(client)
            assert info["statsInstrumentsEnable"] == "false"
            for key in ("putTps", "getTransferedTps", "getTotalTps"):
                assert info[key] == "NaN NaN NaN", (key, info[key])
            for key in ("msgPutTotalTodayNow", "putMessageTimesTotal", "putMessageDistributeTime",
                        "getMessageTimesTotalFound", "sendThreadPoolQueueSize", "putLatency99"):
                assert key not in info, (key, info[key])
            # What is not read from the instruments is still there.
            wait_for(lambda: _runtime_info(client)["dispatchBehindBytes"] == "0", 20,
                     "dispatch to catch up")
            assert int(info["commitLogMaxOffset"]) > 0 and "commitLogDiskRatio" in info
            view = client.invoke(create_request(RequestCode.VIEW_BROKER_STATS_DATA,
                                                {"statsName": "TOPIC_PUT_NUMS",
                                                 "statsKey": TOPIC}), TIMEOUT_MS)
            assert view.code == ResponseCode.SYSTEM_ERROR
            assert "statsInstrumentsEnable=false" in view.remark
            metrics = _metrics(port)
            assert metrics["pybroker_stats_instruments_enabled"][0][1] == 0
            for name in ("rocketmq_messages_in_total", "rocketmq_message_size_count",
                         "rocketmq_consumer_inflight_messages",
                         "pybroker_put_latency_seconds_count"):
                assert name not in metrics, name
            assert "rocketmq_consumer_lag_messages" in metrics      # metadata, not counters
            # Start-up said so once, naming what reads empty (consumeTps's 0.0 looks measured).
            log = broker._log_text()
            assert log.count("statsInstrumentsEnable=false: no statistics are recorded") == 1
            assert "consumeTps reads 0.0" in log
            region = StatsRegion.attach(paths.stats_region_path(broker.store_dir))
            try:
                assert not region.enabled
                snapshot = region.snapshot()
                assert int(snapshot.counters.sum()) == 0
                assert int(snapshot.histograms.sum()) == 0
                assert list(snapshot.entries()) == []
            finally:
                region.close()
        finally:
            client.close()


def test_instruments_on_by_default_are_recorded(tmp_path):
    """The same load with the default setting moves the figures the off case leaves out (so
    the off test's zeros are the switch, not a load that recorded nothing)."""
    port = free_port()
    with _broker(tmp_path, port) as broker:
        asyncio.run(create_topic(broker, TOPIC, queue_nums=1))
        client = client_for(broker.broker_addr)
        try:
            _send(client, 20)
            assert len(records_of(pull(client, TOPIC, 0, 0, group=GROUP).body)) == 20
            wait_for(lambda: _runtime_info(client).get("msgPutTotalTodayNow") == "20", 20,
                     "msgPutTotalTodayNow 20")
            info = _runtime_info(client)
            assert "statsInstrumentsEnable" not in info and info["putTps"] != "NaN NaN NaN"
            metrics = _metrics(port)
            assert metrics["pybroker_stats_instruments_enabled"][0][1] == 1
            assert "rocketmq_messages_in_total" in metrics
            assert "statsInstrumentsEnable=false" not in broker._log_text()
        finally:
            client.close()
