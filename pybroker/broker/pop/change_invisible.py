# CHANGE_MESSAGE_INVISIBLETIME (200053): keep a popped message invisible longer (or shorter).
"""Changing a popped message's invisible time (Java 5.3.3 ChangeInvisibleTimeProcessor).

Checks: the topic (TOPIC_NOT_EXIST), the queue id (MESSAGE_ILLEGAL), the offset in the queue
(NO_MESSAGE, no remark). Then by the receipt handle:

* non-order: a new check-point for the one message, popped now with the new invisible time,
  is written first, then an ack of the message under its old check-point; the answer carries
  the new pop time and invisible time (the client's new handle). A failed check-point write
  answers SYSTEM_ERROR and nothing else happens; a failed ack write is logged (the message may
  then come back twice, never not at all);
* order: the message's next visible time in the queue's order record is now + the new time;
  the answer keeps the run's pop time and says the invisible time from it. An offset already
  behind the group's offset is answered SUCCESS with nothing changed, as Java does.
"""
import logging
from collections.abc import Callable

import orjson

from pybroker.broker import send
from pybroker.broker.context import BrokerContext
from pybroker.broker.pop import revive_log
from pybroker.broker.pop.ack import lock_slot
from pybroker.broker.pop.checks import topic_not_exist_remark
from pybroker.broker.pop.order_info import OrderInfo
from pybroker.broker.pop.pop_message import take_pending_offset
from pybroker.broker.pop.state import PopStateError
from pybroker.protocol import pop
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.constants import UNSET_RESPONSE_REMARK
from pybroker.protocol.command import RemotingCommand, create_response
from pybroker.protocol.headers import (CHANGE_INVISIBLE_TIME_RESPONSE, encode_header,
                                       parse_request_header)
from pybroker.store.pop_checkpoint import AckMsg, PopCheckPoint

__all__ = ["handle_change_invisible_time", "HANDLERS"]

log = logging.getLogger("pybroker.broker.pop")


def _answer(request: RemotingCommand, code: int, pop_time: int = 0, invisible_time: int = 0,
            revive_qid: int = 0, remark: str = UNSET_RESPONSE_REMARK) -> RemotingCommand:
    # Java's answer always carries the header, zeros when nothing was set, and the remark of
    # RemotingCommand.createResponseCommand(Class) unless one was set.
    fields = encode_header(CHANGE_INVISIBLE_TIME_RESPONSE, {
        "pop_time": pop_time, "invisible_time": invisible_time, "revive_qid": revive_qid})
    return create_response(request, code, remark, fields)


async def handle_change_invisible_time(ctx: BrokerContext, channel,
                                       request: RemotingCommand) -> RemotingCommand:
    """CHANGE_MESSAGE_INVISIBLETIME."""
    header = parse_request_header(request.code, request.ext_fields)
    topic_config = ctx.metadata.topic_config(header.topic)
    if topic_config is None:
        return _answer(request, ResponseCode.TOPIC_NOT_EXIST,
                       remark=topic_not_exist_remark(header.topic))
    if not 0 <= header.queue_id < topic_config.read_queue_nums:
        return _answer(request, ResponseCode.MESSAGE_ILLEGAL,
                       remark=f"queueId[{header.queue_id}] is illegal, topic:[{header.topic}] "
                              f"topicConfig.readQueueNums:[{topic_config.read_queue_nums}] "
                              f"consumer:[/{channel.remote_address}]")
    store = ctx.store
    min_offset = store.get_min_offset_in_queue(header.topic, header.queue_id)
    max_offset = store.get_max_offset_in_queue(header.topic, header.queue_id)
    if not min_offset <= header.queue_offset < max_offset:
        return _answer(request, ResponseCode.NO_MESSAGE)
    try:
        info = pop.parse_extra_info(header.extra_info, pop.CHANGE_READS)
    except pop.HandleError as error:
        # Java's uncaught exception: the remoting layer's answer, no header, the exception.
        return create_response(request, ResponseCode.SYSTEM_ERROR, error.java_text)
    if ctx.pop is None:
        return _answer(request, ResponseCode.SYSTEM_ERROR, remark="POP is not served here")
    try:
        if info.is_order:
            return await _order(ctx, request, header, info)
        return await _renew(ctx, request, header, info)
    except PopStateError as error:
        return _answer(request, ResponseCode.SYSTEM_ERROR, remark=str(error))


