"""MessageStoreReader serves exactly what a writer dispatched, the same way MessageStore does.

Method: a MessageStore writes a real store in tmp_path (tiny CommitLog, consume-queue and index
files so that files roll while the reader is open); a MessageStoreReader opened beside it is
advanced to chosen dispatched positions and its answers are compared with the writer's own
(the oracle) and with what was put. File mapping is counted by the reader's refreshes_total.
"""
import os

import pytest

from pybroker._fast import pagecache
from pybroker._fast import record as record_codec
from pybroker._fast.jhash import tags_code
from pybroker.protocol.properties import encode_properties
from pybroker.store import paths
from pybroker.store.message_store import MessageStore
from pybroker.store.settings import StoreConfig
from pybroker.store.read_only_store import MessageStoreReader
from pybroker.store.status import GetStatus, PutStatus

HOST = bytes([127, 0, 0, 1])
TOPIC = "ReaderTopic"


def encode(body: bytes, topic: str = TOPIC, queue_id: int = 0, **properties) -> bytearray:
    encoded = encode_properties(properties).encode()
    size = record_codec.encoded_size(len(body), len(topic.encode()), len(encoded), 0)
    buffer = bytearray(size)
    record_codec.encode_into(buffer, 0, topic.encode(), queue_id, 0, body, encoded, 0,
                             1_700_000_000_000, HOST, 4242, HOST, 10911)
    return buffer


def settings_for(tmp_path) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(tmp_path / "store"),
                       mapped_file_size_commit_log=16 * 1024,
                       mapped_file_size_consume_queue=32 * 20, max_hash_slot_num=64,
                       max_index_num=256)


def body_of(index: int, size: int) -> bytes:
    return (b"%06d|" % index) * (1 + size)


def bodies(result) -> list[bytes]:
    return [bytes(record_codec.decode(buffer, 0).body) for buffer in result.buffers]


def read_queue(store, topic: str, queue_id: int) -> list[bytes]:
    found, queue_offset = [], 0
    while True:
        result = store.get_messages("g", topic, queue_id, queue_offset, 32)
        with result:
            if result.status is not GetStatus.FOUND:
                return found
            found += bodies(result)
            queue_offset = result.next_begin_offset


@pytest.fixture
def writer(tmp_path):
    with MessageStore(settings_for(tmp_path)) as store:
        yield store


def put_many(store, rand, count: int, queues: int = 3) -> list[tuple[int, bytes, int]]:
    """(queue_id, body, end physical offset) of each put, in put order."""
    puts = []
    for index in range(count):
        queue_id = rand.randrange(queues)
        body = body_of(index, rand.randrange(0, 40))
        result = store.put_messages(encode(body, queue_id=queue_id, KEYS=f"k{index}",
                                           TAGS=f"t{index % 3}"), TOPIC, queue_id, 1, 0)
        assert result.status is PutStatus.PUT_OK
        puts.append((queue_id, body, result.physical_offset + result.wrote_bytes))
    return puts


def test_reader_serves_only_up_to_the_dispatched_position(tmp_path, writer, rand):
    puts = put_many(writer, rand, 60)
    with MessageStoreReader(settings_for(tmp_path)) as reader:
        assert reader.get_messages("g", TOPIC, 0, 0, 32).status is \
            GetStatus.NO_MESSAGE_IN_QUEUE
        for cut in (0, 1, 17, 59):
            reader.advance(puts[cut][2])
            for queue_id in range(3):
                expected = [body for q, body, _ in puts[:cut + 1] if q == queue_id]
                assert read_queue(reader, TOPIC, queue_id) == expected
                assert reader.get_max_offset_in_queue(TOPIC, queue_id) == len(expected)


