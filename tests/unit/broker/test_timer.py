"""The 5.x timer, in one process: sends park messages as Java 5.3.3 does and the timer delivers
them at their time, with Java's properties, rolls, cancel marks and recovery.

Method: timer sends go through the real send handler into a real MessageStore on tmp_path whose
clock (and the handler's) the test sets; broker.timer.TimerStore runs over that store with a
StorePutter, its enqueue and dequeue driven at explicit times. Java 5.3.3's answers to the same
sends (remarks, the parked record's properties, what a consumer sees) were recorded from a real
broker (tests/golden/java-5.3.3/timer/capture.json and tests/compat/test_timer_java.py).
"""
import base64
import importlib.util
import pathlib

import pytest

from pybroker.broker import send, timer_message
from pybroker.broker import timer as timer_module
from pybroker.broker.timer import LONG_MAX, TimerStore
from pybroker.protocol.codes import ResponseCode
from pybroker.store import paths
from pybroker.store.timer_checkpoint import read_checkpoint

_spec = importlib.util.spec_from_file_location(
    "send_harness", pathlib.Path(__file__).with_name("send_harness.py"))
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)
T0 = 1_800_000_000_000          # a multiple of every precision
WHEEL = "rmq_sys_wheel_timer"
TIMER_SETTINGS = {"timerRollWindowSlot": "6", "mappedFileSizeTimerLog": "300",
                  "brokerName": "broker-t"}


@pytest.fixture
def broker(tmp_path):
    clock = [T0]
    created = harness.Broker(tmp_path, TIMER_SETTINGS, clock_ms=lambda: clock[0])
    created.clock = clock
    created.ctx.now_ms = lambda: clock[0]
    yield created
    created.close()


def timer(broker, dequeue_enabled=True) -> TimerStore:
    store = TimerStore(broker.config.store, broker.store, broker.putter,
                       dequeue_enabled=dequeue_enabled, now_ms=lambda: broker.clock[0])
    store.recover()
    return store


def send_timer(broker, key: str, queue_id: int = 1, born_ms: int | None = None,
               body: bytes | None = None, **props):
    born = {} if born_ms is None else {"bornTimestamp": str(born_ms)}
    return broker.call(send.handle_send_message, harness.send_request(
        "java", key.encode() if body is None else body, queue_id=queue_id,
        properties=harness.properties_text(KEYS=key, TAGS="tg", WAIT="true",
                                           UNIQ_KEY=f"U-{key}", **props), **born))


def send_cancel(broker, mark: str, answer, key: str):
    """The cancel mark ``mark`` of the message sent as ``key`` (``answer``: its send's answer,
    whose recall handle names its slot)."""
    handle = timer_message.parse_recall_handle(answer.ext_fields["recallHandle"])
    return send_timer(broker, mark, TIMER_DELIVER_MS=handle.timestamp,
                      TIMER_DEL_UNIQKEY=timer_message.delete_key(harness.TOPIC, f"U-{key}"))


def step(broker, store: TimerStore, at_ms: int) -> None:
    """One worker turn at ``at_ms``: enqueue what is there, then deliver every due slot."""
    broker.clock[0] = at_ms
    store.move_write_time()
    while harness.run(store.enqueue()):
        pass
    while harness.run(store.dequeue()) >= 0:
        pass


def delivered(broker, queue_id: int = 1) -> dict[str, dict]:
    return {properties["KEYS"]: properties
            for _, properties in broker.records(harness.TOPIC, queue_id)}


