"""pybroker._fast.timer_reput rewrites parked timer records into re-put runs exactly as the
timer's Python rule does (broker/timer.py TimerStore._convert and broker/timer_runs.py runs_of).

Method: wheel-topic records are encoded with record.encode_into from hand-made and seeded random
properties strings (raw bytes: empty values, a separator inside a value, Unicode and invalid
UTF-8, surrogates and overlong forms, non-ASCII digits, queue ids past int32, a rolled mark,
cancel marks, IPv6 hosts, long topics); each goes through the Python rule and through
TimerReputs.convert. Whatever C takes must be the Python rule's record byte for byte with its
destination; what it leaves must be left by index; many records at once must give the runs the
Python rule groups and cuts (small run limits included). The seed is printed.
"""
import random

import numpy as np
import pytest

from pybroker._fast import record, timer_reput
from pybroker.broker import timer_runs
from pybroker.broker.timer import LONG_MAX, TimerFigures, TimerStore
from pybroker.broker.timer_message import TimerRefused, deliver_ms, slot_of
from pybroker.broker.timer_own import in_slot_or_end, own_time
from pybroker.protocol.properties import decode_properties

WHEEL = b"rmq_sys_wheel_timer"
ENQUEUE_MS, DEQUEUE_MS = 1_800_000_000_000, 1_800_000_004_321
V4_BORN, V4_STORE = bytes([10, 1, 2, 3]), bytes([10, 9, 8, 7])
V6_BORN, V6_STORE = bytes(range(1, 17)), bytes(range(40, 56))


def parked(properties: bytes, *, body=b"payload", sys_flag=0, flag=7,
           store_ms=1_799_999_999_000) -> bytes:
    born = V6_BORN if sys_flag & 0x10 else V4_BORN
    store = V6_STORE if sys_flag & 0x20 else V4_STORE
    size = record.encoded_size(len(body), len(WHEEL), len(properties), sys_flag)
    out = bytearray(size)
    record.encode_into(out, 0, WHEEL, 0, flag, body, properties, sys_flag, 1_700_000_000_001,
                       born, 4321, store, 10911, 3, 99, 55, 123456, store_ms)
    return bytes(out)


def python_rule():
    """A TimerStore with only what _convert uses (a slave's: no metrics)."""
    store = object.__new__(TimerStore)
    store.figures = TimerFigures()
    store.now_ms = lambda: DEQUEUE_MS
    store.dequeue_enabled = False
    store._metric_deltas = {}
    return store


def _each(views: list) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    """assemble's (buffers, which, starts, sizes) with one buffer a record (None: -1)."""
    buffers = [view for view in views if view is not None]
    which, at = [], 0
    for view in views:
        which.append(-1 if view is None else at)
        at += view is not None
    return (buffers, np.array(which, np.int32), np.zeros(len(views), np.int64),
            np.array([0 if view is None else len(view) for view in views], np.int64))


def _one_file(views: list, rng: random.Random) -> tuple[list, np.ndarray, np.ndarray,
                                                        np.ndarray]:
    """The records laid one after the other in one buffer (a mapped file), with gaps."""
    blob, starts = bytearray(), []
    for view in views:
        blob += rng.randbytes(rng.randrange(40))
        starts.append(len(blob))
        blob += b"" if view is None else bytes(view)
    which = np.array([-1 if view is None else 0 for view in views], np.int32)
    return ([memoryview(blob)], which, np.array(starts, np.int64),
            np.array([0 if view is None else len(view) for view in views], np.int64))


def c_rule(records: list, enqueue_ms=None, eligible=None, runs_max=timer_runs.RUN_RECORDS_MAX,
           bytes_max=timer_runs.RUN_BYTES_MAX, cancel_keys=()):
    count = len(records)
    enqueue = np.array(enqueue_ms or [ENQUEUE_MS] * count, np.int64)
    take = np.array(eligible or [1] * count, np.uint8)
    views = [None if item is None else memoryview(item) for item in records]
    answer = timer_runs.REPUTS.convert(*_each(views), enqueue, take, DEQUEUE_MS, runs_max,
                                       bytes_max, cancel_keys)
    # The same records where they lie in one mapped file (the timer's read_spans).
    assert timer_runs.REPUTS.convert(*_one_file(views, random.Random(count)), enqueue, take,
                                     DEQUEUE_MS, runs_max, bytes_max, cancel_keys) == answer
    return answer


