# A slave's CommitLog writer: replicated bytes appended contiguously and checked before use.
"""The slave side of replication as a store object (no sockets, no processes).

:class:`ReplicaLog` is the only writer of a slave's CommitLog (design.md §2: on a slave the ha
worker takes the appender's role). It appends the raw bytes a master sends, in Java's HA
model (protocol.md §6.2), under these rules:

* **Contiguous only.** A chunk must start exactly at the end of the log; an empty log accepts
  a first chunk only at a CommitLog file boundary (the master starts a fresh slave at the
  start of its last file). A chunk never crosses a file end (the master never sends one; if it
  does, the two sides' ``mappedFileSizeCommitLog`` differ). Anything else is refused and
  nothing is written.
* **Whole records are checked before they count.** After a copy the new bytes are walked as
  records (C scan, body CRC optional); a damaged record, zeros where a record must start, or a
  BLANK that does not reach its file end make the append undo itself (the bytes are zeroed and
  the position restored) and be refused. :attr:`record_end` is the end of the last whole record
  (what the dispatcher and flusher may see); :attr:`end` also counts a record still arriving
  (what the slave reports to the master, as Java does).

Divergence (a slave whose tail differs from the master's, e.g. an old master restarted as a
slave after a failover) is found by :meth:`first_mismatch` against bytes the master re-sends
and resolved by :func:`request_truncation`: the truncation is applied by the next start,
before recovery (:func:`apply_pending_truncation`), so the consume queues are cut by the
ordinary recovery path and nothing truncated is ever served.
"""
import logging
import os

import numpy as np

from pybroker._fast import record as record_codec
from pybroker.store import layout, paths
from pybroker.store.checkpoint import StoreCheckpoint
from pybroker.store.commitlog import CommitLog
from pybroker.store.epoch_file import EpochFile
from pybroker.store.mapped_file import MappedFile

log = logging.getLogger("pybroker.store.replica")

__all__ = ["ReplicaLog", "ReplicaRefused", "request_truncation", "pending_truncation",
           "apply_pending_truncation"]


class ReplicaRefused(Exception):
    """A chunk the slave must not write (the stream is not usable; close the connection)."""


