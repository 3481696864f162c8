# The worked example of docs/profiling.md: record, report, compare and the pictures, one command.
"""Regenerate the worked example of docs/profiling.md and its pictures.

Two runs of the same load on a standalone broker (64 MiB CommitLog files), each recorded by
``pybroker prof record`` (a subprocess, as an operator runs it):

* ``async``: flushDiskType ASYNC_FLUSH. A producer offers a fixed rate of 4000-byte messages to
  one queue; after half the run a consumer starts pulling that queue from offset 0 at
  the producer's pace, so it stays that far behind for the rest of the run. The broker runs
  in a memory cgroup limited to ``--memory-mib`` (cgroup v2 ``memory.max`` where the memory
  controller is in the unified hierarchy, else v1 ``memory.limit_in_bytes``; without either
  the run goes unlimited and says so): its page cache counts against the limit, so the kernel
  evicts the older CommitLog pages (posix_fadvise(DONTNEED) cannot: it leaves pages a process
  maps) and the consumer reads them back from the disk.
* ``sync``: the same with flushDiskType SYNC_FLUSH.
* ``pool`` (``--runs``): ASYNC_FLUSH with transientStorePoolEnable.

``--runs async,pool,async,pool --figures-only`` interleaves runs and prints their figures
(send latency, appender faults per MiB, cold pulls) without pages or pictures.

Then ``pybroker prof report`` of both, ``pybroker prof compare async sync``, and PNG pictures
of the charts the doc shows (each chart drawn alone and screenshot by headless Chromium).

Run it under the heavy lock, it takes about two minutes::

    flock /tmp/pybroker-heavy.lock python tools/prof_example.py

Recordings and pages go to ``--work`` (default /tmp/prof-example), pictures to
docs/profiling/.
"""
import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pybroker._testbase.cluster import StandaloneBroker  # noqa: E402
from pybroker.client.message import Message  # noqa: E402
from pybroker.client.producer import Producer  # noqa: E402
from pybroker.prof import charts  # noqa: E402
from pybroker.prof.reading import summary  # noqa: E402
from pybroker.prof.recording import read_recording  # noqa: E402
from pybroker.prof.series import series_of  # noqa: E402
from pybroker.protocol import headers  # noqa: E402
from pybroker.protocol.bodies import MessageQueue  # noqa: E402
from pybroker.protocol.codes import RequestCode, ResponseCode  # noqa: E402
from pybroker.protocol.command import create_request  # noqa: E402
from pybroker.protocol.constants import PullSysFlag  # noqa: E402
from pybroker.remoting.client import SyncRemotingClient  # noqa: E402

TOPIC = "ProfExample"
GROUP = "BehindGroup"
FILE_BYTES = 64 << 20
# An idle broker's processes hold about 76 MiB of anonymous memory and 100 MiB of mapped files
# (measured in a cgroup on this machine); what the limit leaves is all the page cache its
# CommitLog gets, less than the consumer's backlog (half the run: about 100 MiB).
MEMORY_MIB = 192
PICTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                        "profiling")


async def _produce(broker: StandaloneBroker, rate: int, seconds: float, body: bytes) -> int:
    """Offer ``rate`` messages per second (ticks of 10 ms, at most 512 outstanding)."""
    producer = Producer("ProfExampleProducer", broker.namesrv_addr)
    await producer.start()
    queue = MessageQueue(TOPIC, "broker-a", 0)
    outstanding = asyncio.Semaphore(512)
    tasks: set[asyncio.Task] = set()

    async def one() -> None:
        try:
            await producer.send(Message(TOPIC, body), queue=queue)
        finally:
            outstanding.release()
    sent, started = 0, time.monotonic()
    try:
        while (elapsed := time.monotonic() - started) < seconds:
            while sent < rate * elapsed:
                await outstanding.acquire()
                task = asyncio.ensure_future(one())
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                sent += 1
            await asyncio.sleep(0.01)
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await producer.shutdown()
    return sent


def _consume(broker: StandaloneBroker, rate: int, stop: threading.Event) -> None:
    """Pull queue 0 from offset 0 at ``rate`` messages per second, 32 per pull."""
    offset, started, taken = 0, time.monotonic(), 0
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        while not stop.is_set():
            fields = headers.encode_header(headers.PULL_MESSAGE_REQUEST, {
                "consumer_group": GROUP, "topic": TOPIC, "queue_id": 0,
                "queue_offset": offset, "max_msg_nums": 32,
                "sys_flag": int(PullSysFlag.SUBSCRIPTION | PullSysFlag.COMMIT_OFFSET),
                "commit_offset": offset,
                "suspend_timeout_millis": 0, "subscription": "*", "sub_version": 0,
                "expression_type": "TAG"})
            response = client.invoke(create_request(RequestCode.PULL_MESSAGE, fields), 10_000)
            if response.code == ResponseCode.SUCCESS:
                following = int(response.ext_fields["nextBeginOffset"])
                taken += following - offset
                offset = following
            ahead = taken / rate - (time.monotonic() - started)
            stop.wait(max(ahead, 0.005 if response.code != ResponseCode.SUCCESS else 0))


