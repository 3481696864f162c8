"""Parked messages' own times (broker/timer_own.py): the put rule at the store time, only
within the message's slot, never earlier than the put asked for; kept per slot and offset."""
import numpy as np
import pytest

from pybroker.broker.timer_ahead import Taken
from pybroker.broker.timer_message import TimerRules, redirect_timer
from pybroker.broker.timer_own import OWN_MS_NONE, OwnTimes, SlotInProgress, own_time
from pybroker.broker.timer_runs import HeldChunk, SlotPlan, Wanted


S = 1_800_000_000_000
P = 1000
NONE = OWN_MS_NONE


def _never_read(wanted):
    raise AssertionError(f"read the records at {wanted.offsets.tolist()}")


@pytest.mark.parametrize("properties, store_ms, expected", [
    ({"TIMER_DELIVER_MS": str(S + 10)}, S - 5000, S + 10),
    ({"TIMER_DELIVER_MS": str(S + 1000)}, S - 5000, S + 1000),     # the slot's last ms
    ({"TIMER_DELAY_MS": "1500"}, S - 1000, S + 500),
    ({"TIMER_DELAY_SEC": "2", "TIMER_DELAY_MS": "1", "TIMER_DELIVER_MS": "1"},
     S - 1700, S + 300),                                            # Java's precedence
    ({"TIMER_DELAY_MS": "1500"}, S - 400, S + P),     # past the slot (stored late): its end
    ({"TIMER_DELIVER_MS": str(S)}, 0, S + P),         # before the slot: not the rule's
    ({"TIMER_DELAY_SEC": "x"}, S, S + P),             # not a long
    ({}, S, S + P),                                   # none of the three
])
def test_own_time(properties, store_ms, expected):
    assert own_time(properties, store_ms, S, P) == expected


def test_never_earlier_than_the_put_rule_asked():
    """Whatever the delay and however late after the rule the record was stored, the time read
    back is at or after the time the put asked for, and within the slot it was parked in."""
    rng = np.random.default_rng(7)
    rules = TimerRules(precision_ms=P)
    for _ in range(2000):
        now = S + int(rng.integers(0, 5000))
        name, value = [("TIMER_DELAY_MS", int(rng.integers(1, 9000))),
                       ("TIMER_DELAY_SEC", int(rng.integers(1, 9))),
                       ("TIMER_DELIVER_MS", now + int(rng.integers(1, 9000)))][rng.integers(3)]
        properties = {name: str(value)}
        asked = now + value * (1000 if name == "TIMER_DELAY_SEC" else 1) \
            if name != "TIMER_DELIVER_MS" else value
        redirect_timer("T", 0, properties, rules, now)
        slot_ms = int(properties["TIMER_OUT_MS"])
        stored = now + int(rng.integers(0, 300))
        due = own_time(properties, stored, slot_ms, P)
        assert asked <= due <= slot_ms + P and due > slot_ms


def test_own_times_by_offset_per_slot():
    times = OwnTimes(entries_max=5)
    for offset, due in ((100, S + 5), (200, S + 7), (300, S + 1)):
        times.add(S, offset, due)
    times.add(S + P, 400, S + P + 3)
    times.add(S, 50, S + 9)                    # enqueued again, out of CommitLog order
    times.add(S, 60, S + 9)                    # past the cap: not kept
    assert times.entries == 5
    got = times.of(S, np.array([300, 999, 100, 50, 200, 60], np.int64), S + P)
    assert got.tolist() == [S + 1, S + P, S + 5, S + 9, S + 7, S + P]
    assert times.of(S + 2 * P, np.array([1], np.int64), 7).tolist() == [7]
    times.forget_before(S + P)
    assert times.entries == 1 and times.of(S, np.array([100]), 0).tolist() == [0]
    times.forget(S + P)
    assert times.entries == 0


def test_a_slot_read_again_not_extending_its_list_starts_over():
    """Units are only ever added to a slot, so its list read again extends the old one; if
    it ever did not, the running slot's state starts over (what was put comes again: at least
    once) rather than marking the wrong rows put."""
    def plan(offsets):
        column = np.array(offsets, np.int64)
        return SlotPlan(np.zeros(len(column), bool), {}, Wanted(
            column, column, column, np.zeros(len(column), bool)), 0, 0)

    def no_runs(slot_ms, read):
        return Taken([], 0)
    first = SlotInProgress.follow(None, S, (1, 1, 2), plan([10, 20]), np.array([S + 1, S + 2]),
                                  no_runs, _never_read, P)
    first.done[0] = True
    grown = SlotInProgress.follow(first, S, (1, 2, 3), plan([10, 20, 30]),
                                  np.array([S + 1, S + 2, S + 3]), no_runs, _never_read, P)
    assert grown is first and grown.done.tolist() == [True, False, False]
    other = SlotInProgress.follow(grown, S, (5, 6, 3), plan([10, 30, 20]),
                                  np.array([S + 1, S + 3, S + 2]), no_runs, _never_read,
                                  P)
    assert other is not grown and not other.done.any()
    assert other.due_rows(S + 2).tolist() == [0, 2] and other.next_ms == S + 1


