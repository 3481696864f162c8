# The dispatcher process: reput CommitLog -> ConsumeQueue + index; publishes dispatched position.
"""Main loop of the dispatcher (design.md §2 rules 1, 2, 4).

It tails ``written_position`` (published by the appender) over a READ-ONLY CommitLog and runs
:class:`pybroker.store.dispatch.Dispatcher`, the only writer of consume queues and index files.
It dispatches no further than ``confirm_position`` (Java's confirm offset: in controller mode
what every SyncStateSet member a send waits for has, else unbounded) unless
``readUnCommitted``, as Java's reput ends at getReputEndOffset: a consumer is never served a
message the set has not confirmed. It stops on request (the supervisor's stop signal by
default), after dispatching everything written and confirmed. Per batch it publishes
``dispatched_position`` once and signals the processes whose waiter bit it takes (remoting
workers holding long polls; readers consult the live position and need no wake-up). It sleeps
as a waiter on whichever of ``written_position`` and ``confirm_position`` holds it back (their
writers signal it only then); while batches keep coming it paces itself instead, one pass per
millisecond as Java's reput, with no waiter bit (:class:`pybroker.proc.wake.Pacer`).

Every ``flushIntervalConsumeQueue`` ms it msyncs the consume queues (at least
``flushConsumeQueueLeastPages`` dirty pages, or all of them once
``flushConsumeQueueThoroughInterval`` ms passed, as Java) and the newest IndexFile, and
publishes ``logics_flushed_timestamp`` (store time of the last record dispatched before a
thorough flush) and ``index_flushed_timestamp`` for the flusher's checkpoint. A flush error
raises DurabilityError: the process must exit non-zero.

Every ``cleanResourceInterval`` ms, when dispatch has caught up, it runs one
:class:`pybroker.store.cleanup.StoreCleaner` pass (expired CommitLog files, then the
consume-queue and index files below the new CommitLog min offset; only files already
dispatched can go) and publishes ``commitlog_min_offset`` and ``disk_full``: the appender then
answers puts SERVICE_NOT_AVAILABLE, and every other process drops its maps of the deleted files.
Java's pauses between two deletions (``deleteCommitLogFilesInterval``,
``deleteConsumeQueueFilesInterval``) are not taken here: they would stall dispatch.
Topic deletions arrive through :mod:`pybroker.proc.topic_deletion`, an admin's cleanup
requests through :mod:`pybroker.store.cleanup_requests` (taken at the next pass).

With a queue offset table (:mod:`pybroker.store.queue_offsets`) it publishes every queue's max
offset at start, the max offsets of a batch's queues after the batch's ``dispatched_position``,
and 0 for the queues of a deleted topic: readers then know every queue's max offset without
touching its files.
"""
import dataclasses
import functools
import logging
from collections.abc import Callable

from pybroker import clock
from pybroker.errors import StoreCorruptError
from pybroker.proc.topic_deletion import DispatcherDeletions, requests_path
from pybroker.proc.wake import (DataPlaneWakes, DispatchEndWatch, Pacer, Sleeper, WakeFd,
                                signal_mask, stop_on_sigterm)
from pybroker._fast.stats import StatsCounter, StatsHistogram
from pybroker.stats.region import private_writer
from pybroker.store import paths
from pybroker.store.cleanup import StoreCleaner
from pybroker.store.cleanup_requests import CleanupRequestReader
from pybroker.store.commitlog import CommitLog
from pybroker.store.consume_queue import ConsumeQueueStore
from pybroker.store.control_block import DISPATCHER, ControlBlock
from pybroker.store.damaged_records import DamagedRecords
from pybroker.store.dispatch import Dispatcher
from pybroker.store.drop_behind import DropBehind, LogicsDropBehind
from pybroker.store.index_file import IndexService
from pybroker.store.queue_offsets import QueueOffsetWriter
from pybroker.store.read_only_store import follow_commitlog
from pybroker.store.settings import StoreConfig

__all__ = ["run_dispatcher"]

log = logging.getLogger("pybroker.proc.dispatcher")

