# What a Prometheus scrape and a brokerStatus cost the supervisor on a store with many queues.
"""Starts one ``pybroker standalone`` (metrics endpoint on, scrubber off), fills a store of
``--queues`` queues over ``--commitlog-files`` CommitLog files (several consume-queue files per
queue), commits a group's offsets on every queue (a few left one message behind), then times
``--rounds`` scrapes of /metrics and GET_BROKER_RUNTIME_INFO requests with a send between two
rounds (so the dispatched position moves, as under traffic). Prints per request the median and
largest wall time and the supervisor's mean CPU time (psutil, user + system).

Run it against another tree with that tree's PYTHONPATH (the broker runs the code on the
path): ``PYTHONPATH=/path/to/tree python3 tools/scrape_cost.py``. The figures are those of the
box at that moment: run it on a quiet box for figures worth quoting.
"""
import argparse
import asyncio
import statistics
import tempfile
import time
import urllib.request

import psutil

from pybroker._testbase.cluster import StandaloneBroker, free_port
from pybroker.client.admin import Admin
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.protocol.properties import encode_properties
from pybroker.remoting.client import SyncRemotingClient

TOPIC, GROUP = "ScrapeCostTopic", "scrape_cost_group"
_TIMEOUT_MS = 10_000


def _invoke(client, code: int, fields: dict, body: bytes | None = None):
    response = client.invoke(create_request(code, fields, body), _TIMEOUT_MS)
    assert response.code == ResponseCode.SUCCESS, (code, response.code, response.remark)
    return response


def _send(client, queues: int, queue_id: int, body: bytes) -> None:
    _invoke(client, RequestCode.SEND_MESSAGE_V2, {
        "a": "scrape_cost_producer", "b": TOPIC, "c": "TBW102", "d": str(queues),
        "e": str(queue_id), "f": "0", "g": str(int(time.time() * 1000)), "h": "0",
        "i": encode_properties({"WAIT": "true"}), "j": "0", "k": "false", "m": "false"}, body)


def _fill(broker, queues: int, per_queue: int, body: bytes) -> None:
    async def create():
        async with Admin(broker.namesrv_addr) as admin:
            await admin.create_topic(TOPIC, queues, broker_addr=broker.broker_addr)
    asyncio.run(create())
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        for _ in range(per_queue):
            for queue_id in range(queues):
                _send(client, queues, queue_id, body)
    for queue_id in range(queues):
        broker.wait_max_offset(TOPIC, queue_id, per_queue)
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        for queue_id in range(queues):
            behind = 1 if queue_id % 100 == 0 else 0
            _invoke(client, RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue_id),
                "commitOffset": str(per_queue - behind)})


def _scrape(port: int) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as response:
        return response.read()


def _timed(supervisor: psutil.Process, action) -> tuple[float, float]:
    cpu = supervisor.cpu_times()
    start = time.perf_counter()
    action()
    wall = time.perf_counter() - start
    after = supervisor.cpu_times()
    return wall, (after.user + after.system) - (cpu.user + cpu.system)


def _summary(name: str, samples: list[tuple[float, float]]) -> str:
    walls = [wall * 1000 for wall, _ in samples]
    cpus = [cpu * 1000 for _, cpu in samples]
    # CPU times tick in 10 ms: the mean over every request, not a median of ticks.
    return (f"{name}: wall median {statistics.median(walls):.1f} ms (max {max(walls):.1f}), "
            f"supervisor CPU mean {statistics.fmean(cpus):.1f} ms over {len(samples)} "
            f"requests")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--commitlog-files", type=int, default=50)
    parser.add_argument("--per-queue", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=40)
    arguments = parser.parse_args()
    messages = arguments.queues * arguments.per_queue
    body = b"s" * 1000
    commitlog_bytes = max(messages * (len(body) + 200) // arguments.commitlog_files, 4096)
    metrics_port = free_port()
    overrides = {"metricsExporterType": "PROM", "metricsPromExporterPort": str(metrics_port),
                 "storeScrubRateMegabytesPerSecond": "0",
                 "mappedFileSizeCommitLog": str(commitlog_bytes),
                 # A few units a file: every queue spans several consume-queue files.
                 "mappedFileSizeConsumeQueue": str(20 * max(arguments.per_queue // 4, 1))}
    with tempfile.TemporaryDirectory(prefix="scrape-cost-") as work, \
            StandaloneBroker(work, overrides) as broker:
        _fill(broker, arguments.queues, arguments.per_queue, body)
        supervisor = psutil.Process(broker.process.pid)
        deadline = time.monotonic() + 30
        while GROUP.encode() not in _scrape(metrics_port):
            assert time.monotonic() < deadline, "the committed offsets never reached a scrape"
            time.sleep(0.5)
        scrapes, statuses = [], []
        with SyncRemotingClient() as client:
            client.connect(broker.broker_addr)
            for index in range(arguments.rounds):
                _send(client, arguments.queues, index % arguments.queues, body)
                scrapes.append(_timed(supervisor, lambda: _scrape(metrics_port)))
                statuses.append(_timed(supervisor, lambda: _invoke(
                    client, RequestCode.GET_BROKER_RUNTIME_INFO, {})))
        print(f"{arguments.queues} queues, {messages} messages, CommitLog files of "
              f"{commitlog_bytes} bytes")
        print(_summary("scrape /metrics", scrapes))
        print(_summary("GET_BROKER_RUNTIME_INFO", statuses))


if __name__ == "__main__":
    main()
