"""CommitLog appends pre-encoded runs by RocketMQ's file rules and reads every record back.

Method: encode records with pybroker._fast.record into temp CommitLogs of 4-64 KiB files, append
them at exact file-boundary sizes, then read the files back with plain reads, read_record, the
cross-file iterator, a read-only reader and a replicated copy.
"""
import os
import struct

import pytest

from pybroker._fast import record as record_codec
from pybroker.protocol.constants import MessageSysFlag
from pybroker.store import layout
from pybroker.store.commitlog import CommitLog, topic_queue_key
from pybroker.store.mapped_file import offset_file_name
from pybroker.store.status import PutStatus

HOST = bytes([127, 0, 0, 1])
TOPIC = "TopicTest"


def encode(body: bytes, topic: str = TOPIC, properties: bytes = b"", sys_flag: int = 0,
           queue_id: int = 0) -> bytes:
    size = record_codec.encoded_size(len(body), len(topic.encode()), len(properties), sys_flag)
    buffer = bytearray(size)
    wrote = record_codec.encode_into(buffer, 0, topic.encode(), queue_id, 0, body, properties,
                                     sys_flag, 1_700_000_000_000, HOST, 5555, HOST, 10911)
    assert wrote == size
    return bytes(buffer)


def body_for_size(record_size: int) -> bytes:
    """A body making a record of exactly ``record_size`` bytes (no properties)."""
    body_length = record_size - record_codec.encoded_size(0, len(TOPIC), 0, 0)
    assert body_length >= 0
    return bytes([body_length % 256]) * body_length


def test_record_exactly_filling_to_remaining_minus_8_stays_in_file(tmp_path):
    file_size = 4096
    commitlog = CommitLog(str(tmp_path), file_size)
    last = encode(body_for_size(500))
    first = encode(body_for_size(file_size - len(last) - layout.END_FILE_MIN_BLANK_BYTES))
    assert commitlog.append_encoded(first, TOPIC, 0, 1, 0, 1).status is PutStatus.PUT_OK
    result = commitlog.append_encoded(last, TOPIC, 0, 1, 0, 2)
    assert result.status is PutStatus.PUT_OK and not result.file_rolled
    assert result.physical_offset == len(first)
    assert commitlog.mapped_file_queue.mapped_files[0].remaining() == 8
    # The next record rolls: an 8-byte BLANK closes the first file.
    rolled = commitlog.append_encoded(last, TOPIC, 0, 1, 0, 3)
    assert rolled.file_rolled and rolled.physical_offset == file_size
    commitlog.flush()
    with open(tmp_path / offset_file_name(0), "rb") as handle:
        data = handle.read()
    assert struct.unpack_from(">ii", data, file_size - 8) == (8, layout.BLANK_MAGIC_CODE)
    assert rolled.queue_offset == 2


def test_one_byte_more_rolls_with_blank_then_next_file(tmp_path):
    file_size = 4096
    commitlog = CommitLog(str(tmp_path), file_size)
    last = encode(body_for_size(500))
    first = encode(body_for_size(file_size - len(last) - layout.END_FILE_MIN_BLANK_BYTES + 1))
    commitlog.append_encoded(first, TOPIC, 0, 1, 0, 1)
    result = commitlog.append_encoded(last, TOPIC, 0, 1, 0, 2)
    assert result.status is PutStatus.PUT_OK and result.file_rolled
    assert result.physical_offset == file_size and result.queue_offset == 1
    commitlog.flush()
    with open(tmp_path / offset_file_name(0), "rb") as handle:
        data = handle.read()
    blank_size = file_size - len(first)
    assert struct.unpack_from(">ii", data, len(first)) == (blank_size, layout.BLANK_MAGIC_CODE)
    assert not any(data[len(first) + 8:])
    with commitlog.record_at(file_size) as message_record:
        assert message_record.physical_offset == file_size
        assert message_record.store_timestamp == 2
    assert commitlog.read_record(len(first)) is None      # the BLANK is not a record