def compare_one(properties: bytes, **record_fields) -> bool:
    """True when C took the record (and made the Python rule's record), False when it left
    it (index 0 in rest)."""
    raw = parked(properties, **record_fields)
    try:
        expected = python_rule()._convert(memoryview(raw), ENQUEUE_MS, False, None)
        raised = None
    except (ValueError, OverflowError) as error:
        expected, raised = None, error
    out, groups, runs, rest, dropped = c_rule([raw])
    assert dropped == []
    if rest == [0]:
        assert (out, groups, runs) == (bytearray(), [], [])
        return False
    assert raised is None and expected is not None, properties
    assert rest == [] and len(groups) == 1 and len(runs) == 1
    topic, queue_id, sys_flag, count = groups[0]
    assert (topic, queue_id, sys_flag, count) == (expected.topic, expected.queue_id,
                                                  expected.sys_flag, 1)
    assert runs[0] == (0, len(out), 1, 0)
    assert bytes(out) == bytes(expected.records), properties
    return True


@pytest.mark.parametrize("properties, taken", [
    (b"REAL_TOPIC\x01T\x02REAL_QID\x011\x02UNIQ_KEY\x01U1\x02", True),
    (b"KEYS\x01k\x02REAL_TOPIC\x01T\x02REAL_QID\x0112\x02", True),       # no separator at end
    (b"REAL_TOPIC\x01Tp\x02REAL_QID\x013", True),
    (b"REAL_QID\x012\x02REAL_TOPIC\x01A\x02REAL_TOPIC\x01B\x02", True),  # the last pair wins
    (b"REAL_TOPIC\x01T\x02REAL_QID\x01007\x02", True),
    (b"REAL_TOPIC\x01T\x02REAL_QID\x012147483647\x02", True),
    (b"REAL_TOPIC\x01T\x02REAL_QID\x011\x02X\x01a\x01b\x02", True),      # \x01 inside a value
    (b"REAL_TOPIC\x01T\x02REAL_QID\x011\x02K\x01\xc3\xa9\xf0\x9f\x98\x80\x02", True),
    (b"REAL_TOPIC\x01T\x02REAL_QID\x011\x02K\x01\x00\x7f\x02", True),
    (b"REAL_TOPIC\x01T\x02REAL_QID\x01\x02REAL_QID\x011\x02", True),     # empty, then a value
    (b"REAL_TOPIC\x01" + b"t" * 200 + b"\x02REAL_QID\x011\x02", True),   # magic v2 topic
    (b"REAL_TOPIC\x01T\x02REAL_QID\x011\x02REAL_QID\x01\x02", False),    # last value empty
    (b"REAL_TOPIC\x01T\x02REAL_QID\x011\x02UNIQ_KEY\x01\x02", False),
    (b"REAL_TOPIC\x01\x02REAL_QID\x011\x02", False),
    (b"REAL_TOPIC\x01T\x02REAL_QID\x01x\x02", False),                    # unusable queue id
    (b"REAL_TOPIC\x01T\x02REAL_QID\x012147483648\x02", False),           # past int32
    (b"REAL_TOPIC\x01T\x02REAL_QID\x01\xd9\xa1\x02", False),             # Arabic-Indic digit
    (b"REAL_TOPIC\x01T\x02REAL_QID\x01\xc2\xb2\x02", False),             # superscript two
    (b"REAL_QID\x011\x02", False),                                        # no real topic
    (b"REAL_TOPIC\x01T\x02REAL_QID\x011\x02TIMER_DEL_UNIQKEY\x01T+U\x02", False),
    (b"REAL_TOPIC\x01T\x02REAL_QID\x011\x02TIMER_ENQUEUE_MS\x015\x02", False),   # rolled
    (b"REAL_TOPIC\x01T\x02REAL_QID\x011\x02K\x01\xff\x02", False),       # invalid UTF-8
    (b"REAL_TOPIC\x01T\x02REAL_QID\x011\x02K\x01\xed\xa0\x80\x02", False),   # a surrogate
    (b"REAL_TOPIC\x01T\x02REAL_QID\x011\x02K\x01\xc0\xaf\x02", False),   # overlong
    (b"REAL_TOPIC\x01T\x02REAL_QID\x011\x02K\x01\xf4\x90\x80\x80\x02", False),  # > U+10FFFF
    (b"REAL_TOPIC\x01T\x02REAL_QID\x011\x02K\x01\xe2\x82", False),       # cut short at the end
    (b"REAL_TOPIC\x01T\x02REAL_QID\x011\x02K\x01" + b"v" * 32700, False),  # over 32767 after
    (b"", False),
])
def test_each_record_as_the_python_rule(properties, taken):
    assert compare_one(properties) is taken
    assert compare_one(properties, sys_flag=0x30, body=b"") is taken


