# The 5.x timer: parks rmq_sys_wheel_timer messages in the timer log/wheel, delivers due ones.
"""Java 5.3.3's TimerMessageStore, single-threaded (docs/architecture/timer.md).

The send path parks a timer message on ``rmq_sys_wheel_timer`` queue 0 with ``TIMER_OUT_MS``
(its slot time), ``REAL_TOPIC`` and ``REAL_QID`` (broker/timer_message.py). :class:`TimerStore`
then does what Java's services do, in one task of the timer worker:

* **enqueue** (Java TimerEnqueueGet/PutService): reads the wheel topic's consume queue from the
  enqueue offset and appends one timer-log unit per message, chained into the wheel slot of its
  time (a cancel mark counts -1). A time past the window of ``timerRollWindowSlot`` slots is
  parked at the window's end (or half of it) with the ROLL bit: when that slot comes the message
  is put back on the wheel topic and parked again (``TIMER_ROLL_TIMES`` + 1). On a master a
  message whose slot the dequeue has already passed is delivered at once (``TIMER_ENQUEUE_MS``
  = Long.MAX; Java: whose slot is before the write time, which differs only while the dequeue
  catches up).
* **dequeue** (Java TimerDequeueGet/GetMessage/PutMessageService): reads the chain of the slot
  at the read time, drops the messages a cancel mark of the slot names (``REAL_TOPIC+UNIQ_KEY``),
  and re-puts the others to their real topic and queue through the CommitLog writer (the
  worker's send ring) with ``TIMER_ENQUEUE_MS``, ``TIMER_DEQUEUE_MS`` added and every other
  property kept: while the slot runs, each message once its own time has come (Java: all at
  the slot's end; broker/timer_own.py); once the write time (now, rounded down to the
  precision) passed the slot, the rest, and the read time moves one slot.
  Only a master dequeues; a slave enqueues up to its master's offset and follows its read time.
* **flush** (Java TimerFlushService): timer log, wheel, then the checkpoint (so the checkpoint
  never names units not durable), and the metrics document when it changed.
* **recover** (Java recover): from the checkpoint, walks the timer log from one file before its
  flushed position, revises the wheel, cuts a damaged tail, and restarts the enqueue from the
  checkpoint's queue offset: what was enqueued or delivered after the last checkpoint is done
  again (at-least-once, as Java). pybroker flushes after every slot it delivered and drops a
  second unit of the same message within one slot, so a kill -9 repeats at most the slot in
  progress and the enqueues of one flush interval that rolled (docs/compatibility.md).

Java's worker threads become batches here: one enqueue batch or one slot per turn, puts of a
slot grouped per real queue into runs and awaited together (the ring is the bound).
"""
import logging
from collections.abc import Callable, Iterator
from typing import NamedTuple, Protocol, cast

import numpy as np

from pybroker import clock
from pybroker._fast import jhash
from pybroker._fast import record as record_codec
from pybroker._fast import timer_reput
from pybroker.broker.interfaces import AssemblingPutter, Putter
from pybroker.broker.reput import RePut, reput_message
from pybroker.broker.timer_ahead import AheadRuns
from pybroker.broker.timer_message import TIMER_TOPIC, delete_key
from pybroker.broker.timer_own import OWN_MS_NONE, OwnTimes, SlotInProgress, own_time
from pybroker.broker.timer_puts import TimerFigures, TimerPuts
from pybroker.broker.timer_runs import (DEQUEUE_CHUNK, TEXT_PATH_NAMES,
                                        AssembledRun, CChunk, Prepared, Run, SlotPlan, Wanted,
                                        assembled, convert_c, prepared, runs_of)
from pybroker.protocol.constants import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, Property
from pybroker.protocol.properties import decode_properties
from pybroker._fast.stats import StatsHistogram, StatsWriter
from pybroker.stats.metric_names import DELAY_LATENCY_BUCKETS_S, bucket_of
from pybroker.stats.recorder import Recorder
from pybroker.stats.region import private_writer
from pybroker.store import layout, paths
from pybroker.store.read_api import SelectResult, SpansResult
from pybroker.store.settings import StoreConfig
from pybroker.store.timer_checkpoint import CheckpointValues, TimerCheckpoint
from pybroker.store.timer_log import SlotUnits, TimerLog, encode_unit
from pybroker.store.timer_metrics import load_timer_metrics, save_timer_metrics
from pybroker.store.timer_wheel import TimerWheel

__all__ = ["TimerStore", "TimerReader", "TimerFigures", "LONG_MAX", "delivered_until_ms"]

log = logging.getLogger("pybroker.broker.timer")

LONG_MAX = (1 << 63) - 1
ENQUEUE_BATCH_MAX = 1024        # consume-queue units read per enqueue turn
REVISE_QUEUE_OFFSET_TRIES = 20_000


# A properties string holding this was re-put by the timer before (a roll): the map path.
_ROLLED_MARK = Property.TIMER_ENQUEUE_MS + NAME_VALUE_SEPARATOR
_AMBIGUOUS = object()