class ReplicaLog:
    """The slave's writable CommitLog (see the module docstring).

    Parameters
    ----------
    commitlog : CommitLog
        Loaded, writable, positioned at the recovered end (``set_wrote_and_flushed``).
    check_crc : bool
        Verify the body CRC of every replicated record (``checkCRCOnRecover``).
    """

    def __init__(self, commitlog: CommitLog, check_crc: bool = True):
        if commitlog.read_only:
            raise ValueError("a replica needs a writable CommitLog")
        self.commitlog = commitlog
        self.file_size = commitlog.file_size
        self.check_crc = check_crc
        # Recovery leaves the log at a record boundary.
        self.record_end = commitlog.max_offset()
        self.last_store_timestamp = 0
        self.appended_bytes_total = 0

    @property
    def end(self) -> int:
        """Bytes written, a record still arriving included (reported to the master)."""
        return self.commitlog.max_offset()

    @property
    def min_offset(self) -> int:
        """First byte still stored, or -1 when the log has no file."""
        return self.commitlog.min_offset()

    def drop_partial(self) -> int:
        """Zero the bytes of a record still arriving (past :attr:`record_end`) and end the log
        at :attr:`record_end`; returns how many went. A slave that stops replicating (a
        promotion in-process: the appender goes on at ``record_end``) leaves no fragment
        behind the records a new writer appends (Java's truncateInvalidMsg)."""
        queue = self.commitlog.mapped_file_queue
        partial = self.end - self.record_end
        if partial <= 0 or not queue.mapped_files:
            return 0
        last = queue.mapped_files[-1]
        position = self.record_end - last.file_from_offset
        if position < 0:
            raise ReplicaRefused(f"record end {self.record_end} before the last file "
                                 f"{last.path}: not a fragment of one record")
        # A fragment alone in a new file leaves that file empty, not deleted: the flusher
        # and the appender see it as a file made ready ahead.
        last.zero_range(position, last.wrote_position)
        last.wrote_position = position
        return partial

    # --- append ---------------------------------------------------------------------------------
    def append(self, physical_offset: int, data) -> None:
        """Append ``data`` at ``physical_offset``; ReplicaRefused (nothing written) otherwise."""
        size = memoryview(data).nbytes
        if size == 0:
            return
        queue = self.commitlog.mapped_file_queue
        if not queue.mapped_files:
            if physical_offset % self.file_size:
                raise ReplicaRefused(f"first chunk at {physical_offset} is not at a CommitLog "
                                     f"file boundary (file size {self.file_size})")
        elif physical_offset != self.end:
            raise ReplicaRefused(f"master pushed offset {physical_offset}, not the slave's "
                                 f"end {self.end}")
        mapped_file = queue.last_mapped_file(physical_offset, need_create=True)
        assert mapped_file is not None      # need_create: a file or an OSError
        position = mapped_file.wrote_position
        if mapped_file.file_from_offset + position != physical_offset:
            raise ReplicaRefused(f"chunk at {physical_offset} does not continue file "
                                 f"{mapped_file.path} at {position}")
        if size > mapped_file.remaining():
            raise ReplicaRefused(f"chunk of {size} bytes at {physical_offset} crosses the "
                                 f"CommitLog file end: mappedFileSizeCommitLog differs from "
                                 f"the master's")
        mapped_file.append(data)
        try:
            self._check_records(mapped_file)
        except ReplicaRefused:
            mapped_file.zero_range(position, position + size)
            mapped_file.wrote_position = position
            if position == 0 and len(queue.mapped_files) == 1 and self.record_end == 0:
                queue.delete_last_mapped_file()      # a refused first chunk leaves no file
            raise
        self.appended_bytes_total += size

    def _check_records(self, mapped_file: MappedFile) -> None:
        """Walk the records completed since :attr:`record_end`; move it and the timestamp."""
        base = mapped_file.file_from_offset
        start = max(self.record_end - base, 0)
        wrote = mapped_file.wrote_position
        if not mapped_file.hold():
            raise ReplicaRefused(f"{mapped_file.path} was shut down")
        buffer = mapped_file.buffer()
        try:
            status, position, count = record_codec.scan(buffer, start, wrote, self.check_crc)
            if status == record_codec.RECORD_BLANK:
                _, blank_bytes = record_codec.check(buffer, position, self.file_size, False)
                if position + blank_bytes != self.file_size:
                    raise ReplicaRefused(f"BLANK at {base + position} does not reach its file "
                                         f"end")
                end = self.file_size if wrote == self.file_size else position
            elif status == record_codec.RECORD_END and position == wrote:
                end = wrote
            elif status == record_codec.RECORD_TRUNCATED:
                self._check_partial(buffer, position, wrote, base)
                end = position
            else:
                raise ReplicaRefused(f"replicated bytes at {base + position} are not a record "
                                     f"(status {status})")
            if count:
                last = _last_record_start(buffer, start, position)
                self.last_store_timestamp = record_codec.read_store_timestamp(buffer, last)
        finally:
            buffer.release()
            mapped_file.release()
        self.record_end = base + end

    def _check_partial(self, buffer, position: int, wrote: int, base: int) -> None:
        """A record still arriving must be able to complete inside its file."""
        if wrote - position < 4:
            return
        total_size = int.from_bytes(buffer[position:position + 4], "big", signed=True)
        end = position + total_size
        # A record leaves room for the 8-byte BLANK of its file; a BLANK reaches the file end.
        fits = end + layout.END_FILE_MIN_BLANK_BYTES <= self.file_size or end == self.file_size
        if total_size < layout.END_FILE_MIN_BLANK_BYTES or not fits:
            raise ReplicaRefused(f"record at {base + position} claims {total_size} bytes: it "
                                 f"cannot fit in its CommitLog file")

    # --- divergence ------------------------------------------------------------------------------
    def record_boundary_at_or_below(self, physical_offset: int) -> int:
        """The start of the record holding ``physical_offset`` (or the offset itself when a
        record starts there), never below :attr:`min_offset`, never above :attr:`record_end`."""
        physical_offset = min(physical_offset, self.record_end)
        mapped_file = self.commitlog.mapped_file_queue.find_mapped_file_by_offset(
            physical_offset)
        if mapped_file is None:
            return max(min(physical_offset, self.record_end), max(self.min_offset, 0))
        base = mapped_file.file_from_offset
        if not mapped_file.hold():
            return base
        buffer = mapped_file.buffer()
        try:
            _, position, _ = record_codec.scan(buffer, 0, physical_offset - base, False)
        finally:
            buffer.release()
            mapped_file.release()
        return base + position

    def record_end_from(self, physical_offset: int) -> int:
        """End of the record (or BLANK) starting at ``physical_offset``; the offset itself
        when no whole record starts there."""
        mapped_file = self.commitlog.mapped_file_queue.find_mapped_file_by_offset(
            physical_offset)
        if mapped_file is None or not mapped_file.hold():
            return physical_offset
        buffer = mapped_file.buffer()
        try:
            position = physical_offset - mapped_file.file_from_offset
            status, total_size = record_codec.check(buffer, position,
                                                    mapped_file.wrote_position, False)
        finally:
            buffer.release()
            mapped_file.release()
        whole = status in (record_codec.RECORD_OK, record_codec.RECORD_BLANK)
        return physical_offset + total_size if whole else physical_offset

    def first_mismatch(self, physical_offset: int, data) -> int | None:
        """Compare ``data`` (bytes the master holds at ``physical_offset``) with this log's
        bytes at the same offsets, up to :attr:`end`: the offset of the first differing byte,
        or None when they agree."""
        source = np.frombuffer(data, np.uint8)
        compared = 0
        while compared < len(source) and physical_offset + compared < self.end:
            offset = physical_offset + compared
            mapped_file = self.commitlog.mapped_file_queue.find_mapped_file_by_offset(offset)
            if mapped_file is None:
                return offset
            position = offset - mapped_file.file_from_offset
            count = min(len(source) - compared, mapped_file.wrote_position - position,
                        self.end - offset)
            if count <= 0:
                return offset
            view = mapped_file.view(position, count)
            if view is None:
                return offset
            try:
                differs = np.flatnonzero(np.frombuffer(view, np.uint8)
                                         != source[compared:compared + count])
            finally:
                view.release()
                mapped_file.release()
            if len(differs):
                return offset + int(differs[0])
            compared += count
        return None


