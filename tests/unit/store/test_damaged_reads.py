"""A read never serves a damaged record: it answers that record with an error and goes on.

Method: a real store in tmp_path (8 KiB CommitLog files) takes 200 records in one queue; then
bytes of one record are changed in its file on disk (the map sees them: the same page cache) -
a body byte (only the CRC tells), the size field, the whole header zeroed - and a
MessageStoreReader pulls the queue from offset 0 the way a consumer does, through the array
path and through the per-unit path (a record filter). Each pull must serve the records before
the damaged one, then answer MESSAGE_DAMAGED (PULL_OFFSET_MOVED on the wire) with the next
offset, then serve everything after it: every other record exactly once, in order, the damaged
one never. View by offset answers nothing for it. With checkCRCOnRead=false a changed body byte
goes unseen (the layout still checks), which is what the setting trades.
"""
import dataclasses
import os
import random

import numpy as np
import pytest

from pybroker._fast import record as record_codec
from pybroker.store import layout
from pybroker.store.damaged_records import DamagedRecords
from pybroker.store.message_store import MessageStore
from pybroker.store.read_only_store import MessageStoreReader
from pybroker.store.settings import StoreConfig
from pybroker.store.status import GetStatus, pull_response
from pybroker.protocol.codes import ResponseCode

HOST = bytes([127, 0, 0, 1])
TOPIC = "DamagedReads"
COUNT = 200
FILE_SIZE = 8192


def encode(index: int) -> bytearray:
    body = (b"damaged-reads-%05d-" % index) * 3
    buffer = bytearray(record_codec.encoded_size(len(body), len(TOPIC), 0, 0))
    record_codec.encode_into(buffer, 0, TOPIC.encode(), 0, 0, body, b"", 0, 1, HOST, 1, HOST, 2)
    return buffer


@pytest.fixture
def store(tmp_path):
    settings = StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=FILE_SIZE,
                           mapped_file_size_consume_queue=layout.CQ_STORE_UNIT_SIZE * 64,
                           message_index_enable=False)
    offsets = []
    with MessageStore(settings) as writer:
        for index in range(COUNT):
            result = writer.put_messages(encode(index), TOPIC, 0, 1, 0)
            offsets.append((result.physical_offset, result.wrote_bytes))
        end = writer.commitlog.max_offset()
    return settings, offsets, end


def damage(settings: StoreConfig, physical_offset: int, position: int, data: bytes) -> None:
    path = os.path.join(settings.commitlog_dir, "%020d" % (physical_offset // FILE_SIZE *
                                                           FILE_SIZE))
    with open(path, "r+b") as handle:
        handle.seek(physical_offset % FILE_SIZE + position)
        handle.write(data)


def read_all(reader, per_unit: bool, verify: bool = True):
    """Pull the queue like a consumer; (queue offsets served, damaged answers met).
    ``verify``: every served record must pass its check, body CRC included."""
    served, damaged, offset = [], [], 0
    record_filter = (lambda view: True) if per_unit else None
    while True:
        result = reader.get_messages("g", TOPIC, 0, offset, 32, None, None, record_filter)
        with result:
            if result.status is GetStatus.OFFSET_OVERFLOW_ONE:
                return served, damaged
            assert result.status in (GetStatus.FOUND, GetStatus.MESSAGE_DAMAGED), result
            if result.status is GetStatus.MESSAGE_DAMAGED:
                assert result.damaged_queue_offset == offset and not result.buffers
                assert result.next_begin_offset == offset + 1
                damaged.append(offset)
            for buffer in result.buffers:
                status, total_size = record_codec.check(buffer, 0, len(buffer), verify)
                assert status == record_codec.RECORD_OK and total_size == len(buffer)
                served.append(record_codec.decode(buffer, 0).queue_offset)
            assert result.next_begin_offset > offset
            offset = result.next_begin_offset


BODY_AT = layout.RECORD_BODY_LENGTH_POSITION_V4 + 4 + 5


@pytest.mark.parametrize("per_unit", [False, True], ids=["array_path", "unit_loop"])
@pytest.mark.parametrize("how", ["body_byte", "size_field", "header_zeroed"])
def test_a_damaged_record_is_answered_and_skipped_never_served(store, per_unit, how):
    settings, offsets, end = store
    damaged_index = 77
    physical_offset, size = offsets[damaged_index]
    data = {"body_byte": b"\xff", "size_field": b"\x7f", "header_zeroed": bytes(40)}[how]
    damage(settings, physical_offset, BODY_AT if how == "body_byte" else 0, data)
    with MessageStoreReader(settings, dispatched_position=end) as reader:
        reader.advance(end, end)
        served, damaged = read_all(reader, per_unit)
        assert damaged == [damaged_index]
        assert served == [index for index in range(COUNT) if index != damaged_index]
        assert reader.look_message_by_offset(physical_offset) is None
        neighbour = reader.look_message_by_offset(offsets[damaged_index + 1][0])
        assert neighbour is not None
        neighbour.release()


