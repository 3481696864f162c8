# Unit tests of the instrument region, Java's windows and the figures built from them.
"""Goal: the shared-memory instruments count exactly what their writers add, readers in other
processes see it, a re-attached writer continues its keyed entries, and Java's sampled windows
and number formats come out as Java computes and prints them; rpc keys name the request and
response codes as RemotingHelper does.

Method: real regions (a file under a temp dir and anonymous maps), a forked child as a second
writer, and hand-computed expectations for the Java formulas (StatsItem, StoreStatsService,
Double.toString, UtilAll.getDiskPartitionSpaceUsedPercent).
"""
import ctypes
import os

import numpy as np
import pytest

from pybroker._fast import stats as fast_stats
from pybroker._fast.stats import StatsCounter, StatsHistogram, StatsKeyKind
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.stats import metric_names
from pybroker.stats.region import Snapshot, StatsRegion
from pybroker.store.control_block import remoting_worker, stats_section_count
from pybroker.broker.runtime_info import disk_used_ratio, format_runtime
from pybroker.stats.service import (StatsService, histogram_percentile,
                                    put_distribute_bucket)
from pybroker.stats.windows import ItemWindows, RateWindow, java_double

C, H, K = StatsCounter, StatsHistogram, StatsKeyKind


@pytest.fixture
def region(tmp_path):
    created = StatsRegion.create(str(tmp_path / "stats"), stats_section_count(2), 1234)
    yield created
    created.close()


def _resident_kib(buffer) -> int:
    """Rss of the mapping holding ``buffer`` (from /proc/self/smaps)."""
    address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if not fields[0].endswith(":"):
                start, end = (int(part, 16) for part in fields[0].split("-"))
                inside = start <= address < end
            elif inside and fields[0] == "Rss:":
                return int(fields[1])
    raise AssertionError("the snapshot's map is not in /proc/self/smaps")


def test_a_snapshot_decodes_as_the_whole_region_and_backs_only_what_is_in_use(region):
    """The snapshot copies the header, window, counters, histograms and the published key
    entries of each section, nothing else: decoded, it equals a plain copy of the whole
    region; its map has the pages of what it copied, not the region's size."""
    for index, section in enumerate((remoting_worker(0).stats_section,
                                     remoting_worker(1).stats_section)):
        writer = region.writer(section)
        writer.add(C.GET_FOUND, 3 + index)
        writer.record(H.RPC_LATENCY_US, 1000 * index)
        for key in range(40 + index):
            writer.key_add(writer.key(K.KEY_TOPIC_PUT, key % 8, f"topic-{key}"), key, 10 * key)
    region.window_append([1, 2, 3])
    snapshot = region.snapshot()
    whole = Snapshot(bytes(region.buffer), region.writers)
    assert np.array_equal(snapshot.counters, whole.counters)
    assert np.array_equal(snapshot.histograms, whole.histograms)
    assert np.array_equal(snapshot.window_rows(), whole.window_rows())
    assert [(w, k, label, key, list(words)) for w, k, label, key, words in snapshot.entries()] \
        == [(w, k, label, key, list(words)) for w, k, label, key, words in whole.entries()]
    assert len(list(snapshot.entries())) == 81
    assert _resident_kib(snapshot.data) * 1024 < len(region.buffer) // 4


