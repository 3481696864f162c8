"""The timer's conversion ahead (broker/timer_ahead.py AheadRuns, architecture/timer.md
"Converted ahead, put when due" and "Beyond 3 s, only what would be late"): used slots not begun
converted into runs held in memory as recipes, put when due and never before, with the cancel
marks they were converted with; far slots nearest first under the cap, read again when doubled,
and beyond AHEAD_MS only the slots too large to convert in time when due.

Method: as tests/unit/broker/test_timer.py (its harness, fixtures and helpers): timer sends
through the real send handler into a real MessageStore on tmp_path whose clock the test sets,
a TimerStore over it driven at explicit times.
"""
import importlib.util
import pathlib

import pytest

from pybroker.broker import timer_message
from pybroker.broker.timer_ahead import far_min_units

_spec = importlib.util.spec_from_file_location(
    "timer_tests", pathlib.Path(__file__).with_name("test_timer.py"))
timer_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(timer_tests)
harness = timer_tests.harness
T0, TIMER_SETTINGS = timer_tests.T0, timer_tests.TIMER_SETTINGS
timer, step, delivered = timer_tests.timer, timer_tests.step, timer_tests.delivered
send_timer, send_cancel = timer_tests.send_timer, timer_tests.send_cancel
_convert_ahead = timer_tests._convert_ahead
broker = timer_tests.broker          # the fixture: a broker on tmp_path, its clock at T0


def test_runs_converted_ahead_are_put_when_due_never_before(broker):
    """A used slot not begun is converted ahead into runs held in memory: nothing of it is
    stored before it is due, and when due its runs are put with the clock of the put as
    TIMER_DEQUEUE_MS, the records a conversion at due time makes (same body, topic, queue
    and properties)."""
    store = timer(broker)
    store.ahead.far_min_units = 1      # every slot large (the rule's own tests: below)
    for key in ("a", "b", "c"):
        send_timer(broker, key, TIMER_DELIVER_MS=str(T0 + 3500), DELAY_NOTE=f"t{key}")
    step(broker, store, T0 + 100)
    assert _convert_ahead(store) == 1 and store.ahead.held_bytes > 0
    # Not coming yet: the slot begins 3 s after the write time (not within AHEAD_MS).
    assert store.ahead.coming_bytes(store.curr_write_time_ms) == 0
    step(broker, store, T0 + 1200)
    assert _convert_ahead(store) == 0              # nothing new: held as converted
    # The bytes coming when the slot falls due (the flusher pre-faults them): the re-put
    # records the held recipes stand for (checked against what is stored below).
    coming = store.ahead.coming_bytes(store.curr_write_time_ms)
    assert coming > 0
    step(broker, store, T0 + 3499)                 # the slot has begun, its messages not due
    assert delivered(broker) == {} and store.in_slot is not None
    assert store.in_slot.held and store.ahead.held_bytes == 0      # taken by the dequeue
    step(broker, store, T0 + 3507)
    got = delivered(broker)
    assert set(got) == {"a", "b", "c"} and store.figures.converted_ahead == 3
    assert store.ahead.held_bytes == 0 and store.metrics.count(harness.TOPIC) == 0
    assert store.ahead.coming_bytes(store.curr_write_time_ms) == 0
    assert sum(decoded.total_size for decoded, _ in broker.records(harness.TOPIC, 1)) == coming
    for decoded, properties in broker.records(harness.TOPIC, 1):
        key = properties["KEYS"]
        assert bytes(decoded.body) == key.encode() and properties["DELAY_NOTE"] == f"t{key}"
        assert properties["TIMER_ENQUEUE_MS"] == str(T0)
        assert properties["TIMER_DEQUEUE_MS"] == str(T0 + 3507)      # the put's clock
        assert properties["TIMER_OUT_MS"] == str(T0 + 3000)
        assert properties["REAL_TOPIC"] == harness.TOPIC and properties["REAL_QID"] == "1"
        assert decoded.properties.endswith(f"\x02TIMER_DEQUEUE_MS\x01{T0 + 3507}\x02")


