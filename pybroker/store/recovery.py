# CommitLog recovery after a clean stop (normal) or a crash (abnormal): the end, proven.
"""Find the end of valid CommitLog data - and prove it - before anything serves the store.

Where records stop is only a candidate end. Recovery accepts it when it is proven:

1. **Nothing valid follows it.** Recovery looks past the apparent end (the rest of its file,
   then every later file, data extents only: :mod:`pybroker.store.record_search`) for a valid
   record (whole, CRC checked, naming its own physical offset).
2. **It is not below the checkpoint's flushed offset.** The flusher stores the CommitLog offset
   it flushed in the checkpoint (pybroker's stamped field, :mod:`pybroker.store.checkpoint`);
   every byte below it was flushed, so after any crash the data must reach at least that far.
   After a clean stop the records ending exactly there is the whole proof (no look-past).

Java (CommitLog.recoverNormally/recoverAbnormally, 4.9.8 and 5.3.3) takes the first record that
fails its check - or a zero size - as the end and truncates everything after it, deleting later
files; 5.3.3 starts the scan at the file of the consume queues' max offset instead of the last
three files but decides the end the same way. Here the candidate end decides as follows:

* **valid records follow** (a zeroed size field, an end-of-data or end-of-file marker, a bad
  size, magic or CRC, or a missing file with valid data after it): damage in the middle of
  acknowledged data. Recovery stops with :class:`~pybroker.errors.StoreCorruptError`, one line
  naming the file, the file position, the physical offset and the option, and changes nothing
  on disk; unless ``skip_damaged`` (``skipDamagedRecordsOnRecover=true``) or the range is known
  in :class:`~pybroker.store.damaged_records.DamagedRecords`: then the range up to the next
  valid record is skipped (logged, returned in ``skipped_spans``) and the scan goes on there;
* **nothing valid follows, but the end is below the flushed offset** (the last files removed or
  zeroed): flushed - hence acknowledged - data is gone. Recovery stops the same way; with the
  option it starts with the CommitLog ending there (logged at ERROR);
* **nothing valid follows and the end is not below the flushed offset**: the end. A damaged
  record there is a crash's torn write (or garbage it left): the one legitimate truncation,
  logged at WARNING with the byte count; the data after it is zeroed and later files deleted.

Cost. A clean start scans the last :data:`NORMAL_RECOVERY_FILES_COUNT` files (and from the
file of the flushed offset, if older) with CRC, plus the first record of every older file and
the file names (a missing file anywhere is found at once); a crash scans from the checkpoint's
recovery point, as Java. The rest of every older file - every record's CRC and layout - is the
background scrubber's (:mod:`pybroker.store.scrub`); offsets it found damaged are passed in as
``suspects`` and checked again here, so damage it saw stops the next start like damage seen
here. Both scans run in C (``record.scan``): Python runs per file, and per record only for the
dispatch callback of abnormal recovery.
"""
import dataclasses
import logging
import os
from collections.abc import Callable, Iterable, Iterator

from pybroker._fast import record as record_codec
from pybroker.errors import StoreCorruptError
from pybroker.store.checkpoint import StoreCheckpoint
from pybroker.store.commitlog import CommitLog
from pybroker.store.damaged_records import DamagedRecords
from pybroker.store.mapped_file import MappedFile, is_offset_file_name, offset_file_name
from pybroker.store.record_search import (first_record_from, is_record_at, next_valid_record,
                                          nonzero_end, read_record_lightly)

log = logging.getLogger("pybroker.store.recovery")

NORMAL_RECOVERY_FILES_COUNT = 3        # Java scans the last three files after a clean stop
SKIP_OPTION = "skipDamagedRecordsOnRecover"


@dataclasses.dataclass(slots=True)
class RecoveryResult:
    """What recovery found; every offset is a global CommitLog offset in bytes."""
    valid_end_offset: int
    abnormal: bool
    scan_from_offset: int
    # Where re-dispatch starts (abnormal recovery), None when nothing needs re-dispatching.
    dispatch_from_offset: int | None = None
    # Offset of the torn record that ended the valid data, None for a clean end.
    damaged_offset: int | None = None
    dispatched_count: int = 0
    # Damaged ranges [start, end) skipped in the middle of the log (operator's choice).
    skipped_spans: list = dataclasses.field(default_factory=list)
    # Bytes of a torn tail that were zeroed (0 for a clean end).
    truncated_bytes: int = 0


