# `pybroker prof top`: the sampler's figures live in the terminal, refreshed every second.
"""A live view of one broker (rich's Live display): positions and the gaps between them,
rates, each consumer group's lag (messages and bytes), the last second's histograms as bars,
CommitLog residency and per-process figures.

Each refresh takes one sample (the same as ``prof record``) and shows the difference from the
previous one.
"""
import time

import numpy as np
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from pybroker.prof.sampler import Sampler
from pybroker.prof.series import (HISTOGRAM_UNITS, bucket_label, histogram_delta,
                                  is_system_key, percentile)

__all__ = ["run_top", "render"]

MIB = 1 << 20
_TOP_HISTOGRAMS = ("put_latency_us", "flush_latency_us", "group_commit_messages",
                   "append_drain_us", "sync_flush_wait_us", "pull_read_us",
                   "timer_lateness_ms")
_RATES = (("put_messages", "put msg/s"), ("put_bytes", "put MiB/s"),
          ("get_transferred_messages", "pulled msg/s"), ("flushes", "flushes/s"),
          ("dispatched_messages", "dispatched/s"), ("pulls_cold", "cold pulls/s"),
          ("scrub_verified_bytes", "scrubbed MiB/s"))
_BAR_WIDTH = 30


def _bar(fraction: float, width: int = _BAR_WIDTH) -> str:
    filled = int(round(max(min(fraction, 1.0), 0.0) * width))
    return "█" * filled + "·" * (width - filled)


def _positions(sample: dict) -> Table:
    positions = sample["positions"]
    written = positions["written"]
    table = Table(title="positions (CommitLog offsets)", expand=True)
    for column in ("position", "offset", "behind written"):
        table.add_column(column, justify="right" if column != "position" else "left")
    for name in ("written", "flushed", "dispatched", "prefaulted", "commitlog_min",
                 "scrubbed"):
        value = positions.get(name, 0)
        table.add_row(name, f"{value:,}", f"{(written - value) / MIB:,.2f} MiB"
                      if name in ("flushed", "dispatched") else "")
    return table


def lag_bytes_text(group: dict) -> str:
    """A group's lag in bytes as top shows it: "≈" when extrapolated, "?" when unknown."""
    size = group.get("lag_bytes")
    if size is None:
        return "?"
    text = f"{size / MIB:,.2f} MiB" if size >= MIB else f"{size / 1024:,.1f} KiB"
    return ("≈ " if group.get("lag_bytes_estimated") else "") + text


def _groups(previous: dict, sample: dict) -> Table:
    """Each application consumer group with committed offsets: how far behind it is, in
    messages and in the stored bytes of those messages (not CommitLog distance: other
    topics' messages in between are not its lag), and its pulls this second."""
    elapsed = max((sample["t_ms"] - previous["t_ms"]) / 1000, 1e-3)
    table = Table(title="consumer groups (lag from consumerOffset.json, persisted every 5 s)",
                  expand=True)
    for column in ("topic@group", "lag messages", "lag bytes", "pulls/s"):
        table.add_column(column, justify="left" if column == "topic@group" else "right")
    for key, group in sorted(sample.get("groups", {}).items()):
        if is_system_key(key) or "lag_messages" not in group:
            continue
        pulls = group.get("pulls", 0) - previous.get("groups", {}).get(key, {}).get("pulls", 0)
        table.add_row(key, f"{group['lag_messages']:,}", lag_bytes_text(group),
                      f"{max(pulls, 0) / elapsed:,.1f}")
    return table


def _rates(previous: dict, sample: dict) -> Table:
    elapsed = max((sample["t_ms"] - previous["t_ms"]) / 1000, 1e-3)
    table = Table(title="rates", expand=True)
    table.add_column("figure")
    table.add_column("per second", justify="right")
    for name, label in _RATES:
        delta = sample["counters"].get(name, 0) - previous["counters"].get(name, 0)
        value = delta / elapsed / (MIB if "MiB" in label else 1)
        table.add_row(label, f"{max(value, 0):,.1f}")
    counters, positions = sample["counters"], sample["positions"]
    table.add_row("scrub passes / damage found / damaged reads",
                  f"{counters.get('scrub_passes', 0):,} / {positions.get('scrub_findings', 0):,}"
                  f" / {counters.get('damaged_records_read', 0):,}")
    memory = sample["memory"]
    table.add_row("dirty MiB", f"{memory.get('dirty_bytes', 0) / MIB:,.1f}")
    table.add_row("writeback MiB", f"{memory.get('writeback_bytes', 0) / MIB:,.1f}")
    return table


