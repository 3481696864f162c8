# Expired-file cleanup: Java's CleanCommitLogService + CleanConsumeQueueService, clock injected.
"""Delete expired CommitLog files, then the consume-queue and index files that only point at them.

One :meth:`StoreCleaner.run_once` is one pass of Java's ``cleanResourceInterval`` timer:

1. CommitLog (CleanCommitLogService). Files are deleted when it is time (the local hour is one of
   ``deleteWhen``, e.g. ``"04"`` or ``"04;05"``), or the disk is getting full (used ratio above
   ``diskMaxUsedSpaceRatio``, clamped to 10..95 % as Java does). A file goes when it was last
   modified more than ``fileReservedTime`` hours ago - or regardless of age when the disk is above
   the forced-clean ratio (85 %, or above the warning ratio 90 %, which also sets
   :attr:`StoreCleaner.disk_full`: the store then refuses puts) and ``cleanFileForciblyEnable``.
   Never the last file; oldest first; at most 10 per pass; stops at the first file it cannot delete;
   ``deleteCommitLogFilesInterval`` ms between two deletions.
2. Consume queues and index (CleanConsumeQueueService), when the CommitLog min offset moved: each
   queue deletes its files whose last unit points below the new min and corrects its min offset;
   index files whose entries all point below it are deleted.

Readers: a file a reader holds (a view from a pull) is never deleted under it. Its destroy
stops new holds and returns False; the pass stops there; the file is unlinked the moment the last
hold is released, and leaves the file list on the next pass. After
``destroyMapedFileIntervalForcibly`` ms of such waiting (counted from the first attempt) the next
attempt - the next pass, or the hanged-file retry every ``redeleteHangedFileInterval`` ms - deletes
it anyway: the file is unlinked and its descriptor closed, but the mapping is not unmapped while
views of it live, so a slow reader keeps reading valid, stale bytes of the unlinked file (no
SIGBUS, no dangling pointer) and the space is freed when its last view is released.

Time and disk usage are injected: ``clock_ms()`` (ms since the epoch; also gives the local hour)
and ``disk_used_ratio(path)`` (used fraction 0..1 of the partition holding ``path``, negative when
unknown, which Java treats as full). File ages are measured from their mtime with the injected
clock. The defaults are the real clock and :func:`disk_partition_used_ratio`.
"""
import dataclasses
import logging
import os
import time
from collections.abc import Callable

from pybroker import clock
from pybroker.store import disk_space
from pybroker.store.cleanup_requests import (CLEAN_EXPIRED_CONSUME_QUEUE,
                                             DELETE_EXPIRED_COMMITLOG, MANUAL_DELETE_PASSES)
from pybroker.store.commitlog import CommitLog
from pybroker.store.consume_queue import ConsumeQueueStore
from pybroker.store.index_file import IndexService
from pybroker.store.settings import StoreConfig

__all__ = ["StoreCleaner", "CleanupReport", "disk_partition_used_ratio", "is_time_to_delete"]

log = logging.getLogger(__name__)

_DISK_MAX_USED_SPACE_RATIO_MIN, _DISK_MAX_USED_SPACE_RATIO_MAX = 10, 95
_MS_PER_HOUR = 3_600_000


def disk_partition_used_ratio(path: str) -> float:
    """Used fraction (0..1) of the partition holding ``path``; -1.0 when it cannot be read.

    ``path`` need not exist yet: a fresh store's consumequeue directory is created with its
    first queue, and its partition is its nearest existing parent's (this used to read -1 and
    log "-100.0% used" every pass). See :func:`pybroker.store.disk_space.used_ratio`.
    """
    return disk_space.used_ratio(path)


def is_time_to_delete(delete_when: str, now_ms: int) -> bool:
    """True when the local hour of ``now_ms`` is one of ``delete_when``'s ``;``-separated hours."""
    hour = time.localtime(now_ms / 1000).tm_hour
    for item in delete_when.split(";"):
        item = item.strip()
        if item.isdigit() and int(item) == hour:
            return True
    return False


