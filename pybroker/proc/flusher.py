# The flusher process: CommitLog flush + checkpoint; publishes the flushed position (fail-stop).
"""Main loop of the flusher (design.md §2 rules 1, 2, 6; style.md §8.6).

ASYNC_FLUSH: every ``flushIntervalCommitLog`` ms, msync when at least
``flushCommitLogLeastPages`` pages are dirty, or whatever is dirty once
``flushCommitLogThoroughInterval`` ms passed (Java FlushRealTimeService). SYNC_FLUSH: a waiter
on ``written_position`` (the appender signals it once per drain while it sleeps), it flushes up
to the written position at once (the group commit of Java's GroupCommitService), publishes
``flushed_position`` and signals the remoting workers waiting on it. Under SYNC_FLUSH outside
controller mode it is also the one writer of ``confirm_position`` (Java's confirm offset is
then flushedWhere): the dispatcher serves consumers nothing past the flushed position unless
``readUnCommitted``.

The flusher maps the CommitLog files itself (read-write, never writing a byte: the appender is
their only writer) and flushes with ``MappedFile.flush``, i.e. ``msync(MS_SYNC)`` of the page
range. That is sound across processes: msync of a shared file mapping becomes
``vfs_fsync_range`` on the file, which writes back every dirty page-cache page of the range,
and dirty state lives in the page cache (the appender's stores into its own shared mapping
mark the same pages dirty), so the pages the appender dirtied are written whichever process
asks. (A read-only mapping would not do: Python's ``mmap.flush`` skips msync for
ACCESS_READ maps.)

After each flush it keeps a window of CommitLog pages faulted in ahead of the written position
(:mod:`pybroker.store.prefault`), so the appender's stores into fresh pages of the sparse files
are minor faults; the window and the files made ready (store/allocate.py) cover the timer's
re-puts of slots due soon (the control block's timer ahead line), at most
``COMING_BYTES_MAX`` of them.

After each flush it writes the checkpoint: the flushed CommitLog offset (pybroker's field,
recovery's proof of the end: store/checkpoint.py), physicMsgTimestamp = store time of the last
record flushed (``written_store_timestamp`` loaded BEFORE ``written_position``, so it is never later
than that record), logics/index timestamps from the dispatcher's published ones. The page is
msynced every ``flushConsumeQueueThoroughInterval`` and at stop, not after every flush (Java's
GroupCommitService sets the checkpoint, its consume-queue thorough flush forces it): under
SYNC_FLUSH a second msync per group commit would double the fsync work on the ack's path, and a
checkpoint older on disk than in the page only makes recovery after a power loss start further
back (store/checkpoint.py). A flush error
raises DurabilityError out of :func:`run_flusher`; the process must exit non-zero (fail-stop),
nothing is retried.
"""
import logging
import os
import time
from collections.abc import Callable

from pybroker import clock
from pybroker.proc.wake import (DataPlaneWakes, PositionWatch, Sleeper, signal_mask,
                                stop_on_sigterm)
from pybroker._fast.stats import StatsCounter, StatsHistogram
from pybroker.stats.region import private_writer
from pybroker.store import paths
from pybroker.store.allocate import FileAllocator
from pybroker.store.checkpoint import StoreCheckpoint
from pybroker.store.commitlog import CommitLog
from pybroker.store.control_block import FLUSHER, ControlBlock
from pybroker.store.drop_behind import DropBehind
from pybroker.store.prefault import COMING_BYTES_MAX, PrefaultWindow
from pybroker.store.read_only_store import follow_commitlog
from pybroker.store.settings import StoreConfig

__all__ = ["run_flusher"]

log = logging.getLogger("pybroker.proc.flusher")

_SYNC_IDLE_WAIT_MS = 1000
# A SYNC_FLUSH turn populates at most this much (256 pages, ~0.3 ms): a waiting ack is delayed
# by no more than that.
SYNC_PREFAULT_BYTES_MAX = 1 << 20