def test_a_queue_opened_behind_a_later_file_counts_only_what_it_reached(tmp_path, writer):
    """A reader that opens a queue when the writer has gone on into the queue's next file
    (32 units a file here) counts, in its max offset, only the units below its position;
    the later file is mapped again when the reader's position reaches it (seed 2219500391 of
    the ack bounds test found a reader that counted the later file: (32, 32) for (27, 27))."""
    ends = []
    for index in range(40):
        result = writer.put_messages(encode(body_of(index, 5)), TOPIC, 0, 1, 0)
        ends.append(result.physical_offset + result.wrote_bytes)
    with MessageStoreReader(settings_for(tmp_path)) as reader:
        reader.advance(ends[26])
        assert reader.get_offset_bounds_in_queue(TOPIC, 0) == (0, 27)
        assert reader.get_max_offset_in_queue(TOPIC, 0) == 27
        reader.advance(ends[34])
        assert reader.get_offset_bounds_in_queue(TOPIC, 0) == (0, 35)
        reader.advance(ends[39])
        assert reader.get_offset_bounds_in_queue(TOPIC, 0) == (0, 40)
        assert read_queue(reader, TOPIC, 0) == [body_of(index, 5) for index in range(40)]


def test_reader_follows_files_created_after_it_opened(tmp_path, writer, rand):
    with MessageStoreReader(settings_for(tmp_path)) as reader:
        puts = []
        for _ in range(4):
            puts += put_many(writer, rand, 80)
            reader.advance(writer.max_physical_offset)
            for queue_id in range(3):
                assert read_queue(reader, TOPIC, queue_id) == \
                    [body for q, body, _ in puts if q == queue_id]
            with reader.query_messages(TOPIC, "k79", 32, 0, 1 << 62) as queried:
                assert puts[-1][1] in bodies(queried)
        assert len(reader.commitlog.mapped_file_queue.mapped_files) >= 3
        assert len(reader.index_service.index_files) >= 2


def test_reader_answers_like_the_writer(tmp_path, writer, rand):
    puts = put_many(writer, rand, 150)
    with MessageStoreReader(settings_for(tmp_path), writer.max_physical_offset) as reader:
        for _ in range(40):
            queue_id, offset = rand.randrange(4), rand.randrange(-2, 70)
            tags = {tags_code(f"t{rand.randrange(3)}")} if rand.random() < 0.5 else None
            max_count = rand.randrange(1, 40)
            ours = reader.get_messages("g", TOPIC, queue_id, offset, max_count, tag_codes=tags)
            theirs = writer.get_messages("g", TOPIC, queue_id, offset, max_count,
                                         tag_codes=tags)
            with ours, theirs:
                assert (ours.status, ours.next_begin_offset, ours.min_offset,
                        ours.max_offset) == (theirs.status, theirs.next_begin_offset,
                                             theirs.min_offset, theirs.max_offset)
                assert bodies(ours) == bodies(theirs)
        for queue_id in range(3):
            for name in ("get_min_offset_in_queue", "get_max_offset_in_queue"):
                assert getattr(reader, name)(TOPIC, queue_id) == \
                    getattr(writer, name)(TOPIC, queue_id)
        for topic, queue_id in ((TOPIC, 0), (TOPIC, 3), (TOPIC, 9), ("Unknown", 0)):
            expected = (writer.get_min_offset_in_queue(topic, queue_id),
                        writer.get_max_offset_in_queue(topic, queue_id))
            assert reader.get_offset_bounds_in_queue(topic, queue_id) == expected
            assert writer.get_offset_bounds_in_queue(topic, queue_id) == expected
            stamp = writer.get_message_store_timestamp(TOPIC, queue_id, 1)
            assert reader.get_message_store_timestamp(TOPIC, queue_id, 1) == stamp
            assert reader.get_offset_in_queue_by_time(TOPIC, queue_id, stamp) == \
                writer.get_offset_in_queue_by_time(TOPIC, queue_id, stamp)
        assert reader.get_earliest_message_time() == writer.get_earliest_message_time()
        index = rand.randrange(len(puts))
        with reader.query_messages(TOPIC, f"k{index}", 32, 0, 1 << 62) as queried:
            assert puts[index][1] in bodies(queried)
        put = writer.put_messages(encode(b"by id"), TOPIC, 0, 1, 0)
        reader.advance(writer.max_physical_offset)
        with reader.view_message_by_id(put.message_id) as viewed:
            assert bytes(record_codec.decode(viewed.buffer, 0).body) == b"by id"
        assert reader.runtime_info()["commitLogMaxOffset"] == str(writer.max_physical_offset)


