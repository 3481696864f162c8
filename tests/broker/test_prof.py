# `pybroker prof` against a real broker: instrument counts, cold pulls, record/report/compare/top.
"""Goal: the profiler's figures are the broker's own truth. The histograms count exactly the
group commits, flushes and puts the test caused; a pull of records whose pages were evicted
counts as cold (and the same pull again as warm) while Java's in-memory rule calls neither
cold; a recording made with ``pybroker prof record`` (by admin address and by store
directory, whose settings come from <store>/run/broker.conf) turns into a page with every
chart that headless Chromium draws without a script error, where what plotly drew (read back
from the page as JSON) has one colour per process in every subplot, histogram buckets in
increasing order with units, only the application group that pulled in the consumers
chart, and every series with a value drawn (a lone point included); ``compare`` and
``top`` work on the same broker; a group's lag is counted in messages and their bytes.

Method: one SYNC_FLUSH standalone broker with 1 MiB CommitLog files. Sequential sends (each
waits for its own flush, so each is one group commit and one flush) between two samples;
then a burst to fill five files, a clean stop, posix_fadvise(DONTNEED) of every CommitLog
file, a restart (recovery reads only the last three files) and raw PULL_MESSAGE requests of
queue 0 from offset 0, whose records lie in the first, evicted file. Chromium is Debian's
(.ci/run installs it); without it the rendering check skips locally and fails in CI.
"""
import asyncio
import io
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest
from rich.console import Console

from pybroker._testbase.cluster import StandaloneBroker
from pybroker._testbase.page_cache import evict_file
from pybroker.client.message import Message
from pybroker.client.producer import Producer
from pybroker.prof.charts import CHART_IDS
from pybroker.prof.recording import read_recording
from pybroker.prof.sampler import Sampler, attach_store
from pybroker.prof.series import histogram_delta
from pybroker.prof.top import render
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


def _pull(broker: StandaloneBroker, queue_offset: int, group: str = GROUP) -> int:
    fields = headers.encode_header(headers.PULL_MESSAGE_REQUEST, {
        "consumer_group": group, "topic": TOPIC, "queue_id": 0, "queue_offset": queue_offset,
        "max_msg_nums": 8, "sys_flag": int(PullSysFlag.SUBSCRIPTION), "commit_offset": 0,
        "suspend_timeout_millis": 0, "subscription": "*", "sub_version": 0,
        "expression_type": "TAG"})
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        response = client.invoke(create_request(RequestCode.PULL_MESSAGE, fields), 10_000)
    assert response.code == ResponseCode.SUCCESS, response.remark
    return len(response.body or b"")


def _commit_offset(broker: StandaloneBroker, offset: int) -> None:
    """Commit GROUP's offset of queue 0 and wait until the broker persisted it (every 5 s)
    in consumerOffset.json, which the profiler reads."""
    fields = headers.encode_header(headers.UPDATE_CONSUMER_OFFSET_REQUEST, {
        "consumer_group": GROUP, "topic": TOPIC, "queue_id": 0, "commit_offset": offset})
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        response = client.invoke(create_request(RequestCode.UPDATE_CONSUMER_OFFSET, fields),
                                 10_000)
    assert response.code == ResponseCode.SUCCESS, response.remark
    path = os.path.join(broker.store_dir, "config", "consumerOffset.json")
    deadline = time.monotonic() + 20
    while True:
        text = pathlib.Path(path).read_text() if os.path.exists(path) else ""
        if json.loads(text or "{}").get("offsetTable", {}).get(f"{TOPIC}@{GROUP}") \
                == {"0": offset}:
            return
        assert time.monotonic() < deadline, text
        time.sleep(0.2)


def _evict_commitlog(store_dir: str) -> list[str]:
    directory = os.path.join(store_dir, "commitlog")
    names = sorted(name for name in os.listdir(directory) if name.isdigit())
    for name in names:
        evict_file(os.path.join(directory, name))
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


def test_lag_in_messages_and_bytes(tmp_path):
    """A group's lag is messages and their stored bytes, not CommitLog distance: another
    topic's large records written after it must not count (the issue's 20 messages shown as
    264 MiB behind); top shows both figures."""
    with _broker(tmp_path / "b") as broker:
        asyncio.run(_send(broker, 30, 0))
        broker.wait_max_offset(TOPIC, 0, 30)
        sampler = Sampler(attach_store(broker.store_dir))
        try:
            before = sampler.sample()
            _commit_offset(broker, 10)
            asyncio.run(_send_other(broker, 200))         # 200 x 60 KiB in another topic
            sample = sampler.sample()
        finally:
            sampler.close()
    record_bytes = (before["counters"]["put_bytes"]) // 30   # every ProfTopic record alike
    group = sample["groups"][f"{TOPIC}@{GROUP}"]
    assert group["lag_messages"] == 20
    assert group["lag_bytes"] == 20 * record_bytes and not group["lag_bytes_estimated"]
    assert sample["positions"]["written"] - group["read_position"] > 200 * 60_000
    console = Console(record=True, width=160, file=io.StringIO())
    console.print(render(before, sample, broker.store_dir))
    row = next(line for line in console.export_text().splitlines()
               if f"{TOPIC}@{GROUP}" in line)
    assert re.search(rf"\b20\b.*\b{20 * record_bytes / 1024:,.1f} KiB", row), row


