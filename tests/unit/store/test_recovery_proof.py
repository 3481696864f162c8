"""Recovery proves the end of the CommitLog: damage anywhere that hides valid records stops it.

Method: write a CommitLog of ten 8 KiB files with a stamped checkpoint (the flushed offset, as
the flusher stores it), keep the bytes, then per case restore them, damage one spot the way
issue #22 found recovery blind to it - a zeroed size field (an end-of-data marker) with valid
records behind it, a planted BLANK marker, a missing file in the scanned window and before it,
the last files removed, a file cut short, damage far outside the three-file window - and run
normal and abnormal recovery on real files. Each must refuse with one line naming the file,
the file position, the physical offset and skipDamagedRecordsOnRecover, leaving every byte on
disk as it was; with the option it must keep every record the damage did not hit. A torn last
record stays the one truncation, logged at WARNING with its byte count, and a clean start with
a stamped checkpoint does not look past the end at all (its cost stays the window's).
"""
import logging
import os

import pytest

from pybroker._fast import record as record_codec
from pybroker.errors import StoreCorruptError
from pybroker.store import layout, paths, recovery, record_search
from pybroker.store.checkpoint import StoreCheckpoint
from pybroker.store.commitlog import CommitLog
from pybroker.store.status import PutStatus

FILE_SIZE = 8192
FILES = 10
HOST = bytes([10, 0, 0, 7])
TOPIC = b"TopicProof"
BASE_TIMESTAMP_MS = 1_700_000_000_000
OPTION = "skipDamagedRecordsOnRecover"


def encode(index: int) -> bytes:
    body = (b"proof-%05d-" % index) * (4 + index % 7)
    size = record_codec.encoded_size(len(body), len(TOPIC), 0, 0)
    buffer = bytearray(size)
    record_codec.encode_into(buffer, 0, TOPIC, index % 4, 0, body, b"", 0, BASE_TIMESTAMP_MS,
                             HOST, 1234, HOST, 10911)
    return bytes(buffer)


class Store:
    """A CommitLog directory of FILES full files plus a stamped checkpoint; the records'
    (physical offset, size) and the bytes to restore between cases."""

    def __init__(self, root):
        self.root = str(root)
        self.path = paths.commitlog_dir(self.root)
        commitlog = CommitLog(self.path, FILE_SIZE)
        self.records: list[tuple[int, int]] = []
        index = 0
        while commitlog.max_offset() < (FILES - 1) * FILE_SIZE + FILE_SIZE // 2:
            data = encode(index)
            result = commitlog.append_encoded(data, TOPIC.decode(), index % 4, 1, 0,
                                              BASE_TIMESTAMP_MS + index)
            assert result.status is PutStatus.PUT_OK
            self.records.append((result.physical_offset, len(data)))
            index += 1
        self.max_offset = commitlog.max_offset()
        commitlog.flush()
        commitlog.shutdown(0)
        checkpoint = StoreCheckpoint(paths.checkpoint_path(self.root))
        checkpoint.physic_msg_timestamp = BASE_TIMESTAMP_MS + index
        checkpoint.logics_msg_timestamp = BASE_TIMESTAMP_MS + index
        checkpoint.commitlog_flushed_offset = self.max_offset
        checkpoint.shutdown()
        self.saved = self.snapshot()
        assert len(os.listdir(self.path)) == FILES

    def snapshot(self) -> dict[str, bytes]:
        found = {}
        for directory in (self.root, self.path):
            for name in os.listdir(directory):
                path = os.path.join(directory, name)
                if os.path.isfile(path):
                    with open(path, "rb") as handle:
                        found[path] = handle.read()
        return found

    def restore(self) -> None:
        for path in set(self.snapshot()) - set(self.saved):
            os.unlink(path)
        for path, data in self.saved.items():
            with open(path, "wb") as handle:
                handle.write(data)

    def file_of(self, offset: int) -> str:
        return os.path.join(self.path, "%020d" % (offset - offset % FILE_SIZE))

    def patch(self, offset: int, data: bytes) -> None:
        with open(self.file_of(offset), "r+b") as handle:
            handle.seek(offset % FILE_SIZE)
            handle.write(data)

    def in_file(self, file_number: int) -> list[tuple[int, int]]:
        base = file_number * FILE_SIZE
        return [(p, s) for p, s in self.records if base <= p < base + FILE_SIZE]

    def recover(self, abnormal: bool, skip: bool = False, suspects=(), walk_files=()):
        commitlog = CommitLog(self.path, FILE_SIZE)
        assert commitlog.load()
        checkpoint = StoreCheckpoint(paths.checkpoint_path(self.root), read_only=True)
        try:
            return commitlog, recovery.recover(commitlog, abnormal, checkpoint,
                                               skip_damaged=skip, suspects=suspects,
                                               walk_files=walk_files)
        except BaseException:
            commitlog.shutdown(0)
            raise

    def records_after(self, commitlog: CommitLog, offset: int) -> list[int]:
        return [r.physical_offset for r in commitlog.record_iterator(offset)]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return Store(tmp_path_factory.mktemp("proof"))