def test_a_cancel_mark_after_the_conversion_ahead_still_cancels(broker):
    """Runs converted ahead are used only with the cancel marks they were converted with: a
    mark enqueued after them drops them (its slot is converted again, or when due), and the
    message it names is never delivered; messages enqueued after them into the same slot are
    delivered too."""
    store = timer(broker)
    answer = send_timer(broker, "victim", TIMER_DELIVER_MS=str(T0 + 2500))
    send_timer(broker, "keep", TIMER_DELIVER_MS=str(T0 + 2500))
    step(broker, store, T0 + 1200)
    assert _convert_ahead(store) == 1
    send_cancel(broker, "mark", answer, "victim")
    send_timer(broker, "late", TIMER_DELIVER_MS=str(T0 + 2500))
    step(broker, store, T0 + 1300)                 # the mark and "late" enqueued
    assert store.ahead.held_bytes == 0             # the mark dropped what was held
    step(broker, store, T0 + 3000)
    assert set(delivered(broker)) == {"keep", "late"}
    assert store.figures.cancelled == 1 and store.figures.converted_ahead == 0

    # Converted again with the mark: C drops the message it names, when due.
    answer = send_timer(broker, "victim2", TIMER_DELIVER_MS=str(T0 + 4500))
    send_cancel(broker, "mark2", answer, "victim2")
    send_timer(broker, "keep2", TIMER_DELIVER_MS=str(T0 + 4500))
    step(broker, store, T0 + 3200)
    assert _convert_ahead(store) == 1
    send_timer(broker, "late2", TIMER_DELIVER_MS=str(T0 + 4500))
    slot = store.wheel.slot(T0 + 4000)
    assert store.ahead.plan_of(T0 + 4000, slot) is not None     # unchanged: the plan ahead
    step(broker, store, T0 + 3300)                 # "late2" added after: kept, converted later
    assert store.ahead.held_bytes > 0
    assert store.ahead.plan_of(T0 + 4000, store.wheel.slot(T0 + 4000)) is None
    step(broker, store, T0 + 5000)
    assert set(delivered(broker)) == {"keep", "late", "keep2", "late2"}
    assert store.figures.cancelled == 2 and store.figures.converted_ahead == 1
    assert store.metrics.count(harness.TOPIC) == 0


def test_held_runs_that_no_longer_match_the_slot_are_not_used(broker):
    """The due-time check itself (the timer log is the truth): held runs are handed over
    only for the cancel marks and the records they were converted from."""
    store = timer(broker)
    for key in ("a", "b"):
        send_timer(broker, key, TIMER_DELIVER_MS=str(T0 + 2500))
    step(broker, store, T0 + 1200)
    assert _convert_ahead(store) == 1
    slot = store.wheel.slot(T0 + 2000)
    plan = store.plan_slot(slot)
    other_marks = plan._replace(cancelled={f"{harness.TOPIC}+U-a": {}})
    assert store.ahead.take(T0 + 2000, other_marks).chunks == []
    assert store.ahead.held_bytes == 0
    assert _convert_ahead(store) == 1
    fewer = plan._replace(wanted=type(plan.wanted)(*(column[:1] for column in plan.wanted)))
    assert store.ahead.take(T0 + 2000, fewer).chunks == []
    assert _convert_ahead(store) == 1
    assert len(store.ahead.take(T0 + 2000, plan).chunks) == 1


@pytest.fixture
def wide(tmp_path):
    """A broker whose roll window (60 slots) reaches past AHEAD_MS."""
    clock = [T0]
    created = harness.Broker(tmp_path, dict(TIMER_SETTINGS, timerRollWindowSlot="60"),
                             clock_ms=lambda: clock[0])
    created.clock = clock
    created.ctx.now_ms = lambda: clock[0]
    yield created
    created.close()