async def _send_other(broker: StandaloneBroker, count: int) -> None:
    async with Producer("ProfOtherProducer", broker.namesrv_addr,
                        compress_msg_body_over_howmuch=1 << 30) as producer:
        for _ in range(count):
            await producer.send(Message("ProfOtherTopic", os.urandom(60_000)))


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


def _chromium() -> str:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        peers.unavailable("chromium (Debian package chromium) is not installed")
    return chromium


def _chromium_run(page: str, profile_dir: str, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={profile_dir}", "--virtual-time-budget=30000",
         *options, "file://" + page],
        capture_output=True, text=True, timeout=120)


def _render(page: str, profile_dir: str) -> tuple[dict[str, str], dict]:
    """The page's body attributes after headless Chromium ran its scripts, and what plotly
    drew: per chart div, its traces (name, legend group, colour, axes) and the order of
    each category axis (report.py writes them into <pre id="figures-drawn">)."""
    result = _chromium_run(page, profile_dir, "--dump-dom")
    body = re.search(r"<body([^>]*)>", result.stdout)
    assert body is not None, result.stderr[-2000:]
    drawn = re.search(r'<pre id="figures-drawn" hidden="">(.*?)</pre>', result.stdout,
                      re.DOTALL)
    assert drawn is not None, result.stdout[-2000:]
    figures = json.loads(drawn.group(1).replace("&lt;", "<").replace("&gt;", ">")
                         .replace("&amp;", "&"))
    return dict(re.findall(r'(data-[a-z]+)="([^"]*)"', body.group(1))), figures


def _screenshot(page: str, profile_dir: str, png: pathlib.Path) -> None:
    _chromium_run(page, profile_dir, "--window-size=1280,6000", f"--screenshot={png}")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000, len(data)


_UNIT_SCALE = {"µs": 1, "ms": 1e3, "s": 1e6, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20,
               "GiB": 1 << 30, "messages": 1, "faults": 1}


def _bucket_value(label: str) -> float:
    """'< 2.05 ms' -> 2050 (µs), '< 4 MiB' -> bytes, '0 µs' -> 0; AssertionError without
    a unit."""
    found = re.fullmatch(r"(?:< )?([\d,.]+) (µs|ms|s|B|KiB|MiB|GiB|messages|faults)", label)
    assert found, f"histogram bucket without a value and unit: {label!r}"
    return float(found.group(1).replace(",", "")) * _UNIT_SCALE[found.group(2)]


def _check_figures(figures: dict, runs: int) -> None:
    """One colour per process in every subplot (and per run pair), histogram buckets in
    increasing order with units, only the application group that pulled in the consumers
    chart (not the tools' TOOLS_CONSUMER, not the stale group), and no series with values
    that drew nothing."""
    processes = figures["chart-processes"]["traces"]
    colour_of: dict[str, set] = {}
    for trace in processes:
        name = trace["name"].split(": ")[-1]           # compare prefixes "a: "
        colour_of.setdefault(name, set()).add(trace["colour"])
    assert all(len(colours) == 1 for colours in colour_of.values()), colour_of
    colours = [next(iter(c)) for c in colour_of.values()]
    assert len(set(colours)) == len(colours), colour_of
    per_group: dict[str, list] = {}
    for trace in processes:
        per_group.setdefault(trace["legendgroup"], []).append(trace)
    for group, traces in per_group.items():
        assert {t["yaxis"] for t in traces} == {"y", "y2", "y3"}, group
        assert sum(1 for t in traces if t["showlegend"]) == 1, group
    histograms = figures["chart-histograms"]
    assert histograms["categories"], "no category axis drawn"
    for axis, labels in histograms["categories"].items():
        values = [_bucket_value(label) for label in labels]
        assert values == sorted(values) and len(set(values)) == len(values), (axis, labels)
    bars = [t for t in histograms["traces"] if t["type"] == "bar"]
    assert len({t["colour"] for t in bars}) == runs
    pulls = {trace["name"].split(": ")[-1] for trace in figures["chart-pulls"]["traces"]}
    assert pulls == {f"{TOPIC}@{GROUP}"}, pulls
    # Every series with a value shows it (a latency seen in one second only is a point, not
    # an empty subplot under a legend naming it).
    blank = [(chart, trace["name"], trace["yaxis"]) for chart, figure in figures.items()
             for trace in figure["traces"]
             if trace["type"] == "scatter" and trace["finite"] and not trace["marks"]]
    assert not blank, blank


def _cli(*arguments: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pybroker", "prof", *arguments],
                          capture_output=True, text=True, timeout=timeout_s)


