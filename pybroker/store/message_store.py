# MessageStore: the one object a broker uses for a store directory (Java DefaultMessageStore).
"""The store facade: recovery, put, pull, query, offsets, cleanup and runtime figures.

Life cycle: :meth:`MessageStore.load` takes the lock file, looks for the abort file, maps every
file and recovers (normal without the abort file, abnormal with it: protocol.md §4.6/§4.7), then
dispatches whatever the CommitLog holds beyond the consume queues; :meth:`MessageStore.start`
creates the abort file; :meth:`MessageStore.shutdown` flushes everything, writes the checkpoint,
deletes the abort file and releases the lock. ``with MessageStore(...) as store`` does all three.

In this single-process library dispatch is synchronous: every put is dispatched before it
returns (the broker moves dispatch to its dispatcher process). Reads hand out memoryview slices
of the mapped CommitLog that hold their file: call ``release()`` on every result.

Settings are a :class:`pybroker.store.settings.StoreConfig` (Java's names and defaults).
"""
import dataclasses
import logging
import os
from collections.abc import Callable

import numpy as np
import psutil

from pybroker import clock
from pybroker.protocol.constants import RETRY_GROUP_TOPIC_PREFIX, MessageSysFlag, SystemTopic
from pybroker.protocol.message_id import offset_message_id
from pybroker.store import layout, lock_file, paths, recovery, repair
from pybroker.store.checkpoint import StoreCheckpoint
from pybroker.store.cleanup import StoreCleaner
from pybroker.store.commitlog import CommitLog, topic_queue_key
from pybroker.store.consume_queue import ConsumeQueueStore
from pybroker.store.damaged_records import DamagedRecords
from pybroker.store.dispatch import Dispatcher
from pybroker.store.index_file import IndexService
from pybroker.store.read_api import GetResult, QueryResult, SelectResult, StoreReads
from pybroker.store.scrub import ScrubState
from pybroker.store.settings import StoreConfig
from pybroker.store.status import PutStatus

__all__ = ["MessageStore", "PutResult", "GetResult", "SelectResult",
           "QueryResult"]

log = logging.getLogger(__name__)

_BORN_HOST_V6 = int(MessageSysFlag.BORNHOST_V6)
_STORE_HOST_V6 = int(MessageSysFlag.STOREHOSTADDRESS_V6)


@dataclasses.dataclass(slots=True)
class PutResult:
    """Outcome of :meth:`MessageStore.put_messages`.

    ``message_id``: the offset message id of each record, joined by ``,`` for a batch.
    ``physical_offset``/``queue_offset``: of the first record; ``wrote_bytes`` of the run.
    ``waited_ms``/``queue_size``: how long a put refused by fast failure waited, and how many
    were waiting (the TIMEOUT_CLEAN_QUEUE remark).
    """
    status: PutStatus
    physical_offset: int = 0
    queue_offset: int = 0
    count: int = 0
    wrote_bytes: int = 0
    message_id: str = ""
    store_timestamp: int = 0
    waited_ms: int = 0
    queue_size: int = 0



def human_readable_bytes(size_bytes: int) -> str:
    """Java MixAll.humanReadableByteCount(bytes, false): ``"12.3 GiB"``."""
    if size_bytes < 1024:
        return f"{size_bytes} B"
    exponent = min(int(np.log(size_bytes) / np.log(1024)), 6)
    return f"{size_bytes / 1024 ** exponent:.1f} {'KMGTPE'[exponent - 1]}iB"


