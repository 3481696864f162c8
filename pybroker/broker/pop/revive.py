# The revive service: pairs check-points with their acks, brings unacknowledged messages back.
"""POP revive (Java 5.3.3 PopReviveService), run by one process: the supervisor (master only).

Each revive queue of ``rmq_sys_REVIVE_LOG_<cluster>`` is read in order from the group
``CID_RMQ_SYS_REVIVE_GROUP``'s committed offset. A check-point waits in memory (``pending``)
until it is *due*, an ack marks its message in it, and a due check-point's unacknowledged
messages are re-put - body, tags, flag, properties (plus 1ST_POP_TIME), reconsume count + 1 -
to the group's POP retry topic (``%RETRY%<group>_<topic>``, or ``+`` with enableRetryTopicV2;
a check-point of a retry topic goes back to that topic), created with one queue when absent.

**Due** means every ack that can still count has been read: the check-point's revive time plus
two seconds (Java's ackTimeInterval + 1 s) lies before the *covered* time. Check-points and acks
are timer messages (broker/pop/revive_log.py): a check-point reaches its revive queue when the
timer delivers it (one second before its revive time), its acks when the timer delivers them
(at the revive time), or at once when put late. The covered time is the time by which every
record due then is readable: how far the timer has delivered (``timer_covered_ms``, read first:
broker/timer.py ``delivered_until_ms``), capped by the start of the round, and only when that
round's read reached the end of everything written before it (the dispatched position had
passed the written position taken after the timer's). Java's round does the same with the
largest due time it read (``endTime``, moved to now when idle for 3 s with the timer not
behind); pybroker reads the timer's own progress instead of inferring it. Due check-points are
taken in read order; a later one may go before an earlier one that is not due (Java stops at the
first; in due order, as the timer delivers them, that differs only within a second).

**The committed offset** is the revive offset before the first check-point still pending, or
everything read when none is: acks whose check-point is gone (revived, or written by a POP of
another broker) never hold it (apache/rocketmq #3443, #5408). After a restart the queue is read
again from there, so every pending check-point and its acks are read again; a check-point
revived but not yet committed may be revived twice (at least once, never lost).

**Exactly the popped message** is re-put: the message at the check-point's queue offset, never
the next one the store finds (#7724); a message that is gone is skipped. A re-put that fails
writes the check-point of that message again, due later by Java's rewrite intervals (10 s ... 2
h); with skipWhenCKRePutReachMaxTimes one re-written 17 times is dropped.
"""
import asyncio
import collections
import logging
from collections.abc import Callable

from pybroker._fast import record as record_codec
from pybroker.broker.pop import revive_log
from pybroker.broker.pop.directory import PopDirectory
from pybroker.broker.reput import reput_message
from pybroker.broker.send import SendRefused
from pybroker.broker.timer_message import TimerRules
from pybroker.protocol import pop
from pybroker.protocol.constants import (RETRY_GROUP_TOPIC_PREFIX, PERM_READ_WRITE,
                                         PopConstants, Property)
from pybroker.protocol.properties import decode_properties
from pybroker.store.pop_checkpoint import (PopCheckPoint, decode_ack, decode_batch_ack,
                                           decode_checkpoint)
from pybroker.store.pop_table import SlotKey
from pybroker.store.status import GetStatus

__all__ = ["ReviveService", "ReviveQueue", "DUE_MARGIN_MS", "CK_REWRITE_INTERVALS_S"]

log = logging.getLogger("pybroker.broker.pop")

DUE_MARGIN_MS = PopConstants.ACK_TIME_INTERVAL_MS + PopConstants.SECOND_MS
CK_REWRITE_INTERVALS_S = (10, 20, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200,
                          1800, 3600, 7200)
_READ_BATCH = 32
_PENDING_MAX = 1_000_000          # check-points held in memory per revive queue
_YIELD_EVERY = 64                 # records, between two event-loop turns
_RECHECK_MIN_MS = 200             # shortest wait before a round for a check-point coming due


class ReviveQueue:
    """One revive queue's progress. ``scanned``: next revive offset to read; ``committed``:
    the committed revive offset (records up to it are done); ``pending``: check-points read
    and not revived, by merge key, in read order."""

    def __init__(self, queue_id: int, committed: int):
        self.queue_id = queue_id
        self.committed = committed
        self.scanned = committed + 1
        self.pending: dict[str, PopCheckPoint] = {}
        self.slow = 1
        self.next_round_ms = 0

    def commit_point(self) -> int:
        """Everything before the first pending check-point (or everything read) is done."""
        for ck in self.pending.values():
            return ck.revive_offset - 1
        return self.scanned - 1

    def oldest_pending_revive_ms(self) -> int | None:
        return min((ck.revive_time for ck in self.pending.values()), default=None)