def test_precedence_and_refusals_as_java(broker):
    """Java 5.3.3: TIMER_DELAY_SEC before TIMER_DELAY_MS before TIMER_DELIVER_MS; a delay level
    wins and the timer properties go; a past time is stored as is; too long and not a number
    are MESSAGE_ILLEGAL with Java's remark (recorded from a 5.3.3 broker)."""
    answers = {
        "sec": send_timer(broker, "sec", TIMER_DELAY_SEC="3", TIMER_DELAY_MS="100",
                          TIMER_DELIVER_MS=str(T0 + 9000)),
        "ms": send_timer(broker, "ms", TIMER_DELAY_MS="2500", TIMER_DELIVER_MS=str(T0 + 9000)),
        "deliver": send_timer(broker, "deliver", TIMER_DELIVER_MS=str(T0 + 4000)),
        "past": send_timer(broker, "past", TIMER_DELIVER_MS=str(T0 - 5000)),
        "level": send_timer(broker, "level", DELAY="1", TIMER_DELIVER_MS=str(T0 + 60000)),
        "toofar": send_timer(broker, "toofar", TIMER_DELAY_SEC=str(4 * 24 * 3600)),
        "bad": send_timer(broker, "bad", TIMER_DELAY_SEC="abc"),
    }
    remark = ("timer message illegal, the delay time should not be bigger than the max delay "
              "259200000ms; or if set del msg, the delay time should be bigger than the current "
              "time")
    assert (answers["toofar"].code, answers["toofar"].remark) == (13, remark)
    assert (answers["bad"].code, answers["bad"].remark) == (13, remark)
    parked = {properties["KEYS"]: properties for _, properties in broker.records(WHEEL)}
    # The slot: one precision below an exact multiple, rounded down otherwise.
    assert parked["sec"]["TIMER_OUT_MS"] == str(T0 + 2000)
    assert parked["ms"]["TIMER_OUT_MS"] == str(T0 + 2000)
    assert parked["deliver"]["TIMER_OUT_MS"] == str(T0 + 3000)
    for key in ("sec", "ms", "deliver"):
        assert parked[key]["REAL_TOPIC"] == harness.TOPIC and parked[key]["REAL_QID"] == "1"
        assert parked[key]["WAIT"] == "true"
        fields = answers[key].ext_fields
        assert fields["queueId"] == "1"       # the queue asked for, the wheel's offset
        handle = base64.urlsafe_b64decode(fields["recallHandle"]).decode()
        assert handle == (f"v1 {harness.TOPIC} broker-t "
                          f"{int(parked[key]['TIMER_OUT_MS']) + 1} U-{key}")
    assert [fields.ext_fields["queueOffset"] for fields in
            (answers["sec"], answers["ms"], answers["deliver"])] == ["0", "1", "2"]
    assert "recallHandle" not in answers["past"].ext_fields
    stored = delivered(broker)
    assert stored["past"]["TIMER_DELIVER_MS"] == str(T0 - 5000)
    level = {p["KEYS"]: p for _, p in broker.records("SCHEDULE_TOPIC_XXXX", 0)}["level"]
    assert "TIMER_DELIVER_MS" not in level and level["DELAY"] == "1"


def test_wheel_disabled_is_refused_with_java_s_remark(tmp_path):
    broker = harness.Broker(tmp_path, {"timerWheelEnable": "false"})
    try:
        answer = send_timer(broker, "x", TIMER_DELAY_SEC="3")
        assert (answer.code, answer.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "accurate timer message is not enabled, timerWheelEnable is false")
        assert broker.records(WHEEL) == [] and broker.records(harness.TOPIC, 1) == []
    finally:
        broker.close()


def test_delivered_at_its_own_time_never_early_with_java_s_properties(broker):
    """Parked in the slot of its time (TIMER_OUT_MS: T0+2000 for T0+2500), put once its own
    time has come within the slot (broker/timer_own.py), not before, not at the slot's end."""
    store = timer(broker)
    send_timer(broker, "a", TIMER_DELIVER_MS=str(T0 + 2500))
    send_timer(broker, "b", TIMER_DELIVER_MS=str(T0 + 2500))
    send_timer(broker, "c", TIMER_DELAY_MS="3500")
    step(broker, store, T0 + 100)
    assert store.figures.enqueued == 3
    step(broker, store, T0 + 2499)
    assert delivered(broker) == {}                 # due T0+2500
    step(broker, store, T0 + 2500)
    got = delivered(broker)
    assert set(got) == {"a", "b"}
    for properties in got.values():
        assert properties["TIMER_ENQUEUE_MS"] == str(T0)     # the write time at enqueue
        assert properties["TIMER_DEQUEUE_MS"] == str(T0 + 2500)
        assert properties["TIMER_OUT_MS"] == str(T0 + 2000)
        assert properties["REAL_TOPIC"] == harness.TOPIC and properties["REAL_QID"] == "1"
        assert properties["WAIT"] == "true" and properties["UNIQ_KEY"].startswith("U-")
        assert "TIMER_ROLL_TIMES" not in properties
    assert store.curr_read_time_ms == T0 + 2000    # the slot runs until T0+3000
    step(broker, store, T0 + 3000)
    assert store.curr_read_time_ms == T0 + 3000 and len(delivered(broker)) == 2
    step(broker, store, T0 + 3499)
    assert "c" not in delivered(broker)            # sent at T0 (its store time) + 3500
    step(broker, store, T0 + 3500)
    assert "c" in delivered(broker)
    step(broker, store, T0 + 4000)
    assert len(broker.records(harness.TOPIC, 1)) == 3          # once each
    assert store.metrics.count(harness.TOPIC) == 0


