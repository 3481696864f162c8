# NOTIFICATION (200054) and POLLING_INFO (200055): is there something to pop, how many POPs wait.
"""NOTIFICATION answers whether a POP of the group would find messages (Java 5.3.3
NotificationProcessor): the retry topics (V2, then V1 while retrieveMessageFromPopRetryTopicV1)
first on one request in five, the topic's queue or queues, the retry topics otherwise; an order
queue whose head is held has nothing. Nothing: the request is held like a POP (its own held set,
Java's second PopLongPollingService) and answered when something arrives or at its poll time;
a full held set answers at once with ``pollingFull``.

POLLING_INFO says how many POPs are held for topic@group@queueId: the count kept in the POP
table by every process that holds one, so the answer is the broker's, whichever process
answers it.
"""
import random
from collections.abc import Callable

import orjson

from pybroker.broker.context import BrokerContext
from pybroker.broker.pop.checks import RETRY_FIRST_ONE_IN, ZERO_FIELDS, check_peeking, refuse
from pybroker.broker.pop.long_poll import HeldPop, PollingResult
from pybroker.broker.pop.order_info import OrderInfo
from pybroker.broker.pop.pop_message import fill_born_time
from pybroker.broker.pop.state import PopStateError
from pybroker.protocol import pop
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response
from pybroker.store.pop_table import SlotKey

__all__ = ["handle_notification", "handle_polling_info", "HANDLERS"]


async def handle_notification(ctx: BrokerContext, channel, request: RemotingCommand,
                              rerun: bool = False) -> RemotingCommand | None:
    fill_born_time(request, ctx.now_ms())
    peeking = check_peeking(ctx, channel, request)
    if isinstance(peeking, RemotingCommand):
        return peeking
    header, checked = peeking
    probe = _Probe(ctx, header)
    try:
        has_msg = await probe.run(checked.topic_config.read_queue_nums)
    except PopStateError as error:
        return refuse(request, ResponseCode.SYSTEM_ERROR, str(error))
    polling_full = False
    if not has_msg:
        result = _hold(ctx, channel, request, header, probe)
        if result is PollingResult.POLLING_SUC:
            return None
        polling_full = result is PollingResult.POLLING_FULL
    return create_response(request, ResponseCode.SUCCESS, None,
                           {"hasMsg": str(has_msg).lower(),
                            "pollingFull": str(polling_full).lower()})


def _hold(ctx, channel, request, header, probe: "_Probe") -> PollingResult:
    long_poll = ctx.pop.notification_poll
    if header.poll_time <= 0 or long_poll is None:
        return PollingResult.NOT_POLLING
    key = pop.polling_key(header.topic, header.consumer_group, header.queue_id)
    held = HeldPop(key, channel, header.born_time + header.poll_time, probe.has_work,
                   lambda: handle_notification(ctx, channel, request, rerun=True),
                   probe.retry_at_ms)
    return long_poll.hold(held)


class _Probe:
    def __init__(self, ctx, header):
        self.ctx, self.header = ctx, header
        self.random_q = random.randrange(100)
        self.watched: list[tuple[str, int, int]] = []
        self.retry_at_ms: int | None = None

    def _retry_topics(self) -> list[str]:
        broker, header = self.ctx.config.broker, self.header
        topics = [pop.retry_topic(header.topic, header.consumer_group,
                                  broker.enable_retry_topic_v2)]
        if broker.enable_retry_topic_v2 and broker.retrieve_message_from_pop_retry_topic_v1:
            topics.append(pop.retry_topic_v1(header.topic, header.consumer_group))
        return topics

    async def run(self, read_queue_nums: int) -> bool:
        header = self.header
        need_retry = self.random_q % RETRY_FIRST_ONE_IN == 0
        if need_retry and await self._retry():
            return True
        if header.queue_id < 0:
            found = await self._queues(header.topic, [(self.random_q + i) % read_queue_nums
                                                      for i in range(read_queue_nums)])
        else:
            found = await self._queues(header.topic, [header.queue_id])
        if found:
            return True
        return not need_retry and await self._retry()

    async def _retry(self) -> bool:
        for topic in self._retry_topics():
            topic_config = self.ctx.metadata.topic_config(topic)
            if topic_config is None:
                continue
            count = topic_config.read_queue_nums
            if await self._queues(topic, [(self.random_q + i) % count for i in range(count)]):
                return True
        return False

    async def _queues(self, topic: str, queue_ids: list[int]) -> bool:
        group = self.header.consumer_group
        slots = await self.ctx.pop.slots.slots([SlotKey(topic, group, queue_id)
                                                for queue_id in queue_ids])
        found = False
        for queue_id, slot in zip(queue_ids, slots, strict=True):
            self.watched.append((topic, queue_id, slot))
            found = found or self._has_message(topic, queue_id, slot)
        return found

    def _has_message(self, topic: str, queue_id: int, slot: int) -> bool:
        table, store, now_ms = self.ctx.pop.table, self.ctx.store, self.ctx.now_ms()
        if self.header.order:
            record = table.order_record(slot)
            if record is not None:
                info = OrderInfo.from_json(orjson.loads(record))
                if info.need_block(self.header.attempt_id, 0, now_ms):
                    free_ms = info.lock_free_timestamp(now_ms)
                    if free_ms is not None:
                        self.retry_at_ms = free_ms if self.retry_at_ms is None \
                            else min(self.retry_at_ms, free_ms)
                    return False
        offset = table.pop_offset(slot)
        if offset is None:
            offset = max(0, store.get_min_offset_in_queue(topic, queue_id))
        return store.get_max_offset_in_queue(topic, queue_id) - offset > 0

    def has_work(self) -> bool:
        return any(self._has_message(topic, queue_id, slot)
                   for topic, queue_id, slot in self.watched)


async def handle_polling_info(ctx: BrokerContext, channel,
                              request: RemotingCommand) -> RemotingCommand:
    peeking = check_peeking(ctx, channel, request)
    if isinstance(peeking, RemotingCommand):
        return peeking
    header = peeking.header
    try:
        slot = await ctx.pop.slots.slot(header.topic, header.consumer_group, header.queue_id)
    except PopStateError as error:
        return refuse(request, ResponseCode.SYSTEM_ERROR, str(error))
    fields = dict(ZERO_FIELDS[RequestCode.POLLING_INFO],
                  pollingNum=str(ctx.pop.table.held(slot)))
    return create_response(request, ResponseCode.SUCCESS, None, fields)


HANDLERS: dict[int, Callable] = {RequestCode.NOTIFICATION: handle_notification,
                                 RequestCode.POLLING_INFO: handle_polling_info}
