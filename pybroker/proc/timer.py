# The timer worker: the 5.x timer's process, only writer of timerlog, timerwheel and timercheck.
"""Main loop of the timer worker (docs/architecture/timer.md).

Forked by the supervisor when ``timerWheelEnable=true``, with its own send ring (the slot after
the supervisor's) and a read-only store reader, like the supervisor's delay service. It runs
:class:`pybroker.broker.timer.TimerStore` in an asyncio loop:

* each turn: the write time follows the clock; one enqueue batch (rmq_sys_wheel_timer's consume
  queue into the timer log and wheel); the messages of the running slot whose own time has come
  or the rest of a slot that ended delivered through the ring (only on a master; a slave
  follows its master's read time and queue offset, which its supervisor writes into the control
  block's timer master line); when nothing is due, one chunk of the nearest used slot not
  begun converted ahead into runs held in memory (broker/timer_ahead.py);
* it sleeps when there is nothing to do until the running slot's next message falls due
  (broker/timer_own.py), the next slot begins, the next enqueue poll
  (``100 x timerPrecisionMs / 1000`` ms, Java's) or the next flush, whichever is first;
* flush (timer log, wheel, checkpoint, metrics) every ``timerFlushIntervalMs`` and after every
  delivered slot; the timer line of the control block is published every turn;
* every 30 s the timer-log files whose messages the CommitLog no longer has are deleted, every
  3 minutes the metrics of deleted topics dropped (topics.json), every
  ``timerProgressLogIntervalMs`` Java's progress line is logged.

A heartbeat task (started with ``start_task``) counts turns in the worker's control-block line
twice a second, so the supervisor's watchdog sees a long slot (a burst) as progress, not a
hang; if it ends by an error the worker stops with exit status 1 and the supervisor ends the
generation. Each turn runs inside a ``Rounds`` guard (pybroker/tasks.py, as Java's timer
services log an error and go on): a failing turn is logged and retried after one enqueue poll,
the 10th in a row or an invariant violation ends the worker with an error. The stop signal
finishes the slot in progress (the appender is stopped after this worker), flushes and exits.
"""
import asyncio
import logging
import signal
import time

from pybroker import clock
from pybroker.broker.timer import TimerStore
from pybroker.proc.children import STOP_SIGNAL, accept_stop
from pybroker._fast.stats import StatsCounter as C
from pybroker._fast.stats import StatsKeyKind as K
from pybroker.store import config_docs, paths
from pybroker.store.timer_checkpoint import CheckpointValues
from pybroker.tasks import Rounds, start_task, within

__all__ = ["run_timer"]

log = logging.getLogger("pybroker.proc.timer")

BEAT_INTERVAL_S = 0.5
TIMER_LOG_CLEAN_INTERVAL_MS = 30_000
METRICS_CLEAN_INTERVAL_MS = 180_000
TPS_WINDOW_MS = 10_000          # Java PerfCounter's window
_WAKE_AFTER_SLOT_MS = 1         # wake 1 ms into the next slot: it has begun for sure


def run_timer(plane, slot: int, stats=None) -> int:
    """The timer worker's main: ``plane`` (proc.dataplane.DataPlane), ``slot`` its ring,
    ``stats`` its section of the instrument region (None: figures go nowhere)."""
    return asyncio.run(_TimerWorker(plane, slot, stats).run())