def refused(store: Store, abnormal: bool, *names: str) -> str:
    """Recovery refuses; the message is one line naming ``names`` and the option, and no byte
    on disk changed."""
    before = store.snapshot()
    with pytest.raises(StoreCorruptError) as error:
        store.recover(abnormal)
    message = str(error.value)
    assert "\n" not in message and OPTION in message, message
    for name in names:
        assert name in message, (name, message)
    assert store.snapshot() == before, "recovery changed the store before refusing"
    return message


ABNORMAL = pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])


@ABNORMAL
def test_zeroed_size_field_with_records_behind_it_refuses(store, abnormal):
    """Issue #22's reproduction: size 0 in a record of the third-last file read as the end
    of data, and every later acknowledged record was deleted."""
    offset, size = store.in_file(FILES - 3)[5]
    store.restore()
    store.patch(offset, bytes(4))
    message = refused(store, abnormal, store.file_of(offset),
                      f"file position {offset % FILE_SIZE}", f"physical offset {offset}")
    assert "end-of-data marker" in message
    commitlog, result = store.recover(abnormal, skip=True)
    assert result.valid_end_offset == store.max_offset == commitlog.max_offset()
    assert result.skipped_spans == [(offset, offset + size)]
    assert store.records_after(commitlog, offset + size) == [
        p for p, _ in store.records if p >= offset + size]
    commitlog.shutdown(0)


@ABNORMAL
def test_zeroed_block_behind_which_the_file_goes_on(store, abnormal):
    """512 zero bytes over several records (a lost disk sector): damage, not the end."""
    records = store.in_file(FILES - 2)
    offset = records[3][0]
    store.restore()
    store.patch(offset, bytes(512))
    refused(store, abnormal, store.file_of(offset), f"physical offset {offset}")
    commitlog, result = store.recover(abnormal, skip=True)
    (start, end), = result.skipped_spans
    assert start == offset and end >= offset + 512
    assert store.records_after(commitlog, end) == [p for p, _ in store.records if p >= end]
    commitlog.shutdown(0)


@ABNORMAL
def test_blank_marker_in_the_middle_of_a_file_refuses(store, abnormal):
    """A BLANK whose size reaches the file end would skip the rest of its file."""
    offset, _ = store.in_file(FILES - 2)[2]
    marker = bytearray(8)
    record_codec.write_blank(marker, 0, FILE_SIZE - offset % FILE_SIZE)
    store.restore()
    store.patch(offset, bytes(marker))
    message = refused(store, abnormal, store.file_of(offset), f"physical offset {offset}")
    assert "BLANK" in message


