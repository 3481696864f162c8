# The CommitLog: append side (single writer), read side (any process), cross-file record walk.
"""RocketMQ's CommitLog over a :class:`~pybroker.store.mapped_file.MappedFileQueue`.

File rules (protocol.md §4.3): records never span files; if a run of ``size`` bytes does not fit in
``remaining - 8`` bytes of the current file, an 8-byte BLANK marker (TOTALSIZE = bytes to the file
end, magic 0xCBD43194) is written and the run goes to the start of the next file.

Append side (design.md §2 rule 1 and 3): the appender process appends in C
(``pybroker._fast.append.RingDrainer``) into this class's file queue, with the topic-queue table
kept here; :meth:`CommitLog.append_encoded` is the same rule in Python for the single-process
:class:`~pybroker.store.message_store.MessageStore` (recovery, tests, tools): a run of records
already encoded (body CRC included) for ONE topic/queue, copied into the mapped file in one copy
and patched (queue offset, physical offset, store time of every record) in one C loop
(``record.patch_run``). tests/unit/proc/test_appender_equivalence.py keeps the two equal.

Read side: :meth:`CommitLog.read_record` and :meth:`CommitLog.read_raw` return views into the
mapping that HOLD the file; give them back with :meth:`release_record` / :meth:`release_raw`
(or use :meth:`record_at`). Records are parsed by ``pybroker._fast.record`` only.
"""
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator

from pybroker._fast import record as record_codec
from pybroker._fast.append import TopicQueueOffsets
from pybroker.errors import StoreCorruptError
from pybroker.protocol.constants import (TRANSACTION_TYPE_MASK, MessageSysFlag)
from pybroker.store import layout
from pybroker.store.mapped_file import DEFAULT_ALLOCATION, MappedFile, MappedFileQueue
from pybroker.store.status import PutStatus

log = logging.getLogger("pybroker.store.commitlog")

# Transaction types that get queue offset 0 and do not advance the queue (protocol.md §4.3).
NO_QUEUE_OFFSET_TYPES = frozenset({int(MessageSysFlag.TRANSACTION_PREPARED_TYPE),
                                   int(MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)})


@dataclasses.dataclass(slots=True)
class AppendResult:
    """Outcome of one append: offsets of the first record, bytes and records written."""
    status: PutStatus
    physical_offset: int = 0      # global offset of the first record (bytes)
    queue_offset: int = 0         # queue offset of the first record (entries)
    wrote_bytes: int = 0
    count: int = 0
    file_rolled: bool = False     # a BLANK was written and a new file started
    store_timestamp: int = 0      # ms


def topic_queue_key(topic: str, queue_id: int) -> str:
    """Key of the topic-queue offset table, Java's ``topic + "-" + queueId``."""
    return f"{topic}-{queue_id}"