def test_records_it_must_leave_are_left_by_index():
    """Unreadable, a roll, a delivery due at enqueue (Long.MAX) and a damaged record go to
    the Python rule; the others are taken."""
    good = parked(b"REAL_TOPIC\x01T\x02REAL_QID\x011\x02")
    damaged = bytearray(good)
    damaged[4] ^= 0xFF                          # magic
    records = [good, None, good, good, bytes(damaged), good]
    out, groups, runs, rest, _ = c_rule(records, [ENQUEUE_MS, ENQUEUE_MS, ENQUEUE_MS,
                                                  LONG_MAX, ENQUEUE_MS, ENQUEUE_MS],
                                        [1, 1, 0, 1, 1, 1])
    assert rest == [1, 2, 3, 4]
    assert groups == [("T", 1, 0, 2)] and runs == [(0, len(out), 2, 0)]


_NAMES = [b"REAL_TOPIC", b"REAL_QID", b"UNIQ_KEY", b"TIMER_DEL_UNIQKEY", b"KEYS", b"TAGS",
          b"TIMER_OUT_MS", b"TIMER_ENQUEUE_MS", b"TIMER_ROLL_TIMES", b"REAL", b"QID", b""]
_VALUES = [b"", b"T", b"TopicA", b"0", b"1", b"7", b"12", b"-1", b"2147483648", b"x",
           b"\xd9\xa1", b"\xc2\xb2", b"\xc3\xa9", b"\xf0\x9f\x98\x80", b"\xff", b"\xed\xa0\x80",
           b"\xc0\xaf", b"\xe2\x82", b"a\x01b", b"\x00", b"t" * 130, b"U-1"]


def _random_properties(rng: random.Random) -> bytes:
    pairs = [(b"REAL_TOPIC", rng.choice([b"T", b"TopicA", b"t" * 130])),
             (b"REAL_QID", rng.choice([b"0", b"1", b"7"]))]
    for _ in range(rng.randrange(0, 6)):
        pairs.insert(rng.randrange(len(pairs) + 1), (rng.choice(_NAMES), rng.choice(_VALUES)))
    text = b"\x02".join(name + b"\x01" + value for name, value in pairs)
    if rng.random() < 0.7:
        text += b"\x02"
    return text


def test_seeded_properties_as_the_python_rule():
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    taken = sum(compare_one(_random_properties(rng), sys_flag=rng.choice([0, 0x10, 0x20, 0x30]),
                            body=rng.randbytes(rng.randrange(0, 300)))
                for _ in range(3000))
    assert taken > 300            # the common case is C's: the test compares something


@pytest.mark.parametrize("runs_max, bytes_max", [
    (timer_runs.RUN_RECORDS_MAX, timer_runs.RUN_BYTES_MAX), (3, 1 << 20), (1000, 700)])
