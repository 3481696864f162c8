# MessageStoreReader: the store's read API for processes that never write (remoting workers).
"""Read-only view of a store that another process writes, current up to a dispatched position.

The CommitLog, the consume queues and the index are mapped READ-ONLY; no lock file, no abort
file, no recovery (the supervisor recovered before the workers started). The read methods are
those of :class:`~pybroker.store.message_store.MessageStore` (shared code in
:mod:`pybroker.store.read_api`) and return the same result types.

What may be served is bounded by ``dispatched_position``: every record below it is whole, and
every consume-queue unit pointing below it is written (the dispatcher publishes the position
after writing them, with a release store; the caller read it with an acquire load). The caller
passes new positions with :meth:`MessageStoreReader.advance` (or a ``positions`` source that
every read consults, so a request never sees positions older than those its client was told
about); nothing is refreshed then. CommitLog look-ups by physical offset (view by id) may also
read up to ``written_position``: a record is whole once the appender published it, and a sync
send is acknowledged then, before it is dispatched. A read
brings a file or queue up to date only when the position moved since that object was last
brought up to date, and that costs no system call unless a new file must be mapped (the last
known file is full, or a queue directory is not known yet). A pull on an idle queue while
nothing is dispatched costs no system call at all.
"""
import logging
import os
import time
from collections.abc import Callable

import numpy as np
import psutil

from pybroker.store.damaged_records import DamagedRecords
from pybroker.store.drop_behind import KEEP_BYTES, DropBehind
from pybroker.store import layout, paths
from pybroker.store.commitlog import CommitLog
from pybroker.store.consume_queue import UNIT_DTYPE, UNIT_STRUCT, ConsumeQueue, ConsumeQueueStore
from pybroker.store.index_file import IndexService
from pybroker.store.mapped_file import MappedFile
from pybroker.store.queue_offsets import QueueOffsetReader
from pybroker.store.read_api import StoreReads
from pybroker.store.settings import StoreConfig

__all__ = ["MessageStoreReader", "follow_commitlog"]

log = logging.getLogger(__name__)

# How much of the newest CommitLog (bytes below the dispatched position) a reader keeps mapped;
# older pages its reads touched leave its page tables once a second (store/drop_behind.py).
# One figure per way of reading; proc/dataplane.py gives each process's Attachment its own.
# Remoting workers (and ha serving slaves): consumers that keep up read the newest records, each
# group again; 64 MiB is a second or two of a batch load's writes.
READER_KEEP_BYTES = 64 << 20
# gRPC workers: the same reads at one process's gRPC rate (~3 MB/s of records at 10,000 sends a
# second), so a few seconds of them; a SimpleConsumer's backlog pages are read once each.
GRPC_READER_KEEP_BYTES = 8 << 20
# The timer worker and the supervisor read at the dispatched end (the wheel and revive topics'
# new records) and, when due, records written long before (the timer's parked records, the
# revive's un-acked messages), each once: what is behind the page in use is not read again soon.
TAIL_READER_KEEP_BYTES = KEEP_BYTES      # the page in use, as a writer keeps it
READER_SWEEP_INTERVAL_S = 1.0

_UNIT_SIZE = layout.CQ_STORE_UNIT_SIZE
_NO_QUEUES: dict = {}      # the queues of a topic this reader does not know
# First chunk of units checked when a queue file grows; later chunks grow 4x (numpy per chunk).
_UNIT_SCAN_CHUNK_MIN = 256
# Units looked at past one that does not count before it is taken as the end of the written
# units (a zeroed 4 KiB page of a queue file is 205 units).
_DAMAGED_UNITS_LOOKAHEAD = 1024


def _valid_units(buffer, first_unit: int, count: int, limit_physical_offset: int) -> np.ndarray:
    """Which of ``count`` units from ``first_unit`` count as written (see _grown_units)."""
    units = np.frombuffer(buffer, UNIT_DTYPE, count, first_unit * _UNIT_SIZE)
    physical_offsets, sizes = units["phy"], units["size"]
    filler = (physical_offsets == 0) & (sizes == layout.CQ_FILLER_SIZE)
    return filler | ((physical_offsets >= 0) & (sizes > 0)
                     & (physical_offsets + sizes <= limit_physical_offset))