def test_slots_well_ahead_are_converted_nearest_first_and_put_when_due(wide):
    """The conversion ahead reaches as far as the roll window, not 3 s: slots 20 s and 10 s
    ahead are both held, the nearest converted first (enqueued after the other), and each is
    put from what is held when due, never before."""
    store = timer(wide)
    store.ahead.far_min_units = 1      # every slot large (the rule's own tests: below)
    send_timer(wide, "far", TIMER_DELIVER_MS=str(T0 + 20500))
    step(wide, store, T0 + 100)
    send_timer(wide, "near", TIMER_DELIVER_MS=str(T0 + 10500))
    step(wide, store, T0 + 200)
    assert store.convert_ahead_step()
    assert list(store.ahead._slots) == [T0 + 10000]
    assert _convert_ahead(store) == 1 and sorted(store.ahead._slots) == [T0 + 10000, T0 + 20000]
    assert store.ahead.coming_bytes(store.curr_write_time_ms) == 0     # beyond AHEAD_MS
    step(wide, store, T0 + 10499)
    assert delivered(wide) == {}
    step(wide, store, T0 + 10500)
    assert set(delivered(wide)) == {"near"} and store.figures.converted_ahead == 1
    step(wide, store, T0 + 20499)
    assert set(delivered(wide)) == {"near"}
    step(wide, store, T0 + 21000)
    assert set(delivered(wide)) == {"near", "far"} and store.figures.converted_ahead == 2
    assert store.ahead.held_bytes == 0


def test_a_nearer_slot_takes_the_cap_from_the_farthest(wide):
    """Under timerPreconvertMaxBytes the nearest slots are held: a slot enqueued nearer than
    what fills the cap drops the farthest held, which is converted again once room is given
    back (its own slot put); every message delivered once, at its time."""
    store = timer(wide)
    store.ahead.far_min_units = 1      # every slot large (the rule's own tests: below)
    send_timer(wide, "far", TIMER_DELIVER_MS=str(T0 + 20500))
    step(wide, store, T0 + 100)
    assert _convert_ahead(store) == 1
    store.ahead.bytes_max = store.ahead.held_bytes + 64     # room for one slot's chunk
    send_timer(wide, "near", TIMER_DELIVER_MS=str(T0 + 10500))
    step(wide, store, T0 + 200)
    # The near slot converted (the far one's chunk dropped for it), the far one converted
    # again and refused: no room left, nothing farther to drop.
    assert _convert_ahead(store) == 2
    assert store.ahead._slots[T0 + 10000].held_bytes > 0
    assert store.ahead._slots[T0 + 20000].held_bytes == 0
    assert not store.convert_ahead_step()                  # not tried again while full
    # Nor a slot beyond the refused one (it could drop nothing either): not even read.
    send_timer(wide, "last", TIMER_DELIVER_MS=str(T0 + 30500))
    step(wide, store, T0 + 300)
    assert not store.convert_ahead_step() and T0 + 30000 not in store.ahead._slots
    step(wide, store, T0 + 10500)                          # taken: room again
    assert set(delivered(wide)) == {"near"} and store.figures.converted_ahead == 1
    assert _convert_ahead(store) == 2 and store.ahead._slots[T0 + 20000].held_bytes > 0
    step(wide, store, T0 + 31000)
    assert set(delivered(wide)) == {"near", "far", "last"}
    assert store.figures.converted_ahead == 2 and len(wide.records(harness.TOPIC, 1)) == 3


def test_a_slot_beyond_ahead_ms_is_read_again_only_once_it_doubled(wide, monkeypatch):
    """A far slot still being parked is not read from the timer log again at every unit:
    only once its count doubled (by at least a chunk) or it came to rest (no unit between
    two looks); within AHEAD_MS at every change.
    What was added in between is converted then or when due: all delivered."""
    store = timer(wide)
    store.ahead.far_min_units = 1      # every slot large (the rule's own tests: below)
    plans: list[int] = []
    plan_slot = store.plan_slot
    monkeypatch.setattr(store, "plan_slot",
                        lambda slot: plans.append(slot.num) or plan_slot(slot))

    def park(*keys):
        for key in keys:
            send_timer(wide, key, TIMER_DELIVER_MS=str(T0 + 20500))

    park("a", "b")
    step(wide, store, T0 + 100)
    while store.ahead.step(store, 1):
        pass
    assert plans == [2] and store.ahead._slots[T0 + 20000].covered == 2
    park("c")                                      # 3 < 2 x 2: not read again
    step(wide, store, T0 + 200)
    assert not store.ahead.step(store, 1) and plans == [2]
    park("d")                                      # doubled
    step(wide, store, T0 + 300)
    while store.ahead.step(store, 1):
        pass
    assert plans == [2, 4] and store.ahead._slots[T0 + 20000].covered == 4
    park("e")
    step(wide, store, T0 + 400)
    assert not store.ahead.step(store, 1) and plans == [2, 4]
    step(wide, store, T0 + 1000)                   # at rest since the last look: read
    while store.ahead.step(store, 1):
        pass
    assert plans == [2, 4, 5] and store.ahead._slots[T0 + 20000].covered == 5
    park("f")
    step(wide, store, T0 + 18000)                  # within AHEAD_MS: every change is read
    while store.ahead.step(store, 1):
        pass
    assert plans == [2, 4, 5, 6] and store.ahead._slots[T0 + 20000].covered == 6
    step(wide, store, T0 + 21000)
    assert set(delivered(wide)) == {"a", "b", "c", "d", "e", "f"}
    assert store.figures.converted_ahead == 6