def test_messages_of_one_slot_are_each_put_at_their_own_time(broker):
    """Four messages of slot T0+2000, due at different ms of it by each form of the three
    properties (a delay counts from the store time, here the send's clock): each is put
    exactly when its time comes, in the order of their times, not before; the worker is
    told when the next falls due; the read time moves at the slot's end; one each."""
    store = timer(broker)
    broker.clock[0] = T0 + 50
    send_timer(broker, "late", TIMER_DELIVER_MS=str(T0 + 2999))
    send_timer(broker, "end", TIMER_DELIVER_MS=str(T0 + 3000))   # a multiple: slot T0+2000
    send_timer(broker, "ms", TIMER_DELAY_MS="2550")                # T0+2600
    send_timer(broker, "sec", TIMER_DELAY_SEC="2", TIMER_DELIVER_MS=str(T0 + 2999))  # T0+2050
    step(broker, store, T0 + 100)
    assert {p["TIMER_OUT_MS"] for _, p in broker.records(WHEEL)} == {str(T0 + 2000)}
    expected = [(T0 + 2050, "sec"), (T0 + 2600, "ms"), (T0 + 2999, "late"), (T0 + 3000, "end")]
    for due_ms, key in expected:
        step(broker, store, due_ms - 1)
        assert key not in delivered(broker), key
        assert store.next_due_ms() == due_ms
        step(broker, store, due_ms)
        assert delivered(broker)[key]["TIMER_DEQUEUE_MS"] == str(due_ms)
    assert [p["KEYS"] for _, p in broker.records(harness.TOPIC, 1)] == [k for _, k in expected]
    assert store.curr_read_time_ms == T0 + 3000 and store.figures.slots_delivered == 1
    step(broker, store, T0 + 5000)
    assert len(broker.records(harness.TOPIC, 1)) == 4 and store.metrics.count(harness.TOPIC) == 0


def test_a_message_enqueued_into_its_running_slot_is_put_at_its_time(broker):
    store = timer(broker)
    send_timer(broker, "first", TIMER_DELIVER_MS=str(T0 + 2100))
    step(broker, store, T0 + 2100)
    assert set(delivered(broker)) == {"first"}
    broker.clock[0] = T0 + 2200
    send_timer(broker, "second", TIMER_DELIVER_MS=str(T0 + 2400))   # the running slot
    step(broker, store, T0 + 2399)
    assert set(delivered(broker)) == {"first"}
    step(broker, store, T0 + 2400)
    assert set(delivered(broker)) == {"first", "second"}
    step(broker, store, T0 + 3000)
    assert len(broker.records(harness.TOPIC, 1)) == 2