class MessageStore(StoreReads):
    """One store directory: CommitLog, consume queues, index, checkpoint, abort and lock files.

    Parameters
    ----------
    settings : StoreConfig, optional
        Store settings (default: Java's); keyword ``overrides`` replace single settings.
    clock_ms : callable, optional
        Returns ms since the epoch; store timestamps and cleanup ages use it.
    disk_used_ratio : callable, optional
        ``disk_used_ratio(path)`` -> used fraction of that partition (cleanup thresholds).
    """

    def __init__(self, settings: StoreConfig | None = None, *,
                 clock_ms: Callable[[], int] | None = None,
                 disk_used_ratio: Callable[[str], float] | None = None,
                 lock: lock_file.StoreLock | None = None, **overrides):
        if settings is None:
            settings = StoreConfig(**overrides)
        elif overrides:
            settings = dataclasses.replace(settings, **overrides)
        self._settings = settings
        self.clock_ms = clock_ms or clock.now_ms
        self._disk_used_ratio = disk_used_ratio
        self.store_root = settings.store_path_root_dir
        self.commitlog_dir = settings.commitlog_dir
        self.delay_levels_ms = settings.delay_levels_ms
        self.sync_flush = settings.sync_flush
        self.is_slave = settings.is_slave
        ratio = settings.access_message_in_memory_max_ratio
        self._memory_bytes = psutil.virtual_memory().total * ratio // 100
        # A lock passed in is the caller's (the supervisor keeps it across generations).
        self._own_lock = lock is None
        self._lock = lock if lock is not None else lock_file.StoreLock(self.store_root)
        # Set by load(); using the store before load() is an AttributeError.
        self.commitlog: CommitLog
        self.consume_queue_store: ConsumeQueueStore
        self.checkpoint: StoreCheckpoint
        self.dispatcher: Dispatcher
        self.index_service: IndexService | None = None
        self.cleaner: StoreCleaner | None = None
        self.recovery_result: recovery.RecoveryResult | None = None
        self._extended_files: list[int] = []      # CommitLog files recovery must walk
        self.loaded = self.running = False
        self._last_put_store_timestamp = 0
        self.boot_timestamp = self.clock_ms()
        self._stats = {"put_times_total": 0, "put_size_total": 0, "put_failed_times": 0,
                       "get_times_found": 0, "get_times_miss": 0, "get_transferred_count": 0}

    @property
    def settings(self) -> StoreConfig:
        """The store settings. Replacing them (tests) takes effect at the next pull and
        cleanup pass; paths and file sizes are fixed at construction."""
        return self._settings

    @settings.setter
    def settings(self, settings: StoreConfig) -> None:
        self._settings = settings
        if self.cleaner is not None:
            self.cleaner.settings = settings

    # --- life cycle ---------------------------------------------------------------------------
    @property
    def last_recovery_abnormal(self) -> bool:
        """True when the last load() found the abort file and took the abnormal path."""
        return self.recovery_result is not None and self.recovery_result.abnormal

    def load(self) -> bool:
        """Lock, map and recover the store, then dispatch the CommitLog's undispatched tail.

        The CommitLog is recovered first: when recovery refuses (StoreCorruptError), no
        derived file has been touched yet, and this store releases what it opened. Returns
        False when an IndexFile or queue file cannot be loaded (nothing is then usable).
        Raises lock_file.StoreLockedError when another broker holds the store.
        """
        if self._own_lock:
            self._lock.acquire()
        try:
            return self._load()
        except BaseException:
            self._abandon()
            raise

    def _load(self) -> bool:
        abnormal = lock_file.abort_file_exists(self.store_root)
        settings = self.settings
        # A CommitLog file of the wrong size is damage (StoreCorruptError), never "not loaded".
        self._extended_files = recovery.check_file_sizes(
            self.commitlog_dir, settings.mapped_file_size_commit_log,
            settings.skip_damaged_records_on_recover)
        self.commitlog = CommitLog(self.commitlog_dir,
                                   settings.mapped_file_size_commit_log)
        # Derived files are checked and rebuilt when damaged (pybroker/store/repair.py).
        # The wall clock, not the injected one: "a time in the future" is a real-world test.
        self.checkpoint = repair.open_checkpoint(paths.checkpoint_path(self.store_root),
                                                 clock.now_ms())
        if not self.commitlog.load():
            log.error("store %s: a CommitLog file has the wrong size; not loaded",
                      self.store_root)
            return False
        damaged, scrub_state = self._recover_commitlog(abnormal)
        self.consume_queue_store = ConsumeQueueStore(
            self.store_root, settings.mapped_file_size_consume_queue)
        if settings.message_index_enable:
            self.index_service = IndexService(paths.index_dir(self.store_root),
                                              settings.max_hash_slot_num,
                                              settings.max_index_num)
        # A queue file missing is derived damage too: the queue is rebuilt (store/repair.py).
        if not (self.consume_queue_store.load(repair=True,
                                              from_zero=self.commitlog.min_offset() <= 0)
                and (self.index_service is None or self.index_service.load(repair=True))):
            log.error("store %s: a file has the wrong size; not loaded", self.store_root)
            return False
        self._recover_derived(abnormal, damaged, scrub_state)
        self.cleaner = StoreCleaner(self.commitlog, self.consume_queue_store, self.index_service,
                                    settings, clock_ms=self.clock_ms,
                                    disk_used_ratio=self._disk_used_ratio)
        self.loaded = True
        return True

    def _abandon(self) -> None:
        """After a refused load: unmap what was opened, give the lock back (own lock)."""
        commitlog = getattr(self, "commitlog", None)
        if commitlog is not None:
            commitlog.shutdown(0)
        checkpoint = getattr(self, "checkpoint", None)
        if checkpoint is not None:
            checkpoint.close()
        queues = getattr(self, "consume_queue_store", None)
        if queues is not None:
            queues.close()
        if self.index_service is not None:
            self.index_service.close()
        if self._own_lock:
            self._lock.release()

    def _recover_commitlog(self, abnormal: bool) -> tuple[DamagedRecords, ScrubState]:
        """CommitLog recovery (protocol.md §4.6/§4.7, store/recovery.py), before any derived
        file is read; the damaged ranges known and the scrubber's state."""
        settings = self.settings
        # What the scrubber found while the broker ran (store/scrub.py): CommitLog damage is
        # checked again like damage recovery finds itself; queues are rebuilt afterwards.
        scrub_state = ScrubState.load(self.store_root)
        damaged = DamagedRecords.load(self.store_root)
        result = recovery.recover(self.commitlog, abnormal, self.checkpoint, None,
                                  settings.check_crc_on_recover, settings.message_index_safe,
                                  damaged, settings.skip_damaged_records_on_recover,
                                  suspects=scrub_state.commitlog_suspects(),
                                  walk_files=self._extended_files)
        self.recovery_result = result
        self._keep_damaged_records(damaged, result.skipped_spans)
        (log.warning if abnormal else log.info)(
            "store %s: %s recovery, CommitLog valid to %d", self.store_root,
            "abnormal" if abnormal else "normal", result.valid_end_offset)
        return damaged, scrub_state

    def _recover_derived(self, abnormal: bool, damaged: DamagedRecords,
                         scrub_state: ScrubState) -> None:
        """Consume queues and index brought in line with the recovered CommitLog, then
        dispatch to the end of valid data."""
        checkpoint, result = self.checkpoint, self.recovery_result
        assert result is not None            # set by _recover_commitlog
        if abnormal and self.index_service is not None:
            self.index_service.delete_newer_than(checkpoint.index_msg_timestamp)
        for topic, queue_id in scrub_state.damaged_queues():
            self.consume_queue_store.rebuild(topic, queue_id,
                                             "units the scrubber found damaged")
        if scrub_state.findings:
            scrub_state.settle(damaged, max(self.commitlog.min_offset(), 0),
                               lambda offset: not recovery.record_is_valid(self.commitlog,
                                                                           offset))
            scrub_state.save(self.store_root)
        self.consume_queue_store.recover()
        # Units pointing at records recovery cut off would serve other bytes later.
        cut = self.consume_queue_store.truncate_dirty(result.valid_end_offset)
        reput_from = self.consume_queue_store.max_physical_offset()
        if cut is not None:
            reput_from = min(reput_from, cut)
        if result.dispatch_from_offset is not None:
            reput_from = min(reput_from, result.dispatch_from_offset)
        # The scanned window is dispatched again after a clean stop too: a queue whose last
        # units were lost (zeroed, its last file removed: the queue alone cannot tell) gets
        # them back. Units and index entries already there are skipped, so it costs one C
        # pass over what the recovery scan just read (store/repair.py).
        reput_from = min(reput_from, result.scan_from_offset)
        cut_tails = repair.drop_damaged_tails(self.consume_queue_store, self.commitlog,
                                              result.valid_end_offset)
        if cut_tails is not None:
            reput_from = min(reput_from, cut_tails)
        file_ends = repair.queues_ending_at_a_file_end(self.consume_queue_store,
                                                       result.valid_end_offset)
        if file_ends is not None:
            reput_from = min(reput_from, file_ends)
        if self.consume_queue_store.rebuilt_queues:
            reput_from = 0       # a queue was deleted: rebuild it from the oldest record
        if self.index_service is not None and not self.index_service.index_files:
            reput_from = 0       # index files lost: rebuild them from the oldest record
        commitlog_min = self.commitlog.min_offset()
        reput_from = max(reput_from, commitlog_min, 0)
        self.dispatcher = Dispatcher(self.commitlog, self.consume_queue_store, self.index_service,
                                     self.delay_levels_ms, reput_from,
                                     damaged_records=damaged)
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

    def _keep_damaged_records(self, damaged: DamagedRecords, skipped) -> None:
        """Record newly skipped ranges (and forget expired ones) in damagedRecords.json."""
        changed = any([damaged.add(start, end) for start, end in skipped])
        changed |= damaged.forget_below(max(self.commitlog.min_offset(), 0))
        if changed:
            damaged.save()
        if damaged:
            log.warning("store %s: %d damaged CommitLog range(s) skipped (%s); their records "
                        "are never served", self.store_root, len(damaged), damaged.spans)
        self.damaged_records = damaged

    def start(self) -> None:
        """Mark the store open (abort file); load() first when not loaded yet."""
        if not self.loaded and not self.load():
            raise RuntimeError(f"store {self.store_root} could not be loaded")
        lock_file.create_abort_file(self.store_root)
        self.running = True

    def shutdown(self) -> None:
        """Flush everything, write the checkpoint, delete the abort file, release the lock."""
        if self.loaded:
            self._close_files()
            lock_file.delete_abort_file(self.store_root)
        if self._own_lock:
            self._lock.release()

    def hand_over(self) -> None:
        """Flush and close every file but keep the abort file (and the caller's lock): the
        recovered store now belongs to the worker processes, and a crash of any of them must
        lead to abnormal recovery."""
        if self.loaded:
            self._close_files()

    def _close_files(self) -> None:
        self.running = False
        self.flush()
        self.commitlog.shutdown(0)
        self.consume_queue_store.close()
        if self.index_service is not None:
            self.index_service.close()
        self.checkpoint.shutdown()
        self.loaded = False

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
        checkpoint.commitlog_flushed_offset = self.commitlog.flushed_where
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
        if not layout.topic_storable(len(topic.encode()),
                                     topic.startswith(RETRY_GROUP_TOPIC_PREFIX),
                                     self._settings.auto_message_version_on_topic_len):
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

    def append_to_commit_log(self, physical_offset: int, data) -> bool:
        """Slave: append replicated bytes at ``physical_offset`` and dispatch whole records.

        False (nothing written) unless ``physical_offset`` is the CommitLog's max offset.
        """
        if not self.running or not self.commitlog.append_raw(physical_offset, data):
            return False
        self.dispatcher.dispatch_until(self.commitlog.max_offset())
        return True

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