class ReviveService:
    """See the module docstring. ``reader``: a StoreReader; ``putter``: this process's own;
    ``metadata``: the MetadataState (topics, groups, offsets); ``directory``: the POP table's
    (in-flight counts); ``written_position()``/``dispatched_position()``: the control block's;
    ``timer_covered_ms()``: the time up to which the timer has delivered every message
    (broker/timer.py ``delivered_until_ms``)."""

    def __init__(self, config, reader, putter, metadata, directory: PopDirectory,
                 store_host: tuple[bytes, int], now_ms: Callable[[], int],
                 written_position: Callable[[], int], dispatched_position: Callable[[], int],
                 timer_covered_ms: Callable[[], int]):
        self.config = config
        self.reader, self.putter, self.metadata = reader, putter, metadata
        self.directory = directory
        self.store_host = store_host
        self.now_ms = now_ms
        self.written_position = written_position
        self.dispatched_position = dispatched_position
        self.timer_covered_ms = timer_covered_ms
        broker = config.broker
        self.topic = pop.revive_topic(broker.broker_cluster_name)
        self.queues = [ReviveQueue(queue_id, metadata.offsets.query(
            PopConstants.REVIVE_GROUP, self.topic, queue_id))
            for queue_id in range(broker.revive_queue_num)]
        self.revived_total = 0            # messages re-put to a retry topic
        self.skipped_total = 0            # messages gone (or topic/group gone) when due
        self.rewritten_total = 0          # check-points written again after a failed re-put
        self.checkpoints_read_total = 0
        self.acks_read_total = 0
        # Java PopMetricsManager's counters: records read by (group, topic, revive queue,
        # "CK"/"ACK") and re-puts by (group, topic, put status), topics as the records name
        # them.
        self.records_read: collections.Counter[tuple[str, str, int, str]] = \
            collections.Counter()
        self.retry_puts: collections.Counter[tuple[str, str, str]] = collections.Counter()

    # --- rounds --------------------------------------------------------------------------------
    async def run_once(self) -> int:
        """One round over the queues whose turn it is; returns messages revived."""
        revived = 0
        for queue in self.queues:
            now_ms = self.now_ms()
            if now_ms < queue.next_round_ms:
                continue
            revived += await self.revive_queue(queue)
        return revived

    async def revive_queue(self, queue: ReviveQueue) -> int:
        """Read what is new, revive what is due, commit; schedules the queue's next round
        (slower while it is idle, as Java's reviveMaxSlow)."""
        broker = self.config.broker
        started_ms = self.now_ms()
        # In this order: what the timer delivered up to timer_ms is written before `written`.
        timer_ms = self.timer_covered_ms()
        written = self.written_position()
        read = await self._read_new(queue, started_ms + broker.revive_scan_time)
        covered_ms = min(started_ms, timer_ms) if self.dispatched_position() >= written \
            else None
        revived = await self._revive_due(queue, covered_ms) if covered_ms is not None else 0
        self._commit(queue)
        idle = not read and not revived
        queue.slow = min(queue.slow + 1, broker.revive_max_slow) if idle else 1
        now_ms = self.now_ms()
        queue.next_round_ms = now_ms + broker.revive_interval * queue.slow
        oldest = queue.oldest_pending_revive_ms()
        if oldest is not None:
            # Come back as soon as the oldest pending check-point can be due (Java's round
            # polls every 100 ms while it waits for one), not a whole slow interval later:
            # when the timer's delivered time, a whole number of precisions, can pass it.
            precision = self.config.store.timer_precision_effective_ms
            can_be_due_ms = ((oldest + DUE_MARGIN_MS) // precision + 1) * precision
            due_ms = max(can_be_due_ms, now_ms + _RECHECK_MIN_MS)
            queue.next_round_ms = min(queue.next_round_ms, due_ms)
        return revived

    async def _read_new(self, queue: ReviveQueue, deadline_ms: int) -> int:
        read = 0
        while self.now_ms() < deadline_ms and len(queue.pending) < _PENDING_MAX:
            result = self.reader.get_messages(PopConstants.REVIVE_GROUP, self.topic,
                                              queue.queue_id, queue.scanned, _READ_BATCH)
            try:
                if result.status is not GetStatus.FOUND:
                    if result.status in (GetStatus.OFFSET_TOO_SMALL,
                                         GetStatus.OFFSET_OVERFLOW_BADLY):
                        log.warning("reviveQueueId=%d, OFFSET_ILLEGAL %d, next %d",
                                    queue.queue_id, queue.scanned, result.next_begin_offset)
                        queue.scanned = result.next_begin_offset
                        continue
                    return read
                for view in result.buffers:
                    self._take_record(queue, view)
                    read += 1
                queue.scanned = result.next_begin_offset
            finally:
                result.release()
            if read % _YIELD_EVERY < _READ_BATCH:
                await asyncio.sleep(0)
        return read

    def _take_record(self, queue: ReviveQueue, view) -> None:
        decoded = record_codec.decode(view, 0)
        tag = decode_properties(decoded.properties).get(Property.TAGS)
        body = bytes(decoded.body)
        try:
            if tag == PopConstants.CK_TAG:
                ck = decode_checkpoint(body)
                ck.revive_offset = decoded.queue_offset
                queue.pending.setdefault(ck.key, ck)
                self.checkpoints_read_total += 1
                self.records_read[(ck.cid, ck.topic, queue.queue_id, "CK")] += 1
            elif tag in (PopConstants.ACK_TAG, PopConstants.BATCH_ACK_TAG):
                self._take_ack(queue, body, tag == PopConstants.BATCH_ACK_TAG)
        except ValueError as error:
            log.warning("reviveQueueId=%d, offset %d: %s record skipped: %s", queue.queue_id,
                        decoded.queue_offset, tag, error)

    def _take_ack(self, queue: ReviveQueue, body: bytes, batch: bool) -> None:
        ack = decode_batch_ack(body) if batch else decode_ack(body)
        self.acks_read_total += 1
        self.records_read[(ack.consumer_group, ack.topic, queue.queue_id, "ACK")] += 1
        ck = queue.pending.get(ack.key(self.config.broker.broker_name))
        if ck is None:
            return          # its check-point was revived already, or is not on this broker
        offsets = ack.ack_offsets if batch else [ack.ack_offset]    # type: ignore[attr-defined]
        for offset in offsets:
            index = ck.index_of_ack(offset)
            if index < 0:
                log.error("invalid ack index, %s, %s", ack, ck)
            else:
                ck.mark_acked(index)

    # --- reviving ------------------------------------------------------------------------------
    async def _revive_due(self, queue: ReviveQueue, covered_ms: int) -> int:
        revived = 0
        for key, ck in list(queue.pending.items()):
            if covered_ms - ck.revive_time <= DUE_MARGIN_MS:
                continue
            outcome = await self._revive_checkpoint(queue, ck)
            if outcome is None:
                break            # a put failed and the check-point could not be re-written
            revived += outcome
            del queue.pending[key]
        return revived

    async def _revive_checkpoint(self, queue: ReviveQueue, ck: PopCheckPoint) -> int | None:
        """Re-put the check-point's unacknowledged messages; the count, or None to keep it."""
        normal_topic = pop.normal_topic_of(ck.topic, ck.cid)
        if self.metadata.topic_config(normal_topic) is None:
            log.warning("reviveQueueId=%d, can not get normal topic %s, then continue",
                        queue.queue_id, ck.topic)
            self.skipped_total += ck.num
            return 0
        if self.metadata.subscription_group(ck.cid) is None:
            log.warning("reviveQueueId=%d, can not get cid %s, then continue", queue.queue_id,
                        ck.cid)
            self.skipped_total += ck.num
            return 0
        revived = 0
        for index in range(ck.num):
            if ck.is_acked(index):
                continue
            offset = ck.ack_offset_by_index(index)
            outcome = await self._revive_message(ck, offset)
            if outcome is False and not await self._rewrite_checkpoint(queue, ck, offset):
                return None
            ck.mark_acked(index)            # done with it, whichever way
            revived += bool(outcome)
        return revived

    async def _revive_message(self, ck: PopCheckPoint, offset: int) -> bool | None:
        """True: re-put; None: the message is gone (skipped); False: the put failed."""
        result = self.reader.get_messages(ck.cid, ck.topic, ck.queue_id, offset, 1)
        try:
            view = result.buffers[0] if result.status is GetStatus.FOUND else None
            decoded = record_codec.decode(view, 0) if view is not None else None
            if decoded is None or decoded.queue_offset != offset:
                log.info("can not get biz msg, topic:%s, qid:%d, offset:%d, then continue",
                         ck.topic, ck.queue_id, offset)
                self.skipped_total += 1
                return None
            try:
                reput = self._retry_message(ck, decoded)
            except SendRefused as refusal:
                # Java's put answers the refusal (the timer rule, a bad DELAY) and revive
                # handles it as a failed put.
                log.error("revive error, put %s of %s refused: %d %s", offset, ck.topic,
                          refusal.code, refusal.remark)
                return False
        finally:
            result.release()
        put = await self.putter.put(reput.records, reput.topic, reput.queue_id, 1,
                                    reput.sys_flag, True)
        self.retry_puts[(ck.cid, ck.topic, put.status.name)] += 1
        if not put.status.stored:
            log.error("revive error, put %s to %s: %s", offset, reput.topic, put.status.name)
            return False
        self.revived_total += 1
        slot = self.directory.slot_of(SlotKey(ck.topic, ck.cid, ck.queue_id))
        table = self.directory.table
        if slot is not None and ck.pop_time >= table.in_flight_since_ms(slot):
            table.add_in_flight(slot, -1)
        return True

    def _retry_message(self, ck: PopCheckPoint, decoded):
        broker = self.config.broker
        if ck.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            topic = ck.topic
        else:
            topic = pop.retry_topic(ck.topic, ck.cid, broker.enable_retry_topic_v2)
        self._ensure_retry_topic(topic, ck.cid)
        properties = decode_properties(decoded.properties)
        if decoded.reconsume_times == 0 or Property.FIRST_POP_TIME not in properties:
            properties[Property.FIRST_POP_TIME] = str(ck.pop_time)
        # Java puts the message through its store, whose put-time rules see this map.
        # (the 5.x timer rule first, without the slot congestion check the send path has).
        return reput_message(decoded, topic, 0, properties, redirect=properties,
                             levels_count=len(self.config.derived.delay_levels_ms),
                             timer=TimerRules.of(self.config.store), now_ms=self.now_ms(),
                             reconsume_times=decoded.reconsume_times + 1)

    def _ensure_retry_topic(self, topic: str, group: str) -> None:
        """Java addRetryTopicIfNotExist: one queue, read-write, the group's offset at 0."""
        topics = self.metadata.topics
        if topics.topic_config(topic) is not None:
            return
        topics.create_topic_for_send_back(topic, PopConstants.RETRY_QUEUE_NUMS,
                                          int(PERM_READ_WRITE))
        if self.metadata.offsets.query(group, topic, 0) < 0:
            self.metadata.offsets.commit(group, topic, 0, 0)

    async def _rewrite_checkpoint(self, queue: ReviveQueue, ck: PopCheckPoint,
                                  offset: int) -> bool:
        """Java rePutCK: the failed message gets a check-point of its own, due later."""
        times = ck.re_put_count()
        broker = self.config.broker
        if times >= len(CK_REWRITE_INTERVALS_S) and broker.skip_when_ck_re_put_reach_max_times:
            log.warning("rePut CK reach max times, drop it. %s %s %d", ck.topic, ck.cid, offset)
            return True
        new = PopCheckPoint(topic=ck.topic, cid=ck.cid, queue_id=ck.queue_id,
                            start_offset=offset, pop_time=ck.pop_time,
                            invisible_time=ck.invisible_time, num=1, queue_offset_diff=[0],
                            broker_name=ck.broker_name, re_put_times=str(times + 1))
        if ck.revive_time <= self.now_ms():
            interval = CK_REWRITE_INTERVALS_S[min(times, len(CK_REWRITE_INTERVALS_S) - 1)]
            new.invisible_time = ck.invisible_time + interval * 1000
        put = await revive_log.put_revive_record(self.putter, revive_log.checkpoint_message(
            new, self.topic, queue.queue_id, self.store_host, TimerRules.of(self.config.store),
            self.now_ms()))
        if put.status.stored:
            self.rewritten_total += 1
        return put.status.stored

    def _commit(self, queue: ReviveQueue) -> None:
        point = queue.commit_point()
        if point > queue.committed:
            queue.committed = point
            self.metadata.offsets.commit(PopConstants.REVIVE_GROUP, self.topic, queue.queue_id,
                                         point)

    # --- figures -------------------------------------------------------------------------------
    def behind(self) -> tuple[int, int]:
        """(messages of the revive log not done, ms the oldest pending check-point waits
        past its revive time): Java's getReviveBehindMessages/Millis summed and maxed over
        the queues."""
        figures = self.behind_by_queue()
        return (sum(messages for messages, _ in figures.values()),
                max((millis for _, millis in figures.values()), default=0))

    def behind_by_queue(self) -> dict[int, tuple[int, int]]:
        """{revive queue id: (records after the committed offset, ms its oldest pending
        check-point's revive time has passed while records wait)}."""
        figures, now_ms = {}, self.now_ms()
        for queue in self.queues:
            end = self.reader.get_max_offset_in_queue(self.topic, queue.queue_id)
            waiting = max(0, end - queue.committed - 1)
            oldest = queue.oldest_pending_revive_ms()
            millis = max(0, now_ms - oldest) if oldest is not None and waiting else 0
            figures[queue.queue_id] = (waiting, millis)
        return figures