@ABNORMAL
@pytest.mark.parametrize("which", [FILES - 2, 2], ids=["in_window", "before_window"])
def test_missing_file_with_records_after_it_refuses(store, abnormal, which):
    store.restore()
    os.unlink(os.path.join(store.path, "%020d" % (which * FILE_SIZE)))
    message = refused(store, abnormal, "%020d" % (which * FILE_SIZE),
                      f"physical offset {which * FILE_SIZE}")
    assert "missing" in message
    commitlog, result = store.recover(abnormal, skip=True)
    assert result.skipped_spans == [(which * FILE_SIZE, (which + 1) * FILE_SIZE)]
    assert result.valid_end_offset == store.max_offset
    commitlog.shutdown(0)


@ABNORMAL
@pytest.mark.parametrize("removed", [1, 2])
def test_last_files_removed_refuses_against_the_flushed_offset(store, abnormal, removed):
    """Nothing valid follows, but the stamped checkpoint says the data reached further."""
    store.restore()
    for number in range(FILES - removed, FILES):
        os.unlink(os.path.join(store.path, "%020d" % (number * FILE_SIZE)))
    end = (FILES - removed) * FILE_SIZE
    message = refused(store, abnormal, "%020d" % end, str(store.max_offset))
    assert f"{store.max_offset - end} byte(s) of acknowledged messages" in message
    commitlog, result = store.recover(abnormal, skip=True)
    assert result.valid_end_offset == end
    commitlog.shutdown(0)


@ABNORMAL
def test_last_record_zeroed_below_the_flushed_offset_refuses(store, abnormal):
    """A zeroed last record has nothing valid after it; only the checkpoint tells that it
    was flushed, hence acknowledged, and not a crash's torn write."""
    offset, size = store.records[-1]
    store.restore()
    store.patch(offset, bytes(size))
    refused(store, abnormal, store.file_of(offset), f"physical offset {offset}")


@ABNORMAL
def test_without_a_stamped_checkpoint_a_damaged_last_record_is_a_torn_tail(store, abnormal,
                                                                           caplog):
    """Java's checkpoint (or a damaged one) vouches for nothing: the last record's damage is
    then taken as a torn write, truncated and logged at WARNING with its byte count."""
    offset, size = store.records[-1]
    store.restore()
    with open(paths.checkpoint_path(store.root), "wb") as handle:
        handle.write(bytes(layout.CHECKPOINT_FILE_SIZE))
    store.patch(offset + size - 3, b"\xff\xff\xff")      # body CRC no longer matches
    with caplog.at_level(logging.WARNING, logger="pybroker.store.recovery"):
        commitlog, result = store.recover(abnormal)
    assert result.valid_end_offset == offset == commitlog.max_offset()
    assert result.damaged_offset == offset and result.truncated_bytes == size
    warning, = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert f"{size} byte(s) truncated" in warning.getMessage()
    assert f"physical offset {offset}" in warning.getMessage()
    commitlog.shutdown(0)