def test_many_records_give_the_python_runs(monkeypatch, runs_max, bytes_max):
    """Records of three queues and two topics, some left to Python: C's groups, records and
    runs are what runs_of makes of the Python rule's re-puts of the records C took."""
    rng = random.Random(7)
    records, enqueue = [], []
    for index in range(200):
        topic = rng.choice([b"T", b"Other"])
        queue = rng.choice([b"0", b"1", b"2"])
        extra = b"K\x01\xff\x02" if index % 17 == 0 else b""       # left to Python
        records.append(parked(b"UNIQ_KEY\x01U%d\x02" % index + extra + b"REAL_TOPIC\x01"
                              + topic + b"\x02REAL_QID\x01" + queue + b"\x02",
                              body=rng.randbytes(rng.randrange(1, 400))))
        enqueue.append(ENQUEUE_MS + index)
    out, groups, runs, rest, _ = c_rule(records, enqueue, runs_max=runs_max,
                                        bytes_max=bytes_max)
    assert rest == [index for index in range(200) if index % 17 == 0]
    rule = python_rule()
    reputs = [rule._convert(memoryview(item), enqueue_ms, False, None)
              for index, (item, enqueue_ms) in enumerate(zip(records, enqueue, strict=True))
              if index % 17]
    monkeypatch.setattr(timer_runs, "RUN_RECORDS_MAX", runs_max)
    monkeypatch.setattr(timer_runs, "RUN_BYTES_MAX", bytes_max)
    expected = timer_runs.runs_of(reputs)
    got = [(bytes(out[start:end]), groups[group][0], groups[group][1], count, groups[group][2])
           for start, end, count, group in runs]
    assert got == [(bytes(run.records), run.topic, run.queue_id, run.messages, run.sys_flag)
                   for run in expected]
    assert sum(group[3] for group in groups) == len(reputs)
    assert len(runs) > len(groups) or runs_max == timer_runs.RUN_RECORDS_MAX


def test_cancel_marks_drop_as_the_python_rule():
    """Messages named by the slot's cancel marks (REAL_TOPIC+UNIQ_KEY, a non-ASCII topic
    included) are dropped by C as by the Python rule applied in order: the first one a mark
    names, never a second with the same key, never one of another topic; the others are
    delivered byte for byte; more than CANCEL_KEYS_MAX keys are refused."""
    uniq = ["U1", "U2", "U1", "U3", "U4", "U2", "U5"]
    topics = ["T", "T", "T", "Other", "T\u00e9", "T", "T"]
    records = [parked(f"UNIQ_KEY\x01{key}\x02REAL_TOPIC\x01{topic}\x02REAL_QID\x011\x02"
                      .encode()) for key, topic in zip(uniq, topics, strict=True)]
    marks = {"T+U1": {}, "T+U3": {}, "T\u00e9+U4": {}, "T+U2": {}, "T+U9": {}}
    keys = list(marks)
    out, groups, runs, rest, dropped = c_rule(records,
                                              cancel_keys=tuple(k.encode() for k in keys))
    assert rest == []
    assert dropped == [(0, 0), (1, 3), (4, 2)]
    rule = python_rule()
    left = dict(marks)
    expected = [rule._convert(memoryview(item), ENQUEUE_MS, False, left) for item in records]
    assert rule.figures.cancelled == 3 and set(left) == {"T+U3", "T+U9"}
    assert [index for index, reput in enumerate(expected) if reput is None] == [0, 1, 4]
    got = [(bytes(out[start:end]), groups[group][0], count) for start, end, count, group in runs]
    assert got == [(bytes(run.records), run.topic, run.messages)
                   for run in timer_runs.runs_of([reput for reput in expected if reput])]
    with pytest.raises(ValueError):
        c_rule(records, cancel_keys=tuple(b"k%d" % n for n in range(timer_reput.CANCEL_KEYS_MAX
                                                                    + 1)))