class _TimerWorker:
    def __init__(self, plane, slot: int, stats):
        self.stats = stats
        self.plane = plane
        self.config = plane.config
        self.control = plane.control
        self.slot = slot
        self.stopping = asyncio.Event()
        self.attachment = None
        self.exit_status = 0
        self._due: dict[str, int] = {}        # next flush, clean-ups and progress line (ms)
        self._tps = _Tps()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(STOP_SIGNAL, self.stopping.set)
        accept_stop()
        attachment = self.attachment = self.plane.timer_attachment()
        attachment.start(loop, lambda moved: None)
        slave = self.config.store.is_slave
        engine = TimerStore(self.config.store, attachment.reader,
                            None if slave else attachment.putter, dequeue_enabled=not slave,
                            stats=self.stats)
        store = self.config.store
        if store.timer_precision_ms != store.timer_precision_effective_ms:
            log.warning("timerPrecisionMs=%d is used as %d ms (Java keeps 100, 200, 500 or "
                        "1000, the largest not above the value)", store.timer_precision_ms,
                        store.timer_precision_effective_ms)
        counters = self.control.worker(self.slot)
        beat = start_task(self._beat(counters), "the timer heartbeat", self._fail_stop, log)
        try:
            await loop.run_in_executor(None, engine.recover)
            log.info("timer: recovered, read time %d, enqueue offset %d (%s)",
                     engine.curr_read_time_ms, engine.curr_queue_offset,
                     "slave: no delivery" if slave else "master")
            await self._serve(engine)
            if self.exit_status:
                return self.exit_status
            engine.flush()
            log.info("timer: stopped at read time %d, enqueue offset %d",
                     engine.commit_read_time_ms, engine.commit_queue_offset)
        finally:
            beat.cancel()
            engine.close()
            attachment.close()
            loop.remove_signal_handler(STOP_SIGNAL)
            signal.signal(STOP_SIGNAL, signal.SIG_DFL)
        return 0

    def _fail_stop(self, error: BaseException | None) -> None:
        """Stop with exit status 1 (the supervisor ends the generation): the heartbeat task
        ended by an error (logged by its task)."""
        self.exit_status = 1
        self.stopping.set()

    async def _beat(self, counters) -> None:
        while True:
            counters.beat()
            await asyncio.sleep(BEAT_INTERVAL_S)

    async def _serve(self, engine: TimerStore) -> None:
        store = self.config.store
        precision = engine.precision_ms
        poll_ms = max(100 * precision // 1000, 1)
        now = clock.now_ms()
        due = self._due = {"flush": now + store.timer_flush_interval_ms,
                           "clean": now + TIMER_LOG_CLEAN_INTERVAL_MS,
                           "metrics_clean": now + METRICS_CLEAN_INTERVAL_MS,
                           "progress": now + store.timer_progress_log_interval_ms}
        rounds = Rounds("the timer", retry_delay_s=poll_ms / 1000, logger=log)
        while not self.stopping.is_set():
            busy = False
            with rounds:
                busy = await self._turn(engine)
            if rounds.failures:
                await self._pause(poll_ms)     # the retry delay after a failing turn
            elif busy:
                await asyncio.sleep(0)        # more to do: let completions in, go on
            else:
                now = clock.now_ms()
                wake = engine.curr_write_time_ms + precision + _WAKE_AFTER_SLOT_MS
                next_due = engine.next_due_ms()     # the running slot's next message
                if next_due is not None:
                    wake = min(wake, next_due)
                await self._pause(min(wake - now, poll_ms, due["flush"] - now))

    async def _pause(self, wait_ms: int) -> None:
        try:
            await within(self.stopping.wait(), max(wait_ms, 1) / 1000)
        except TimeoutError:
            pass

    async def _turn(self, engine: TimerStore) -> bool:
        """One turn of the worker; True when there is more to do at once."""
        store = self.config.store
        due = self._due
        self._follow_master(engine)
        engine.move_write_time()
        read = await engine.enqueue()
        delivered = await engine.dequeue()
        # Nothing due: convert a chunk of the nearest slot not begun (broker/timer_ahead.py).
        converted = delivered < 0 and engine.convert_ahead_step()
        now = clock.now_ms()
        if delivered == 1 or now >= due["flush"]:
            engine.flush()
            due["flush"] = now + store.timer_flush_interval_ms
        if now >= due["clean"]:
            engine.delete_expired_timer_log()
            due["clean"] = now + TIMER_LOG_CLEAN_INTERVAL_MS
        if now >= due["metrics_clean"]:
            self._clean_metrics(engine)
            due["metrics_clean"] = now + METRICS_CLEAN_INTERVAL_MS
        if now >= due["progress"]:
            log.info("[%s]%s", store.broker_role, progress_line(engine))
            due["progress"] = now + store.timer_progress_log_interval_ms
        self._publish(engine, now)
        return bool(read or delivered >= 0 or converted)

    def _follow_master(self, engine: TimerStore) -> None:
        """A slave takes what its supervisor last read from the master (seqlock line)."""
        if engine.dequeue_enabled:
            return
        values = self.control.timer_master().read()
        if values is None:
            return
        _seq, read_time, queue_offset, state_version, version_timestamp, counter = values
        engine.follow_master(CheckpointValues(
            last_read_time_ms=read_time, master_timer_queue_offset=queue_offset,
            state_version=state_version, version_timestamp=version_timestamp,
            version_counter=counter))

    def _clean_metrics(self, engine: TimerStore) -> None:
        path = paths.config_path(self.config.store.store_path_root_dir, paths.TOPICS_CONFIG)
        try:
            topics = config_docs.load_topics(path).topic_config_table
        except Exception as error:        # the metadata service owns the file: just skip
            log.warning("timer: topics.json unreadable for the metrics clean-up: %s", error)
            return
        engine.clean_metrics(topics)

    def _publish(self, engine: TimerStore, now: int) -> None:
        figures = engine.figures
        enqueue_tps, dequeue_tps = self._tps.update(now, figures.enqueued + figures.enqueued_due,
                                                    figures.dequeued)
        self.control.timer().set(
            read_time_ms=engine.commit_read_time_ms, write_time_ms=engine.curr_write_time_ms,
            queue_offset=engine.curr_queue_offset,
            enqueue_tps_milli=int(enqueue_tps * 1000), dequeue_tps_milli=int(dequeue_tps * 1000),
            last_enqueue_ms=engine.last_enqueue_ms,
            last_enqueue_store_ms=engine.last_enqueue_store_ms,
            slots_done=figures.slots_delivered)
        # The bytes the appender will write at once when the slots planned ahead fall due:
        # the flusher faults their CommitLog pages in ahead (store/prefault.py).
        self.control.timer_ahead().set(coming_bytes=engine.coming_bytes())
        self._publish_stats(figures)

    def _publish_stats(self, figures) -> None:
        """The counters and per-topic counts of the timer's section (it is their only
        writer: cumulative values are set, once a turn)."""
        stats = self.stats
        if stats is None or not stats.enabled:
            return
        for counter, value in ((C.TIMER_ENQUEUED, figures.enqueued),
                               (C.TIMER_DEQUEUED, figures.dequeued),
                               (C.TIMER_ROLLED, figures.rolled),
                               (C.TIMER_CANCELLED, figures.cancelled),
                               (C.TIMER_DUPLICATES_DROPPED, figures.duplicates_dropped),
                               (C.TIMER_UNREADABLE, figures.unreadable),
                               (C.TIMER_PUT_DROPPED, figures.put_dropped),
                               (C.TIMER_DUE_AT_ENQUEUE, figures.enqueued_due)):
            stats.set(counter, value)
        for kind, table in ((K.KEY_TIMER_ENQUEUE, figures.enqueued_by_topic),
                            (K.KEY_TIMER_DEQUEUE, figures.delivered_by_topic)):
            for topic, count in table.items():
                entry = stats.key(kind, 0, topic)
                if entry >= 0:
                    stats.key_set_words(entry, count, 0)
        for (topic, bucket), (count, seconds) in figures.delay_latency.items():
            entry = stats.key(K.KEY_DELAY_LATENCY, bucket, topic)
            if entry >= 0:
                stats.key_set_words(entry, count, seconds)


class _Tps:
    """Java PerfCounter's last TPS: messages per second over windows of TPS_WINDOW_MS, 0 when
    the last window ended more than 3 s after it should have."""

    def __init__(self):
        self.start_ms = clock.now_ms()
        self.start_counts = (0, 0)
        self.last = (0.0, 0.0)
        self.last_ms = self.start_ms

    def update(self, now_ms: int, enqueued: int, dequeued: int) -> tuple[float, float]:
        elapsed = now_ms - self.start_ms
        if elapsed >= TPS_WINDOW_MS:
            self.last = ((enqueued - self.start_counts[0]) * 1000 / elapsed,
                         (dequeued - self.start_counts[1]) * 1000 / elapsed)
            self.start_ms, self.start_counts, self.last_ms = now_ms, (enqueued, dequeued), now_ms
        if now_ms - self.last_ms > TPS_WINDOW_MS + 3000:
            return 0.0, 0.0
        return self.last


def progress_line(engine: TimerStore) -> str:
    """Java's periodic "Timer progress-check" line."""
    def text(time_ms: int) -> str:
        return time.strftime("%m-%d %H:%M:%S", time.localtime(time_ms / 1000))
    behind_master = engine.checkpoint.values.master_timer_queue_offset \
        - engine.curr_queue_offset
    return (f"Timer progress-check commitRead:[{text(engine.commit_read_time_ms)}] "
            f"currRead:[{text(engine.curr_read_time_ms)}] "
            f"currWrite:[{text(engine.curr_write_time_ms)}] "
            f"readBehind:{(engine.now_ms() - engine.curr_read_time_ms) // 1000} "
            f"currReadOffset:{engine.curr_queue_offset} "
            f"offsetBehind:{engine.enqueue_behind_messages()} "
            f"behindMaster:{behind_master} "
            f"allCongestNum:{engine.congest_num()} "
            f"enqExpiredStoreTime:{text(engine.last_enqueue_store_ms)}")