def _value(text: str, name: str):
    """The value Java's string2messageProperties gives ``name`` in ``text``: None when
    absent, _AMBIGUOUS when the last pair has an empty value (the map path decides)."""
    marker = f"{PROPERTY_SEPARATOR}{name}{NAME_VALUE_SEPARATOR}"
    at = text.rfind(marker)
    if at >= 0:
        start = at + len(marker)
    elif text.startswith(marker[1:]):
        start = len(marker) - 1
    else:
        return None
    end = text.find(PROPERTY_SEPARATOR, start)
    value = text[start:] if end < 0 else text[start:end]
    return value if value else _AMBIGUOUS


def _no_times(wanted: Wanted) -> np.ndarray:
    """No own time read (a slot that has ended puts every row at once)."""
    return np.full(len(wanted.offsets), OWN_MS_NONE, np.int64)


def delivered_until_ms(read_time_ms: int, enqueue_offset: int, last_enqueue_store_ms: int,
                       wheel_max_offset: int) -> int:
    """The time up to which every parked message has been put to its real topic (POP's revive
    reads its check-points and acks by it): the read time, as every slot before it is
    delivered and a message due at t sits in the slot before t's next whole precision; while
    the enqueue is behind (``enqueue_offset`` below the wheel topic's ``wheel_max_offset``),
    at most the store time of the last message enqueued, as one still waiting was put after
    it and is due after it was put. 0 before the timer published its read time."""
    if enqueue_offset >= wheel_max_offset:
        return read_time_ms
    return min(read_time_ms, last_enqueue_store_ms)


class TimerReader(Protocol):
    """What the timer reads of the store (MessageStoreReader in the worker, MessageStore in
    tests)."""

    def read_queue_units(self, topic: str, queue_id: int, queue_offset: int,
                         count_max: int) -> tuple[np.ndarray, np.ndarray]: ...

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def look_message_by_offset(self, physical_offset: int) -> SelectResult | None: ...

    def read_spans(self, physical_offsets: np.ndarray, sizes: np.ndarray) -> SpansResult: ...

    def commitlog_min_offset(self) -> int: ...


class WheelMessage(NamedTuple):
    """What enqueue takes from a wheel-topic record."""
    offset_py: int
    size_py: int
    delayed_ms: int
    store_timestamp: int
    born_timestamp: int
    properties: dict[str, str]


