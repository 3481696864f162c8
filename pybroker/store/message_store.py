# MessageStore: the one object a broker uses for a store directory (Java DefaultMessageStore).
"""The store facade: recovery, put, pull, query, offsets, cleanup and runtime figures.

Life cycle: :meth:`MessageStore.load` takes the lock file, looks for the abort file, maps every
file and recovers (normal without the abort file, abnormal with it: reference §4.6/§4.7), then
dispatches whatever the CommitLog holds beyond the consume queues; :meth:`MessageStore.start`
creates the abort file; :meth:`MessageStore.shutdown` flushes everything, writes the checkpoint,
deletes the abort file and releases the lock. ``with MessageStore(...) as store`` does all three.

In this single-process library dispatch is synchronous: every put is dispatched before it
returns (the broker moves dispatch to its dispatcher process). Reads hand out memoryview slices
of the mapped CommitLog that hold their file: call ``release()`` on every result.

Settings are duck typed: :class:`StoreSettings` (Java's defaults) or any object with the same
snake_case attributes, such as ``pybroker.config.StoreConfig``; a missing attribute takes the
StoreSettings default.
"""
import dataclasses
import logging
import os
import time
from collections.abc import Callable

import numpy as np
import psutil

from pybroker._fast import record as record_codec
from pybroker.protocol.constants import MessageSysFlag, SystemTopic
from pybroker.protocol.message_id import decode_offset_message_id, offset_message_id
from pybroker.store import layout, lock_file, paths, recovery
from pybroker.store.checkpoint import StoreCheckpoint
from pybroker.store.cleanup import StoreCleaner
from pybroker.store.commitlog import CommitLog, topic_queue_key
from pybroker.store.consume_queue import ConsumeQueueStore
from pybroker.store.dispatch import Dispatcher, parse_delay_levels
from pybroker.store.index_file import IndexService
from pybroker.store.mapped_file import MappedFile
from pybroker.store.status import GetStatus, PutStatus

__all__ = ["MessageStore", "StoreSettings", "PutResult", "GetResult", "SelectResult",
           "QueryResult"]

log = logging.getLogger(__name__)

# Java scans at most max(16000 bytes of units, maxMsgNums units) per pull.
_PULL_SCAN_UNITS_MIN = 16000 // layout.CQ_STORE_UNIT_SIZE
# IndexService caps a query at maxMsgsNumBatch (Java default 64) and retries 3 times.
_QUERY_MAX_NUM = 64
_QUERY_ATTEMPTS = 3
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_BORN_HOST_V6 = int(MessageSysFlag.BORNHOST_V6)
_STORE_HOST_V6 = int(MessageSysFlag.STOREHOSTADDRESS_V6)


@dataclasses.dataclass
class StoreSettings:
    """Store settings with Java's defaults (MessageStoreConfig), snake_case of the Java keys.

    Sizes are bytes, times ms unless the name says otherwise (``file_reserved_time`` hours,
    ratios percent).
    """
    store_path_root_dir: str = os.path.join(os.path.expanduser("~"), "pybroker", "store")
    store_path_commit_log: str | None = None
    mapped_file_size_commit_log: int = 1 << 30
    mapped_file_size_consume_queue: int = 300_000 * layout.CQ_STORE_UNIT_SIZE
    flush_disk_type: str = "ASYNC_FLUSH"
    broker_role: str = "ASYNC_MASTER"
    max_message_size: int = 4 << 20
    check_crc_on_recover: bool = True
    message_index_enable: bool = True
    message_index_safe: bool = False
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    file_reserved_time: int = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_warning_level_ratio: int = 90
    disk_space_clean_forcibly_ratio: int = 85
    clean_file_forcibly_enable: bool = True
    destroy_maped_file_interval_forcibly: int = 120_000
    redelete_hanged_file_interval: int = 120_000
    delete_commit_log_files_interval: int = 100
    delete_consume_queue_files_interval: int = 100
    max_transfer_bytes_on_message_in_memory: int = 256 << 10
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_disk: int = 64 << 10
    max_transfer_count_on_message_in_disk: int = 8
    access_message_in_memory_max_ratio: int = 40
    default_query_max_num: int = 32
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


_DEFAULTS = StoreSettings()


def _setting(settings, name: str):
    return getattr(settings, name, getattr(_DEFAULTS, name))


def _enum_text(value) -> str:
    return str(getattr(value, "value", value))


