# The Prometheus endpoint scraped by a real Prometheus server, checked with PromQL.
"""Goal: metricsExporterType=PROM serves Java 5.x's metric names and labels from the shared
counters, and a real Prometheus (Debian's package; .ci/run installs it) scraping the endpoint
computes with rate() the message rate the test produced; the exact count shows as well.

Method: one `pybroker standalone` with the endpoint on a free port, a `prometheus` process
scraping it every second (config and TSDB in a temp dir), a Python producer sending at a
paced, recorded rate; the test compares Prometheus' rate() at a moment inside the run with the
rate its own send log gives for the same window. Missing `prometheus` skips locally and fails
under PYBROKER_REQUIRE_PEERS=1.
"""
import asyncio
import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from pybroker._testbase.cluster import StandaloneBroker, free_port
from pybroker.client.message import Message
from pybroker.client.producer import Producer
from tests import peers
from tests.client.scenario import create_topic

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

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
    overrides = {"metricsExporterType": "PROM", "metricsPromExporterPort": str(metrics_port),
                 "metricsLabel": "env:test"}
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


def test_endpoint_serves_java_names_and_labels(broker, metrics_port):
    text = _get(f"http://127.0.0.1:{metrics_port}/metrics").decode()
    for name in ("rocketmq_topic_number", "rocketmq_consumer_group_number",
                 "rocketmq_storage_dispatch_behind_bytes", "rocketmq_storage_flush_behind_bytes",
                 "rocketmq_storage_size", "rocketmq_rpc_latency_bucket",
                 "pybroker_group_commit_messages_bucket", "pybroker_process_rss_bytes"):
        assert f"\n{name}{{" in text, name
    assert 'node_type="broker"' in text and 'cluster="DefaultCluster"' in text
    assert 'env="test"' in text
    # Java's storage size: used bytes of the store's file system (statvfs, no walk of the
    # store); other processes write to it meanwhile, hence the margin.
    line = next(line for line in text.splitlines() if line.startswith("rocketmq_storage_size{"))
    disk = os.statvfs(broker.store_dir)
    used = (disk.f_blocks - disk.f_bfree) * disk.f_frsize
    assert abs(float(line.rsplit(" ", 1)[1]) - used) < (1 << 30), (line, used)


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