def test_counters_histograms_and_keys_sum_over_writers(region):
    first = region.writer(remoting_worker(0).stats_section)
    second = region.writer(remoting_worker(1).stats_section)
    first.add(C.GET_FOUND, 3)
    second.add(C.GET_FOUND, 4)
    second.raise_to(C.PUT_ENTIRE_TIME_MAX_MS, 9)
    second.raise_to(C.PUT_ENTIRE_TIME_MAX_MS, 5)
    for value in (0, 1, 1000, 1023, 1024):
        first.record(H.RPC_LATENCY_US, value)
    second.record(H.MESSAGE_SIZE_BYTES, 100, times=7)
    first.key_add(first.key(K.KEY_TOPIC_PUT, 0, "T"), 2, 200)
    second.key_add(second.key(K.KEY_TOPIC_PUT, 1, "T"), 3, 300)
    second.key_add(-1, 1)
    snapshot = region.snapshot()
    assert snapshot.counter(C.GET_FOUND) == 7
    assert snapshot.counter(C.GET_FOUND, remoting_worker(1).stats_section) == 4
    assert snapshot.counter(C.PUT_ENTIRE_TIME_MAX_MS) == 9
    assert snapshot.counter(C.KEYS_DROPPED) == 1
    latency = snapshot.histogram(H.RPC_LATENCY_US)
    # bucket = bit length: 0 -> 0, 1 -> 1, 1000 and 1023 -> 10, 1024 -> 11
    assert {b: int(latency[b]) for b in np.nonzero(latency[:64])[0]} == {0: 1, 1: 1, 10: 2,
                                                                          11: 1}
    assert latency[fast_stats.HIST_COUNT_WORD] == 5
    assert latency[fast_stats.HIST_SUM_WORD] == 3048
    assert latency[fast_stats.HIST_MAX_WORD] == 1024
    sizes = snapshot.histogram(H.MESSAGE_SIZE_BYTES)
    assert sizes[7] == 7 and sizes[fast_stats.HIST_SUM_WORD] == 700
    totals = snapshot.keys()[(K.KEY_TOPIC_PUT, "T")]
    assert (totals.messages, totals.size_bytes, totals.requests) == (5, 500, 2)
    first.close()
    second.close()


@pytest.mark.dataplane
def test_a_forked_writer_is_seen_and_a_new_writer_continues_its_keys(region):
    pid = os.fork()
    if pid == 0:
        writer = region.writer(remoting_worker(1).stats_section)
        writer.add(C.BROKER_PUT_NUMS, 11)
        writer.key_add(writer.key(K.KEY_GROUP_GET, 0, "T@G"), 5, 50)
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    # A restarted worker attaches to the same section: same entry, counters go on.
    again = region.writer(remoting_worker(1).stats_section)
    entry = again.key(K.KEY_GROUP_GET, 0, "T@G")
    assert entry == 0
    again.key_add(entry, 1, 10)
    again.add(C.BROKER_PUT_NUMS)
    snapshot = region.snapshot()
    assert snapshot.counter(C.BROKER_PUT_NUMS) == 12
    totals = snapshot.keys()[(K.KEY_GROUP_GET, "T@G")]
    assert (totals.messages, totals.size_bytes, totals.requests) == (6, 60, 2)
    again.close()


def test_key_table_full_and_long_keys_are_refused(region):
    writer = region.writer(0)
    assert writer.key(K.KEY_TOPIC_PUT, 0, "x" * (fast_stats.KEY_BYTES_MAX + 1)) == -1
    for index in range(fast_stats.KEYS_PER_WRITER):
        assert writer.key(K.KEY_TOPIC_PUT, 0, f"t{index}") == index
    assert writer.key(K.KEY_TOPIC_PUT, 0, "one more") == -1
    writer.close()


def test_window_rows_wrap_oldest_first(region):
    for row in range(fast_stats.WINDOW_ROWS + 3):
        region.window_append([row, row * 2])
    rows = region.snapshot().window_rows()
    assert len(rows) == fast_stats.WINDOW_ROWS
    assert rows[0][0] == 3 and rows[-1][0] == fast_stats.WINDOW_ROWS + 2
    assert rows[-1][1] == 2 * (fast_stats.WINDOW_ROWS + 2)


def test_region_header_is_checked(tmp_path):
    path = tmp_path / "junk"
    path.write_bytes(b"\0" * 8192)
    with pytest.raises(ValueError, match="stats region"):
        StatsRegion.attach(str(path))


def test_java_double_to_string():
    cases = {0.0: "0.0", 1.0: "1.0", 1234.5: "1234.5", 1e7: "1.0E7", 12345678.9: "1.23456789E7",
             0.001: "0.001", 0.0001: "1.0E-4", -3e9: "-3.0E9"}
    assert {value: java_double(value) for value in cases} == cases


