# Parked messages' own delivery times, and the slot being delivered at them.
"""A slot delivered at its messages' own times, not at its end (architecture/timer.md).

Java's timer log and wheel hold a parked message's slot (TIMER_OUT_MS), not its time. Its
record holds it: TIMER_DELIVER_MS as sent, or TIMER_DELAY_SEC / TIMER_DELAY_MS counted from the
put (broker/timer_message.py ``deliver_ms``, Java's precedence). The put rule ran at or before
the record's store timestamp, so the same rule at the store timestamp gives a time at or after
the one the put asked for: never early. The enqueue reads every parked record's properties and
store timestamp anyway, so :class:`OwnTimes` keeps that time per slot and CommitLog offset
(memory only, at most ``OWN_TIMES_MAX`` messages; a roll or a time outside its slot is the
slot's end, as before; past the cap, none is held).

The slots parked before the worker's last start (after a restart, or a store moved from a Java
broker) were not seen by its enqueue: for them the conversion ahead reads the same rule's time
in C from each record it converts (_fast/timer_reput.pyx, the rule's C twin at the record's
store timestamp), held with the chunk (``HeldChunk.own_ms``); the running slot takes it for
the rows of the chunks held for it, checked by the same rule (:func:`in_slot_or_end`). A slot
that had begun before the worker's start (a kill -9 or a stop in its middle: it was due, so
never converted ahead) has rows with neither: when it begins, their times are read from their
parked records by the same C path (``read_times``: TimerStore._read_own_times), checked by
the same rule; a row converted ahead, or seen by this worker's enqueue, is not read again.

:class:`SlotInProgress` is the slot at the read time while it runs (and when it ends): which of
its messages (the rows of its plan's wanted list, which units only ever extend) are put, the
runs converted ahead for it not used yet, the cancel marks not used yet. The dequeue puts every
row whose own time has come (broker/timer.py); the read time moves past the slot when it ends,
after the rest. A kill -9 loses this state: the slot is delivered again from the timer log,
each message at its own time read from its record (what was put before comes again).
"""
import dataclasses
from array import array
from collections.abc import Callable

import numpy as np

from pybroker._fast.timer_reput import OWN_MS_NONE_VALUE
from pybroker.broker.timer_ahead import Taken
from pybroker.broker.timer_message import TimerRefused, deliver_ms
from pybroker.broker.timer_runs import HeldChunk, SlotPlan, Wanted

__all__ = ["OwnTimes", "SlotInProgress", "own_time", "in_slot_or_end", "OWN_TIMES_MAX",
           "OWN_MS_NONE", "ReadTimes"]

OWN_TIMES_MAX = 4_000_000       # messages whose own time is held (16 bytes each)
OWN_MS_NONE = OWN_MS_NONE_VALUE     # no own time known (Long.MIN: never within a slot)

# Each parked record's own time read from the record (OWN_MS_NONE where not read), for the
# rows of a Wanted (TimerStore._read_own_times: the conversion ahead's C path).
ReadTimes = Callable[[Wanted], np.ndarray]


def own_time(properties: dict[str, str], store_timestamp: int, slot_ms: int,
             precision_ms: int) -> int:
    """When the parked message of slot ``slot_ms`` is due: the put rule's time at its store
    timestamp, or the slot's end when that is not within the slot (a message rolled before, a
    value that is not a long, a record not parked by the rule). A message rolled before was
    stored again by its roll, later than its put: a delay counted from then is later still."""
    end_ms = slot_ms + precision_ms
    try:
        due_ms = deliver_ms(properties, store_timestamp)
    except (TimerRefused, KeyError):    # KeyError: none of the three (not the rule's)
        return end_ms
    return due_ms if _in_slot(due_ms, slot_ms, end_ms) else end_ms


def _in_slot(due_ms, slot_ms: int, end_ms: int):
    """Whether ``due_ms`` (an int, or an array: elementwise) is a time of the slot: after its
    start, at or before its end (the put rule parks nothing else there)."""
    return (slot_ms < due_ms) & (due_ms <= end_ms)


