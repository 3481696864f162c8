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
TRUNCATED) or at a BLANK marker (next file). Data after the stop is truncated - zeroed in its
file, later files deleted - so nothing half-written is ever served. A damaged record followed by
more data (corruption in the middle, not a torn tail) is logged at ERROR on logger
``pybroker.store.recovery`` with file and offset; data after it is dropped, never served.
"""
import dataclasses
import logging
from collections.abc import Callable, Iterator

import numpy as np

from pybroker._fast import record as record_codec
from pybroker.store import layout
from pybroker.store.checkpoint import StoreCheckpoint
from pybroker.store.commitlog import CommitLog
from pybroker.store.mapped_file import MappedFile

log = logging.getLogger("pybroker.store.recovery")

NORMAL_RECOVERY_FILES_COUNT = 3        # Java scans the last three files after a clean stop
_FOLLOWING_DATA_WINDOW_BYTES = 1 << 20


@dataclasses.dataclass(slots=True)
class RecoveryResult:
    """What recovery found; every offset is a global CommitLog offset in bytes."""
    valid_end_offset: int
    abnormal: bool
    scan_from_offset: int
    # Where re-dispatch starts (abnormal recovery), None when nothing needs re-dispatching.
    dispatch_from_offset: int | None = None
    # Offset of the damaged record that ended the valid data, None for a clean end.
    damaged_offset: int | None = None
    dispatched_count: int = 0


def _damage_followed_by_data(buffer, position: int, file_size: int) -> bool:
    """True when non-zero bytes follow the damaged record at ``position`` (not a torn tail)."""
    status, total_size = record_codec.check(buffer, position, file_size, False)
    skip = total_size if layout.END_FILE_MIN_BLANK_BYTES <= total_size <= file_size - position \
        else layout.END_FILE_MIN_BLANK_BYTES
    start = min(position + skip, file_size)
    stop = min(start + _FOLLOWING_DATA_WINDOW_BYTES, file_size)
    return bool(np.frombuffer(buffer, np.uint8, stop - start, start).any())


def _torn_last_record(mapped_file: MappedFile, buffer, end_position: int) -> int | None:
    """File position of the last record before ``end_position`` if it looks torn, else None.

    The format leaves topic and properties bytes unchecked, so a record whose tail was never
    written (zeros) or whose append-time patch is missing can still parse. The last record of
    the log is where a crash leaves such a record: it must name its own physical offset, have
    a store time, and have no NUL in its topic or at the end of its properties.
    """
    # Scanning to one byte short stops AT the last record (it no longer fits): its start.
    status, last_position, _ = record_codec.scan(buffer, 0, end_position - 1, False)
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


def _scan_file(mapped_file: MappedFile, check_crc: bool) -> tuple[int, int, bool]:
    """Scan one whole file: (status, file position where it stopped, damage followed by data)."""
    file_size = mapped_file.file_size
    if not mapped_file.hold():
        raise RuntimeError(f"{mapped_file.path} was shut down during recovery")
    buffer = mapped_file.buffer()
    try:
        status, position, _ = record_codec.scan(buffer, 0, file_size, check_crc)
        if status == record_codec.RECORD_BLANK:
            _, total_size = record_codec.check(buffer, position, file_size, False)
            if position + total_size != file_size:
                status = record_codec.RECORD_CORRUPT   # a BLANK must reach the file end
        elif status == record_codec.RECORD_END and position == file_size:
            status = record_codec.RECORD_BLANK         # exactly full: continue in the next file
        elif status == record_codec.RECORD_END and position > 0:
            last_position = _torn_last_record(mapped_file, buffer, position)
            if last_position is not None:
                return record_codec.RECORD_CORRUPT, last_position, False
        followed = status in (record_codec.RECORD_CORRUPT, record_codec.RECORD_TRUNCATED) \
            and _damage_followed_by_data(buffer, position, file_size)
        return status, position, followed
    finally:
        buffer.release()
        mapped_file.release()


def _report_damage(mapped_file: MappedFile, position: int, status: int, followed: bool) -> None:
    physical_offset = mapped_file.file_from_offset + position
    if followed:
        log.error("CommitLog file %s: damaged record (status %d) at file position %d, physical "
                  "offset %d, followed by more data; recovery stops here and drops the rest",
                  mapped_file.path, status, position, physical_offset)
    else:
        log.warning("CommitLog file %s: torn tail (status %d) at file position %d, physical "
                    "offset %d; truncated", mapped_file.path, status, position, physical_offset)


def _find_valid_end(commitlog: CommitLog, start_index: int,
                    check_crc: bool) -> tuple[int, int | None]:
    """Scan files from ``start_index``: (valid end offset, damaged record offset or None)."""
    files = commitlog.mapped_file_queue.mapped_files
    if not files:
        return 0, None
    end_offset = files[start_index].file_from_offset
    for index in range(start_index, len(files)):
        mapped_file = files[index]
        if mapped_file.file_from_offset != end_offset:
            log.error("CommitLog file %s does not start at %d (a file is missing); recovery "
                      "stops at %d", mapped_file.path, end_offset, end_offset)
            return end_offset, None
        status, position, followed = _scan_file(mapped_file, check_crc)
        if status == record_codec.RECORD_BLANK:
            end_offset = mapped_file.file_from_offset + commitlog.file_size
            continue
        end_offset = mapped_file.file_from_offset + position
        if status == record_codec.RECORD_END:
            return end_offset, None
        _report_damage(mapped_file, position, status, followed)
        return end_offset, end_offset
    return end_offset, None


def _truncate(commitlog: CommitLog, valid_end_offset: int) -> None:
    commitlog.truncate_dirty_files(valid_end_offset)
    commitlog.set_wrote_and_flushed(valid_end_offset)


def recover_normally(commitlog: CommitLog, check_crc: bool = True) -> RecoveryResult:
    """Recovery after a clean stop: scan the last 3 files, truncate beyond the valid end."""
    files = commitlog.mapped_file_queue.mapped_files
    start_index = max(len(files) - NORMAL_RECOVERY_FILES_COUNT, 0)
    scan_from = files[start_index].file_from_offset if files else 0
    valid_end, damaged = _find_valid_end(commitlog, start_index, check_crc)
    _truncate(commitlog, valid_end)
    return RecoveryResult(valid_end, False, scan_from, None, damaged)


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
                       check_crc: bool = True) -> RecoveryResult:
    """Recovery after a crash from ``recovery_point_ms`` (store time, ms).

    Truncates beyond the valid end first, then calls ``dispatch(record)`` for every record
    from the start file on (if given); the records can also be walked later with
    :func:`records_to_dispatch`.
    """
    files = commitlog.mapped_file_queue.mapped_files
    start_index = abnormal_start_index(commitlog, recovery_point_ms)
    scan_from = files[start_index].file_from_offset if files else 0
    valid_end, damaged = _find_valid_end(commitlog, start_index, check_crc)
    _truncate(commitlog, valid_end)
    result = RecoveryResult(valid_end, True, scan_from, scan_from, damaged)
    if dispatch is not None:
        for message_record in records_to_dispatch(commitlog, result):
            dispatch(message_record)
            result.dispatched_count += 1
    return result


def recover(commitlog: CommitLog, abort_file_present: bool, checkpoint: StoreCheckpoint,
            dispatch: Callable | None = None, check_crc: bool = True,
            message_index_safe: bool = False) -> RecoveryResult:
    """Normal or abnormal recovery depending on the abort file (protocol.md §4.7)."""
    if not abort_file_present:
        return recover_normally(commitlog, check_crc)
    return recover_abnormally(commitlog, checkpoint.recovery_point_ms(message_index_safe),
                              dispatch, check_crc)


def records_to_dispatch(commitlog: CommitLog, result: RecoveryResult) -> Iterator:
    """Decoded records that need re-dispatch after ``result`` (empty after normal recovery)."""
    if result.dispatch_from_offset is None:
        return iter(())
    return commitlog.record_iterator(result.dispatch_from_offset, result.valid_end_offset)