def test_cancel_marks_in_a_running_slot(broker):
    """A mark enqueued before its message's own time drops it, while the slot's other
    messages are still put at their times; a mark enqueued after its message was put (Java
    would still drop it: it delivers the slot at its end, docs/compatibility.md) finds nothing
    and gives its count back."""
    store = timer(broker)
    answer = send_timer(broker, "victim", TIMER_DELIVER_MS=str(T0 + 2800))
    send_timer(broker, "early", TIMER_DELIVER_MS=str(T0 + 2200))
    put_first = send_timer(broker, "gone", TIMER_DELIVER_MS=str(T0 + 2300))
    step(broker, store, T0 + 100)
    broker.clock[0] = T0 + 2100                     # the slot runs
    # A mark at the recall handle's time (the slot's start + 1) is past once the slot has
    # begun: refused, as RECALL_MESSAGE is (Java's rules, both).
    assert send_cancel(broker, "mark", answer, "victim").code == ResponseCode.MESSAGE_ILLEGAL
    mark = send_timer(broker, "mark", TIMER_DELIVER_MS=str(T0 + 2800),
                      TIMER_DEL_UNIQKEY=timer_message.delete_key(harness.TOPIC, "U-victim"))
    assert mark.code == ResponseCode.SUCCESS        # in time: before the victim's own time
    step(broker, store, T0 + 2300)
    assert set(delivered(broker)) == {"early", "gone"}
    broker.clock[0] = T0 + 2400                     # "gone" is stored already
    late = send_timer(broker, "late-mark", TIMER_DELIVER_MS=str(T0 + 2900),
                      TIMER_DEL_UNIQKEY=timer_message.delete_key(harness.TOPIC, "U-gone"))
    assert late.code == ResponseCode.SUCCESS and put_first.code == ResponseCode.SUCCESS
    step(broker, store, T0 + 3000)
    assert set(delivered(broker)) == {"early", "gone"}
    assert store.figures.cancelled == 1 and len(broker.records(harness.TOPIC, 1)) == 2
    assert store.metrics.count(harness.TOPIC) == 0


def test_a_running_slot_waits_for_the_enqueue_to_read_the_wheel_topic_to_its_end(
        broker, monkeypatch):
    """A mark stored before its message's own time but not yet enqueued: the message is not
    put while the last enqueue stopped short of the wheel topic's end (one unit a turn here),
    so the mark is in the wheel when it is, and cancels it."""
    monkeypatch.setattr(timer_module, "ENQUEUE_BATCH_MAX", 1)
    store = timer(broker)
    send_timer(broker, "victim", TIMER_DELIVER_MS=str(T0 + 2300))
    step(broker, store, T0 + 100)
    broker.clock[0] = T0 + 2200
    send_timer(broker, "filler", TIMER_DELIVER_MS=str(T0 + 2250))
    send_timer(broker, "mark", TIMER_DELIVER_MS=str(T0 + 2900),
               TIMER_DEL_UNIQKEY=timer_message.delete_key(harness.TOPIC, "U-victim"))
    broker.clock[0] = T0 + 2300
    store.move_write_time()

    def dequeue() -> int:           # past the empty slots before the running one
        while (done := harness.run(store.dequeue())) == 0:
            pass
        return done
    assert harness.run(store.enqueue()) == 1            # the filler: a full batch
    assert dequeue() == -1 and delivered(broker) == {}
    assert harness.run(store.enqueue()) == 1            # the mark
    assert dequeue() == -1 and delivered(broker) == {}
    assert harness.run(store.enqueue()) == 0            # the end: every mark is read
    assert dequeue() == 2                               # the victim's time: dropped
    assert set(delivered(broker)) == {"filler"} and store.figures.cancelled == 1
    step(broker, store, T0 + 3000)
    assert set(delivered(broker)) == {"filler"} and store.metrics.count(harness.TOPIC) == 0


def test_held_runs_wait_for_their_last_message_and_give_way_to_earlier_ones(broker):
    """A chunk converted ahead is put once every message in it is due; a message due before
    the others of its chunk is converted at its own time and the chunk is dropped (each
    message put once, none early)."""
    store = timer(broker)
    send_timer(broker, "a", TIMER_DELIVER_MS=str(T0 + 2200))
    send_timer(broker, "b", TIMER_DELIVER_MS=str(T0 + 2700))
    step(broker, store, T0 + 100)
    assert _convert_ahead(store) == 1
    step(broker, store, T0 + 2199)
    assert delivered(broker) == {} and store.in_slot.held
    step(broker, store, T0 + 2200)
    assert set(delivered(broker)) == {"a"} and store.figures.converted_ahead == 0
    step(broker, store, T0 + 2700)
    assert set(delivered(broker)) == {"a", "b"} and not store.in_slot.held
    step(broker, store, T0 + 3000)
    assert len(broker.records(harness.TOPIC, 1)) == 2

    for key in ("c", "d"):
        send_timer(broker, key, TIMER_DELIVER_MS=str(T0 + 4500))
    step(broker, store, T0 + 3100)
    assert _convert_ahead(store) == 1
    step(broker, store, T0 + 4499)
    assert len(broker.records(harness.TOPIC, 1)) == 2
    step(broker, store, T0 + 4500)
    assert set(delivered(broker)) == {"a", "b", "c", "d"}
    assert store.figures.converted_ahead == 2