class CommitLog:
    """The CommitLog in directory ``store_path`` of ``file_size``-byte segments.

    Parameters
    ----------
    store_path : str
        The ``commitlog/`` directory.
    file_size : int
        Segment size, bytes (``mappedFileSizeCommitLog``).
    read_only : bool
        Map files read-only (every process but the single writer).
    allocation : str
        How new segments are allocated (see :mod:`pybroker.store.mapped_file`).
    warm : bool
        ``warmMapedFileEnable``: new segments are fallocated and faulted in whole at creation
        (costs about 3 s per GiB on the creating call), instead of sparse.
    on_create : callable, optional
        ``on_create(file, created, elapsed_ns, page_faults)`` after this process creates a
        segment, or maps one the allocator made (``created`` False), to write into it.
    """

    def __init__(self, store_path: str, file_size: int, read_only: bool = False, *,
                 allocation: str = DEFAULT_ALLOCATION, warm: bool = False,
                 on_create: Callable[[MappedFile, bool, int, int], None] | None = None):
        if file_size <= layout.END_FILE_MIN_BLANK_BYTES:
            raise ValueError(f"file_size {file_size} bytes leaves no room for records")
        self.store_path = store_path
        self.file_size = file_size
        self.read_only = read_only
        self.mapped_file_queue = MappedFileQueue(
            store_path, file_size, read_only, allocation="fallocate" if warm else allocation,
            warm=warm, on_create=on_create)
        # Next queue offset per queue, in C: the appender's drain loop advances it directly.
        self._queue_offsets = TopicQueueOffsets()
        self._held_records: dict[int, tuple[record_codec.MessageRecord, MappedFile,
                                            memoryview]] = {}

    # --- lifecycle -----------------------------------------------------------------------------
    def load(self) -> bool:
        """Map existing segments; False when one has the wrong size."""
        return self.mapped_file_queue.load()

    def refresh(self) -> int:
        """Reader side: map segments the writer created since load(); returns how many."""
        return self.mapped_file_queue.refresh()

    def shutdown(self, interval_forcibly_ms: int = 3000) -> None:
        self.mapped_file_queue.shutdown(interval_forcibly_ms)

    def destroy(self) -> None:
        self.mapped_file_queue.destroy()

    # --- topic-queue offset table ----------------------------------------------------------------
    def set_topic_queue_table(self, table: dict[str, int]) -> None:
        """Replace the next-queue-offset table (key :func:`topic_queue_key`), after recovery."""
        self._queue_offsets.clear()
        for key, queue_offset in table.items():
            topic, _, queue_id = key.rpartition("-")
            self._queue_offsets.set(topic, int(queue_id), queue_offset)

    @property
    def topic_queue_table(self) -> dict[str, int]:
        """A copy of the next queue offset per ``topic-queueId`` key."""
        return {topic_queue_key(topic, queue_id): queue_offset
                for topic, queue_id, queue_offset in self._queue_offsets.items()}

    @property
    def queue_offsets(self) -> TopicQueueOffsets:
        """The live next-queue-offset map (the appender's drain loop writes it)."""
        return self._queue_offsets

    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        return self._queue_offsets.get(topic, queue_id)

    def remove_topic_queue(self, topic: str, queue_id: int) -> None:
        self._queue_offsets.remove(topic, queue_id)

    # --- append side ---------------------------------------------------------------------------
    def append_encoded(self, records_buffer, topic: str, queue_id: int, count: int,
                       sys_flag_type: int, store_timestamp: int) -> AppendResult:
        """Append ``count`` pre-encoded records of one topic/queue in one copy.

        ``records_buffer`` is any buffer of whole records; ``sys_flag_type`` the sysFlag (only
        its transaction bits are used); ``store_timestamp`` ms. PREPARED/ROLLBACK records get
        queue offset 0 and do not advance the queue. A run that does not fit in one file ->
        MESSAGE_SIZE_EXCEEDED; records that do not parse or disagree with ``count`` ->
        MESSAGE_ILLEGAL (nothing stays written).
        """
        size = memoryview(records_buffer).nbytes
        if count <= 0 or size <= 0:
            return AppendResult(PutStatus.MESSAGE_ILLEGAL)
        if size + layout.END_FILE_MIN_BLANK_BYTES > self.file_size:
            return AppendResult(PutStatus.MESSAGE_SIZE_EXCEEDED)
        if self.read_only:
            return AppendResult(PutStatus.SERVICE_NOT_AVAILABLE)
        mapped_file = self.writable_file()
        if mapped_file is None:
            return AppendResult(PutStatus.CREATE_MAPPED_FILE_FAILED)
        rolled = False
        if size + layout.END_FILE_MIN_BLANK_BYTES > mapped_file.remaining():
            self.roll(mapped_file)
            rolled = True
            mapped_file = self.writable_file()
            if mapped_file is None:
                return AppendResult(PutStatus.CREATE_MAPPED_FILE_FAILED, file_rolled=True)
        return self._append_run(mapped_file, records_buffer, size, topic, queue_id, count,
                                sys_flag_type & TRANSACTION_TYPE_MASK, store_timestamp, rolled)

    def writable_file(self) -> MappedFile | None:
        """The file to append to (the next one is created when the last is full); None when
        it cannot be created (logged)."""
        try:
            return self.mapped_file_queue.last_mapped_file(0, need_create=True)
        except OSError as exc:
            log.error("creating a CommitLog file in %s failed: %s", self.store_path, exc)
            return None

    def roll(self, mapped_file: MappedFile) -> None:
        """End ``mapped_file`` with the BLANK marker: the next append goes to a new file."""
        position = mapped_file.wrote_position
        remaining = mapped_file.remaining()
        # write_at (not the whole-map buffer) so the flush covers the marker's page.
        marker = bytearray(layout.END_FILE_MIN_BLANK_BYTES)
        record_codec.write_blank(marker, 0, remaining)
        mapped_file.write_at(position, marker)
        mapped_file.wrote_position = self.file_size

    def _append_run(self, mapped_file: MappedFile, records_buffer, size: int, topic: str,
                    queue_id: int, count: int, transaction_type: int, store_timestamp: int,
                    rolled: bool) -> AppendResult:
        position = mapped_file.wrote_position
        physical_offset = mapped_file.file_from_offset + position
        key = topic_queue_key(topic, queue_id)
        no_queue_offset = transaction_type in NO_QUEUE_OFFSET_TYPES
        queue_offset = 0 if no_queue_offset else self._queue_offsets.get(topic, queue_id)
        source = memoryview(records_buffer)
        if not source.readonly:
            # Patch in the caller's buffer (the ring slot) and copy once: a crash mid-copy then
            # never leaves whole-looking but unpatched records in the map.
            patched = self._patch(source, 0, size, physical_offset, queue_offset,
                                  store_timestamp, no_queue_offset)
            if patched == count:
                appended = mapped_file.append(source)
                assert appended, "room was checked before the copy"
        else:
            appended = mapped_file.append(source)
            assert appended, "room was checked before the copy"
            buffer = mapped_file.write_target()
            try:
                patched = self._patch(buffer, position, position + size, physical_offset,
                                      queue_offset, store_timestamp, no_queue_offset)
            finally:
                buffer.release()
            if patched != count:
                # Never leave unpatched or miscounted bytes behind the published position.
                mapped_file.write_at(position, bytes(size))
                mapped_file.wrote_position = position
        source.release()
        if patched != count:
            log.warning("rejected a run for %s: %s records parsed, %d declared", key,
                        patched, count)
            return AppendResult(PutStatus.MESSAGE_ILLEGAL, file_rolled=rolled)
        if not no_queue_offset:
            self._queue_offsets.set(topic, queue_id, queue_offset + count)
        return AppendResult(PutStatus.PUT_OK, physical_offset, queue_offset, size, count,
                            rolled, store_timestamp)

    @staticmethod
    def _patch(buffer, start: int, end: int, physical_offset: int, queue_offset: int,
               store_timestamp: int, no_queue_offset: bool) -> int | None:
        """Patch the run ``buffer[start:end]``; the record count, or None if it does not parse."""
        try:
            if not no_queue_offset:
                return record_codec.patch_run(buffer, start, end, physical_offset, queue_offset,
                                              store_timestamp)
            # Transaction halves/rollbacks come one at a time; every record gets queue offset 0.
            patched, at = 0, start
            while at < end:
                status, total_size = record_codec.check(buffer, at, end, False)
                if status != record_codec.RECORD_OK:
                    return None
                record_codec.patch(buffer, at, 0, physical_offset + (at - start),
                                   store_timestamp)
                at += total_size
                patched += 1
            return patched
        except ValueError:
            return None

    def append_raw(self, physical_offset: int, data) -> bool:
        """Slave side: append replicated bytes at ``physical_offset`` (bytes).

        Refused (False) unless ``physical_offset`` equals :meth:`max_offset`. Bytes crossing a
        file end continue in the next file.
        """
        if self.read_only or physical_offset != self.max_offset():
            return False
        source = memoryview(data).cast("B")
        while len(source):
            mapped_file = self.writable_file()
            if mapped_file is None:
                return False
            if mapped_file.file_from_offset + mapped_file.wrote_position != physical_offset:
                return False
            chunk = source[:mapped_file.remaining()]
            mapped_file.append(chunk)
            physical_offset += len(chunk)
            source = source[len(chunk):]
        return True

    # --- positions and durability ----------------------------------------------------------------
    def min_offset(self) -> int:
        """Global offset of the first byte still stored, or -1 when empty."""
        return self.mapped_file_queue.min_offset()

    def max_offset(self) -> int:
        """Global offset just past the last written byte (0 when empty)."""
        return self.mapped_file_queue.max_offset()

    def data_end(self) -> int:
        """End of the records of a loaded, not yet positioned CommitLog, found by scanning:
        in the last file holding any, since empty files the allocator made ready may follow
        it (0 when there is none)."""
        files = self.mapped_file_queue.mapped_files
        for index in range(len(files) - 1, -1, -1):
            mapped_file = files[index]
            if not mapped_file.hold():
                raise RuntimeError(f"{mapped_file.path} is shut down")
            buffer = mapped_file.buffer()
            try:
                status, position, _ = record_codec.scan(buffer, 0, mapped_file.file_size, False)
            finally:
                buffer.release()
                mapped_file.release()
            if status == record_codec.RECORD_BLANK:
                return mapped_file.file_from_offset + mapped_file.file_size
            if position > 0 or index == 0:
                return mapped_file.file_from_offset + position
        return 0

    def flush(self, least_pages: int = 0) -> bool:
        """msync the unflushed range; True when ``flushed_where`` advanced."""
        return self.mapped_file_queue.flush(least_pages)

    @property
    def flushed_where(self) -> int:
        """Global offset known durable (bytes)."""
        return self.mapped_file_queue.flushed_where

    def set_wrote_and_flushed(self, physical_offset: int) -> None:
        self.mapped_file_queue.set_wrote_and_flushed(physical_offset)

    def truncate_dirty_files(self, physical_offset: int) -> None:
        self.mapped_file_queue.truncate_dirty_files(physical_offset)

    def delete_expired_files(self, expired_ms: int, delete_interval_ms: int,
                             interval_forcibly_ms: int, clean_immediately: bool) -> int:
        """Delete segments older than ``expired_ms`` (never the last); returns how many."""
        return self.mapped_file_queue.delete_expired_by_time(
            expired_ms, delete_interval_ms, interval_forcibly_ms, clean_immediately)

    # --- read side -----------------------------------------------------------------------------
    def _file_at(self, physical_offset: int) -> tuple[MappedFile, int] | None:
        mapped_file = self.mapped_file_queue.find_mapped_file_by_offset(physical_offset)
        if mapped_file is None:
            return None
        return mapped_file, physical_offset - mapped_file.file_from_offset

    def read_record(self, physical_offset: int):
        """The record at ``physical_offset`` as a MessageRecord, or None.

        None when the offset is outside the written data or no whole record starts there (a
        BLANK marker, zeros, damage). The record's ``body`` is a view into the map that HOLDS
        the file: call :meth:`release_record` when done (or use :meth:`record_at`).
        """
        found = self._file_at(physical_offset)
        if found is None:
            return None
        mapped_file, position = found
        view = mapped_file.view(position, mapped_file.wrote_position - position)
        if view is None:
            return None
        try:
            status, _ = record_codec.check(view, 0, len(view), False)
            decoded = record_codec.decode(view, 0) if status == record_codec.RECORD_OK else None
        except BaseException:
            view.release()
            mapped_file.release()
            raise
        if decoded is None:
            view.release()
            mapped_file.release()
            return None
        self._held_records[id(decoded)] = (decoded, mapped_file, view)
        return decoded

    def release_record(self, message_record) -> None:
        """Give back a record from :meth:`read_record`; its ``body`` is unusable afterwards."""
        held = self._held_records.pop(id(message_record), None)
        if held is None:
            raise ValueError("record was not read by this CommitLog or already released")
        decoded, mapped_file, view = held
        decoded.body.release()
        view.release()
        mapped_file.release()

    @contextlib.contextmanager
    def record_at(self, physical_offset: int):
        """``with commitlog.record_at(offset) as record:`` - read_record + release_record."""
        decoded = self.read_record(physical_offset)
        try:
            yield decoded
        finally:
            if decoded is not None:
                self.release_record(decoded)

    def read_raw(self, physical_offset: int, size_max: int) -> memoryview | None:
        """Up to ``size_max`` bytes from ``physical_offset`` to the end of that file's data.

        For replication. The view HOLDS the file: call :meth:`release_raw` when done. None when
        nothing is written at that offset.
        """
        found = self._file_at(physical_offset)
        if found is None or size_max <= 0:
            return None
        mapped_file, position = found
        size = min(size_max, mapped_file.wrote_position - position)
        if size <= 0:
            return None
        return mapped_file.view(position, size)

    def release_raw(self, physical_offset: int, view: memoryview) -> None:
        """Give back a view from :meth:`read_raw` at the same ``physical_offset``."""
        view.release()
        found = self._file_at(physical_offset)
        if found is None:
            raise ValueError(f"no file holds offset {physical_offset}")
        found[0].release()

    def record_iterator(self, from_offset: int, to_offset: int | None = None,
                        check_crc: bool = False) -> Iterator:
        """Yield decoded records from ``from_offset`` (a record start) up to ``to_offset``.

        BLANK markers move to the next file; zeros (TOTALSIZE 0) end the walk. A damaged
        record before ``to_offset`` raises StoreCorruptError naming file and offset. Each file
        is held while its records are yielded; a record's ``body`` stays valid (it pins the
        map) but should not be kept past the walk.
        """
        end_offset = self.max_offset() if to_offset is None else to_offset
        offset = from_offset
        while offset < end_offset:
            found = self._file_at(offset)
            if found is None:
                return
            mapped_file, position = found
            file_end = min(mapped_file.wrote_position,
                           end_offset - mapped_file.file_from_offset)
            next_offset = yield from self._file_records(mapped_file, position, file_end,
                                                        check_crc)
            if next_offset is None:
                return
            offset = next_offset

    def _file_records(self, mapped_file: MappedFile, position: int, file_end: int,
                      check_crc: bool):
        """Yield one file's records; returns the next global offset, or None at the end."""
        if not mapped_file.hold():
            return None
        buffer = mapped_file.buffer()
        try:
            while position < file_end:
                status, total_size = record_codec.check(buffer, position, file_end, check_crc)
                if status == record_codec.RECORD_OK:
                    yield record_codec.decode(buffer, position)
                    position += total_size
                elif status == record_codec.RECORD_BLANK:
                    return mapped_file.file_from_offset + self.file_size
                elif status == record_codec.RECORD_END:
                    return None
                else:
                    raise StoreCorruptError(
                        f"{mapped_file.path}: record at file position {position} (physical "
                        f"offset {mapped_file.file_from_offset + position}) is damaged "
                        f"(status {status})")
            return mapped_file.file_from_offset + position
        finally:
            buffer.release()
            mapped_file.release()