def test_restamp_rewrites_every_record_s_dequeue_time_in_place():
    """restamp turns a convert output made at one dequeue time into the one made at another
    of the same length (the conversion ahead of a due slot); it refuses another length and a
    buffer whose records do not end with the pair convert writes."""
    records = [parked(b"REAL_TOPIC\x01T%d\x02REAL_QID\x01%d\x02" % (n % 2, n)) for n in range(5)]
    out, *_ = c_rule(records)
    later = DEQUEUE_MS + 777
    count = len(records)
    expected, *_ = timer_runs.REPUTS.convert(
        *_each([memoryview(item) for item in records]), np.array([ENQUEUE_MS] * count, np.int64),
        np.ones(count, np.uint8), later, timer_runs.RUN_RECORDS_MAX, timer_runs.RUN_BYTES_MAX, ())
    assert out != expected
    assert timer_reput.restamp(out, DEQUEUE_MS, later) and out == expected
    assert not timer_reput.restamp(out, later, 10 ** 13)          # 14 digits: refused
    damaged = bytearray(expected)
    damaged[-1] = 0x41
    assert not timer_reput.restamp(damaged, later, DEQUEUE_MS)
    assert timer_reput.restamp(bytearray(), DEQUEUE_MS, later)     # no record: nothing to do


def _converted_with_positions(records, enqueue, cancel_keys=()):
    positions = np.empty(len(records), np.int64)
    views = [None if item is None else memoryview(item) for item in records]
    out, groups, runs, rest, dropped = timer_runs.REPUTS.convert(
        *_each(views), np.array(enqueue, np.int64), np.ones(len(records), np.uint8), DEQUEUE_MS,
        timer_runs.RUN_RECORDS_MAX, timer_runs.RUN_BYTES_MAX, cancel_keys, positions)
    return out, runs, rest, dropped, positions, views


def assemble(recipes, positions, views, out_length):
    return timer_reput.assemble(recipes, positions, *_each(views), out_length)


def _seeded_records(rng: random.Random) -> tuple[list, list[int]]:
    """300 parked records (random properties, host kinds, empty and long bodies, two real
    topics and three queues interleaved, a few not readable: None) and their enqueue times."""
    records, enqueue = [], []
    for index in range(300):
        properties = _random_properties(rng) if rng.random() < 0.3 else \
            b"UNIQ_KEY\x01U%d\x02REAL_TOPIC\x01%s\x02REAL_QID\x01%d\x02" % (
                index, rng.choice([b"T", b"Other"]), rng.randrange(3))
        records.append(None if rng.random() < 0.02 else
                       parked(properties, sys_flag=rng.choice([0, 0x10, 0x20, 0x30]),
                              body=rng.randbytes(rng.choice([0, 1, 1024, rng.randrange(2000)]))))
        enqueue.append(ENQUEUE_MS + rng.randrange(10 ** 6))
    return records, enqueue


def test_recipes_assemble_to_the_conversion_byte_for_byte():
    """strip keeps each new record without its body; assemble with the parked records gives
    convert's output byte for byte (seeded random records: both host kinds, empty and long
    bodies, groups interleaved, records left to Python and dropped by a cancel mark, so
    positions hold -1). The recipes are smaller than the output by the bodies."""
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    records, enqueue = _seeded_records(rng)
    out, runs, rest, dropped, positions, views = _converted_with_positions(
        records, enqueue, (b"T+U5", b"Other+U6"))
    taken = [index for index in range(300) if positions[index] >= 0]
    assert len(taken) > 150 and set(taken).isdisjoint(rest)
    assert set(taken) | set(rest) | {index for index, _ in dropped} == set(range(300))
    recipes = timer_reput.strip(out, positions)
    bodies = sum(len(record.decode(bytes(out), int(positions[index])).body)
                 for index in taken)
    assert len(recipes) == len(out) - bodies
    assert assemble(recipes, positions, views, len(out)) == out
    # Held recipes, re-read records: the same views of other copies assemble the same.
    copies = [None if item is None else memoryview(bytearray(item)) for item in records]
    assert assemble(bytes(recipes), positions, copies, len(out)) == out
    # The records where they lie in one mapped file (the timer's read_spans), in any order.
    assert timer_reput.assemble(recipes, positions, *_one_file(views, rng), len(out)) == out
    assert assemble(bytearray(), np.full(3, -1, np.int64), [None] * 3, 0) == bytearray()


