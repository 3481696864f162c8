# The appender process: the only CommitLog writer; drains every send ring, group-commits a batch.
"""Main loop of the appender (design.md §2 rules 1-4, §6).

Per wake-up it drains EVERY send ring: each ring record is one put request (layout in
:mod:`pybroker.proc.ring_format`); the per-request loop runs in C
(``pybroker._fast.append.RingDrainer``: queue offset from the C map, patch in the ring slot,
one copy into the mapped file, completion slot), Python runs once per ring per drain and per
file roll. The store timestamp is taken once per drain.
Then, once per drain: ``written_store_timestamp`` and ``written_position`` are published (in that
order, so a reader that loads the timestamp first never sees a time later than the record at
the position it loads next), each completion ring is committed once, and whoever flagged itself
asleep (dispatcher and SYNC_FLUSH flusher via the position's waiter bits, workers via their
completion flag or their wait for ring space) gets one eventfd signal. The appender sleeps only
when every ring is empty.

SYNC_FLUSH: a send appended while a flush is in flight is acknowledged only by the next flush
anyway, so while ``flushed_position`` is behind the published end the appender waits (at most
``_FLUSH_GATE_MS``, as a waiter on ``flushed_position``) and lets the sends gather in the rings:
one drain, one dispatch batch and one completion wake-up per flush instead of one per send as
they trickle in (docs/benchmarks.md, "SYNC_FLUSH drains gated by the flush").

Back-pressure: a ring's requests are taken only while its completion ring has free slots; a
full completion ring stops that ring until its worker drains it (the RingPutter bounds its
in-flight puts by the slot count, so this is a safety net; the appender then re-checks every
``_BLOCKED_WAIT_MS``).

Store changes, tested once per loop turn inline (acquire loads, no system call, no Python call)
and followed by ``check_store_changes`` only when one of them moved or the disk's own look is
due: while the dispatcher's cleanup publishes ``disk_full`` every put completes
SERVICE_NOT_AVAILABLE (Java's disk-full running flag); when ``commitlog_min_offset`` moves the
maps of the deleted files are dropped; a topic deletion request
(:mod:`pybroker.proc.topic_deletion`) drops the topics' queue offsets.

The file appended to and its buffer are kept from drain to drain until the file rolls (without
the transient store pool), so a drain finds its file, and the CommitLog end, without a call.
"""
import functools
import logging
import time

from pybroker import clock
from pybroker._fast import append
from pybroker.proc import ring_format
from pybroker.proc.topic_deletion import read_requested_topics, requests_path
from pybroker.proc.wake import (ConsumerSide, DataPlaneWakes, PositionWatch, Sleeper, signal_mask,
                                stop_on_sigterm)
from pybroker.protocol.constants import TRANSACTION_TYPE_MASK
from pybroker._fast.stats import StatsCounter, StatsHistogram
from pybroker.stats.region import private_writer
from pybroker.store.commitlog import NO_QUEUE_OFFSET_TYPES, CommitLog, topic_queue_key
from pybroker.store.consume_queue import ConsumeQueueStore
from pybroker.store.disk_space import SpaceGuard
from pybroker.store.drop_behind import DropBehind
from pybroker.store.mapped_file import MappedFile
from pybroker.store.control_block import APPENDER, HA, BrokerState, ControlBlock
from pybroker.store.settings import StoreConfig
from pybroker.store.transient_pool import CommitStep, TransientStorePool
from pybroker.store.status import PutStatus

__all__ = ["run_appender"]

log = logging.getLogger("pybroker.proc.appender")

_IDLE_WAIT_MS = 1000          # an idle appender re-checks broker_state this often
DISPATCH_WAIT_S = 10.0        # the longest wait at start for the dispatcher (_await_dispatch)
_BLOCKED_WAIT_MS = 1          # completion ring full: wait for the worker to drain it
_FLUSH_GATE_MS = 2            # SYNC_FLUSH: the longest wait for an msync in flight (a slow disk)