# Bytes dispatched per batch before the position is published (bounds reader latency).
_BATCH_BYTES_MAX = 4 << 20
_IDLE_WAIT_MS = 1000
# Under load the dispatcher takes what was written once per interval (Java's
# ReputMessageService sleeps 1 ms between passes) instead of being woken by every appender
# drain: at 8 producer threads that was a wake-up and ~40 µs of this process per 5 messages
# (docs/architecture/data-plane.md, "Where one send's time goes"). Pacing starts when two
# batches come closer than the gap, and ends at the first paced wait that finds nothing.
_REPUT_INTERVAL_MS = 1
_REPUT_BUSY_GAP_NS = 2_000_000


def _open_store(settings: StoreConfig):
    store_root = settings.store_path_root_dir
    commitlog = CommitLog(settings.commitlog_dir, settings.mapped_file_size_commit_log,
                          read_only=True)
    queues = ConsumeQueueStore(store_root,
                               settings.mapped_file_size_consume_queue)
    index_service = None
    if settings.message_index_enable:
        index_service = IndexService(paths.index_dir(store_root),
                                     settings.max_hash_slot_num,
                                     settings.max_index_num)
    if not (commitlog.load() and queues.load()
            and (index_service is None or index_service.load())):
        raise ValueError(f"store {store_root}: a file has the wrong size")
    queues.recover()      # recovery ran before the fork: this only sets positions
    return commitlog, queues, index_service


def run_dispatcher(settings: StoreConfig, control: ControlBlock, wakes: DataPlaneWakes,
                   clock_ms: Callable[[], int] = clock.now_ms,
                   stop_requested: Callable[[], bool] | None = None, stats=None,
                   queue_offsets=None) -> None:
    """Dispatch until ``stop_requested()`` (default: the stop signal, see
    :func:`pybroker.proc.wake.stop_on_sigterm`), then dispatch what is written, flush
    thoroughly and return; publish the queues' max offsets in ``queue_offsets`` (the buffer
    of a queue offset table, pybroker/store/queue_offsets.py)."""
    commitlog, queues, index_service = _open_store(settings)
    start = control.dispatched_position or queues.max_physical_offset()
    offsets = _OffsetPublisher(queue_offsets, queues)
    dispatcher = Dispatcher(commitlog, queues, index_service,
                            settings.delay_levels_ms,
                            max(start, commitlog.min_offset(), 0),
                            damaged_records=DamagedRecords.load(settings.store_path_root_dir),
                            keep_bindings=True, offset_table=offsets.writer)
    publish_offsets = dispatcher.publish_offsets if offsets.writer is not None else None
    flusher = _LogicsFlusher(settings, queues, index_service, control, clock_ms)
    cleanup = _Cleanup(settings, commitlog, queues, index_service, control, clock_ms)
    deletions = DispatcherDeletions(requests_path(settings.store_path_root_dir), control)
    watch = DispatchEndWatch(control, DISPATCHER.slot, not settings.read_un_committed)
    counters = control.worker(DISPATCHER.slot)
    waits = _Waits(wakes.dispatcher, watch, counters)
    beat, load_written, batch_counters = _frameless_words(control, counters)
    slots = wakes.by_slot()
    stats = stats if stats is not None else private_writer(DISPATCHER.stats_section)
    stop_requested = stop_requested or stop_on_sigterm(wakes.dispatcher)
    followed = -1
    # Records below the reput offset were read once: out of this process's page tables.
    drop_behind = DropBehind(commitlog.mapped_file_queue)
    log.info("dispatcher: reput from %d", dispatcher.reput_from_offset)
    try:
        while True:
            beat()
            written = load_written()               # before the deletion fields: see there
            end = watch.end(written)
            target = deletions.target(end)
            held = False
            if target > dispatcher.reput_from_offset:
                follow_commitlog(commitlog, followed, written)
                followed = written
                stats.record(StatsHistogram.DISPATCH_LAG_BYTES,
                             written - dispatcher.reput_from_offset)
                # At the confirm offset a record may straddle it: then nothing moves (held).
                count = _dispatch_batch(dispatcher, target, at_confirm=target == end < written)
                held = count < 0
                waits.worked = waits.worked or count > 0
                _count_batch(stats, batch_counters, max(count, 0))
                _publish_batch(control, dispatcher, slots, publish_offsets)
                drop_behind.advance(dispatcher.reput_from_offset)
            deletions.apply_if_reached(dispatcher.reput_from_offset, queues, dispatcher,
                                       offsets.deleted)
            wait_ms = flusher.maybe_flush(dispatcher.last_store_timestamp)
            if end > dispatcher.reput_from_offset and not held:
                continue
            wait_ms = min(wait_ms, cleanup.maybe_run(dispatcher))
            # An unconfirmed tail at the stop is dispatched by the next start's recovery.
            if stop_requested() and (held or watch.end(load_written())
                                     <= dispatcher.reput_from_offset):
                flusher.flush(dispatcher.last_store_timestamp, thorough=True)
                return
            # Held: until the confirm offset moves at all (it covers the record, or not yet).
            waits.wait(end + 1 if held else dispatcher.reput_from_offset + 1, held, wait_ms)
    finally:
        dispatcher.release_files()
        commitlog.shutdown(0)
        queues.close()
        if index_service is not None:
            index_service.close()


