# POP_MESSAGE (200050): hand out messages of a queue or of every queue, with a check-point.
"""The POP handler (Java 5.3.3 PopMessageProcessor, the default path without the KV service).

Checks in Java's order with its codes and remarks (timeout too much, broker readable, at most
32 messages, topic, queue, group, the ``exp``/``expType`` filter), then one run over the queues:
the group's retry topic first on popFromRetryProbability percent of the POPs (never for order
POP), the requested queue or every readable queue from a random one, the retry topic again
while the batch is not full. Per queue (``_QueuePop``), under the queue's lock in the shared
POP table: the pop offset (a reset or another client's commit first; a queue never popped
starts by initMode), the store read through the filter, then

* non-order: the check-point is written to the revive log and only then does the pop offset
  move past what was read: a POP is answered only once its check-point is stored;
* order: the queue is skipped while its head is held (an unacknowledged message still
  invisible, unless the POP repeats the run's attemptId); a run is recorded in the queue's
  order record with the consumed counts of messages handed out before, and the pop offset
  stays at the run's first message until it is acknowledged.

A queue another process holds locked is skipped (Java's tryLock): a non-order POP counts its
messages as left and is held for a quick retry; an order POP waits for the lock (a retry with
the same attemptId must not come back empty: apache/rocketmq #10827). Messages of a retry topic
are answered under the topic popped with their receipt handle (POP_CK) set, as Java does
unless popResponseReturnActualRetryTopic. Nothing found: the request is held (long polling)
or answered POLLING_FULL / POLLING_TIMEOUT.
"""
import asyncio
import logging
import operator
import random
import struct
from collections.abc import Callable
from itertools import repeat

import orjson

from pybroker.broker import send
from pybroker.broker.context import BrokerContext
from pybroker.broker.message_filter import FilterRefused, MessageFilter, pop_message_filter
from pybroker.broker.pop import revive_log
from pybroker.broker.pop.checks import check_broker, check_request, refuse
from pybroker.broker.pop.long_poll import LOCK_RETRY_MS, HeldPop, PollingResult
from pybroker.broker.pop.order_info import OrderInfo
from pybroker.broker.pop.state import PopState, PopStateError
from pybroker.broker.reput import reput_message
from pybroker.protocol import pop
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import MappedBody, RemotingCommand, create_response
from pybroker.protocol.constants import RETRY_GROUP_TOPIC_PREFIX, PopConstants, Property
from pybroker.protocol.headers import POP_MESSAGE_RESPONSE, encode_header, parse_request_header
from pybroker.protocol.properties import decode_properties
from pybroker._fast import record as record_codec
from pybroker.store.pop_checkpoint import PopCheckPoint
from pybroker.store.pop_table import LOCKED_ELSEWHERE, NOT_PLAIN
from pybroker.store.status import STORED_STATUSES, GetStatus

__all__ = ["run_pop", "init_pop_offset", "take_pending_offset",
           "BORN_TIME", "ORDER_LOCK_WAIT_MS"]

log = logging.getLogger("pybroker.broker.pop")

BORN_TIME = "bornTime"
# How long an order POP waits for a queue lock another POP holds (its hold spans one store
# read and one check-point append at most).
ORDER_LOCK_WAIT_MS = 1000
_ORDER_LOCK_POLL_S = 0.001
_QUEUE_OFFSET_POSITION = record_codec.FIELD_POSITIONS["queue_offset"]
_QUEUE_OFFSET = struct.Struct(">q")
_FIRST = operator.itemgetter(0)
_TIMEOUT_TOO_MUCH_MS = 500
_NBYTES = operator.attrgetter("nbytes")
_OFFSET_WRONG = frozenset({GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY,
                           GetStatus.OFFSET_FOUND_NULL})
_NOTHING_TAKEN = frozenset({GetStatus.NO_MATCHED_MESSAGE, GetStatus.OFFSET_FOUND_NULL,
                            GetStatus.MESSAGE_WAS_REMOVING, GetStatus.NO_MATCHED_LOGIC_QUEUE})
# The answers' remarks (an enum member's name is a Python property).
_FOUND_REMARK = GetStatus.FOUND.name
_NO_MESSAGE_REMARK = GetStatus.NO_MESSAGE_IN_QUEUE.name