def test_a_restart_in_a_running_slot_delivers_it_again_at_its_own_times(broker):
    """A kill -9 while a slot runs: its messages already put come again (at least once, as
    Java's) when the restarted timer delivers the slot from the timer log. The own times held
    in memory are lost and the slot had begun (never converted ahead): they are read from the
    parked records when it begins again (broker/timer_own.py), so the rest are each put at
    their own time, not at the slot's end; nothing lost, nothing early. The next slot,
    converted ahead by the restarted worker, is not read again; one it did not reach is."""
    store = timer(broker)
    due = {"a": T0 + 2200, "b": T0 + 2700, "c": T0 + 2450, "next": T0 + 3300,
           "later": T0 + 4600}
    for key, due_ms in due.items():
        send_timer(broker, key, TIMER_DELIVER_MS=str(due_ms))
    step(broker, store, T0 + 100)
    store.flush()
    step(broker, store, T0 + 2300)
    assert set(delivered(broker)) == {"a"}
    store.close()                                   # no flush: as a kill -9 leaves it
    again = timer(broker)
    step(broker, again, T0 + 2300)
    assert [p["KEYS"] for _, p in broker.records(harness.TOPIC, 1)] == ["a", "a"]
    assert again.figures.own_times_read == 3        # the running slot's, its own not held
    for key in ("c", "b"):
        step(broker, again, due[key] - 1)
        assert key not in delivered(broker) and again.next_due_ms() == due[key]
        step(broker, again, due[key])
        assert delivered(broker)[key]["TIMER_DEQUEUE_MS"] == str(due[key])
    step(broker, again, T0 + 2999)
    assert again.convert_ahead_step()               # slot T0+3000 only (the nearest)
    step(broker, again, T0 + 3000)
    assert again.figures.own_times_read == 3        # converted ahead: not read again
    step(broker, again, due["next"] - 1)
    assert "next" not in delivered(broker)
    step(broker, again, due["next"])
    assert delivered(broker)["next"]["TIMER_DEQUEUE_MS"] == str(due["next"])
    step(broker, again, T0 + 4000)                  # not converted ahead: read when it begins
    assert again.figures.own_times_read == 4 and again.next_due_ms() == due["later"]
    step(broker, again, due["later"])
    keys = [p["KEYS"] for _, p in broker.records(harness.TOPIC, 1)]
    assert sorted(keys) == ["a", "a", "b", "c", "later", "next"]
    assert again.figures.converted_ahead == 1
    again.close()


def test_a_slot_that_ended_before_the_restarted_timer_reached_it_reads_no_time(broker):
    """The slot running at a kill -9 has ended when the restarted timer reaches it: every
    message of it is put at once (those put before the kill again), no own time read."""
    store = timer(broker)
    send_timer(broker, "a", TIMER_DELIVER_MS=str(T0 + 2200))
    send_timer(broker, "b", TIMER_DELIVER_MS=str(T0 + 2700))
    step(broker, store, T0 + 100)
    store.flush()
    step(broker, store, T0 + 2300)
    store.close()                                   # no flush: as a kill -9 leaves it
    again = timer(broker)
    step(broker, again, T0 + 3100)
    assert sorted(p["KEYS"] for _, p in broker.records(harness.TOPIC, 1)) == ["a", "a", "b"]
    assert again.figures.own_times_read == 0 and again.curr_read_time_ms == T0 + 3000
    again.close()