_MODES = {"async": {"flushDiskType": "ASYNC_FLUSH"}, "sync": {"flushDiskType": "SYNC_FLUSH"},
          "pool": {"flushDiskType": "ASYNC_FLUSH", "transientStorePoolEnable": "true"}}
_CGROUP_NAME = "pybroker-prof-example"


def _memory_cgroup(limit_bytes: int) -> tuple[str, str] | None:
    """Create a memory cgroup limited to ``limit_bytes``: (its directory, its procs file), or
    None (printed why) when this machine offers neither cgroup v2 nor v1 memory limits."""
    candidates = []
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        try:
            with open(os.path.join(root, "cgroup.controllers"), encoding="ascii") as names:
                if "memory" in names.read().split():
                    candidates.append((root, "memory.max"))
        except OSError:
            pass
    if os.path.exists("/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        candidates.append(("/sys/fs/cgroup/memory", "memory.limit_in_bytes"))
    for root, limit_file in candidates:
        directory = os.path.join(root, _CGROUP_NAME)
        try:
            if limit_file == "memory.max":
                with open(os.path.join(root, "cgroup.subtree_control"), "w") as control:
                    control.write("+memory")
            os.makedirs(directory, exist_ok=True)
            with open(os.path.join(directory, limit_file), "w", encoding="ascii") as limit:
                limit.write(str(limit_bytes))
            return directory, os.path.join(directory, "cgroup.procs")
        except OSError as exc:
            print(f"memory cgroup under {root}: {exc}", flush=True)
    print("no memory cgroup on this machine: the run is not memory-limited", flush=True)
    return None


def _cgroup_figures(directory: str) -> str:
    """Peak memory and out-of-memory kills of the cgroup (v2 or v1 file names)."""
    def read(name: str) -> str:
        try:
            with open(os.path.join(directory, name), encoding="ascii") as source:
                return source.read()
        except OSError:
            return ""
    peak = read("memory.peak") or read("memory.max_usage_in_bytes") or "0"
    events = dict(line.split() for line in (read("memory.events")
                                            or read("memory.oom_control")).splitlines()
                  if len(line.split()) == 2)
    return f"peak {int(peak) >> 20} MiB, oom kills {events.get('oom_kill', '?')}"


def _remove_cgroup(directory: str) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            os.rmdir(directory)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)      # the last broker process is still exiting


def _run(name: str, mode: str, args: argparse.Namespace) -> str:
    """One recorded run; returns the recording's path."""
    work = os.path.join(args.work, name)
    shutil.rmtree(work, ignore_errors=True)
    recording = os.path.join(args.work, f"{name}.jsonl")
    overrides = dict(_MODES[mode], mappedFileSizeCommitLog=str(FILE_BYTES))
    cgroup = _memory_cgroup(args.memory_mib << 20) if args.memory_mib else None
    broker = StandaloneBroker(work, overrides)
    broker.cgroup_procs = cgroup[1] if cgroup else None
    try:
        with broker:
            asyncio.run(_produce(broker, 10, 0.2, b"w"))          # route and first file
            recorder = subprocess.Popen(
                [sys.executable, "-m", "pybroker", "prof", "record", "--store",
                 broker.store_dir, "-d", str(args.duration + 2), "-o", recording],
                stderr=subprocess.DEVNULL)
            stop = threading.Event()
            consumer = threading.Timer(args.duration * args.behind, _consume,
                                       (broker, args.rate, stop))
            consumer.start()
            try:
                # Random bytes under 4 KiB: the client compresses larger bodies (Java does too).
                sent = asyncio.run(_produce(broker, args.rate, args.duration,
                                            os.urandom(args.body_bytes)))
            finally:
                stop.set()
                consumer.cancel()
                consumer.join()
            recorder.wait(timeout=60)
        limit = ", no memory limit"
        if cgroup:
            limit = f", memory limit {args.memory_mib} MiB ({_cgroup_figures(cgroup[0])})"
    finally:
        if cgroup:
            _remove_cgroup(cgroup[0])
    shutil.rmtree(work, ignore_errors=True)
    print(f"{name}: {mode}, {sent} messages offered{limit}, recording {recording}", flush=True)
    return recording


