# Read side shared by MessageStore and MessageStoreReader: pull, look-up, query, queue offsets.
"""The store's read API over a CommitLog, consume queues and an index, and its result types.

:class:`StoreReads` holds every read of Java's DefaultMessageStore that a remoting worker serves
itself (pull, view by id, query by key, queue offsets and times). It is a mixin: the owner sets
``settings`` (a pull's caps are its ``transfer_limits()``, read per pull: a test may replace the
settings of a running store), ``_memory_bytes`` (bytes of RAM counted as hot) and ``_stats`` (a
dict of counters), and provides the hooks :meth:`StoreReads._commitlog`,
:meth:`StoreReads._find_queue`, :meth:`StoreReads._commitlog_of_read` and
:meth:`StoreReads._index_service`. :class:`~pybroker.store.message_store.MessageStore` returns
its own (writable, always current) objects;
:class:`~pybroker.store.read_only_store.MessageStoreReader` returns read-only ones, refreshed
lazily up to the dispatched position (a queue read catches up with the writers once, at its
queue's look-up).

Reads hand out memoryview slices of the mapped CommitLog that hold their file: call
``release()`` on every result.
"""
import logging

import numpy as np

from pybroker._fast import pagecache, pull_scan
from pybroker._fast import record as record_codec
from pybroker.protocol.message_id import decode_offset_message_id
from pybroker.store import layout
from pybroker.store.commitlog import CommitLog
from pybroker.store.consume_queue import ConsumeQueue, ConsumeQueueStore
from pybroker.store.damaged_records import DamagedRecords
from pybroker.store.index_file import IndexService
from pybroker.store.mapped_file import MappedFile
from pybroker.store.settings import StoreConfig
from pybroker.store.status import GetStatus
from pybroker.store.unit_search import find_unit_record

__all__ = ["StoreReads", "GetResult", "SelectResult", "QueryResult", "SpansResult"]

log = logging.getLogger("pybroker.store.read_api")

# Java scans at most max(16000 bytes of units, maxMsgNums units) per pull.
_PULL_SCAN_UNITS_MIN = 16000 // layout.CQ_STORE_UNIT_SIZE
# IndexService caps a query at maxMsgsNumBatch (Java default 64) and retries 3 times.
_QUERY_MAX_NUM = 64
_QUERY_ATTEMPTS = 3
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


class _Holds:
    """Views of mapped files plus the holds that keep those files mapped."""
    __slots__ = ("buffers", "_mapped_files", "_residency")

    def __init__(self):
        self.buffers: list[memoryview] = []
        self._mapped_files: list[MappedFile] = []
        # (pages, cold pages) measured before the read's own checks touched the records;
        # None: not measured (only a read asked for it measures: GetResult's ``residency``).
        self._residency: list[int] | None = None

    def _add(self, view: memoryview, mapped_file: MappedFile) -> None:
        self.buffers.append(view)
        self._mapped_files.append(mapped_file)

    def _measure(self, views: list[memoryview],
                 measured: tuple[int, int] | None = None) -> None:
        """Count ``views``' pages and cold pages (``measured`` when taken already) before the
        records are checked, when this read measures them (``_residency`` set): the check
        reads them, and a pull's residency is the page cache as the pull found it."""
        if self._residency is None:
            return
        pages, cold_pages = measured if measured is not None else pagecache.cold_pages(views)
        self._residency[0] += pages
        self._residency[1] += cold_pages

    def _add_views(self, views: list[memoryview], mapped_file: MappedFile) -> None:
        """Views taken under one hold of ``mapped_file`` (:meth:`MappedFile.views`)."""
        self.buffers.extend(views)
        self._mapped_files.append(mapped_file)

    @property
    def buffer_total_size(self) -> int:
        """Bytes in :attr:`buffers`."""
        return sum(view.nbytes for view in self.buffers)

    def page_residency(self) -> tuple[int, int]:
        """(pages, pages not in the page cache) under :attr:`buffers`, before anything read
        them: one mincore per run of nearby records (``pybroker._fast.pagecache``), measured
        by the read before it checked the records. Only for a read that was asked to measure
        (``get_messages(residency=True)``)."""
        assert self._residency is not None, "a read asked to measure its residency"
        return self._residency[0], self._residency[1]

    def release(self) -> None:
        """Release every view and hold; the buffers are unusable afterwards. Idempotent."""
        buffers, mapped_files = self.buffers, self._mapped_files
        self.buffers, self._mapped_files = [], []
        self._residency = None
        for view in buffers:
            view.release()
        for mapped_file in mapped_files:
            mapped_file.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()