def _unit_counts(buffer, unit: int, limit_physical_offset: int) -> bool:
    """Whether one unit counts as written (the rule of _valid_units, without numpy: a POP or
    an ack checks one unit of every queue it reads after each dispatch, and numpy's fixed
    cost per call was ~20-45 us of the ~1 ms a POP-then-ACK round trip cost a worker)."""
    physical_offset, size, _ = UNIT_STRUCT.unpack_from(buffer, unit * _UNIT_SIZE)
    if physical_offset == 0 and size == layout.CQ_FILLER_SIZE:
        return True
    return physical_offset >= 0 and size > 0 and physical_offset + size <= limit_physical_offset


def _grown_units(mapped_file: MappedFile, start_unit: int, units_per_file: int,
                 limit_physical_offset: int) -> int:
    """Units of a file valid from ``start_unit`` on: the new unit count of the file.

    A unit counts when it is a filler or points at a record that ends at or below
    ``limit_physical_offset`` (dispatched, so completely written before it was published).
    The writer appends in order, so units that do not count followed (within
    _DAMAGED_UNITS_LOOKAHEAD) by units that do are damage, not the end: they count too, and
    reads find their records in the CommitLog (pybroker/store/unit_search.py).
    """
    if start_unit >= units_per_file or not mapped_file.hold():
        return start_unit
    buffer = mapped_file.buffer()
    position, chunk = start_unit, _UNIT_SCAN_CHUNK_MIN
    try:
        if start_unit > 0 and not _unit_counts(buffer, start_unit, limit_physical_offset):
            # Nothing new here since the scan that stopped at this unit: the writer appends in
            # order, and that scan (or an earlier one) already looked past any damage before
            # it. Without this, every read of an idle queue after any dispatch elsewhere
            # (a POP's ack, say) looked _DAMAGED_UNITS_LOOKAHEAD units ahead again.
            return start_unit
        while position < units_per_file:
            count = min(chunk, units_per_file - position)
            valid = _valid_units(buffer, position, count, limit_physical_offset)
            if bool(valid.all()):
                position += count
                chunk *= 4
                continue
            position += int(np.argmin(valid))
            ahead = min(_DAMAGED_UNITS_LOOKAHEAD, units_per_file - position - 1)
            later = _valid_units(buffer, position + 1, ahead, limit_physical_offset) \
                if ahead > 0 else np.zeros(0, bool)
            if not later.any():
                break
            position += 1 + int(np.argmax(later))
        return position
    finally:
        buffer.release()
        mapped_file.release()


def follow_commitlog(commitlog: CommitLog, previous_position: int, target_position: int) -> int:
    """Bring a CommitLog that another process writes up to ``target_position`` (bytes).

    Maps files created since (only when ``target_position`` lies beyond the last mapped file;
    a new file starts with ``flushed_position`` 0) and sets ``wrote_position`` of every file
    not complete at ``previous_position`` (-1: all files). Returns 1 when the directory was
    listed, else 0. Used by the reader, the dispatcher and the flusher.
    """
    queue = commitlog.mapped_file_queue
    file_size = commitlog.file_size
    files = queue.mapped_files
    listed = 0
    if not files or target_position > files[-1].file_from_offset + file_size:
        known = len(files)
        queue.refresh()
        listed = 1
        for mapped_file in queue.mapped_files[known:]:
            mapped_file.flushed_position = 0
    for mapped_file in reversed(queue.mapped_files):
        if 0 <= previous_position and \
                mapped_file.file_from_offset + file_size <= previous_position:
            break      # complete at the previous call already, as is every file before it
        mapped_file.wrote_position = \
            min(max(target_position - mapped_file.file_from_offset, 0), file_size)
    return listed


