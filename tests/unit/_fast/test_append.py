"""The appender's C drain loop appends put requests exactly as CommitLog.append_encoded did.

Method: real byte and completion rings over bytearrays; put requests written with
pybroker.proc.ring_format (the producer's side) and records encoded with pybroker._fast.record;
RingDrainer.drain copies them into a bytearray standing for the mapped file. Every record is
decoded back (queue offset, physical offset, store time), every completion is checked, and the
queue-offset map is compared with a dict under random inserts and removals.
"""
import pytest

from pybroker._fast import append, record
from pybroker._fast.ring import ByteRing, CompletionRing
from pybroker.proc import ring_format
from pybroker.protocol.constants import MessageSysFlag
from pybroker.store.status import PutStatus

HOST = bytes([127, 0, 0, 1])
TOPIC = "DrainTopic"
STORE_TIMESTAMP = 1_700_000_000_999
OK = ring_format.status_code(PutStatus.PUT_OK)
ILLEGAL = ring_format.status_code(PutStatus.MESSAGE_ILLEGAL)
TOO_BIG = ring_format.status_code(PutStatus.MESSAGE_SIZE_EXCEEDED)
REFUSED = ring_format.status_code(PutStatus.SERVICE_NOT_AVAILABLE)


def records_of(bodies, queue_id=0, topic=TOPIC, sys_flag=0) -> bytearray:
    run = bytearray()
    for body in bodies:
        size = record.encoded_size(len(body), len(topic.encode()), 0, sys_flag)
        chunk = bytearray(size)
        record.encode_into(chunk, 0, topic.encode(), queue_id, 0, body, b"", sys_flag,
                           1_700_000_000_000, HOST, 4242, HOST, 10911)
        run += chunk
    return run


class Rings:
    def __init__(self, capacity=1 << 16, slots=64):
        self.ring = ByteRing(bytearray(ByteRing.region_size(capacity)), True, capacity)
        self.completions = CompletionRing(bytearray(CompletionRing.region_size(slots)), True,
                                          slots)
        self.offsets = append.TopicQueueOffsets()
        self.drainer = append.RingDrainer(self.offsets, OK, ILLEGAL, TOO_BIG)
        self.next_id = 1

    def put(self, records, queue_id=0, topic=TOPIC, count=None, sys_flag=0) -> int:
        topic_bytes = topic.encode() if isinstance(topic, str) else topic
        size = ring_format.put_request_size(len(topic_bytes), len(records))
        offset = self.ring.reserve(size)
        assert offset >= 0
        request_id, self.next_id = self.next_id, self.next_id + 1
        ring_format.write_put_request(self.ring.data(), offset, request_id, queue_id,
                                      count if count is not None else _count(records),
                                      sys_flag, False, topic_bytes, records)
        self.ring.commit()
        return request_id

    def drain(self, file, position=0, base=0, refuse=-1):
        result = self.drainer.drain(self.ring, self.completions, file, position, base,
                                    STORE_TIMESTAMP, refuse)
        self.completions.commit()
        return result

    def completed(self):
        return self.completions.drain()


def _count(records) -> int:
    status, _, count = record.scan(records, 0, len(records), False)
    return count


def decoded(file, start, end):
    found, at = [], start
    while at < end:
        message = record.decode(file, at)
        found.append((message.queue_id, message.queue_offset, message.physical_offset,
                      message.store_timestamp, bytes(message.body)))
        message.body.release()
        at += message.total_size
    return found


