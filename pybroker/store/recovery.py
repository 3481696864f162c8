# CommitLog recovery after a clean stop (normal) or a crash (abnormal), and dirty-tail truncation.
"""Find the end of valid CommitLog data, truncate everything after it, re-dispatch if needed.

* Normal recovery (no abort file): scan the last 3 files from their start.
* Abnormal recovery (abort file present): start at the newest file whose first record's store
  time is <= the checkpoint's recovery point (see :class:`~pybroker.store.checkpoint.
  StoreCheckpoint`), scan from there to the end and re-dispatch every record from that file on
  through the caller's callback (dispatch must be idempotent: a ConsumeQueue skips entries it
  already has, as in Java).

Both scan whole files in C (``record.scan``): Python runs per file, and per record only for the
dispatch callback. The scan stops at zeros (end of data), at a damaged record (CORRUPT or
TRUNCATED) or at a BLANK marker (next file). What follows a damaged record decides:

* no valid record after it (a torn tail, garbage appended by a crash): the data after it is
  truncated - zeroed in its file, later files deleted - so nothing half-written is served;
* a valid record after it (a record that checks, CRC included, and names its own physical
  offset), in the same file or a later one: this is damage in the middle of acknowledged data,
  never a crash's tail. Recovery stops with :class:`~pybroker.errors.StoreCorruptError` naming
  the file, the file position and the physical offset (reliability R6: fail-stop, never a
  silent truncation), unless ``skip_damaged`` (``skipDamagedRecordsOnRecover=true``) or the
  range is already in :class:`~pybroker.store.damaged_records.DamagedRecords`: then the range
  up to the next valid record is skipped (logged, returned in ``skipped_spans``) and the scan
  goes on there.
"""
import dataclasses
import logging
from collections.abc import Callable, Iterator

from pybroker._fast import record as record_codec
from pybroker.errors import StoreCorruptError
from pybroker.store import layout
from pybroker.store.checkpoint import StoreCheckpoint
from pybroker.store.commitlog import CommitLog
from pybroker.store.damaged_records import DamagedRecords
from pybroker.store.mapped_file import MappedFile

log = logging.getLogger("pybroker.store.recovery")

NORMAL_RECOVERY_FILES_COUNT = 3        # Java scans the last three files after a clean stop
# A record starts 4 bytes before its magic code; both magic codes, big-endian.
_MAGIC_CODES = tuple((code & 0xFFFFFFFF).to_bytes(4, "big") for code in (
    layout.MESSAGE_MAGIC_CODE_V1, layout.MESSAGE_MAGIC_CODE_V2))
_MAGIC_POSITION = layout.RECORD_MAGIC_POSITION
_PHYSICAL_OFFSET_POSITION = layout.RECORD_PHYSICAL_OFFSET_POSITION


@dataclasses.dataclass(slots=True)
class RecoveryResult:
    """What recovery found; every offset is a global CommitLog offset in bytes."""
    valid_end_offset: int
    abnormal: bool
    scan_from_offset: int
    # Where re-dispatch starts (abnormal recovery), None when nothing needs re-dispatching.
    dispatch_from_offset: int | None = None
    # Offset of the damaged record that ended the valid data (a torn tail), None for a clean
    # end.
    damaged_offset: int | None = None
    dispatched_count: int = 0
    # Damaged ranges [start, end) skipped in the middle of the log (operator's choice).
    skipped_spans: list = dataclasses.field(default_factory=list)


def _is_record_at(buffer, position: int, file_from_offset: int, file_size: int) -> bool:
    """A whole record with a valid body CRC that names its own physical offset."""
    status, _ = record_codec.check(buffer, position, file_size, True)
    if status != record_codec.RECORD_OK:
        return False
    field = position + _PHYSICAL_OFFSET_POSITION
    return int.from_bytes(buffer[field:field + 8], "big") == file_from_offset + position


def _first_record_from(mapped_file: MappedFile, start: int) -> int | None:
    """File position of the first valid record at or after ``start`` (see _is_record_at)."""
    if not mapped_file.hold():
        raise RuntimeError(f"{mapped_file.path} was shut down during recovery")
    buffer = mapped_file.buffer()
    try:
        data = buffer.obj if isinstance(buffer.obj, bytes) else None
        finder = data if data is not None else _Finder(buffer)
        best = None
        for magic in _MAGIC_CODES:
            at = finder.find(magic, start + _MAGIC_POSITION)
            while at >= 0 and (best is None or at - _MAGIC_POSITION < best):
                position = at - _MAGIC_POSITION
                if _is_record_at(buffer, position, mapped_file.file_from_offset,
                                 mapped_file.file_size):
                    best = position
                    break
                at = finder.find(magic, at + 1)
        return best
    finally:
        buffer.release()
        mapped_file.release()


