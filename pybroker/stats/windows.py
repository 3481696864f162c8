# Java's sampled statistics windows, computed from cumulative counters in shared memory.
"""The two sampling schemes of Java RocketMQ's broker, reproduced over pybroker's counters.

* :class:`RateWindow` — StoreStatsService: one sample per second, 601 kept; the rate over the
  last N seconds is ``(last - sample N back) / elapsed``, and is empty (``""``) until N + 1
  samples exist, as Java prints it ("putTps": ``"<10 s> <60 s> <600 s>"``).
* :class:`ItemWindows` — StatsItem (VIEW_BROKER_STATS_DATA, statsAll, consumeTps): snapshots of
  (time, times, value) every 10 s (7 kept: the last minute), every 10 min (7: the last hour)
  and every hour (25: the last day); a new item starts with a zero snapshot one period back.
  sum = last - first value, tps = sum * 1000 / elapsed ms, avgpt = sum / (times difference).
"""
import collections
import dataclasses

__all__ = ["RateWindow", "ItemWindows", "WindowFigures", "java_double", "MINUTE", "HOUR",
           "DAY", "PERIODS_MS"]

RATE_SAMPLES_MAX = 601          # Java MAX_RECORDS_OF_SAMPLING + 1
MINUTE, HOUR, DAY = "minute", "hour", "day"
# window: (sampling period ms, snapshots kept)
PERIODS_MS = {MINUTE: (10_000, 7), HOUR: (600_000, 7), DAY: (3_600_000, 25)}


def java_double(value: float) -> str:
    """``Double.toString``: plain decimal for 1e-3 <= |x| < 1e7, else d.dddE<n>."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0.0"
    magnitude = abs(value)
    if 1e-3 <= magnitude < 1e7:
        text = repr(float(value))
        return text if "." in text or "e" in text else text + ".0"
    # The shortest mantissa that reads back as the same double, as Java prints it.
    for precision in range(0, 17):
        candidate = f"{value:.{precision}e}"
        if float(candidate) == value:
            break
    mantissa, exponent = candidate.split("e")
    if "." not in mantissa:
        mantissa += ".0"
    return f"{mantissa}E{int(exponent)}"


class RateWindow:
    """Per-second samples of one cumulative counter (Java's CallSnapshot list)."""

    def __init__(self):
        self.samples: collections.deque = collections.deque(maxlen=RATE_SAMPLES_MAX)

    def sample(self, now_ms: int, total: int) -> None:
        self.samples.append((now_ms, total))

    def rate(self, seconds: int) -> float | None:
        """Per-second rate over the last ``seconds`` samples; None until there are enough."""
        samples = self.samples
        if len(samples) <= seconds:
            return None
        begin, end = samples[-(seconds + 1)], samples[-1]
        elapsed_ms = end[0] - begin[0]
        if elapsed_ms <= 0:
            return None
        return (end[1] - begin[1]) / elapsed_ms * 1000.0

    def java_text(self, windows=(10, 60, 600)) -> str:
        """``"<10 s> <60 s> <600 s>"`` with Java's empty field for a window not yet filled."""
        parts = []
        for seconds in windows:
            rate = self.rate(seconds)
            parts.append("" if rate is None else java_double(rate))
        return " ".join(parts)


@dataclasses.dataclass
class WindowFigures:
    """One window of a StatsItem: BrokerStatsItem's sum, tps, avgpt (+ times)."""
    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0
    times: int = 0


class ItemWindows:
    """The minute / hour / day snapshots of one StatsItem (value and times counters)."""

    def __init__(self, now_ms: int):
        self.lists: dict[str, collections.deque] = {name: collections.deque(maxlen=keep)
                      for name, (_, keep) in PERIODS_MS.items()}
        self.created_ms = now_ms

    def sample(self, window: str, now_ms: int, times: int, value: int) -> None:
        snapshots = self.lists[window]
        if not snapshots:
            snapshots.append((now_ms - PERIODS_MS[window][0], 0, 0))
        snapshots.append((now_ms, times, value))

    def figures(self, window: str) -> WindowFigures:
        snapshots = self.lists[window]
        if not snapshots:
            return WindowFigures()
        first, last = snapshots[0], snapshots[-1]
        total = last[2] - first[2]
        elapsed_ms = last[0] - first[0]
        tps = total * 1000.0 / elapsed_ms if elapsed_ms > 0 else 0.0
        times = last[1] - first[1]
        return WindowFigures(total, tps, total / times if times > 0 else 0.0, times)