def run_flusher(settings: StoreConfig, control: ControlBlock, wakes: DataPlaneWakes,
                clock_ms: Callable[[], int] = clock.now_ms,
                stop_requested: Callable[[], bool] | None = None, stats=None,
                owns_confirm: bool = False) -> None:
    """Flush until ``stop_requested()`` (default: the stop signal, see
    :func:`pybroker.proc.wake.stop_on_sigterm`); then a last full flush and checkpoint
    (send the stop signal after the dispatcher exited, so it carries the final logics
    timestamps). ``owns_confirm`` (SYNC_FLUSH outside controller mode: see
    :func:`flusher_owns_confirm`): every flushed position is published as
    ``confirm_position`` too."""
    store_root = settings.store_path_root_dir
    commitlog = CommitLog(settings.commitlog_dir, settings.mapped_file_size_commit_log)
    if not commitlog.load():
        raise ValueError(f"store {store_root}: a CommitLog file has the wrong size")
    os.makedirs(store_root, exist_ok=True)        # a fresh store: nothing recovered it yet
    checkpoint = StoreCheckpoint(paths.checkpoint_path(store_root),
                                 sync_interval_ms=settings.flush_consume_queue_thorough_interval,
                                 now_ms=clock_ms())
    try:
        _Flusher(settings, commitlog, checkpoint, control, wakes, clock_ms,
                 stop_requested, stats if stats is not None
                 else private_writer(FLUSHER.stats_section), owns_confirm).run()
    finally:
        commitlog.shutdown(0)
        checkpoint.shutdown()


def flusher_owns_confirm(sync_flush: bool, controller_mode: bool) -> bool:
    """Whether the flusher writes ``confirm_position``: Java 5.3.3's getConfirmOffset is the
    flushed position under SYNC_FLUSH (outside controller mode, where the ha worker owns it),
    so a consumer is never served bytes a crash could still take back."""
    return sync_flush and not controller_mode