def test_rate_window_prints_like_store_stats_service():
    window = RateWindow()
    for second in range(12):
        window.sample(1000 * second, 50 * second)
    # 12 samples: the 10 s rate exists (needs 11), 60 s and 600 s are empty as in Java.
    assert window.java_text() == "50.0  "
    assert window.rate(10) == 50.0


def test_item_windows_follow_stats_item():
    windows = ItemWindows(0)
    windows.sample("minute", 100_000, 1, 10)
    figures = windows.figures("minute")
    # a zero snapshot one period (10 s) before the first one
    assert (figures.sum, figures.tps, figures.avgpt) == (10, 1.0, 10.0)
    for step in range(1, 10):
        windows.sample("minute", 100_000 + 10_000 * step, 1 + step, 10 + 20 * step)
    figures = windows.figures("minute")
    # 7 snapshots kept: steps 3..9 -> value 70..190 over 60 s, times 4..10
    assert (figures.sum, figures.tps, figures.avgpt) == (120, 2.0, 20.0)


def test_put_distribute_buckets_match_java_bounds():
    expected = {0: 0, 1: 1, 9: 1, 10: 2, 49: 2, 50: 3, 199: 4, 999: 6, 1000: 7, 4999: 10,
                5000: 11, 9999: 11, 10_000: 12, 99_999: 12}
    assert {ms: put_distribute_bucket(ms) for ms in expected} == expected


def test_percentile_interpolates_inside_a_log2_bucket():
    buckets = np.zeros(fast_stats.HIST_WORDS, np.uint64)
    buckets[11] = 100          # 100 values in [1024, 2048)
    assert histogram_percentile(buckets, 0.5) == pytest.approx(1536)
    assert histogram_percentile(np.zeros(fast_stats.HIST_WORDS, np.uint64), 0.99) == 0.0