def test_reader_answers_the_same_call_for_the_same_limits(tmp_path, writer, rand):
    put_many(writer, rand, 90, queues=1)
    with MessageStoreReader(settings_for(tmp_path), writer.max_physical_offset) as reader:
        for offset in range(0, 90, 7):
            for max_count in (1, 5, 32):
                with reader.get_messages("g", TOPIC, 0, offset, max_count) as ours, \
                        writer.get_messages("g", TOPIC, 0, offset, max_count) as theirs:
                    assert bodies(ours) == bodies(theirs)
                    assert ours.next_begin_offset == theirs.next_begin_offset


def test_idle_pulls_map_nothing_and_unknown_queues_are_checked_once(tmp_path, writer, rand):
    put_many(writer, rand, 20)
    with MessageStoreReader(settings_for(tmp_path), writer.max_physical_offset) as reader:
        read_queue(reader, TOPIC, 0)
        reader.get_messages("g", "NoSuchTopic", 0, 0, 32).release()
        mapped = reader.refreshes_total
        for _ in range(50):
            result = reader.get_messages("g", TOPIC, 0, reader.get_max_offset_in_queue(
                TOPIC, 0), 32)
            assert result.status is GetStatus.OFFSET_OVERFLOW_ONE
            assert reader.get_messages("g", "NoSuchTopic", 0, 0, 32).status is \
                GetStatus.NO_MESSAGE_IN_QUEUE
        assert reader.refreshes_total == mapped
        assert reader.get_messages("g", "bad/topic", 0, 0, 32).status is \
            GetStatus.NO_MESSAGE_IN_QUEUE


def test_reader_sees_a_queue_created_later_and_never_writes(tmp_path, writer, rand):
    put_many(writer, rand, 5)
    with MessageStoreReader(settings_for(tmp_path), writer.max_physical_offset) as reader:
        assert reader.get_max_offset_in_queue("Later", 1) == 0
        writer.put_messages(encode(b"late", topic="Later", queue_id=1), "Later", 1, 1, 0)
        assert reader.get_max_offset_in_queue("Later", 1) == 0     # not dispatched to us yet
        reader.advance(writer.max_physical_offset)
        assert read_queue(reader, "Later", 1) == [b"late"]
        assert reader.commitlog.read_only and reader.consume_queue_store.read_only
    assert not os.path.exists(os.path.join(str(tmp_path / "store"), "consumequeue", "Later",
                                           "0"))


def test_positions_source_is_read_at_every_call_and_bounds_look_ups_by_written(tmp_path,
                                                                                writer):
    starts, ends = [], []
    for index in range(10):
        result = writer.put_messages(encode(body_of(index, 5)), TOPIC, 0, 1, 0)
        assert result.status is PutStatus.PUT_OK
        starts.append(result.physical_offset)
        ends.append(result.physical_offset + result.wrote_bytes)
    live = {"dispatched": ends[3], "written": ends[7]}
    with MessageStoreReader(settings_for(tmp_path),
                            positions=lambda: (live["dispatched"], live["written"])) as reader:
        # Dispatched bounds what queues serve; written bounds look-ups by physical offset.
        assert read_queue(reader, TOPIC, 0) == [body_of(i, 5) for i in range(4)]
        for index in (3, 7):
            with reader.look_message_by_offset(starts[index]) as selected:
                assert bytes(record_codec.decode(selected.buffer, 0).body) == body_of(index, 5)
        assert reader.look_message_by_offset(starts[8]) is None
        # Moved by the source alone, without advance(): the next calls see it.
        live.update(dispatched=ends[9], written=ends[9])
        assert reader.get_max_offset_in_queue(TOPIC, 0) == 10
        with reader.look_message_by_offset(starts[9]) as selected:
            assert bytes(record_codec.decode(selected.buffer, 0).body) == body_of(9, 5)


@pytest.mark.parametrize("record_filter", [None, lambda view: True],
                         ids=["at-once", "per-unit"])