def check_file_sizes(commitlog_dir: str, file_size: int, skip_damaged: bool) -> list[int]:
    """Every CommitLog file must be ``file_size`` bytes: StoreCorruptError otherwise (one
    line naming the file). A short file's missing bytes are damage like any other: with
    ``skip_damaged`` it is extended with zeros, which recovery then finds and decides on
    (pass the returned file bases as ``walk_files``)."""
    try:
        names = sorted(n for n in os.listdir(commitlog_dir) if is_offset_file_name(n))
    except FileNotFoundError:
        return []
    sizes = {name: os.path.getsize(os.path.join(commitlog_dir, name)) for name in names}
    wrong = [name for name in names if sizes[name] != file_size]
    if not wrong:
        return []
    if len(wrong) == len(names) > 1 and len(set(sizes.values())) == 1:
        raise StoreCorruptError(
            f"every CommitLog file in {commitlog_dir} has {sizes[wrong[0]]} bytes, but "
            f"mappedFileSizeCommitLog={file_size}: set it to the size this store was written "
            f"with")
    for name in wrong:
        path, size = os.path.join(commitlog_dir, name), sizes[name]
        text = (f"CommitLog file {path}: {size} bytes instead of {file_size} "
                f"(mappedFileSizeCommitLog)")
        if size > file_size:
            raise StoreCorruptError(f"{text}: the file is longer than a CommitLog file can be, "
                                    f"so the broker does not start")
        if not skip_damaged:
            raise StoreCorruptError(
                f"{text}: the bytes from file position {size}, physical offset "
                f"{int(name) + size}, are missing, so the broker does not start. Restore the "
                f"file from a replica or a backup, or set {SKIP_OPTION}=true to treat them "
                f"as damaged and keep every record outside them")
        log.error("%s: extended with zeros from file position %d (%s=true); recovery treats "
                  "them as damage", text, size, SKIP_OPTION)
        os.truncate(path, file_size)
    return [int(name) for name in wrong]


def _file_path(commitlog: CommitLog, offset: int) -> str:
    return os.path.join(commitlog.store_path, offset_file_name(offset))


def _what_stops(buffer, position: int, file_size: int, status: int) -> str:
    """Words for the record that failed at ``position``."""
    if status == record_codec.RECORD_END:
        return "record size 0 (an end-of-data marker)"
    if status == record_codec.RECORD_BLANK:
        return "an end-of-file marker (BLANK) before the file's end"
    if status == record_codec.RECORD_TRUNCATED:
        return "a record running past the end of its file"
    layout_status, _ = record_codec.check(buffer, position, file_size, False)
    if layout_status == record_codec.RECORD_OK:
        return "a damaged record (body CRC mismatch, or it names another offset)"
    return "a damaged record (bad size or magic code)"