class _Finder:
    """``bytes.find`` over a memoryview in 1 MiB chunks (no copy of a whole file)."""

    _CHUNK_BYTES = 1 << 20

    def __init__(self, view: memoryview):
        self.view = view

    def find(self, needle: bytes, start: int) -> int:
        end = len(self.view)
        while start < end:
            stop = min(start + self._CHUNK_BYTES + len(needle) - 1, end)
            found = bytes(self.view[start:stop]).find(needle)
            if found >= 0:
                return start + found
            start += self._CHUNK_BYTES
        return -1


def next_valid_record(commitlog: CommitLog, index: int, position: int) -> int | None:
    """Global offset of the first valid record after the damaged one at file ``index``,
    ``position`` (this file first, then the later ones), or None: nothing valid follows."""
    files = commitlog.mapped_file_queue.mapped_files
    for later in range(index, len(files)):
        found = _first_record_from(files[later], position + 1 if later == index else 0)
        if found is not None:
            return files[later].file_from_offset + found
    return None


def _torn_last_record(mapped_file: MappedFile, buffer, end_position: int,
                      start: int = 0) -> int | None:
    """File position of the last record before ``end_position`` if it looks torn, else None.

    The format leaves topic and properties bytes unchecked, so a record whose tail was never
    written (zeros) or whose append-time patch is missing can still parse. The last record of
    the log is where a crash leaves such a record: it must name its own physical offset, have
    a store time, and have no NUL in its topic or at the end of its properties.
    """
    # Scanning to one byte short stops AT the last record (it no longer fits): its start.
    status, last_position, _ = record_codec.scan(buffer, start, end_position - 1, False)
    if status != record_codec.RECORD_TRUNCATED:
        return None
    last = record_codec.decode(buffer, last_position)
    try:
        whole = (last.physical_offset == mapped_file.file_from_offset + last_position
                 and last.store_timestamp != 0
                 and "\x00" not in last.topic
                 and not last.properties.endswith("\x00"))
    finally:
        last.body.release()
    return None if whole else last_position


def _scan_file(mapped_file: MappedFile, check_crc: bool, start: int = 0) -> tuple[int, int]:
    """Scan one file from file position ``start``: (status, file position where it stopped)."""
    file_size = mapped_file.file_size
    if not mapped_file.hold():
        raise RuntimeError(f"{mapped_file.path} was shut down during recovery")
    buffer = mapped_file.buffer()
    try:
        status, position, _ = record_codec.scan(buffer, start, file_size, check_crc)
        if status == record_codec.RECORD_BLANK:
            _, total_size = record_codec.check(buffer, position, file_size, False)
            if position + total_size != file_size:
                status = record_codec.RECORD_CORRUPT   # a BLANK must reach the file end
        elif status == record_codec.RECORD_END and position == file_size:
            status = record_codec.RECORD_BLANK         # exactly full: continue in the next file
        elif status == record_codec.RECORD_END and position > start:
            last_position = _torn_last_record(mapped_file, buffer, position, start)
            if last_position is not None:
                return record_codec.RECORD_CORRUPT, last_position
        return status, position
    finally:
        buffer.release()
        mapped_file.release()


def _damage_text(mapped_file: MappedFile, position: int, status: int) -> str:
    return (f"CommitLog file {mapped_file.path}: damaged record (status {status}) at file "
            f"position {position}, physical offset {mapped_file.file_from_offset + position}")


def _find_valid_end(commitlog: CommitLog, start_index: int, check_crc: bool,
                    damaged: DamagedRecords | None = None,
                    skip_damaged: bool = False) -> tuple[int, int | None, list]:
    """Scan files from ``start_index``: (valid end offset, torn-tail offset or None, skipped
    spans). StoreCorruptError for damage in the middle of the log (see the module doc)."""
    files = commitlog.mapped_file_queue.mapped_files
    if not files:
        return 0, None, []
    end_offset = files[start_index].file_from_offset
    skipped: list[tuple[int, int]] = []
    index, start = start_index, 0
    while index < len(files):
        mapped_file = files[index]
        if start == 0 and mapped_file.file_from_offset != end_offset:
            log.error("CommitLog file %s does not start at %d (a file is missing); recovery "
                      "stops at %d", mapped_file.path, end_offset, end_offset)
            return end_offset, None, skipped
        status, position = _scan_file(mapped_file, check_crc, start)
        if status == record_codec.RECORD_BLANK:
            end_offset = mapped_file.file_from_offset + commitlog.file_size
            index, start = index + 1, 0
            continue
        end_offset = mapped_file.file_from_offset + position
        if status == record_codec.RECORD_END:
            return end_offset, None, skipped
        resume = next_valid_record(commitlog, index, position)
        if resume is None:
            log.warning("%s; nothing valid follows: a torn tail, truncated",
                        _damage_text(mapped_file, position, status))
            return end_offset, end_offset, skipped
        known = damaged is not None and damaged.covers(end_offset, resume)
        if not (skip_damaged or known):
            raise StoreCorruptError(
                f"{_damage_text(mapped_file, position, status)}, followed by valid records "
                f"from physical offset {resume}: acknowledged messages after it would be lost, "
                f"so the broker does not start. Restore the file from a replica or a backup, "
                f"or set skipDamagedRecordsOnRecover=true to skip {resume - end_offset} "
                f"damaged byte(s) and keep every later record")
        (log.info if known else log.error)(
            "%s: %d byte(s) skipped up to the next valid record at physical offset %d%s",
            _damage_text(mapped_file, position, status), resume - end_offset, resume,
            " (skipped before)" if known else " (skipDamagedRecordsOnRecover=true)")
        skipped.append((end_offset, resume))
        while files[index].file_from_offset + commitlog.file_size <= resume:
            index += 1
        start, end_offset = resume - files[index].file_from_offset, resume
    return end_offset, None, skipped


