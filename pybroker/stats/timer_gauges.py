# The 5.x timer's figures as Java names them: brokerStatus keys, metrics-endpoint gauges.
"""Where the timer stands, read from outside the timer worker (docs/statistics.md).

Sources: the control block's timer line (the worker publishes its read time, write time,
enqueue offset, TPS and last enqueue every turn), the wheel file mapped read-only (parked
counts, Java's getAllNum), rmq_sys_wheel_timer's consume queue (enqueue lag) and
``config/timermetrics`` (parked per topic). Java's getters, one each:

=============================  ===============================================================
timerReadBehind                (now - read time) / 1000 s        (getDequeueBehind)
timerOffsetBehind              wheel-topic max offset - enqueue offset (getEnqueueBehindMessages)
timerCongestNum                messages parked from the read time on (getAllCongestNum)
timerEnqueueTps / DequeueTps   last 10 s window, Float.toString
=============================  ===============================================================

Without the timer (``timerWheelEnable=false``) the keys read as Java's: "0" and "0.0".
"""
import os
import time
from collections.abc import Callable

import numpy as np

from pybroker.protocol.constants import SystemTopic
from pybroker.store import paths
from pybroker.store.timer_metrics import TimerMetrics, load_timer_metrics
from pybroker.store.timer_wheel import TimerWheel

__all__ = ["TimerGauges", "java_float", "TIMER_DIST_SECONDS"]

# Java TimerMetrics.timerDist: the bounds (s) of rocketmq_timer_message_snapshot.
TIMER_DIST_SECONDS = (5, 60, 300, 900, 3600, 14400, 28800, 86400)
_RECENT_ENQUEUE_MS = 2000       # Java getEnqueueBehindMillis: only right after an enqueue


def java_float(value: float) -> str:
    """``Float.toString`` of ``value`` rounded to a float: the shortest text that reads back
    as the same float ("0.0", "0.44569167"; d.dddE<n> outside 1e-3 .. 1e7)."""
    single = np.float32(value)
    if single == 0:
        return "0.0"
    magnitude = abs(float(single))
    if 1e-3 <= magnitude < 1e7:
        text = np.format_float_positional(single, unique=True, trim="0")
        return text if not text.endswith(".") else text + "0"
    text = np.format_float_scientific(single, unique=True, trim="0", exp_digits=1)
    mantissa, exponent = text.split("e")
    if "." not in mantissa or mantissa.endswith("."):
        mantissa = mantissa.rstrip(".") + ".0"
    return f"{mantissa}E{int(exponent)}"


class TimerGauges:
    """The timer's figures of one broker. ``control()`` is the running generation's control
    block (or None); ``reader`` reads the wheel topic's queue."""

    def __init__(self, config, control: Callable[[], object], reader):
        self.config = config
        self.store = config.store
        self.enabled = self.store.timer_wheel_enable
        self.control = control
        self.reader = reader
        self._wheel: TimerWheel | None = None

    def wheel(self) -> TimerWheel | None:
        """The wheel mapped read-only, once the timer worker has made it."""
        if self._wheel is None:
            path = paths.timer_wheel_path(self.store.store_path_root_dir)
            if not os.path.exists(path):
                return None
            self._wheel = TimerWheel(path, self.store.timer_precision_effective_ms,
                                     read_only=True)
        return self._wheel

    def _line(self):
        control = self.control()
        return None if control is None else control.timer()

    def read_time_ms(self) -> int:
        line = self._line()
        return 0 if line is None else line.read_time_ms

    def congest_num(self) -> int:
        """Messages parked from the read time on (0 before the worker published one)."""
        wheel, read_time = self.wheel(), self.read_time_ms()
        if wheel is None or read_time == 0:
            return 0
        return wheel.all_num(read_time)

    def enqueue_behind_messages(self) -> int:
        line = self._line()
        if line is None:
            return 0
        max_offset = self.reader.get_max_offset_in_queue(SystemTopic.WHEEL_TIMER, 0)
        return max(max_offset - line.queue_offset, 0)

    def enqueue_behind_ms(self, now_ms: int) -> int:
        """Java getEnqueueBehindMillis: store-to-enqueue delay of the last enqueue, 0 when
        that was more than 2 s ago."""
        line = self._line()
        if line is None or now_ms - line.last_enqueue_ms >= _RECENT_ENQUEUE_MS:
            return 0
        return max(now_ms - line.last_enqueue_store_ms, 0)

    def dequeue_behind_s(self, now_ms: int) -> int:
        read_time = self.read_time_ms()
        return max(now_ms - read_time, 0) // 1000 if read_time else 0

    def runtime_info(self) -> dict[str, str]:
        """The five brokerStatus keys (Java 5.x AdminBrokerProcessor)."""
        if not self.enabled:
            return {"timerReadBehind": "0", "timerOffsetBehind": "0", "timerCongestNum": "0",
                    "timerEnqueueTps": "0.0", "timerDequeueTps": "0.0"}
        line = self._line()
        now_ms = time.time_ns() // 1_000_000
        return {"timerReadBehind": str(self.dequeue_behind_s(now_ms)),
                "timerOffsetBehind": str(self.enqueue_behind_messages()),
                "timerCongestNum": str(self.congest_num()),
                "timerEnqueueTps": java_float(line.enqueue_tps_milli / 1000 if line else 0.0),
                "timerDequeueTps": java_float(line.dequeue_tps_milli / 1000 if line else 0.0)}

    def metrics(self) -> TimerMetrics:
        """``config/timermetrics`` (empty when absent)."""
        return load_timer_metrics(paths.config_path(self.store.store_path_root_dir,
                                                    paths.TIMER_METRICS_CONFIG))

    def distribution(self) -> list[tuple[int, int]]:
        """(bound s, messages parked in (previous bound, bound]) from now, Java's
        timer_message_snapshot."""
        wheel = self.wheel()
        precision = self.store.timer_precision_effective_ms
        now_ms = time.time_ns() // 1_000_000 // precision * precision
        if wheel is None:
            return [(bound, 0) for bound in TIMER_DIST_SECONDS]
        nums = wheel.nums_between(now_ms, TIMER_DIST_SECONDS[-1] * 1000 // precision)
        result, start = [], 0
        for bound in TIMER_DIST_SECONDS:
            end = bound * 1000 // precision
            result.append((bound, int(nums[start:end].sum())))
            start = end
        return result

    def close(self) -> None:
        if self._wheel is not None:
            self._wheel.close()
            self._wheel = None
