# The Prometheus endpoint scraped by a real Prometheus server, checked with PromQL.
"""Goal: metricsExporterType=PROM serves Java 5.x's metric families with Java's names and
labels (the same as a real Java 5.3.3 broker's endpoint serves after the same traffic, the
timer's and POP's included; the comparison fails on a family missing or relabelled), their
figures exact, apache/rocketmq-exporter's names under metricsExporterCompat=exporter, and the
shipped Grafana dashboard holds to Grafana's schema and queries only what is served; a real
Prometheus (Debian's package; .ci/run installs it) scraping the endpoint computes with rate()
the message rate the test produced and runs every dashboard query; half messages outlive a
restart; a scrape reads no consume-queue file of a queue that has no lag and opens no store
directory (issue #28 item 5: the max offsets come from the dispatcher's queue offset table).

Method: one `pybroker standalone` with the endpoint on a free port, a `prometheus` process
scraping it every second (config and TSDB in a temp dir). The metrics traffic
(pybroker/_testbase/metrics_traffic.py: sends, a lite pull, a DLQ send, a committed, a
rolled-back and an open transaction) runs against the broker and the scrape is compared with
tests/golden/java-5.3.3/metrics.txt, the endpoint of a Java 5.3.3 broker after the same
traffic (tools/java_capture/capture_metrics.py). A paced producer's send log gives the rate
Prometheus must compute. The dashboard is checked with grafana-foundation-sdk's models
(generated from Grafana's dashboard schema; no Grafana server is packaged for Debian or
PyPI). Missing `prometheus` skips locally and fails under PYBROKER_REQUIRE_PEERS=1. What a
scrape touches is read from outside the supervisor: the consume-queue files in its
/proc/<pid>/maps and inotify's open events on the store's consume-queue directories (the
scrubber, a supervisor thread that maps every queue in its pass, is off in this broker).
"""
import asyncio
import ctypes
import enum
import json
import os
import pathlib
import re
import shutil
import struct
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from pybroker._testbase import metrics_traffic
from pybroker._testbase.cluster import StandaloneBroker, free_port
from pybroker.client.message import Message
from pybroker.client.producer import Producer
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.protocol.properties import encode_properties
from pybroker.remoting.client import SyncRemotingClient
from tests import peers
from tests.client.scenario import create_topic

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN_METRICS = ROOT / "tests" / "golden" / "java-5.3.3" / "metrics.txt"
DASHBOARD = ROOT / "docs" / "grafana" / "pybroker.json"
TOPIC = "PromRateTopic"
SEND_SECONDS = 16
RATE_PER_S = 25
WINDOW_S = 10