class _EndFinder:
    """One recovery scan: walks files, decides every stop (see the module docstring)."""

    def __init__(self, commitlog: CommitLog, check_crc: bool, damaged: DamagedRecords | None,
                 skip_damaged: bool, flushed_end: int | None, normal: bool):
        self.commitlog = commitlog
        self.files = commitlog.mapped_file_queue.mapped_files
        self.file_size = commitlog.file_size
        self.check_crc = check_crc
        self.damaged = damaged
        self.skip_damaged = skip_damaged
        self.flushed_end = flushed_end
        self.normal = normal
        self.skipped: list[tuple[int, int]] = []
        self.torn_offset: int | None = None
        self.torn_bytes = 0

    # --- decisions ---------------------------------------------------------------------------
    def damage(self, start: int, resume: int, text: str) -> None:
        """Records stop at ``start`` but valid ones follow from ``resume``: refuse, or skip."""
        known = self.damaged is not None and self.damaged.covers(start, resume)
        if not (self.skip_damaged or known):
            raise StoreCorruptError(
                f"{text}, followed by valid records from physical offset {resume}: "
                f"acknowledged messages after it would be lost, so the broker does not start. "
                f"Restore the file from a replica or a backup, or set {SKIP_OPTION}=true to "
                f"skip {resume - start} damaged byte(s) and keep every later record")
        (log.info if known else log.error)(
            "%s: %d byte(s) skipped up to the next valid record at physical offset %d%s",
            text, resume - start, resume,
            " (skipped before)" if known else f" ({SKIP_OPTION}=true)")
        self.skipped.append((start, resume))

    def not_short(self, end: int, text: str) -> None:
        """Nothing valid follows ``end``: refuse when flushed data lay beyond it."""
        flushed = self.flushed_end
        if flushed is None or end >= flushed:
            return
        lost = (f"{text}, and nothing valid follows, but the checkpoint records the CommitLog "
                f"flushed up to physical offset {flushed}: {flushed - end} byte(s) of "
                f"acknowledged messages are missing or damaged")
        if not self.skip_damaged:
            raise StoreCorruptError(
                f"{lost}, so the broker does not start. Restore the file(s) from a replica or "
                f"a backup, or set {SKIP_OPTION}=true to start with the CommitLog ending at "
                f"physical offset {end}")
        log.error("%s; %s=true: the CommitLog ends at physical offset %d", lost, SKIP_OPTION,
                  end)

    def stopped(self, end: int, index: int, search_from: int, text: str,
                clean: bool) -> int | None:
        """Records stop at global ``end``; valid ones are searched from file ``index``,
        position ``search_from``. Returns where to go on, or None: ``end`` is the end.
        ``clean``: the stop is zeros or missing files (no bytes to call a torn write)."""
        if clean and self.normal and end == self.flushed_end:
            return None                    # a clean stop's flushed end, exactly: proven
        resume = next_valid_record(self.files, index, search_from)
        if resume is not None:
            self.damage(end, resume, text)
            return resume
        self.not_short(end, text)
        if not clean:
            mapped_file = self.files[index]
            position = end - mapped_file.file_from_offset
            self.torn_offset = end
            self.torn_bytes = nonzero_end(mapped_file, position) - position
            log.warning("%s; nothing valid follows: a torn tail (a crash mid-write), %d "
                        "byte(s) truncated", text, self.torn_bytes)
        return None

    # --- the scan ----------------------------------------------------------------------------
    def run(self, start_index: int) -> int:
        """Scan from file ``start_index``; returns the valid end (global offset)."""
        files = self.files
        if not files:
            self.not_short(0, f"CommitLog directory {self.commitlog.store_path} holds no file")
            return 0
        expected = files[start_index].file_from_offset
        index, start = start_index, 0
        while index < len(files):
            mapped_file = files[index]
            if start == 0 and mapped_file.file_from_offset != expected:
                text = (f"CommitLog file {_file_path(self.commitlog, expected)}: missing "
                        f"(file position 0, physical offset {expected}; the next file starts "
                        f"at {mapped_file.file_from_offset})")
                resume = self.stopped(expected, index, 0, text, True)
                if resume is None:
                    return expected
                index, start, expected = self.seek(resume)
                continue
            status, position, text = self.scan_file(mapped_file, start)
            if status == record_codec.RECORD_BLANK:
                index, start = index + 1, 0
                expected = mapped_file.file_from_offset + self.file_size
                continue
            end = mapped_file.file_from_offset + position
            resume = self.stopped(end, index, position + 1, text,
                                  status == record_codec.RECORD_END)
            if resume is None:
                return end
            index, start, expected = self.seek(resume)
        self.not_short(expected, f"CommitLog file {_file_path(self.commitlog, expected)}: "
                                 f"missing (file position 0, physical offset {expected})")
        return expected

    def seek(self, offset: int) -> tuple[int, int, int]:
        """(file index, file position, expected next base) of global ``offset``."""
        index = 0
        while self.files[index].file_from_offset + self.file_size <= offset:
            index += 1
        base = self.files[index].file_from_offset
        return index, offset - base, base

    def scan_file(self, mapped_file: MappedFile, start: int) -> tuple[int, int, str]:
        """(status, file position where records stop, words for the stop)."""
        file_size = mapped_file.file_size
        if not mapped_file.hold():
            raise RuntimeError(f"{mapped_file.path} was shut down during recovery")
        buffer = mapped_file.buffer()
        try:
            status, position, _ = record_codec.scan(buffer, start, file_size, self.check_crc,
                                                    True)
            if status == record_codec.RECORD_BLANK:
                _, total_size = record_codec.check(buffer, position, file_size, False)
                if position + total_size != file_size:
                    status = record_codec.RECORD_CORRUPT   # a BLANK must reach the file end
            elif status == record_codec.RECORD_END and position == file_size:
                status = record_codec.RECORD_BLANK         # exactly full: the next file
            elif status == record_codec.RECORD_END and position > start:
                last_position = _torn_last_record(mapped_file, buffer, position, start)
                if last_position is not None:
                    status, position = record_codec.RECORD_CORRUPT, last_position
            what = _what_stops(buffer, position, file_size, status)
        finally:
            buffer.release()
            mapped_file.release()
        if status == record_codec.RECORD_BLANK and position < file_size \
                and first_record_from(mapped_file, position + 1) is not None:
            # A BLANK marker ends its file's records: valid records after it are damage.
            status = record_codec.RECORD_CORRUPT
            what = "an end-of-file marker (BLANK) followed by valid records in its file"
        return status, position, _damage_text(mapped_file, position, what)

    def check_older_files(self, start_index: int, suspects: Iterable[int],
                          walk_files: Iterable[int]) -> None:
        """Before the scanned window: no file missing, each file's first record valid, the
        offsets the scrubber found damaged (``suspects``) still damaged or not, and every
        record of the files starting at ``walk_files`` (files that were cut short)."""
        files = self.files
        window_start = files[start_index].file_from_offset if files else 0
        for index in range(1, start_index + 1):
            expected = files[index - 1].file_from_offset + self.file_size
            if files[index].file_from_offset != expected:
                text = (f"CommitLog file {_file_path(self.commitlog, expected)}: missing (file "
                        f"position 0, physical offset {expected})")
                resume = next_valid_record(files, index, 0)
                if resume is not None:
                    self.damage(expected, resume, text)
        offsets = sorted({f.file_from_offset for f in files[:start_index]}
                         | {s for s in suspects if s < window_start})
        for offset in offsets:
            self.check_record(offset)
        walked = set(walk_files)
        for index, mapped_file in enumerate(files[:start_index]):
            if mapped_file.file_from_offset in walked:
                self.walk_file(index)

    def walk_file(self, index: int) -> None:
        """Every record of file ``index`` (before the window): a stop before its end with
        valid records after it is damage (as many times as it takes to reach the end)."""
        mapped_file, start = self.files[index], 0
        while start < self.file_size:
            status, position, text = self.scan_file(mapped_file, start)
            if status == record_codec.RECORD_BLANK:
                return
            end = mapped_file.file_from_offset + position
            resume = next_valid_record(self.files, index, position + 1)
            if resume is None or resume >= mapped_file.file_from_offset + self.file_size:
                if resume is not None:
                    self.damage(end, resume, text)
                return
            self.damage(end, resume, text)
            start = resume - mapped_file.file_from_offset

    def check_record(self, offset: int) -> None:
        """The record at ``offset`` (before the window) must be valid, or it is damage."""
        if self.damaged is not None and self.damaged.span_at(offset) is not None:
            return
        if any(start <= offset < end for start, end in self.skipped):
            return
        mapped_file = self.commitlog.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mapped_file is None:
            return                         # below the min offset: expired, not damaged
        position = offset - mapped_file.file_from_offset
        data = read_record_lightly(mapped_file.path, position, mapped_file.file_size - position)
        if is_record_at(data, 0, offset, len(data)):
            return                         # the usual case: its pages read once, given back
        if not mapped_file.hold():
            return
        buffer = mapped_file.buffer()
        try:
            if is_record_at(buffer, position, mapped_file.file_from_offset,
                            mapped_file.file_size):
                return
            status, _ = record_codec.check(buffer, position, mapped_file.file_size, True)
            what = _what_stops(buffer, position, mapped_file.file_size, status)
        finally:
            buffer.release()
            mapped_file.release()
        index = self.files.index(mapped_file)
        resume = next_valid_record(self.files, index, position + 1)
        if resume is not None:
            self.damage(offset, resume, _damage_text(mapped_file, position, what))