def fill_born_time(request: RemotingCommand, now_ms: int) -> None:
    """Java fills a missing or "0" bornTime before decoding (kept for the re-runs)."""
    if request.ext_fields.get(BORN_TIME) in (None, "", "0"):
        request.ext_fields[BORN_TIME] = str(now_ms)


def _refusal(ctx, channel, request: RemotingCommand, header,
             now_ms: int) -> RemotingCommand | None:
    broker = ctx.config.broker
    if now_ms - header.born_time - header.poll_time > _TIMEOUT_TOO_MUCH_MS:
        return refuse(request, ResponseCode.POLLING_TIMEOUT,
                      f"the broker[{broker.broker_ip1}] pop message is timeout too much")
    refused = check_broker(ctx, request, "pop")
    if refused is not None:
        return refused
    if header.max_msg_nums > PopConstants.MAX_MSG_NUMS:
        return refuse(request, ResponseCode.INVALID_PARAMETER,
                      f"the broker[{broker.broker_ip1}] pop message's num is greater than 32")
    if not ctx.config.store.timer_wheel_enable:
        # Check-points and acks are timer messages (broker/pop/revive_log.py).
        return refuse(request, ResponseCode.SYSTEM_ERROR,
                      f"the broker[{broker.broker_ip1}] pop message is forbidden because "
                      "timerWheelEnable is false")
    return None


async def run_pop(ctx: BrokerContext, channel, request: RemotingCommand,
                  rerun: bool = False) -> RemotingCommand | None:
    """One run of a POP request: the POP_MESSAGE handler (its answer, or None when it is
    held), or a held request's run again when woken (``rerun``). The run over the queues is
    this one coroutine: each check-point put is awaited here, so its completion resumes this
    frame alone (the steps before and after a put are plain calls)."""
    now_ms = ctx.now_ms()
    fill_born_time(request, now_ms)
    header = parse_request_header(request.code, request.ext_fields)
    refused = _refusal(ctx, channel, request, header, now_ms)
    if refused is not None:
        return refused
    checked = check_request(ctx, channel, request, header, None)
    if isinstance(checked, RemotingCommand):
        return checked
    try:
        message_filter = pop_message_filter(header.topic, header.exp, header.exp_type)
    except FilterRefused as refusal:
        return refuse(request, refusal.code, refusal.remark)
    if ctx.pop is None:
        return refuse(request, ResponseCode.SYSTEM_ERROR, "POP is not served here")
    run = _PopRun(ctx, ctx.pop, channel, header, message_filter, checked.topic_config)
    slots_of = ctx.pop.slots.slots_of
    held_slot = None
    try:
        for topic, requested, is_retry, while_not_full in run.topics():
            if while_not_full and run.full:
                break
            queue_ids = run.queue_ids(topic, requested)
            if queue_ids is None:
                continue
            slots = await slots_of(topic, run.group, queue_ids)
            # The queues a held request watches (has_work): (topic, queue id, slot) each.
            run.watched += zip(repeat(topic, len(queue_ids)), queue_ids, slots, strict=True)
            for index, queue_id in enumerate(queue_ids):
                if run.full and not run.order:
                    run.count_rest(topic, queue_ids[index:], slots[index:], is_retry)
                    break
                visit = _QueuePop(run, topic, queue_id, slots[index], is_retry)
                if run.order and not await visit.lock():
                    continue
                put = visit.start()
                if put is not None:         # its check-point's put, the queue still locked
                    try:
                        stored = await put
                    except BaseException:
                        visit.abandon()
                        raise
                    visit.finish(stored)
        if not run.messages and header.poll_time > 0:
            # The broker-wide count of POPs held for this key (POLLING_INFO).
            held_slot = await ctx.pop.slots.slot(header.topic, header.consumer_group,
                                                 header.queue_id)
    except PopStateError as error:
        run.release()
        return refuse(request, ResponseCode.SYSTEM_ERROR, str(error))
    except BaseException:
        run.release()
        raise
    return _answer(ctx, channel, request, header, run, held_slot)