def test_run_larger_than_a_file_is_refused(tmp_path):
    commitlog = CommitLog(str(tmp_path), 4096)
    big = encode(body_for_size(4096 - 7))
    assert commitlog.append_encoded(big, TOPIC, 0, 1, 0, 1).status is \
        PutStatus.MESSAGE_SIZE_EXCEEDED
    assert commitlog.max_offset() == 0


def test_batch_is_patched_in_one_run_and_never_straddles(tmp_path):
    commitlog = CommitLog(str(tmp_path), 5000)
    records = [encode(b"m%d" % index * 50) for index in range(10)]   # 200 bytes each
    run = b"".join(records)
    first = commitlog.append_encoded(run, TOPIC, 3, 10, 0, 777)
    assert (first.status, first.queue_offset, first.count) == (PutStatus.PUT_OK, 0, 10)
    second = commitlog.append_encoded(run, TOPIC, 3, 10, 0, 778)
    assert second.queue_offset == 10 and second.physical_offset == len(run)
    third = commitlog.append_encoded(run, TOPIC, 3, 10, 0, 779)
    assert third.file_rolled and third.physical_offset == 5000
    assert commitlog.next_queue_offset(TOPIC, 3) == 30
    seen = [(r.queue_offset, r.physical_offset, bytes(r.body)) for r in
            commitlog.record_iterator(0)]
    assert [q for q, _, _ in seen] == list(range(30))
    positions = [0]
    for message_record in records[:-1]:
        positions.append(positions[-1] + len(message_record))
    expected_physical = ([p for p in positions] + [len(run) + p for p in positions]
                         + [5000 + p for p in positions])
    assert [p for _, p, _ in seen] == expected_physical
    assert [b for _, _, b in seen] == [b"m%d" % (i % 10) * 50 for i in range(30)]


def test_bad_run_is_rejected_and_leaves_nothing(tmp_path):
    commitlog = CommitLog(str(tmp_path), 8192)
    good = encode(b"good")
    commitlog.append_encoded(good, TOPIC, 0, 1, 0, 1)
    damaged = bytearray(encode(b"bad!"))
    damaged[4] ^= 0xFF                                   # magic
    for run, count in ((bytes(damaged), 1), (good + good, 3)):
        result = commitlog.append_encoded(run, TOPIC, 0, count, 0, 2)
        assert result.status is PutStatus.MESSAGE_ILLEGAL
        assert commitlog.max_offset() == len(good)
    assert commitlog.next_queue_offset(TOPIC, 0) == 1
    commitlog.flush()
    with open(tmp_path / offset_file_name(0), "rb") as handle:
        assert not any(handle.read()[len(good):])


@pytest.mark.parametrize("transaction_type, advances", [
    (MessageSysFlag.TRANSACTION_PREPARED_TYPE, False),
    (MessageSysFlag.TRANSACTION_ROLLBACK_TYPE, False),
    (MessageSysFlag.TRANSACTION_COMMIT_TYPE, True),
    (0, True),
])
def test_transaction_types_and_queue_offsets(tmp_path, transaction_type, advances):
    commitlog = CommitLog(str(tmp_path), 8192)
    commitlog.set_topic_queue_table({topic_queue_key(TOPIC, 1): 41})
    message = encode(b"tx", sys_flag=int(transaction_type), queue_id=1)
    result = commitlog.append_encoded(message, TOPIC, 1, 1, int(transaction_type), 5)
    assert result.status is PutStatus.PUT_OK
    assert result.queue_offset == (41 if advances else 0)
    assert commitlog.next_queue_offset(TOPIC, 1) == (42 if advances else 41)
    with commitlog.record_at(0) as message_record:
        assert message_record.queue_offset == result.queue_offset


