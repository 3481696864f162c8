"""A slave's CommitLog takes only bytes that extend it contiguously and are whole records.

Method: a source CommitLog in tmp_path is filled with real encoded records (rolling files with
BLANK markers); its bytes are fed to a ReplicaLog in chunks of every awkward size (splitting
records, headers and BLANKs), and the replica must end byte-identical with the end of its last
whole record tracked. Then every refusal case: gaps, overlaps, misaligned first chunks, chunks
crossing a file end, damaged records, zeros and impossible sizes - each must leave nothing
written. Divergence helpers (first mismatch, record boundary, truncation across a restart)
run on the same real files.
"""
import os

import pytest

from pybroker._fast import record as record_codec
from pybroker.store import paths
from pybroker.store.commitlog import CommitLog
from pybroker.store.replica import (ReplicaLog, ReplicaRefused, apply_pending_truncation,
                                    pending_truncation, request_truncation)

FILE_SIZE = 16 * 1024
HOST = bytes([127, 0, 0, 1])
TOPIC = "ReplicaTopic"


def encode(body: bytes, queue_id: int = 0) -> bytes:
    size = record_codec.encoded_size(len(body), len(TOPIC), 0, 0)
    buffer = bytearray(size)
    record_codec.encode_into(buffer, 0, TOPIC.encode(), queue_id, 0, body, b"", 0,
                             1_700_000_000_000, HOST, 5555, HOST, 10911)
    return bytes(buffer)


def source_log(path, count: int, rand) -> CommitLog:
    commitlog = CommitLog(str(path), FILE_SIZE)
    for index in range(count):
        body = bytes([index % 251]) * rand.randrange(1, 1500)
        result = commitlog.append_encoded(encode(body), TOPIC, 0, 1, 0, 1_700_000_000_000 + index)
        assert result.status.name == "PUT_OK"
    return commitlog


def log_bytes(commitlog: CommitLog, start: int = 0, end: int | None = None) -> bytes:
    end = commitlog.max_offset() if end is None else end
    data = bytearray()
    for mapped_file in commitlog.mapped_file_queue.mapped_files:
        low = max(start, mapped_file.file_from_offset)
        high = min(end, mapped_file.file_from_offset + mapped_file.wrote_position)
        if low < high:
            view = mapped_file.view(low - mapped_file.file_from_offset, high - low)
            data += view
            view.release()
            mapped_file.release()
    return bytes(data)