class SelectResult(_Holds):
    """One raw region of the CommitLog (a record, or replication data); ``buffer`` is a view."""
    __slots__ = ("physical_offset",)

    def __init__(self, physical_offset: int, view: memoryview, mapped_file: MappedFile):
        super().__init__()
        self.physical_offset = physical_offset
        self._add(view, mapped_file)

    @property
    def buffer(self) -> memoryview:
        return self.buffers[0]


class GetResult(_Holds):
    """Outcome of :meth:`MessageStore.get_messages`: status, offsets (queue offsets) and the
    raw records as views of the CommitLog (no copy). Call :meth:`release` when sent."""
    __slots__ = ("status", "next_begin_offset", "min_offset", "max_offset",
                 "suggest_pull_from_slave", "damaged_physical_offset", "damaged_queue_offset")

    def __init__(self, status: GetStatus, next_begin_offset: int, min_offset: int,
                 max_offset: int, residency: bool = False):
        super().__init__()
        if residency:
            self._residency = [0, 0]
        self.status = status
        self.next_begin_offset = next_begin_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.suggest_pull_from_slave = False
        # A damaged record the read met and did not serve (it ended the batch, or it was the
        # first and the status is MESSAGE_DAMAGED): its CommitLog and queue offsets.
        self.damaged_physical_offset: int | None = None
        self.damaged_queue_offset: int | None = None

    @property
    def message_count(self) -> int:
        return len(self.buffers)

    def __repr__(self) -> str:
        return (f"GetResult({self.status.name}, next={self.next_begin_offset}, "
                f"min={self.min_offset}, max={self.max_offset}, count={self.message_count})")


class SpansResult(_Holds):
    """Outcome of :meth:`StoreReads.read_spans`: record ``i`` lies at ``starts[i]`` of
    ``buffers[which[i]]`` (a view of a whole mapped CommitLog file, one per file), ``which[i]``
    -1 when its bytes are not there. Release when done."""
    __slots__ = ("which", "starts")

    def __init__(self, count: int):
        super().__init__()
        self.which = np.full(count, -1, np.int32)
        self.starts = np.zeros(count, np.int64)

    def view(self, index: int, size: int) -> memoryview | None:
        """Record ``index`` (``size`` bytes) as a view, or None when it is not there."""
        which = int(self.which[index])
        if which < 0:
            return None
        start = int(self.starts[index])
        return self.buffers[which][start:start + size]


class QueryResult(_Holds):
    """Outcome of :meth:`MessageStore.query_messages`: raw records (views) plus the newest index
    file's end timestamp (ms) and end physical offset, for the QUERY_MESSAGE response header."""
    __slots__ = ("index_last_update_timestamp", "index_last_update_phy_offset")

    def __init__(self):
        super().__init__()
        self.index_last_update_timestamp = 0
        self.index_last_update_phy_offset = 0


_DAMAGED = "damaged"        # _add_record: the record fails its check and is not served


def _damaged_at(result: GetResult, unit_index: int, physical_offset: int) -> int:
    """The read met a damaged record at scanned unit ``unit_index``: the records before it
    are the answer (the next pull starts at it), or, when there are none, the answer is
    MESSAGE_DAMAGED and the next pull starts after it. Returns the units scanned."""
    result.damaged_queue_offset = unit_index          # relative; _read_queue adds the base
    result.damaged_physical_offset = physical_offset
    if result.buffers:
        result.status = GetStatus.FOUND
        return unit_index
    result.status = GetStatus.MESSAGE_DAMAGED
    return unit_index + 1