def _histograms(previous: dict, sample: dict) -> Panel:
    lines = []
    for name in _TOP_HISTOGRAMS:
        counts = histogram_delta(previous["histograms"][name], sample["histograms"][name])
        total = int(counts.sum())
        unit, title = HISTOGRAM_UNITS[name]
        if not total:
            lines.append(Text(f"{title}: none this second", style="dim"))
            continue
        lines.append(Text(f"{title}: {total} samples, p50 {percentile(counts, 0.5):,.0f} "
                          f"p99 {percentile(counts, 0.99):,.0f} {unit}", style="bold"))
        peak = counts.max()
        for bucket in np.flatnonzero(counts):
            lines.append(Text(f"  {bucket_label(int(bucket), unit):>16} "
                              f"{_bar(counts[bucket] / peak)} {int(counts[bucket])}"))
    return Panel(Group(*lines), title="last second's histograms")


def _residency(sample: dict) -> Table:
    table = Table(title="page cache residency", expand=True)
    table.add_column("files")
    table.add_column("resident", justify="right")
    table.add_column("", no_wrap=True)
    for area, (resident, pages, count) in sample["files"].items():
        share = resident / pages if pages else 0.0
        table.add_row(f"{area} ({count})", f"{share:.0%}", _bar(share, 20))
    for entry in sample["commitlog"][-4:]:
        chunks = entry["chunks"]
        strip = "".join(" ▁▂▃▄▅▆▇█"[min(value * 9 // 1001, 8)] for value in chunks[:60])
        table.add_row(f"commitlog {entry['base']:,}", f"{np.mean(chunks) / 10:.0f}%", strip)
    return table


def _processes(previous: dict, sample: dict) -> Table:
    elapsed = max((sample["t_ms"] - previous["t_ms"]) / 1000, 1e-3)
    table = Table(title="processes (per second)", expand=True)
    for column in ("process", "CPU %", "minor faults", "major faults", "wake-ups",
                   "RSS MiB"):
        table.add_column(column, justify="left" if column == "process" else "right")
    for name, figures in sorted(sample["processes"].items()):
        before = previous["processes"].get(name, figures)
        rate = {key: max(figures.get(key, 0) - before.get(key, 0), 0) / elapsed
                for key in ("cpu_user_s", "cpu_system_s", "minor_faults", "major_faults",
                            "wakeups")}
        cpu = rate["cpu_user_s"] + rate["cpu_system_s"]
        table.add_row(name, f"{cpu * 100:.0f}", f"{rate['minor_faults']:,.0f}",
                      f"{rate['major_faults']:,.0f}", f"{rate['wakeups']:,.0f}",
                      f"{figures['rss_bytes'] / MIB:,.0f}")
    return table


def _timer(previous: dict, sample: dict) -> Table:
    """The 5.x timer: how far its delivery is behind, what it parks (wheel fill by bound)."""
    timer = sample["timer"]
    table = Table(title="timer (5.x timer messages)", expand=True)
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("", no_wrap=True)
    behind_s = max(sample["t_ms"] - timer["read_time_ms"], 0) / 1000
    table.add_row("delivery behind now", f"{behind_s:,.1f} s", "")
    slots = timer["slots_done"] - previous.get("timer", timer)["slots_done"]
    table.add_row("slots delivered", f"{max(slots, 0):,}", "")
    parked = max(timer["parked"], 1)
    table.add_row("parked", f"{timer['parked']:,}", "")
    low = "0"
    for bound, count in timer["fill"].items():
        table.add_row(f"  due in {low}..{bound} s", f"{count:,}", _bar(count / parked, 20))
        low = bound
    return table


def render(previous: dict, sample: dict, store: str) -> Group:
    """The whole view for one refresh."""
    grid = Table.grid(expand=True)
    grid.add_column(ratio=1)
    grid.add_column(ratio=1)
    grid.add_row(_positions(sample), _rates(previous, sample))
    stamp = time.strftime("%H:%M:%S", time.localtime(sample["t_ms"] / 1000))
    parts: list[Text | Table | Panel] = [
        Text(f"pybroker prof top  {store}  {stamp}  (Ctrl-C quits)", style="bold"),
        grid, _groups(previous, sample), _histograms(previous, sample), _residency(sample),
        _processes(previous, sample)]
    if "timer" in sample:
        parts.append(_timer(previous, sample))
    return Group(*parts)


def run_top(sampler: Sampler, interval_s: float = 1.0, iterations: int = 0,
            console: Console | None = None) -> int:
    """Refresh every ``interval_s`` until Ctrl-C (or ``iterations`` refreshes); returns the
    refreshes shown."""
    console = console or Console()
    previous = sampler.sample()
    shown = 0
    with Live(render(previous, previous, sampler.target.store_root), console=console,
              refresh_per_second=4, screen=console.is_terminal) as live:
        while not iterations or shown < iterations:
            time.sleep(interval_s)
            sample = sampler.sample()
            live.update(render(previous, sample, sampler.target.store_root))
            previous = sample
            shown += 1
    return shown