def _last_record_start(buffer, start: int, end: int) -> int:
    """Position of the last whole record in ``buffer[start:end]`` (records end at ``end``):
    a scan to one byte short stops AT it."""
    _, position, _ = record_codec.scan(buffer, start, end - 1, False)
    return position


# --- truncation across a restart ----------------------------------------------------------------
def request_truncation(store_root: str, physical_offset: int) -> None:
    """Record that the next start must cut the CommitLog at ``physical_offset`` (bytes)."""
    path = paths.ha_truncate_path(store_root)
    tmp_path = path + ".tmp"
    with open(tmp_path, "w", encoding="ascii") as out:
        out.write(f"{physical_offset}\n")
        out.flush()
        os.fsync(out.fileno())
    os.rename(tmp_path, path)
    directory = os.open(store_root, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def pending_truncation(store_root: str) -> int | None:
    """The offset of a pending truncation, or None. A damaged request is logged and dropped
    (the next connection finds the divergence again)."""
    path = paths.ha_truncate_path(store_root)
    try:
        with open(path, encoding="ascii") as source:
            text = source.read().strip()
    except FileNotFoundError:
        return None
    if text.isdigit():
        return int(text)
    log.error("%s holds %r, not an offset; ignored", path, text[:40])
    os.unlink(path)
    return None


def apply_pending_truncation(store_root: str, commitlog_dir: str, file_size: int,
                             epoch_path: str | None = None) -> int | None:
    """Apply a pending truncation (call before recovery, with the store locked): in controller
    mode (``epoch_path``) drop the epochs that start at or after the offset, zero the CommitLog
    after the offset, delete later files, drop the request. Every step is idempotent and the
    request goes last, so an interrupted truncation is done again. Returns the offset."""
    offset = pending_truncation(store_root)
    if offset is None:
        return None
    if epoch_path is not None:
        EpochFile.load(epoch_path).truncate_suffix_by_offset(offset)
    commitlog = CommitLog(commitlog_dir, file_size)
    if not commitlog.load():
        raise ValueError(f"{commitlog_dir}: a CommitLog file has the wrong size")
    try:
        end = commitlog.data_end()
        if offset < end:
            commitlog.truncate_dirty_files(offset)
        log.warning("slave CommitLog truncated to physical offset %d (it ended at %d): the "
                    "tail after it differed from the master's", offset, end)
    finally:
        commitlog.shutdown(0)
    _lower_flushed_end(store_root, offset)
    os.unlink(paths.ha_truncate_path(store_root))
    return offset


def _lower_flushed_end(store_root: str, offset: int) -> None:
    """The checkpoint's flushed CommitLog offset is recovery's proof of the end: a deliberate
    truncation below it lowers it first, or recovery would find acknowledged data missing."""
    path = paths.checkpoint_path(store_root)
    if not os.path.exists(path) or os.path.getsize(path) != layout.CHECKPOINT_FILE_SIZE:
        return             # absent or damaged: recovery does without it (store/repair.py)
    reading = StoreCheckpoint(path, read_only=True)
    flushed_end = reading.flushed_end()
    reading.shutdown()
    if flushed_end is None or flushed_end <= offset:
        return
    checkpoint = StoreCheckpoint(path)
    checkpoint.commitlog_flushed_offset = offset
    checkpoint.shutdown()          # stores and msyncs the page