def run_appender(settings: StoreConfig, rings, completion_rings, control: ControlBlock,
                 wakes: DataPlaneWakes, clock_ms=clock.now_ms,
                 stats=None) -> None:
    """Append until ``control.broker_state`` is STOPPING (or later), or the stop signal, and
    the rings are empty.

    ``rings[i]`` (consumer side) and ``completion_rings[i]`` (producer side) belong to remoting
    worker slot i. Raises (and the process must exit non-zero) on a store failure.
    """
    appender = _Appender(settings, rings, completion_rings, control, wakes, clock_ms,
                         stats if stats is not None else private_writer(APPENDER.stats_section))
    try:
        appender.run()
    finally:
        appender.close()


def _await_dispatch(control: ControlBlock, written: int) -> None:
    """Wait until the dispatcher has dispatched to ``written``: the consume queues' max offsets
    read below must not move meanwhile. A generation starts with both at the recovered end;
    a slave promoted in-process (controller mode) starts its appender while the dispatcher
    still dispatches what the slave wrote (Java's changeToMaster waits for the dispatch too).
    A dispatcher that does not get there within DISPATCH_WAIT_S fails the start."""
    deadline = time.monotonic() + DISPATCH_WAIT_S
    while control.dispatched_position < written:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the dispatcher did not reach {written} within "
                               f"{DISPATCH_WAIT_S:.0f} s (at {control.dispatched_position})")
        time.sleep(0.001)  # tidy: allow (a start, once: no loop of the running appender)


def _topic_queue_table(settings: StoreConfig, commitlog: CommitLog,
                       written_position: int) -> dict[str, int]:
    """Next queue offset per queue: the consume queues' max offsets (read-only), then any
    records the CommitLog holds beyond what they cover."""
    store_root = settings.store_path_root_dir
    queues = ConsumeQueueStore(store_root, settings.mapped_file_size_consume_queue,
                               read_only=True)
    try:
        if not queues.load():
            raise ValueError(f"store {store_root}: a consume-queue file has the wrong size")
        for queue in queues.queues():
            queue.recover()
        table = {topic_queue_key(queue.topic, queue.queue_id): queue.max_offset_in_queue()
                 for queue in queues.queues()}
        covered = max(queues.max_physical_offset(), commitlog.min_offset(), 0)
    finally:
        queues.close()
    for message_record in commitlog.record_iterator(covered, written_position):
        if message_record.sys_flag & TRANSACTION_TYPE_MASK not in NO_QUEUE_OFFSET_TYPES:
            key = topic_queue_key(message_record.topic, message_record.queue_id)
            table[key] = max(table.get(key, 0), message_record.queue_offset + 1)
        message_record.body.release()
    return table