class StoreReads:
    """Read methods of the store facade (a mixin; see the module docstring for its contract)."""

    settings: StoreConfig
    commitlog: CommitLog
    consume_queue_store: ConsumeQueueStore
    index_service: IndexService | None
    _memory_bytes: int
    _stats: dict[str, int]
    # Damaged CommitLog ranges recovery skipped (pybroker.store.damaged_records): never served.
    damaged_records: "DamagedRecords | None" = None

    # --- hooks ---------------------------------------------------------------------------------
    def _commitlog(self) -> CommitLog:
        """The CommitLog to read, current up to what may be served."""
        return self.commitlog

    def _find_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The consume queue of (topic, queue_id), current up to what may be served, or None."""
        return self.consume_queue_store.find(topic, queue_id)

    def _commitlog_of_read(self) -> CommitLog:
        """The CommitLog to read a queue just found by :meth:`_find_queue`, current up to what
        that look-up saw (a read of a queue catches up with the writers once)."""
        return self._commitlog()

    def _index_service(self) -> IndexService | None:
        """The index to query, or None without one."""
        return self.index_service

    # --- pull ---------------------------------------------------------------------------------
    def get_messages(self, group: str, topic: str, queue_id: int, queue_offset: int,
                     max_count: int, max_bytes: int | None = None,
                     tag_codes: set[int] | frozenset[int] | None = None,
                     record_filter=None, residency: bool = False) -> GetResult:
        """Read up to ``max_count`` records of a queue from ``queue_offset`` (Java getMessage).

        Status and ``next_begin_offset`` follow protocol.md §2.3; the reply is capped by
        maxTransferBytes/CountOnMessageInMemory (InDisk for records further than
        accessMessageInMemoryMaxRatio of RAM behind the CommitLog end) and ``max_bytes``.
        ``tag_codes``: match units whose ``(int)`` tags code is in the set; None matches all.
        ``record_filter(view) -> bool``: called with each candidate record's bytes (after the
        tag and batch-size checks); a refused record is skipped without counting towards the
        batch, as Java's isMatchedByCommitLog (the SQL92 filter). It must not raise.
        ``residency``: measure the records' pages and cold pages before they are checked
        (one ``mincore`` per run of nearby records), for :meth:`GetResult.page_residency`;
        only the pull handler's figures ask for it, so a POP's read makes no such call.
        ``group`` is accepted for the broker's interface and not used by the store.
        """
        queue = self._find_queue(topic, queue_id)
        if queue is None:
            # Java creates the queue here, so an unknown queue answers as an empty one.
            self._stats["get_times_miss"] += 1
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
        min_offset, max_offset = queue.min_offset_in_queue(), queue.max_offset_in_queue()
        if max_offset == 0:
            result = GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, min_offset, max_offset)
        elif queue_offset < min_offset:
            result = GetResult(GetStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset)
        elif queue_offset == max_offset:
            result = GetResult(GetStatus.OFFSET_OVERFLOW_ONE, queue_offset, min_offset,
                               max_offset)
        elif queue_offset > max_offset:
            # protocol.md §2.3 / 5.x: continue at max (4.9.x sent 0 when the min was 0).
            result = GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, max_offset, min_offset,
                               max_offset)
        else:
            result = self._read_queue(queue, self._commitlog_of_read(), queue_offset, max_count,
                                      max_bytes, tag_codes, min_offset, max_offset,
                                      record_filter, residency)
        stats = self._stats
        if result.status is GetStatus.FOUND:
            stats["get_times_found"] += 1
            stats["get_transferred_count"] += result.message_count
        else:
            stats["get_times_miss"] += 1
        return result

    def _read_queue(self, queue, commitlog: CommitLog, queue_offset: int, max_count: int,
                    max_bytes: int | None, tag_codes, min_offset: int, max_offset: int,
                    record_filter=None, residency: bool = False) -> GetResult:
        """Read from ``queue_offset`` (within [min_offset, max_offset), the bounds the caller
        just read) through ``commitlog`` (current as the queue's look-up left it)."""
        scan_units = max(_PULL_SCAN_UNITS_MIN, max_count)
        owner = (queue.topic.encode(), queue.queue_id, queue_offset)
        bounds = (min_offset, max_offset)
        if record_filter is None:
            result = self._read_at_once(queue, commitlog, queue_offset, scan_units, max_count,
                                        max_bytes, tag_codes, bounds, owner, residency)
            if result is not None:
                return result
            # A record to take is not readable here (its file is gone or beyond this
            # process's view), or fails its check: the per-unit loop answers as Java does.
        with queue.read_units(queue_offset, scan_units, bounds) as units_view:
            units = units_view.units
            # Small native copies; the map is released when the with-block ends.
            physical_offsets = units["phy"].astype(np.int64)
            sizes = units["size"].astype(np.int64)
            tags_codes = units["tags"].astype(np.int64) if tag_codes is not None else None
        if len(physical_offsets) == 0:
            return self._offset_found_null(queue, queue_offset, min_offset, max_offset)
        if tags_codes is None:
            matched = np.arange(len(physical_offsets))
        else:
            codes = np.array([c for c in tag_codes if _INT32_MIN <= c <= _INT32_MAX], np.int32)
            matched = np.flatnonzero(np.isin(tags_codes.astype(np.int32), codes))
        # Filler units (for skipped records, or Java's before a late first unit) and units
        # pointing into a skipped range are stepped over like filtered ones.
        unservable = (physical_offsets == 0) & (sizes == layout.CQ_FILLER_SIZE)
        if self.damaged_records:
            unservable |= self.damaged_records.mask(physical_offsets)
        if unservable.any():
            matched = matched[~unservable[matched]]
        result = GetResult(GetStatus.NO_MATCHED_MESSAGE, queue_offset, min_offset, max_offset,
                           residency)

        def locate(unit_index: int) -> tuple[int, int] | None:
            # A unit that does not point at its record: the record, from the CommitLog.
            found = find_unit_record(commitlog, queue, queue_offset + unit_index,
                                     self.settings.check_crc_on_read)
            (log.warning if found else log.error)(
                "consume queue %s-%d: the unit of queue offset %d (physical offset %d, size "
                "%d) does not point at a valid record%s", queue.topic, queue.queue_id,
                queue_offset + unit_index, int(physical_offsets[unit_index]),
                int(sizes[unit_index]),
                f"; served its record found in the CommitLog at {found[0]}" if found else
                " and its record was not found between the units around it")
            return found
        scanned = self._collect(result, commitlog, physical_offsets, sizes, matched, max_count,
                                max_bytes, record_filter, locate, owner)
        result.next_begin_offset = queue_offset + scanned
        if result.damaged_queue_offset is not None:
            result.damaged_queue_offset += queue_offset
            log.error("consume queue %s-%d: the CommitLog record of queue offset %d (physical "
                      "offset %d) is damaged and is not served; %s", queue.topic, queue.queue_id,
                      result.damaged_queue_offset, result.damaged_physical_offset,
                      "the pull is answered PULL_OFFSET_MOVED to the next offset"
                      if result.status is GetStatus.MESSAGE_DAMAGED
                      else "the records before it are served")
        last_visited = int(physical_offsets[min(scanned, len(physical_offsets) - 1)])
        result.suggest_pull_from_slave = \
            commitlog.max_offset() - last_visited > self._memory_bytes
        return result

    def _read_at_once(self, queue, commitlog: CommitLog, queue_offset: int, scan_units: int,
                      max_count: int, max_bytes: int | None, tag_codes,
                      bounds: tuple[int, int], owner: tuple[bytes, int, int],
                      residency: bool) -> GetResult | None:
        """A pull without a record filter: every matched unit is taken until the batch is
        full, so the units it takes are decided in one C pass (pybroker/_fast/pull_scan.pyx)
        before a record is read. None when :meth:`_take_at_once` cannot take them. The
        CommitLog's end is read once (the in-disk limit and the slave suggestion)."""
        min_offset, max_offset = bounds
        span = queue.units_span(queue_offset, scan_units, bounds)
        if span is None:
            return self._offset_found_null(queue, queue_offset, min_offset, max_offset)
        units, units_file = span
        try:
            memory_bytes, memory_count, disk_bytes, disk_count = \
                self.settings.transfer_limits()
            damaged = self.damaged_records
            commitlog_end = commitlog.max_offset()
            scanned, last_visited, groups = pull_scan.collect(
                units, tag_codes, damaged.spans if damaged else None, max_count, max_bytes,
                commitlog_end - self._memory_bytes, memory_bytes, memory_count,
                disk_bytes, disk_count, commitlog.file_size)
        finally:
            units.release()
            units_file.release()
        result = GetResult(GetStatus.NO_MATCHED_MESSAGE, queue_offset, min_offset, max_offset,
                           residency)
        if groups is None or not self._take_at_once(result, commitlog, groups, owner):
            return None
        result.next_begin_offset = queue_offset + scanned
        result.suggest_pull_from_slave = commitlog_end - last_visited > self._memory_bytes
        return result

    @staticmethod
    def _offset_found_null(queue, queue_offset: int, min_offset: int,
                           max_offset: int) -> GetResult:
        # The consume-queue file for this offset is gone: continue in the next file.
        units_per_file = queue.mapped_file_size // layout.CQ_STORE_UNIT_SIZE
        next_file = queue_offset + units_per_file - queue_offset % units_per_file
        return GetResult(GetStatus.OFFSET_FOUND_NULL, next_file, min_offset, max_offset)

    def _batch_limits(self, commitlog: CommitLog, physical_offsets):
        """Per unit (bytes limit, count limit): in-memory or in-disk transfer caps."""
        memory_bytes, memory_count, disk_bytes, disk_count = self.settings.transfer_limits()
        in_disk = commitlog.max_offset() - physical_offsets > self._memory_bytes
        limit_bytes = np.where(in_disk, disk_bytes, memory_bytes)
        limit_count = np.where(in_disk, disk_count, memory_count)
        return limit_bytes, limit_count

    def _collect(self, result: GetResult, commitlog: CommitLog, physical_offsets, sizes,
                 matched, max_count: int, max_bytes: int | None, record_filter=None,
                 locate=None, owner: tuple[bytes, int, int] | None = None) -> int:
        """Java's pull loop over units; returns how many units were scanned (i / 20 in Java).

        Runs of units the tag filter rejects are handled with numpy: the loop in Python is per
        matched unit. A unit ends the batch (isTheBatchFull) before it is filtered or read.
        ``locate(unit_index)``: (physical offset, size) of the record of a unit whose record
        fails its check (the unit may be what is damaged), or None. ``owner``: (topic, queue
        id, queue offset of unit 0): every record served must be that queue's, at its unit's
        queue offset.
        """
        unit_count = len(physical_offsets)
        limit_bytes, limit_count = self._batch_limits(commitlog, physical_offsets)
        position = taken = taken_bytes = 0
        next_match = 0
        while True:
            while next_match < len(matched) and matched[next_match] < position:
                next_match += 1
            match = int(matched[next_match]) if next_match < len(matched) else unit_count
            stop = min(match + 1, unit_count)
            if taken and stop > position:
                run_sizes = taken_bytes + sizes[position:stop]
                full = (taken >= max_count) | (taken > limit_count[position:stop] - 1) | \
                    (run_sizes > limit_bytes[position:stop])
                if max_bytes is not None:
                    full |= run_sizes > max_bytes
                first_full = int(np.argmax(full))
                if full[first_full]:
                    return position + first_full
            if match > position and not taken:
                result.status = GetStatus.NO_MATCHED_MESSAGE
            if match >= unit_count:
                return unit_count
            physical_offset, size = int(physical_offsets[match]), int(sizes[match])
            added = self._add_record(result, commitlog, physical_offset, size, record_filter,
                                     owner, match)
            if added is _DAMAGED:
                found = locate(match) if locate is not None else None
                if found is None:
                    return _damaged_at(result, match, physical_offset)
                physical_offset, size = found
                added = self._add_record(result, commitlog, physical_offset, size,
                                         record_filter, owner, match)
            if added is None:                     # refused by the record filter
                position = match + 1
                continue
            if not added:
                if not taken:
                    result.status = GetStatus.MESSAGE_WAS_REMOVING
                # Skip every unit of the CommitLog file that is gone.
                file_size = commitlog.file_size
                next_file = physical_offset + file_size - physical_offset % file_size
                position = max(match + 1, int(np.searchsorted(physical_offsets, next_file)))
                continue
            taken += 1
            taken_bytes += size
            result.status = GetStatus.FOUND
            position = match + 1

    def _take_at_once(self, result: GetResult, commitlog: CommitLog, groups: list,
                      owner: tuple[bytes, int, int]) -> bool:
        """Take the records :func:`pull_scan.collect` chose (grouped by CommitLog file), each
        file's under one hold, and check them (one C call per file); False (nothing taken)
        when one is not readable here or fails its check: the per-unit loop then answers."""
        if not groups:
            return True                        # nothing matched: NO_MATCHED_MESSAGE
        files = []
        for base, _, _, _, end in groups:
            mapped_file = commitlog.mapped_file_queue.find_mapped_file_by_offset(base)
            if mapped_file is None or mapped_file.file_from_offset != base or \
                    end > mapped_file.wrote_position:
                return False
            files.append(mapped_file)
        for mapped_file, (_, positions, sizes, _, _) in zip(files, groups, strict=True):
            views = mapped_file.views(positions, sizes)
            if views is None:                  # shutting down meanwhile: undo, go per unit
                result.release()
                return False
            result._add_views(views, mapped_file)
        result._measure(result.buffers)
        for mapped_file, (_, positions, sizes, indexes, _) in zip(files, groups, strict=True):
            if self._first_damaged(mapped_file, positions, sizes, owner, indexes) >= 0:
                # A damaged record, or a unit that does not point at its record: the per-unit
                # loop answers it (it looks for the record in the CommitLog).
                result.release()
                return False
        result.status = GetStatus.FOUND
        return True

    def _first_damaged(self, mapped_file: MappedFile, positions: list[int], sizes: list[int],
                       owner: tuple[bytes, int, int] | None = None,
                       unit_indexes: list[int] | None = None) -> int:
        """Index of the first record at ``positions`` of ``mapped_file`` that fails its check
        (layout, own offset, body CRC with checkCRCOnRead, the ``owner`` queue's at its unit's
        offset), -1 when none. The caller holds the file (the views of these records it has
        taken): no hold of its own."""
        buffer = mapped_file.buffer()
        topic, queue_id, first = owner if owner is not None else (None, 0, 0)
        try:
            return record_codec.check_records(buffer, positions, sizes,
                                              mapped_file.file_from_offset,
                                              self.settings.check_crc_on_read, topic, queue_id,
                                              first, unit_indexes)
        finally:
            buffer.release()

    def _add_record(self, holds: _Holds, commitlog: CommitLog, physical_offset: int, size: int,
                    record_filter=None, owner: tuple[bytes, int, int] | None = None,
                    unit_index: int = 0) -> bool | str | None:
        """Append a view of ``size`` bytes at ``physical_offset`` of ``commitlog`` to
        ``holds``; False if gone, _DAMAGED if the record fails its check, None if
        ``record_filter`` refused it."""
        mapped_file = commitlog.mapped_file_queue.find_mapped_file_by_offset(physical_offset)
        if mapped_file is None:
            # Below the oldest file: expired (Java's "message was removing"). Anywhere else
            # no record can be: the unit is damaged.
            return False if physical_offset < commitlog.min_offset() else _DAMAGED
        position = physical_offset - mapped_file.file_from_offset
        if size <= 0 or position + size > mapped_file.wrote_position:
            return _DAMAGED              # units only exist for records written before them
        view = mapped_file.view(position, size)
        if view is None:
            return False                 # the file is being deleted (expired) meanwhile
        # A pull's residency, taken before the check reads the record.
        measured = pagecache.cold_pages([view]) if holds._residency is not None else None
        topic, queue_id, first = owner if owner is not None else (None, 0, 0)
        if record_codec.check_records(view, [0], [size], physical_offset,
                                      self.settings.check_crc_on_read, topic, queue_id, first,
                                      [unit_index]) >= 0:
            view.release()
            mapped_file.release()
            return _DAMAGED
        if record_filter is not None and not record_filter(view):
            view.release()
            mapped_file.release()
            return None
        holds._add(view, mapped_file)
        if measured is not None:
            holds._measure([view], measured)
        return True

    # --- single records, query by key, replication -------------------------------------------
    def look_message_by_offset(self, physical_offset: int) -> SelectResult | None:
        """The whole raw record at ``physical_offset`` (VIEW_MESSAGE_BY_ID), or None."""
        if self.damaged_records and self.damaged_records.span_at(physical_offset) is not None:
            return None
        mapped_file = self._commitlog().mapped_file_queue.find_mapped_file_by_offset(
            physical_offset)
        if mapped_file is None:
            return None
        position = physical_offset - mapped_file.file_from_offset
        view = mapped_file.view(position, mapped_file.wrote_position - position)
        if view is None:
            return None
        try:
            status, total_size = record_codec.check(view, 0, len(view), False)
            whole = status == record_codec.RECORD_OK and record_codec.check_records(
                view, [0], [total_size], physical_offset, self.settings.check_crc_on_read) < 0
            record_view = view[:total_size] if whole else None
        finally:
            view.release()
        if record_view is None:
            if status == record_codec.RECORD_OK:
                log.error("the CommitLog record at physical offset %d is damaged and is not "
                          "served", physical_offset)
            mapped_file.release()
            return None
        return SelectResult(physical_offset, record_view, mapped_file)

    def view_message_by_id(self, message_id: str) -> SelectResult | None:
        """The raw record named by an offset message id (ValueError for a malformed id)."""
        _, _, physical_offset = decode_offset_message_id(message_id)
        return self.look_message_by_offset(physical_offset)

    def query_messages(self, topic: str, key: str, max_num: int, begin_ms: int,
                       end_ms: int) -> QueryResult:
        """Raw records indexed under ``topic#key`` stored in [begin_ms, end_ms] (ms).

        Up to ``min(max_num, 64)`` records, oldest first within a round; hash collisions are
        included (clients compare keys, as with Java). Empty without an index.
        """
        result = QueryResult()
        if self._index_service() is None:
            return result
        max_num = min(max_num, _QUERY_MAX_NUM)
        last_query_ms = end_ms
        for _ in range(_QUERY_ATTEMPTS):
            index_service = self._index_service()
            if index_service is None:
                break
            phy_offsets, last_timestamp, last_phy_offset = index_service.query(
                topic, key, max_num, begin_ms, last_query_ms)
            if not phy_offsets:
                break
            result.index_last_update_timestamp = last_timestamp
            result.index_last_update_phy_offset = last_phy_offset
            for number, physical_offset in enumerate(sorted(phy_offsets)):
                selected = self.look_message_by_offset(physical_offset)
                if selected is None:
                    continue
                if number == 0:
                    last_query_ms = record_codec.read_store_timestamp(selected.buffer, 0)
                result._add(selected.buffers.pop(), selected._mapped_files.pop())
            if result.buffers or last_query_ms < begin_ms:
                break
        return result

    def get_commit_log_data(self, physical_offset: int) -> SelectResult | None:
        """CommitLog bytes from ``physical_offset`` to the end of that file's data (HA master)."""
        view = self._commitlog().read_raw(physical_offset, self._commitlog().file_size)
        if view is None:
            return None
        mapped_file = self._commitlog().mapped_file_queue.find_mapped_file_by_offset(
            physical_offset)
        assert mapped_file is not None        # read_raw found it
        return SelectResult(physical_offset, view, mapped_file)

    # --- queue units (the timer's enqueue) ------------------------------------------------------
    def read_queue_units(self, topic: str, queue_id: int, queue_offset: int,
                         count_max: int) -> tuple[np.ndarray, np.ndarray]:
        """(physical offsets, sizes) of up to ``count_max`` units of a queue from
        ``queue_offset`` within one consume-queue file, as int64 copies; empty outside
        [min, max) or for an unknown queue. Filler units are included (size CQ_FILLER_SIZE)."""
        queue = self._find_queue(topic, queue_id)
        if queue is None:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        with queue.read_units(queue_offset, count_max) as units_view:
            units = units_view.units
            return units["phy"].astype(np.int64), units["size"].astype(np.int64)

    def commitlog_min_offset(self) -> int:
        """CommitLog offset (bytes) of the oldest record still stored (0 when empty)."""
        return max(self._commitlog().min_offset(), 0)

    def read_spans(self, physical_offsets: np.ndarray, sizes: np.ndarray) -> SpansResult:
        """Where the records at ``physical_offsets`` of ``sizes`` bytes lie: one view and hold
        per CommitLog file they are in and each record's file and start in it, found with
        numpy (no object per record); a record not wholly written (or in a damaged range) is
        not there."""
        offsets = np.asarray(physical_offsets, np.int64)
        ends = offsets + np.asarray(sizes, np.int64)
        result = SpansResult(len(offsets))
        files = self._commitlog().mapped_file_queue
        file_size = files.mapped_file_size
        numbers = offsets // file_size
        for number in np.unique(numbers).tolist():
            mapped_file = files.find_mapped_file_by_offset(number * file_size)
            if mapped_file is None:
                continue
            base = mapped_file.file_from_offset
            written = mapped_file.wrote_position
            inside = np.flatnonzero((numbers == number) & (offsets >= base)
                                    & (ends <= base + written))
            if not len(inside):
                continue
            views = mapped_file.views([0], [written])
            if views is None:
                continue
            result._add_views(views, mapped_file)
            result.which[inside] = len(result.buffers) - 1
            result.starts[inside] = offsets[inside] - base
        damaged = self.damaged_records
        if damaged:
            for index in np.flatnonzero(result.which >= 0).tolist():
                if damaged.span_at(int(offsets[index])) is not None:
                    result.which[index] = -1
        return result

    # --- queue offsets and times ---------------------------------------------------------------
    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """Next queue offset to be written; 0 for an unknown queue."""
        queue = self._find_queue(topic, queue_id)
        return queue.max_offset_in_queue() if queue is not None else 0

    def get_max_offsets_in_queues(self, topic: str, queue_ids) -> list[int]:
        """:meth:`get_max_offset_in_queue` of each queue of ``topic``, for an estimate of what
        they have left (a POP's restNum; a reader may answer from the dispatcher's table)."""
        return [self.get_max_offset_in_queue(topic, queue_id) for queue_id in queue_ids]

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """First valid queue offset; -1 for an unknown queue (Java)."""
        queue = self._find_queue(topic, queue_id)
        return queue.min_offset_in_queue() if queue is not None else -1

    def get_offset_bounds_in_queue(self, topic: str, queue_id: int) -> tuple[int, int]:
        """``(get_min_offset_in_queue, get_max_offset_in_queue)`` with one look-up of the queue
        (an ack checks both)."""
        queue = self._find_queue(topic, queue_id)
        if queue is None:
            return -1, 0
        return queue.min_offset_in_queue(), queue.max_offset_in_queue()

    def offset_outside_queue(self, topic: str, queue_id: int,
                             queue_offset: int) -> tuple[int, int] | None:
        """An ack's bounds check: None when ``get_min_offset_in_queue <= queue_offset <=
        get_max_offset_in_queue``, else those bounds (the refusal's remark prints them)."""
        bounds = self.get_offset_bounds_in_queue(topic, queue_id)
        return None if bounds[0] <= queue_offset <= bounds[1] else bounds

    def _store_timestamp_at(self, physical_offset: int, size: int) -> int:
        """Store time (ms) of the record at ``physical_offset``; -1 when it is gone."""
        mapped_file = self._commitlog().mapped_file_queue.find_mapped_file_by_offset(
            physical_offset)
        if mapped_file is None:
            return -1
        view = mapped_file.view(physical_offset - mapped_file.file_from_offset, size)
        if view is None:
            return -1
        try:
            return record_codec.read_store_timestamp(view, 0)
        except ValueError:
            return -1
        finally:
            view.release()
            mapped_file.release()

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int,
                                    boundary: str = "lower") -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP: queue offset by store time (see ConsumeQueue); 0 when
        the queue is unknown. ``boundary`` is ``"lower"`` or ``"upper"`` (case-insensitive)."""
        queue = self._find_queue(topic, queue_id)
        if queue is None:
            return 0
        return queue.offset_by_time(timestamp_ms, self._store_timestamp_at, boundary.lower())

    def get_message_store_timestamp(self, topic: str, queue_id: int, queue_offset: int) -> int:
        """Store time (ms) of the message at ``queue_offset``; -1 when there is none."""
        queue = self._find_queue(topic, queue_id)
        unit = queue.get(queue_offset) if queue is not None else None
        if unit is None:
            return -1
        return self._store_timestamp_at(unit[0], unit[1])

    def get_earliest_message_time(self, topic: str | None = None, queue_id: int = 0) -> int:
        """Store time (ms) of the first message of a queue, or of the whole CommitLog when
        ``topic`` is None; -1 when there is none."""
        if topic is None:
            selected = self.look_message_by_offset(max(self._commitlog().min_offset(), 0))
            if selected is None:
                return -1
            with selected:
                return record_codec.read_store_timestamp(selected.buffer, 0)
        queue = self._find_queue(topic, queue_id)
        if queue is None:
            return -1
        return self.get_message_store_timestamp(topic, queue_id, queue.min_offset_in_queue())