def _answer(ctx, channel, request: RemotingCommand, header, run: "_PopRun",
            held_slot: int | None):
    pop_state = ctx.pop
    key = pop.polling_key(header.topic, header.consumer_group, header.queue_id)
    if run.messages:
        code, remark = ResponseCode.SUCCESS, _FOUND_REMARK
        if run.rest_num > 0 and pop_state.long_poll is not None:
            pop_state.long_poll.notify(key)
    else:
        result = _hold(ctx, channel, request, header, run, key, held_slot)
        if result is PollingResult.POLLING_SUC:
            return None
        code = ResponseCode.POLLING_FULL if result is PollingResult.POLLING_FULL \
            else ResponseCode.POLLING_TIMEOUT
        remark = _NO_MESSAGE_REMARK
    start, messages, counts = run.infos.texts()
    fields = encode_header(POP_MESSAGE_RESPONSE, {
        "pop_time": run.pop_time, "invisible_time": header.invisible_time,
        "revive_qid": run.revive_qid, "rest_num": run.rest_num,
        "start_offset_info": start, "msg_offset_info": messages,
        "order_count_info": counts if header.order else None})
    body = MappedBody(run.messages, run.release) if run.messages else None
    return create_response(request, code, remark, fields, body)


def _hold(ctx, channel, request, header, run: "_PopRun", key: str,
          held_slot: int | None) -> PollingResult:
    long_poll = ctx.pop.long_poll
    if header.poll_time <= 0 or long_poll is None:
        return PollingResult.NOT_POLLING
    held = HeldPop(key, channel, header.born_time + header.poll_time, run.has_work,
                   lambda: run_pop(ctx, channel, request, rerun=True), run.retry_at_ms,
                   held_slot)
    return long_poll.hold(held)


def init_pop_offset(ctx, topic: str, queue_id: int, init_mode: int) -> int:
    """Where a group's first POP of a queue starts (Java getInitOffset): the first message
    for initMode MIN and retry topics; else the first message when the queue still starts at
    offset 0 and it is there (initPopOffsetByCheckMsgInMem; Java asks whether it is in the page
    cache), else the last message."""
    store = ctx.store
    if init_mode == PopConstants.INIT_MODE_MIN or topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return max(0, store.get_min_offset_in_queue(topic, queue_id))
    if ctx.config.broker.init_pop_offset_by_check_msg_in_mem and \
            store.get_min_offset_in_queue(topic, queue_id) <= 0 and \
            store.get_message_store_timestamp(topic, queue_id, 0) >= 0:
        return 0
    return max(0, store.get_max_offset_in_queue(topic, queue_id) - 1)


def take_pending_offset(table, slot: int, now_ms: int) -> None:
    """Apply an offset the metadata service set (caller holds the slot's lock): a reset is
    taken as is and frees an order queue's head (Java resetPopOffset: clearBlock), a commit
    only when it is ahead."""
    pending = table.pending_offset(slot)
    if pending is None:
        return
    current = table.pop_offset(slot)
    if pending.reset or current is None or pending.value > current:
        table.set_pop_offset(slot, max(0, pending.value))
    if pending.reset:
        table.set_order_record(slot, None)
        table.clear_in_flight(slot, now_ms)
    table.mark_applied(slot, pending.seq)


def _queue_offsets(views) -> list[int]:
    """The queue offset of each record (C calls only: no frame per record)."""
    return list(map(_FIRST, map(_QUEUE_OFFSET.unpack_from, views,
                                repeat(_QUEUE_OFFSET_POSITION))))


