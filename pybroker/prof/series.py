# From a recording's cumulative samples to per-second series and whole-run summaries.
"""Per-second rates, per-second histogram percentiles and summaries of a recording.

Samples hold cumulative counters and histograms; a series is the difference between two
consecutive samples divided by the time between them, placed at the later sample (the first
sample's value is NaN). A worker
restart does not reset the region (docs/statistics.md), but a broker restart does: a negative
difference then counts as zero.
"""
import dataclasses

import numpy as np

from pybroker.prof.recording import Recording
from pybroker.protocol.constants import is_system_group, is_system_topic
from pybroker.stats.service import histogram_percentile

__all__ = ["Series", "series_of", "histogram_delta", "percentile", "HISTOGRAM_UNITS",
           "bucket_label", "active_groups", "is_system_key"]

# name -> (unit, title) of every histogram in a sample.
HISTOGRAM_UNITS = {
    "put_latency_us": ("µs", "send: put request to completion (client's wait)"),
    "sync_flush_wait_us": ("µs", "SYNC_FLUSH acknowledgement wait"),
    "group_commit_messages": ("messages", "group commit: records per appender drain"),
    "group_commit_bytes": ("bytes", "group commit: bytes per appender drain"),
    "append_drain_us": ("µs", "appender: time of one drain's appends"),
    "flush_latency_us": ("µs", "flush: one CommitLog msync call"),
    "flush_bytes": ("bytes", "flush: bytes made durable per flush"),
    "dispatch_lag_bytes": ("bytes", "dispatch lag: written - dispatched when a batch starts"),
    "dispatch_batch_messages": ("messages", "dispatch: records per batch"),
    "pull_read_us": ("µs", "pull: store read and copy of the records"),
    "file_create_us": ("µs", "CommitLog file creation on the append path"),
    "file_create_faults": ("faults", "page faults while creating a CommitLog file"),
    "commit_us": ("µs", "transient pool: one commit (write to the file)"),
    "rpc_latency_us": ("µs", "any request: received to answer queued"),
    "message_size_bytes": ("bytes", "stored message size"),
    "timer_lateness_ms": ("ms", "timer: message stored after its slot's end"),
    "timer_slot_messages": ("messages", "timer: messages per delivered slot"),
}


_BINARY_UNITS = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))
_TIME_UNITS = ((1_000_000, "s"), (1000, "ms"))


def bucket_label(bucket: int, unit: str) -> str:
    """The label of log2 bucket ``bucket`` of a histogram in ``unit``: the bucket holds the
    values of bit length ``bucket``, [2^(b-1), 2^b), so it reads "< 2^b" in a readable unit
    ("< 512 µs", "< 2.05 ms", "< 4 MiB", "< 1,024 messages"); bucket 0 holds the zeros."""
    if bucket == 0:
        return f"0 {unit}"
    upper = 1 << bucket
    if unit == "µs":
        for scale, name in _TIME_UNITS:
            if upper >= scale:
                value = upper / scale
                return f"< {value:,.0f} {name}" if value >= 100 else f"< {value:.3g} {name}"
        return f"< {upper} µs"
    if unit == "bytes":
        for scale, name in _BINARY_UNITS:
            if upper >= scale:
                return f"< {upper // scale:,} {name}"
        return f"< {upper} B"
    return f"< {upper:,} {unit}"


def is_system_key(key: str) -> bool:
    """A ``topic@group`` key of a system topic or a system consumer group (tools, the
    broker's own services): not an application's consumer."""
    topic, _, group = key.partition("@")
    return is_system_topic(topic) or is_system_group(group)


def active_groups(series: "Series") -> list[str]:
    """The application consumer groups (``topic@group``) that pulled during the recording:
    system groups are left out, and so are groups consumerOffset.json still lists but that
    did not pull (stale)."""
    keys = []
    for key, group in series.groups.items():
        pulled = group["pulls_total"][-1] - group["pulls_total"][0] > 0
        if pulled and not is_system_key(key):
            keys.append(key)
    return keys


def histogram_delta(first: dict, last: dict) -> np.ndarray:
    """Bucket counts (64) of a histogram between two samples' cumulative values."""
    counts = np.zeros(64, np.int64)
    for bucket, count in last["buckets"].items():
        counts[int(bucket)] += count
    for bucket, count in first["buckets"].items():
        counts[int(bucket)] -= count
    return np.maximum(counts, 0)


def percentile(counts: np.ndarray, fraction: float) -> float:
    """Value below which ``fraction`` of the samples in ``counts`` (log2 buckets) fall."""
    return histogram_percentile(counts, fraction)


@dataclasses.dataclass
class Series:
    """Per-second series of a recording, aligned on ``seconds`` (since its first sample)."""
    t_ms: np.ndarray
    seconds: np.ndarray
    rates: dict[str, np.ndarray]                # counter name -> per second
    quantiles: dict[str, dict[str, np.ndarray]]  # histogram -> p50/p99/max -> value
    memory: dict[str, np.ndarray]               # dirty_bytes, writeback_bytes, ...
    disk: dict[str, np.ndarray]                 # read/write bytes per second
    processes: dict[str, dict[str, np.ndarray]]  # name -> cpu %, faults per second, rss
    positions: dict[str, np.ndarray]            # written, flushed, ...
    groups: dict[str, dict[str, np.ndarray]]    # topic@group -> pulls, cold_pulls /s, read
    # Whole-run histograms (bucket counts between the first and the last sample).
    histograms: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)