def _get(url: str, timeout_s: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return response.read()


def _wait(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = predicate()
        except OSError:
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


@pytest.fixture(scope="module")
def metrics_port():
    return free_port()


@pytest.fixture(scope="module")
def broker(tmp_path_factory, metrics_port):
    # The scrubber (a thread of the supervisor) maps every consume queue in its pass: off, so
    # the supervisor's maps show what its scrapes read.
    overrides = {"metricsExporterType": "PROM", "metricsPromExporterPort": str(metrics_port),
                 "metricsLabel": "env:test", "metricsExporterCompat": "exporter",
                 "storeScrubRateMegabytesPerSecond": "0"}
    with StandaloneBroker(tmp_path_factory.mktemp("pybroker"), overrides) as running:
        yield running


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory, broker, metrics_port):
    binary = shutil.which("prometheus")
    if binary is None:
        peers.unavailable("the `prometheus` server is not installed (apt-get install "
                          "prometheus)")
    work = tmp_path_factory.mktemp("prometheus")
    port = free_port()
    (work / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: pybroker\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{metrics_port}']\n")
    log = open(work / "prometheus.log", "wb")
    process = subprocess.Popen(
        [binary, f"--config.file={work / 'prometheus.yml'}",
         f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT)
    log.close()
    try:
        _wait(lambda: _get(f"http://127.0.0.1:{port}/-/ready").startswith(b"Prometheus"),
              60, "prometheus to be ready")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _query(prometheus: str, expression: str, at: float | None = None) -> list:
    arguments = {"query": expression, **({"time": f"{at:.3f}"} if at is not None else {})}
    body = json.loads(_get(f"{prometheus}/api/v1/query?" + urllib.parse.urlencode(arguments)))
    assert body["status"] == "success", body
    return body["data"]["result"]


def _send_paced(broker) -> list[tuple[float, int]]:
    """Send RATE_PER_S messages a second for SEND_SECONDS; returns (wall time, count) after
    each send."""
    async def run():
        await create_topic(broker, TOPIC, 4)
        producer = Producer("prom_rate_producer", broker.namesrv_addr)
        await producer.start()
        log, start = [], time.monotonic()
        try:
            for index in range(SEND_SECONDS * RATE_PER_S):
                delay = start + index / RATE_PER_S - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await producer.send(Message(TOPIC, b"p" * 200))
                log.append((time.time(), index + 1))
        finally:
            await producer.shutdown()
        return log
    return asyncio.run(run())


def _families(text: str) -> dict[str, dict[tuple, float]]:
    """{sample name: {sorted label items: value}} of an exposition text."""
    found: dict[str, dict[tuple, float]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = re.match(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)', line)
        assert match, line
        labels = tuple(sorted(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                         match.group(2) or "")))
        found.setdefault(match.group(1), {})[labels] = float(match.group(3))
    return found


def _value(families, name: str, **labels) -> float:
    matches = [value for key, value in families.get(name, {}).items()
               if set(labels.items()) <= set(key)]
    assert len(matches) == 1, (name, labels, families.get(name))
    return matches[0]


# Java families pybroker does not serve (docs/statistics.md says why) and the exporter's own.
NOT_SERVED = ("rocketmq_processor_watermark", "otel_scope_info", "target_info")


@pytest.fixture(scope="module")
def scraped(broker, metrics_port):
    """The endpoint after the metrics traffic, scraped while its consumer is online."""
    async def scrape():
        deadline = time.monotonic() + 30
        while True:        # the committed offsets reach the metadata service every 5 s
            text = _get(f"http://127.0.0.1:{metrics_port}/metrics").decode()
            families = _families(text)
            if "rocketmq_half_messages" in families and families.get(
                    "rocketmq_consumer_lag_messages") and families.get(
                    "rocketmq_send_to_dlq_messages_total"):
                return text
            assert time.monotonic() < deadline, text[-3000:]
            await asyncio.sleep(0.5)
    return asyncio.run(metrics_traffic.traffic(broker.namesrv_addr, while_online=scrape))


def _unlike_java(ours_text: str, java_text: str) -> list[str]:
    """Each of Java's families (its samples: name_bucket, name_count ... each) the scrape
    lacks, labels otherwise, or serves without metricsLabel's pair; [] when none."""
    ours, java = _families(ours_text), _families(java_text)
    problems = []
    for name, series in sorted(java.items()):
        if name.startswith(NOT_SERVED):
            continue
        if name not in ours:
            problems.append(f"{name} is served by Java 5.3.3, not by pybroker")
            continue
        java_labels = {key for labels in series for key, _ in labels} - {"otel_scope_name"}
        our_labels = {key for labels in ours[name] for key, _ in labels} - {"env"}
        if our_labels != java_labels:
            problems.append(f"{name}: labels {sorted(our_labels)}, Java's {sorted(java_labels)}")
        # metricsLabel's pairs go on every series of Java's families, as Java's LABEL_MAP
        if not all(("env", "test") in labels for labels in ours[name]):
            problems.append(f"{name}: a series without metricsLabel's env=test")
    return problems


def test_families_and_labels_are_java_5_3_3s(scraped):
    assert _unlike_java(scraped, GOLDEN_METRICS.read_text(encoding="utf-8")) == []


def test_the_comparison_sees_a_family_missing_or_mislabeled(scraped):
    """The comparison above fails for a scrape a family short, or with a label renamed or
    dropped (the scrape edited, the golden as captured)."""
    java = GOLDEN_METRICS.read_text(encoding="utf-8")
    lines = scraped.splitlines()
    missing = "\n".join(line for line in lines
                        if not line.startswith("rocketmq_timer_enqueue_latency_milliseconds"))
    assert _unlike_java(missing, java) == [
        "rocketmq_timer_enqueue_latency_milliseconds is served by Java 5.3.3, not by pybroker"]
    renamed = scraped.replace('timer_bound_s="', 'timer_bound="')
    assert [problem.split(":")[0] for problem in _unlike_java(renamed, java)] == [
        "rocketmq_timer_message_snapshot"]
    dropped = "\n".join(re.sub(r',?queue_id="\d+"', "", line)
                        if line.startswith("rocketmq_pop_revive_lag_milliseconds{") else line
                        for line in lines)
    assert [problem.split(":")[0] for problem in _unlike_java(dropped, java)] == [
        "rocketmq_pop_revive_lag_milliseconds"]
    unlabelled = "\n".join(line.replace('env="test",', "").replace(',env="test"', "")
                           if line.startswith("rocketmq_pop_offset_buffer_size") else line
                           for line in lines)
    assert _unlike_java(unlabelled, java) == [
        "rocketmq_pop_offset_buffer_size: a series without metricsLabel's env=test"]


def test_timer_and_pop_families_hold_the_brokers_figures(scraped):
    """An idle timer and a POP with no traffic: nothing parked, nothing behind, no buffer
    (pybroker has none), one lag and latency series per revive queue; Java's bounds of the
    timer snapshot and the buffer-scan histogram."""
    families = _families(scraped)
    for name in ("rocketmq_timer_enqueue_lag", "rocketmq_timer_dequeue_lag",
                 "rocketmq_timer_enqueue_latency_milliseconds",
                 "rocketmq_pop_checkpoint_buffer_size", "rocketmq_pop_offset_buffer_size",
                 "rocketmq_pop_buffer_scan_time_consume_milliseconds_count"):
        assert _value(families, name) == 0, name
    assert _value(families, "rocketmq_timer_dequeue_latency_milliseconds") <= 2
    assert sorted(int(dict(key)["timer_bound_s"])
                  for key in families["rocketmq_timer_message_snapshot"]) == \
        [5, 60, 300, 900, 3600, 14400, 28800, 86400]
    assert set(families["rocketmq_timer_message_snapshot"].values()) == {0}
    assert sorted(dict(key)["le"] for key in
                  families["rocketmq_pop_buffer_scan_time_consume_milliseconds_bucket"]) == \
        sorted(["1", "10", "100", "1000", "2000", "3000", "+Inf"])
    revive_queues = {dict(key)["queue_id"]
                     for key in families["rocketmq_pop_revive_lag_milliseconds"]}
    assert revive_queues == {str(queue) for queue in range(8)}      # reviveQueueNum
    assert set(families["rocketmq_pop_revive_latency_milliseconds"].values()) == {0}


def test_the_traffic_figures_are_exact(scraped):
    families = _families(scraped)
    traffic = metrics_traffic
    assert _value(families, "rocketmq_messages_in_total", topic=traffic.TOPIC,
                  message_type="normal", is_system="false") == traffic.SENT
    assert _value(families, "rocketmq_message_size_count", topic=traffic.TOPIC) == traffic.SENT
    assert _value(families, "rocketmq_commit_messages_total", topic=traffic.TX_TOPIC) == 1
    assert _value(families, "rocketmq_rollback_messages_total", topic=traffic.TX_TOPIC) == 1
    assert _value(families, "rocketmq_half_messages", topic=traffic.TX_TOPIC) == 1
    assert _value(families, "rocketmq_finish_message_latency_milliseconds_count",
                  topic=traffic.TX_TOPIC) == 1
    assert _value(families, "rocketmq_send_to_dlq_messages_total",
                  consumer_group=traffic.DLQ_GROUP, topic=traffic.DLQ_TOPIC) == 1
    sends = sum(value for key, value in families["rocketmq_rpc_latency_milliseconds_count"].items()
                if ("request_code", "send_message_v2") in key)
    assert sends >= traffic.SENT
    lag = _value(families, "rocketmq_consumer_lag_messages", consumer_group=traffic.PULL_GROUP,
                 topic=traffic.TOPIC)
    assert 0 < lag <= traffic.SENT - traffic.PULLED
    # the exporter's names, from the same sources
    assert _value(families, "rocketmq_producer_offset", topic=traffic.TOPIC) == traffic.SENT
    assert _value(families, "rocketmq_group_diff", group=traffic.PULL_GROUP,
                  topic=traffic.TOPIC) == lag
    assert _value(families, "rocketmq_consumer_offset", group=traffic.PULL_GROUP,
                  topic=traffic.TOPIC) == traffic.SENT - lag


def test_storage_size_is_the_file_systems_used_bytes(broker, scraped):
    # Java's storage size: used bytes of the store's file system (statvfs, no walk of the
    # store); other processes write to it meanwhile, hence the margin.
    size = _value(_families(scraped), "rocketmq_storage_size_bytes")
    disk = os.statvfs(broker.store_dir)
    used = (disk.f_blocks - disk.f_bfree) * disk.f_frsize
    assert abs(size - used) < (1 << 30), (size, used)


MANY_TOPIC, MANY_GROUP = "PromManyQueuesTopic", "prom_many_queues_group"
MANY_QUEUES = 256
LAGGING = (3, 100, 255)            # queues the group committed 0 on (1 message behind)
_IN_OPEN = 0x20


def _mapped_queues(pid: int, topic: str) -> set[int]:
    """Queue ids of ``topic`` whose consume-queue files process ``pid`` has mapped."""
    marker = f"{os.sep}consumequeue{os.sep}{topic}{os.sep}"
    found = set()
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            at = line.find(marker)
            if at >= 0:
                found.add(int(line[at + len(marker):].split(os.sep)[0]))
    return found


class _OpenWatch:
    """inotify IN_OPEN on directories and files: opens of each (a listing or a walk of a
    directory) and of the files in a directory, by any process."""

    def __init__(self, directories):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        self.paths = {}
        for directory in directories:
            watch = self.libc.inotify_add_watch(self.fd, os.fsencode(directory), _IN_OPEN)
            assert watch >= 0, (directory, os.strerror(ctypes.get_errno()))
            self.paths[watch] = directory

    def opened(self) -> list[str]:
        events = []
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return events
            at = 0
            while at < len(data):
                watch, _mask, _cookie, length = struct.unpack_from("iIII", data, at)
                name = data[at + 16:at + 16 + length].rstrip(b"\0").decode()
                events.append(os.path.join(self.paths.get(watch, "?"), name))
                at += 16 + length

    def close(self) -> None:
        os.close(self.fd)


def _request(client, code: int, fields: dict, body: bytes | None = None):
    response = client.invoke(create_request(code, fields, body), 10_000)
    assert response.code == ResponseCode.SUCCESS, (code, response.code, response.remark)
    return response


def test_a_scrape_reads_no_queue_without_lag_and_opens_no_store_directory(broker, metrics_port):
    """One message on each of 256 queues, a group that committed all of them but three: the
    lag figures are exact, the supervisor maps the consume-queue files of the three lagging
    queues only (their lag latency needs the stored time of the message at the committed
    offset), and neither a scrape nor a brokerStatus opens another queue's directory or file,
    the consume-queue root or the timer wheel (with the max offsets read from the queues'
    files, every queue of the topic was opened and mapped; with a timer wheel mapped per
    brokerStatus, it was opened by each: both checked once)."""
    asyncio.run(create_topic(broker, MANY_TOPIC, MANY_QUEUES))
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        for queue_id in range(MANY_QUEUES):
            _request(client, RequestCode.SEND_MESSAGE_V2, {
                "a": "prom_many_producer", "b": MANY_TOPIC, "c": "TBW102",
                "d": str(MANY_QUEUES), "e": str(queue_id), "f": "0",
                "g": str(int(time.time() * 1000)), "h": "0",
                "i": encode_properties({"WAIT": "true"}),
                "j": "0", "k": "false", "m": "false"}, b"q%03d" % queue_id)
        for queue_id in range(MANY_QUEUES):
            broker.wait_max_offset(MANY_TOPIC, queue_id, 1)
        # The first scrape and brokerStatus of a generation map the timer wheel; later ones
        # reuse that map.
        _get(f"http://127.0.0.1:{metrics_port}/metrics")
        _request(client, RequestCode.GET_BROKER_RUNTIME_INFO, {})
    topic_dir = os.path.join(broker.store_dir, "consumequeue", MANY_TOPIC)
    wheel = os.path.join(broker.store_dir, "timerwheel")
    assert os.path.exists(wheel)
    watch = _OpenWatch([wheel, os.path.dirname(topic_dir), topic_dir] + [
        os.path.join(topic_dir, str(queue_id)) for queue_id in range(MANY_QUEUES)
        if queue_id not in LAGGING])
    try:
        with SyncRemotingClient() as client:
            client.connect(broker.broker_addr)
            for queue_id in range(MANY_QUEUES):
                _request(client, RequestCode.UPDATE_CONSUMER_OFFSET, {
                    "consumerGroup": MANY_GROUP, "topic": MANY_TOPIC, "queueId": str(queue_id),
                    "commitOffset": "0" if queue_id in LAGGING else "1"})

        def lag_known():
            families = _families(_get(f"http://127.0.0.1:{metrics_port}/metrics").decode())
            series = families.get("rocketmq_group_diff", {})
            if any(("group", MANY_GROUP) in key for key in series):
                return families
            return None
        _wait(lag_known, 30, "the committed offsets in the scrape")
        with SyncRemotingClient() as client:
            client.connect(broker.broker_addr)
            for _ in range(3):
                families = _families(_get(f"http://127.0.0.1:{metrics_port}/metrics").decode())
                _request(client, RequestCode.GET_BROKER_RUNTIME_INFO, {})
        opened = watch.opened()
    finally:
        watch.close()
    assert _value(families, "rocketmq_consumer_lag_messages", consumer_group=MANY_GROUP,
                  topic=MANY_TOPIC) == len(LAGGING)
    assert _value(families, "rocketmq_consumer_lag_latency_milliseconds",
                  consumer_group=MANY_GROUP, topic=MANY_TOPIC) > 0
    assert _value(families, "rocketmq_group_diff", group=MANY_GROUP,
                  topic=MANY_TOPIC) == len(LAGGING)
    assert _value(families, "rocketmq_producer_offset", topic=MANY_TOPIC) == MANY_QUEUES
    assert _value(families, "rocketmq_consumer_offset", group=MANY_GROUP,
                  topic=MANY_TOPIC) == MANY_QUEUES - len(LAGGING)
    # The lagging queues' directories are opened (listed) under the topic's directory.
    allowed = {os.path.join(topic_dir, str(queue_id)) for queue_id in LAGGING}
    unexpected = [path for path in opened if path not in allowed]
    assert unexpected == [], unexpected[:10]
    mapped = _mapped_queues(broker.process.pid, MANY_TOPIC)
    assert mapped <= set(LAGGING), sorted(mapped)[:20]


# What the community dashboards of apache/rocketmq-exporter query (its
# rocketmq_exporter_overview.json and rocketmq_exporter.json), but the rocketmq_client_*
# figures the exporter asks each client for (not served: docs/statistics.md).
EXPORTER_DASHBOARD_NAMES = (
    "rocketmq_broker_qps", "rocketmq_broker_tps", "rocketmq_consumer_message_size",
    "rocketmq_consumer_offset", "rocketmq_consumer_tps", "rocketmq_group_diff",
    "rocketmq_group_get_latency_by_storetime", "rocketmq_producer_message_size",
    "rocketmq_producer_offset", "rocketmq_producer_tps", "rocketmq_topic_retry_offset",
    "rocketmq_brokeruntime_commitlog_disk_ratio", "rocketmq_brokeruntime_commitlog_maxoffset",
    "rocketmq_brokeruntime_commitlog_minoffset", "rocketmq_brokeruntime_commitlogdir_capacity_free",
    "rocketmq_brokeruntime_commitlogdir_capacity_total",
    "rocketmq_brokeruntime_consumequeue_disk_ratio", "rocketmq_brokeruntime_dispatch_behind_bytes",
    "rocketmq_brokeruntime_earliest_message_timestamp",
    "rocketmq_brokeruntime_msg_gettotal_today_now", "rocketmq_brokeruntime_msg_put_total_today_now",
    "rocketmq_brokeruntime_msg_gettotal_todaymorning",
    "rocketmq_brokeruntime_msg_puttotal_todaymorning",
    "rocketmq_brokeruntime_msg_gettotal_yesterdaymorning",
    "rocketmq_brokeruntime_msg_puttotal_yesterdaymorning", "rocketmq_brokeruntime_pmdt_0ms",
    "rocketmq_brokeruntime_pmdt_0to10ms", "rocketmq_brokeruntime_pmdt_10stomore",
    "rocketmq_brokeruntime_put_message_average_size",
    "rocketmq_brokeruntime_put_message_size_total",
    "rocketmq_brokeruntime_send_threadpoolqueue_headwait_timemills",
    "rocketmq_brokeruntime_pull_threadpoolqueue_headwait_timemills",
    "rocketmq_brokeruntime_query_threadpoolqueue_headwait_timemills")


def test_exporter_compat_serves_the_community_dashboards_names(scraped):
    families = _families(scraped)
    missing = [name for name in EXPORTER_DASHBOARD_NAMES if name not in families]
    assert missing == []
    (labels,) = families["rocketmq_brokeruntime_commitlog_maxoffset"]
    assert {key for key, _ in labels} == {"cluster", "brokerIP", "brokerHost", "des",
                                          "boottime", "broker_version"}


def _to_json(value):
    """grafana-foundation-sdk models to plain JSON (its to_json is one level deep)."""
    if hasattr(value, "to_json"):
        return _to_json(value.to_json())
    if isinstance(value, dict):
        return {key: _to_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_to_json(item) for item in value]
    return value.value if isinstance(value, enum.Enum) else value


def _kept(written, read, path: str = "") -> list[str]:
    """Where what the file says did not survive the schema's model (dropped or changed)."""
    if isinstance(written, dict):
        if not isinstance(read, dict):
            return [path]
        return [problem for key, item in written.items()
                for problem in ([f"{path}.{key} dropped"] if key not in read
                                else _kept(item, read[key], f"{path}.{key}"))]
    if isinstance(written, list):
        if not isinstance(read, list) or len(read) != len(written):
            return [path]
        return [problem for index, (a, b) in enumerate(zip(written, read, strict=True))
                for problem in _kept(a, b, f"{path}[{index}]")]
    return [] if written == read else [f"{path}: {written!r} read as {read!r}"]


def test_dashboard_holds_to_grafanas_schema_and_queries_served_families(scraped):
    try:
        from grafana_foundation_sdk.models import dashboard as schema
        from grafana_foundation_sdk.models import prometheus as prometheus_model
        from grafana_foundation_sdk.models import timeseries
    except ImportError:
        peers.unavailable("grafana-foundation-sdk is not installed (.ci/run installs it)")
    document = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert _kept(document, _to_json(schema.Dashboard.from_json(document))) == []
    # Declared families (a family with no series yet still has its TYPE line) and samples.
    served = set(_families(scraped)) | {
        name + suffix for name in re.findall(r"^# TYPE (\S+)", scraped, re.MULTILINE)
        for suffix in ("", "_total", "_bucket", "_count", "_sum")}
    queries = []
    for panel in document["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["type"] == "timeseries"
        assert _kept(panel["options"], _to_json(timeseries.Options.from_json(
            panel["options"]))) == []
        for target in panel["targets"]:
            assert _kept(target, _to_json(prometheus_model.Dataquery.from_json(target))) == []
            queries.append(target["expr"])
            for name in re.findall(r"\b((?:rocketmq|pybroker)_[a-z0-9_]+)\{", target["expr"]):
                assert name in served, (name, target["expr"])
    assert len(queries) >= 20


def test_every_dashboard_query_runs_on_prometheus(scraped, prometheus):
    document = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    _wait(lambda: _query(prometheus, "rocketmq_half_messages"), 30, "a scrape of the traffic")
    for panel in document["panels"]:
        for target in panel.get("targets", []):
            expression = target["expr"].replace("$cluster", ".*").replace("$broker", ".*")
            _query(prometheus, expression)        # asserts status success
    for variable in document["templating"]["list"][1:]:
        query = variable["query"]["query"].replace("$cluster", ".*")
        metric = re.match(r"label_values\((\w+)", query).group(1)
        assert _query(prometheus, metric), query


def test_prometheus_rate_matches_what_was_sent(broker, prometheus):
    sent = _send_paced(broker)
    total = sent[-1][1]
    series = f'rocketmq_messages_in_total{{topic="{TOPIC}",message_type="normal"}}'
    _wait(lambda: [r for r in _query(prometheus, series) if float(r["value"][1]) == total],
          30, f"Prometheus to scrape {total} messages")
    # A moment well inside the run: the rate over the WINDOW_S before it, by our own log.
    moment = sent[0][0] + (SEND_SECONDS + WINDOW_S) / 2
    before = max(count for stamp, count in sent if stamp <= moment - WINDOW_S)
    at_moment = max(count for stamp, count in sent if stamp <= moment)
    expected = (at_moment - before) / WINDOW_S
    (result,) = _query(prometheus, f"rate({series}[{WINDOW_S}s])", at=moment)
    assert result["metric"]["node_id"] == "broker-a"
    assert float(result["value"][1]) == pytest.approx(expected, rel=0.25)
    (size,) = _query(prometheus, f'sum(rocketmq_throughput_in_total{{topic="{TOPIC}"}})')
    assert float(size["value"][1]) > 200 * total


def test_half_messages_outlive_a_restart(broker, metrics_port, scraped):
    """config/transactionMetrics (Java's file) carries the open transaction across a clean
    stop; runs last in this module (it restarts the module's broker)."""
    broker.stop()
    assert json.loads((pathlib.Path(broker.store_dir) / "config" / "transactionMetrics")
                      .read_text())["transactionCount"][metrics_traffic.TX_TOPIC]["count"] == 1
    broker.start()
    families = _wait(lambda: _families(_get(f"http://127.0.0.1:{metrics_port}/metrics")
                                       .decode()), 30, "the endpoint after the restart")
    assert _value(families, "rocketmq_half_messages", topic=metrics_traffic.TX_TOPIC) == 1