class _PopRun:
    """The state of one POP run over its queues."""

    def __init__(self, ctx, pop_state: PopState, channel, header,
                 message_filter: MessageFilter, topic_config):
        self.ctx, self.pop_state, self.channel, self.header = ctx, pop_state, channel, header
        self.filter = message_filter
        self.topic_config = topic_config
        self.group = header.consumer_group
        self.order = bool(header.order)
        self.pop_time = ctx.now_ms()
        broker = ctx.config.broker
        self.revive_qid = PopConstants.ORDER_REVIVE_QUEUE if self.order else \
            pop_state.next_revive_queue(broker.revive_queue_num)
        # Java's random.nextInt(100), by C calls only (randrange is three Python calls).
        self.random_q = int(random.random() * 100)
        self.infos = pop.OffsetInfos(self.order)
        self.messages: list[memoryview] = []
        # The answer holds max_msg_nums messages (kept where messages are added: a POP of
        # every queue asks at each queue it visits).
        self.full = header.max_msg_nums <= 0
        self.rest_num = 0
        self.table, self.tag = pop_state.table, pop_state.lock_tag
        # The in-flight count above which a queue gives nothing (None: no threshold).
        self.in_flight_max = broker.pop_inflight_message_threshold \
            if broker.enable_pop_message_threshold else None
        self._holds: list = []
        self.retry_at_ms: int | None = None
        self.watched: list[tuple[str, int, int]] = []      # (topic, queue id, slot)

    def release(self) -> None:
        holds, self._holds = self._holds, []
        for result in holds:
            result.release()

    def _retry_at(self, when_ms: int) -> None:
        self.retry_at_ms = when_ms if self.retry_at_ms is None else min(self.retry_at_ms,
                                                                        when_ms)

    def topics(self) -> list[tuple[str, int, bool, bool]]:
        """The run's topics in Java's order, each ``(topic, queue id or -1 for every queue,
        is_retry, only while the batch is not full)``: the group's retry topic first on
        popFromRetryProbability percent of the POPs, the requested topic, the retry topic
        again while the batch is not full (never for order POP)."""
        header = self.header
        broker = self.ctx.config.broker
        need_retry = self.random_q < broker.pop_from_retry_probability
        v2 = broker.enable_retry_topic_v2
        retry_topic = pop.retry_topic(header.topic, self.group, v2)
        if v2 and broker.retrieve_message_from_pop_retry_topic_v1 and self.random_q % 2 == 0:
            retry_topic = pop.retry_topic_v1(header.topic, self.group)
        topics = [(header.topic, header.queue_id, False, False)]
        if not self.order:
            if need_retry:
                topics.insert(0, (retry_topic, -1, True, False))
            else:
                topics.append((retry_topic, -1, True, True))
        return topics

    def queue_ids(self, topic: str, queue_id: int) -> list[int] | None:
        """The queues of ``topic`` to visit: ``queue_id``, or for -1 every readable queue from
        the run's random one (None when the topic does not exist)."""
        if queue_id >= 0:
            return [queue_id]
        # The requested topic's config is the one the checks found (looked up once).
        topic_config = self.topic_config if topic == self.header.topic else \
            self.ctx.metadata.topic_config(topic)
        if topic_config is None:
            return None
        count = topic_config.read_queue_nums
        first = self.random_q % count if count > 0 else 0
        return [*range(first, count), *range(first)]   # (random_q + i) % count for each i

    def count_rest(self, topic: str, queue_ids: list[int], slots: list[int],
                   is_retry: bool) -> None:
        """The queues a full non-order run visits: what each has left counts in rest_num.
        Their max offsets are asked in one call, their locks and pop offsets taken in one
        (``PopTable.take_plain``); only a queue locked elsewhere or one the POP's rules apply
        to (an offset set by another, no pop offset yet, the in-flight threshold) goes through
        ``_QueuePop``'s steps (no coroutine)."""
        max_offsets = self.ctx.store.get_max_offsets_in_queues(topic, queue_ids)
        found = self.table.take_plain(slots, self.tag, self.in_flight_max, True)
        visits = zip(queue_ids, slots, max_offsets, found, strict=True)
        try:
            for queue_id, slot, max_offset, offset in visits:
                if offset >= 0:     # _prepare's full run from that offset, lock released
                    self.rest_num += max(0, max_offset - offset)
                else:
                    _QueuePop(self, topic, queue_id, slot, is_retry).count_rest(max_offset,
                                                                                offset)
        finally:
            # An error ended the visits early: the queues not visited yet give back the
            # locks take_plain left them for the rules.
            for _, slot, _, offset in visits:
                if offset == NOT_PLAIN:
                    self.table.unlock(slot, self.tag)

    def has_work(self) -> bool:
        """Whether a watched queue has messages past the group's pop offset (cheap: the
        held request runs again to find out what it can take)."""
        table, store = self.pop_state.table, self.ctx.store
        for topic, queue_id, slot in self.watched:
            offset = table.pop_offset(slot)
            if store.get_max_offset_in_queue(topic, queue_id) > (offset or 0):
                return True
        return False

    def add_messages(self, result, topic: str, queue_id: int, start_offset: int,
                     queue_offsets: list[int], is_retry: bool) -> None:
        """Take the read's records into the answer (retry ones re-encoded, see the module
        docstring); the read stays held until the answer is written."""
        self.infos.add_queue(topic, queue_id, start_offset, queue_offsets)
        try:
            if not is_retry or self.ctx.config.broker.pop_response_return_actual_retry_topic:
                self.messages.extend(result.buffers)
                self._holds.append(result)
                return
            try:
                for view in result.buffers:
                    self.messages.append(memoryview(self._as_popped_topic(view, start_offset)))
            finally:
                result.release()
        finally:
            self.full = len(self.messages) >= self.header.max_msg_nums

    def _as_popped_topic(self, view, start_offset: int) -> bytes:
        decoded = record_codec.decode(view, 0)
        properties = decode_properties(decoded.properties)
        properties.setdefault(Property.POP_CK, pop.build_extra_info(
            start_offset, self.pop_time, self.header.invisible_time, self.revive_qid,
            decoded.topic, self.ctx.config.broker.broker_name, decoded.queue_id,
            decoded.queue_offset))
        reput = reput_message(decoded, self.header.topic, decoded.queue_id, properties,
                              store_timestamp=decoded.store_timestamp,
                              queue_offset=decoded.queue_offset,
                              physical_offset=decoded.physical_offset)
        return bytes(reput.records)