def test_assemble_refuses_records_that_do_not_match_their_recipes():
    """A parked record that cannot be read, one whose body is not as long as the recipe says
    or lies elsewhere (the other host kind), and recipes cut short or too long give None;
    strip refuses positions that do not name convert's records."""
    records = [parked(b"REAL_TOPIC\x01T\x02REAL_QID\x01%d\x02" % n, body=b"b" * (10 + n))
               for n in range(4)]
    out, _runs, rest, _dropped, positions, views = _converted_with_positions(
        records, [ENQUEUE_MS] * 4)
    assert rest == []
    recipes = timer_reput.strip(out, positions)
    assert assemble(recipes, positions, views, len(out)) == out
    for swap in (None, parked(b"REAL_TOPIC\x01T\x02REAL_QID\x012\x02", body=b"b" * 99),
                 parked(b"REAL_TOPIC\x01T\x02REAL_QID\x012\x02", body=b"b" * 12,
                        sys_flag=0x10)):
        changed = list(views)
        changed[2] = None if swap is None else memoryview(swap)
        assert assemble(recipes, positions, changed, len(out)) is None
    assert assemble(recipes[:-1], positions, views, len(out)) is None
    assert assemble(recipes + b"x", positions, views, len(out)) is None
    assert assemble(recipes, positions, views, len(out) - 1) is None
    # A span past its buffer, a buffer index out of range, a size short of the record.
    buffers, which, starts, sizes = _each(views)
    for field, value in ((starts, 1), (which, 9), (sizes, -1), (sizes, 30)):
        bad = field.copy()
        bad[1] = value if field is not sizes or value < 0 else sizes[1] - value
        parts = [bad if part is field else part for part in (which, starts, sizes)]
        assert timer_reput.assemble(recipes, positions, buffers, *parts, len(out)) is None
    with pytest.raises(ValueError):
        timer_reput.assemble(recipes, positions, buffers, which[:3], starts, sizes, len(out))
    assert timer_reput.strip(out[:-1], positions) is None
    shifted = positions.copy()
    shifted[1] += 1
    assert timer_reput.strip(out, shifted) is None


class _Spans:
    """What prepare reads of a SpansResult (read_spans), and whether it was released."""

    def __init__(self, buffers, which, starts):
        self.buffers, self.which, self.starts = buffers, which, starts
        self.released = 0

    def release(self):
        self.released += 1


def _prepared(recipes, positions, views, out_length, cuts, converted_ms=DEQUEUE_MS,
              dequeue_ms=DEQUEUE_MS):
    buffers, which, starts, sizes = _each(views)
    spans = _Spans(buffers, which, starts)
    written = np.flatnonzero(positions >= 0)
    order = written[np.argsort(positions[written], kind="stable")].astype(np.int64)
    return timer_reput.prepare(recipes, positions, order, spans, sizes, out_length, cuts,
                               converted_ms, dequeue_ms), spans


def _filled(assembly) -> bytearray:
    out = bytearray()
    for run in range(assembly.runs):
        target = bytearray(assembly.run_bytes(run) + 7)
        assembly.fill_into(run, target)
        out += target[:assembly.run_bytes(run)]
    return out


def test_prepared_runs_fill_the_conversion_run_by_run_byte_for_byte():
    """prepare + fill (what SendPath.put_assembled writes into the ring) give, run by run,
    the runs of assemble then restamp: convert's output with TIMER_DEQUEUE_MS rewritten
    (seeded random records as the assemble test, small run limits: many runs per group)."""
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    records, enqueue = _seeded_records(rng)
    positions = np.empty(len(records), np.int64)
    views = [None if item is None else memoryview(item) for item in records]
    out, _groups, cuts, rest, _dropped = timer_runs.REPUTS.convert(
        *_each(views), np.array(enqueue, np.int64), np.ones(len(records), np.uint8), DEQUEUE_MS,
        rng.randrange(1, 20), rng.randrange(1, 5000), (b"T+U5",), positions)
    taken = [index for index in range(300) if positions[index] >= 0]
    assert len(taken) > 150 and len(cuts) > 10
    recipes = timer_reput.strip(out, positions)
    later = DEQUEUE_MS + rng.randrange(10 ** 6)
    assembly, spans = _prepared(recipes, positions, [None if positions[index] < 0 else view
                                                     for index, view in enumerate(views)],
                                len(out), cuts, DEQUEUE_MS, later)
    expected = bytearray(out)
    assert timer_reput.restamp(expected, DEQUEUE_MS, later)
    assert assembly.runs == len(cuts)
    assert [assembly.run_records(run) for run in range(len(cuts))] == [cut[2] for cut in cuts]
    assert [assembly.run_bytes(run) for run in range(len(cuts))] == \
        [cut[1] - cut[0] for cut in cuts]
    assert _filled(assembly) == expected
    assert spans.released == 0
    assembly.release()
    assert spans.released == 1 and assembly.runs == 0
    with pytest.raises(IndexError):
        assembly.run_bytes(0)


