# PEEK_MESSAGE (200052): look at what a POP would get, without taking it.
"""Peeking (Java 5.3.3 PeekMessageProcessor): the messages from the group's pop offset on (its
queue's first message when it never popped), no filter, no lock, no check-point; the group's
retry topic first on one peek in five, else after the topic while the batch is not full. The
answer is SUCCESS with the records, or PULL_NOT_FOUND; its header carries restNum (messages past
the pop offsets) and zeros."""
import random
from collections.abc import Callable

from pybroker.broker.context import BrokerContext
from pybroker.broker.pop.checks import RETRY_FIRST_ONE_IN, ZERO_FIELDS, check_peeking, refuse
from pybroker.broker.pop.state import PopStateError
from pybroker.protocol import pop
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import MappedBody, RemotingCommand, create_response
from pybroker.store.pop_table import SlotKey
from pybroker.store.status import GetStatus

__all__ = ["handle_peek_message", "HANDLERS"]

_OFFSET_WRONG = frozenset({GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY})


async def handle_peek_message(ctx: BrokerContext, channel,
                              request: RemotingCommand) -> RemotingCommand:
    peeking = check_peeking(ctx, channel, request)
    if isinstance(peeking, RemotingCommand):
        return peeking
    header, checked = peeking
    peek = _Peek(ctx, header)
    try:
        await peek.run(checked.topic_config.read_queue_nums)
    except PopStateError as error:
        peek.release()
        return refuse(request, ResponseCode.SYSTEM_ERROR, str(error))
    fields = dict(ZERO_FIELDS[RequestCode.PEEK_MESSAGE], restNum=str(peek.rest_num))
    if not peek.buffers:
        return create_response(request, ResponseCode.PULL_NOT_FOUND,
                               GetStatus.NO_MESSAGE_IN_QUEUE.name, fields)
    if ctx.stats is not None:
        ctx.stats.group_get(header.topic, header.consumer_group, len(peek.buffers),
                            sum(view.nbytes for view in peek.buffers), False)
    return create_response(request, ResponseCode.SUCCESS, GetStatus.FOUND.name, fields,
                           MappedBody(peek.buffers, peek.release))


class _Peek:
    def __init__(self, ctx, header):
        self.ctx, self.header = ctx, header
        self.random_q = random.randrange(100)
        self.buffers: list = []
        self.rest_num = 0
        self._holds: list = []

    def release(self) -> None:
        holds, self._holds = self._holds, []
        for result in holds:
            result.release()

    async def run(self, read_queue_nums: int) -> None:
        header, ctx = self.header, self.ctx
        need_retry = self.random_q % RETRY_FIRST_ONE_IN == 0
        retry_topic = pop.retry_topic(header.topic, header.consumer_group,
                                      ctx.config.broker.enable_retry_topic_v2)
        if need_retry:
            await self._topic(retry_topic)
        if header.queue_id < 0:
            await self._queues(header.topic, [(self.random_q + i) % read_queue_nums
                                              for i in range(read_queue_nums)])
        else:
            await self._queues(header.topic, [header.queue_id])
        if not need_retry and len(self.buffers) < header.max_msg_nums:
            await self._topic(retry_topic)

    async def _topic(self, topic: str) -> None:
        topic_config = self.ctx.metadata.topic_config(topic)
        if topic_config is not None:
            count = topic_config.read_queue_nums
            await self._queues(topic, [(self.random_q + i) % count for i in range(count)])

    async def _queues(self, topic: str, queue_ids: list[int]) -> None:
        group = self.header.consumer_group
        slots = await self.ctx.pop.slots.slots([SlotKey(topic, group, queue_id)
                                                for queue_id in queue_ids])
        for queue_id, slot in zip(queue_ids, slots, strict=True):
            self._queue(topic, queue_id, slot)

    def _queue(self, topic: str, queue_id: int, slot: int) -> None:
        store, group = self.ctx.store, self.header.consumer_group
        offset = self.ctx.pop.table.pop_offset(slot)
        if offset is None:
            offset = max(0, store.get_min_offset_in_queue(topic, queue_id))
        self.rest_num += store.get_max_offset_in_queue(topic, queue_id) - offset
        wanted = self.header.max_msg_nums - len(self.buffers)
        if wanted <= 0:
            return
        result = store.get_messages(group, topic, queue_id, offset, wanted)
        if result.status in _OFFSET_WRONG:
            offset = result.next_begin_offset
            result.release()
            result = store.get_messages(group, topic, queue_id, offset, wanted)
        self.buffers.extend(result.buffers)
        self._holds.append(result)


HANDLERS: dict[int, Callable] = {RequestCode.PEEK_MESSAGE: handle_peek_message}