def test_read_raw_append_raw_replicate_byte_for_byte(tmp_path):
    master = CommitLog(str(tmp_path / "master"), 4096)
    for index in range(40):
        master.append_encoded(encode(b"%d" % index * 20), TOPIC, 0, 1, 0, index + 1)
    slave = CommitLog(str(tmp_path / "slave"), 4096)
    assert not slave.append_raw(100, b"x")
    offset = 0
    while offset < master.max_offset():
        view = master.read_raw(offset, 1000)
        assert view is not None and len(view) <= 1000
        assert slave.append_raw(offset, view)
        offset += len(view)
        master.release_raw(offset - len(view), view)
    assert master.read_raw(offset, 1000) is None
    assert slave.max_offset() == master.max_offset()
    master.flush()
    slave.flush()
    for name in sorted(os.listdir(tmp_path / "master")):
        assert (tmp_path / "master" / name).read_bytes() == (tmp_path / "slave" / name).read_bytes()
    assert [bytes(r.body) for r in slave.record_iterator(0)] == \
        [b"%d" % index * 20 for index in range(40)]


def test_read_only_reader_sees_every_record_of_several_files(tmp_path, rand):
    writer = CommitLog(str(tmp_path), 16 * 1024)
    bodies = [rand.randbytes(rand.randrange(0, 3000)) for _ in range(60)]
    offsets = []
    for index, body in enumerate(bodies):
        result = writer.append_encoded(encode(body), TOPIC, index % 4, 1, 0, 1000 + index)
        offsets.append(result.physical_offset)
    writer.flush()
    assert len(writer.mapped_file_queue.mapped_files) > 3
    reader = CommitLog(str(tmp_path), 16 * 1024, read_only=True)
    assert reader.load()
    for body, physical_offset in zip(bodies, offsets, strict=True):
        with reader.record_at(physical_offset) as message_record:
            assert bytes(message_record.body) == body
            assert message_record.physical_offset == physical_offset
    walked = list(reader.record_iterator(0, check_crc=True))
    assert [bytes(r.body) for r in walked] == bodies
    assert reader.append_encoded(encode(b"x"), TOPIC, 0, 1, 0, 1).status is \
        PutStatus.SERVICE_NOT_AVAILABLE
    del walked
    reader.shutdown(0)


def test_held_record_blocks_file_deletion_until_released(tmp_path):
    commitlog = CommitLog(str(tmp_path), 4096)
    for index in range(30):
        commitlog.append_encoded(encode(b"x" * 300), TOPIC, 0, 1, 0, index + 1)
    first_path = commitlog.mapped_file_queue.mapped_files[0].path
    message_record = commitlog.read_record(0)
    assert commitlog.delete_expired_files(0, 0, 60_000, True) == 0
    assert os.path.exists(first_path) and bytes(message_record.body) == b"x" * 300
    commitlog.release_record(message_record)
    assert not os.path.exists(first_path)      # unlinked as soon as the hold was released
    assert commitlog.delete_expired_files(0, 0, 60_000, True) >= 1
    assert commitlog.min_offset() > 0
    with pytest.raises(ValueError):
        commitlog.release_record(message_record)


def test_data_end_is_found_behind_empty_ready_files(tmp_path):
    """A restart without a published position finds the end of the records in the last file
    holding any, not at the start of an empty file the allocator made ready after it."""
    file_size = 4096
    commitlog = CommitLog(str(tmp_path), file_size)
    record = encode(body_for_size(500))
    for queue_offset in range(10):          # rolls once: file 0 ends with a BLANK
        assert commitlog.append_encoded(record, TOPIC, 0, 1, 0, queue_offset).status \
            is PutStatus.PUT_OK
    end = commitlog.max_offset()
    assert file_size < end < 2 * file_size
    commitlog.flush()
    commitlog.shutdown(0)
    for base in (2 * file_size, 3 * file_size):     # two ready, empty files
        with open(tmp_path / offset_file_name(base), "wb") as handle:
            handle.truncate(file_size)
    reloaded = CommitLog(str(tmp_path), file_size)
    assert reloaded.load()
    assert len(reloaded.mapped_file_queue.mapped_files) == 4
    assert reloaded.data_end() == end
    reloaded.shutdown(0)
    empty = CommitLog(str(tmp_path / "empty"), file_size)
    assert empty.load() and empty.data_end() == 0
