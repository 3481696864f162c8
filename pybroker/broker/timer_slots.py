# The parked count of a timer slot, read from the wheel by the send path (congestion rule).
"""What the put-time congestion rule (broker/timer_message.py ``TimerRules.slot_num``: Java's
``timerCongestNumEachSlot``, TimerMessageStore.isReject) reads: the messages parked in the slot
of a time, from the timer worker's ``timerwheel`` mapped read-only (it is that file's only
writer; docs/architecture/timer.md). A worker maps it only when the rule can refuse (the limit
below Integer.MAX_VALUE) and only once the timer worker has made the file; before that every
slot counts 0, as an empty wheel does.
"""
import os

from pybroker.broker.timer_message import CONGEST_NEVER
from pybroker.store import paths
from pybroker.store.timer_wheel import TimerWheel

__all__ = ["WheelSlotCounts", "slot_counts_of"]



class WheelSlotCounts:
    """``counts(slot_ms)``: messages parked in the wheel slot of ``slot_ms`` (0 for a slot of
    another lap or before the wheel exists)."""

    def __init__(self, store_path_root_dir: str, precision_ms: int):
        self._path = paths.timer_wheel_path(store_path_root_dir)
        self._precision_ms = precision_ms
        self._wheel: TimerWheel | None = None

    def __call__(self, slot_ms: int) -> int:
        wheel = self._wheel
        if wheel is None:
            if not os.path.exists(self._path):
                return 0
            wheel = self._wheel = TimerWheel(self._path, self._precision_ms, read_only=True)
        return wheel.slot(slot_ms).num


def slot_counts_of(store) -> WheelSlotCounts | None:
    """The slot counts a send path of a broker with StoreConfig ``store`` reads, or None when
    its congestion rule can never refuse (nothing to read)."""
    if not store.timer_wheel_enable or store.timer_congest_num_each_slot >= CONGEST_NEVER:
        return None
    return WheelSlotCounts(store.store_path_root_dir, store.timer_precision_effective_ms)
