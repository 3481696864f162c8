# Re-put runs of the timer's next slots, converted before they fall due and held in memory.
"""The slots falling due next, turned into re-put runs ahead of time (architecture/timer.md).

A due slot's delivery was: read its parked records, convert them into runs (C), put the runs.
The reading and converting do not depend on the clock, so :class:`AheadRuns` does them for the
slots that begin within ``AHEAD_MS`` (a slot's messages fall due from its start on), one chunk
of ``DEQUEUE_CHUNK`` records per call of :meth:`AheadRuns.step` (the worker calls it when a turn
leaves time), and holds each converted chunk in the worker's memory as recipes
(``timer_runs.hold``: the new records without their bodies, which stay in the parked records),
at most ``timerPreconvertMaxBytes`` bytes of recipes. When the slot begins,
:meth:`TimerStore.dequeue` reads the slot again (the timer log and wheel are the truth), takes
the chunks held for it and puts each once all its messages' own times have come
(broker/timer_own.py): its records assembled from the recipes and the parked bodies
(``timer_runs.assembled``), TIMER_DEQUEUE_MS rewritten to the clock of the put
(``_fast/timer_reput.restamp``); the rest is converted as it falls due.
Nothing is stored before its own time and nothing of this is on disk: a kill -9 loses only
work, and the next worker delivers the slot from the timer log.

Held runs are used only while they are still what a conversion at due time would make: the
slot's cancel marks are the same set as when they were converted (a mark that came later drops
them: the marks decide which records are dropped, in the slot's order) and the records they
were converted from are still the first ones of the slot's list (units enqueued later are
added after them and converted at due time). A chunk C does not take whole (a roll, a record
left to the Python rule) ends the slot's conversion ahead: what follows it is converted at due
time, in the slot's order.
"""
import dataclasses
from typing import NamedTuple, Protocol

import numpy as np

from pybroker.broker.timer_runs import CChunk, HeldChunk, SlotPlan, Wanted, hold
from pybroker.store.settings import StoreConfig
from pybroker.store.timer_wheel import TimerWheel

__all__ = ["AheadRuns", "AHEAD_MS"]

# Slots beginning within this of the write time. A slot's messages are put from its start (at
# their own times, broker/timer_own.py): 3 s keeps the 2-3 s of conversion a slot had when it
# was put at its end with a 2 s window.
AHEAD_MS = 3000


class AheadSource(Protocol):
    """What the conversion ahead reads of the timer (broker/timer.py's TimerStore, which
    imports this module)."""
    dequeue_enabled: bool
    settings: StoreConfig
    curr_read_time_ms: int
    curr_write_time_ms: int
    precision_ms: int
    wheel: TimerWheel

    def plan_slot(self, slot) -> SlotPlan: ...

    def convert_ahead(self, wanted: Wanted, cancelled: dict[str, dict[str, str]],
                      dequeue_ms: int) -> CChunk | None: ...


class Taken(NamedTuple):
    """What :meth:`AheadRuns.take` hands to the dequeue: the chunks converted ahead, in the
    slot's order, and the TIMER_DEQUEUE_MS they were converted with."""
    chunks: list[HeldChunk]
    converted_ms: int


@dataclasses.dataclass
class _Ready:
    entry: tuple[int, int, int]             # the wheel slot (first, last, num) when planned
    plan: SlotPlan
    marks: frozenset[str]                   # the slot's cancel marks when converted
    cancelled: dict[str, dict[str, str]]    # the marks not used by the chunks so far
    converted_ms: int                       # TIMER_DEQUEUE_MS written (the slot's due time)
    chunks: list = dataclasses.field(default_factory=list)
    covered: int = 0                        # records of plan.wanted the chunks were made of
    held_bytes: int = 0                     # the recipes' bytes (what the cap counts)
    out_bytes: int = 0                      # the re-put records' bytes they stand for
    planned_bytes: int = 0                  # the parked records' bytes of plan.wanted
    stopped: bool = False                   # a chunk C did not take whole, or the cap