def _plan(offsets, rolls=None):
    column = np.array(offsets, np.int64)
    return SlotPlan(np.zeros(len(column), bool), {}, Wanted(
        column, column, column, np.array(rolls or [False] * len(column))), 0, 0)


def _held(own_ms):
    own = np.array(own_ms, np.int64)
    return HeldChunk(bytearray(), np.zeros(len(own), np.int64), 0, [], [], [], len(own), own)


def test_rows_the_enqueue_did_not_see_take_the_times_read_ahead():
    """After a restart the enqueue has no time for a slot's rows (OWN_MS_NONE); the chunks
    converted ahead for it carry each record's time read in C: the running slot takes those
    within the slot (own_time's check), the slot's end for a time outside it, not a long
    (OWN_MS_NONE) or a roll; a time the enqueue has is kept; rows added while the slot runs
    keep the enqueue's and the rows read ahead keep theirs. No record is read again."""
    end = S + P
    held = [_held([S + 10, S + 2000, NONE]), _held([S, S + 400])]

    def take(slot_ms, plan):
        return Taken(held, end)
    due = np.array([NONE, NONE, NONE, NONE, S + 300, end, end])
    state = SlotInProgress.follow(None, S, (1, 2, 7), _plan(range(7), [False] * 6 + [True]),
                                  due.copy(), take, _never_read, P)
    assert state.due.tolist() == [S + 10, end, end, end, S + 300, end, end]
    assert state.next_ms == S + 10 and state.due_rows(S + 10).tolist() == [0]
    state.done[0] = True
    state = SlotInProgress.follow(state, S, (1, 3, 8),
                                  _plan(range(8), [False] * 6 + [True, False]),
                                  np.append(due, S + 50), take, _never_read, P)
    assert state.due.tolist() == [S + 10, end, end, end, S + 300, end, end, S + 50]
    assert state.due_rows(S + 100).tolist() == [7] and state.next_ms == S + 50


class _Records:
    """read_times over parked records' times by offset (the C path's answers), each call's
    offsets kept."""

    def __init__(self, times: dict[int, int]):
        self.times = times
        self.calls: list[list[int]] = []

    def __call__(self, wanted: Wanted) -> np.ndarray:
        offsets = wanted.offsets.tolist()
        self.calls.append(offsets)
        return np.array([self.times[offset] for offset in offsets], np.int64)


def test_rows_known_neither_way_are_read_from_their_records_when_the_slot_begins():
    """A slot that had begun before the worker's start: rows with no enqueue time and no
    chunk converted ahead (OWN_MS_NONE) have their times read from their parked records once,
    when the slot begins, checked by own_time's rule (a time outside the slot, or none read:
    the slot's end); rows converted ahead, rows the enqueue saw (even at the slot's end) and
    rolls are not read. Rows added while the slot runs with no time are read then, the old
    ones not again; what was put stays put."""
    end = S + P
    plan = _plan([0, 10, 20, 30, 40, 50, 60, 70], [False] * 6 + [True, False])
    due = np.array([NONE, NONE, S + 700, NONE, NONE, NONE, end, end])
    records = _Records({30: S + 250, 40: S + 5000, 50: NONE, 80: S + 90, 90: S + 600})

    def take(slot_ms, wanted_plan):
        return Taken([_held([S + 20, S + 800])], end)
    state = SlotInProgress.follow(None, S, (1, 8, 8), plan, due.copy(), take, records, P)
    assert records.calls == [[30, 40, 50]]
    assert state.due.tolist() == [S + 20, S + 800, S + 700, S + 250, end, end, end, end]
    assert state.next_ms == S + 20 and state.due_rows(S + 300).tolist() == [0, 3]
    state.done[[0, 3]] = True
    state.recount()
    grown = SlotInProgress.follow(state, S, (1, 10, 10),
                                  _plan([0, 10, 20, 30, 40, 50, 60, 70, 80, 90],
                                        [False] * 6 + [True] + [False] * 3),
                                  np.append(due, [NONE, S + 990]), take, records, P)
    assert grown is state and records.calls == [[30, 40, 50], [80]]
    assert grown.due.tolist() == [S + 20, S + 800, S + 700, S + 250, end, end, end, end,
                                  S + 90, S + 990]
    assert grown.due_rows(S + 300).tolist() == [8] and grown.done.tolist()[:4] == \
        [True, False, False, True]


def test_a_slot_every_row_of_which_is_known_reads_nothing():
    """The normal path: the enqueue saw every row, or the conversion ahead covered it: no
    record is read when the slot begins or is read again."""
    end = S + P
    due = np.array([NONE, NONE, S + 30, end])

    def take(slot_ms, plan):
        return Taken([_held([S + 5, S + 6])], end)
    state = SlotInProgress.follow(None, S, (1, 4, 4), _plan([1, 2, 3, 4]), due, take,
                                  _never_read, P)
    assert state.due.tolist() == [S + 5, S + 6, S + 30, end]
    state = SlotInProgress.follow(state, S, (1, 5, 5), _plan([1, 2, 3, 4, 5]),
                                  np.append(due, S + 40), take, _never_read, P)
    assert state.due.tolist() == [S + 5, S + 6, S + 30, end, S + 40]