def _total(series, counter: str) -> float:
    """A counter's total over the run, from its per-second rates."""
    values = series.rates.get(counter)
    if values is None or len(values) < 2:
        return 0.0
    return float((values[1:] * np.diff(series.t_ms) / 1000).sum())


def _figures(name: str, recording: str) -> None:
    """The figures the doc quotes, from a recording."""
    series = series_of(read_recording(recording))
    figures = summary(series)
    appended_mib = max(_total(series, "put_bytes") / (1 << 20), 1e-9)
    appender = series.processes.get("appender")
    faults = 0.0
    if appender is not None and len(series.t_ms) > 1:
        faults = float((appender["minor_faults"][1:] * np.diff(series.t_ms) / 1000).sum())
    print(f"{name}: put {figures['put_messages_per_s']:.0f}/s, send p50/p99 "
          f"{figures.get('send_p50_ms', float('nan')):.2f}/"
          f"{figures.get('send_p99_ms', float('nan')):.2f} ms, appender minor faults/MiB "
          f"{faults / appended_mib:.0f}, cold pulls "
          f"{figures.get('cold_pull_percent', float('nan')):.1f}%, pull read p99 "
          f"{figures.get('pull_read_p99_ms', float('nan')):.2f} ms, commits "
          f"{_total(series, 'commits'):.0f}", flush=True)


def _picture(figure, path: str, height: int) -> None:
    """One chart alone in a page, screenshot by headless Chromium."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium (Debian package chromium) draws the pictures")
    page = path[:-4] + ".html"
    figure.update_layout(width=1100, height=height, margin={"t": 60, "b": 40})
    figure.write_html(page, include_plotlyjs=True, full_html=True,
                      config={"displayModeBar": False})
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                    "--hide-scrollbars", f"--window-size=1120,{height + 20}",
                    "--virtual-time-budget=10000", f"--screenshot={path}", "file://" + page],
                   check=True, capture_output=True, timeout=120)
    os.unlink(page)


def _pictures(first: str, second: str) -> None:
    os.makedirs(PICTURES, exist_ok=True)
    a_rec, b_rec = read_recording(first), read_recording(second)
    a, b = series_of(a_rec), series_of(b_rec)
    runs = [("async", a), ("sync", b)]
    for name, figure, height in (
            ("async-timeline.png", charts.timeline([("", a)]), 720),
            ("async-residency.png", charts.residency_strip(a_rec, a), 420),
            ("async-pulls.png", charts.pulls([("", a)]), 420),
            ("async-processes.png", charts.processes([("", a)]), 520),
            ("compare-timeline.png", charts.timeline(runs, relative=True), 720),
            ("compare-histograms.png", charts.histograms(runs), 900)):
        _picture(figure, os.path.join(PICTURES, name), height)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", default="/tmp/prof-example")
    parser.add_argument("--duration", type=float, default=36.0)
    parser.add_argument("--rate", type=int, default=1500, help="messages per second offered")
    parser.add_argument("--body-bytes", type=int, default=4000)
    parser.add_argument("--behind", type=float, default=0.5,
                        help="the consumer starts (from offset 0) after this part of the run")
    parser.add_argument("--memory-mib", type=int, default=MEMORY_MIB,
                        help="memory cgroup limit of the broker (0: none)")
    parser.add_argument("--runs", default="async,sync",
                        help=f"comma-separated modes, in order ({', '.join(_MODES)})")
    parser.add_argument("--figures-only", action="store_true",
                        help="print each run's figures; no pages, no pictures")
    args = parser.parse_args()
    modes = args.runs.split(",")
    if any(mode not in _MODES for mode in modes):
        parser.error(f"--runs: modes are {', '.join(_MODES)}")
    os.makedirs(args.work, exist_ok=True)
    names = [mode if modes.count(mode) == 1 else f"{mode}-{index}"
             for index, mode in enumerate(modes)]
    recordings = [_run(name, mode, args) for name, mode in zip(names, modes, strict=True)]
    for name, recording in zip(names, recordings, strict=True):
        _figures(name, recording)
    if args.figures_only:
        return 0
    cli = [sys.executable, "-m", "pybroker", "prof"]
    for recording in recordings:
        subprocess.run(cli + ["report", recording, "-o", recording[:-6] + ".html"], check=True)
    subprocess.run(cli + ["compare", *recordings, "--labels", ",".join(names), "-o",
                          os.path.join(args.work, "compare.html")], check=True)
    if names[:2] == ["async", "sync"]:
        _pictures(*recordings[:2])
        print(f"pictures in {PICTURES}")
    print(f"pages in {args.work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