def _truncate(commitlog: CommitLog, valid_end_offset: int) -> None:
    commitlog.truncate_dirty_files(valid_end_offset)
    commitlog.set_wrote_and_flushed(valid_end_offset)


def recover_normally(commitlog: CommitLog, check_crc: bool = True,
                     damaged: DamagedRecords | None = None,
                     skip_damaged: bool = False) -> RecoveryResult:
    """Recovery after a clean stop: scan the last 3 files, truncate beyond the valid end."""
    files = commitlog.mapped_file_queue.mapped_files
    start_index = max(len(files) - NORMAL_RECOVERY_FILES_COUNT, 0)
    scan_from = files[start_index].file_from_offset if files else 0
    valid_end, torn, skipped = _find_valid_end(commitlog, start_index, check_crc, damaged,
                                               skip_damaged)
    _truncate(commitlog, valid_end)
    return RecoveryResult(valid_end, False, scan_from, None, torn, skipped_spans=skipped)


def _first_record_store_timestamp(mapped_file: MappedFile) -> int | None:
    if not mapped_file.hold():
        return None
    buffer = mapped_file.buffer()
    try:
        status, _ = record_codec.check(buffer, 0, mapped_file.file_size, False)
        if status != record_codec.RECORD_OK:
            return None
        return record_codec.read_store_timestamp(buffer, 0)
    finally:
        buffer.release()
        mapped_file.release()


def abnormal_start_index(commitlog: CommitLog, recovery_point_ms: int) -> int:
    """Index of the newest file whose first record's store time is in (0, recovery point]."""
    files = commitlog.mapped_file_queue.mapped_files
    for index in range(len(files) - 1, -1, -1):
        store_timestamp = _first_record_store_timestamp(files[index])
        if store_timestamp is not None and 0 < store_timestamp <= recovery_point_ms:
            return index
    return 0


def recover_abnormally(commitlog: CommitLog, recovery_point_ms: int,
                       dispatch: Callable | None = None,
                       check_crc: bool = True, damaged: DamagedRecords | None = None,
                       skip_damaged: bool = False) -> RecoveryResult:
    """Recovery after a crash from ``recovery_point_ms`` (store time, ms).

    Truncates beyond the valid end first, then calls ``dispatch(record)`` for every record
    from the start file on (if given); the records can also be walked later with
    :func:`records_to_dispatch`.
    """
    files = commitlog.mapped_file_queue.mapped_files
    start_index = abnormal_start_index(commitlog, recovery_point_ms)
    scan_from = files[start_index].file_from_offset if files else 0
    valid_end, torn, skipped = _find_valid_end(commitlog, start_index, check_crc, damaged,
                                               skip_damaged)
    _truncate(commitlog, valid_end)
    result = RecoveryResult(valid_end, True, scan_from, scan_from, torn, skipped_spans=skipped)
    if dispatch is not None:
        for message_record in records_to_dispatch(commitlog, result):
            dispatch(message_record)
            result.dispatched_count += 1
    return result


def recover(commitlog: CommitLog, abort_file_present: bool, checkpoint: StoreCheckpoint,
            dispatch: Callable | None = None, check_crc: bool = True,
            message_index_safe: bool = False, damaged: DamagedRecords | None = None,
            skip_damaged: bool = False) -> RecoveryResult:
    """Normal or abnormal recovery depending on the abort file (protocol.md §4.7).
    ``damaged``: ranges skipped before; ``skip_damaged``: skip new mid-log damage instead of
    raising StoreCorruptError."""
    if not abort_file_present:
        return recover_normally(commitlog, check_crc, damaged, skip_damaged)
    return recover_abnormally(commitlog, checkpoint.recovery_point_ms(message_index_safe),
                              dispatch, check_crc, damaged, skip_damaged)


def records_to_dispatch(commitlog: CommitLog, result: RecoveryResult) -> Iterator:
    """Decoded records that need re-dispatch after ``result`` (empty after normal recovery)."""
    if result.dispatch_from_offset is None:
        return iter(())
    return _records_between_spans(commitlog, result.dispatch_from_offset,
                                  result.valid_end_offset, result.skipped_spans)


def _records_between_spans(commitlog: CommitLog, start: int, end: int, spans) -> Iterator:
    for span_start, span_end in sorted(spans):
        if span_end <= start:
            continue
        if span_start > start:
            yield from commitlog.record_iterator(start, min(span_start, end))
        start = max(start, span_end)
    if start < end:
        yield from commitlog.record_iterator(start, end)
