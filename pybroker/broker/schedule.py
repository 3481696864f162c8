# The delay (schedule) service: delivers SCHEDULE_TOPIC_XXXX messages when their time comes.
"""ScheduleService (protocol.md §5.1; Java 4.9 ``ScheduleMessageService``).

Delay level L lives in queue L - 1 of SCHEDULE_TOPIC_XXXX; its consume-queue tags code is the
deliver time (store time + delay of L, computed by the dispatcher). Per level, the service reads
from the offset persisted in ``config/delayOffset.json`` and re-puts every due message to its
REAL_TOPIC/REAL_QID with its properties unchanged, as Java does (see :func:`delivered_message`;
the dispatcher then computes the ordinary tags code). It stops a level at the first message not
yet due, or at a put that fails (that level then pauses :data:`FAILURE_PAUSE_MS`). The
supervisor runs :meth:`ScheduleService.run`: :meth:`run_once` every 100 ms (Java's per-level
timers), a round that raises logged and retried after the same pause (Java's
DELAY_FOR_A_PERIOD after an exception), and the offsets persisted when it ends.
"""
import asyncio
import logging

from pybroker import clock
from pybroker.tasks import Rounds
from pybroker._fast import record as record_codec
from pybroker.broker.reput import RePut, read_batch, real_destination, reput_message
from pybroker.protocol.constants import SystemGroup, SystemTopic
from pybroker.protocol.properties import decode_properties
from pybroker.store import config_docs

log = logging.getLogger("pybroker.broker.schedule")

FAILURE_PAUSE_MS = 10_000        # Java DELAY_FOR_A_PERIOD after a failed put
PERSIST_INTERVAL_MS = 10_000     # flushDelayOffsetInterval default
DELIVER_PER_LEVEL_MAX = 1024     # bound on one run_once per level, so every level gets a turn
RUN_INTERVAL_S = 0.1             # Java's per-level timer period


def delivered_message(data, level_delay_ms: int, now_ms: int) -> tuple[int, RePut] | None:
    """(deliver time ms, the re-put) for the schedule record in ``data``.

    None when the record has no usable REAL_TOPIC/REAL_QID (it is skipped). Deliver time is
    store time + the level's delay, corrected to ``now_ms`` when it lies further ahead than
    one delay (Java's correctDeliverTimestamp, for clocks that moved back).

    Java 4.9 (ScheduleMessageService.messageTimeup) stores the schedule record's properties
    string unchanged: DELAY, WAIT, REAL_TOPIC and REAL_QID stay, so a consumer's
    getDelayTimeLevel() still reads the level. Only the put itself does not wait (WAIT false
    in the map) and no second redirect happens (DELAY cleared in the map).
    """
    decoded = record_codec.decode(data, 0)
    deliver_ms = decoded.store_timestamp + level_delay_ms
    if deliver_ms > now_ms + level_delay_ms:
        deliver_ms = now_ms
    properties = decode_properties(decoded.properties)
    destination = real_destination(properties)
    if destination is None:
        return None
    return deliver_ms, reput_message(decoded, destination[0], destination[1], properties)


class ScheduleService:
    """Delivers delayed messages; one instance per broker, driven by :meth:`run_once`.

    Parameters
    ----------
    store_reader
        Offers ``get_messages(group, topic, queue_id, queue_offset, max_count)`` (MessageStore).
    putter
        A :class:`pybroker.broker.context.Putter`.
    delay_levels_ms : sequence of int
        Delay of level 1, 2, ... in ms (``config.derived.delay_levels_ms``).
    offsets_path : str
        ``<store>/config/delayOffset.json``.
    persist_interval_ms : int
        Least time between two writes of the offsets file by :meth:`run_once`.
    failure_pause_ms : int
        Pause of a level after a failed put, and of :meth:`run` after a round that raised.
    """

    def __init__(self, store_reader, putter, delay_levels_ms, offsets_path: str,
                 persist_interval_ms: int = PERSIST_INTERVAL_MS,
                 failure_pause_ms: int = FAILURE_PAUSE_MS):
        self.store_reader = store_reader
        self.putter = putter
        self.delay_levels_ms = tuple(delay_levels_ms)
        self.offsets_path = offsets_path
        self.persist_interval_ms = persist_interval_ms
        self.failure_pause_ms = failure_pause_ms
        self.document = config_docs.load_delay_offsets(offsets_path)
        self._dirty = False
        self._persisted_ms = 0
        self._paused_until_ms: dict[int, int] = {}

    @property
    def offset_table(self) -> dict[int, int]:
        """Next queue offset to deliver, per delay level (1-based)."""
        return self.document.offset_table

    def persist(self) -> None:
        """Write delayOffset.json now (safe write through config_docs)."""
        config_docs.save_delay_offsets(self.offsets_path, self.document)
        self._dirty = False

    async def run(self) -> None:
        """Deliver every :data:`RUN_INTERVAL_S` until cancelled, each round guarded
        (pybroker/tasks.py: a round that raises is logged and retried after
        ``failure_pause_ms``; too many in a row, or an invariant violation, end this with the
        error); persists the offsets when it ends."""
        rounds = Rounds("delay delivery", retry_delay_s=self.failure_pause_ms / 1000,
                        logger=log)
        try:
            while True:
                await asyncio.sleep(rounds.next_delay_s(RUN_INTERVAL_S))
                with rounds:
                    await self.run_once(clock.now_ms())
        finally:
            self.persist()

    async def run_once(self, now_ms: int) -> int:
        """Deliver every message due at ``now_ms`` (bounded per level); returns how many."""
        delivered = 0
        for level in range(1, len(self.delay_levels_ms) + 1):
            if self._paused_until_ms.get(level, 0) > now_ms:
                continue
            delivered += await self._run_level(level, now_ms)
        if self._dirty and now_ms - self._persisted_ms >= self.persist_interval_ms:
            self.persist()
            self._persisted_ms = now_ms
        return delivered

    async def _run_level(self, level: int, now_ms: int) -> int:
        delay_ms = self.delay_levels_ms[level - 1]
        queue_offset = self.offset_table.get(level, 0)
        delivered = 0
        try:
            while delivered < DELIVER_PER_LEVEL_MAX:
                start, batch = read_batch(self.store_reader, SystemGroup.SCHEDULE_CONSUMER,
                                          SystemTopic.SCHEDULE, level - 1, queue_offset)
                if start != queue_offset:
                    queue_offset = start
                    continue
                if not batch:
                    return delivered
                for data in batch:
                    outcome = await self._deliver(level, data, delay_ms, now_ms)
                    if outcome is None:
                        return delivered
                    delivered += outcome
                    queue_offset += 1
        finally:
            if self.offset_table.get(level, 0) != queue_offset:
                self.offset_table[level] = queue_offset
                self._dirty = True
        return delivered

    async def _deliver(self, level: int, data: bytes, delay_ms: int, now_ms: int) -> int | None:
        """1 delivered, 0 skipped, None: stop this level (not due yet, or the put failed)."""
        message = delivered_message(data, delay_ms, now_ms)
        if message is None:
            log.warning("schedule level %d: record without REAL_TOPIC/REAL_QID skipped", level)
            return 0
        deliver_ms, reput = message
        if deliver_ms > now_ms:
            return None
        result = await self.putter.put(reput.records, reput.topic, reput.queue_id, 1,
                                       reput.sys_flag, False)
        if not result.status.stored:
            log.error("schedule level %d: re-put to %s-%d failed: %s; pausing the level",
                      level, reput.topic, reput.queue_id, result.status.name)
            self._paused_until_ms[level] = now_ms + self.failure_pause_ms
            return None
        return 1
