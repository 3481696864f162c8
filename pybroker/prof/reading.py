# The report's automatic reading: a paragraph of what a person would look for in the charts.
"""Findings computed from a recording's series, each one sentence; :func:`reading` joins them.

Every sentence is computed (a figure, a time, a correlation), never a canned remark: a
finding appears only when the recording supports it (for example, the send p99 peak is
related to writeback only when writeback was under way at that second).
"""
import datetime

import numpy as np

from pybroker.prof.recording import Recording
from pybroker.prof.series import Series, active_groups, percentile

__all__ = ["reading", "findings", "summary", "plain_summary"]

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
            busiest = int(np.nanargmax(process["major_faults"]))
            sentences.append(f"{name} took {major:.0f} major page faults (disk reads), most "
                             f"at {_clock(series, busiest)}")
    appender = series.processes.get("appender")
    appended = _total(series, "put_bytes")
    if appender is not None and appended >= MIB:
        minor = float(appender["minor_faults"][1:].sum())
        sentences.append(f"the appender took {minor * MIB / appended:.0f} minor faults per "
                         f"MiB appended ({appended / MIB:.0f} MiB)")
    return sentences


def _size(size_bytes: float) -> str:
    if size_bytes >= MIB:
        return f"{size_bytes / MIB:,.1f} MiB"
    return f"{size_bytes / 1024:,.1f} KiB"


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} seconds" if seconds < 120 else f"{seconds / 60:.1f} minutes"


def _flush_sentence(recording: Recording, figures: dict[str, float]) -> str | None:
    mode = recording.header.get("settings", {}).get("flushDiskType")
    flushes = figures.get("flushes_per_s", 0.0)
    if "flush_p50_ms" not in figures:
        return None
    timing = (f"each write took {_ms(figures['flush_p50_ms'] * 1000)} typically and "
              f"{_ms(figures['flush_p99_ms'] * 1000)} for the slowest 1 in 100")
    if mode == "SYNC_FLUSH":
        return (f"every send waited until its message was on disk (SYNC_FLUSH): the broker "
                f"wrote to disk {flushes:.1f} times a second, {timing}")
    if mode == "ASYNC_FLUSH":
        return (f"sends did not wait for the disk (ASYNC_FLUSH): the broker wrote to disk "
                f"{flushes:.1f} times a second in the background, {timing}")
    return (f"the broker wrote to disk {flushes:.1f} times a second, {timing} (whether sends "
            f"waited for it is unknown: the recording has no settings)")


def _consumer_sentences(recording: Recording, series: Series) -> list[str]:
    last = recording.samples[-1].get("groups", {}) if recording.samples else {}
    sentences = []
    for key in active_groups(series)[:3]:
        topic, _, group = key.partition("@")
        rate = float(np.mean(series.groups[key]["messages"][1:])) \
            if len(series.seconds) > 1 else 0.0
        text = f"consumer group {group} read {rate:,.0f} messages a second from {topic}"
        lag = last.get(key, {})
        if "lag_messages" in lag:
            size = lag.get("lag_bytes")
            about = "about " if lag.get("lag_bytes_estimated") else ""
            bytes_text = f", {about}{_size(size)}" if size is not None else ""
            text += f" and was {lag['lag_messages']:,} messages{bytes_text} behind at the end"
        sentences.append(text)
    return sentences


def _slowest_second(series: Series) -> str | None:
    p99 = series.quantiles["put_latency_us"]["p99"]
    if len(p99) < 3 or np.isnan(p99).all():
        return None
    peak = int(np.nanargmax(p99))
    text = (f"the slowest second was {_clock(series, peak)}: 1 in 100 sends took longer "
            f"than {_ms(p99[peak])}, against {_ms(float(np.nanmedian(p99)))} in a typical "
            f"second")
    writeback = float(series.memory["writeback_bytes"][max(peak - 1, 0):peak + 1].max())
    if writeback > 0:
        text += f", while the kernel was writing {_size(writeback)} back to disk"
    return text


def plain_summary(recording: Recording, series: Series) -> str:
    """What the recording shows, in plain words: how much went through, how long sends
    waited, whether they waited for the disk, how consumers kept up, and the worst second
    (a reader new to RocketMQ's terms should follow it)."""
    figures = summary(series)
    seconds = figures["duration_s"]
    stored = _total(series, "put_messages")
    delivered = _total(series, "get_transferred_messages")
    if not stored and not delivered:
        return (f"In {_duration(seconds)} nothing was sent to or read from the broker: "
                f"there is nothing to read in the charts.")
    sentences = [f"in {_duration(seconds)} the broker stored {stored:,.0f} messages "
                 f"({figures['put_messages_per_s']:,.0f} a second, "
                 f"{_size(_total(series, 'put_bytes') / seconds)} a second) and handed "
                 f"{delivered:,.0f} to consumers"]
    if "send_p50_ms" in figures:
        sentences.append(f"half of the sends were answered within "
                         f"{_ms(figures['send_p50_ms'] * 1000)}, 99 in 100 within "
                         f"{_ms(figures['send_p99_ms'] * 1000)}")
    flush = _flush_sentence(recording, figures)
    if flush:
        sentences.append(flush)
    slowest = _slowest_second(series)
    if slowest:
        sentences.append(slowest)
    sentences += _consumer_sentences(recording, series)
    if figures.get("cold_pull_percent"):
        sentences.append(f"{figures['cold_pull_percent']:.0f}% of consumer reads had to "
                         f"wait for the disk because the messages were no longer in memory")
    if figures["dirty_max_mib"] >= 1:
        sentences.append(f"at most {figures['dirty_max_mib']:,.0f} MiB of written data "
                         f"waited in memory for the kernel to write it to disk")
    return " ".join(sentence[0].upper() + sentence[1:] + "." for sentence in sentences)


def reading(recording: Recording, series: Series) -> str:
    """One paragraph: the findings as sentences."""
    sentences = findings(recording, series)
    if not sentences:
        return "The recording saw no traffic: nothing to read."
    return " ".join(sentence[0].upper() + sentence[1:] + "." for sentence in sentences)