@dataclasses.dataclass(slots=True)
class PutResult:
    """Outcome of :meth:`MessageStore.put_messages`.

    ``message_id``: the offset message id of each record, joined by ``,`` for a batch.
    ``physical_offset``/``queue_offset``: of the first record; ``wrote_bytes`` of the run.
    """
    status: PutStatus
    physical_offset: int = 0
    queue_offset: int = 0
    count: int = 0
    wrote_bytes: int = 0
    message_id: str = ""
    store_timestamp: int = 0


class _Holds:
    """Views of mapped files plus the holds that keep those files mapped."""
    __slots__ = ("buffers", "_mapped_files")

    def __init__(self):
        self.buffers: list[memoryview] = []
        self._mapped_files: list[MappedFile] = []

    def _add(self, view: memoryview, mapped_file: MappedFile) -> None:
        self.buffers.append(view)
        self._mapped_files.append(mapped_file)

    @property
    def buffer_total_size(self) -> int:
        """Bytes in :attr:`buffers`."""
        return sum(view.nbytes for view in self.buffers)

    def release(self) -> None:
        """Release every view and hold; the buffers are unusable afterwards. Idempotent."""
        buffers, mapped_files = self.buffers, self._mapped_files
        self.buffers, self._mapped_files = [], []
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
                 "suggest_pull_from_slave")

    def __init__(self, status: GetStatus, next_begin_offset: int, min_offset: int,
                 max_offset: int):
        super().__init__()
        self.status = status
        self.next_begin_offset = next_begin_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.suggest_pull_from_slave = False

    @property
    def message_count(self) -> int:
        return len(self.buffers)

    def __repr__(self) -> str:
        return (f"GetResult({self.status.name}, next={self.next_begin_offset}, "
                f"min={self.min_offset}, max={self.max_offset}, count={self.message_count})")


class QueryResult(_Holds):
    """Outcome of :meth:`MessageStore.query_messages`: raw records (views) plus the newest index
    file's end timestamp (ms) and end physical offset, for the QUERY_MESSAGE response header."""
    __slots__ = ("index_last_update_timestamp", "index_last_update_phy_offset")

    def __init__(self):
        super().__init__()
        self.index_last_update_timestamp = 0
        self.index_last_update_phy_offset = 0


def human_readable_bytes(size_bytes: int) -> str:
    """Java MixAll.humanReadableByteCount(bytes, false): ``"12.3 GiB"``."""
    if size_bytes < 1024:
        return f"{size_bytes} B"
    exponent = min(int(np.log(size_bytes) / np.log(1024)), 6)
    return f"{size_bytes / 1024 ** exponent:.1f} {'KMGTPE'[exponent - 1]}iB"