def test_without_crc_on_read_only_the_layout_is_checked(store):
    settings, offsets, end = store
    physical_offset, _ = offsets[10]
    damage(settings, physical_offset, BODY_AT, b"\xff")
    unchecked = dataclasses.replace(settings, check_crc_on_read=False)
    with MessageStoreReader(unchecked, dispatched_position=end) as reader:
        reader.advance(end, end)
        served, damaged = read_all(reader, per_unit=False, verify=False)
    assert damaged == [] and len(served) == COUNT


def test_damaged_answer_is_offset_moved_on_the_wire():
    """Java's consumer logs OFFSET_ILLEGAL and continues at nextBeginOffset (an error code
    would make it retry the same offset every 3 s)."""
    assert pull_response(GetStatus.MESSAGE_DAMAGED, 0)[0] == ResponseCode.PULL_OFFSET_MOVED
    assert pull_response(GetStatus.MESSAGE_DAMAGED, 9)[0] == ResponseCode.PULL_OFFSET_MOVED


def damage_unit(settings: StoreConfig, queue_offset: int, position: int, data: bytes) -> None:
    size = settings.mapped_file_size_consume_queue
    offset = queue_offset * layout.CQ_STORE_UNIT_SIZE + position
    path = os.path.join(settings.store_path_root_dir, "consumequeue", TOPIC, "0",
                        "%020d" % (offset // size * size))
    with open(path, "r+b") as handle:
        handle.seek(offset % size)
        handle.write(data)


@pytest.mark.parametrize("per_unit", [False, True], ids=["array_path", "unit_loop"])
@pytest.mark.parametrize("how", ["physical_offset_bit", "another_records_unit", "size_field",
                                 "two_units_zeroed", "512_bytes_zeroed"])
def test_a_damaged_unit_serves_its_record_from_the_commitlog(store, per_unit, how):
    """The consume queue is derived: a unit that does not point at its own record (here in an
    old queue file, which start-up does not read) must not cost its message."""
    settings, offsets, end = store
    index = 70
    other_offset, other_size = offsets[90]
    data, position = {
        "physical_offset_bit": ((offsets[index][0] ^ 0x10).to_bytes(8, "big"), 0),
        "another_records_unit": (other_offset.to_bytes(8, "big")
                                 + other_size.to_bytes(4, "big"), 0),
        "size_field": ((offsets[index][1] + 1).to_bytes(4, "big"), 8),
        "two_units_zeroed": (bytes(2 * layout.CQ_STORE_UNIT_SIZE), 0),
        "512_bytes_zeroed": (bytes(512), 0),
    }[how]
    damage_unit(settings, index, position, data)
    with MessageStoreReader(settings, dispatched_position=end) as reader:
        reader.advance(end, end)
        served, damaged = read_all(reader, per_unit)
    assert damaged == [] and served == list(range(COUNT))


def test_a_unit_pointing_past_every_file_is_damage_not_expiry(store):
    """Found by the damage property: a unit whose offset points past the CommitLog read as
    "file gone" (expired) and the pull skipped the rest of its batch."""
    settings, offsets, end = store
    damage_unit(settings, 50, 0, (1 << 40).to_bytes(8, "big"))
    with MessageStoreReader(settings, dispatched_position=end) as reader:
        reader.advance(end, end)
        served, damaged = read_all(reader, per_unit=False)
    assert damaged == [] and served == list(range(COUNT))


def test_read_spans_finds_each_record_without_a_view_a_record(store):
    """read_spans (the timer's conversion and assembly) names for each record the file view
    and start that hold its bytes (those look_message_by_offset reads), records of several
    files in any order; a record past the written end or in a damaged range is not there
    (-1)."""
    settings, offsets, end = store
    order = list(range(COUNT))
    random.Random(7).shuffle(order)
    physical = [offsets[index][0] for index in order] + [end]
    sizes = [offsets[index][1] for index in order] + [offsets[0][1]]
    with MessageStoreReader(settings, dispatched_position=end) as reader:
        reader.advance(end, end)
        expected = []
        for offset in physical[:-1]:
            selected = reader.look_message_by_offset(offset)
            expected.append(bytes(selected.buffer))
            selected.release()
        damaged_offset = physical[5]
        reader.damaged_records = DamagedRecords(settings.store_path_root_dir,
                                                [(damaged_offset, damaged_offset + 1)])
        spans = reader.read_spans(np.array(physical), np.array(sizes))
        try:
            assert len(spans.buffers) == len({offset // FILE_SIZE for offset in physical[:-1]})
            assert [index for index in range(len(physical)) if spans.which[index] < 0] == \
                [5, len(physical) - 1]
            assert spans.view(5, sizes[5]) is None
            for index, record in enumerate(expected):
                if index != 5:
                    which, start = int(spans.which[index]), int(spans.starts[index])
                    assert bytes(spans.buffers[which][start:start + sizes[index]]) == record
                    assert bytes(spans.view(index, sizes[index])) == record
        finally:
            spans.release()