def test_a_queue_read_catches_up_once_and_serves_what_it_saw(tmp_path, writer, record_filter):
    """get_messages reads the writers' positions once (the queue's look-up) and its CommitLog
    reads stay within them, though the writers move on while it reads."""
    ends = []
    for index in range(12):
        result = writer.put_messages(encode(body_of(index, 5)), TOPIC, 0, 1, 0)
        assert result.status is PutStatus.PUT_OK
        ends.append(result.physical_offset + result.wrote_bytes)
    calls = []

    def positions() -> tuple[int, int]:
        # Each call sees one more message dispatched than the one before.
        position = ends[min(len(calls) + 2, len(ends) - 1)]
        calls.append(position)
        return position, position
    with MessageStoreReader(settings_for(tmp_path), positions=positions) as reader:
        for offset, seen in ((0, 3), (2, 4), (4, 5)):
            before = len(calls)
            with reader.get_messages("g", TOPIC, 0, offset, 32, None, None,
                                     record_filter) as result:
                assert len(calls) == before + 1
                assert result.status is GetStatus.FOUND
                assert bodies(result) == [body_of(i, 5) for i in range(offset, seen)]
                assert (result.next_begin_offset, result.max_offset) == (seen, seen)


@pytest.mark.parametrize("file_first", [False, True], ids=["no-file", "file-not-dispatched"])
def test_a_queue_that_had_no_unit_corrects_its_min_offset_when_it_grows(tmp_path, writer,
                                                                          file_first):
    """A queue the reader found without units (no file yet, or a file whose units it may not
    serve yet) whose first units point below the CommitLog's published min offset (their
    files deleted meanwhile) starts at the first unit above it, as a queue opened then does."""
    first = writer.put_messages(encode(body_of(0, 5), queue_id=1), TOPIC, 1, 1, 0)
    size = first.wrote_bytes
    published_min = first.physical_offset + 2 * size     # the second record of queue 0
    live = {"dispatched": writer.max_physical_offset}

    def put_queue_0() -> None:
        for index in range(1, 4):
            result = writer.put_messages(encode(body_of(index, 5)), TOPIC, 0, 1, 0)
            assert result.status is PutStatus.PUT_OK and result.wrote_bytes == size
    if file_first:
        put_queue_0()
    else:
        os.makedirs(paths.consume_queue_dir(str(tmp_path / "store"), TOPIC, 0))
    with MessageStoreReader(settings_for(tmp_path),
                            positions=lambda: (live["dispatched"], live["dispatched"]),
                            store_changes=lambda: (published_min, 0)) as reader:
        assert reader.get_messages("g", TOPIC, 0, 0, 32).status is \
            GetStatus.NO_MESSAGE_IN_QUEUE
        if not file_first:
            put_queue_0()
        live["dispatched"] = writer.max_physical_offset
        with reader.get_messages("g", TOPIC, 0, 0, 32) as result:
            assert (result.status, result.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, 1)
        assert reader.get_offset_bounds_in_queue(TOPIC, 0) == (1, 3)
        with reader.get_messages("g", TOPIC, 0, 1, 32) as result:
            assert bodies(result) == [body_of(2, 5), body_of(3, 5)]


def test_a_queue_without_files_whose_first_file_is_gone_starts_at_its_files(tmp_path, writer):
    """A queue the reader found without files whose first consume-queue file is deleted
    before the reader sees it (cleanup) starts at the first unit of the files left."""
    os.makedirs(paths.consume_queue_dir(str(tmp_path / "store"), TOPIC, 0))
    live = {"dispatched": 0}
    with MessageStoreReader(settings_for(tmp_path),
                            positions=lambda: (live["dispatched"], live["dispatched"])) as reader:
        assert reader.get_messages("g", TOPIC, 0, 0, 32).status is \
            GetStatus.NO_MESSAGE_IN_QUEUE
        for index in range(40):                 # 32 units a file: two files
            result = writer.put_messages(encode(body_of(index, 5)), TOPIC, 0, 1, 0)
            assert result.status is PutStatus.PUT_OK
        files = writer.consume_queue_store.find(TOPIC, 0).mapped_file_queue.mapped_files
        os.remove(files[0].path)
        live["dispatched"] = writer.max_physical_offset
        assert reader.get_offset_bounds_in_queue(TOPIC, 0) == (32, 40)
        with reader.get_messages("g", TOPIC, 0, 32, 32) as result:
            assert bodies(result) == [body_of(i, 5) for i in range(32, 40)]


