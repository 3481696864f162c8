# The worked example of docs/profiling.md: record, report, compare and the pictures, one command.
"""Regenerate the worked example of docs/profiling.md and its pictures.

Two runs of the same load on a standalone broker (64 MiB CommitLog files), each recorded by
``pybroker prof record`` (a subprocess, as an operator runs it):

* ``async``: flushDiskType ASYNC_FLUSH. A producer offers a fixed rate of 4000-byte messages to
  one queue; after a third of the run a consumer starts pulling that queue from offset 0 at
  the producer's pace, so it stays that far behind for the rest of the run. An evictor calls
  posix_fadvise(DONTNEED) on every CommitLog page more than ``--cache-mib`` behind the written
  position, four times a second, meant to do what the kernel does to a store larger than the
  memory it can keep. It does not: DONTNEED leaves pages a process maps, and the broker maps
  its CommitLog, so the consumer's reads stay warm (docs/profiling.md says so; a
  memory-limited cgroup would do it).
* ``sync``: the same with flushDiskType SYNC_FLUSH.

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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pybroker._testbase.cluster import StandaloneBroker  # noqa: E402
from pybroker.client.message import Message  # noqa: E402
from pybroker.client.producer import Producer  # noqa: E402
from pybroker.prof import charts  # noqa: E402
from pybroker.prof.recording import read_recording  # noqa: E402
from pybroker.prof.series import series_of  # noqa: E402
from pybroker.protocol import headers  # noqa: E402
from pybroker.protocol.bodies import MessageQueue  # noqa: E402
from pybroker.protocol.codes import RequestCode, ResponseCode  # noqa: E402
from pybroker.protocol.command import create_request  # noqa: E402
from pybroker.protocol.constants import PullSysFlag  # noqa: E402
from pybroker.remoting.client import SyncRemotingClient  # noqa: E402
from pybroker.store import paths  # noqa: E402
from pybroker.store.control_block import ControlBlock  # noqa: E402

TOPIC = "ProfExample"
GROUP = "BehindGroup"
FILE_BYTES = 64 << 20
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


def _evict(store_dir: str, cache_bytes: int, stop: threading.Event) -> None:
    """Keep only the last ``cache_bytes`` of the CommitLog in the page cache."""
    control = ControlBlock(paths.control_block_path(store_dir), create=False)
    directory = paths.commitlog_dir(store_dir)
    try:
        while not stop.wait(0.25):
            cut = control.written_position - cache_bytes
            for name in sorted(os.listdir(directory)):
                if not name.isdigit() or int(name) >= cut:
                    continue
                fd = os.open(os.path.join(directory, name), os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, min(cut - int(name), FILE_BYTES),
                                     os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
    finally:
        control.close()


def _run(name: str, flush: str, args: argparse.Namespace) -> str:
    """One recorded run; returns the recording's path."""
    work = os.path.join(args.work, name)
    shutil.rmtree(work, ignore_errors=True)
    recording = os.path.join(args.work, f"{name}.jsonl")
    overrides = {"flushDiskType": flush, "mappedFileSizeCommitLog": str(FILE_BYTES)}
    with StandaloneBroker(work, overrides) as broker:
        asyncio.run(_produce(broker, 10, 0.2, b"w"))          # route and first file
        recorder = subprocess.Popen(
            [sys.executable, "-m", "pybroker", "prof", "record", "--store", broker.store_dir,
             "-d", str(args.duration + 2), "-o", recording], stderr=subprocess.DEVNULL)
        stop = threading.Event()
        evictor = threading.Thread(target=_evict, daemon=True,
                                   args=(broker.store_dir, args.cache_mib << 20, stop))
        consumer = threading.Timer(args.duration / 3, _consume, (broker, args.rate, stop))
        evictor.start()
        consumer.start()
        try:
            # Random bytes under 4 KiB: the client compresses larger bodies (Java does too).
            sent = asyncio.run(_produce(broker, args.rate, args.duration,
                                        os.urandom(args.body_bytes)))
        finally:
            stop.set()
            consumer.cancel()
            consumer.join()
            evictor.join()
        recorder.wait(timeout=60)
    print(f"{name}: {sent} messages offered, recording {recording}", flush=True)
    return recording


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
    parser.add_argument("--cache-mib", type=int, default=32,
                        help="CommitLog kept in the page cache behind the written position")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    recordings = [_run(name, flush, args) for name, flush in (("async", "ASYNC_FLUSH"),
                                                              ("sync", "SYNC_FLUSH"))]
    cli = [sys.executable, "-m", "pybroker", "prof"]
    for recording in recordings:
        subprocess.run(cli + ["report", recording, "-o", recording[:-6] + ".html"], check=True)
    subprocess.run(cli + ["compare", *recordings, "--labels", "async,sync", "-o",
                          os.path.join(args.work, "compare.html")], check=True)
    _pictures(*recordings)
    print(f"pages in {args.work}, pictures in {PICTURES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