class MessageStore:
    """One store directory: CommitLog, consume queues, index, checkpoint, abort and lock files.

    Parameters
    ----------
    settings : StoreSettings or duck-typed object, optional
        Store settings; keyword ``overrides`` replace single attributes (StoreSettings only).
    clock_ms : callable, optional
        Returns ms since the epoch; store timestamps and cleanup ages use it.
    disk_used_ratio : callable, optional
        ``disk_used_ratio(path)`` -> used fraction of that partition (cleanup thresholds).
    """

    def __init__(self, settings=None, *, clock_ms: Callable[[], int] | None = None,
                 disk_used_ratio: Callable[[str], float] | None = None, **overrides):
        if settings is None:
            settings = StoreSettings(**overrides)
        elif overrides:
            settings = dataclasses.replace(settings, **overrides)
        self.settings = settings
        self.clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._disk_used_ratio = disk_used_ratio
        self.store_root = _setting(settings, "store_path_root_dir")
        self.commitlog_dir = _setting(settings, "store_path_commit_log") or \
            paths.commitlog_dir(self.store_root)
        self.delay_levels_ms = parse_delay_levels(_setting(settings, "message_delay_level"))
        self.sync_flush = _enum_text(_setting(settings, "flush_disk_type")) == "SYNC_FLUSH"
        self.is_slave = _enum_text(_setting(settings, "broker_role")) == "SLAVE"
        ratio = _setting(settings, "access_message_in_memory_max_ratio")
        self._memory_bytes = psutil.virtual_memory().total * ratio // 100
        self._lock = lock_file.StoreLock(self.store_root)
        self.commitlog: CommitLog | None = None
        self.consume_queue_store: ConsumeQueueStore | None = None
        self.index_service: IndexService | None = None
        self.checkpoint: StoreCheckpoint | None = None
        self.dispatcher: Dispatcher | None = None
        self.cleaner: StoreCleaner | None = None
        self.recovery_result: recovery.RecoveryResult | None = None
        self.loaded = self.running = False
        self._last_put_store_timestamp = 0
        self.boot_timestamp = self.clock_ms()
        self._stats = {"put_times_total": 0, "put_size_total": 0, "put_failed_times": 0,
                       "get_times_found": 0, "get_times_miss": 0, "get_transferred_count": 0}

    # --- life cycle ---------------------------------------------------------------------------
    @property
    def last_recovery_abnormal(self) -> bool:
        """True when the last load() found the abort file and took the abnormal path."""
        return self.recovery_result is not None and self.recovery_result.abnormal

    def load(self) -> bool:
        """Lock, map and recover the store, then dispatch the CommitLog's undispatched tail.

        Returns False when a file has the wrong size (nothing is then usable). Raises
        lock_file.StoreLockedError when another broker holds the store.
        """
        self._lock.acquire()
        abnormal = lock_file.abort_file_exists(self.store_root)
        settings = self.settings
        self.commitlog = CommitLog(self.commitlog_dir,
                                   _setting(settings, "mapped_file_size_commit_log"))
        self.consume_queue_store = ConsumeQueueStore(
            self.store_root, _setting(settings, "mapped_file_size_consume_queue"))
        self.checkpoint = StoreCheckpoint(paths.checkpoint_path(self.store_root))
        if _setting(settings, "message_index_enable"):
            self.index_service = IndexService(paths.index_dir(self.store_root),
                                              _setting(settings, "max_hash_slot_num"),
                                              _setting(settings, "max_index_num"))
        if not (self.commitlog.load() and self.consume_queue_store.load()
                and (self.index_service is None or self.index_service.load())):
            log.error("store %s: a file has the wrong size; not loaded", self.store_root)
            return False
        self._recover(abnormal)
        self.cleaner = StoreCleaner(self.commitlog, self.consume_queue_store, self.index_service,
                                    settings, clock_ms=self.clock_ms,
                                    disk_used_ratio=self._disk_used_ratio)
        self.loaded = True
        return True

    def _recover(self, abnormal: bool) -> None:
        """Recovery rules of §4.6/§4.7, then dispatch to the end of valid data."""
        checkpoint = self.checkpoint
        if abnormal and self.index_service is not None:
            self.index_service.delete_newer_than(checkpoint.index_msg_timestamp)
        self.consume_queue_store.recover()
        result = recovery.recover(self.commitlog, abnormal, checkpoint, None,
                                  _setting(self.settings, "check_crc_on_recover"),
                                  _setting(self.settings, "message_index_safe"))
        self.recovery_result = result
        (log.warning if abnormal else log.info)(
            "store %s: %s recovery, CommitLog valid to %d", self.store_root,
            "abnormal" if abnormal else "normal", result.valid_end_offset)
        # Units pointing at records recovery cut off would serve other bytes later.
        self.consume_queue_store.truncate_dirty(result.valid_end_offset)
        reput_from = self.consume_queue_store.max_physical_offset()
        if result.dispatch_from_offset is not None:
            reput_from = min(reput_from, result.dispatch_from_offset)
        if self.index_service is not None and not self.index_service.index_files:
            reput_from = 0       # index files lost: rebuild them from the oldest record
        commitlog_min = self.commitlog.min_offset()
        reput_from = max(reput_from, commitlog_min, 0)
        self.dispatcher = Dispatcher(self.commitlog, self.consume_queue_store, self.index_service,
                                     self.delay_levels_ms, reput_from)
        result.dispatched_count = self.dispatcher.dispatch_until(result.valid_end_offset)
        if self.dispatcher.reput_from_offset < result.valid_end_offset:
            log.error("store %s: dispatch stopped at %d before the valid end %d",
                      self.store_root, self.dispatcher.reput_from_offset,
                      result.valid_end_offset)
        self.commitlog.set_topic_queue_table(
            {topic_queue_key(queue.topic, queue.queue_id): queue.max_offset_in_queue()
             for queue in self.consume_queue_store.queues()})
        if commitlog_min > 0:
            self.consume_queue_store.correct_min_offset(commitlog_min)
        self._last_put_store_timestamp = checkpoint.physic_msg_timestamp

    def start(self) -> None:
        """Mark the store open (abort file); load() first when not loaded yet."""
        if not self.loaded and not self.load():
            raise RuntimeError(f"store {self.store_root} could not be loaded")
        lock_file.create_abort_file(self.store_root)
        self.running = True

    def shutdown(self) -> None:
        """Flush everything, write the checkpoint, delete the abort file, release the lock."""
        if self.loaded:
            self.running = False
            self.flush()
            self.commitlog.shutdown(0)
            self.consume_queue_store.close()
            if self.index_service is not None:
                self.index_service.close()
            self.checkpoint.shutdown()
            lock_file.delete_abort_file(self.store_root)
            self.loaded = False
        self._lock.release()

    def __enter__(self) -> "MessageStore":
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.shutdown()

    def flush(self) -> None:
        """msync CommitLog, consume queues and index, then the checkpoint (DurabilityError)."""
        self.commitlog.flush()
        self.consume_queue_store.flush()
        checkpoint = self.checkpoint
        if self._last_put_store_timestamp:
            checkpoint.physic_msg_timestamp = self._last_put_store_timestamp
        if self.dispatcher.last_store_timestamp:
            checkpoint.logics_msg_timestamp = self.dispatcher.last_store_timestamp
        if self.index_service is not None:
            index_timestamp = self.index_service.flush()
            if index_timestamp:
                checkpoint.index_msg_timestamp = index_timestamp
        checkpoint.flush()

    # --- put ----------------------------------------------------------------------------------
    def put_messages(self, records_buffer, topic: str, queue_id: int, count: int, sys_flag: int,
                     wait_store_ok: bool = True) -> PutResult:
        """Append ``count`` encoded records (one topic/queue, body CRC included) and dispatch them.

        Store time, queue and physical offsets are patched at append. Under SYNC_FLUSH with
        ``wait_store_ok`` the CommitLog is msynced before returning (a failure raises
        DurabilityError: the process must stop). Refused with SERVICE_NOT_AVAILABLE when the
        store is not running, is a slave, or the disk is above the warning ratio.
        """
        if not self.running or self.is_slave or (self.cleaner is not None
                                                 and self.cleaner.disk_full):
            self._stats["put_failed_times"] += 1
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE)
        if len(topic.encode()) > layout.TOPIC_MAX_BYTES_V1:
            self._stats["put_failed_times"] += 1
            return PutResult(PutStatus.MESSAGE_ILLEGAL)
        store_timestamp = self.clock_ms()
        appended = self.commitlog.append_encoded(records_buffer, topic, queue_id, count,
                                                 sys_flag, store_timestamp)
        if appended.status is not PutStatus.PUT_OK:
            self._stats["put_failed_times"] += 1
            return PutResult(appended.status)
        self._last_put_store_timestamp = store_timestamp
        if self.sync_flush and wait_store_ok:
            self.commitlog.flush()
        self.dispatcher.dispatch_until(self.commitlog.max_offset())
        stats = self._stats
        stats["put_times_total"] += appended.count
        stats["put_size_total"] += appended.wrote_bytes
        return PutResult(PutStatus.PUT_OK, appended.physical_offset, appended.queue_offset,
                         appended.count, appended.wrote_bytes,
                         _offset_message_ids(records_buffer, appended.physical_offset),
                         store_timestamp)

    # --- pull ---------------------------------------------------------------------------------
    def get_messages(self, group: str, topic: str, queue_id: int, queue_offset: int,
                     max_count: int, max_bytes: int | None = None,
                     tag_codes: set[int] | frozenset[int] | None = None) -> GetResult:
        """Read up to ``max_count`` records of a queue from ``queue_offset`` (Java getMessage).

        Status and ``next_begin_offset`` follow reference §2.3; the reply is capped by
        maxTransferBytes/CountOnMessageInMemory (InDisk for records further than
        accessMessageInMemoryMaxRatio of RAM behind the CommitLog end) and ``max_bytes``.
        ``tag_codes``: match units whose ``(int)`` tags code is in the set; None matches all.
        ``group`` is accepted for the broker's interface and not used by the store.
        """
        queue = self.consume_queue_store.find(topic, queue_id)
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
            # Reference §2.3 / 5.x: continue at max (4.9.x sent 0 when the min was 0).
            result = GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, max_offset, min_offset,
                               max_offset)
        else:
            result = self._read_queue(queue, queue_offset, max_count, max_bytes, tag_codes,
                                      min_offset, max_offset)
        stats = self._stats
        if result.status is GetStatus.FOUND:
            stats["get_times_found"] += 1
            stats["get_transferred_count"] += result.message_count
        else:
            stats["get_times_miss"] += 1
        return result

    def _read_queue(self, queue, queue_offset: int, max_count: int, max_bytes: int | None,
                    tag_codes, min_offset: int, max_offset: int) -> GetResult:
        scan_units = max(_PULL_SCAN_UNITS_MIN, max_count)
        with queue.read_units(queue_offset, scan_units) as units_view:
            units = units_view.units
            # Small native copies; the map is released when the with-block ends.
            physical_offsets = units["phy"].astype(np.int64)
            sizes = units["size"].astype(np.int64)
            tags_codes = units["tags"].astype(np.int64) if tag_codes is not None else None
        if len(physical_offsets) == 0:
            # The consume-queue file for this offset is gone: continue in the next file.
            units_per_file = queue.mapped_file_size // layout.CQ_STORE_UNIT_SIZE
            next_file = queue_offset + units_per_file - queue_offset % units_per_file
            return GetResult(GetStatus.OFFSET_FOUND_NULL, next_file, min_offset, max_offset)
        if tags_codes is None:
            matched = np.arange(len(physical_offsets))
        else:
            codes = np.array([c for c in tag_codes if _INT32_MIN <= c <= _INT32_MAX], np.int32)
            matched = np.flatnonzero(np.isin(tags_codes.astype(np.int32), codes))
        result = GetResult(GetStatus.NO_MATCHED_MESSAGE, queue_offset, min_offset, max_offset)
        scanned = self._collect(result, physical_offsets, sizes, matched, max_count, max_bytes)
        result.next_begin_offset = queue_offset + scanned
        last_visited = int(physical_offsets[min(scanned, len(physical_offsets) - 1)])
        result.suggest_pull_from_slave = \
            self.commitlog.max_offset() - last_visited > self._memory_bytes
        return result

    def _batch_limits(self, physical_offsets):
        """Per unit (bytes limit, count limit): in-memory or in-disk transfer caps."""
        settings = self.settings
        in_disk = self.commitlog.max_offset() - physical_offsets > self._memory_bytes
        limit_bytes = np.where(in_disk,
                               _setting(settings, "max_transfer_bytes_on_message_in_disk"),
                               _setting(settings, "max_transfer_bytes_on_message_in_memory"))
        limit_count = np.where(in_disk,
                               _setting(settings, "max_transfer_count_on_message_in_disk"),
                               _setting(settings, "max_transfer_count_on_message_in_memory"))
        return limit_bytes, limit_count

    def _collect(self, result: GetResult, physical_offsets, sizes, matched, max_count: int,
                 max_bytes: int | None) -> int:
        """Java's pull loop over units; returns how many units were scanned (i / 20 in Java).

        Runs of units the tag filter rejects are handled with numpy: the loop in Python is per
        matched unit. A unit ends the batch (isTheBatchFull) before it is filtered or read.
        """
        unit_count = len(physical_offsets)
        limit_bytes, limit_count = self._batch_limits(physical_offsets)
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
            if not self._add_record(result, physical_offset, size):
                if not taken:
                    result.status = GetStatus.MESSAGE_WAS_REMOVING
                # Skip every unit of the CommitLog file that is gone.
                file_size = self.commitlog.file_size
                next_file = physical_offset + file_size - physical_offset % file_size
                position = max(match + 1, int(np.searchsorted(physical_offsets, next_file)))
                continue
            taken += 1
            taken_bytes += size
            result.status = GetStatus.FOUND
            position = match + 1

    def _add_record(self, holds: _Holds, physical_offset: int, size: int) -> bool:
        """Append a view of ``size`` bytes at ``physical_offset`` to ``holds``; False if gone."""
        mapped_file = self.commitlog.mapped_file_queue.find_mapped_file_by_offset(
            physical_offset)
        if mapped_file is None:
            return False
        view = mapped_file.view(physical_offset - mapped_file.file_from_offset, size)
        if view is None:
            return False
        holds._add(view, mapped_file)
        return True

    # --- single records, query by key, replication -------------------------------------------
    def look_message_by_offset(self, physical_offset: int) -> SelectResult | None:
        """The whole raw record at ``physical_offset`` (VIEW_MESSAGE_BY_ID), or None."""
        mapped_file = self.commitlog.mapped_file_queue.find_mapped_file_by_offset(
            physical_offset)
        if mapped_file is None:
            return None
        position = physical_offset - mapped_file.file_from_offset
        view = mapped_file.view(position, mapped_file.wrote_position - position)
        if view is None:
            return None
        try:
            status, total_size = record_codec.check(view, 0, len(view), False)
            record_view = view[:total_size] if status == record_codec.RECORD_OK else None
        finally:
            view.release()
        if record_view is None:
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
        if self.index_service is None:
            return result
        max_num = min(max_num, _QUERY_MAX_NUM)
        last_query_ms = end_ms
        for _ in range(_QUERY_ATTEMPTS):
            phy_offsets, last_timestamp, last_phy_offset = self.index_service.query(
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
        view = self.commitlog.read_raw(physical_offset, self.commitlog.file_size)
        if view is None:
            return None
        mapped_file = self.commitlog.mapped_file_queue.find_mapped_file_by_offset(
            physical_offset)
        return SelectResult(physical_offset, view, mapped_file)

    def append_to_commit_log(self, physical_offset: int, data) -> bool:
        """Slave: append replicated bytes at ``physical_offset`` and dispatch whole records.

        False (nothing written) unless ``physical_offset`` is the CommitLog's max offset.
        """
        if not self.running or not self.commitlog.append_raw(physical_offset, data):
            return False
        self.dispatcher.dispatch_until(self.commitlog.max_offset())
        return True

    # --- queue offsets and times ---------------------------------------------------------------
    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """Next queue offset to be written; 0 for an unknown queue."""
        queue = self.consume_queue_store.find(topic, queue_id)
        return queue.max_offset_in_queue() if queue is not None else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """First valid queue offset; -1 for an unknown queue (Java)."""
        queue = self.consume_queue_store.find(topic, queue_id)
        return queue.min_offset_in_queue() if queue is not None else -1

    def _store_timestamp_at(self, physical_offset: int, size: int) -> int:
        """Store time (ms) of the record at ``physical_offset``; -1 when it is gone."""
        mapped_file = self.commitlog.mapped_file_queue.find_mapped_file_by_offset(
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
        queue = self.consume_queue_store.find(topic, queue_id)
        if queue is None:
            return 0
        return queue.offset_by_time(timestamp_ms, self._store_timestamp_at, boundary.lower())

    def get_message_store_timestamp(self, topic: str, queue_id: int, queue_offset: int) -> int:
        """Store time (ms) of the message at ``queue_offset``; -1 when there is none."""
        queue = self.consume_queue_store.find(topic, queue_id)
        unit = queue.get(queue_offset) if queue is not None else None
        if unit is None:
            return -1
        return self._store_timestamp_at(unit[0], unit[1])

    def get_earliest_message_time(self, topic: str | None = None, queue_id: int = 0) -> int:
        """Store time (ms) of the first message of a queue, or of the whole CommitLog when
        ``topic`` is None; -1 when there is none."""
        if topic is None:
            selected = self.look_message_by_offset(max(self.commitlog.min_offset(), 0))
            if selected is None:
                return -1
            with selected:
                return record_codec.read_store_timestamp(selected.buffer, 0)
        queue = self.consume_queue_store.find(topic, queue_id)
        if queue is None:
            return -1
        return self.get_message_store_timestamp(topic, queue_id, queue.min_offset_in_queue())

    # --- positions -----------------------------------------------------------------------------
    @property
    def max_physical_offset(self) -> int:
        """CommitLog offset just past the last written byte."""
        return self.commitlog.max_offset()

    @property
    def min_physical_offset(self) -> int:
        """CommitLog offset of the oldest byte still stored (-1 when empty)."""
        return self.commitlog.min_offset()

    @property
    def dispatch_behind_bytes(self) -> int:
        """CommitLog bytes not yet in the consume queues and index."""
        return self.dispatcher.dispatch_behind_bytes()

    # --- deletion and cleanup --------------------------------------------------------------------
    def delete_topics(self, topics) -> int:
        """Destroy the consume queues of ``topics`` (the CommitLog keeps the records); returns
        how many queues went."""
        deleted = 0
        for topic in topics:
            queues = self.consume_queue_store.queue_table.get(topic, {})
            for queue_id in list(queues):
                self.commitlog.remove_topic_queue(topic, queue_id)
                deleted += 1
            self.consume_queue_store.delete_topic(topic)
        self.dispatcher.forget_queues()
        return deleted

    def clean_expired_consume_queue(self) -> int:
        """Destroy queues whose every unit points below the CommitLog min offset (Java
        cleanExpiredConsumerQueue; the schedule topic is kept); returns how many."""
        commitlog_min = self.commitlog.min_offset()
        destroyed = 0
        table = self.consume_queue_store.queue_table
        for topic in list(table):
            if topic == SystemTopic.SCHEDULE:
                continue
            for queue_id, queue in list(table[topic].items()):
                last_end = queue.last_dispatched_phy_offset
                if last_end == 0:
                    continue   # just created
                if last_end <= commitlog_min:
                    log.info("destroying expired consume queue %s-%d", topic, queue_id)
                    self.commitlog.remove_topic_queue(topic, queue_id)
                    queue.destroy()
                    del table[topic][queue_id]
                    destroyed += 1
            if not table[topic]:
                self.consume_queue_store.delete_topic(topic)
        self.dispatcher.forget_queues()
        return destroyed

    def clean_expired_files(self):
        """One cleanup pass (CommitLog, consume queues, index); returns a CleanupReport."""
        return self.cleaner.run_once()

    # --- runtime figures ---------------------------------------------------------------------
    def runtime_info(self) -> dict[str, str]:
        """Store figures for GET_BROKER_RUNTIME_INFO, Java's key names, values as strings."""
        stats = self._stats
        try:
            disk = os.statvfs(self.commitlog_dir)
            total, free = disk.f_blocks * disk.f_frsize, disk.f_bfree * disk.f_frsize
            capacity = f"Total : {human_readable_bytes(total)}, " \
                       f"Free : {human_readable_bytes(free)}."
            disk_ratio = f"{(total - free) / total:.6f}" if total else "-1"
        except OSError:
            capacity, disk_ratio = "Total : 0 B, Free : 0 B.", "-1"
        put_total = stats["put_times_total"]
        return {
            "bootTimestamp": str(self.boot_timestamp),
            "putMessageTimesTotal": str(put_total),
            "putMessageSizeTotal": str(stats["put_size_total"]),
            "putMessageAverageSize": str(stats["put_size_total"] / put_total if put_total
                                         else 0.0),
            "putMessageFailedTimes": str(stats["put_failed_times"]),
            "getMessageTimesTotalFound": str(stats["get_times_found"]),
            "getMessageTimesTotalMiss": str(stats["get_times_miss"]),
            "getMessageTransferedMsgCount": str(stats["get_transferred_count"]),
            "dispatchBehindBytes": str(self.dispatch_behind_bytes),
            "commitLogMinOffset": str(self.min_physical_offset),
            "commitLogMaxOffset": str(self.max_physical_offset),
            "earliestMessageTimeStamp": str(self.get_earliest_message_time()),
            "commitLogDirCapacity": capacity,
            "commitLogDiskRatio": disk_ratio,
        }


def _offset_message_ids(records_buffer, first_physical_offset: int) -> str:
    """Offset message ids of the records in ``records_buffer`` joined by ``,``.

    The store host is read from each record (the broker's announced address, encoded by the
    remoting worker); the physical offset is the first one plus the sizes before it.
    """
    view = memoryview(records_buffer).cast("B")
    try:
        ids = []
        position, end = 0, len(view)
        while position < end:
            total_size = int.from_bytes(view[position:position + 4], "big")
            flag_position = position + layout.RECORD_SYS_FLAG_POSITION
            sys_flag = int.from_bytes(view[flag_position:flag_position + 4], "big")
            born_host_bytes = layout.IPV6_HOST_BYTES if sys_flag & _BORN_HOST_V6 else \
                layout.IPV4_HOST_BYTES
            # BORNHOST, then the 8-byte STORETIMESTAMP, then STOREHOSTADDRESS.
            host_position = position + layout.RECORD_BORN_HOST_POSITION + born_host_bytes + 8
            address_bytes = 16 if sys_flag & _STORE_HOST_V6 else 4
            store_ip = bytes(view[host_position:host_position + address_bytes])
            store_port = int.from_bytes(
                view[host_position + address_bytes:host_position + address_bytes + 4], "big")
            ids.append(offset_message_id(store_ip, store_port,
                                         first_physical_offset + position))
            position += total_size
        return ",".join(ids)
    finally:
        view.release()