async def _renew(ctx, request, header, info: pop.ExtraInfo) -> RemotingCommand:
    broker = ctx.config.broker
    revive_topic = pop.revive_topic(broker.broker_cluster_name)
    now_ms = ctx.now_ms()
    ck = PopCheckPoint(topic=header.topic, cid=header.consumer_group, queue_id=header.queue_id,
                       start_offset=header.queue_offset, pop_time=now_ms,
                       invisible_time=header.invisible_time, num=1, queue_offset_diff=[0],
                       broker_name=info.broker_name)
    put = await revive_log.put_revive_record(ctx.putter, revive_log.checkpoint_message(
        ck, revive_topic, info.revive_qid, ctx.store_host, send.timer_rules(ctx), now_ms))
    if not put.status.stored:
        log.error("change invisible, put new ck error: %s", put.status.name)
        return _answer(request, ResponseCode.SYSTEM_ERROR)
    if ctx.stats is not None:
        ctx.stats.pop_checkpoint(header.topic, header.consumer_group)
    ack = AckMsg(topic=header.topic, consumer_group=header.consumer_group,
                 queue_id=header.queue_id, start_offset=info.ck_queue_offset,
                 pop_time=info.pop_time, ack_offset=header.queue_offset,
                 broker_name=info.broker_name)
    put = await revive_log.put_revive_record(ctx.putter, revive_log.ack_message(
        ack, revive_topic, info.revive_qid, info.pop_time + info.invisible_time,
        ctx.store_host, send.timer_rules(ctx), ctx.now_ms()))
    if ctx.stats is not None:
        ctx.stats.pop_ack(header.topic, header.consumer_group, 1, put.status.stored)
    if not put.status.stored:
        log.error("change Invisible, put ack msg fail: %s, %s", ack, put.status.name)
    return _answer(request, ResponseCode.SUCCESS, now_ms, header.invisible_time,
                   info.revive_qid)


async def _order(ctx, request, header, info: pop.ExtraInfo) -> RemotingCommand:
    table = ctx.pop.table
    slot = await ctx.pop.slots.slot(header.topic, header.consumer_group, header.queue_id)
    current = table.pop_offset(slot)
    if current is not None and header.queue_offset < current:
        return _answer(request, ResponseCode.SUCCESS)
    if not await lock_slot(ctx, slot):
        return _answer(request, ResponseCode.SYSTEM_BUSY,
                       remark="the queue is locked by another request, try again")
    try:
        take_pending_offset(table, slot, ctx.now_ms())
        current = table.pop_offset(slot)
        if current is not None and header.queue_offset < current:
            return _answer(request, ResponseCode.SUCCESS)
        next_visible_ms = ctx.now_ms() + header.invisible_time
        record = table.order_record(slot)
        if record is None:
            log.warning("orderInfo is null, %s@%s, queueOffset: %d", header.topic,
                        header.consumer_group, header.queue_offset)
        else:
            order_info = OrderInfo.from_json(orjson.loads(record))
            if order_info.update_next_visible_time(header.queue_offset, info.pop_time,
                                                   next_visible_ms):
                table.set_order_record(slot, orjson.dumps(order_info.to_json(),
                                                          option=orjson.OPT_NON_STR_KEYS))
    finally:
        table.unlock(slot, ctx.pop.lock_tag)
    return _answer(request, ResponseCode.SUCCESS, info.pop_time,
                   next_visible_ms - info.pop_time, info.revive_qid)


HANDLERS: dict[int, Callable] = {
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: handle_change_invisible_time}