def test_prepare_refuses_what_assemble_or_restamp_refuse():
    """A parked record that cannot be read or does not match its recipe, recipes cut short
    or too long, runs that are not convert's, and a time of another length give None."""
    records = [parked(b"REAL_TOPIC\x01T\x02REAL_QID\x01%d\x02" % (n % 2), body=b"b" * (10 + n))
               for n in range(4)]
    out, cuts, rest, _dropped, positions, views = _converted_with_positions(
        records, [ENQUEUE_MS] * 4)
    assert rest == [] and len(cuts) == 2
    recipes = timer_reput.strip(out, positions)
    assembly, _ = _prepared(recipes, positions, views, len(out), cuts)
    assert _filled(assembly) == out
    for swap in (None, parked(b"REAL_TOPIC\x01T\x02REAL_QID\x010\x02", body=b"b" * 99),
                 parked(b"REAL_TOPIC\x01T\x02REAL_QID\x010\x02", body=b"b" * 12,
                        sys_flag=0x10)):
        changed = list(views)
        changed[2] = None if swap is None else memoryview(swap)
        assert _prepared(recipes, positions, changed, len(out), cuts)[0] is None
    assert _prepared(recipes[:-1], positions, views, len(out), cuts)[0] is None
    assert _prepared(recipes + b"x", positions, views, len(out), cuts)[0] is None
    assert _prepared(recipes, positions, views, len(out) - 1, cuts)[0] is None
    moved = [(start, end + 1, count, group) for start, end, count, group in cuts]
    assert _prepared(recipes, positions, views, len(out), moved)[0] is None
    assert _prepared(recipes, positions, views, len(out), cuts[:1])[0] is None
    assert _prepared(recipes, positions, views, len(out), cuts, DEQUEUE_MS, 10 ** 13)[0] is None
    ends = bytearray(recipes)
    ends[-1] = 0x41                 # the last record does not end with TIMER_DEQUEUE_MS's pair
    assert _prepared(ends, positions, views, len(out), cuts)[0] is None


_TIMER_NAMES = [b"TIMER_DELIVER_MS", b"TIMER_DELAY_SEC", b"TIMER_DELAY_MS"]
_TIMER_VALUES = [b"", b"0", b"-1", b"1", b"999", b"1500", b"86400", b"+25", b"-25", b"007",
                 b"x", b"1.5", b" 5", b"\xd9\xa1", b"\xc2\xb2", b"\xef\xbc\x95",
                 b"9223372036854775807", b"-9223372036854775808", b"9223372036854775808",
                 b"9223372036854775", b"1\x012", b"\xff"]


def _timer_properties(rng: random.Random, store_ms: int) -> bytes:
    """A parked record's properties: its destination, zero to four of the three timer
    properties (repeated names, empty and malformed values, values that wrap a Java long,
    a deliver time near the store time), and pairs without a name or a value."""
    pairs = [b"REAL_TOPIC\x01T", b"REAL_QID\x011", b"UNIQ_KEY\x01U"]
    for _ in range(rng.randrange(0, 5)):
        name = rng.choice(_TIMER_NAMES)
        if name == b"TIMER_DELIVER_MS" and rng.random() < 0.5:
            value = b"%d" % (store_ms + rng.randrange(-2000, 4000))
        else:
            value = rng.choice(_TIMER_VALUES)
        pairs.insert(rng.randrange(len(pairs) + 1), name + b"\x01" + value)
    if rng.random() < 0.2:
        pairs.insert(rng.randrange(len(pairs) + 1),
                     rng.choice([b"\x01TIMER_DELAY_MS", b"TIMER_DELAY_MS", b"TIMER_DELAY_MS\x01",
                                 b"", b"X"]))
    return b"\x02".join(pairs) + (b"\x02" if rng.random() < 0.7 else b"")