def _frameless_words(control: ControlBlock, counters):
    """The words touched once per pass or batch, as calls without Python frames
    (data-plane.md, "The wake-ups without Python frames"): the heartbeat, the load of
    written_position, the adders of appends and batches."""
    return (functools.partial(counters.adder("heartbeats"), 1),
            control.loader("written_position"),
            (counters.adder("appends"), counters.adder("batches")))


class _Waits:
    """The dispatcher's waits: under load a paced one, flags down (pybroker/proc/wake.py,
    Pacer; the stop signal and topic deletions still cut it short), else a sleep on the
    waiter bits of the dispatch end until it passes a target."""

    def __init__(self, wake_fd: WakeFd, watch: DispatchEndWatch, counters):
        self.wake_fd = wake_fd
        self.watch = watch
        self.sleeper = Sleeper(wake_fd, [watch])
        self.pacer = Pacer(_REPUT_INTERVAL_MS, _REPUT_BUSY_GAP_NS)
        self.add_wakeups = counters.adder("wakeups")
        self.worked = False         # a batch moved since the last wait

    def wait(self, target: int, held: bool, wait_ms: int) -> None:
        paced_ms = None if held else self.pacer.caught_up(self.worked)
        self.worked = False
        if paced_ms is not None:
            signalled = self.wake_fd.wait(min(wait_ms, paced_ms))
        else:
            self.watch.target = target
            signalled = self.sleeper.sleep(min(wait_ms, _IDLE_WAIT_MS))
        if signalled:
            self.add_wakeups(1)


class _OffsetPublisher:
    """This process's side of the queue offset table (pybroker/store/queue_offsets.py), or
    nothing without one: every queue loaded at start and the queues of deleted topics (0);
    the queues of each batch are the Dispatcher's (``publish_offsets``, one C call)."""

    def __init__(self, buffer, queues):
        self.queues = queues
        self.writer = QueueOffsetWriter(buffer) if buffer is not None else None
        if self.writer is not None:
            self.writer.republish(queues)
            self.writer.ready()

    def deleted(self) -> None:
        if self.writer is not None:
            self.writer.republish(self.queues)


def _publish_batch(control: ControlBlock, dispatcher: Dispatcher, slots,
                   publish_offsets: Callable[[], int] | None) -> None:
    """A batch's dispatched_position, then its queues' max offsets (never ahead of it;
    ``publish_offsets``: Dispatcher.publish_offsets, None without a table).
    Only the processes waiting for the position (held long polls) are woken: a wake-up of
    every remoting worker and of the supervisor per batch cost each of them an event-loop
    turn per batch under load (docs/benchmarks.md)."""
    signal_mask(control.publish("dispatched_position", dispatcher.reput_from_offset, True),
                slots)
    if publish_offsets is not None:
        publish_offsets()