class AheadRuns:
    """The runs converted ahead, per slot time (see the module docstring); ``bytes_max`` 0
    converts nothing ahead."""

    def __init__(self, bytes_max: int):
        self.bytes_max = bytes_max
        self.held_bytes = 0
        self._slots: dict[int, _Ready] = {}

    def step(self, store: AheadSource, chunk_records: int) -> bool:
        """Convert the next chunk of the first slot due within AHEAD_MS that has one left;
        False when there was nothing to do."""
        if self.bytes_max <= 0 or not store.dequeue_enabled or \
                store.settings.timer_stop_dequeue:
            return False
        read_ms, precision = store.curr_read_time_ms, store.precision_ms
        for stale in [slot_ms for slot_ms in self._slots if slot_ms < read_ms]:
            self.forget(stale)          # passed without a dequeue (a skipped walk)
        # A slot that has begun is the dequeue's (it takes what is held for it then).
        slot_ms = max(read_ms, store.curr_write_time_ms + precision)
        while slot_ms < store.curr_write_time_ms + AHEAD_MS:
            if self.held_bytes >= self.bytes_max:
                return False
            slot = store.wheel.slot(slot_ms)
            if slot.time_ms == slot_ms:
                ready = self._ready(store, slot_ms, (slot.first_pos, slot.last_pos, slot.num))
                if not ready.stopped and ready.covered < len(ready.plan.wanted.offsets):
                    self._convert(store, ready, chunk_records)
                    return True
            slot_ms += precision
        return False

    def _ready(self, store: AheadSource, slot_ms: int, entry: tuple[int, int, int]) -> _Ready:
        """The slot's state, planned again when the wheel says units were added to it since
        (its chunks kept while still valid)."""
        ready = self._slots.get(slot_ms)
        if ready is not None and ready.entry == entry:
            return ready
        plan = store.plan_slot(store.wheel.slot(slot_ms))
        planned = int(plan.wanted.sizes.sum())
        if ready is not None and self._valid(ready, plan):
            ready.entry, ready.plan, ready.planned_bytes = entry, plan, planned
            return ready
        if ready is not None:
            self.forget(slot_ms)
        ready = self._slots[slot_ms] = _Ready(
            entry, plan, frozenset(plan.cancelled), dict(plan.cancelled),
            slot_ms + store.precision_ms, planned_bytes=planned)
        return ready

    def _convert(self, store: AheadSource, ready: _Ready, chunk_records: int) -> None:
        wanted, start = ready.plan.wanted, ready.covered
        chunk = store.convert_ahead(type(wanted)(*(column[start:start + chunk_records]
                                                   for column in wanted)),
                                    ready.cancelled, ready.converted_ms)
        held = hold(chunk) if chunk is not None else None
        if held is None or self.held_bytes + held.held_bytes > self.bytes_max:
            ready.stopped = True          # the rest of the slot is converted at due time
            return
        for key in held.dropped_keys:
            del ready.cancelled[key]
        ready.chunks.append(held)
        ready.covered += held.records
        ready.held_bytes += held.held_bytes
        ready.out_bytes += held.out_length
        self.held_bytes += held.held_bytes

    def coming_bytes(self) -> int:
        """About the CommitLog bytes the slots planned ahead will be put as when they fall
        due (converted or not: what is not held is converted then), at most ``bytes_max``;
        the flusher faults their pages in ahead of the appender (store/prefault.py)."""
        coming = sum(max(ready.out_bytes, ready.planned_bytes)
                     for ready in self._slots.values())
        return min(coming, self.bytes_max)

    def plan_of(self, slot_ms: int, slot) -> SlotPlan | None:
        """The plan read ahead for the slot when the wheel's entry (first, last, count) is
        still the one it was read at: no unit was added since (units are never taken away
        but by a restart), so the timer log would give the same; None otherwise."""
        ready = self._slots.get(slot_ms)
        if ready is None or ready.entry != (slot.first_pos, slot.last_pos, slot.num):
            return None
        return ready.plan

    def take(self, slot_ms: int, plan: SlotPlan) -> Taken:
        """The chunks held for the slot due now (``plan``: read at due time), or none when
        they no longer match it; the slot is forgotten either way."""
        ready = self._slots.get(slot_ms)
        if ready is None:
            return Taken([], 0)
        self.forget(slot_ms)
        if not self._valid(ready, plan):
            return Taken([], 0)
        return Taken(ready.chunks, ready.converted_ms)

    def forget(self, slot_ms: int) -> None:
        """Drop what is held for the slot (a cancel mark came for it, or it is due)."""
        ready = self._slots.pop(slot_ms, None)
        if ready is not None:
            self.held_bytes -= ready.held_bytes

    def forget_all(self) -> None:
        for slot_ms in list(self._slots):
            self.forget(slot_ms)

    @staticmethod
    def _valid(ready: _Ready, plan: SlotPlan) -> bool:
        """Whether the chunks held are what converting ``plan`` would begin with: the same
        cancel marks, and the records they were converted from first in the same order."""
        if frozenset(plan.cancelled) != ready.marks:
            return False
        covered = ready.covered
        held, now = ready.plan.wanted, plan.wanted
        if len(now.offsets) < covered:
            return False
        return all(np.array_equal(old[:covered], new[:covered])
                   for old, new in zip(held, now, strict=True))