def test_beyond_ahead_ms_only_a_slot_too_large_to_convert_when_due_is_converted(wide):
    """Beyond AHEAD_MS a slot is converted ahead only when it has at least far_min_units
    units (converting it when due would make its messages late: a tenth of a precision at
    the measured cost a unit, 50,000 at 1 s); a smaller one is not read nor held until it
    comes within AHEAD_MS, then converted; both put from what is held when due."""
    assert far_min_units(1000) == 50_000 and far_min_units(100) == 5_000
    store = timer(wide)
    assert store.ahead.far_min_units == far_min_units(store.precision_ms)
    store.ahead.far_min_units = 3                   # here a slot of 3 units is large
    for key in ("s1", "s2"):
        send_timer(wide, key, TIMER_DELIVER_MS=str(T0 + 10500))     # small, 10 s ahead
    for key in ("l1", "l2", "l3"):
        send_timer(wide, key, TIMER_DELIVER_MS=str(T0 + 20500))     # large, 20 s ahead
    step(wide, store, T0 + 100)
    assert _convert_ahead(store) == 1 and list(store.ahead._slots) == [T0 + 20000]
    step(wide, store, T0 + 7000)                    # 3 s from the small slot: not within
    assert _convert_ahead(store) == 0 and T0 + 10000 not in store.ahead._slots
    step(wide, store, T0 + 8000)                    # within AHEAD_MS: converted
    assert _convert_ahead(store) == 1 and sorted(store.ahead._slots) == [T0 + 10000,
                                                                         T0 + 20000]
    step(wide, store, T0 + 10499)
    assert delivered(wide) == {}
    step(wide, store, T0 + 10500)
    assert set(delivered(wide)) == {"s1", "s2"} and store.figures.converted_ahead == 2
    step(wide, store, T0 + 21000)
    assert set(delivered(wide)) == {"s1", "s2", "l1", "l2", "l3"}
    assert store.figures.converted_ahead == 5 and store.ahead.held_bytes == 0


def test_a_large_far_slot_gives_the_cap_to_a_small_one_come_near(wide):
    """The cap with the rule: a large slot 20 s ahead holds the bytes; a small slot 10 s
    ahead is not converted while far, and once within AHEAD_MS it takes the cap from the
    farther large one (converted again when room is given back); all delivered once."""
    store = timer(wide)
    store.ahead.far_min_units = 2
    for key in ("l1", "l2"):
        send_timer(wide, key, TIMER_DELIVER_MS=str(T0 + 20500))
    send_timer(wide, "small", TIMER_DELIVER_MS=str(T0 + 10500))
    step(wide, store, T0 + 100)
    assert _convert_ahead(store) == 1 and list(store.ahead._slots) == [T0 + 20000]
    large = store.ahead.held_bytes
    store.ahead.bytes_max = large + 64              # no room for both
    step(wide, store, T0 + 8000)
    # The small slot converted (the large one's chunk dropped for it), the large one
    # converted again and refused: no room, nothing farther to drop.
    assert _convert_ahead(store) == 2 and store.ahead.held_bytes <= store.ahead.bytes_max
    assert store.ahead._slots[T0 + 10000].held_bytes > 0
    assert store.ahead._slots[T0 + 20000].held_bytes == 0
    step(wide, store, T0 + 10500)                   # taken: room again
    assert set(delivered(wide)) == {"small"}
    assert _convert_ahead(store) == 1 and store.ahead.held_bytes == large
    step(wide, store, T0 + 21000)
    assert set(delivered(wide)) == {"small", "l1", "l2"}
    assert store.figures.converted_ahead == 3