def _recorder(source: list[str], output: pathlib.Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pybroker", "prof", "record", *source,
                             "-d", "4", "-o", str(output)], stderr=subprocess.PIPE, text=True)


def _wait_first_sample(recording: pathlib.Path) -> None:
    deadline = time.monotonic() + 30
    while not (recording.exists() and b'"kind":"sample"' in recording.read_bytes()):
        assert time.monotonic() < deadline, f"{recording}: no sample after 30 s"
        time.sleep(0.05)


def _without_settings(recording: pathlib.Path, copy: pathlib.Path) -> None:
    """A copy of ``recording`` as a recorder of before settings_source wrote it with
    --store: only the store path among the settings."""
    lines = recording.read_text(encoding="utf-8").splitlines(keepends=True)
    header = json.loads(lines[0])
    header.pop("settings_source")
    header["settings"] = {"storePathRootDir": header["store"]}
    copy.write_text(json.dumps(header) + "\n" + "".join(lines[1:]), encoding="utf-8")


def test_record_report_compare_and_top(tmp_path):
    by_admin, by_store = tmp_path / "admin.jsonl", tmp_path / "store.jsonl"
    with _broker(tmp_path / "b") as broker:
        asyncio.run(_send(broker, 1, 0))
        broker.wait_max_offset(TOPIC, 0, 1)           # SEND_OK is not yet dispatched
        assert _pull(broker, 0, "StaleGroup") > 0      # pulls before the recording only
        # Two recordings of different loads, so their histograms span different buckets:
        # by admin address a burst (large group commits), by store directory sequential
        # sends (one message each).
        sent = 1
        for source, path, sequential, burst in (
                (["--admin", broker.broker_addr], by_admin, 0, 300),
                (["--store", broker.store_dir], by_store, 20, 0)):
            recorder = _recorder(source, path)
            _wait_first_sample(path)                   # traffic between its samples
            asyncio.run(_send(broker, sequential, burst))
            sent += sequential + burst
            broker.wait_max_offset(TOPIC, 0, sent)
            assert _pull(broker, 0) > 0
            assert _pull(broker, 0, "TOOLS_CONSUMER") > 0   # mqadmin's group: a system one
            _, errors = recorder.communicate(timeout=60)
            assert recorder.returncode == 0, errors
        top = _cli("top", "--store", broker.store_dir, "-n", "1", "-i", "0.2")
        assert top.returncode == 0, top.stderr
        assert "positions" in top.stdout and "appender" in top.stdout
        assert "lag messages" in top.stdout
    recordings = [read_recording(str(path)) for path in (by_admin, by_store)]
    for loaded in recordings:
        assert len(loaded.samples) == 4 and loaded.end is not None
        assert loaded.header["settings"]["flushDiskType"] == "SYNC_FLUSH"
    assert recordings[1].header["settings_source"] == os.path.join(
        broker.store_dir, "run", "broker.conf")
    page = str(tmp_path / "report.html")
    report = _cli("report", str(by_store), "-o", page)
    assert report.returncode == 0, report.stderr
    text = pathlib.Path(page).read_text(encoding="utf-8")
    for chart in CHART_IDS:
        assert f'id="chart-{chart}"' in text, chart
    assert "<script src=" not in text                    # self-contained
    assert "Every send waited until its message was on disk (SYNC_FLUSH)" in text
    assert "settings-unknown" not in text
    rendered, figures = _render(page, str(tmp_path / "chromium"))
    assert rendered == {"data-charts": str(len(CHART_IDS)),
                        "data-rendered": str(len(CHART_IDS)), "data-errors": "0"}
    _check_figures(figures, runs=1)
    _screenshot(page, str(tmp_path / "chromium"), tmp_path / "report.png")
    compared = str(tmp_path / "compare.html")
    compare = _cli("compare", str(by_admin), str(by_store), "--labels", "a,b", "-o", compared)
    assert compare.returncode == 0, compare.stderr
    assert "put_messages_per_s" in compare.stdout
    compared_text = pathlib.Path(compared).read_text(encoding="utf-8")
    assert "None: the recorded settings are the same." in compared_text
    rendered, figures = _render(compared, str(tmp_path / "chromium"))
    assert rendered["data-errors"] == "0"
    assert rendered["data-rendered"] == rendered["data-charts"] == str(len(CHART_IDS) + 1)
    _check_figures(figures, runs=2)
    _screenshot(compared, str(tmp_path / "chromium"), tmp_path / "compare.png")
    # A recording without settings is named as such, not compared setting by setting.
    _without_settings(by_store, tmp_path / "old.jsonl")
    old = _cli("compare", str(by_admin), str(tmp_path / "old.jsonl"), "--labels", "a,old",
               "-o", str(tmp_path / "old.html"))
    assert old.returncode == 0, old.stderr
    old_text = (tmp_path / "old.html").read_text(encoding="utf-8")
    assert "The settings of old are <b>unknown</b>" in old_text
    assert "<th>setting</th><th>a</th><th>old</th>" not in old_text


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
