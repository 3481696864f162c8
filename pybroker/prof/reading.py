# The report's automatic reading: a paragraph of what a person would look for in the charts.
"""Findings computed from a recording's series, each one sentence; :func:`reading` joins them.

Every sentence is computed (a figure, a time, a correlation), never a canned remark: a
finding appears only when the recording supports it (for example, the send p99 peak is
related to writeback only when writeback was under way at that second).
"""
import datetime

import numpy as np

from pybroker.prof.recording import Recording
from pybroker.prof.series import Series, percentile

__all__ = ["reading", "findings", "summary"]

MIB = 1 << 20


def _clock(series: Series, index: int) -> str:
    return datetime.datetime.fromtimestamp(series.t_ms[index] / 1000).strftime("%H:%M:%S")


def _ms(value_us: float) -> str:
    return f"{value_us / 1000:.2f} ms" if value_us < 100_000 else f"{value_us / 1e6:.2f} s"


def summary(series: Series) -> dict[str, float]:
    """Whole-run figures (compare tables them side by side)."""
    hist = series.histograms
    seconds = max(float(series.seconds[-1]), 1e-3) if len(series.seconds) > 1 else 1.0
    figures = {"duration_s": seconds,
               "put_messages_per_s": _total(series, "put_messages") / seconds,
               "pulled_messages_per_s": _total(series, "get_transferred_messages") / seconds,
               "flushes_per_s": _total(series, "flushes") / seconds}
    for name, label in (("put_latency_us", "send"), ("flush_latency_us", "flush"),
                        ("sync_flush_wait_us", "sync_flush_wait"),
                        ("append_drain_us", "append_drain"), ("pull_read_us", "pull_read")):
        counts = hist.get(name)
        if counts is not None and counts.sum():
            figures[f"{label}_p50_ms"] = percentile(counts, 0.5) / 1000
            figures[f"{label}_p99_ms"] = percentile(counts, 0.99) / 1000
    for name in ("group_commit_messages", "flush_bytes", "dispatch_lag_bytes"):
        counts = hist.get(name)
        if counts is not None and counts.sum():
            figures[f"{name}_p50"] = percentile(counts, 0.5)
            figures[f"{name}_p99"] = percentile(counts, 0.99)
    pulls = _total(series, "get_found")
    if pulls:
        figures["cold_pull_percent"] = 100 * _total(series, "pulls_cold") / pulls
        figures["java_in_disk_pull_percent"] = 100 * _total(series, "pulls_in_disk") / pulls
    figures["dirty_max_mib"] = float(series.memory["dirty_bytes"].max() / MIB)
    figures["writeback_max_mib"] = float(series.memory["writeback_bytes"].max() / MIB)
    for name, process in series.processes.items():
        figures[f"{name}_major_faults"] = float(process["major_faults"][1:].sum())
        figures[f"{name}_cpu_percent"] = float(np.mean(process["cpu_percent"][1:])) if len(
            process["cpu_percent"]) > 1 else 0.0
    return figures


def _total(series: Series, counter: str) -> float:
    values = series.rates.get(counter)
    if values is None or len(values) < 2:
        return 0.0
    return float((values[1:] * np.diff(series.t_ms) / 1000).sum())


def _send_peak(series: Series) -> str | None:
    p99 = series.quantiles["put_latency_us"]["p99"]
    if len(p99) < 2 or np.isnan(p99).all():
        return None
    peak = int(np.nanargmax(p99))
    median = float(np.nanmedian(p99))
    text = f"send p99 peaked at {_ms(p99[peak])} at {_clock(series, peak)} " \
           f"(median second {_ms(median)})"
    writeback = series.memory["writeback_bytes"]
    window = slice(max(peak - 1, 0), peak + 1)
    if writeback[window].max() > 0:
        text += (f", with {writeback[window].max() / MIB:.1f} MiB under writeback and "
                 f"{series.memory['dirty_bytes'][peak] / MIB:.0f} MiB dirty")
    flush_max = series.quantiles["flush_latency_us"]["max"][window]
    if not np.isnan(flush_max).all() and np.nanmax(flush_max) > 2 * median:
        text += f" and a flush of up to {_ms(float(np.nanmax(flush_max)))}"
    return text


def _cold_groups(series: Series) -> list[str]:
    sentences = []
    for key, group in series.groups.items():
        pulls = group["pulls_total"][-1] - group["pulls_total"][0]
        cold = group["cold_pulls_total"][-1] - group["cold_pulls_total"][0]
        if pulls > 0 and cold > 0:
            topic, _, name = key.partition("@")
            sentences.append(f"{100 * cold / pulls:.0f}% of pulls by group {name} on {topic} "
                             f"read pages not in the page cache")
    return sentences


def findings(recording: Recording, series: Series) -> list[str]:
    """The reading's sentences, most telling first."""
    sentences = []
    peak = _send_peak(series)
    if peak:
        sentences.append(peak)
    sentences += _cold_groups(series)
    figures = summary(series)
    pulls = _total(series, "get_found")
    if pulls:
        sentences.append(f"{figures['cold_pull_percent']:.0f}% of all pulls read cold pages "
                         f"where Java's accessMessageInMemoryMaxRatio rule would call "
                         f"{figures['java_in_disk_pull_percent']:.0f}% cold")
    if "flush_p99_ms" in figures:
        sentences.append(f"a CommitLog flush took {figures['flush_p50_ms']:.2f} ms at the "
                         f"median and {figures['flush_p99_ms']:.2f} ms at p99, "
                         f"{figures['flushes_per_s']:.1f} flushes per second of "
                         f"{figures['flush_bytes_p50'] / 1024:.0f} KiB (median)")
    if "group_commit_messages_p50" in figures:
        sentences.append(f"group commits held {figures['group_commit_messages_p50']:.0f} "
                         f"messages at the median and "
                         f"{figures['group_commit_messages_p99']:.0f} at p99")
    creates = series.histograms.get("file_create_us")
    if creates is not None and creates.sum():
        slowest = float(1 << int(np.flatnonzero(creates)[-1]))
        sentences.append(f"{int(creates.sum())} CommitLog file(s) were created on the append "
                         f"path, the slowest in under {_ms(slowest)}")
    sentences += _fault_findings(series)
    return sentences


def _fault_findings(series: Series) -> list[str]:
    sentences = []
    for name, process in series.processes.items():
        major = float(process["major_faults"][1:].sum())
        if major >= 10:
            busiest = int(np.argmax(process["major_faults"]))
            sentences.append(f"{name} took {major:.0f} major page faults (disk reads), most "
                             f"at {_clock(series, busiest)}")
    appender = series.processes.get("appender")
    appended = _total(series, "put_bytes")
    if appender is not None and appended >= MIB:
        minor = float(appender["minor_faults"][1:].sum())
        sentences.append(f"the appender took {minor * MIB / appended:.0f} minor faults per "
                         f"MiB appended ({appended / MIB:.0f} MiB)")
    return sentences


def reading(recording: Recording, series: Series) -> str:
    """One paragraph: the findings as sentences."""
    sentences = findings(recording, series)
    if not sentences:
        return "The recording saw no traffic: nothing to read."
    return " ".join(sentence[0].upper() + sentence[1:] + "." for sentence in sentences)