def in_slot_or_end(times: np.ndarray, slot_ms: int, precision_ms: int) -> np.ndarray:
    """:func:`own_time`'s check over times the conversion ahead read in C (the put rule at
    each record's store timestamp; OWN_MS_NONE where not read): each time within the slot,
    else the slot's end."""
    end_ms = slot_ms + precision_ms
    return np.where(_in_slot(times, slot_ms, end_ms), times, end_ms).astype(np.int64)


class OwnTimes:
    """Own times of parked messages per slot time, added in CommitLog order by the enqueue."""

    def __init__(self, entries_max: int = OWN_TIMES_MAX):
        self.entries_max = entries_max
        self.entries = 0
        self._slots: dict[int, tuple[array, array]] = {}

    def add(self, slot_ms: int, offset_py: int, due_ms: int) -> None:
        if self.entries >= self.entries_max:
            return
        offsets, times = self._slots.setdefault(slot_ms, (array("q"), array("q")))
        offsets.append(offset_py)
        times.append(due_ms)
        self.entries += 1

    def of(self, slot_ms: int, offsets: np.ndarray, missing: int) -> np.ndarray:
        """The own time of each message at CommitLog ``offsets`` of the slot; ``missing``
        where none is held (OWN_MS_NONE: the running slot reads it, or takes the slot's
        end)."""
        due = np.full(len(offsets), missing, np.int64)
        held = self._slots.get(slot_ms)
        if held is None or not len(offsets):
            return due
        known = np.frombuffer(held[0], np.int64)
        times = np.frombuffer(held[1], np.int64)
        if len(known) > 1 and (np.diff(known) < 0).any():      # enqueued again after a roll
            order = np.argsort(known, kind="stable")
            known, times = known[order], times[order]
        at = np.minimum(np.searchsorted(known, offsets), len(known) - 1)
        found = known[at] == offsets
        due[found] = times[at[found]]
        return due

    def forget(self, slot_ms: int) -> None:
        held = self._slots.pop(slot_ms, None)
        if held is not None:
            self.entries -= len(held[0])

    def forget_before(self, slot_ms: int) -> None:
        """Drop the slots before ``slot_ms`` (the read time walked past them)."""
        for stale in [time_ms for time_ms in self._slots if time_ms < slot_ms]:
            self.forget(stale)