def test_torn_tail_beyond_the_flushed_offset_is_truncated(store, caplog):
    """A crash tears the record being written, above what the flusher had stored."""
    offset, size = store.records[-1]
    store.restore()
    checkpoint = StoreCheckpoint(paths.checkpoint_path(store.root))
    checkpoint.commitlog_flushed_offset = offset
    checkpoint.shutdown()
    store.patch(offset + size // 2, bytes(size - size // 2))
    with caplog.at_level(logging.WARNING, logger="pybroker.store.recovery"):
        commitlog, result = store.recover(abnormal=True)
    assert result.valid_end_offset == offset and result.truncated_bytes == size // 2
    assert any("torn" in r.getMessage() for r in caplog.records)
    commitlog.shutdown(0)


@ABNORMAL
def test_first_record_of_an_old_file_outside_the_window_refuses(store, abnormal):
    offset, _ = store.in_file(1)[0]
    store.restore()
    store.patch(offset, bytes(4))
    refused(store, abnormal, store.file_of(offset), f"physical offset {offset}")


def test_damage_the_scrubber_found_outside_the_window_refuses(store):
    """A record in the middle of an old file is the scrubber's (a clean start reads only each
    old file's first record); what it found is passed in and checked again."""
    abnormal = False
    offset, size = store.in_file(2)[4]
    body_at = layout.RECORD_BODY_LENGTH_POSITION_V4 + 4 + 2    # a body byte: CRC fails
    at = offset % FILE_SIZE + body_at
    flipped = bytes(b ^ 0xFF for b in store.saved[store.file_of(offset)][at:at + 2])
    store.restore()
    store.patch(offset + body_at, flipped)
    commitlog, _ = store.recover(abnormal)            # not seen without the scrubber
    commitlog.shutdown(0)
    store.restore()
    store.patch(offset + body_at, flipped)
    with pytest.raises(StoreCorruptError, match=f"physical offset {offset}"):
        store.recover(abnormal, suspects=[offset])
    store.restore()                                   # restored from a backup: resolved
    commitlog, result = store.recover(abnormal, suspects=[offset])
    assert result.valid_end_offset == store.max_offset
    commitlog.shutdown(0)


def test_short_file_refuses_and_the_option_treats_the_cut_as_damage(store, tmp_path):
    store.restore()
    path = os.path.join(store.path, "%020d" % (4 * FILE_SIZE))
    os.truncate(path, 3000)
    with pytest.raises(StoreCorruptError) as error:
        recovery.check_file_sizes(store.path, FILE_SIZE, False)
    message = str(error.value)
    assert path in message and "file position 3000" in message and OPTION in message
    assert os.path.getsize(path) == 3000
    extended = recovery.check_file_sizes(store.path, FILE_SIZE, True)
    assert extended == [4 * FILE_SIZE]
    commitlog, result = store.recover(abnormal=False, skip=True, walk_files=extended)
    (start, end), = result.skipped_spans
    assert 4 * FILE_SIZE <= start <= 4 * FILE_SIZE + 3000 and end <= 5 * FILE_SIZE
    assert result.valid_end_offset == store.max_offset
    commitlog.shutdown(0)


def test_every_file_the_wrong_size_names_the_setting(store):
    store.restore()
    with pytest.raises(StoreCorruptError, match="mappedFileSizeCommitLog=16384"):
        recovery.check_file_sizes(store.path, 2 * FILE_SIZE, False)


def test_clean_start_with_a_stamped_checkpoint_does_not_look_past_the_end(store, monkeypatch):
    """The cost of a clean start stays the window's: the flushed offset proves the end."""
    store.restore()

    def forbidden(*args):
        raise AssertionError("looked past a proven end")
    monkeypatch.setattr(recovery, "next_valid_record", forbidden)
    monkeypatch.setattr(record_search, "next_valid_record", forbidden)
    commitlog, result = store.recover(abnormal=False)
    assert result.valid_end_offset == store.max_offset
    assert result.scan_from_offset == (FILES - 3) * FILE_SIZE
    commitlog.shutdown(0)


@ABNORMAL
def test_clean_store_recovers_whole(store, abnormal):
    store.restore()
    commitlog, result = store.recover(abnormal)
    assert result.valid_end_offset == store.max_offset
    assert not result.skipped_spans and result.damaged_offset is None
    assert store.records_after(commitlog, result.scan_from_offset) == [
        p for p, _ in store.records if p >= result.scan_from_offset]
    commitlog.shutdown(0)


def test_magic_codes_share_their_first_three_bytes():
    """record_search finds both record versions with one search."""
    v1 = (layout.MESSAGE_MAGIC_CODE_V1 & 0xFFFFFFFF).to_bytes(4, "big")
    v2 = (layout.MESSAGE_MAGIC_CODE_V2 & 0xFFFFFFFF).to_bytes(4, "big")
    assert v1[:3] == v2[:3] and v1 != v2