def test_a_slot_already_past_at_enqueue_goes_out_at_once(broker):
    store = timer(broker)
    send_timer(broker, "late", TIMER_DELAY_MS="1500")       # slot T0+1000
    broker.clock[0] = T0 + 5000
    store.move_write_time()
    while harness.run(store.dequeue()) >= 0:                # the dequeue passes it first
        pass
    assert store.curr_read_time_ms == T0 + 5000
    assert harness.run(store.enqueue()) == 1
    got = delivered(broker)["late"]
    assert got["TIMER_ENQUEUE_MS"] == str(LONG_MAX)
    assert store.figures.enqueued_due == 1 and store.figures.enqueued == 0
    # Java's rocketmq_timer_enqueue_total counts it all the same (it was read from the wheel)
    assert store.figures.enqueued_by_topic == {harness.TOPIC: 1}


def test_enqueue_counts_and_the_delay_set_per_topic_as_java(broker):
    """What the metrics endpoint's rocketmq_timer_enqueue_total and
    rocketmq_delay_message_latency_seconds come from: per real topic, each wheel-topic message
    read, and its delivery time - its birth in whole seconds in Java's buckets (60 s, 10 min,
    1 h, 12 h, ...); a birth after the delivery time (a producer clock ahead) counts as 0 s."""
    store = timer(broker)
    send_timer(broker, "soon", born_ms=T0 - 1000, TIMER_DELIVER_MS=str(T0 + 2500))
    send_timer(broker, "later", born_ms=T0, TIMER_DELIVER_MS=str(T0 + 7_200_000))
    send_timer(broker, "ahead", born_ms=T0 + 10_000, TIMER_DELIVER_MS=str(T0 + 2500))
    step(broker, store, T0 + 100)
    # TIMER_OUT_MS is the slot's start (T0+2000) and, for a time on a slot's edge, the slot
    # before (T0+7_199_000), as Java's: soon 3 s, later 7199 s, ahead 0 s
    assert store.figures.enqueued_by_topic == {harness.TOPIC: 3}
    assert store.figures.delay_latency == {(harness.TOPIC, 0): [2, 3],
                                           (harness.TOPIC, 3): [1, 7199]}


def test_rolls_past_the_window(broker):
    """timerRollWindowSlot=6: a 20 s delay (slot +19 s) is parked at the window's end (+6),
    put back on the wheel topic there and parked again (+7 + 6 = +13), then in its slot; the
    Java capture shows the same walk (tests/unit/store/test_timer_files.py)."""
    store = timer(broker)
    send_timer(broker, "long", TIMER_DELAY_SEC="20")
    for at in range(T0, T0 + 25_001, 500):
        step(broker, store, at)
        if "long" in delivered(broker):
            break
    got = delivered(broker)["long"]
    assert int(got["TIMER_DEQUEUE_MS"]) >= T0 + 20_000       # never early
    assert got["TIMER_DEQUEUE_MS"] == str(T0 + 20_000)
    assert got["TIMER_ROLL_TIMES"] == "2" and store.figures.rolled == 2
    rolled = [p for _, p in broker.records(WHEEL) if p["KEYS"] == "long"]
    assert [p.get("TIMER_ROLL_TIMES") for p in rolled] == [None, "1", "2"]
    assert [p["TIMER_OUT_MS"] for p in rolled] == [str(T0 + 19_000)] * 3
    assert store.metrics.count(harness.TOPIC) == 0


def test_cancel_mark_drops_the_message_in_its_slot(broker):
    store = timer(broker)
    answer = send_timer(broker, "victim", TIMER_DELAY_SEC="5")
    send_cancel(broker, "mark", answer, "victim")
    send_timer(broker, "other", TIMER_DELAY_SEC="5")
    step(broker, store, T0 + 100)
    assert store.metrics.count(harness.TOPIC) == 1      # +1 +1 -1
    step(broker, store, T0 + 5000)
    assert set(delivered(broker)) == {"other"}
    assert store.figures.cancelled == 1
    assert store.metrics.count(harness.TOPIC) == 0
    # A cancel mark whose time is past is refused, as Java's.
    late = send_timer(broker, "mark2", TIMER_DELIVER_MS=str(T0 - 1),
                      TIMER_DEL_UNIQKEY="x+y")
    assert late.code == ResponseCode.MESSAGE_ILLEGAL


