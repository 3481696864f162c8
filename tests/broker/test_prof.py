# `pybroker prof` against a real broker: instrument counts, cold pulls, record/report/compare/top.
"""Goal: the profiler's figures are the broker's own truth. The histograms count exactly the
group commits, flushes and puts the test caused; a pull of records whose pages were evicted
counts as cold (and the same pull again as warm) while Java's in-memory rule calls neither
cold; a recording made with ``pybroker prof record`` turns into a page with every chart that
headless Chromium draws without a script error; ``compare`` and ``top`` work on the same
broker.

Method: one SYNC_FLUSH standalone broker with 1 MiB CommitLog files. Sequential sends (each
waits for its own flush, so each is one group commit and one flush) between two samples;
then a burst to fill five files, a clean stop, posix_fadvise(DONTNEED) of every CommitLog
file, a restart (recovery reads only the last three files) and raw PULL_MESSAGE requests of
queue 0 from offset 0, whose records lie in the first, evicted file. Chromium is Debian's
(.ci/run installs it); without it the rendering check skips locally and fails in CI.
"""
import asyncio
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.client.message import Message
from pybroker.client.producer import Producer
from pybroker.prof.charts import CHART_IDS
from pybroker.prof.recording import read_recording
from pybroker.prof.sampler import Sampler, attach_store
from pybroker.prof.series import histogram_delta
from pybroker.protocol import headers
from pybroker.protocol.bodies import MessageQueue
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.protocol.constants import PullSysFlag
from pybroker.remoting.client import SyncRemotingClient
from tests import peers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TOPIC = "ProfTopic"
GROUP = "ProfGroup"
SEQUENTIAL = 40
BURST = 1300
BODY = b"p" * 4000
FILE_BYTES = 1 << 20


def _broker(work_dir) -> StandaloneBroker:
    # No scrubber: it reads every old file in the background, and these tests count the
    # pages a consumer finds cold.
    return StandaloneBroker(work_dir, {"flushDiskType": "SYNC_FLUSH",
                                       "mappedFileSizeCommitLog": str(FILE_BYTES),
                                       "maxMessageSize": str(64 << 10),
                                       "storeScrubRateMegabytesPerSecond": "0"})


async def _send(broker: StandaloneBroker, sequential: int, burst: int) -> None:
    producer = Producer("ProfProducer", broker.namesrv_addr)
    await producer.start()
    try:
        queue = MessageQueue(TOPIC, "broker-a", 0)
        for _ in range(sequential):
            await producer.send(Message(TOPIC, BODY), queue=queue)
        for start in range(0, burst, 64):
            await asyncio.gather(*(producer.send(Message(TOPIC, BODY), queue=queue)
                                   for _ in range(min(64, burst - start))))
    finally:
        await producer.shutdown()


def _delta(first: dict, last: dict, histogram: str):
    counts = histogram_delta(first["histograms"][histogram], last["histograms"][histogram])
    total = last["histograms"][histogram]["sum"] - first["histograms"][histogram]["sum"]
    return int(counts.sum()), total


def _pull(broker: StandaloneBroker, queue_offset: int) -> int:
    fields = headers.encode_header(headers.PULL_MESSAGE_REQUEST, {
        "consumer_group": GROUP, "topic": TOPIC, "queue_id": 0, "queue_offset": queue_offset,
        "max_msg_nums": 8, "sys_flag": int(PullSysFlag.SUBSCRIPTION), "commit_offset": 0,
        "suspend_timeout_millis": 0, "subscription": "*", "sub_version": 0,
        "expression_type": "TAG"})
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        response = client.invoke(create_request(RequestCode.PULL_MESSAGE, fields), 10_000)
    assert response.code == ResponseCode.SUCCESS, response.remark
    return len(response.body or b"")


