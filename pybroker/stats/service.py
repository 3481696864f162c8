# The supervisor's statistics service: samples the region, keeps Java's windows, answers views.
"""Sampling and Java's views of the instrument region (runs in the supervisor).

:meth:`StatsService.tick` runs once a second (one snapshot of the region): the per-second
rate windows of StoreStatsService, a row in the region's window ring (readable by any
process), the StatsItem windows of every keyed item every 10 s / 10 min / 1 h, the morning
totals at local midnight (BrokerStats.record) and the last minute's latency distribution.
The service lives as long as the supervisor, so a new generation of workers continues its
windows as well as its counters.
"""
import collections
import datetime
import time
from collections.abc import Callable

import numpy as np

from pybroker._fast import stats as _stats
from pybroker._fast.stats import StatsCounter, StatsHistogram, StatsKeyKind
from pybroker.stats.region import PUT_DISTRIBUTE_BUCKETS, Snapshot, StatsRegion
from pybroker.stats.windows import DAY, HOUR, MINUTE, PERIODS_MS, ItemWindows, RateWindow
from pybroker.store.control_block import ControlBlock

__all__ = ["StatsService", "STATS_NAMES", "WINDOW_COLUMNS", "PUT_DISTRIBUTE_DESC",
           "put_distribute_bucket", "histogram_percentile"]

C = StatsCounter
# VIEW_BROKER_STATS_DATA names: (key kind, word of the entry used as Java's "value").
STATS_NAMES = {
    "TOPIC_PUT_NUMS": (StatsKeyKind.KEY_TOPIC_PUT, 0),
    "TOPIC_PUT_SIZE": (StatsKeyKind.KEY_TOPIC_PUT, 1),
    "GROUP_GET_NUMS": (StatsKeyKind.KEY_GROUP_GET, 0),
    "GROUP_GET_SIZE": (StatsKeyKind.KEY_GROUP_GET, 1),
    "SNDBCK_PUT_NUMS": (StatsKeyKind.KEY_SEND_BACK, 0),
    "GROUP_CK_NUMS": (StatsKeyKind.KEY_GROUP_CK, 0),
    "GROUP_ACK_NUMS": (StatsKeyKind.KEY_GROUP_ACK, 0),
}
# Keyed by the cluster name; Java adds to the value only (times stay 0).
BROKER_COUNTERS = {"BROKER_PUT_NUMS": C.BROKER_PUT_NUMS, "BROKER_GET_NUMS": C.BROKER_GET_NUMS,
                   "BROKER_CK_NUMS": C.BROKER_CK_NUMS, "BROKER_ACK_NUMS": C.BROKER_ACK_NUMS}
# Columns of a window row (column 0 is the sample time in ms).
WINDOW_COLUMNS = ("time_ms", "put_messages", "put_bytes", "get_found", "get_miss",
                  "get_transferred_messages", "get_transferred_bytes", "group_commits",
                  "flushes", "flushed_bytes", "dispatched_messages", "requests_total",
                  "broker_put_nums", "broker_get_nums", "put_failed")
_WINDOW_COUNTERS = (C.PUT_MESSAGES, C.PUT_BYTES, C.GET_FOUND, C.GET_MISS,
                    C.GET_TRANSFERRED_MESSAGES, C.GET_TRANSFERRED_BYTES, C.GROUP_COMMITS,
                    C.FLUSHES, C.FLUSHED_BYTES, C.DISPATCHED_MESSAGES, C.REQUESTS_TOTAL,
                    C.BROKER_PUT_NUMS, C.BROKER_GET_NUMS, C.PUT_FAILED)
assert len(WINDOW_COLUMNS) == 1 + len(_WINDOW_COUNTERS) <= _stats.WINDOW_COLUMNS
# Java StoreStatsService's put latency buckets (ms) and their names.
PUT_DISTRIBUTE_DESC = ("[<=0ms]", "[0~10ms]", "[10~50ms]", "[50~100ms]", "[100~200ms]",
                       "[200~500ms]", "[500ms~1s]", "[1~2s]", "[2~3s]", "[3~4s]", "[4~5s]",
                       "[5~10s]", "[10s~]")