def test_runs_of_several_queues_get_consecutive_queue_offsets_and_physical_offsets():
    rings = Rings()
    runs = [records_of([b"a1", b"a2"], 0), records_of([b"b1"], 1), records_of([b"a3"], 0)]
    ids = [rings.put(run, queue_id) for run, queue_id in zip(runs, (0, 1, 0), strict=True)]
    file = bytearray(4096)
    stop, taken, appended, failed, position, wake = rings.drain(file, 100, base=1 << 20)
    assert (stop, taken, appended, failed) == (append.DRAIN_DONE, 3, 4, 0)
    assert position == 100 + sum(map(len, runs))
    first, second, third = 100, 100 + len(runs[0]), 100 + len(runs[0]) + len(runs[1])
    assert rings.completed() == [(ids[0], OK, 2, (1 << 20) + first, 0),
                                 (ids[1], OK, 1, (1 << 20) + second, 0),
                                 (ids[2], OK, 1, (1 << 20) + third, 2)]
    messages = decoded(file, 100, position)
    assert [(q, qo, body) for q, qo, _, _, body in messages] == [
        (0, 0, b"a1"), (0, 1, b"a2"), (1, 0, b"b1"), (0, 2, b"a3")]
    assert all(ts == STORE_TIMESTAMP for *_, ts, _ in messages)
    assert [phy - (1 << 20) for _, _, phy, _, _ in messages] == \
        [first, first + len(runs[0]) // 2, second, third]
    assert sorted(rings.offsets.items()) == [(TOPIC, 0, 3), (TOPIC, 1, 1)]
    assert rings.ring.used_bytes() == 0


def test_prepared_and_rollback_records_take_queue_offset_zero_and_do_not_advance():
    rings = Rings()
    rings.offsets.set(TOPIC, 0, 5)
    prepared = int(MessageSysFlag.TRANSACTION_PREPARED_TYPE)
    rings.put(records_of([b"half"], sys_flag=prepared), sys_flag=prepared)
    rings.put(records_of([b"normal"]))
    file = bytearray(2048)
    _, taken, appended, _, position, _ = rings.drain(file)
    assert (taken, appended) == (2, 2)
    assert [qo for _, qo, *_ in decoded(file, 0, position)] == [0, 5]
    assert rings.offsets.get(TOPIC, 0) == 6


@pytest.mark.parametrize("case", ["count", "topic_utf8", "no_records", "garbage"])
def test_bad_requests_complete_illegal_and_write_nothing(case):
    rings = Rings()
    good = records_of([b"x", b"y"])
    if case == "count":
        request_id = rings.put(good, count=3)
    elif case == "topic_utf8":
        request_id = rings.put(good, topic=b"\xff\xfe")
    elif case == "no_records":
        request_id = rings.put(b"", count=1)
    else:
        request_id = rings.put(bytes(len(good)), count=2)
    file = bytearray(1024)
    stop, taken, appended, failed, position, _ = rings.drain(file)
    assert (stop, taken, appended, failed, position) == (append.DRAIN_DONE, 1, 0, 1, 0)
    assert rings.completed() == [(request_id, ILLEGAL, 0, 0, 0)]
    assert file == bytearray(1024) and len(rings.offsets) in (0, 1)
    assert rings.offsets.get(TOPIC, 0) == 0


def test_a_run_that_does_not_fit_stops_for_a_roll_and_stays_in_the_ring():
    rings = Rings()
    run = records_of([b"z" * 100])
    first = rings.put(run)
    second = rings.put(run)
    file = bytearray(len(run) * 2 + 4)        # room for one run plus the 8-byte BLANK
    stop, taken, appended, _, position, _ = rings.drain(file)
    assert (stop, taken, appended, position) == (append.DRAIN_ROLL, 1, 1, len(run))
    assert [c[0] for c in rings.completed()] == [first]
    fresh = bytearray(len(run) * 2 + 4)
    stop, taken, appended, _, position, _ = rings.drain(fresh, 0, base=len(file))
    assert (stop, taken, appended, position) == (append.DRAIN_DONE, 1, 1, len(run))
    assert rings.completed() == [(second, OK, 1, len(file), 1)]


def test_a_run_no_file_can_hold_is_size_exceeded():
    rings = Rings()
    run = records_of([b"w" * 300])
    request_id = rings.put(run)
    stop, taken, _, failed, _, _ = rings.drain(bytearray(len(run) + 7))
    assert (stop, taken, failed) == (append.DRAIN_DONE, 1, 1)
    assert rings.completed() == [(request_id, TOO_BIG, 0, 0, 0)]


def test_refusing_completes_every_request_with_the_given_status_without_a_file():
    rings = Rings()
    ids = [rings.put(records_of([b"r"])) for _ in range(3)]
    stop, taken, appended, failed, _, _ = rings.drain(None, refuse=REFUSED)
    assert (stop, taken, appended, failed) == (append.DRAIN_DONE, 3, 0, 3)
    assert rings.completed() == [(request_id, REFUSED, 0, 0, 0) for request_id in ids]
    with pytest.raises(ValueError):
        rings.drain(None)


def test_a_full_completion_ring_blocks_and_the_rest_waits():
    rings = Rings(slots=2)
    ids = [rings.put(records_of([b"%d" % i])) for i in range(5)]
    file = bytearray(4096)
    stop, taken, _, _, position, _ = rings.drain(file)
    assert (stop, taken) == (append.DRAIN_BLOCKED, 2)
    assert [c[0] for c in rings.completed()] == ids[:2]
    stop, taken, _, _, position, _ = rings.drain(file, position)
    assert (stop, taken) == (append.DRAIN_BLOCKED, 2)
    assert [c[0] for c in rings.completed()] == ids[2:4]
    stop, taken, _, _, position, _ = rings.drain(file, position)
    assert (stop, taken) == (append.DRAIN_DONE, 1)
    assert [qo for _, qo, *_ in decoded(file, 0, position)] == [0, 1, 2, 3, 4]


def test_requests_across_the_ring_wrap_are_all_taken(rand):
    rings = Rings(capacity=1024, slots=64)
    file = bytearray(1 << 16)
    position, expected = 0, 0
    for _ in range(40):
        for _ in range(rand.randrange(1, 4)):
            body = bytes(rand.randrange(256) for _ in range(rand.randrange(1, 60)))
            rings.put(records_of([body]))
            expected += 1
        stop, _, _, _, position, _ = rings.drain(file, position)
        assert stop == append.DRAIN_DONE
        assert rings.ring.used_bytes() == 0
        assert all(status == OK for _, status, *_ in rings.completed())
    assert [qo for _, qo, *_ in decoded(file, 0, position)] == list(range(expected))


def test_queue_offset_map_behaves_like_a_dict(rand):
    offsets, model = append.TopicQueueOffsets(), {}
    topics = [f"t{i}" for i in range(300)] + ["Tópico-ü", "a-b-c"]
    for _ in range(20000):
        topic, queue_id = rand.choice(topics), rand.randrange(16)
        if rand.random() < 0.3:
            assert offsets.remove(topic, queue_id) == ((topic, queue_id) in model)
            model.pop((topic, queue_id), None)
        else:
            value = rand.randrange(1 << 40)
            offsets.set(topic, queue_id, value)
            model[(topic, queue_id)] = value
        assert offsets.get(topic, queue_id) == model.get((topic, queue_id), 0)
    assert len(offsets) == len(model)
    assert {(t, q): v for t, q, v in offsets.items()} == model
    offsets.clear()
    assert len(offsets) == 0 and offsets.items() == []


def test_layout_positions_are_the_ring_formats():
    assert append.PUT_REQUEST_LAYOUT["topic"] == ring_format.PUT_HEADER.size