def test_cancel_mark_in_a_slot_with_a_roll(broker):
    """A slot holding a cancel mark, the message it names, another message and a roll: the
    roll is a record the C conversion leaves to Python, so the chunk goes through the Python
    rule whole (marks used up in the slot's order); the named message is dropped once, the
    other delivered, the roll put back on the wheel topic."""
    store = timer(broker)
    send_timer(broker, "long", TIMER_DELAY_SEC="20")
    step(broker, store, T0 + 100)                     # parked at the window's end, T0+6000
    broker.clock[0] = T0 + 1000
    answer = send_timer(broker, "victim", TIMER_DELIVER_MS=str(T0 + 6500))
    send_cancel(broker, "mark", answer, "victim")
    send_timer(broker, "other", TIMER_DELIVER_MS=str(T0 + 6500))
    step(broker, store, T0 + 1000)
    step(broker, store, T0 + 7000)
    assert set(delivered(broker)) == {"other"}
    assert store.figures.cancelled == 1 and store.figures.rolled == 1
    assert [p["KEYS"] for _, p in broker.records(WHEEL)].count("long") == 2


def test_restart_repeats_nothing_delivered_and_loses_nothing(broker):
    """A flushed checkpoint: nothing twice. Enqueued after the last flush and not flushed (a
    kill -9): the enqueue is repeated from the checkpoint; the second unit of a message in its
    slot is dropped, so each is delivered once."""
    store = timer(broker)
    for key in ("k1", "k2"):
        send_timer(broker, key, TIMER_DELAY_SEC="4")
    step(broker, store, T0 + 100)
    store.flush()
    send_timer(broker, "k3", TIMER_DELAY_SEC="4")
    step(broker, store, T0 + 200)             # k3 enqueued, not flushed
    store.close()                             # no flush: as a kill -9 leaves it
    again = timer(broker)
    assert again.curr_queue_offset == 2       # from the checkpoint: k3 is enqueued again
    step(broker, again, T0 + 5000)            # k3 was sent at T0+100: slot T0+4000
    assert sorted(delivered(broker)) == ["k1", "k2", "k3"]
    assert len(broker.records(harness.TOPIC, 1)) == 3
    assert again.figures.duplicates_dropped == 1
    again.flush()
    values = read_checkpoint(paths.config_path(broker.config.store.store_path_root_dir,
                                               paths.TIMER_CHECK_CONFIG))
    assert values.last_read_time_ms == T0 + 5000 and values.master_timer_queue_offset == 3
    again.close()
    third = timer(broker)
    step(broker, third, T0 + 9000)
    assert len(broker.records(harness.TOPIC, 1)) == 3
    third.close()


class _FailingOnce:
    """The store's putter, but the first put to queue ``queue_id`` raises."""

    def __init__(self, putter, queue_id: int):
        self.putter, self.queue_id, self.failed = putter, queue_id, False

    async def put(self, records, topic, queue_id, *rest, **keywords):
        if queue_id == self.queue_id and not self.failed:
            self.failed = True
            raise RuntimeError("ring gone")
        return await self.putter.put(records, topic, queue_id, *rest, **keywords)


def test_a_put_that_raises_leaves_the_slot_to_the_next_turn(broker):
    """A slot whose re-put raises is not passed: the error reaches the worker's round guard
    (pybroker/proc/timer.py) and the next turn delivers the slot again, so nothing is lost (a
    run already stored may come twice: at least once, as Java's)."""
    store = timer(broker)
    store.putter = _FailingOnce(broker.putter, 2)
    send_timer(broker, "q1", queue_id=1, TIMER_DELAY_SEC="2")
    send_timer(broker, "q2", queue_id=2, TIMER_DELAY_SEC="2")
    step(broker, store, T0 + 100)
    broker.clock[0] = T0 + 3000
    store.move_write_time()
    with pytest.raises(RuntimeError, match="ring gone"):
        while harness.run(store.dequeue()) >= 0:      # empty slots first, then T0+2000
            pass
    stuck_at = store.curr_read_time_ms                 # the failing slot is still to deliver
    assert stuck_at <= T0 + 2000 and delivered(broker, 2) == {}
    while harness.run(store.dequeue()) >= 0:
        pass
    assert store.curr_read_time_ms > stuck_at
    assert list(delivered(broker, 2)) == ["q2"]
    assert len(broker.records(harness.TOPIC, 2)) == 1
    assert 1 <= len(broker.records(harness.TOPIC, 1)) <= 2
    assert list(delivered(broker, 1)) == ["q1"]
    store.close()