class _Cleanup:
    """Periodic expired-file cleanup of the dispatcher (Java's cleanResourceInterval timer)."""

    def __init__(self, settings, commitlog, queues, index_service, control, clock_ms):
        self.commitlog = commitlog
        self.control = control
        self.clock_ms = clock_ms
        self.interval_ms = settings.clean_resource_interval
        # Java's pauses between two deletions would stall dispatch: none here.
        no_pause = dataclasses.replace(settings, delete_commit_log_files_interval=0,
                                       delete_consume_queue_files_interval=0)
        self.cleaner = StoreCleaner(commitlog, queues, index_service, no_pause,
                                    clock_ms=clock_ms, sleep=lambda seconds: None)
        self.next_run_ms = clock_ms() + self.interval_ms
        self.requests = CleanupRequestReader(settings.store_path_root_dir)
        self.publish()

    def maybe_run(self, dispatcher: Dispatcher) -> int:
        """One pass when due (call only when dispatch caught up); ms until the next one."""
        now = self.clock_ms()
        if now >= self.next_run_ms:
            dispatcher.release_files()      # the pass may close consume-queue / index files
            self.cleaner.take_requests(self.requests.take())
            report = self.cleaner.run_once()
            self.next_run_ms = self.clock_ms() + self.interval_ms
            if report.commitlog_files_deleted or report.consume_queue_files_deleted:
                log.info("cleanup: %d CommitLog, %d consume-queue, %d index file(s) deleted",
                         report.commitlog_files_deleted, report.consume_queue_files_deleted,
                         report.index_files_deleted)
            self.publish()
        return max(self.next_run_ms - now, 1)

    def publish(self) -> None:
        """Publish the CommitLog min offset (bytes) and the disk-full flag."""
        self.control.publish("commitlog_min_offset", max(self.commitlog.min_offset(), 0), True)
        disk_full = int(self.cleaner.disk_full)
        if self.control.disk_full != disk_full:
            self.control.publish("disk_full", disk_full)


def _count_batch(stats, counters, count: int) -> None:
    """``counters``: the adders of this worker's appends and batches."""
    stats.add(StatsCounter.DISPATCHED_MESSAGES, count)
    stats.add(StatsCounter.DISPATCH_BATCHES)
    stats.record(StatsHistogram.DISPATCH_BATCH_MESSAGES, count)
    add_appends, add_batches = counters
    if count:
        add_appends(count)
    add_batches(1)


def _dispatch_batch(dispatcher: Dispatcher, target: int, at_confirm: bool) -> int:
    """Dispatch one batch (bounded in bytes) towards ``target``; the count, or -1 when
    ``at_confirm`` (the target is the confirm offset, not a record end) and the next record
    reaches past it; StoreCorruptError when no progress is possible otherwise."""
    before = dispatcher.reput_from_offset
    count = dispatcher.dispatch_until(min(target, before + _BATCH_BYTES_MAX))
    if dispatcher.reput_from_offset == before:
        count = dispatcher.dispatch_until(target)     # one record larger than the bound
    if dispatcher.reput_from_offset == before:
        if at_confirm:
            return -1
        raise StoreCorruptError(f"dispatch cannot pass physical offset {before} although "
                                f"{target} is written")
    return count


class _LogicsFlusher:
    """Periodic ConsumeQueue + index flush of the dispatcher (Java FlushConsumeQueueService)."""

    def __init__(self, settings, queues, index_service, control, clock_ms):
        self.queues = queues
        self.index_service = index_service
        self.control = control
        self.clock_ms = clock_ms
        self.interval_ms = settings.flush_interval_consume_queue
        self.least_pages = settings.flush_consume_queue_least_pages
        self.thorough_interval_ms = settings.flush_consume_queue_thorough_interval
        now = clock_ms()
        self.next_flush_ms = now + self.interval_ms
        self.last_thorough_ms = now
        self.drop_behind = LogicsDropBehind()

    def maybe_flush(self, last_store_timestamp: int) -> int:
        """Flush when the interval passed; returns ms until the next flush is due."""
        now = self.clock_ms()
        if now >= self.next_flush_ms:
            thorough = now >= self.last_thorough_ms + self.thorough_interval_ms
            self.flush(last_store_timestamp, thorough)
            self.next_flush_ms = now + self.interval_ms
        return max(self.next_flush_ms - now, 1)

    def flush(self, last_store_timestamp: int, thorough: bool) -> None:
        """msync the consume queues and the index; publish what is now durable."""
        self.queues.flush(0 if thorough else self.least_pages)
        if thorough:
            self.last_thorough_ms = self.clock_ms()
            if last_store_timestamp:
                self.control.publish("logics_flushed_timestamp", last_store_timestamp, True)
        if self.index_service is not None:
            index_timestamp = self.index_service.flush()
            if index_timestamp:
                self.control.publish("index_flushed_timestamp", index_timestamp, True)
        self.drop_behind.advance(self.queues, self.index_service)