_PUT_DISTRIBUTE_LIMITS_MS = (0, 10, 50, 100, 200, 500, 1000, 2000, 3000, 4000, 5000, 10000)
assert len(PUT_DISTRIBUTE_DESC) == PUT_DISTRIBUTE_BUCKETS == len(_PUT_DISTRIBUTE_LIMITS_MS) + 1
_LAST_MINUTE_SAMPLES = 61


def put_distribute_bucket(elapsed_ms: int) -> int:
    """Java's bucket of a put that took ``elapsed_ms`` (<=0, <10, <50, ... , >=10 s)."""
    if elapsed_ms <= 0:
        return 0
    for index, limit in enumerate(_PUT_DISTRIBUTE_LIMITS_MS[1:], start=1):
        if elapsed_ms < limit:
            return index
    return PUT_DISTRIBUTE_BUCKETS - 1


def histogram_percentile(buckets: np.ndarray, fraction: float) -> float:
    """The value below which ``fraction`` of a log2 histogram's samples fall, interpolated
    linearly inside the bucket (bucket b covers [2^(b-1), 2^b))."""
    counts = [int(count) for count in buckets[:_stats.HIST_BUCKETS]]
    total = sum(counts)
    if total == 0:
        return 0.0
    rank = total * fraction
    passed = 0
    for bucket, count in enumerate(counts):
        if count and passed + count >= rank:
            low = 0 if bucket == 0 else 1 << (bucket - 1)
            high = 0 if bucket == 0 else 1 << bucket
            return low + (high - low) * (rank - passed) / count
        passed += count
    return float(1 << (_stats.HIST_BUCKETS - 1))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class StatsService:
    """Owner of the region's sampling (one per supervisor). ``tick()`` once a second.
    ``control()`` is the running generation's control block (None between generations)."""

    def __init__(self, region: StatsRegion, cluster_name: str, clock_ms=_now_ms,
                 local_date=datetime.date.today,
                 control: Callable[[], ControlBlock | None] = lambda: None):
        self.region = region
        self._control = control
        self.cluster_name = cluster_name
        self.clock_ms = clock_ms
        self.local_date = local_date
        self.rates = {name: RateWindow() for name in ("put", "get_found", "get_miss",
                                                       "transferred")}
        self.items: dict[tuple[str, str], ItemWindows] = {}
        now = clock_ms()
        self.next_sample_ms = {window: now for window in PERIODS_MS}
        self.morning = {"put_yesterday": 0, "put_today": 0, "get_yesterday": 0,
                        "get_today": 0}
        self.today = local_date()
        self.recent: collections.deque = collections.deque(maxlen=_LAST_MINUTE_SAMPLES)
        self.last: Snapshot | None = None
        # The running generation's scrubber figures (pybroker/proc/scrubber.py), or None.
        self.scrubber_status: Callable[[], dict[str, str]] | None = None
        self.key_entries_seen = -1

    @property
    def control(self) -> ControlBlock:
        """The running generation's control block (published positions)."""
        control = self._control()
        if control is None:
            raise RuntimeError("no data plane runs: no control block")
        return control

    # --- sampling ---------------------------------------------------------------------------
    def tick(self) -> Snapshot:
        now = self.clock_ms()
        snapshot = self.region.snapshot()
        self.last = snapshot
        counter = snapshot.counter
        for name, index in (("put", C.PUT_MESSAGES), ("get_found", C.GET_FOUND),
                            ("get_miss", C.GET_MISS), ("transferred",
                                                       C.GET_TRANSFERRED_MESSAGES)):
            self.rates[name].sample(now, counter(index))
        self.region.window_append([now] + [counter(index) for index in _WINDOW_COUNTERS])
        self.recent.append((now, *_latency_figures(snapshot)))
        due = [window for window, at in self.next_sample_ms.items() if now >= at]
        # New keys (a topic or group recorded for the first time) become items within a
        # second, as Java creates a StatsItem at its first increment.
        if due or snapshot.key_entries != self.key_entries_seen:
            self.key_entries_seen = snapshot.key_entries
            self._sample_items(snapshot, now, due)
        today = self.local_date()
        if today != self.today:
            self.today = today
            self.record_morning(snapshot)
        return snapshot

    def _sample_items(self, snapshot: Snapshot, now: int, due: list[str]) -> None:
        for window in due:
            self.next_sample_ms[window] = now + PERIODS_MS[window][0]
        keys = snapshot.keys()
        current = {}
        for stats_name, (kind, word) in STATS_NAMES.items():
            for (entry_kind, key), totals in keys.items():
                if entry_kind == kind:
                    value = (totals.messages, totals.size_bytes)[word]
                    current[(stats_name, key)] = (totals.requests, value)
        for stats_name, index in BROKER_COUNTERS.items():
            current[(stats_name, self.cluster_name)] = (0, snapshot.counter(index))
        for item_key, (times, value) in current.items():
            windows = self.items.get(item_key)
            if windows is None:
                # Java creates an item at its first increment and samples every window at
                # once, before that increment lands: a zero snapshot one period back and a
                # zero one now. The item is seen here within a second of its first record
                # (tick), so what arrived in that second counts in the first interval, as
                # Java's increments after the creation sample do. Then every window is
                # sampled on its own period (docs/statistics.md, "statsAll and brokerStatus").
                windows = self.items[item_key] = ItemWindows(now)
                for window in PERIODS_MS:
                    windows.sample(window, now, 0, 0)
                continue
            for window in due:
                windows.sample(window, now, times, value)

    def record_morning(self, snapshot: Snapshot) -> None:
        """BrokerStats.record at local midnight: today's morning totals move to yesterday."""
        morning = self.morning
        morning["put_yesterday"], morning["get_yesterday"] = \
            morning["put_today"], morning["get_today"]
        morning["put_today"] = snapshot.counter(C.PUT_MESSAGES)
        morning["get_today"] = snapshot.counter(C.GET_TRANSFERRED_MESSAGES)

    # --- views ------------------------------------------------------------------------------
    def view(self, stats_name: str, stats_key: str) -> dict | None:
        """BrokerStatsData of a StatsItem (VIEW_BROKER_STATS_DATA), None when unknown."""
        windows = self.items.get((stats_name, stats_key))
        if windows is None:
            return None
        data = {}
        for window, field in ((MINUTE, "statsMinute"), (HOUR, "statsHour"), (DAY, "statsDay")):
            figures = windows.figures(window)
            data[field] = {"avgpt": figures.avgpt, "sum": figures.sum, "tps": figures.tps}
        return data

    def group_get_tps(self, group: str, topic: str) -> float:
        """GROUP_GET_NUMS tps over the last minute of topic@group (Java tpsGroupGetNums)."""
        windows = self.items.get(("GROUP_GET_NUMS", f"{topic}@{group}"))
        return windows.figures(MINUTE).tps if windows is not None else 0.0

    def last_minute(self, snapshot: Snapshot) -> tuple[np.ndarray, np.ndarray]:
        """(Java's 13 put-latency bucket counts, put-latency µs histogram) of the last 60 s
        up to ``snapshot`` (a current one)."""
        distribute, latency = _latency_figures(snapshot)
        if not self.recent:
            return distribute, latency
        _, first_distribute, first_latency = self.recent[0]
        return distribute - first_distribute, latency - first_latency


def _latency_figures(snapshot: Snapshot) -> tuple[np.ndarray, np.ndarray]:
    first = C.PUT_DISTRIBUTE_0
    return (snapshot.counters[:, first:first + PUT_DISTRIBUTE_BUCKETS].sum(axis=0),
            snapshot.histogram(StatsHistogram.PUT_LATENCY_US))