@dataclasses.dataclass
class SlotInProgress:
    """The slot at the read time being delivered (see the module docstring)."""
    slot_ms: int
    entry: tuple[int, int, int]     # the wheel's (first, last, count) the plan was read at
    plan: SlotPlan
    due: np.ndarray                 # own time of each wanted row
    ahead: np.ndarray               # each row's time read from its record (ahead, or when
                                    # the slot began: read_times): the slot's end where none
                                    # (the enqueue's for a row added while the slot runs)
    done: np.ndarray                # rows put (or dropped by a cancel mark)
    held: list[tuple[int, HeldChunk]]  # (first row, chunk) converted ahead, not put
    converted_ms: int               # TIMER_DEQUEUE_MS the held chunks were written with
    cancelled: dict[str, dict[str, str]]    # cancel marks not used yet
    marks: set[str]                 # every cancel mark seen in the slot
    next_ms: int | None = None      # the earliest own time of a row not put (recount())

    @classmethod
    def start(cls, slot_ms: int, entry, plan: SlotPlan, due: np.ndarray,
              held: list[tuple[int, HeldChunk]], converted_ms: int, read_times: ReadTimes,
              precision_ms: int) -> "SlotInProgress":
        """The slot begun: ``due`` (the enqueue's times, OWN_MS_NONE where it has none) takes
        the times read ahead for the rows of the ``held`` chunks (not rolls); the rows with
        neither (the slot had begun before the worker's start) are read now (``read_times``);
        a time not within the slot is its end."""
        end_ms = slot_ms + precision_ms
        ahead = np.full(len(due), end_ms, np.int64)
        unread = due == OWN_MS_NONE
        for start, chunk in held:
            ahead[start:start + chunk.records] = in_slot_or_end(chunk.own_ms, slot_ms,
                                                                precision_ms)
            unread[start:start + chunk.records] = False
        ahead[plan.wanted.rolls] = end_ms       # a roll goes back at the end
        unread &= ~plan.wanted.rolls
        _read_into(ahead, unread, plan.wanted, read_times, slot_ms, precision_ms)
        due = np.where(due == OWN_MS_NONE, end_ms, due)
        state = cls(slot_ms, entry, plan, np.minimum(due, ahead), ahead,
                    np.zeros(len(due), bool), held, converted_ms, dict(plan.cancelled),
                    set(plan.cancelled))
        state.recount()
        return state

    @classmethod
    def follow(cls, state: "SlotInProgress | None", slot_ms: int, entry, plan: SlotPlan,
               due: np.ndarray, take: Callable[[int, SlotPlan], Taken], read_times: ReadTimes,
               precision_ms: int) -> "SlotInProgress":
        """``state`` refreshed with the slot read again, or the slot started: the runs
        converted ahead for it taken (``take``: AheadRuns.take), the times of rows known
        neither way read (``read_times``). A list that is not the old one extended (not
        seen: units are only added) starts the slot over: what was put comes again (at least
        once), nothing is lost."""
        if state is not None and state.slot_ms == slot_ms and state.extended_by(plan):
            state.refresh(entry, plan, due, read_times, precision_ms)
            return state
        taken = take(slot_ms, plan)
        held, start = [], 0
        for chunk in taken.chunks:
            held.append((start, chunk))
            start += chunk.records
        return cls.start(slot_ms, entry, plan, due, held, taken.converted_ms, read_times,
                         precision_ms)

    def extended_by(self, plan: SlotPlan) -> bool:
        """Whether ``plan``'s wanted list begins with the one this state was made of."""
        known = len(self.done)
        offsets = plan.wanted.offsets
        return len(offsets) >= known and np.array_equal(offsets[:known],
                                                        self.plan.wanted.offsets)

    def refresh(self, entry, plan: SlotPlan, due: np.ndarray, read_times: ReadTimes,
                precision_ms: int) -> None:
        """The slot read again (units were added: its wanted list only grows): new rows not
        put (their times the enqueue's, or read as :meth:`start` reads them), new cancel
        marks added; runs held ahead dropped once a new mark came (they were converted
        without it)."""
        known = len(self.done)
        unread = due == OWN_MS_NONE
        unread[:known] = False
        unread &= ~plan.wanted.rolls
        due = np.where(due == OWN_MS_NONE, self.slot_ms + precision_ms, due)
        _read_into(due, unread, plan.wanted, read_times, self.slot_ms, precision_ms)
        self.ahead = np.concatenate((self.ahead, due[known:]))  # the enqueue's, or read
        self.entry, self.plan, self.due = entry, plan, np.minimum(due, self.ahead)
        self.done = np.concatenate((self.done, np.zeros(len(due) - known, bool)))
        new_marks = plan.cancelled.keys() - self.marks
        if new_marks:
            self.held = []
            for key in new_marks:
                self.cancelled[key] = plan.cancelled[key]
            self.marks |= new_marks
        self.recount()

    def recount(self) -> None:
        """``next_ms`` after rows were added or put (a turn with nothing due reads only it)."""
        waiting = self.due[~self.done]
        self.next_ms = int(waiting.min()) if len(waiting) else None

    def due_rows(self, now_ms: int) -> np.ndarray:
        """Indexes of the rows not put whose own time has come, in the slot's order."""
        return np.flatnonzero(~self.done & (self.due <= now_ms))

    def held_due(self, now_ms: int) -> list[tuple[int, HeldChunk]]:
        """The held chunks whose every row is due and none put (taken out of ``held``); a
        chunk with a row put another way is dropped."""
        ready, waiting = [], []
        for start, chunk in self.held:
            end = start + chunk.records
            if self.done[start:end].any():
                continue
            if (self.due[start:end] <= now_ms).all():
                ready.append((start, chunk))
            else:
                waiting.append((start, chunk))
        self.held = waiting
        return ready


def _read_into(times: np.ndarray, unread: np.ndarray, wanted: Wanted, read_times: ReadTimes,
               slot_ms: int, precision_ms: int) -> None:
    """``times`` of the rows ``unread`` (a mask over ``wanted``) set to their own times read
    from their parked records, checked by own_time's rule (the slot's end where not within
    it); nothing read when no row is."""
    rows = np.flatnonzero(unread)
    if len(rows):
        read = read_times(Wanted(*(column[rows] for column in wanted)))
        times[rows] = in_slot_or_end(read, slot_ms, precision_ms)