class _QueuePop:
    """One queue of a POP run, under its lock (see the module docstring)."""

    def __init__(self, run: _PopRun, topic: str, queue_id: int, slot: int, is_retry: bool):
        self.run_, self.topic, self.queue_id, self.slot = run, topic, queue_id, slot
        self.is_retry = is_retry
        self.ctx, self.table, self.tag = run.ctx, run.table, run.tag

    def _max_offset(self, known: int | None = None) -> int:
        if known is not None:
            return known
        return self.ctx.store.get_max_offset_in_queue(self.topic, self.queue_id)

    def _offset_or_init(self) -> int:
        offset = self.table.pop_offset(self.slot)
        if offset is None:
            offset = init_pop_offset(self.ctx, self.topic, self.queue_id,
                                     self.run_.header.init_mode)
        return offset

    def start(self) -> "asyncio.Future | None":
        """Visit the queue (a non-order POP takes its lock here, an order POP has taken it:
        ``lock``): the future of its check-point's put when it read messages for a non-order
        POP, the queue still locked until :meth:`finish` (or :meth:`abandon`); else None,
        the visit done and the lock released."""
        run, offset = self.run_, None
        if not run.order:
            (found,) = self.table.take_plain((self.slot,), self.tag, run.in_flight_max, False)
            if found == LOCKED_ELSEWHERE:
                self._locked_elsewhere()
                return None
            if found >= 0:
                offset = found
        put = None
        try:
            now_ms = self.ctx.now_ms()
            offset = self._prepare(now_ms, None, offset)
            if offset is not None:
                result, offset = self._read(offset)
                try:
                    put = self._take(result, offset, now_ms)
                except BaseException:
                    result.release()
                    raise
        finally:
            if put is None:
                self.table.unlock(self.slot, self.tag)
        return put

    def count_rest(self, max_offset: int, found: int) -> None:
        """A non-order run that is already full, for a queue ``PopTable.take_plain`` found
        locked elsewhere or left locked for the POP's rules (``found``): what it has left up
        to ``max_offset`` counts in rest_num, by run()'s steps without a coroutine."""
        if found == LOCKED_ELSEWHERE:
            self._locked_elsewhere(max_offset)
            return
        try:
            offset = self._prepare(self.ctx.now_ms(), max_offset)
            assert offset is None
        finally:
            self.table.unlock(self.slot, self.tag)

    def _locked_elsewhere(self, max_offset: int | None = None) -> None:
        """A non-order POP skips a queue another holder has locked (Java's tryLock): what it
        has left counts in rest_num and the POP is retried soon."""
        run = self.run_
        run.rest_num += max(0, self._max_offset(max_offset) - self._offset_or_init())
        run._retry_at(self.ctx.now_ms() + LOCK_RETRY_MS)

    async def lock(self) -> bool:
        """An order POP's lock: it waits for one held elsewhere (at most
        ORDER_LOCK_WAIT_MS; see the module docstring)."""
        if self.table.try_lock(self.slot, self.tag):
            return True
        deadline_ms = self.ctx.now_ms() + ORDER_LOCK_WAIT_MS
        while not self.table.try_lock(self.slot, self.tag):
            if self.ctx.now_ms() >= deadline_ms:
                self.run_._retry_at(self.ctx.now_ms() + LOCK_RETRY_MS)
                return False
            await asyncio.sleep(_ORDER_LOCK_POLL_S)
        return True

    def _prepare(self, now_ms: int, max_offset: int | None = None,
                 offset: int | None = None) -> int | None:
        """Under the lock: the offset to read from, or None when this queue gives nothing
        (what it has left counted in rest_num, up to ``max_offset`` when the caller knows
        it). ``offset``: the pop offset ``PopTable.take_plain`` gave, when none of the
        rules before the order and full-run steps applies to the queue."""
        run, table, broker = self.run_, self.table, self.ctx.config.broker
        if offset is None:
            take_pending_offset(table, self.slot, now_ms)
            if broker.enable_pop_message_threshold and \
                    table.in_flight(self.slot) > broker.pop_inflight_message_threshold:
                log.warning("Too much msgs unacked, then stop popping. topic=%s, group=%s, "
                            "queueId=%d", self.topic, run.group, self.queue_id)
                run.rest_num += max(0, self._max_offset(max_offset) - self._offset_or_init())
                return None
            offset = table.pop_offset(self.slot)
            if offset is None:
                offset = self._offset_or_init()
                table.set_pop_offset(self.slot, offset)  # Java commits the initial offset
        if run.order and self._order_blocked(now_ms):
            return None
        if run.order:
            table.clear_in_flight(self.slot, now_ms)
        if run.full:
            run.rest_num += max(0, self._max_offset(max_offset) - offset)
            return None
        return offset

    def _order_blocked(self, now_ms: int) -> bool:
        record = self.table.order_record(self.slot)
        if record is None:
            return False
        info = OrderInfo.from_json(orjson.loads(record))
        header = self.run_.header
        if not info.need_block(header.attempt_id, header.invisible_time, now_ms):
            return False
        free_ms = info.lock_free_timestamp(now_ms)
        if free_ms is not None and \
                self.ctx.config.broker.enable_notify_after_pop_order_lock_release:
            self.run_._retry_at(free_ms)
        return True

    def _read(self, offset: int):
        run = self.run_
        store, message_filter = self.ctx.store, run.filter
        wanted = run.header.max_msg_nums - len(run.messages)
        result = store.get_messages(run.group, self.topic, self.queue_id, offset, wanted, None,
                                    message_filter.tag_codes, message_filter.record_filter)
        if result.status is not GetStatus.FOUND and result.status in _OFFSET_WRONG:
            log.warning("Pop initial offset, because store is no correct, %s, %d->%d",
                        pop.polling_key(self.topic, run.group, self.queue_id), offset,
                        result.next_begin_offset)
            offset = result.next_begin_offset
            self.table.set_pop_offset(self.slot, offset)
            result.release()
            result = store.get_messages(run.group, self.topic, self.queue_id, offset, wanted,
                                        None, message_filter.tag_codes,
                                        message_filter.record_filter)
        return result, offset

    def _take(self, result, offset: int, now_ms: int) -> "asyncio.Future | None":
        """Take what the read found; the future of the check-point's put when it waits for
        one (:meth:`start`)."""
        run, table = self.run_, self.table
        if result.status is GetStatus.FOUND:
            queue_offsets = _queue_offsets(result.buffers)
            if not run.order:
                return self._put_check_point(result, offset, queue_offsets, now_ms)
            self._record_order_run(queue_offsets, now_ms)
            self._taken(result, offset, queue_offsets, offset, now_ms)  # the run's head
            return None
        if result.status in _NOTHING_TAKEN and result.next_begin_offset > -1:
            table.set_pop_offset(self.slot, result.next_begin_offset)
        run.rest_num += max(0, result.max_offset - result.next_begin_offset)
        result.release()
        return None

    def _taken(self, result, offset: int, queue_offsets: list[int], next_offset: int,
               now_ms: int) -> None:
        """The read's messages are handed out: the pop offset moves to ``next_offset``."""
        run = self.run_
        self.table.popped(self.slot, next_offset, len(queue_offsets), now_ms)
        run.rest_num += max(0, result.max_offset - result.next_begin_offset)
        _count_get(self.ctx, self.topic, run.group, result)
        run.add_messages(result, self.topic, self.queue_id, offset, queue_offsets,
                         self.is_retry)

    def finish(self, put) -> None:
        """The check-point's put of :meth:`start` ended with ``put``: the messages are handed
        out once it is stored (else they stay, counted as left, and the put is logged); the
        lock is released."""
        result, offset, queue_offsets, now_ms, diff = self._pending
        ctx = self.ctx
        try:
            try:
                if put.status not in STORED_STATUSES:
                    log.error("[PopBuffer]put ck to store fail: %s, %s",
                              self._check_point(offset, diff), put.status.name)
                    self.run_.rest_num += \
                        max(0, result.max_offset - result.next_begin_offset) + len(queue_offsets)
                    result.release()
                    return
                if ctx.stats is not None:
                    ctx.stats.pop_checkpoint(self.run_.header.topic, self.run_.group)
                if ctx.config.broker.enable_pop_log:
                    log.info("[PopBuffer]add ck just offset, %s",
                             self._check_point(offset, diff))
                self._taken(result, offset, queue_offsets, result.next_begin_offset, now_ms)
            except BaseException:
                result.release()
                raise
        finally:
            self.table.unlock(self.slot, self.tag)

    def abandon(self) -> None:
        """The wait for :meth:`start`'s put ended with an error: the read is released, the
        lock too."""
        try:
            self._pending[0].release()
        finally:
            self.table.unlock(self.slot, self.tag)

    def _record_order_run(self, queue_offsets: list[int], now_ms: int) -> None:
        run = self.run_
        header = run.header
        info = OrderInfo.new_run(header.attempt_id, run.pop_time, header.invisible_time,
                                 queue_offsets, now_ms)
        previous = self.table.order_record(self.slot)
        if previous is not None:
            info.merge_consumed_counts(OrderInfo.from_json(orjson.loads(previous)))
        info.add_order_counts(run.infos, self.topic, self.queue_id)
        self.table.set_order_record(self.slot, orjson.dumps(info.to_json(),
                                                            option=orjson.OPT_NON_STR_KEYS))

    def _put_check_point(self, result, offset: int, queue_offsets: list[int],
                         now_ms: int) -> "asyncio.Future":
        """Put the check-point of the messages read (born at the POP's clock reading
        ``now_ms``): the future done once it is stored (:meth:`finish` takes its outcome)."""
        run, ctx = self.run_, self.ctx
        broker = ctx.config.broker
        diff = list(map(offset.__rsub__, queue_offsets))      # each offset - start offset
        record = revive_log.pop_checkpoint_message(
            self.topic, run.group, self.queue_id, offset, run.pop_time,
            run.header.invisible_time, diff, broker.broker_name,
            pop.revive_topic(broker.broker_cluster_name), run.revive_qid, ctx.store_host,
            send.timer_rules(ctx), now_ms)
        self._pending = (result, offset, queue_offsets, now_ms, diff)
        return revive_log.put_revive_record(ctx.putter, record)

    def _check_point(self, offset: int, diff: list[int]) -> PopCheckPoint:
        """The check-point _put_check_point put (for its log lines)."""
        run = self.run_
        return PopCheckPoint(topic=self.topic, cid=run.group, queue_id=self.queue_id,
                             start_offset=offset, pop_time=run.pop_time,
                             invisible_time=run.header.invisible_time, num=len(diff),
                             queue_offset_diff=diff,
                             broker_name=self.ctx.config.broker.broker_name)


def _count_get(ctx, topic: str, group: str, result) -> None:
    stats = ctx.stats
    if stats is not None:
        size_bytes = sum(map(_NBYTES, result.buffers))
        stats.group_get(topic, group, result.message_count, size_bytes, False)


# The handler is run_pop's first run itself: no frame of its own to call or resume.
HANDLERS: dict[int, Callable] = {RequestCode.POP_MESSAGE: run_pop}