class _Published:
    """The dispatcher's table of max offsets (store/queue_offsets.py QueueOffsetReader's
    max_offset): an answer for queue 1 only, None (cannot say) for the others."""

    def max_offset(self, topic: str, queue_id: int) -> int | None:
        return 77 if (topic, queue_id) == (TOPIC, 1) else None


def test_bounds_in_one_call_are_the_two_calls_with_a_published_table(tmp_path, writer, rand):
    put_many(writer, rand, 60)
    with MessageStoreReader(settings_for(tmp_path), writer.max_physical_offset,
                            queue_offsets=_Published()) as reader:
        for topic, queue_id in ((TOPIC, 0), (TOPIC, 1), (TOPIC, 7), ("Unknown", 1)):
            assert reader.get_offset_bounds_in_queue(topic, queue_id) == (
                reader.get_min_offset_in_queue(topic, queue_id),
                reader.get_max_offset_in_queue(topic, queue_id))
        assert reader.get_offset_bounds_in_queue(TOPIC, 1)[1] == 77


def test_one_unit_check_is_the_numpy_rule():
    """_unit_counts (one unit, struct) answers as _valid_units (numpy) for fillers, zeroed,
    negative, empty and limit-straddling units, seeded."""
    import random
    import struct
    from pybroker.store import layout
    from pybroker.store.read_only_store import _unit_counts, _valid_units
    rng = random.Random(24)
    units = [(0, layout.CQ_FILLER_SIZE, 0), (0, 0, 0), (-1, 5, 0), (10, 0, 0), (10, -3, 0),
             (0, 7, 1)] + [(rng.randrange(-5, 5000), rng.randrange(-5, 300), rng.randrange(9))
                           for _ in range(200)]
    buffer = bytearray(layout.CQ_STORE_UNIT_SIZE * len(units))
    for index, unit in enumerate(units):
        struct.pack_into(">qiq", buffer, index * layout.CQ_STORE_UNIT_SIZE, *unit)
    view = memoryview(buffer)
    for limit in (0, 7, 100, 2500, 5300, 1 << 40):
        expected = [bool(valid) for valid in _valid_units(view, 0, len(units), limit)]
        assert [_unit_counts(view, index, limit) for index in range(len(units))] == expected


def test_an_ack_s_bounds_check_answers_as_a_caught_up_one(tmp_path, writer, rand):
    """offset_outside_queue (an ack's check) answers as the caught-up bounds check of a reader
    with the same sources (the oracle), over seeded histories: puts, the dispatched position
    moving or not, reads that bring queues up to it, the CommitLog's published min offset
    moving (files deleted: the min offsets move up) and a topic deletion's count; offsets
    around each queue's bounds. A queue this reader knows whose bounds hold the offset answers
    without reading the writers' positions."""
    live = {"dispatched": 0, "changes": (0, 0)}
    positions_calls = []

    def positions() -> tuple[int, int]:
        positions_calls.append(1)
        return live["dispatched"], live["dispatched"]

    def oracle_positions() -> tuple[int, int]:
        return live["dispatched"], live["dispatched"]
    ends = []
    settings = settings_for(tmp_path)
    with MessageStoreReader(settings, positions=positions,
                            store_changes=lambda: live["changes"]) as reader, \
            MessageStoreReader(settings, positions=oracle_positions,
                               store_changes=lambda: live["changes"]) as oracle:
        fast = 0
        for _ in range(60):
            ends += [end for _, _, end in put_many(writer, rand, rand.randrange(0, 6))]
            if ends and rand.random() < 0.7:
                live["dispatched"] = max(live["dispatched"], rand.choice(ends))
            if ends and rand.random() < 0.1:
                min_offset, deletions = live["changes"]
                live["changes"] = (max(min_offset, rand.choice(ends)), deletions)
            if rand.random() < 0.05:
                live["changes"] = (live["changes"][0], live["changes"][1] + 1)
            if rand.random() < 0.5:
                queue_id = rand.randrange(3)
                reader.get_messages("g", TOPIC, queue_id, 0, 1).release()
            for _ in range(6):
                queue_id = rand.randrange(4)
                low, high = oracle.get_offset_bounds_in_queue(TOPIC, queue_id)
                offset = rand.randrange(low - 2, high + 3)
                expected = None if low <= offset <= high else (low, high)
                before = len(positions_calls)
                assert reader.offset_outside_queue(TOPIC, queue_id, offset) == expected, \
                    (queue_id, offset, low, high)
                fast += len(positions_calls) == before
        assert fast > 20