def chunks(commitlog: CommitLog, sizes):
    """(offset, bytes) chunks of the source that never cross a file end, sizes cycling."""
    offset, end, index = 0, commitlog.max_offset(), 0
    while offset < end:
        file_end = (offset // FILE_SIZE + 1) * FILE_SIZE
        size = min(sizes[index % len(sizes)], file_end - offset, end - offset)
        yield offset, log_bytes(commitlog, offset, offset + size)
        offset += size
        index += 1


@pytest.mark.parametrize("sizes", [(1,), (7, 13), (12, 4096), (32 * 1024,), (3, 999, 5)])
def test_any_chunking_rebuilds_the_log_byte_for_byte(tmp_path, rand, sizes):
    count = 120 if sizes != (1,) else 30
    source = source_log(tmp_path / "master", count, rand)
    replica = ReplicaLog(CommitLog(str(tmp_path / "slave"), FILE_SIZE))
    for offset, data in chunks(source, sizes):
        replica.append(offset, data)
        assert replica.record_end <= replica.end
        # The end of the last whole record: a record boundary of the source.
        assert replica.record_end == replica.record_boundary_at_or_below(replica.record_end)
    assert replica.end == replica.record_end == source.max_offset()
    assert log_bytes(replica.commitlog) == log_bytes(source)
    assert replica.last_store_timestamp == 1_700_000_000_000 + count - 1
    assert len(source.mapped_file_queue.mapped_files) > 1, "the test must cross files"


def test_a_partial_record_counts_in_end_not_in_record_end(tmp_path):
    record = encode(b"x" * 300)
    replica = ReplicaLog(CommitLog(str(tmp_path), FILE_SIZE))
    replica.append(0, record + record[:10])
    assert (replica.record_end, replica.end) == (len(record), len(record) + 10)
    replica.append(len(record) + 10, record[10:])
    assert replica.record_end == replica.end == 2 * len(record)


def test_a_partial_record_is_dropped_whole_and_appending_goes_on(tmp_path):
    record = encode(b"y" * 300)
    commitlog = CommitLog(str(tmp_path), FILE_SIZE)
    replica = ReplicaLog(commitlog)
    assert replica.drop_partial() == 0                    # nothing written
    replica.append(0, record + record[:120])
    assert replica.drop_partial() == 120
    assert (replica.record_end, replica.end) == (len(record), len(record))
    with open(commitlog.mapped_file_queue.mapped_files[0].path, "rb") as on_disk:
        stored = on_disk.read(2 * len(record))
    assert stored == record + bytes(len(record))          # the fragment is zeroed
    assert replica.drop_partial() == 0                    # whole records only: unchanged
    replica.append(len(record), record)                   # the log goes on at record_end
    assert replica.record_end == replica.end == 2 * len(record)


def test_first_chunk_of_an_empty_slave_must_start_a_file(tmp_path):
    record = encode(b"y" * 10)
    replica = ReplicaLog(CommitLog(str(tmp_path), FILE_SIZE))
    with pytest.raises(ReplicaRefused, match="file boundary"):
        replica.append(100, record)
    replica.append(3 * FILE_SIZE, record)        # a fresh slave starts at the master's last file
    assert replica.end == 3 * FILE_SIZE + len(record)
    assert os.listdir(tmp_path) == ["00000000000000049152"]


def test_gaps_overlaps_and_file_crossings_are_refused(tmp_path):
    record = encode(b"z" * 100)
    replica = ReplicaLog(CommitLog(str(tmp_path), FILE_SIZE))
    replica.append(0, record)
    for offset in (0, len(record) - 1, len(record) + 1):
        with pytest.raises(ReplicaRefused, match="not the slave's end"):
            replica.append(offset, record)
    with pytest.raises(ReplicaRefused, match="crosses the CommitLog file end"):
        replica.append(len(record), bytes(FILE_SIZE))
    assert replica.end == replica.record_end == len(record)


@pytest.mark.parametrize("damage", ["crc", "magic", "zeros", "huge_size", "blank_short"])
def test_damaged_bytes_are_refused_and_undone(tmp_path, damage):
    good = encode(b"a" * 200)
    bad = bytearray(encode(b"b" * 200))
    if damage == "crc":
        bad[-30] ^= 0xFF              # a body byte: the body CRC no longer matches
    elif damage == "magic":
        bad[4:8] = b"\x00\x01\x02\x03"
    elif damage == "zeros":
        bad = bytearray(len(bad))
    elif damage == "huge_size":
        bad[0:4] = (FILE_SIZE * 2).to_bytes(4, "big")
    else:                             # a BLANK that does not reach the file end
        bad = bytearray((16).to_bytes(4, "big") + (0xCBD43194).to_bytes(4, "big") + bytes(8))
    replica = ReplicaLog(CommitLog(str(tmp_path), FILE_SIZE))
    replica.append(0, good)
    with pytest.raises(ReplicaRefused):
        replica.append(len(good), bytes(bad[:min(len(bad), 200)]) if damage == "huge_size"
                       else bytes(bad))
    assert replica.end == replica.record_end == len(good)
    mapped_file = replica.commitlog.mapped_file_queue.mapped_files[0]
    view = mapped_file.view(0, len(good))
    assert bytes(view) == good
    view.release()
    mapped_file.release()
    # Undone means zeroed too: the next good chunk goes where the bad one was refused.
    replica.append(len(good), good)
    assert replica.record_end == 2 * len(good)


def test_first_mismatch_and_record_boundaries(tmp_path, rand):
    source = source_log(tmp_path / "master", 60, rand)
    replica = ReplicaLog(CommitLog(str(tmp_path / "slave"), FILE_SIZE))
    for offset, data in chunks(source, (4096,)):
        replica.append(offset, data)
    end = replica.end
    assert replica.first_mismatch(0, log_bytes(source, 0, 5000)) is None
    changed = bytearray(log_bytes(source, end - 3000, end))
    changed[1234] ^= 1
    assert replica.first_mismatch(end - 3000, changed) == end - 3000 + 1234
    # Bytes beyond the replica's end are not compared.
    assert replica.first_mismatch(end - 10, log_bytes(source, end - 10, end) + b"more") is None
    boundary = replica.record_boundary_at_or_below(end - 3000 + 1234)
    assert boundary <= end - 3000 + 1234
    # A record or the BLANK that ends a file starts at the boundary.
    assert record_codec.check(log_bytes(source, boundary, end), 0, end - boundary,
                              True)[0] in (record_codec.RECORD_OK, record_codec.RECORD_BLANK)
    assert replica.record_boundary_at_or_below(end + 100) == end
    assert replica.record_boundary_at_or_below(boundary) == boundary
    first_end = replica.record_end_from(0)
    assert record_codec.check(log_bytes(source, 0, first_end), 0, first_end,
                              True) == (record_codec.RECORD_OK, first_end)
    assert replica.record_end_from(first_end - 1) == first_end - 1    # no record starts there
    assert replica.record_end_from(end) == end


def test_truncation_is_applied_by_the_next_start(tmp_path, rand):
    root = str(tmp_path)
    source = source_log(paths.commitlog_dir(root), 80, rand)
    end = source.max_offset()
    cut = ReplicaLog(source).record_boundary_at_or_below(FILE_SIZE + 100)
    source.shutdown(0)
    assert pending_truncation(root) is None
    request_truncation(root, cut)
    assert pending_truncation(root) == cut
    assert apply_pending_truncation(root, paths.commitlog_dir(root), FILE_SIZE) == cut
    assert pending_truncation(root) is None
    reopened = CommitLog(paths.commitlog_dir(root), FILE_SIZE)
    assert reopened.load()
    assert [f.file_from_offset for f in reopened.mapped_file_queue.mapped_files] == [0, FILE_SIZE]
    assert end > 2 * FILE_SIZE
    tail = reopened.mapped_file_queue.mapped_files[-1]
    view = tail.view(cut - FILE_SIZE, FILE_SIZE - (cut - FILE_SIZE))
    assert not any(view)
    view.release()
    tail.release()
    # A damaged request is dropped with a log line, never applied.
    with open(paths.ha_truncate_path(root), "w") as out:
        out.write("garbage")
    assert pending_truncation(root) is None
    assert not os.path.exists(paths.ha_truncate_path(root))