class _Flusher:
    def __init__(self, settings, commitlog, checkpoint, control, wakes, clock_ms,
                 stop_requested, stats, owns_confirm: bool = False):
        self.commitlog = commitlog
        self.checkpoint = checkpoint
        self.control = control
        self.wakes = wakes
        self.slots = wakes.by_slot()
        self.clock_ms = clock_ms
        self.sync = settings.sync_flush
        self.owns_confirm = owns_confirm
        self.interval_ms = settings.flush_interval_commit_log
        self.least_pages = settings.flush_commit_log_least_pages
        self.thorough_interval_ms = settings.flush_commit_log_thorough_interval
        self.last_thorough_ms = clock_ms()
        self.counters = control.worker(FLUSHER.slot)
        self.stats = stats
        self.stop_requested = stop_requested or stop_on_sigterm(wakes.flusher)
        flushed = control.flushed_position
        commitlog.set_wrote_and_flushed(flushed)
        self.followed = flushed
        self.commitlog_min_offset = 0
        # Sparse CommitLog files: fault the pages ahead of the appender here, not in its
        # append path (store/prefault.py). Warmed files are faulted in whole already.
        self.prefault = None if settings.warm_maped_file_enable \
            else PrefaultWindow(commitlog, flushed)
        # The timer's re-puts of slots due soon: written at once when they fall due.
        self.timer_ahead = control.timer_ahead()
        # The page cache keeps the pages faulted in ahead (and the allocator's warmed ones)
        # for the appender: this process's mappings of them go (store/drop_behind.py).
        self.drop_behind = DropBehind(commitlog.mapped_file_queue)
        # The next CommitLog file is made ready (and warmed, locked) off the append path.
        self.allocator = FileAllocator(
            settings.commitlog_dir, settings.mapped_file_size_commit_log,
            warm=settings.warm_maped_file_enable, sync_flush=self.sync,
            flush_least_pages=settings.flush_least_pages_when_warm_maped_file, stats=stats)
        log.info("flusher: %s from %d", "SYNC_FLUSH" if self.sync else "ASYNC_FLUSH", flushed)

    def run(self) -> None:
        clean = False
        try:
            self._loop()
            clean = True
        finally:
            # A clean stop comes after the appender exited: files made ready beyond the
            # final written position hold nothing and go (Java's allocator does the same).
            self.allocator.close(self.control.written_position if clean else None)

    def _loop(self) -> None:
        watch = PositionWatch(self.control, "written_position", FLUSHER.slot)
        sleeper = Sleeper(self.wakes.flusher, [watch] if self.sync else [])
        while True:
            self.counters.beat()
            stopping = self.stop_requested()
            flushed = self.flush_once(least_pages=0 if (self.sync or stopping) else None)
            coming = min(self.timer_ahead.coming_bytes, COMING_BYTES_MAX)
            if not stopping:
                self.allocator.advance(self.followed, coming)
            if self.prefault is not None and not stopping:
                self.prefault_ahead(self.prefault, coming)
                self.drop_behind.advance(self.prefault.prefaulted_position)
            else:
                self.drop_behind.advance(self.followed)
            if stopping:
                if not flushed:
                    self.write_checkpoint(0, -1)   # the dispatcher's last timestamps
                log.info("flusher: stopping at %d", self.commitlog.flushed_where)
                return
            watch.target = self.commitlog.flushed_where + 1
            if sleeper.sleep(_SYNC_IDLE_WAIT_MS if self.sync else self.interval_ms):
                self.counters.add(wakeups=1)

    def prefault_ahead(self, prefault: PrefaultWindow, coming: int) -> None:
        """After the flush, keep the window of faulted pages ahead of the appender
        (store/prefault.py), wide enough for the ``coming`` bytes of the timer's re-puts of
        slots due soon. Under SYNC_FLUSH acks wait for this process: only when nothing is
        waiting to be flushed, and at most SYNC_PREFAULT_BYTES_MAX per turn."""
        if not self.sync:
            populated = prefault.advance(self.followed, coming_bytes=coming)
        elif self.control.written_position <= self.commitlog.flushed_where:
            populated = prefault.advance(self.followed, SYNC_PREFAULT_BYTES_MAX, coming)
        else:
            return
        if populated:
            self.stats.add(StatsCounter.PREFAULTED_BYTES, populated)
            self.stats.set(StatsCounter.PREFAULT_POSITION, prefault.prefaulted_position)

    def flush_once(self, least_pages: int | None) -> bool:
        """Flush up to the written position; True when the flushed position advanced.

        ``least_pages`` None: the ASYNC rule (configured pages, 0 after the thorough interval).
        """
        control = self.control
        min_offset = control.commitlog_min_offset
        if min_offset > self.commitlog_min_offset:
            # The dispatcher's cleanup deleted files: drop their maps (and their disk space).
            self.commitlog_min_offset = min_offset
            self.commitlog.mapped_file_queue.forget_files_below(min_offset)
        store_timestamp = control.written_store_timestamp   # before the position: see module
        written = control.written_position
        if written > self.followed:
            follow_commitlog(self.commitlog, self.followed, written)
            self.followed = written
        if least_pages is None:
            now = self.clock_ms()
            least_pages = self.least_pages
            if now >= self.last_thorough_ms + self.thorough_interval_ms:
                least_pages, self.last_thorough_ms = 0, now
        before = self.commitlog.flushed_where
        started = time.monotonic_ns()
        if not self.commitlog.flush(least_pages):
            return False
        stats = self.stats
        flushed_bytes = self.commitlog.flushed_where - before
        stats.record(StatsHistogram.FLUSH_LATENCY_US, (time.monotonic_ns() - started) // 1000)
        stats.record(StatsHistogram.FLUSH_BYTES, flushed_bytes)
        stats.add(StatsCounter.FLUSHES)
        stats.add(StatsCounter.FLUSHED_BYTES, flushed_bytes)
        self.write_checkpoint(store_timestamp, written)
        flushed = self.commitlog.flushed_where
        mask = control.publish("flushed_position", flushed, True)
        if self.owns_confirm:
            # The dispatcher, held at the confirm offset, waits on this word.
            mask |= control.publish("confirm_position", flushed, True)
        signal_mask(mask, self.slots)
        self.counters.add(batches=1)
        return True

    def write_checkpoint(self, store_timestamp: int, written: int) -> None:
        """Checkpoint after a flush: ``store_timestamp`` (ms) counts only when everything up
        to ``written`` is flushed; logics/index timestamps as the dispatcher published them."""
        checkpoint, control = self.checkpoint, self.control
        if self.commitlog.flushed_where >= written >= 0 and store_timestamp:
            checkpoint.physic_msg_timestamp = store_timestamp
        checkpoint.logics_msg_timestamp = max(checkpoint.logics_msg_timestamp,
                                              control.logics_flushed_timestamp)
        checkpoint.index_msg_timestamp = max(checkpoint.index_msg_timestamp,
                                             control.index_flushed_timestamp)
        # Recovery's proof of the end: the CommitLog holds at least this much after any crash.
        checkpoint.commitlog_flushed_offset = self.commitlog.flushed_where
        checkpoint.save(self.clock_ms())