def test_the_cap_on_held_bytes_leaves_the_rest_to_due_time(broker):
    """timerPreconvertMaxBytes: nothing converted ahead past it (0: nothing at all); the
    slot is delivered whole when due either way."""
    store = timer(broker)
    store.ahead.bytes_max = 1
    for key in ("a", "b"):
        send_timer(broker, key, TIMER_DELIVER_MS=str(T0 + 2500))
    step(broker, store, T0 + 1200)
    assert _convert_ahead(store) == 1 and store.ahead.held_bytes == 0
    assert _convert_ahead(store) == 0               # the slot is stopped, not retried
    # What is put when it falls due is still coming (converted then), whatever the cap
    # of the recipes: about the records as parked.
    parked = sum(decoded.total_size
                 for decoded, _ in broker.records(timer_message.TIMER_TOPIC, 0))
    assert store.ahead.coming_bytes(store.curr_write_time_ms) == parked
    assert store.coming_bytes() == parked
    step(broker, store, T0 + 3000)
    assert set(delivered(broker)) == {"a", "b"} and store.figures.converted_ahead == 0
    assert store.ahead.coming_bytes(store.curr_write_time_ms) == 0


def test_chunks_are_held_as_recipes_and_assembled_from_the_parked_bodies(broker):
    """What is held ahead is each new record without its body (the cap counts that): for
    1 KiB bodies a fraction of the records. When due, the records are assembled from the
    recipes and the parked records' bodies, the same bytes a conversion then makes."""
    store = timer(broker)
    body = bytes(range(256)) * 4
    for key in ("a", "b", "c"):
        send_timer(broker, key, body=body, TIMER_DELIVER_MS=str(T0 + 2500))
    step(broker, store, T0 + 1200)
    assert _convert_ahead(store) == 1
    coming = store.ahead.coming_bytes(store.curr_write_time_ms)
    assert 0 < store.ahead.held_bytes < coming // 3
    step(broker, store, T0 + 2600)
    assert store.figures.converted_ahead == 3
    stored = list(broker.records(harness.TOPIC, 1))
    assert sum(decoded.total_size for decoded, _ in stored) == coming
    assert sorted(bytes(decoded.body) for decoded, _ in stored) == [body] * 3
    assert {properties["TIMER_DEQUEUE_MS"] for _, properties in stored} == {str(T0 + 2600)}


def test_a_held_chunk_whose_parked_records_do_not_read_as_before_is_converted_again(broker):
    """Assembly checks each parked record's body against its recipe; a chunk that does not
    match (here: recipes whose body lengths were altered) is converted at due time instead,
    nothing lost, nothing put twice."""
    store = timer(broker)
    for key in ("a", "b"):
        send_timer(broker, key, TIMER_DELIVER_MS=str(T0 + 2500))
    step(broker, store, T0 + 1200)
    assert _convert_ahead(store) == 1
    held = store.ahead._slots[T0 + 2000].chunks[0]
    at = 0
    for _ in range(held.records):          # every recipe's BODYLENGTH one byte longer
        size = int.from_bytes(held.recipes[at:at + 4], "big")
        length_at = at + 84                # IPv4 hosts: BODYLENGTH's position
        length = int.from_bytes(held.recipes[length_at:length_at + 4], "big")
        held.recipes[length_at:length_at + 4] = (length + 1).to_bytes(4, "big")
        at += size - length
    step(broker, store, T0 + 2600)
    assert sorted(delivered(broker)) == ["a", "b"]
    assert store.figures.converted_ahead == 0
    assert [bytes(decoded.body) for decoded, _ in broker.records(harness.TOPIC, 1)] == \
        [b"a", b"b"]