def _python_own_ms(raw: bytes) -> int:
    """The put rule (broker/timer_message.py deliver_ms) at the record's store timestamp, as
    the enqueue reads it; OWN_MS_NONE_VALUE where it has none (none of the three, not a
    long)."""
    decoded = record.decode(memoryview(raw), 0)
    try:
        return deliver_ms(decode_properties(decoded.properties), decoded.store_timestamp)
    except (TimerRefused, KeyError):
        return timer_reput.OWN_MS_NONE_VALUE


def _utf8(text: bytes) -> bool:
    try:
        text.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_own_times_are_the_put_rule_s_at_the_store_timestamp():
    """convert's own_ms of each record is the Python put rule's time at the record's store
    timestamp (Java's precedence TIMER_DELAY_SEC > TIMER_DELAY_MS > TIMER_DELIVER_MS; seeded
    properties, store timestamps, malformed values), and what the running slot takes of it
    (in_slot_or_end) is own_time's for the slot: never earlier than the rule, the slot's end
    outside it. Records C does not plan (a roll, rolled before, due at enqueue, not UTF-8,
    not readable) have none. The seed is printed."""
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    records, stores, eligible, enqueue, texts = [], [], [], [], []
    for index in range(2000):
        store_ms = ENQUEUE_MS + rng.randrange(-10 ** 6, 10 ** 6)
        properties = _timer_properties(rng, store_ms)
        if index % 97 == 0:
            properties += b"TIMER_ENQUEUE_MS\x015\x02"           # rolled before
        if index % 89 == 0:
            properties += b"K\x01\xff\x02"                      # not UTF-8
        records.append(None if index % 101 == 0 else parked(properties, store_ms=store_ms))
        texts.append(properties)
        stores.append(store_ms)
        eligible.append(0 if index % 83 == 0 else 1)
        enqueue.append(LONG_MAX if index % 79 == 0 else ENQUEUE_MS)
    views = [None if item is None else memoryview(item) for item in records]
    own = np.empty(len(records), np.int64)
    timer_runs.REPUTS.convert(*_each(views), np.array(enqueue, np.int64),
                              np.array(eligible, np.uint8), DEQUEUE_MS,
                              timer_runs.RUN_RECORDS_MAX, timer_runs.RUN_BYTES_MAX, (), None, own)
    none = timer_reput.OWN_MS_NONE_VALUE
    read = inside = 0
    for index, raw in enumerate(records):
        planned = raw is not None and eligible[index] and enqueue[index] != LONG_MAX and \
            index % 97 and _utf8(texts[index])
        expected = _python_own_ms(raw) if planned else none
        assert own[index] == expected, (index, raw)
        read += expected != none
        # The slot the rule parked it in (or any other): what the running slot takes.
        slot_ms = slot_of(expected, 1000) if expected != none and rng.random() < 0.8 else \
            stores[index] // 1000 * 1000 + rng.randrange(-3, 4) * 1000
        taken = int(in_slot_or_end(own[index:index + 1], slot_ms, 1000)[0])
        inside += taken != slot_ms + 1000
        if planned:
            decoded = record.decode(memoryview(raw), 0)
            assert taken == own_time(decode_properties(decoded.properties),
                                     decoded.store_timestamp, slot_ms, 1000)
        else:
            assert taken == slot_ms + 1000
    assert read > 300 and inside > 300       # the test compares something
    with pytest.raises(ValueError):
        timer_runs.REPUTS.convert(*_each(views), np.array(enqueue, np.int64),
                                  np.array(eligible, np.uint8), DEQUEUE_MS, 256, 1 << 20, (),
                                  None, np.empty(3, np.int64))