@dataclasses.dataclass(slots=True)
class CleanupReport:
    """What one pass did; counts are files deleted."""
    commitlog_files_deleted: int = 0
    consume_queue_files_deleted: int = 0
    index_files_deleted: int = 0
    time_up: bool = False             # the hour is in deleteWhen
    space_full: bool = False          # used ratio above diskMaxUsedSpaceRatio (or unknown)
    clean_immediately: bool = False   # age ignored: above the forced-clean ratio
    disk_full: bool = False           # above the warning ratio: puts are refused


class StoreCleaner:
    """Periodic cleanup of one store; call :meth:`run_once` every ``cleanResourceInterval`` ms.

    ``settings``: the store's :class:`pybroker.store.settings.StoreConfig` (``fileReservedTime``,
    ``deleteWhen``, the disk ratios, the deletion intervals, ``cleanFileForciblyEnable``).
    """

    def __init__(self, commitlog: CommitLog, consume_queue_store: ConsumeQueueStore,
                 index_service: IndexService | None, settings: StoreConfig, *,
                 clock_ms: Callable[[], int] | None = None,
                 disk_used_ratio: Callable[[str], float] | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        self.commitlog = commitlog
        self.consume_queue_store = consume_queue_store
        self.index_service = index_service
        self.settings = settings
        self.clock_ms = clock_ms or clock.now_ms
        self.disk_used_ratio = disk_used_ratio or disk_partition_used_ratio
        self.sleep = sleep
        self.disk_full = False
        self._last_physical_min_offset = 0
        self._last_redelete_ms = 0
        # Admin requests (pybroker.store.cleanup_requests): passes left that delete expired
        # CommitLog files at any hour (Java's manualDeleteFileSeveralTimes), and a consume-queue
        # cleanup asked for whether or not the CommitLog min offset moved.
        self.manual_delete_passes = 0
        self._queues_requested = False

    def take_requests(self, kinds: set[str]) -> None:
        """Act on admin cleanup requests at the next :meth:`run_once`."""
        if DELETE_EXPIRED_COMMITLOG in kinds:
            log.info("deleteExpiredCommitLog requested: the next %d passes delete expired "
                     "CommitLog files at any hour", MANUAL_DELETE_PASSES)
            self.manual_delete_passes = MANUAL_DELETE_PASSES
        if CLEAN_EXPIRED_CONSUME_QUEUE in kinds:
            log.info("cleanExpiredCQ requested: consume-queue files below the CommitLog's first "
                     "offset are deleted in this pass")
            self._queues_requested = True

    # --- thresholds ------------------------------------------------------------------------
    def max_used_space_ratio(self) -> float:
        """``diskMaxUsedSpaceRatio`` as a fraction, clamped to Java's 10..95 %."""
        percent = min(max(self.settings.disk_max_used_space_ratio,
                          _DISK_MAX_USED_SPACE_RATIO_MIN), _DISK_MAX_USED_SPACE_RATIO_MAX)
        return percent / 100.0

    def _store_paths(self) -> list[str]:
        consume_queue_root = os.path.join(self.consume_queue_store.store_root, "consumequeue")
        return [self.commitlog.store_path, consume_queue_root]

    def check_space(self, report: CleanupReport) -> None:
        """Fill ``space_full``/``clean_immediately``/``disk_full`` from the disk usage."""
        warning = self.settings.disk_space_warning_level_ratio / 100.0
        forcibly = self.settings.disk_space_clean_forcibly_ratio / 100.0
        commitlog_ratio = self.disk_used_ratio(self.commitlog.store_path)
        if commitlog_ratio > warning:
            if not self.disk_full:
                log.error("disk of %s is %.1f%% used (> %.0f%%): the store refuses puts",
                          self.commitlog.store_path, commitlog_ratio * 100, warning * 100)
            self.disk_full = True
            report.clean_immediately = True
        elif commitlog_ratio > forcibly:
            report.clean_immediately = True
        elif self.disk_full:
            log.info("disk of %s is %.1f%% used: the store accepts puts again",
                     self.commitlog.store_path, commitlog_ratio * 100)
            self.disk_full = False
        report.disk_full = self.disk_full
        limit = self.max_used_space_ratio()
        for path in self._store_paths():
            ratio = commitlog_ratio if path == self.commitlog.store_path else \
                self.disk_used_ratio(path)
            if ratio < 0 or ratio > limit:
                log.info("disk of %s maybe full soon (%.1f%% used > %.0f%%): reclaim space",
                         path, ratio * 100, limit * 100)
                report.space_full = True
                return

    # --- passes ----------------------------------------------------------------------------
    def run_once(self) -> CleanupReport:
        """One cleanup pass: CommitLog first, then consume queues and index."""
        report = CleanupReport()
        self.clean_commit_log(report)
        if self.redelete_hanged_file():
            report.commitlog_files_deleted += 1
        self.clean_consume_queues(report)
        return report

    def clean_commit_log(self, report: CleanupReport) -> int:
        """Delete expired CommitLog files if it is time or the disk is full; returns how many."""
        now_ms = self.clock_ms()
        report.time_up = is_time_to_delete(self.settings.delete_when, now_ms)
        self.check_space(report)
        manual = self.manual_delete_passes > 0
        if not (report.time_up or report.space_full or manual):
            return 0
        if manual:
            self.manual_delete_passes -= 1
        clean_at_once = bool(self.settings.clean_file_forcibly_enable) and \
            report.clean_immediately
        expired_ms = self.settings.file_reserved_time * _MS_PER_HOUR
        # MappedFileQueue ages files against the real clock; shift the limit so that the
        # comparison is made against the injected one: real_now < mtime + shifted
        # <=> clock_now < mtime + expired.
        shifted_ms = expired_ms - (now_ms - clock.now_ms())
        deleted = self.commitlog.delete_expired_files(
            shifted_ms, self.settings.delete_commit_log_files_interval,
            self.settings.destroy_maped_file_interval_forcibly, clean_at_once)
        report.commitlog_files_deleted = deleted
        if deleted and clean_at_once:
            log.warning("forced cleanup deleted %d CommitLog file(s) regardless of age "
                        "(disk above %d%%)", deleted,
                        self.settings.disk_space_clean_forcibly_ratio)
        elif deleted:
            log.info("deleted %d expired CommitLog file(s)", deleted)
        elif report.space_full:
            log.warning("disk space will be full soon, but no CommitLog file could be deleted")
        return deleted

    def redelete_hanged_file(self) -> bool:
        """Every ``redeleteHangedFileInterval`` ms retry the first CommitLog file if an earlier
        destroy left it waiting for readers; True when it went."""
        now_ms = self.clock_ms()
        if now_ms - self._last_redelete_ms <= self.settings.redelete_hanged_file_interval:
            return False
        self._last_redelete_ms = now_ms
        queue = self.commitlog.mapped_file_queue
        first = queue.first_mapped_file()
        if first is None or len(queue.mapped_files) < 2:
            return False
        if first.hold():          # still available: nobody tried to delete it
            first.release()
            return False
        log.warning("%s was destroyed once but is still held; retrying", first.path)
        if not first.destroy(self.settings.destroy_maped_file_interval_forcibly):
            return False
        queue.mapped_files.remove(first)
        return True

    def clean_consume_queues(self, report: CleanupReport) -> int:
        """When the CommitLog min offset moved: delete consume-queue and index files below it."""
        min_offset = self.commitlog.min_offset()
        requested, self._queues_requested = self._queues_requested, False
        if min_offset <= self._last_physical_min_offset and not requested:
            return 0
        self._last_physical_min_offset = min_offset
        deleted = 0
        interval_ms = self.settings.delete_consume_queue_files_interval
        for queue in self.consume_queue_store.queues():
            count = queue.delete_expired(min_offset)
            deleted += count
            if count and interval_ms > 0:
                self.sleep(interval_ms / 1000)
        report.consume_queue_files_deleted = deleted
        if self.index_service is not None:
            report.index_files_deleted = self.index_service.delete_expired(min_offset)
        return deleted