def test_disk_ratio_and_runtime_formats(tmp_path):
    disk = os.statvfs(tmp_path)
    used = (disk.f_blocks - disk.f_bfree) * disk.f_frsize
    entire = used + disk.f_bavail * disk.f_frsize
    percent = -(-used * 100 // entire)           # rounded up, as Java does
    assert disk_used_ratio(str(tmp_path)) == percent / 100
    assert disk_used_ratio(str(tmp_path / "missing")) == -1.0
    assert format_runtime(90_061_000) == "[ 1 days, 1 hours, 1 minutes, 1 seconds ]"


def test_service_tick_rates_items_and_morning(region):
    clock = [1_000_000]
    days = ["monday"]
    service = StatsService(region, "DefaultCluster", clock_ms=lambda: clock[0],
                           local_date=lambda: days[0])
    writer = region.writer(remoting_worker(0).stats_section)
    appender = region.writer(0)
    for _ in range(12):
        appender.add(C.PUT_MESSAGES, 100)
        writer.key_add(writer.key(K.KEY_GROUP_GET, 0, "T@G"), 10, 100)
        writer.add(C.GET_TRANSFERRED_MESSAGES, 10)
        service.tick()
        clock[0] += 1000
    assert service.rates["put"].rate(10) == 100.0
    # 10 s samples at t=0 (first sight: 10) and t=10 s (110); the last second is not sampled
    assert service.view("GROUP_GET_NUMS", "T@G")["statsMinute"]["sum"] == 110
    assert service.view("GROUP_GET_SIZE", "T@G")["statsMinute"]["sum"] == 1100
    assert service.view("GROUP_GET_NUMS", "T@G")["statsDay"]["sum"] == 0
    assert service.view("TOPIC_PUT_NUMS", "T@G") is None
    assert service.group_get_tps("G", "T") > 0
    days[0] = "tuesday"
    service.tick()
    assert service.morning["put_today"] == 1200 and service.morning["get_today"] == 120
    writer.close()
    appender.close()


def test_items_start_as_java_creates_them_and_the_24_hour_sum_falls_back(region):
    """A topic's first records make its StatsItem within a second, with Java's zero
    snapshots (one period back and at creation): 140 messages over 10 s read 7.00 at the
    next 10 s snapshot and 4.67 at the one after (Java 5.3.3 printed 4.67 for the same load,
    docs/statistics.md); statsAll's 24-hour count (day, else hour, else minute sum) reads 140,
    then 0 once the minute has passed, then 140 again from the 10-minute snapshot."""
    clock = [1_000_000]
    service = StatsService(region, "DefaultCluster", clock_ms=lambda: clock[0],
                           local_date=lambda: "monday")
    writer = region.writer(remoting_worker(0).stats_section)
    entry = writer.key(K.KEY_TOPIC_PUT, 0, "T")

    def day_sum() -> int:
        view = service.view("TOPIC_PUT_NUMS", "T")
        return next((view[w]["sum"] for w in ("statsDay", "statsHour", "statsMinute")
                     if view[w]["sum"]), 0)
    for _ in range(10):                            # 14 a second from t = 0 to 9 s
        writer.key_add(entry, 14, 14)
        service.tick()                             # t = 0: first seen, zero snapshots
        clock[0] += 1000
    service.tick()                                 # t = 10 s: the next minute snapshot
    assert service.view("TOPIC_PUT_NUMS", "T")["statsMinute"]["tps"] == 140 * 1000 / 20_000
    assert day_sum() == 140
    clock[0] = 1_000_000 + 20_000
    service.tick()
    assert round(service.view("TOPIC_PUT_NUMS", "T")["statsMinute"]["tps"], 2) == 4.67
    for seconds in range(30, 80, 10):
        clock[0] = 1_000_000 + seconds * 1000
        service.tick()
    assert service.view("TOPIC_PUT_NUMS", "T")["statsMinute"]["tps"] == 0.0
    assert day_sum() == 0
    clock[0] = 1_000_000 + 600_000
    service.tick()
    assert day_sum() == 140
    # A topic first recorded between two 10 s snapshots: seen within the second (zero
    # snapshots then), so its first interval runs from 10 s before that second, not from 10 s
    # before the next snapshot (which read 140 messages of 7 s as 14.00 before).
    late = writer.key(K.KEY_TOPIC_PUT, 0, "Late")
    for second in range(3, 10):                    # 20 a second, t = 603 .. 609 s
        clock[0] = 1_000_000 + 600_000 + second * 1000
        writer.key_add(late, 20, 20)
        service.tick()
    clock[0] = 1_000_000 + 610_000
    service.tick()
    assert service.view("TOPIC_PUT_NUMS", "Late")["statsMinute"]["tps"] == 140 * 1000 / 17_000
    writer.close()


def test_recorder_publishes_the_oldest_unanswered_request(region):
    from pybroker.stats.recorder import Recorder
    recorder = Recorder(region.writer(remoting_worker(0).stats_section))
    first = recorder.request_started("send")
    oldest = region.snapshot().counter(C.SEND_OLDEST_MS)
    assert oldest > 0
    second = recorder.request_started("send")
    recorder.request_finished("send", first, 10)
    # the second request is the oldest now (started at or after the first)
    assert region.snapshot().counter(C.SEND_OLDEST_MS) >= oldest
    recorder.request_finished("send", second, 10)
    snapshot = region.snapshot()
    assert snapshot.counter(C.SEND_OLDEST_MS) == 0
    assert snapshot.counter(C.SEND_STARTED) - snapshot.counter(C.SEND_FINISHED) == 0
    recorder.writer.close()


def test_pull_offsets_keep_the_newest_pull_of_each_queue(region):
    from pybroker.stats.recorder import PULL_OFFSET_KEYS_MAX, Recorder
    first = Recorder(region.writer(remoting_worker(0).stats_section))
    second = Recorder(region.writer(remoting_worker(1).stats_section))
    first.pull_offset("T", "g", 0, 10, at_ns=100)
    first.pull_offset("T", "g", 0, 12, at_ns=200)        # the same writer overwrites
    second.pull_offset("T", "g", 0, 5, at_ns=150)        # older than the first writer's
    second.pull_offset("T", "g", 1, 7, at_ns=300)
    first.group_get("T", "g", 3, 30)
    snapshot = region.snapshot()
    assert snapshot.pull_offsets() == {("T@g", 0): 12, ("T@g", 1): 7}
    # gauge entries are not summed into the keyed traffic figures
    assert set(snapshot.keys()) == {(K.KEY_GROUP_GET, "T@g")}
    second.pull_offset("T", "g", 0, 3, at_ns=400)        # a reset: the newest pull wins
    assert region.snapshot().pull_offsets()[("T@g", 0)] == 3
    for queue in range(2, PULL_OFFSET_KEYS_MAX + 3):
        first.pull_offset("T", "g", queue, 1, at_ns=500)
    snapshot = region.snapshot()
    assert len([item for item in snapshot.pull_offsets() if item[1] >= 2]) \
        == PULL_OFFSET_KEYS_MAX - 1                      # queue 0 took one of first's entries
    assert snapshot.counter(C.KEYS_DROPPED) == 2
    first.writer.close()
    second.writer.close()


def test_a_region_with_the_instruments_off_records_nothing(tmp_path):
    from pybroker.stats.recorder import Recorder
    region = StatsRegion.create(str(tmp_path / "off"), stats_section_count(1), 1234, enabled=False)
    try:
        assert not region.enabled
        writer = region.writer(remoting_worker(0).stats_section)
        assert not writer.enabled
        writer.add(C.GET_FOUND, 3)
        writer.set(C.PULL_HELD, 2)
        writer.raise_to(C.PUT_ENTIRE_TIME_MAX_MS, 9)
        writer.record(H.RPC_LATENCY_US, 7, 3)
        assert writer.key(K.KEY_TOPIC_PUT, 0, "T") == -1
        writer.key_add(0, 1, 1)
        recorder = Recorder(writer)
        token = recorder.request_started("send")
        recorder.request_finished("send", token, 10)
        recorder.topic_put("T", 2, 20)
        recorder.put_latency(1000)
        recorder.store_get(True, 1, 10, 100)
        recorder.group_get("T", "g", 1, 10)
        recorder.pull_offset("T", "g", 0, 5, at_ns=1)
        recorder.send_back("T", "g")
        snapshot = region.snapshot()
        assert int(snapshot.counters.sum()) == 0 and int(snapshot.histograms.sum()) == 0
        assert list(snapshot.entries()) == [] and snapshot.pull_offsets() == {}
        writer.close()
    finally:
        region.close()


def test_rpc_key_code_names_are_the_enums_lowercase_names():
    """RemotingHelper's descriptions as metric_names keeps them (a table made once): every
    value's canonical member name in lowercase, aliases included, else the number."""
    for enum_class, name_of in ((RequestCode, metric_names.request_code_name),
                                (ResponseCode, metric_names.response_code_name)):
        for code in {*(int(member) for member in enum_class.__members__.values()),
                     -1, 0, 1, 99_999, 300_000}:
            try:
                expected = enum_class(code).name.lower()
            except ValueError:
                expected = str(code)
            assert name_of(code) == expected, (enum_class, code)
    assert metric_names.rpc_key(200051, 0, False, "success") == "ack_message|success|false|success"
    assert metric_names.rpc_key(200051, 0, False, "success") is \
        metric_names.rpc_key(200051, 0, False, "success")          # made once
    assert metric_names.rpc_key(99_999, 1, True, "oneway") == "99999|system_error|true|oneway"


def test_rpc_bucket_is_bucket_of_the_rpc_bounds():
    for elapsed_ms in (*range(-1, 12), 99, 100, 101, 999, 1000, 1001, 2999, 3000, 3001, 10**9):
        assert metric_names.rpc_bucket(elapsed_ms) == \
            metric_names.bucket_of(elapsed_ms, metric_names.RPC_BUCKETS_MS), elapsed_ms