class MessageStoreReader(StoreReads):
    """Read side of a store written by other processes (the appender and the dispatcher).

    Parameters
    ----------
    settings : StoreConfig
        Store root, file sizes, index sizes and pull caps.
    dispatched_position : int
        CommitLog physical offset (bytes) up to which data may be served; see :meth:`advance`.
    positions : callable returning (dispatched_position, written_position), optional
        Consulted at every read (acquire loads of the control block, no system call), so reads
        are as current as the writers; without it only :meth:`advance` moves the positions.
    store_changes : callable returning (commitlog_min_offset, topic_deletion_done), optional
        Also consulted at every read: when either moves (expired-file cleanup, topic deletion
        in the dispatcher) the reader drops its maps of deleted CommitLog files, reloads the
        index and forgets every consume queue (reopened lazily, min offsets corrected).
    queue_offsets : QueueOffsetReader, optional
        The dispatcher's published max offsets (pybroker/store/queue_offsets.py):
        ``get_max_offset_in_queue`` answers from them without opening, listing or scanning
        the queue's files (the consume queue's files answer while the table cannot).
    rest_offsets : QueueOffsetReader, optional
        The same table, for ``get_max_offsets_in_queues`` only (a remoting worker: a POP's
        count of what its queues have left, see that method); ``queue_offsets`` serves it
        too.
    keep_bytes : int
        Bytes of the newest CommitLog (below the dispatched position) that stay mapped in
        this process; older pages its reads touched are dropped from its page tables once a
        second: ``READER_KEEP_BYTES``, ``GRPC_READER_KEEP_BYTES`` or ``TAIL_READER_KEEP_BYTES``.

    Reads: ``get_messages``, ``query_messages``, ``look_message_by_offset``,
    ``view_message_by_id``, ``get_commit_log_data``, ``get_max_offset_in_queue``,
    ``get_min_offset_in_queue``, ``get_offset_in_queue_by_time``,
    ``get_earliest_message_time``, ``get_message_store_timestamp``, ``runtime_info``.
    Call :meth:`close` when done.
    """

    def __init__(self, settings: StoreConfig | None = None, dispatched_position: int = 0,
                 positions: Callable[[], tuple[int, int]] | None = None,
                 store_changes: Callable[[], tuple[int, int]] | None = None,
                 queue_offsets: QueueOffsetReader | None = None,
                 rest_offsets: QueueOffsetReader | None = None,
                 keep_bytes: int = READER_KEEP_BYTES):
        settings = settings if settings is not None else StoreConfig()
        self._queue_offsets = queue_offsets
        self._rest_offsets = queue_offsets if queue_offsets is not None else rest_offsets
        self.settings = settings
        self.store_root = settings.store_path_root_dir
        self.commitlog_dir = settings.commitlog_dir
        ratio = settings.access_message_in_memory_max_ratio
        self._memory_bytes = psutil.virtual_memory().total * ratio // 100
        self._stats = {"get_times_found": 0, "get_times_miss": 0, "get_transferred_count": 0}
        self.dispatched_position = max(dispatched_position, 0)
        self.written_position = self.dispatched_position
        # Written by recovery before the workers start; read once.
        self.damaged_records = DamagedRecords.load(self.store_root) or None
        self._positions = positions
        self._store_changes = store_changes
        self._seen_store_changes = (0, 0)
        self.commitlog = CommitLog(self.commitlog_dir,
                                   settings.mapped_file_size_commit_log,
                                   read_only=True)
        if not self.commitlog.load():
            raise ValueError(f"store {self.store_root}: a CommitLog file has the wrong size")
        self.consume_queue_store = ConsumeQueueStore(
            self.store_root, settings.mapped_file_size_consume_queue, read_only=True)
        self.index_service: IndexService | None = None
        if settings.message_index_enable:
            self.index_service = IndexService(paths.index_dir(self.store_root),
                                              settings.max_hash_slot_num,
                                              settings.max_index_num,
                                              read_only=True)
            if not self.index_service.load():
                raise ValueError(f"store {self.store_root}: an IndexFile has the wrong size")
        # Position each object was last brought up to (-1: never).
        self._commitlog_position = -1
        self._index_position = -1
        self._queue_positions: dict[tuple[str, int], int] = {}
        self._missing_queues: dict[tuple[str, int], int] = {}
        self.refreshes_total = 0      # refreshes that mapped new files (diagnostics, tests)
        # Moves whenever files were forgotten (deleted by the dispatcher, or closed): the pull
        # fast path then gives back every file it holds (pybroker/_fast/pull_path.pyx).
        self.generation = 0
        # Pages reads touched, out of this process's page tables once a second, all but the
        # newest ``keep_bytes`` (store/drop_behind.py): reads go back, so a sweep, not a cursor.
        self._drop_behind = DropBehind(self.commitlog.mapped_file_queue, keep_bytes=keep_bytes)
        self._next_sweep_s = time.monotonic() + READER_SWEEP_INTERVAL_S

    # --- position -------------------------------------------------------------------------------
    def advance(self, dispatched_position: int, written_position: int = 0) -> None:
        """Allow reads up to ``dispatched_position`` and CommitLog look-ups up to
        ``written_position`` (bytes; neither moves back). No I/O here."""
        if dispatched_position > self.dispatched_position:
            self.dispatched_position = dispatched_position
        self.written_position = max(self.written_position, written_position,
                                    self.dispatched_position)

    def _catch_up(self) -> None:
        if self._positions is not None:
            dispatched, written = self._positions()
            if dispatched != self.dispatched_position or written != self.written_position:
                self.advance(dispatched, written)       # (equal: advance would keep both)
        if self._store_changes is not None:
            changes = self._store_changes()
            if changes != self._seen_store_changes:
                self._seen_store_changes = changes
                self._forget_deleted_files(changes[0])
        now_s = time.monotonic()
        if now_s >= self._next_sweep_s:
            self._next_sweep_s = now_s + READER_SWEEP_INTERVAL_S
            self._drop_behind.sweep(self.dispatched_position)

    def _physical_min_offset(self) -> int:
        """CommitLog min offset (bytes): the published one may be ahead of this reader's maps
        (files it never mapped were deleted)."""
        return max(self.commitlog.min_offset(), self._seen_store_changes[0], 0)

    def commitlog_min_offset(self) -> int:
        """CommitLog min offset (bytes), the published one when it is ahead of the maps."""
        self._catch_up()
        return self._physical_min_offset()

    def _forget_deleted_files(self, commitlog_min_offset: int) -> None:
        """Files were deleted by the dispatcher: drop their maps (held ones close when
        released) and forget every queue, so reopened queues see the files left on disk."""
        self.generation += 1
        self.commitlog.mapped_file_queue.forget_files_below(commitlog_min_offset)
        self.consume_queue_store.close()
        self.consume_queue_store.queue_table.clear()
        self._queue_positions.clear()
        self._missing_queues.clear()
        if self.index_service is not None and not self.index_service.load():
            raise ValueError(f"store {self.store_root}: an IndexFile has the wrong size")
        self._index_position = -1
        self.refreshes_total += 1

    def close(self) -> None:
        """Unmap every file (idempotent); results still held keep their files mapped."""
        self.generation += 1
        self.commitlog.shutdown(0)
        self.consume_queue_store.close()
        if self.index_service is not None:
            self.index_service.close()

    def __enter__(self) -> "MessageStoreReader":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def current_commitlog(self) -> CommitLog:
        """The CommitLog, brought up to the written position (the scrubber walks it)."""
        return self._commitlog()

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """Next queue offset to be written; 0 for an unknown queue."""
        if self._queue_offsets is not None:
            published = self._queue_offsets.max_offset(topic, queue_id)
            if published is not None:
                return published
        return super().get_max_offset_in_queue(topic, queue_id)

    def get_max_offsets_in_queues(self, topic: str, queue_ids) -> list[int]:
        """Each queue's max offset for an estimate of what it has left, from the dispatcher's
        table in one call when there is one: no queue is looked up, caught up or re-checked
        (a POP of every queue counts every queue it does not read). The table trails this
        reader's own queues by at most the batch the dispatcher is publishing (it publishes
        a batch's queues after its position), so it is not what reads, bounds checks or
        get_max_offset_in_queue answer from in a worker; a queue it cannot say is asked
        here."""
        table = self._rest_offsets
        if table is None:
            return super().get_max_offsets_in_queues(topic, queue_ids)
        return [super(MessageStoreReader, self).get_max_offset_in_queue(topic, queue_id)
                if offset is None else offset
                for queue_id, offset in zip(queue_ids, table.max_offsets(topic, queue_ids),
                                            strict=True)]

    def get_offset_bounds_in_queue(self, topic: str, queue_id: int) -> tuple[int, int]:
        """The min and max offsets as the two calls give them, the queue looked up once."""
        min_offset, max_offset = super().get_offset_bounds_in_queue(topic, queue_id)
        if self._queue_offsets is not None:
            published = self._queue_offsets.max_offset(topic, queue_id)
            if published is not None:
                return min_offset, published
        return min_offset, max_offset

    def offset_outside_queue(self, topic: str, queue_id: int,
                             queue_offset: int) -> tuple[int, int] | None:
        """The bounds check of StoreReads (an ack's), without a catch-up when the queue as
        this reader last brought it up holds ``queue_offset`` (min <= offset < max) and the
        store's changes have not moved since (a C load; the usual case: the POP that handed
        the offset out read the queue in this process).

        Exact: between two store changes the reader never moves a known queue's min offset
        (only a queue that had no unit corrects it when it grows, and one that holds an
        offset has units) and a queue's max offset only grows as the writers move, so a
        check caught up with them finds the offset within its bounds too; files deleted or
        a topic deleted move the store's changes (the caught-up check then forgets the
        queues). Anything else, a refusal included, is the caught-up check's. With the
        dispatcher's table as max offsets (``queue_offsets``), which may trail this
        reader's queues, every check is the caught-up one."""
        if self._queue_offsets is None:
            queue = self.consume_queue_store.queue_table.get(topic, _NO_QUEUES).get(queue_id)
            if queue is not None and \
                    (self._store_changes is None or
                     self._store_changes() == self._seen_store_changes) and \
                    queue.min_offset_in_queue() <= queue_offset < queue.max_offset_in_queue():
                return None
        return super().offset_outside_queue(topic, queue_id, queue_offset)

    def get_message_store_timestamp(self, topic: str, queue_id: int, queue_offset: int) -> int:
        """Store time (ms) of the message at ``queue_offset``; -1 when there is none. A unit
        this reader has already checked is read as it is: the queue is not brought up to the
        dispatched position first (a lagging consumer's offset, scraped again and again)."""
        self._catch_up()
        queue = self.consume_queue_store.find(topic, queue_id)
        if queue is not None:
            unit = queue.get(queue_offset)
            if unit is not None:
                return self._store_timestamp_at(unit[0], unit[1])
        return super().get_message_store_timestamp(topic, queue_id, queue_offset)

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The consume queue of (topic, queue_id) up to the dispatched position, or None."""
        return self._find_queue(topic, queue_id)

    # --- hooks of StoreReads ----------------------------------------------------------------------
    def _commitlog(self) -> CommitLog:
        self._catch_up()
        return self._commitlog_of_read()

    def _commitlog_of_read(self) -> CommitLog:
        # Up to the positions of the last catch-up (a queue read's look-up made it). Every
        # record below written_position is whole; consume-queue units and index entries still
        # bound what is served to dispatched_position.
        target = self.written_position
        if self._commitlog_position != target:
            self._sync_commitlog(self._commitlog_position, target)
            self._commitlog_position = target
        return self.commitlog

    def _sync_commitlog(self, previous: int, target: int) -> None:
        self.refreshes_total += follow_commitlog(self.commitlog, previous, target)

    def _index_service(self) -> IndexService | None:
        self._catch_up()
        index_service = self.index_service
        target = self.dispatched_position
        if index_service is None or self._index_position == target:
            return index_service
        files = index_service.index_files
        if not files or files[-1].is_write_full():
            # A new IndexFile may exist: map the directory again (the writer rolls rarely).
            if not index_service.load():
                raise ValueError(f"store {self.store_root}: an IndexFile has the wrong size")
            self.refreshes_total += 1
        self._index_position = target
        return index_service

    def _find_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        self._catch_up()
        key = (topic, queue_id)
        target = self.dispatched_position
        queue = self.consume_queue_store.find(topic, queue_id)
        if queue is None:
            if self._missing_queues.get(key) == target:
                return None
            queue = self._open_queue(topic, queue_id)
            if queue is None:
                self._missing_queues[key] = target
                return None
            self._missing_queues.pop(key, None)
            self._grow_queue(queue, target)
            queue.correct_min_offset(self._physical_min_offset())
            self._queue_positions[key] = target
        elif self._queue_positions.get(key) != target:
            self._grow_queue(queue, target)
            self._queue_positions[key] = target
        return queue

    def _open_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        try:
            queue_dir = paths.consume_queue_dir(self.store_root, topic, queue_id)
        except ValueError:
            return None          # a topic or queue id that cannot name a directory
        if not os.path.isdir(queue_dir):
            return None
        queue = self.consume_queue_store.find_or_create(topic, queue_id)
        if not queue.load():
            log.error("consume queue %s: a file has the wrong size; not served", queue_dir)
            del self.consume_queue_store.queue_table[topic][queue_id]
            return None
        for mapped_file in queue.mapped_file_queue.mapped_files:
            mapped_file.wrote_position = mapped_file.flushed_position = 0
        self.refreshes_total += 1
        return queue

    def _grow_queue(self, queue: ConsumeQueue, target: int) -> None:
        """Advance the queue's files over units that point below ``target``. Whether the
        queue had no unit is read before its files first change (a queue that did not grow,
        the usual case of a read after another queue's dispatch, reads no bounds)."""
        file_queue = queue.mapped_file_queue
        units_per_file = queue.mapped_file_size // _UNIT_SIZE
        was_empty = None
        checked_for_files = False
        index = 0
        while True:
            files = file_queue.mapped_files
            while index < len(files) and files[index].wrote_position >= queue.mapped_file_size:
                index += 1
            if index == len(files):
                if checked_for_files:
                    break
                if was_empty is None:
                    was_empty = queue.min_offset_in_queue() >= queue.max_offset_in_queue()
                known = len(files)
                file_queue.refresh()   # the last file is full (or none): look for the next
                checked_for_files = True
                for mapped_file in file_queue.mapped_files[known:]:
                    mapped_file.wrote_position = mapped_file.flushed_position = 0
                self.refreshes_total += 1
                continue
            mapped_file = files[index]
            count = _grown_units(mapped_file, mapped_file.wrote_position // _UNIT_SIZE,
                                 units_per_file, target)
            if was_empty is None and count * _UNIT_SIZE != mapped_file.wrote_position:
                was_empty = queue.min_offset_in_queue() >= queue.max_offset_in_queue()
            mapped_file.wrote_position = mapped_file.flushed_position = count * _UNIT_SIZE
            if count < units_per_file:
                if index + 1 < len(files):
                    # Files the writer made past this one (a queue opened when they were on
                    # disk) hold only units beyond the target: mapped, they would count in
                    # the queue's max offset. The refresh above maps them again once this
                    # file is full.
                    file_queue.forget_files_beyond(mapped_file.file_from_offset)
                break
        if was_empty and queue.max_offset_in_queue() > queue.min_offset_in_queue():
            queue.correct_min_offset(self._physical_min_offset())

    # --- the pull fast path's view (pybroker/_fast/pull_path.pyx) -------------------------------
    @property
    def memory_bytes(self) -> int:
        """Bytes of RAM counted as hot (accessMessageInMemoryMaxRatio of the machine's)."""
        return self._memory_bytes

    def fast_positions(self) -> tuple[int, int, int, bool]:
        """``(dispatched, written, generation, usable)`` after catching up with the writers;
        not usable while recovery's skipped ranges exist (their reads are the handler's)."""
        self._catch_up()
        return (self.dispatched_position, self.written_position, self.generation,
                not self.damaged_records)

    def fast_queue(self, topic: str, queue_id: int) -> tuple | None:
        """``(min offset, max offset, file size, [(base, mapped file, readable bytes)])`` of
        the queue brought up to the dispatched position, or None when it does not exist."""
        queue = self._find_queue(topic, queue_id)
        if queue is None:
            return None
        return (queue.min_offset_in_queue(), queue.max_offset_in_queue(),
                queue.mapped_file_size,
                [(mapped_file.file_from_offset, mapped_file, mapped_file.wrote_position)
                 for mapped_file in queue.mapped_file_queue.mapped_files])

    def fast_commitlog(self) -> tuple[int, list]:
        """``(file size, [(base, mapped file, readable bytes)])`` of the CommitLog brought up
        to the written position (new files mapped)."""
        commitlog = self._commitlog()
        return commitlog.file_size, [
            (mapped_file.file_from_offset, mapped_file, mapped_file.wrote_position)
            for mapped_file in commitlog.mapped_file_queue.mapped_files]

    # --- runtime figures ------------------------------------------------------------------------
    def runtime_info(self) -> dict[str, str]:
        """The read-side figures of GET_BROKER_RUNTIME_INFO (Java's key names, string values)."""
        stats = self._stats
        commitlog = self._commitlog()
        return {
            "getMessageTimesTotalFound": str(stats["get_times_found"]),
            "getMessageTimesTotalMiss": str(stats["get_times_miss"]),
            "getMessageTransferedMsgCount": str(stats["get_transferred_count"]),
            "commitLogMinOffset": str(commitlog.min_offset()),
            "commitLogMaxOffset": str(commitlog.max_offset()),
            "earliestMessageTimeStamp": str(self.get_earliest_message_time()),
        }