def record_is_valid(commitlog: CommitLog, offset: int) -> bool:
    """A valid record (CRC checked, naming its own offset) starts at global ``offset``."""
    mapped_file = commitlog.mapped_file_queue.find_mapped_file_by_offset(offset)
    if mapped_file is None or not mapped_file.hold():
        return False
    buffer = mapped_file.buffer()
    try:
        return is_record_at(buffer, offset - mapped_file.file_from_offset,
                            mapped_file.file_from_offset, mapped_file.file_size)
    finally:
        buffer.release()
        mapped_file.release()


def _damage_text(mapped_file: MappedFile, position: int, what: str) -> str:
    return (f"CommitLog file {mapped_file.path}: {what} at file position {position}, "
            f"physical offset {mapped_file.file_from_offset + position}")


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


def _file_index(files: list[MappedFile], offset: int) -> int:
    """Index of the last file starting at or before global ``offset`` (0 when none)."""
    index = 0
    for position, mapped_file in enumerate(files):
        if mapped_file.file_from_offset <= offset:
            index = position
    return index


def _recover(commitlog: CommitLog, start_index: int, abnormal: bool, check_crc: bool,
             damaged: DamagedRecords | None, skip_damaged: bool, flushed_end: int | None,
             suspects: Iterable[int], walk_files: Iterable[int] = ()) -> RecoveryResult:
    files = commitlog.mapped_file_queue.mapped_files
    if files and flushed_end is not None and flushed_end > 0:
        # The flushed end must be proven too: scan from its file if that is older.
        start_index = min(start_index, _file_index(files, flushed_end - 1))
    finder = _EndFinder(commitlog, check_crc, damaged, skip_damaged, flushed_end, not abnormal)
    finder.check_older_files(start_index, suspects, walk_files)
    scan_from = files[start_index].file_from_offset if files else 0
    valid_end = finder.run(start_index)
    commitlog.truncate_dirty_files(valid_end)
    commitlog.set_wrote_and_flushed(valid_end)
    return RecoveryResult(valid_end, abnormal, scan_from, scan_from if abnormal else None,
                          finder.torn_offset, skipped_spans=finder.skipped,
                          truncated_bytes=finder.torn_bytes)