def _evict_commitlog(store_dir: str) -> list[str]:
    directory = os.path.join(store_dir, "commitlog")
    names = sorted(name for name in os.listdir(directory) if name.isdigit())
    for name in names:
        fd = os.open(os.path.join(directory, name), os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return names


def test_histograms_count_what_the_test_caused(tmp_path):
    with _broker(tmp_path / "b") as broker:
        asyncio.run(_send(broker, 1, 0))          # topic route and first file exist now
        broker.wait_max_offset(TOPIC, 0, 1)
        sampler = Sampler(attach_store(broker.store_dir))
        try:
            first = sampler.sample()
            asyncio.run(_send(broker, SEQUENTIAL, 0))
            broker.wait_max_offset(TOPIC, 0, 1 + SEQUENTIAL)
            last = sampler.sample()
        finally:
            sampler.close()
    counters = {name: last["counters"][name] - first["counters"][name]
                for name in last["counters"]}
    assert counters["put_messages"] == SEQUENTIAL
    assert _delta(first, last, "group_commit_messages") == (SEQUENTIAL, SEQUENTIAL)
    commits, committed_bytes = _delta(first, last, "group_commit_bytes")
    assert commits == SEQUENTIAL and committed_bytes == counters["put_bytes"]
    # SYNC_FLUSH, one send at a time: every send is flushed by a flush of its own.
    assert counters["flushes"] == SEQUENTIAL
    assert _delta(first, last, "flush_latency_us")[0] == SEQUENTIAL
    assert _delta(first, last, "flush_bytes") == (SEQUENTIAL, counters["put_bytes"])
    assert counters["flushed_bytes"] == counters["put_bytes"]
    assert _delta(first, last, "put_latency_us")[0] == SEQUENTIAL
    # Each SYNC_FLUSH acknowledgement was held once (the send fast path's, the topic exists).
    assert _delta(first, last, "sync_flush_wait_us")[0] == SEQUENTIAL
    assert _delta(first, last, "append_drain_us")[0] == SEQUENTIAL
    assert counters["dispatched_messages"] == SEQUENTIAL
    assert set(last["processes"]) >= {"appender", "dispatcher", "flusher", "remoting-0",
                                      "supervisor"}


def test_pulls_of_evicted_pages_count_as_cold(tmp_path):
    work_dir = tmp_path / "b"
    with _broker(work_dir) as broker:
        asyncio.run(_send(broker, 0, BURST))
        broker.wait_max_offset(TOPIC, 0, BURST)
    files = _evict_commitlog(str(work_dir / "store"))
    assert len(files) >= 5, files            # recovery reads only the last three
    with _broker(work_dir) as broker:
        sampler = Sampler(attach_store(broker.store_dir))
        try:
            before = sampler.sample()
            first_file = os.path.join(broker.store_dir, "commitlog", files[0])
            assert sampler.residency.resident_pages(first_file)[0] == 0
            assert _pull(broker, 0) > 0
            cold = sampler.sample()
            assert _pull(broker, 0) > 0
            warm = sampler.sample()
        finally:
            sampler.close()
    group = f"{TOPIC}@{GROUP}"

    def grew(later: dict, earlier: dict, name: str) -> int:
        return later["counters"][name] - earlier["counters"][name]
    pages = grew(cold, before, "pull_pages")
    assert pages >= 8 and grew(cold, before, "pull_pages_cold") == pages
    assert grew(cold, before, "pulls_cold") == 1
    assert cold["groups"][group]["cold_pulls"] == 1 and cold["groups"][group]["pulls"] == 1
    assert grew(warm, cold, "pull_pages") == pages
    assert grew(warm, cold, "pull_pages_cold") == 0 and grew(warm, cold, "pulls_cold") == 0
    assert warm["groups"][group]["cold_pulls"] == 1 and warm["groups"][group]["pulls"] == 2
    # Java's rule (40% of RAM behind the end) sees a 5 MiB store as all in memory.
    assert grew(warm, before, "pulls_in_disk") == 0
    assert _delta(before, warm, "pull_read_us")[0] == 2


def _render(page: str, profile_dir: str) -> dict[str, str]:
    """The report page's body attributes after headless Chromium ran its scripts."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        peers.unavailable("chromium (Debian package chromium) is not installed")
    result = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={profile_dir}", "--virtual-time-budget=30000",
         "--dump-dom", "file://" + page],
        capture_output=True, text=True, timeout=120)
    body = re.search(r"<body([^>]*)>", result.stdout)
    assert body is not None, result.stderr[-2000:]
    return dict(re.findall(r'(data-[a-z]+)="([^"]*)"', body.group(1)))


def _cli(*arguments: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pybroker", "prof", *arguments],
                          capture_output=True, text=True, timeout=timeout_s)


def test_record_report_compare_and_top(tmp_path):
    recording = str(tmp_path / "run.jsonl")
    with _broker(tmp_path / "b") as broker:
        asyncio.run(_send(broker, 1, 0))
        recorder = subprocess.Popen(
            [sys.executable, "-m", "pybroker", "prof", "record", "--admin", broker.broker_addr,
             "-d", "4", "-o", recording], stderr=subprocess.PIPE, text=True)
        asyncio.run(_send(broker, 20, 300))
        assert _pull(broker, 0) > 0
        _, errors = recorder.communicate(timeout=60)
        assert recorder.returncode == 0, errors
        top = _cli("top", "--store", broker.store_dir, "-n", "1", "-i", "0.2")
        assert top.returncode == 0, top.stderr
        assert "positions" in top.stdout and "appender" in top.stdout
    loaded = read_recording(recording)
    assert len(loaded.samples) == 4 and loaded.end is not None
    assert loaded.header["settings"]["flushDiskType"] == "SYNC_FLUSH"
    page = str(tmp_path / "report.html")
    report = _cli("report", recording, "-o", page)
    assert report.returncode == 0, report.stderr
    text = pathlib.Path(page).read_text(encoding="utf-8")
    for chart in CHART_IDS:
        assert f'id="chart-{chart}"' in text, chart
    assert "<script src=" not in text                    # self-contained
    rendered = _render(page, str(tmp_path / "chromium"))
    assert rendered == {"data-charts": str(len(CHART_IDS)),
                        "data-rendered": str(len(CHART_IDS)), "data-errors": "0"}
    compared = str(tmp_path / "compare.html")
    compare = _cli("compare", recording, recording, "--labels", "a,b", "-o", compared)
    assert compare.returncode == 0, compare.stderr
    assert "put_messages_per_s" in compare.stdout
    rendered = _render(compared, str(tmp_path / "chromium"))
    assert rendered["data-errors"] == "0"
    assert rendered["data-rendered"] == rendered["data-charts"] == str(len(CHART_IDS) + 1)


def test_warm_files_are_prepared_off_the_append_path(tmp_path):
    """warmMapedFileEnable: the flusher's allocator creates, faults in and (where permitted)
    mlocks each next file; the appender only maps files that exist already."""
    from pybroker._fast.stats import StatsCounter, StatsHistogram
    from pybroker.stats.region import StatsRegion
    from pybroker.store.control_block import APPENDER, FLUSHER
    from pybroker.store import paths
    with StandaloneBroker(tmp_path / "b", {"warmMapedFileEnable": "true",
                                           "mappedFileSizeCommitLog": str(FILE_BYTES),
                                           "maxMessageSize": str(64 << 10)}) as broker:
        asyncio.run(_send(broker, 0, 700))             # about 2.8 MiB: files 0, 1, 2
        broker.wait_max_offset(TOPIC, 0, 700)
        region = StatsRegion.attach(paths.stats_region_path(broker.store_dir))
        commitlog = os.path.join(broker.store_dir, "commitlog")
        try:
            deadline = 30
            while True:       # the file after the current one is made ready in the background
                snapshot = region.snapshot()
                files = sorted(os.listdir(commitlog))
                created = snapshot.counter(StatsCounter.MAPPED_FILES_CREATED)
                if len(files) == 5 and created == 5:
                    break
                assert deadline > 0, (files, created)
                deadline -= 1
                time.sleep(0.1)
            for name in files:
                assert os.stat(os.path.join(commitlog, name)).st_blocks * 512 >= FILE_BYTES
        finally:
            region.close()
    # A clean stop deletes the files made ready beyond the end (as Java's allocator).
    assert sorted(os.listdir(commitlog)) == files[:3]
    by_appender = snapshot.counter(StatsCounter.MAPPED_FILES_CREATED, APPENDER.stats_section)
    by_allocator = snapshot.counter(StatsCounter.MAPPED_FILES_CREATED, FLUSHER.stats_section)
    # File 0 of a fresh store: whoever came first; every later file: the allocator, two
    # files ahead of the writer (files 3 and 4 wait behind file 2).
    assert by_appender + by_allocator == 5 and by_allocator >= 4
    # The appender mapped three files that were ready (files 0, 1, 2).
    assert int(snapshot.histogram(StatsHistogram.FILE_CREATE_US)[64]) == 3
    assert int(snapshot.histogram(StatsHistogram.ALLOCATE_US)[64]) >= 4
    locked = snapshot.counter(StatsCounter.LOCKED_BYTES)
    assert locked in (0, 3 * FILE_BYTES)     # current and the next two, where mlock is permitted