def _rate(values: list[float], elapsed_s: np.ndarray) -> np.ndarray:
    """Per second between consecutive samples; the first sample has no rate (NaN, not 0:
    a chart would draw a fall to zero at the start that never happened)."""
    array = np.asarray(values, np.float64)
    if len(array) < 2:
        return np.full(len(array), np.nan)
    deltas = np.maximum(np.diff(array), 0)
    return np.concatenate([[np.nan], deltas / elapsed_s])


def _quantiles(samples: list[dict], name: str) -> dict[str, np.ndarray]:
    p50, p99, maximum = [np.nan], [np.nan], [np.nan]     # no second before the first
    for before, after in zip(samples, samples[1:], strict=False):
        counts = histogram_delta(before["histograms"][name], after["histograms"][name])
        total = int(counts.sum())
        p50.append(percentile(counts, 0.5) if total else np.nan)
        p99.append(percentile(counts, 0.99) if total else np.nan)
        top = int(np.flatnonzero(counts)[-1]) if total else 0
        maximum.append(float(1 << top) if total else np.nan)
    return {"p50": np.asarray(p50), "p99": np.asarray(p99), "max": np.asarray(maximum)}


def _process_series(samples: list[dict], elapsed_s: np.ndarray) -> dict[str, dict]:
    names = sorted({name for sample in samples for name in sample["processes"]})
    result = {}
    for name in names:
        rows = [sample["processes"].get(name, {}) for sample in samples]
        cpu = [row.get("cpu_user_s", 0) + row.get("cpu_system_s", 0) for row in rows]
        result[name] = {
            "cpu_percent": _rate(cpu, elapsed_s) * 100,
            "minor_faults": _rate([row.get("minor_faults", 0) for row in rows], elapsed_s),
            "major_faults": _rate([row.get("major_faults", 0) for row in rows], elapsed_s),
            "wakeups": _rate([row.get("wakeups", 0) for row in rows], elapsed_s),
            "appends": _rate([row.get("appends", 0) for row in rows], elapsed_s),
            "rss_bytes": np.asarray([row.get("rss_bytes", 0) for row in rows], np.float64)}
    return result


def _group_series(samples: list[dict], elapsed_s: np.ndarray) -> dict[str, dict]:
    keys = sorted({key for sample in samples for key in sample.get("groups", {})})
    result = {}
    for key in keys:
        rows = [sample.get("groups", {}).get(key, {}) for sample in samples]
        result[key] = {
            "pulls": _rate([row.get("pulls", 0) for row in rows], elapsed_s),
            "cold_pulls": _rate([row.get("cold_pulls", 0) for row in rows], elapsed_s),
            "messages": _rate([row.get("messages", 0) for row in rows], elapsed_s),
            "read_position": np.asarray([row.get("read_position", np.nan) for row in rows],
                                        np.float64),
            "pulls_total": np.asarray([row.get("pulls", 0) for row in rows], np.float64),
            "cold_pulls_total": np.asarray([row.get("cold_pulls", 0) for row in rows],
                                           np.float64)}
    return result


def series_of(recording: Recording) -> Series:
    """The per-second series of ``recording`` (at least one sample)."""
    samples = recording.samples
    if not samples:
        raise ValueError(f"{recording.path}: the recording has no samples")
    t_ms = np.asarray([sample["t_ms"] for sample in samples], np.int64)
    elapsed_s = np.maximum(np.diff(t_ms) / 1000.0, 1e-3)
    counter_names = samples[-1]["counters"].keys()
    rates = {name: _rate([s["counters"].get(name, 0) for s in samples], elapsed_s)
             for name in counter_names}
    histogram_names = samples[-1]["histograms"].keys()
    quantiles = {name: _quantiles(samples, name) for name in histogram_names}
    memory = {name: np.asarray([s["memory"].get(name, 0) for s in samples], np.float64)
              for name in ("dirty_bytes", "writeback_bytes", "cached_bytes")}
    disks = [s.get("disk") or {} for s in samples]
    disk = {name: _rate([d.get(name, 0) for d in disks], elapsed_s)
            for name in ("read_bytes", "write_bytes", "busy_ms")}
    positions = {name: np.asarray([s["positions"].get(name, 0) for s in samples], np.float64)
                 for name in samples[-1]["positions"]}
    histograms = {name: histogram_delta(samples[0]["histograms"][name],
                                        samples[-1]["histograms"][name])
                  for name in histogram_names}
    return Series(t_ms, (t_ms - t_ms[0]) / 1000.0, rates, quantiles, memory, disk,
                  _process_series(samples, elapsed_s), positions,
                  _group_series(samples, elapsed_s), histograms)
