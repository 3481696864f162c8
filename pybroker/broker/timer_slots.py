# The parked count of a timer slot, read from the wheel by the send path (congestion rule).
"""What the put-time congestion rule (broker/timer_message.py ``TimerRules.slot_num``: Java's
``timerCongestNumEachSlot``, TimerMessageStore.isReject) reads: the messages parked in the slot
of a time, from the timer worker's ``timerwheel`` mapped read-only (it is that file's only
writer; docs/architecture/timer.md). A worker maps it only when the rule can refuse (the limit
below Integer.MAX_VALUE) and only once the timer worker has made the file; before that every
slot counts 0, as an empty wheel does. The send fast path reads the same map in C
(_fast/send/timer.pyx): :meth:`WheelSlotCounts.follow` hands it the map once there is one.
"""
import os
from collections.abc import Callable

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
        self._followers: list[Callable[[memoryview], object]] = []

    def __call__(self, slot_ms: int) -> int:
        wheel = self._wheel or self._mapped()
        return 0 if wheel is None else wheel.slot(slot_ms).num

    def follow(self, on_mapped: Callable[[memoryview], object]) -> None:
        """Call ``on_mapped(view)`` with the wheel's read-only bytes once it is mapped (now,
        when the timer worker has made the file already; else at the first count that finds
        it)."""
        self._followers.append(on_mapped)
        wheel = self._wheel or self._mapped()
        if wheel is not None:
            on_mapped(wheel.view())

    def _mapped(self) -> TimerWheel | None:
        if not os.path.exists(self._path):
            return None
        wheel = self._wheel = TimerWheel(self._path, self._precision_ms, read_only=True)
        for on_mapped in self._followers:
            on_mapped(wheel.view())
        return wheel


def slot_counts_of(store) -> WheelSlotCounts | None:
    """The slot counts a send path of a broker with StoreConfig ``store`` reads, or None when
    its congestion rule can never refuse (nothing to read)."""
    if not store.timer_wheel_enable or store.timer_congest_num_each_slot >= CONGEST_NEVER:
        return None
    return WheelSlotCounts(store.store_path_root_dir, store.timer_precision_effective_ms)