def recover_normally(commitlog: CommitLog, check_crc: bool = True,
                     damaged: DamagedRecords | None = None, skip_damaged: bool = False, *,
                     flushed_end: int | None = None, suspects: Iterable[int] = (),
                     walk_files: Iterable[int] = ()) -> RecoveryResult:
    """Recovery after a clean stop: scan the last 3 files (and from ``flushed_end``'s file),
    prove the end, truncate beyond it."""
    files = commitlog.mapped_file_queue.mapped_files
    start_index = max(len(files) - NORMAL_RECOVERY_FILES_COUNT, 0)
    return _recover(commitlog, start_index, False, check_crc, damaged, skip_damaged,
                    flushed_end, suspects, walk_files)


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
                       skip_damaged: bool = False, *, flushed_end: int | None = None,
                       suspects: Iterable[int] = (),
                       walk_files: Iterable[int] = ()) -> RecoveryResult:
    """Recovery after a crash from ``recovery_point_ms`` (store time, ms).

    Truncates beyond the valid end first, then calls ``dispatch(record)`` for every record
    from the start file on (if given); the records can also be walked later with
    :func:`records_to_dispatch`.
    """
    start_index = abnormal_start_index(commitlog, recovery_point_ms)
    result = _recover(commitlog, start_index, True, check_crc, damaged, skip_damaged,
                      flushed_end, suspects, walk_files)
    if dispatch is not None:
        for message_record in records_to_dispatch(commitlog, result):
            dispatch(message_record)
            result.dispatched_count += 1
    return result


def recover(commitlog: CommitLog, abort_file_present: bool, checkpoint: StoreCheckpoint,
            dispatch: Callable | None = None, check_crc: bool = True,
            message_index_safe: bool = False, damaged: DamagedRecords | None = None,
            skip_damaged: bool = False, suspects: Iterable[int] = (),
            walk_files: Iterable[int] = ()) -> RecoveryResult:
    """Normal or abnormal recovery depending on the abort file (protocol.md §4.7), the end
    proven against ``checkpoint``'s flushed offset. ``damaged``: ranges skipped before;
    ``skip_damaged``: skip new damage instead of raising StoreCorruptError; ``suspects``:
    offsets the scrubber found damaged; ``walk_files``: bases of files whose records are all
    checked (files :func:`check_file_sizes` extended)."""
    flushed_end = checkpoint.flushed_end()
    if not abort_file_present:
        return recover_normally(commitlog, check_crc, damaged, skip_damaged,
                                flushed_end=flushed_end, suspects=suspects,
                                walk_files=walk_files)
    return recover_abnormally(commitlog, checkpoint.recovery_point_ms(message_index_safe),
                              dispatch, check_crc, damaged, skip_damaged,
                              flushed_end=flushed_end, suspects=suspects,
                              walk_files=walk_files)


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
