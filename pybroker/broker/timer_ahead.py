# Re-put runs of the timer's next slots, converted before they fall due and held in memory.
"""The slots falling due next, turned into re-put runs ahead of time (architecture/timer.md).

A due slot's delivery was: read its parked records, convert them into runs (C), put the runs.
The reading and converting do not depend on the clock, so :class:`AheadRuns` does them for the
used slots that have not begun, the nearest first: every one beginning within ``AHEAD_MS`` of
the write time, and beyond it, as far as the roll window reaches (no unit is parked further),
only a slot too large to be converted in time when due (:func:`far_min_units`: a small one
would be held for nothing until it falls due, as the POP check-points parked for their whole
invisible time were; it is converted once within ``AHEAD_MS``), one chunk of
``DEQUEUE_CHUNK`` records per call of :meth:`AheadRuns.step`
(the worker calls it when a turn leaves time), and holds each converted chunk in the worker's
memory as recipes (``timer_runs.hold``: the new records without their bodies, which stay in the
parked records), at most ``timerPreconvertMaxBytes`` bytes of recipes; a nearer slot takes the
room of the farthest one held. A slot beginning beyond ``AHEAD_MS`` is read from the timer log
again only when it has doubled (by at least a chunk) since it was read, or has come to rest
(no unit added between two looks, at the latest the next second): a burst still being parked
there costs reads in proportion to its size, not one read a chunk; within ``AHEAD_MS`` every
change is read. When the slot begins,
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
import bisect
import dataclasses
from typing import NamedTuple, Protocol

import numpy as np

from pybroker.broker.timer_runs import CChunk, HeldChunk, SlotPlan, Wanted, hold
from pybroker.store.settings import StoreConfig
from pybroker.store.timer_wheel import TimerWheel

__all__ = ["AheadRuns", "AHEAD_MS", "far_min_units"]

# Slots beginning within this of the write time are all converted ahead, planned again at
# every change of their wheel entry, and their parked bytes count as coming (the flusher's
# pre-fault); further ones only when large (far_min_units), and planned again when they have
# doubled (see the module docstring).
AHEAD_MS = 3000
# A slot beginning beyond AHEAD_MS is converted ahead when converting it at due time would
# take 1 / FAR_SHARE of a precision or more at DUE_CONVERT_NS a unit (the due-time
# conversion's CPU a parked record, 1.0-1.6 µs measured on a busy box, rounded up for a
# worker sharing the cores: architecture/timer.md, "Beyond 3 s, only what would be late").
DUE_CONVERT_NS = 2000
FAR_SHARE = 10
_NEVER = 1 << 62


def far_min_units(precision_ms: int) -> int:
    """The units a slot beginning beyond ``AHEAD_MS`` needs to be converted ahead: as many
    as the due-time conversion gets through in a tenth of a precision (50,000 at 1 s)."""
    return precision_ms * 1_000_000 // (DUE_CONVERT_NS * FAR_SHARE)


class AheadSource(Protocol):
    """What the conversion ahead reads of the timer (broker/timer.py's TimerStore, which
    imports this module)."""
    dequeue_enabled: bool
    settings: StoreConfig
    curr_read_time_ms: int
    curr_write_time_ms: int
    precision_ms: int
    roll_window_slots: int
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
    stopped: bool = False                   # a chunk C did not take whole
    full: bool = False                      # its next chunk did not fit under the cap
    seen: tuple[int, int, int] = (-1, -1, -1)   # the wheel slot at the last look


class AheadRuns:
    """The runs converted ahead, per slot time (see the module docstring); ``bytes_max`` 0
    converts nothing ahead; ``precision_ms``: the timer's, for :func:`far_min_units`."""

    def __init__(self, bytes_max: int, precision_ms: int):
        self.bytes_max = bytes_max
        self.far_min_units = far_min_units(precision_ms)
        self.held_bytes = 0
        self._slots: dict[int, _Ready] = {}
        self._passed: dict[int, tuple[int, int, int]] = {}   # C did not take the first chunk
        self._used: list[int] | None = None     # used slot times from the read time, in order
        self._cursor = 0                        # _used before it: nothing to do for now
        self._cursor_write_ms = -1
        # A slot whose chunk found no room (nothing farther held to drop): no slot from it
        # on can find any until bytes are given back.
        self._blocked_ms = _NEVER

    def note(self, slot_ms: int, mark: bool) -> None:
        """A unit was added to the slot at ``slot_ms`` (the enqueue): it is looked at again;
        a cancel mark (``mark``) drops what is held for it (held runs must have the slot's
        marks)."""
        if mark:
            self.forget(slot_ms)
        used = self._used
        if used is None:
            return
        at = bisect.bisect_left(used, slot_ms)
        if at == len(used) or used[at] != slot_ms:
            used.insert(at, slot_ms)
        self._cursor = min(self._cursor, at)

    def step(self, store: AheadSource, chunk_records: int) -> bool:
        """Convert the next chunk of the nearest used slot not begun that has one left; False
        when there was nothing to do (or the cap is taken by nearer slots)."""
        if self.bytes_max <= 0 or not store.dequeue_enabled or \
                store.settings.timer_stop_dequeue:
            return False
        write_ms, precision = store.curr_write_time_ms, store.precision_ms
        used = self._used_from(store)
        if write_ms != self._cursor_write_ms:       # slots came within AHEAD_MS
            self._cursor, self._cursor_write_ms = 0, write_ms
        near_until = write_ms + AHEAD_MS
        # A slot that has begun is the dequeue's (it takes what is held for it then).
        index = max(self._cursor, bisect.bisect_left(used, write_ms + precision))
        while index < len(used) and used[index] < self._blocked_ms:
            slot_ms = used[index]
            slot = store.wheel.slot(slot_ms)
            near = slot_ms < near_until
            # Beyond AHEAD_MS only a slot too large to convert in time when due; a smaller
            # one is looked at again when the write time moves (the cursor goes back).
            if slot.time_ms == slot_ms and (near or slot.num >= self.far_min_units):
                ready = self._ready(store, slot_ms, (slot.first_pos, slot.last_pos, slot.num),
                                    near, chunk_records)
                if ready is not None and not ready.stopped and not ready.full and \
                        ready.covered < len(ready.plan.wanted.offsets):
                    self._cursor = index
                    if not self._room(slot_ms, 1):
                        self._blocked_ms = slot_ms
                        return False
                    self._convert(store, slot_ms, ready, chunk_records)
                    return True
            index += 1
        self._cursor = index
        return False

    def _used_from(self, store: AheadSource) -> list[int]:
        """The used slot times from the read time on (the wheel scanned once, the enqueue's
        :meth:`note` after), those before it dropped with what was held for them."""
        used = self._used
        first = store.curr_read_time_ms
        if used is None:            # nothing held yet: only slots not begun matter
            write_ms, precision = store.curr_write_time_ms, store.precision_ms
            used = self._used = store.wheel.used_between(
                max(first, write_ms + precision), write_ms + store.roll_window_slots * precision)
        passed = bisect.bisect_left(used, first)
        if passed:
            for slot_ms in used[:passed]:     # passed without a take (a skipped walk)
                self.forget(slot_ms)
                self._passed.pop(slot_ms, None)
            del used[:passed]
            self._cursor = max(self._cursor - passed, 0)
        return used

    def _room(self, slot_ms: int, need: int) -> bool:
        """Whether the cap leaves ``need`` bytes for the slot at ``slot_ms``, after dropping
        what is held for the farthest slots beyond it."""
        while self.held_bytes + need > self.bytes_max:
            farther = [held_ms for held_ms, ready in self._slots.items()
                       if held_ms > slot_ms and ready.held_bytes]
            if not farther:
                return False
            self.forget(max(farther))
        return True

    def _ready(self, store: AheadSource, slot_ms: int, entry: tuple[int, int, int],
               near: bool, chunk_records: int) -> _Ready | None:
        """The slot's state, planned again when the wheel says units were added to it since
        (its chunks kept while still valid): within AHEAD_MS at every change, beyond it once
        it doubled or came to rest (no unit since the last look); None when C did not take
        its first chunk (planned again only when near or doubled)."""
        ready = self._slots.get(slot_ms)
        known = ready.entry if ready is not None else self._passed.get(slot_ms)
        if known is not None and (known == entry or not near and
                                  entry[2] - known[2] < max(known[2], chunk_records)):
            if ready is None or known == entry or ready.seen != entry:
                if ready is not None:
                    ready.seen = entry
                return ready
        self._passed.pop(slot_ms, None)
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

    def _convert(self, store: AheadSource, slot_ms: int, ready: _Ready,
                 chunk_records: int) -> None:
        wanted, start = ready.plan.wanted, ready.covered
        chunk = store.convert_ahead(type(wanted)(*(column[start:start + chunk_records]
                                                   for column in wanted)),
                                    ready.cancelled, ready.converted_ms)
        held = hold(chunk) if chunk is not None else None
        if held is None:
            ready.stopped = True          # the rest of the slot is converted at due time
            if not ready.chunks:          # nothing held: only the entry is kept
                del self._slots[slot_ms]
                self._passed[slot_ms] = ready.entry
            return
        if not self._room(slot_ms, held.held_bytes):
            ready.full = True             # until bytes are given back
            self._blocked_ms = slot_ms
            return
        for key in held.dropped_keys:
            del ready.cancelled[key]
        ready.chunks.append(held)
        ready.covered += held.records
        ready.held_bytes += held.held_bytes
        ready.out_bytes += held.out_length
        self.held_bytes += held.held_bytes

    def coming_bytes(self, write_ms: int) -> int:
        """About the CommitLog bytes the slots planned ahead that begin within AHEAD_MS of
        ``write_ms`` will be put as when they fall due (converted or not: what is not held is
        converted then), held or not (``bytes_max`` bounds the recipes, not the puts); the
        flusher faults their pages in ahead of the appender (store/prefault.py, at most its
        COMING_BYTES_MAX)."""
        return sum(max(ready.out_bytes, ready.planned_bytes)
                   for slot_ms, ready in self._slots.items()
                   if slot_ms < write_ms + AHEAD_MS)

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
        if ready is not None and ready.held_bytes:
            self.held_bytes -= ready.held_bytes
            for other in self._slots.values():
                other.full = False                # room again: tried again
            self._cursor, self._blocked_ms = 0, _NEVER

    def forget_all(self) -> None:
        for slot_ms in list(self._slots):
            self.forget(slot_ms)
        self._passed.clear()
        self._used, self._cursor, self._blocked_ms = None, 0, _NEVER

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