class TimerStore(TimerPuts):
    """The timer of one broker (see the module docstring).

    ``reader`` reads the store, ``putter`` re-puts (a master's); ``dequeue_enabled`` is False
    on a slave. ``now_ms`` is the wall clock (ms). Call :meth:`recover` once, then
    :meth:`enqueue`, :meth:`dequeue` and :meth:`flush` as the worker's loop does, and
    :meth:`close` at the end.
    """

    def __init__(self, settings: StoreConfig, reader: TimerReader, putter: Putter | None, *,
                 dequeue_enabled: bool, now_ms: Callable[[], int] = clock.now_ms,
                 stats: StatsWriter | None = None):
        root = settings.store_path_root_dir
        self.settings = settings
        self.reader = reader
        self.putter = putter
        # A putter that writes a held chunk's runs where it puts them (RingPutter: straight
        # into the send ring) takes them unassembled; another gets their bytes.
        self.assembling: AssemblingPutter | None = cast(AssemblingPutter, putter) \
            if callable(getattr(putter, "put_assembled", None)) else None
        self.dequeue_enabled = dequeue_enabled and putter is not None
        self.now_ms = now_ms
        self.precision_ms = settings.timer_precision_effective_ms
        self.roll_window_slots = settings.timer_roll_window_slots
        self.timer_log = TimerLog(paths.timerlog_dir(root), settings.mapped_file_size_timer_log)
        if not self.timer_log.load():
            raise ValueError(f"{paths.timerlog_dir(root)}: a file is not "
                             f"mappedFileSizeTimerLog={settings.mapped_file_size_timer_log} "
                             "bytes")
        self.wheel = TimerWheel(paths.timer_wheel_path(root), self.precision_ms)
        self.checkpoint = TimerCheckpoint(paths.config_path(root, paths.TIMER_CHECK_CONFIG))
        self.metrics_path = paths.config_path(root, paths.TIMER_METRICS_CONFIG)
        self.metrics = load_timer_metrics(self.metrics_path)
        self.metrics_dirty = False
        self._metric_deltas: dict[str, int] = {}
        self.figures = TimerFigures()
        # The timer's section of the instrument region: lateness and slot-size histograms
        # (the worker publishes the counters from ``figures``).
        self.stats = stats if stats is not None else private_writer()
        self.recorder = Recorder(self.stats)
        self.curr_read_time_ms = 0
        self.commit_read_time_ms = 0
        self.curr_write_time_ms = 0
        self.curr_queue_offset = 0
        self.commit_queue_offset = 0
        self._last_commit = (-1, -1)
        self.last_enqueue_ms = 0           # wall time of the last enqueued message
        self.last_enqueue_store_ms = 0     # its store time (Java's enqueue latency)
        self.ahead = AheadRuns(settings.timer_preconvert_max_bytes, self.precision_ms)
        self.own_times = OwnTimes()                # parked messages' own times, per slot
        self.in_slot: SlotInProgress | None = None  # the slot at the read time, while it runs
        # The last enqueue read the wheel topic to its end: every cancel mark stored before
        # that read is in the wheel (the dequeue puts a running slot's messages only then).
        self._enqueue_caught_up = False

    # --- recovery (Java recover, recoverAndRevise, reviseQueueOffset) ---------------------------
    def recover(self) -> None:
        """Bring timer log, wheel and positions back from the checkpoint (see the module doc)."""
        values = self.checkpoint.values
        last_flush = values.last_timerlog_flush_pos
        files = self.timer_log.files.mapped_files
        if files:
            last_flush -= self.timer_log.file_size
        process_offset = self._recover_and_revise(max(last_flush, 0), whole_files=True)
        queue_offset = self._revise_queue_offset(process_offset)
        offset = values.last_timer_queue_offset if queue_offset < 0 else queue_offset + 1
        offset = min(offset, values.master_timer_queue_offset)
        low = self.reader.get_min_offset_in_queue(TIMER_TOPIC, 0)
        high = self.reader.get_max_offset_in_queue(TIMER_TOPIC, 0)
        if low >= 0 and offset < low:
            log.warning("Timer currQueueOffset:%d is smaller than minOffsetInQueue:%d",
                        offset, low)
            offset = low
        elif low >= 0 and offset > high:
            log.warning("Timer currQueueOffset:%d is larger than maxOffsetInQueue:%d",
                        offset, high)
            offset = high
        self.curr_queue_offset = offset
        read_time = values.last_read_time_ms
        oldest = self._format(self.now_ms()) - (layout.TIMER_WHEEL_SLOTS
                                                - layout.TIMER_BLANK_SLOTS) * self.precision_ms
        self.curr_read_time_ms = max(read_time, oldest)
        min_first = self.wheel.check_phy_pos(self.curr_read_time_ms, process_offset)
        if min_first < process_offset:
            log.warning("Timer recheck because of minFirst:%d processOffset:%d", min_first,
                        process_offset)
            self._recover_and_revise(min_first, whole_files=False)
        log.info("Timer recover ok currReadTimerMs:%d currQueueOffset:%d checkQueueOffset:%d "
                 "processOffset:%d", self.curr_read_time_ms, self.curr_queue_offset,
                 values.last_timer_queue_offset, process_offset)
        self.commit_read_time_ms = self.curr_read_time_ms
        self.commit_queue_offset = self.curr_queue_offset
        self.move_write_time()
        self.prepare_checkpoint()

    def _recover_and_revise(self, begin_offset: int, whole_files: bool) -> int:
        """Walk the timer log from ``begin_offset`` and point every unit's slot at it; with
        ``whole_files`` cut the log where the walk stopped. Returns that offset."""
        end, offsets, delayed = self.timer_log.scan(begin_offset, whole_files)
        revise = self.wheel.revise_slot
        for offset, delayed_ms in zip(offsets.tolist(), delayed.tolist(), strict=True):
            revise(delayed_ms, -2, offset, True)
        if whole_files:
            self.timer_log.truncate(end)
        return end

    def _revise_queue_offset(self, process_offset: int) -> int:
        """The wheel-topic queue offset of the last unit's message, -1 when unknown."""
        unit = self.timer_log.unit(process_offset - layout.TIMERLOG_UNIT_SIZE)
        if unit is None:
            return -1
        selected = self.reader.look_message_by_offset(unit.offset_py)
        if selected is None:
            return -1
        try:
            decoded = record_codec.decode(selected.buffer, 0)
            queue_offset, queue_id = decoded.queue_offset, decoded.queue_id
            del decoded
        finally:
            selected.release()
        probe = queue_offset
        for _ in range(REVISE_QUEUE_OFFSET_TRIES):
            if probe < 0:
                break
            physical, sizes = self.reader.read_queue_units(TIMER_TOPIC, queue_id, probe, 1)
            if len(physical) and (int(physical[0]), int(sizes[0])) == \
                    (unit.offset_py, unit.size_py):
                return probe
            probe -= 1
        log.warning("reviseQueueOffset: no consume-queue unit for %d/%d; using the record's %d",
                    unit.offset_py, unit.size_py, queue_offset)
        return queue_offset

    # --- positions -----------------------------------------------------------------------------
    def _format(self, time_ms: int) -> int:
        return time_ms // self.precision_ms * self.precision_ms

    def move_write_time(self) -> None:
        """The write time follows the clock, rounded down to the precision (never back)."""
        now = self._format(self.now_ms())
        if self.curr_write_time_ms < now:
            self.curr_write_time_ms = now

    def _move_read_time(self) -> None:
        self.curr_read_time_ms += self.precision_ms
        self.commit_read_time_ms = self.curr_read_time_ms

    def follow_master(self, master: CheckpointValues) -> None:
        """A slave takes its master's read time, queue offset and version (Java
        SlaveSynchronize.syncTimerCheckPoint); the next flush writes them."""
        values = self.checkpoint.values
        values.last_read_time_ms = master.last_read_time_ms
        values.master_timer_queue_offset = master.master_timer_queue_offset
        values.state_version = master.state_version
        values.version_timestamp = master.version_timestamp
        values.version_counter = master.version_counter

    def _sync_read_time(self) -> None:
        self.curr_read_time_ms = self.checkpoint.values.last_read_time_ms
        self.commit_read_time_ms = self.curr_read_time_ms

    def prepare_checkpoint(self) -> None:
        """Java prepareTimerCheckPoint: the positions the next checkpoint write holds."""
        values = self.checkpoint.values
        values.last_timerlog_flush_pos = self.timer_log.flushed_where
        values.last_read_time_ms = self.commit_read_time_ms
        if self.dequeue_enabled:
            values.master_timer_queue_offset = self.commit_queue_offset
            commit = (self.commit_read_time_ms, self.commit_queue_offset)
            if commit != self._last_commit:
                values.next_version(0)
                self._last_commit = commit
        values.last_timer_queue_offset = min(self.commit_queue_offset,
                                             values.master_timer_queue_offset)

    def flush(self) -> None:
        """Timer log, wheel, checkpoint (in that order: the checkpoint never names units that
        are not durable), then the metrics document when it changed."""
        self.timer_log.flush()
        self.wheel.flush()
        self.prepare_checkpoint()
        self.checkpoint.flush()
        if self.metrics_dirty:
            save_timer_metrics(self.metrics_path, self.metrics)
            self.metrics_dirty = False

    # --- figures -------------------------------------------------------------------------------
    def congest_num(self) -> int:
        """Messages parked from the read time on (Java getAllCongestNum)."""
        return self.wheel.all_num(self.curr_read_time_ms)

    def enqueue_behind_messages(self) -> int:
        """Wheel-topic messages not yet enqueued (Java getEnqueueBehindMessages)."""
        return self.reader.get_max_offset_in_queue(TIMER_TOPIC, 0) - self.curr_queue_offset

    def _add_metric(self, topic: str | None, value: int) -> None:
        """Java addMetric for a message of real topic ``topic``, gathered per turn
        (:meth:`_apply_metrics`) rather than one document version per message."""
        if topic is None or not self.dequeue_enabled:
            return       # a slave's metrics are its master's (broker/slave_sync.py writes them)
        self._metric_deltas[topic] = self._metric_deltas.get(topic, 0) + value

    def _apply_metrics(self) -> None:
        for topic, delta in self._metric_deltas.items():
            if delta:
                self.metrics.add(topic, delta)
                self.metrics_dirty = True
        self._metric_deltas.clear()

    def close(self) -> None:
        """Unmap the timer files (no flush: call :meth:`flush` first)."""
        self.timer_log.close()
        self.wheel.close()
        self.checkpoint.close()

    # --- enqueue (Java enqueue, TimerEnqueuePutService, doEnqueue) ------------------------------
    def _may_enqueue(self) -> bool:
        if self.settings.timer_stop_enqueue:
            return False
        if not self.dequeue_enabled and \
                self.curr_queue_offset >= self.checkpoint.values.master_timer_queue_offset:
            return False           # a slave enqueues no further than its master
        return True

    async def enqueue(self) -> int:
        """One batch of wheel-topic messages into the wheel; returns how many were read."""
        if not self._may_enqueue():
            self.commit_queue_offset = self.curr_queue_offset
            self._enqueue_caught_up = True     # nothing more comes into the wheel
            return 0
        low = self.reader.get_min_offset_in_queue(TIMER_TOPIC, 0)
        if low < 0:
            return 0
        if self.curr_queue_offset < low:
            log.warning("Timer currQueueOffset:%d is smaller than minOffsetInQueue:%d",
                        self.curr_queue_offset, low)
            self.curr_queue_offset = low
        count = ENQUEUE_BATCH_MAX
        if not self.dequeue_enabled:
            count = min(count, self.checkpoint.values.master_timer_queue_offset
                        - self.curr_queue_offset)
        physical, sizes = self.reader.read_queue_units(TIMER_TOPIC, 0, self.curr_queue_offset,
                                                       count)
        self._enqueue_caught_up = len(physical) < count
        due: list[WheelMessage] = []
        for offset_py, size_py in zip(physical.tolist(), sizes.tolist(), strict=True):
            message = self._read_wheel_message(offset_py, size_py)
            if message is not None:
                self.last_enqueue_ms = self.now_ms()
                self.last_enqueue_store_ms = message.store_timestamp
                self._count_enqueue(message)
                # Java delivers at once whatever is due by the write time; here only what
                # the dequeue has passed: a slot it is still to visit takes the message, so a
                # second unit after a restart is dropped there (docs/compatibility.md).
                if self.dequeue_enabled and message.delayed_ms < self.curr_read_time_ms:
                    due.append(message)
                else:
                    self._do_enqueue(message)
            self.curr_queue_offset += 1
        if due:
            await self._deliver_due(due)
        self._apply_metrics()
        self.commit_queue_offset = self.curr_queue_offset
        self.move_write_time()
        return len(physical)

    def _read_wheel_message(self, offset_py: int, size_py: int) -> WheelMessage | None:
        """A wheel-topic record's timer facts; None (skipped, counted) when it cannot be read
        or has no usable TIMER_OUT_MS (Java would retry it forever)."""
        if size_py == layout.CQ_FILLER_SIZE:
            return None
        selected = self.reader.look_message_by_offset(offset_py)
        if selected is None:
            self.figures.unreadable += 1
            return None
        try:
            buffer = selected.buffer
            properties = decode_properties(record_codec.read_properties(buffer, 0))
            born_timestamp, store_timestamp = record_codec.read_timestamps(buffer, 0)
        finally:
            selected.release()
        try:
            delayed_ms = int(properties[Property.TIMER_OUT_MS])
        except (KeyError, ValueError):
            log.warning("timer: message at %d on %s has no usable %s; skipped", offset_py,
                        TIMER_TOPIC, Property.TIMER_OUT_MS)
            self.figures.unreadable += 1
            return None
        return WheelMessage(offset_py, size_py, delayed_ms, store_timestamp, born_timestamp,
                            properties)

    def _count_enqueue(self, message: WheelMessage) -> None:
        """Java's per-message enqueue figures, for every wheel-topic message read: the
        enqueue count and the delay set (delivery time - birth, whole seconds; a delivery
        time before the birth, a client clock ahead of the broker's, counts as 0) under the
        real topic."""
        real_topic = message.properties.get(Property.REAL_TOPIC)
        if real_topic is None:
            return
        figures = self.figures
        figures.enqueued_by_topic[real_topic] = figures.enqueued_by_topic.get(real_topic, 0) + 1
        seconds = max(message.delayed_ms - message.born_timestamp, 0) // 1000
        entry = figures.delay_latency.setdefault(
            (real_topic, bucket_of(seconds, DELAY_LATENCY_BUCKETS_S)), [0, 0])
        entry[0] += 1
        entry[1] += seconds

    def _do_enqueue(self, message: WheelMessage) -> None:
        """Append the message's unit and chain it into its slot (rolled when too far)."""
        write_ms = self.curr_write_time_ms
        delayed = message.delayed_ms
        window_ms = self.roll_window_slots * self.precision_ms
        magic = layout.TIMER_MAGIC_DEFAULT
        if delayed - write_ms >= window_ms:
            magic |= layout.TIMER_MAGIC_ROLL
            if delayed - write_ms - window_ms < self.roll_window_slots // 3 * self.precision_ms:
                delayed = write_ms + self.roll_window_slots // 2 * self.precision_ms
            else:
                delayed = write_ms + window_ms
        properties = message.properties
        is_delete = Property.TIMER_DEL_UNIQKEY in properties
        if is_delete:
            magic |= layout.TIMER_MAGIC_DELETE
        real_topic = properties.get(Property.REAL_TOPIC)
        slot = self.wheel.slot(delayed)
        position = self.timer_log.append(encode_unit(
            slot.last_pos, magic, write_ms, delayed, message.offset_py, message.size_py,
            jhash.java_hash(real_topic) if real_topic is not None else 0))
        self.wheel.put_slot(delayed, position if slot.first_pos == -1 else slot.first_pos,
                            position, slot.num - 1 if is_delete else slot.num + 1, slot.magic)
        self._add_metric(real_topic, -1 if is_delete else 1)
        self.figures.enqueued += 1
        self.ahead.note(self._format(delayed), is_delete)   # a mark: held runs not used
        if magic == layout.TIMER_MAGIC_DEFAULT and self.dequeue_enabled:
            self.own_times.add(delayed, message.offset_py, own_time(
                properties, message.store_timestamp, delayed, self.precision_ms))

    async def _deliver_due(self, due: list[WheelMessage]) -> None:
        """Messages whose slot is already past go out at once (Java marks them
        TIMER_ENQUEUE_MS = Long.MAX_VALUE); a cancel mark among them is dropped."""
        runs = self._convert_all(Wanted(
            np.array([message.offset_py for message in due], np.int64),
            np.array([message.size_py for message in due], np.int64),
            np.full(len(due), LONG_MAX, np.int64), np.zeros(len(due), bool)), None)
        self.figures.enqueued_due += sum(run.messages for run in runs)
        await self._put_all(runs, None)

    # --- dequeue (Java dequeue, TimerDequeueGetMessageService, PutMessageService) -------------
    async def dequeue(self) -> int:
        """Deliver the slot at the read time: while it runs, each message once its own time
        has come (broker/timer_own.py); once the write time passed it, the rest, and the read
        time moves one slot. -1 nothing to do, 0 an empty slot skipped, 1 a slot delivered,
        2 messages of the running slot put."""
        if not self.dequeue_enabled:
            self._sync_read_time()
            return -1
        slot_ms = self.curr_read_time_ms
        if self.settings.timer_stop_dequeue or slot_ms > self.curr_write_time_ms:
            return -1
        over = slot_ms < self.curr_write_time_ms
        slot = self.wheel.slot(slot_ms)
        if slot.time_ms == -1:
            if not over:
                return -1
            # Java moves one empty slot per turn; the walk to the next used slot (after a
            # restart: up to a whole wheel of them) is one scan here.
            self.curr_read_time_ms = self.wheel.next_used(slot_ms, self.curr_write_time_ms)
            self.commit_read_time_ms = self.curr_read_time_ms
            self.own_times.forget_before(self.curr_read_time_ms)
            return 0
        if not over and not self._enqueue_caught_up:
            return -1       # a cancel mark sent before a message's own time may be unread
        state = self._slot_in_progress(slot_ms, slot, over)
        now = self.now_ms()
        until_ms = LONG_MAX if over else now
        if not over and (state.next_ms is None or state.next_ms > now):
            return -1
        slot_end_ms = slot_ms + self.precision_ms
        try:
            await self._put_chunks(self._due_runs(state, until_ms), slot_end_ms)
        except BaseException:
            self.in_slot = None     # delivered again from the timer log by the next turn
            raise
        state.recount()
        if not over:
            self._apply_metrics()
            return 2
        plan = state.plan
        self.figures.unreadable += plan.unreadable
        self.figures.duplicates_dropped += plan.duplicates
        for properties in state.cancelled.values():
            # A cancel mark that matched nothing here: its -1 is given back (Java does it
            # when the next slot's first cancel mark comes).
            self._add_metric(properties.get(Property.REAL_TOPIC), 1)
        self._apply_metrics()
        self.figures.slots_delivered += 1
        self.stats.record(StatsHistogram.TIMER_SLOT_MESSAGES, int((~plan.is_delete).sum()))
        self.in_slot = None
        self.own_times.forget(slot_ms)
        self._move_read_time()
        return 1

    def coming_bytes(self) -> int:
        """About the CommitLog bytes the timer puts soon (store/prefault.py faults them in):
        the slots planned ahead and what the running slot has not put."""
        coming = self.ahead.coming_bytes(self.curr_write_time_ms)
        state = self.in_slot
        if state is not None:
            coming += int(state.plan.wanted.sizes[~state.done].sum())
        return coming

    def next_due_ms(self) -> int | None:
        """When the running slot's next message falls due (the worker wakes then), or None."""
        state = self.in_slot
        if state is None or state.slot_ms != self.curr_read_time_ms or \
                self.settings.timer_stop_dequeue:
            return None
        return state.next_ms

    def _slot_in_progress(self, slot_ms: int, slot, over: bool) -> SlotInProgress:
        """The running slot's state, read again when its wheel entry changed (units added);
        ``over``: the slot has ended (every row is put now: no own time is read)."""
        entry = (slot.first_pos, slot.last_pos, slot.num)
        state = self.in_slot
        if state is not None and state.slot_ms == slot_ms and state.entry == entry:
            return state
        plan = self.ahead.plan_of(slot_ms, slot) or self.plan_slot(slot)   # unchanged: ahead's
        due = self.own_times.of(slot_ms, plan.wanted.offsets, OWN_MS_NONE)
        due[plan.wanted.rolls] = slot_ms + self.precision_ms  # back onto the wheel at the end
        if (state is None or state.slot_ms != slot_ms) and not len(plan.is_delete):
            log.warning("dequeue time:%d but read nothing from timerLog", slot_ms)
        self.in_slot = SlotInProgress.follow(
            state, slot_ms, entry, plan, due, self.ahead.take,
            _no_times if over else self._read_own_times, self.precision_ms)
        return self.in_slot

    def _read_own_times(self, wanted: Wanted) -> np.ndarray:
        """The own time of each parked record ``wanted`` names, read as the conversion ahead
        reads it (its C path, chunk by chunk, the converted records dropped; OWN_MS_NONE where
        not read): for the running slot's rows this worker's enqueue did not see and no chunk
        converted ahead covers (a slot that had begun before the worker's start)."""
        times = np.empty(len(wanted.offsets), np.int64)
        for start in range(0, len(times), DEQUEUE_CHUNK):
            rows = slice(start, start + DEQUEUE_CHUNK)
            chunk = Wanted(*(column[rows] for column in wanted))
            spans = self.reader.read_spans(chunk.offsets, chunk.sizes)
            try:
                read = convert_c(chunk, spans, [], self.now_ms(), own_times=True).own_ms
            finally:
                spans.release()
            assert read is not None             # asked for
            times[rows] = read
        self.figures.own_times_read += len(times)
        return times

    def plan_slot(self, slot) -> SlotPlan:
        """A used slot's units read from the timer log (at due time, and by the conversion
        ahead: the figures it counts are added by the dequeue)."""
        units = self.timer_log.slot_units(slot.first_pos, slot.last_pos)
        magic = units.magic
        is_delete = ((magic & layout.TIMER_MAGIC_DELETE) != 0) & \
            ((magic & layout.TIMER_MAGIC_ROLL) == 0)
        deletes = units.offset_py[is_delete].tolist()
        cancelled, unreadable = self._cancel_keys(deletes)
        wanted, duplicates = self._slot_wanted(units, np.flatnonzero(~is_delete))
        return SlotPlan(is_delete, cancelled, wanted, unreadable, duplicates)

    def _due_runs(self, state: SlotInProgress, until_ms: int
                  ) -> Iterator[tuple[list[Run] | list[AssembledRun],
                                      timer_reput.Assembly | None]]:
        """The runs of the slot's rows due by ``until_ms`` and not put, chunk by chunk, each
        marked put: held chunks whose rows are all due (assembled, or left to the putter to
        assemble: their Assembly, to release once put), then the rest converted."""
        make = assembled if self.assembling is None else prepared
        for start, held in state.held_due(until_ms):
            if any(key not in state.cancelled for key in held.dropped_keys):
                continue                # a mark it used is used up: converted again below
            chunk = make(held, self.reader.read_spans, state.plan.wanted, start,
                         state.converted_ms, self.now_ms())
            if chunk is not None:
                state.done[start:start + held.records] = True
                self._take_c(chunk, state.cancelled)
                self.figures.converted_ahead += sum(run.messages for run in chunk.runs)
                yield chunk.runs, getattr(chunk, "assembly", None)
        due = state.due_rows(until_ms)
        state.done[due] = True
        for start in range(0, len(due), DEQUEUE_CHUNK):
            rows = due[start:start + DEQUEUE_CHUNK]
            yield self._convert_all(Wanted(*(column[rows] for column in state.plan.wanted)),
                                    state.cancelled), None

    def convert_ahead_step(self) -> bool:
        """Convert a chunk of the nearest slot not begun (timer_ahead.py); False: none."""
        return self.ahead.step(self, DEQUEUE_CHUNK)

    def convert_ahead(self, wanted: Wanted, cancelled: dict[str, dict[str, str]],
                      dequeue_ms: int) -> CChunk | None:
        """The chunk ``wanted`` of a slot converted in C with TIMER_DEQUEUE_MS ``dequeue_ms``
        and the cancel marks ``cancelled`` (not used up here), no figure counted; None when
        C does not take it whole."""
        if len(cancelled) > timer_reput.CANCEL_KEYS_MAX:
            return None
        spans = self.reader.read_spans(wanted.offsets, wanted.sizes)
        try:
            chunk = convert_c(wanted, spans, list(cancelled), dequeue_ms, own_times=True)
        finally:
            spans.release()
        return None if chunk.rest else chunk

    def _cancel_keys(self, deletes: list[int]) -> tuple[dict[str, dict[str, str]], int]:
        """TIMER_DEL_UNIQKEY of each cancel mark of the slot (CommitLog offsets) -> the
        mark's properties, and how many marks could not be read (left out)."""
        keys: dict[str, dict[str, str]] = {}
        unreadable = 0
        for offset_py in deletes:
            selected = self.reader.look_message_by_offset(offset_py)
            if selected is None:
                unreadable += 1
                continue
            try:
                properties = decode_properties(record_codec.read_properties(selected.buffer, 0))
            finally:
                selected.release()
            key = properties.get(Property.TIMER_DEL_UNIQKEY)
            if key is not None:
                keys[key] = properties
        return keys, unreadable

    @staticmethod
    def _slot_wanted(units: SlotUnits, normals: np.ndarray) -> tuple[Wanted, int]:
        """The messages of a slot to re-put, oldest first (``normals``: indexes of the units
        that are not cancel marks), and how many second units of one message (a repeated
        enqueue after a crash) were left out."""
        offsets = units.offset_py[normals]
        _, first = np.unique(offsets, return_index=True)
        duplicates = len(offsets) - len(first)
        if duplicates:
            normals = normals[np.sort(first)]
        return Wanted(units.offset_py[normals], units.size_py[normals],
                      units.write_time_ms[normals],
                      (units.magic[normals] & layout.TIMER_MAGIC_ROLL) != 0), duplicates

    def _convert_all(self, wanted: Wanted,
                     cancelled: dict[str, dict[str, str]] | None) -> list[Run]:
        """The runs re-putting the records ``wanted`` names, read in runs per CommitLog file
        (Java convert and convertMessage each); left out: unreadable, cancelled, or a cancel
        mark due (never put). A first delivery is converted in C (many records per call,
        grouped into runs there) unless the slot has cancel marks; what C leaves goes
        through :meth:`_convert` one by one."""
        count = len(wanted.offsets)
        spans = self.reader.read_spans(wanted.offsets, wanted.sizes)
        runs: list[Run] = []
        reputs = []
        try:
            rest: range | list[int] = range(count)
            if count and len(cancelled or ()) <= timer_reput.CANCEL_KEYS_MAX:
                runs, rest = self._convert_in_c(wanted, spans, cancelled)
            for index in rest:
                enqueue_ms, roll = int(wanted.enqueue_ms[index]), bool(wanted.rolls[index])
                reput = self._convert(spans.view(index, int(wanted.sizes[index])), enqueue_ms,
                                      roll, cancelled)
                if reput is not None:
                    reputs.append(reput)
                    if roll:
                        self.figures.rolled += 1
        finally:
            spans.release()
        return runs + runs_of(reputs)

    def _convert_in_c(self, wanted: Wanted, spans: SpansResult,
                      cancelled: dict[str, dict[str, str]] | None
                      ) -> tuple[list[Run], range | list[int]]:
        """(runs, indexes left to :meth:`_convert`) of the first deliveries C takes; the
        messages the slot's cancel marks name C drops (and uses the marks up) as
        :meth:`_is_cancelled` does."""
        keys = list(cancelled or ())
        chunk = convert_c(wanted, spans, keys, self.now_ms())
        if keys and chunk.rest:
            # A record left to Python may be named by a mark before one C dropped: marks are
            # used up in the slot's order, so this chunk goes through the Python rule whole.
            return [], range(len(wanted.offsets))
        self._take_c(chunk, cancelled)
        return chunk.runs, chunk.rest

    def _take_c(self, chunk: CChunk | Prepared,
                cancelled: dict[str, dict[str, str]] | None) -> None:
        """Count what a chunk converted in C did: the marks it used up, the metrics."""
        if chunk.dropped_keys:
            assert cancelled is not None
            for key in chunk.dropped_keys:
                del cancelled[key]
            self.figures.cancelled += len(chunk.dropped_keys)
        for topic, _queue_id, _sys_flag, count in chunk.groups:
            self._add_metric(topic, -count)

    def _convert(self, view: memoryview | None, enqueue_ms: int, roll: bool,
                 cancelled: dict[str, dict[str, str]] | None) -> RePut | None:
        """The re-put of one wheel-topic record (a view of it), or None."""
        if view is None or record_codec.check(view, 0, len(view), False)[0] != \
                record_codec.RECORD_OK:
            self.figures.unreadable += 1
            return None
        decoded = record_codec.decode(view, 0)
        text = decoded.properties
        try:
            if roll or enqueue_ms == LONG_MAX or _ROLLED_MARK in text:
                return self._convert_map(decoded, decode_properties(text), enqueue_ms, roll,
                                         cancelled)
            return self._convert_text(decoded, text, enqueue_ms, cancelled)
        finally:
            del decoded                # its body is a view of the record: drop it first

    def _convert_text(self, decoded, text: str, enqueue_ms: int,
                      cancelled: dict[str, dict[str, str]] | None) -> RePut | None:
        """The common case, a message delivered for the first time: its properties string
        plus TIMER_ENQUEUE_MS and TIMER_DEQUEUE_MS (the map Java stores, without building
        the map: 3x less work per message in a burst)."""
        values = [_value(text, name) for name in TEXT_PATH_NAMES]
        if _AMBIGUOUS in values:
            return self._convert_map(decoded, decode_properties(text), enqueue_ms, False,
                                     cancelled)
        real_topic, queue_text, uniq_key, delete_mark = values
        if cancelled and self._is_cancelled(real_topic, uniq_key, cancelled):
            return None
        self._add_metric(real_topic, -1)
        if delete_mark is not None:
            return None                # Java doPut: a cancel mark is never delivered
        if not real_topic or queue_text is None or not queue_text.isdigit():
            return self._unusable(decoded)
        if text and not text.endswith(PROPERTY_SEPARATOR):
            text += PROPERTY_SEPARATOR
        text += (f"{Property.TIMER_ENQUEUE_MS}{NAME_VALUE_SEPARATOR}{enqueue_ms}"
                 f"{PROPERTY_SEPARATOR}{Property.TIMER_DEQUEUE_MS}{NAME_VALUE_SEPARATOR}"
                 f"{self.now_ms()}{PROPERTY_SEPARATOR}")
        return self._encoded(decoded, real_topic, int(queue_text), text)

    def _convert_map(self, decoded, properties: dict[str, str], enqueue_ms: int, roll: bool,
                     cancelled: dict[str, dict[str, str]] | None) -> RePut | None:
        """Rolls, messages rolled before, and due at enqueue: through the decoded map."""
        real_topic = properties.get(Property.REAL_TOPIC)
        if cancelled and self._is_cancelled(
                real_topic, properties.get(Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX), cancelled):
            return None
        if enqueue_ms == LONG_MAX:
            properties[Property.TIMER_ENQUEUE_MS] = str(LONG_MAX)
        elif real_topic is not None:
            self._add_metric(real_topic, -1)
        if not roll and Property.TIMER_DEL_UNIQKEY in properties:
            return None                # Java doPut: a cancel mark is never delivered
        properties[Property.TIMER_ENQUEUE_MS] = str(enqueue_ms)
        if roll:
            times = properties.get(Property.TIMER_ROLL_TIMES)
            properties[Property.TIMER_ROLL_TIMES] = str(int(times) + 1 if times else 1)
        properties[Property.TIMER_DEQUEUE_MS] = str(self.now_ms())
        if roll:
            return self._encoded(decoded, decoded.topic, decoded.queue_id, properties)
        queue_text = properties.get(Property.REAL_QUEUE_ID, "")
        if not real_topic or not queue_text.isdigit():
            return self._unusable(decoded)
        return self._encoded(decoded, real_topic, int(queue_text), properties)

    def _unusable(self, decoded) -> RePut | None:
        """None, counted and logged: a message without a usable REAL_TOPIC/REAL_QID."""
        log.warning("timer: message at %d has no usable REAL_TOPIC/REAL_QID; dropped",
                    decoded.physical_offset)
        self.figures.put_dropped += 1
        return None

    def _encoded(self, decoded, topic: str, queue_id: int,
                 properties: dict[str, str] | str) -> RePut | None:
        try:
            # The stored string is the whole map, REAL_TOPIC and REAL_QID included (Java
            # removes them from the map it puts, after computing the string).
            return reput_message(decoded, topic, queue_id, properties)
        except ValueError as error:
            log.warning("timer: message at %d cannot be re-put: %s; dropped",
                        decoded.physical_offset, error)
            self.figures.put_dropped += 1
            return None

    def _is_cancelled(self, real_topic, uniq_key, cancelled: dict[str, dict[str, str]]) -> bool:
        """True (and the mark used up) when a cancel mark of the slot names this message."""
        if not isinstance(real_topic, str) or not isinstance(uniq_key, str):
            return False
        key = delete_key(real_topic, uniq_key)
        if key not in cancelled:
            return False
        del cancelled[key]
        self.figures.cancelled += 1
        return True

    # --- housekeeping --------------------------------------------------------------------------
    def delete_expired_timer_log(self) -> int:
        """Delete timer-log files whose messages the CommitLog no longer has (every 30 s)."""
        return self.timer_log.delete_expired(self.reader.commitlog_min_offset())

    def clean_metrics(self, topics) -> None:
        """Drop the counts of deleted topics (Java cleanMetrics, every 3 minutes)."""
        dropped = self.metrics.clean(topics)
        if dropped:
            log.info("clean timer metrics, because not in topic config, %s", dropped)
            self.metrics_dirty = True