def test_an_ack_s_bounds_check_catches_up_only_when_the_queue_does_not_hold_it(tmp_path,
                                                                              writer):
    ends = []
    for index in range(6):
        result = writer.put_messages(encode(body_of(index, 5)), TOPIC, 0, 1, 0)
        ends.append(result.physical_offset + result.wrote_bytes)
    live = {"dispatched": ends[2], "changes": (0, 0)}
    calls = []

    def positions() -> tuple[int, int]:
        calls.append(1)
        return live["dispatched"], live["dispatched"]
    with MessageStoreReader(settings_for(tmp_path), positions=positions,
                            store_changes=lambda: live["changes"]) as reader:
        assert reader.get_offset_bounds_in_queue(TOPIC, 0) == (0, 3)
        live["dispatched"] = ends[5]
        before = len(calls)
        for offset in (0, 1, 2):                 # held as the reader last saw the queue
            assert reader.offset_outside_queue(TOPIC, 0, offset) is None
        assert len(calls) == before
        assert reader.offset_outside_queue(TOPIC, 0, 4) is None     # caught up: 0..6
        assert len(calls) == before + 1
        assert reader.offset_outside_queue(TOPIC, 0, 7) == (0, 6)
        # Files deleted below the third record: the queue starts at 2 for a caught-up check.
        live["changes"] = (ends[1], 0)
        assert reader.offset_outside_queue(TOPIC, 0, 1) == (2, 6)
        assert reader.offset_outside_queue(TOPIC, 0, 2) is None


@pytest.mark.parametrize("record_filter", [None, lambda view: True],
                         ids=["at-once", "per-unit"])
def test_only_a_read_asked_for_its_residency_asks_mincore(tmp_path, writer, record_filter,
                                                          monkeypatch):
    """A read measures its records' page residency (pagecache.cold_pages, one mincore per run
    of records) only when asked (the pull handler's figures): a POP's read makes no such
    system call. Asked, the figures are those of its records' pages, taken before the read's
    checks."""
    for index in range(6):
        assert writer.put_messages(encode(body_of(index, 5)), TOPIC, 0, 1,
                                   0).status is PutStatus.PUT_OK
    measured = []
    real_cold_pages = pagecache.cold_pages

    def cold_pages(views):
        figures = real_cold_pages(views)
        measured.append(figures)
        return figures
    monkeypatch.setattr(pagecache, "cold_pages", cold_pages)
    with MessageStoreReader(settings_for(tmp_path), writer.max_physical_offset) as reader:
        with reader.get_messages("g", TOPIC, 0, 0, 32, None, None, record_filter) as result:
            assert result.status is GetStatus.FOUND and len(bodies(result)) == 6
            assert measured == []
        with reader.get_messages("g", TOPIC, 0, 0, 32, None, None, record_filter,
                                 residency=True) as result:
            assert result.status is GetStatus.FOUND and len(bodies(result)) == 6
            assert measured, "a read asked for its residency measures it"
            pages, cold = result.page_residency()
            assert (pages, cold) == (sum(p for p, _ in measured), sum(c for _, c in measured))
            assert pages >= 1 and cold == 0     # just written: in the page cache