def test_batch_timer_properties_are_stored_as_is(broker):
    """Java 5.3.3 applies the timer rule to single messages only: a batch is stored at once."""
    body = harness.batch_body([(b"b1", harness.properties_text(TIMER_DELAY_SEC="30")),
                               (b"b2", harness.properties_text(TIMER_DELIVER_MS=str(T0 + 9)))])
    answer = broker.call(send.handle_send_message, harness.send_request(
        "java-batch", body, queue_id=2, batch=True))
    assert answer.code == ResponseCode.SUCCESS and "recallHandle" not in answer.ext_fields
    assert [bytes(r.body) for r, _ in broker.records(harness.TOPIC, 2)] == [b"b1", b"b2"]


def test_a_slave_enqueues_up_to_its_master_and_never_delivers(broker):
    send_timer(broker, "s1", TIMER_DELAY_SEC="3")
    send_timer(broker, "s2", TIMER_DELAY_SEC="3")
    store = timer(broker, dequeue_enabled=False)
    step(broker, store, T0 + 100)
    assert store.figures.enqueued == 0          # the master has enqueued nothing yet
    master = store.checkpoint.values.__class__(last_read_time_ms=T0 + 1000,
                                              master_timer_queue_offset=1)
    store.follow_master(master)
    step(broker, store, T0 + 9000)
    assert store.figures.enqueued == 1 and delivered(broker) == {}
    assert store.curr_read_time_ms == T0 + 1000
    assert store.own_times.entries == 0         # it never puts: no own time held


@pytest.mark.parametrize("text", [
    "REAL_TOPIC\x01T\x02REAL_QID\x012\x02UNIQ_KEY\x01U\x02KEYS\x01k\x02",
    "KEYS\x01k\x02REAL_QID\x013\x02REAL_TOPIC\x01T\x02",          # no UNIQ_KEY, no last \x02
    "REAL_TOPIC\x01A\x02REAL_TOPIC\x01B\x02REAL_QID\x010\x02",      # a repeated name: last wins
    "REAL_TOPIC\x01T\x02REAL_QID\x01\x02REAL_QID\x011\x02",         # an empty value
    "REAL_TOPIC\x01T\x02REAL_QID\x011\x02X\x01a\x01b\x02",          # \x01 inside a value
    "REAL_TOPIC\x01T\x02REAL_QID\x01x\x02",                         # unusable queue id
    "REAL_TOPIC\x01T\x02REAL_QID\x011\x02TIMER_DEL_UNIQKEY\x01T+U\x02",
])
def test_the_string_path_stores_what_the_map_path_stores(broker, text):
    """A first delivery appends TIMER_ENQUEUE_MS / TIMER_DEQUEUE_MS to the stored string
    instead of rebuilding it from the map; both give a consumer the same properties."""
    from pybroker._fast import record as record_codec
    from pybroker.protocol.properties import decode_properties
    store = timer(broker)
    raw = send.encode_message(WHEEL, 0, 0, b"body", text, 0, T0, (harness.HOST, 1),
                              (harness.HOST, 2))
    as_text = store._convert_text(record_codec.decode(bytes(raw), 0), text, T0, None)
    as_map = store._convert_map(record_codec.decode(bytes(raw), 0), decode_properties(text),
                                T0, False, None)
    assert (as_text is None) == (as_map is None)
    if as_text is not None:
        assert (as_text.topic, as_text.queue_id) == (as_map.topic, as_map.queue_id)
        text_map = decode_properties(record_codec.decode(bytes(as_text.records), 0).properties)
        map_map = decode_properties(record_codec.decode(bytes(as_map.records), 0).properties)
        assert text_map == map_map


def _convert_ahead(store: TimerStore) -> int:
    """Run the worker's conversion ahead until it has nothing left; the calls that worked."""
    calls = 0
    while store.convert_ahead_step():
        calls += 1
    return calls