class _Appender:
    def __init__(self, settings, rings, completion_rings, control, wakes, clock_ms, stats):
        if len(rings) != len(completion_rings) or len(rings) > HA.slot:
            raise ValueError(f"{len(rings)} send rings and {len(completion_rings)} completion "
                             f"rings: need one of each per worker, at most {HA.slot}")
        self.rings = list(rings)
        self.completion_rings = list(completion_rings)
        self.control = control
        self.wakes = wakes
        self.slots = wakes.by_slot()
        self.clock_ms = clock_ms
        self.counters = control.worker(APPENDER.slot)
        self._bind_words(control)
        self.stats = stats          # this process's section of the instrument region
        store_root = settings.store_path_root_dir
        self.commitlog = CommitLog(settings.commitlog_dir, settings.mapped_file_size_commit_log,
                                   warm=settings.warm_maped_file_enable,
                                   on_create=self._file_created)
        if not self.commitlog.load():
            raise ValueError(f"store {store_root}: a CommitLog file has the wrong size")
        written = control.written_position or self.commitlog.data_end()
        # Files the allocator (flusher) made ready beyond the end - left by a kill -9, or made
        # before this load - must not become the append target: appends go on at `written`.
        self.commitlog.mapped_file_queue.forget_files_beyond(written)
        self.commitlog.set_wrote_and_flushed(written)
        _await_dispatch(control, written)
        self.commitlog.set_topic_queue_table(_topic_queue_table(settings, self.commitlog,
                                                                written))
        # transientStorePoolEnable on an ASYNC_FLUSH master: appends go to a pool buffer and
        # only committed bytes are published (pybroker/store/transient_pool.py).
        self.commit_step = None
        self.appended_timestamp = control.written_store_timestamp
        if settings.transient_store_pool_enable and not settings.transient_store_pool_active:
            log.warning("appender: transientStorePoolEnable=true is not acted on: Java uses the "
                        "pool only on an ASYNC_FLUSH master (flushDiskType=%s, brokerRole=%s)",
                        settings.flush_disk_type.name, settings.broker_role.name)
        if settings.transient_store_pool_active:
            self.commit_step = CommitStep(
                self.commitlog, TransientStorePool(settings.mapped_file_size_commit_log,
                                                   settings.transient_store_pool_size),
                settings.commit_interval_commit_log, settings.commit_commit_log_least_pages,
                settings.commit_commit_log_thorough_interval, stats, clock_ms)
        self.drainer = append.RingDrainer(
            self.commitlog.queue_offsets, ring_format.status_code(PutStatus.PUT_OK),
            ring_format.status_code(PutStatus.MESSAGE_ILLEGAL),
            ring_format.status_code(PutStatus.MESSAGE_SIZE_EXCEEDED),
            ring_format.status_code(PutStatus.TIMEOUT_CLEAN_QUEUE))
        # Fast failure: each batch is claimed in the control block before it is touched
        # (handshake in pybroker/store/control_block.py); a withdrawn request is never stored.
        self.drainer.bind_control(control.words())
        self.taken_offsets = [control.taken_offset(index) for index in range(len(self.rings))]
        self.cancel_offsets = [control.worker_word_offset(index, "cancel_request_id")
                               for index in range(len(self.rings))]
        self.refuse_disk_full = ring_format.status_code(PutStatus.SERVICE_NOT_AVAILABLE)
        self.refuse_no_file = ring_format.status_code(PutStatus.CREATE_MAPPED_FILE_FAILED)
        self.blocked = False
        self.disk_full = False
        self._keep_lookups(settings)
        self.space = SpaceGuard(settings.commitlog_dir, settings.disk_space_warning_level_ratio,
                                settings.mapped_file_size_commit_log)
        self.deletion_seq = control.topic_deletion_appended
        self.requests_path = requests_path(store_root)
        self.commitlog_min_offset = 0
        # Pages below the written end are done with here: out of this process's page tables.
        self.drop_behind = DropBehind(self.commitlog.mapped_file_queue)
        self.flush_gate = None
        if settings.sync_flush:
            self.flush_gate = PositionWatch(control, "flushed_position", APPENDER.slot)
            self.flush_gate_sleeper = Sleeper(wakes.appender, [self.flush_gate])
        log.info("appender: %d rings, CommitLog written to %d%s", len(self.rings), written,
                 ", transient store pool on" if self.commit_step else "")

    def _bind_words(self, control: ControlBlock) -> None:
        """The control-block words touched on every loop turn or drain, as calls without
        Python frames (docs/architecture/data-plane.md, "Python per send")."""
        counters = self.counters
        self.beat = functools.partial(counters.adder("heartbeats"), 1)
        self.add_appends = counters.adder("appends")
        self.add_batches = counters.adder("batches")
        self.add_wakeups = counters.adder("wakeups")
        self.set_busy_since = counters.storer("busy_since_ms")
        self.set_written_store_timestamp = control.storer("written_store_timestamp")
        self.publish_written = control.publisher("written_position")
        self.load_disk_full = control.loader("disk_full")
        self.load_commitlog_min_offset = control.loader("commitlog_min_offset")
        self.load_topic_deletion_requested = control.loader("topic_deletion_requested")
        self.load_broker_state = control.loader("broker_state")

    def _keep_lookups(self, settings: StoreConfig) -> None:
        """What the loop and the drain keep instead of looking it up on every turn
        (docs/architecture/data-plane.md, "The appender's per-drain Python, cut")."""
        # The file appends go to and the buffer the drainer copies into, kept from drain to
        # drain until the file rolls (not with the pool: its buffer changes on each commit).
        self.target = self.target_view = None
        self.file_size = settings.mapped_file_size_commit_log
        self.ring_used = [ring.used_bytes for ring in self.rings]
        self.disk_full_flag = 0         # the dispatcher's flag as check_store_changes saw it

    def _file_created(self, mapped_file, created: bool, elapsed_ns: int, faults: int) -> None:
        """A CommitLog file created (or mapped, when the allocator made it ready) on the
        append path: its cost is in the profile."""
        stats = self.stats
        if created:
            stats.add(StatsCounter.MAPPED_FILES_CREATED)
        stats.record(StatsHistogram.FILE_CREATE_US, elapsed_ns // 1000)
        stats.record(StatsHistogram.FILE_CREATE_FAULTS, faults)
        log.info("appender: %s %s in %.1f ms (%d page faults)", mapped_file.path,
                 "created" if created else "mapped", elapsed_ns / 1e6, faults)

    def close(self) -> None:
        """Give back the control block's claim words and the CommitLog (at exit)."""
        self.drainer.release_control()
        self._release_target()
        self.commitlog.shutdown(0)

    def check_store_changes(self) -> None:
        """Follow the disk-full flag, the CommitLog min offset and topic deletions."""
        disk_full_flag = self.disk_full_flag = self.load_disk_full()
        min_offset = self.load_commitlog_min_offset()
        requested = self.load_topic_deletion_requested()
        # The dispatcher's cleanup flag, or this process's own look at the disk: once a
        # second and on every new CommitLog file, not only when a cleanup pass runs.
        disk_full = bool(disk_full_flag) or \
            self.space.full(len(self.commitlog.mapped_file_queue.mapped_files))
        if disk_full != self.disk_full:
            self.disk_full = disk_full
            log.warning("appender: disk %s: puts are %s", "full" if disk_full else "free again",
                        "refused" if disk_full else "accepted")
        if min_offset > self.commitlog_min_offset:
            self.commitlog_min_offset = min_offset
            if self.commitlog.mapped_file_queue.forget_files_below(min_offset):
                self._release_target()      # looked up again: never a forgotten file
        if requested != self.deletion_seq:
            self.delete_topics(requested)

    def delete_topics(self, requested: int) -> None:
        """Drop the queue offsets of the requested topics at the current end (between two
        drains, so it equals the published written position) and pass it to the dispatcher."""
        if self.commit_step is not None:
            self.commit(force=True)
        topics = set(read_requested_topics(self.requests_path, self.deletion_seq, requested))
        for key in self.commitlog.topic_queue_table:
            topic, _, queue_id = key.rpartition("-")
            if topic in topics and queue_id.isdigit():
                self.commitlog.remove_topic_queue(topic, int(queue_id))
        self.control.topic_deletion_offset = self.commitlog.max_offset()
        self.control.publish("topic_deletion_appended", requested)
        self.deletion_seq = requested
        self.wakes.dispatcher.signal()

    def run(self) -> None:
        sleep = Sleeper(self.wakes.appender,
                        [ConsumerSide(ring) for ring in self.rings]).frameless()
        terminated = stop_on_sigterm(self.wakes.appender)
        load_disk_full, load_min_offset = self.load_disk_full, self.load_commitlog_min_offset
        load_deletions, space = self.load_topic_deletion_requested, self.space
        queue = self.commitlog.mapped_file_queue
        while True:
            self.beat()
            # What check_store_changes follows, tested inline (C loads, the vDSO clock,
            # attribute reads): the call only when something could have changed - the
            # flag, the min offset, a deletion request, or the disk's own look is due.
            disk_full_flag = load_disk_full()
            if disk_full_flag != self.disk_full_flag or \
                    load_min_offset() > self.commitlog_min_offset or \
                    load_deletions() != self.deletion_seq or \
                    (not disk_full_flag and (space.clock() >= space.next_check or
                                             len(queue.mapped_files) != space.files_count)):
                self.check_store_changes()
            if self.flush_gate is not None:
                self.wait_for_flush()
            # The loop drains until the rings are empty before it sleeps: the last, empty
            # turn costs one load per ring, not a call of drain() (a plain loop: a generator
            # would cost a Python call per turn).
            for used_bytes in self.ring_used:
                if used_bytes():
                    taken = self.drain()
                    break
            else:
                taken = 0
            if taken:
                continue
            step = self.commit_step
            if step is not None and self.commit():
                continue
            if self.load_broker_state() >= BrokerState.STOPPING or terminated():
                if step is not None:
                    self.commit(force=True)
                log.info("appender: stopping at %d", self.commitlog.max_offset())
                return
            timeout = _BLOCKED_WAIT_MS if self.blocked else _IDLE_WAIT_MS
            commit_wait = None if step is None else step.wait_ms(self.clock_ms())
            if sleep(timeout if commit_wait is None else min(timeout, commit_wait)):
                self.add_wakeups(1)

    def wait_for_flush(self) -> None:
        """SYNC_FLUSH: while the flusher has not caught up with the published end, wait for
        it (or ``_FLUSH_GATE_MS``) before draining, so the sends arriving meanwhile go in one
        drain (module docstring)."""
        control = self.control
        written = control.written_position
        if control.flushed_position >= written:
            return
        self.flush_gate.target = written
        if self.flush_gate_sleeper.sleep(_FLUSH_GATE_MS):
            self.counters.add(wakeups=1)

    def commit(self, force: bool = False) -> bool:
        """A commit turn of the transient store pool; True when bytes were committed (and
        published: readers see only committed bytes)."""
        if not self.commit_step.run(force):
            return False
        self.publish()
        return True

    def publish(self, signal: bool = True, end: int | None = None) -> int:
        """Publish the readable end: the CommitLog end (``end`` when the caller has it), or
        with the pool the committed end. ``written_store_timestamp`` only when it covers every
        byte up to that end. Signals the waiters (dispatcher, flusher, ha), or with
        ``signal=False`` returns their mask for the caller to signal."""
        step = self.commit_step
        if step is None:
            position = self.commitlog.max_offset() if end is None else end
        else:
            position = step.committed_where
        if step is None or step.pending() == 0:
            self.set_written_store_timestamp(self.appended_timestamp)
        waiters = self.publish_written(position)
        if position >= self.drop_behind.due_position:
            self.drop_behind.advance(position)
        if signal:
            signal_mask(waiters, self.slots)
        return waiters

    def drain(self) -> int:
        """One group commit over every ring (the loop calls it when one holds requests);
        returns the number of requests taken."""
        self.blocked = False
        store_timestamp = self.clock_ms()
        requests = records = 0
        stats = self.stats
        # Java's pageCacheLockTimeMills: how long the running append has held the CommitLog.
        stats.set(StatsCounter.PAGE_CACHE_LOCK_BEGIN_MS, store_timestamp)
        # The same for remoting workers: a put arriving while this drain is older than
        # osPageCacheBusyTimeOutMills is refused [PC_SYNCHRONIZED] (pybroker/proc/fast_failure.py).
        self.set_busy_since(store_timestamp)
        # The CommitLog end: the kept target's (the last file), else looked up.
        target = self.target
        start_offset = self.commitlog.max_offset() if target is None else \
            target.file_from_offset + target.wrote_position
        started_ns = time.monotonic_ns()       # vDSO clock: no system call
        for index, ring in enumerate(self.rings):
            if ring.used_bytes():       # an idle worker's ring costs one load, not a drain
                taken, appended = self._drain_ring(index, store_timestamp)
                requests += taken
                records += appended
        self.set_busy_since(0)
        stats.set(StatsCounter.PAGE_CACHE_LOCK_BEGIN_MS, 0)
        if not requests:
            return 0
        stats.record(StatsHistogram.APPEND_DRAIN_US, (time.monotonic_ns() - started_ns) // 1000)
        target = self.target
        end = self.commitlog.max_offset() if target is None else \
            target.file_from_offset + target.wrote_position
        appended_bytes = end - start_offset
        stats.add(StatsCounter.PUT_REQUESTS, requests)
        if records:
            stats.add(StatsCounter.PUT_MESSAGES, records)
            stats.add(StatsCounter.PUT_BYTES, appended_bytes)
            stats.add(StatsCounter.GROUP_COMMITS)
            stats.record(StatsHistogram.GROUP_COMMIT_MESSAGES, records)
            stats.record(StatsHistogram.GROUP_COMMIT_BYTES, appended_bytes)
        self.appended_timestamp = store_timestamp
        if self.commit_step is not None:
            self.commit_step.run()     # each drain wakes the commit step, as Java's puts do
        # Published before the completions (an acknowledged message is readable), but the
        # workers waiting for their acknowledgements are woken before the dispatcher.
        waiters = self.publish(signal=False, end=end)
        for index, completions in enumerate(self.completion_rings):
            if completions.commit():
                self.wakes.workers[index].signal()
        if waiters:
            signal_mask(waiters, self.slots)
        if records:
            self.add_appends(records)
        self.add_batches(1)
        return requests

    def _drain_ring(self, index: int, store_timestamp: int) -> tuple[int, int]:
        """Drain one send ring into the CommitLog (the per-request loop runs in C); returns
        (requests taken, records appended)."""
        ring, completions = self.rings[index], self.completion_rings[index]
        refuse = self.refuse_disk_full if self.disk_full else -1
        taken = appended = 0
        while True:
            if refuse >= 0:
                mapped_file = target_view = None
            else:
                mapped_file = self.target
                if mapped_file is not None and mapped_file.wrote_position < self.file_size:
                    target_view = self.target_view
                else:
                    mapped_file, target_view = self._writable()
                if mapped_file is None:
                    refuse = self.refuse_no_file
            stop, requests, records, failed, position, wake_producer = self.drainer.drain(
                ring, completions, target_view,
                mapped_file.wrote_position if mapped_file else 0,
                mapped_file.file_from_offset if mapped_file else 0, store_timestamp, refuse,
                self.taken_offsets[index], self.cancel_offsets[index])
            taken += requests
            appended += records
            if failed:
                self.stats.add(StatsCounter.PUT_FAILED, failed)
            if mapped_file is not None:
                mapped_file.wrote_position = position
            if wake_producer:
                self.wakes.workers[index].signal()
            if stop == append.DRAIN_ROLL:
                self._release_target()
                self.commitlog.roll(mapped_file)
                if self.commit_step is not None:
                    # The rolled file is committed whole and its buffer goes back to the pool
                    # before the next file takes one (published at the end of the drain).
                    self.commit_step.run(force=True)
                continue
            if stop == append.DRAIN_NO_MEMORY:
                raise MemoryError("the appender's topic-queue offset map cannot grow")
            self.blocked = self.blocked or stop == append.DRAIN_BLOCKED
            return taken, appended

    def _writable(self) -> tuple[MappedFile | None, memoryview | None]:
        """The file to append to and the buffer the drainer copies into, kept as the target
        of the next drains (without the pool); (None, None) when no file can be created, or
        the pool gives it no buffer."""
        self._release_target()
        mapped_file = self.commitlog.writable_file()
        if mapped_file is None:
            return None, None
        step = self.commit_step
        if step is not None:
            # Not kept: the pool's buffer is attached per file and given back at its roll.
            if not step.attach(mapped_file):
                return None, None
            return mapped_file, mapped_file.write_target()
        self.target, self.target_view = mapped_file, mapped_file.write_target()
        return self.target, self.target_view

    def _release_target(self) -> None:
        """Forget the kept target (a roll, a file forgotten, the exit): its view is released
        so that the file's map can close."""
        if self.target_view is not None:
            self.target_view.release()
        self.target = self.target_view = None
