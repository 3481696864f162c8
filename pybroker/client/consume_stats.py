# The consumer's own statistics (Java ConsumerStatsManager): what GET_CONSUMER_RUNNING_INFO shows.
"""Per topic: pull RT and TPS, consume RT, OK and failed TPS, failed messages in the last hour.

Java keeps five StatsItems per ``topic@group`` (PULL_RT, PULL_TPS, CONSUME_RT, CONSUME_OK_TPS,
CONSUME_FAILED_TPS), sampled every 10 s / 10 min / 1 h; ConsumeStatus takes the minute
window's tps (or avgpt for the RT items) and the failed messages' hour sum. The same windows
(:class:`pybroker.stats.windows.ItemWindows`) are sampled here when due, at the next event or
read, instead of by a timer task.
"""
import time

from pybroker.stats.windows import HOUR, MINUTE, PERIODS_MS, ItemWindows

__all__ = ["ConsumerStats"]

_ITEMS = ("PULL_RT", "PULL_TPS", "CONSUME_RT", "CONSUME_OK_TPS", "CONSUME_FAILED_TPS")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _Item:
    __slots__ = ("times", "value", "windows", "next_ms")

    def __init__(self, now_ms: int):
        self.times = self.value = 0
        self.windows = ItemWindows(now_ms)
        self.next_ms = {window: now_ms for window in PERIODS_MS}


class ConsumerStats:
    """Counters of one consumer group, by topic."""

    def __init__(self, clock_ms=_now_ms):
        self.clock_ms = clock_ms
        self.items: dict[tuple[str, str], _Item] = {}

    def _sample(self, item: _Item, now: int) -> None:
        for window, (period_ms, _) in PERIODS_MS.items():
            if now >= item.next_ms[window]:
                item.next_ms[window] = now + period_ms
                item.windows.sample(window, now, item.times, item.value)

    def _add(self, name: str, topic: str, value: int, times: int = 1) -> None:
        now = self.clock_ms()
        item = self.items.get((name, topic))
        if item is None:
            item = self.items[(name, topic)] = _Item(now)
            self._sample(item, now)       # Java samples a new item at once, before the add
        item.times += times
        item.value += value
        self._sample(item, now)

    def pulled(self, topic: str, rt_ms: int, messages: int) -> None:
        self._add("PULL_RT", topic, rt_ms)
        self._add("PULL_TPS", topic, messages)

    def consumed(self, topic: str, rt_ms: int, ok: int, failed: int) -> None:
        self._add("CONSUME_RT", topic, rt_ms)
        if ok:
            self._add("CONSUME_OK_TPS", topic, ok)
        if failed:
            self._add("CONSUME_FAILED_TPS", topic, failed)

    def _figures(self, name: str, topic: str, window: str):
        item = self.items.get((name, topic))
        if item is None:
            return None
        self._sample(item, self.clock_ms())
        return item.windows.figures(window)

    def status(self, topic: str) -> dict:
        """Java's ConsumeStatus of ``topic``."""
        def minute(name: str, field: str) -> float:
            figures = self._figures(name, topic, MINUTE)
            return 0.0 if figures is None else getattr(figures, field)
        failed_hour = self._figures("CONSUME_FAILED_TPS", topic, HOUR)
        return {"consumeFailedMsgs": 0 if failed_hour is None else failed_hour.sum,
                "consumeFailedTPS": minute("CONSUME_FAILED_TPS", "tps"),
                "consumeOKTPS": minute("CONSUME_OK_TPS", "tps"),
                "consumeRT": minute("CONSUME_RT", "avgpt"),
                "pullRT": minute("PULL_RT", "avgpt"), "pullTPS": minute("PULL_TPS", "tps")}
