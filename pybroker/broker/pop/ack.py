# ACK_MESSAGE (200051) and BATCH_ACK_MESSAGE (200151): a popped message is done.
"""Acknowledging popped messages (Java 5.3.3 AckMessageProcessor, without the KV service).

ACK_MESSAGE checks the topic (TOPIC_NOT_EXIST), the queue id (MESSAGE_ILLEGAL) and that the
offset lies in the queue (NO_MESSAGE), then by the receipt handle (``extraInfo``):

* a non-order POP's ack is an ack record on the check-point's revive queue, due at the
  check-point's revive time (its revive reads them together); it is answered once written;
* an order POP's ack (revive queue 999) marks the message in the queue's order record under the
  queue's lock and moves the group's offset to the run's first unacknowledged message (MESSAGE_
  ILLEGAL when the offset is not in the run); a queue whose head is then free wakes held POPs,
  in whichever process they wait.

BATCH_ACK_MESSAGE carries several queues' acks in its body (NO_MESSAGE when it has none); the
offsets outside a queue's bounds are left out, a queue with none left writes nothing, and
nothing in it is refused (Java answers SUCCESS whatever it could not use).

Most ACK_MESSAGEs of a remoting worker never reach this handler: the frame taker of the ACK
fast path (broker/pop/ack_fast.py, proc/ack_port.py, _fast/pop/) puts the non-order ones whose
queue it knows in C and ends them with :func:`ack_put` and ``PopTable.take_acked``; this
handler stays the reference for everything else (docs/architecture/pop.md).
"""
import asyncio
import logging
from collections.abc import Callable

import orjson

from pybroker.broker import send
from pybroker.broker.context import BrokerContext
from pybroker.broker.pop import revive_log
from pybroker.broker.pop.checks import topic_not_exist_remark
from pybroker.broker.pop.order_info import NEXT_OFFSET_ILLEGAL, OrderInfo
from pybroker.broker.pop.pop_message import ORDER_LOCK_WAIT_MS, take_pending_offset
from pybroker.broker.pop.state import PopStateError
from pybroker.protocol import pop, pop_bodies
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response
from pybroker.protocol.constants import PopConstants
from pybroker.protocol.headers import parse_request_header
from pybroker.store.pop_checkpoint import AckMsg, BatchAckMsg
from pybroker.store.status import PutStatus

__all__ = ["handle_ack_message", "HANDLERS", "ack_orderly", "lock_slot", "ack_put"]

log = logging.getLogger("pybroker.broker.pop")
_LOCK_POLL_S = 0.001


async def lock_slot(ctx, slot: int) -> bool:
    """Take a slot's lock, waiting for another holder at most ORDER_LOCK_WAIT_MS (Java spins
    until it gets it; a holder's hold is one store read and one append at most)."""
    table, tag = ctx.pop.table, ctx.pop.lock_tag
    deadline_ms = ctx.now_ms() + ORDER_LOCK_WAIT_MS
    while not table.try_lock(slot, tag):
        if ctx.now_ms() >= deadline_ms:
            return False
        await asyncio.sleep(_LOCK_POLL_S)
    return True


async def handle_ack_message(ctx: BrokerContext, channel,
                             request: RemotingCommand) -> RemotingCommand:
    """ACK_MESSAGE or BATCH_ACK_MESSAGE."""
    if ctx.pop is None:
        return create_response(request, ResponseCode.SYSTEM_ERROR, "POP is not served here")
    response = create_response(request, ResponseCode.SUCCESS)
    try:
        if request.code == RequestCode.ACK_MESSAGE:
            return await _single(ctx, channel, request, response)
        return await _batch(ctx, channel, request, response)
    except PopStateError as error:
        return create_response(request, ResponseCode.SYSTEM_ERROR, str(error))


async def _single(ctx, channel, request, response) -> RemotingCommand:
    header = parse_request_header(request.code, request.ext_fields)
    topic_config = ctx.metadata.topic_config(header.topic)
    if topic_config is None:
        return create_response(request, ResponseCode.TOPIC_NOT_EXIST,
                               topic_not_exist_remark(header.topic))
    if not 0 <= header.queue_id < topic_config.read_queue_nums:
        return create_response(request, ResponseCode.MESSAGE_ILLEGAL,
                               f"queueId[{header.queue_id}] is illegal, topic:[{header.topic}] "
                               f"topicConfig.readQueueNums:[{topic_config.read_queue_nums}] "
                               f"consumer:[/{channel.remote_address}]")
    outside = ctx.store.offset_outside_queue(header.topic, header.queue_id, header.queue_offset)
    if outside is not None:
        min_offset, max_offset = outside
        return create_response(request, ResponseCode.NO_MESSAGE,
                               f"offset is illegal, key:{header.topic}@{header.queue_id}, "
                               f"commit:{header.queue_offset}, store:{min_offset}~{max_offset}")
    try:
        info = pop.parse_extra_info(header.extra_info, pop.ACK_READS)
    except pop.HandleError as error:      # Java's uncaught exception, as its remark prints it
        return create_response(request, ResponseCode.SYSTEM_ERROR, error.java_text)
    if info.is_order:
        return await ack_orderly(ctx, channel, response, header.topic, header.consumer_group,
                                 header.queue_id, header.queue_offset, info.pop_time,
                                 info.invisible_time)
    ack = AckMsg(topic=header.topic, consumer_group=header.consumer_group,
                 queue_id=header.queue_id, start_offset=info.ck_queue_offset,
                 pop_time=info.pop_time, ack_offset=header.queue_offset,
                 broker_name=info.broker_name)
    await _write_ack(ctx, ack, info.revive_qid, info.pop_time + info.invisible_time, 1)
    return response


async def _batch(ctx, channel, request, response) -> RemotingCommand:
    if not request.body:            # Java's reqBody == null: no body on the wire
        return create_response(request, ResponseCode.NO_MESSAGE)
    try:
        broker_name, acks = pop_bodies.decode_batch_ack_body(request.body)
    except ValueError as error:
        return create_response(request, ResponseCode.SYSTEM_ERROR, str(error))
    if not acks:
        return create_response(request, ResponseCode.NO_MESSAGE)
    for batch_ack in acks:
        await _batch_one(ctx, channel, response, batch_ack, broker_name)
    return response


async def _batch_one(ctx, channel, response, batch_ack: pop_bodies.BatchAck,
                     broker_name: str | None) -> None:
    try:
        topic = pop.real_topic(batch_ack.topic, batch_ack.consumer_group, batch_ack.retry)
    except ValueError as error:
        log.error("batch ack with a bad retry flag %r: %s", batch_ack.retry, error)
        return
    store = ctx.store
    min_offset, max_offset = store.get_offset_bounds_in_queue(topic, batch_ack.queue_id)
    if min_offset == -1:
        log.error("Illegal topic or queue found when batch ack %s", batch_ack)
        return
    offsets = [offset for offset in (batch_ack.start_offset + bit for bit in batch_ack.bits)
               if min_offset <= offset <= max_offset]
    if batch_ack.revive_queue_id == PopConstants.ORDER_REVIVE_QUEUE:
        for offset in offsets:
            await ack_orderly(ctx, channel, response, topic, batch_ack.consumer_group,
                              batch_ack.queue_id, offset, batch_ack.pop_time,
                              batch_ack.invisible_time)
        return
    if not offsets:
        return
    ack = BatchAckMsg(topic=topic, consumer_group=batch_ack.consumer_group,
                      queue_id=batch_ack.queue_id, start_offset=batch_ack.start_offset,
                      pop_time=batch_ack.pop_time, ack_offset=-1, broker_name=broker_name,
                      ack_offsets=offsets)
    await _write_ack(ctx, ack, batch_ack.revive_queue_id,
                     batch_ack.pop_time + batch_ack.invisible_time, len(offsets))


async def _write_ack(ctx, ack: AckMsg, revive_qid: int, deliver_ms: int, count: int) -> None:
    """Put the ack record (Java logs a failure and answers SUCCESS all the same) and take the
    acked messages out of the in-flight count."""
    broker = ctx.config.broker
    record = revive_log.ack_message(ack, pop.revive_topic(broker.broker_cluster_name),
                                    revive_qid, deliver_ms, ctx.store_host,
                                    send.timer_rules(ctx), ctx.now_ms())
    put = await revive_log.put_revive_record(ctx.putter, record)
    ack_put(ctx, ack.topic, ack.consumer_group, count, put.status, ack)
    slot = await ctx.pop.slots.slot(ack.topic, ack.consumer_group, ack.queue_id)
    ctx.pop.table.take_acked(slot, ack.pop_time, count)


def ack_put(ctx, topic: str, group: str, count: int, status: PutStatus, ack: object) -> None:
    """An ack record of ``count`` acks was put with ``status``: counted (GROUP_ACK_NUMS,
    BROKER_ACK_NUMS) and logged (``ack`` describes it), as Java, whatever the outcome. The
    handler and the fast path (broker/pop/ack_fast.py) both end here."""
    stored = status.stored
    if ctx.stats is not None:
        ctx.stats.pop_ack(topic, group, count, stored)
    if not stored:
        log.error("put ack msg error: %s %s", status.name, ack)
    elif ctx.config.broker.enable_pop_log:
        log.info("ack written: %s", ack)


async def ack_orderly(ctx, channel, response: RemotingCommand, topic: str, group: str,
                      queue_id: int, queue_offset: int, pop_time: int,
                      invisible_time: int) -> RemotingCommand:
    """An order POP's ack (Java ackOrderly); sets MESSAGE_ILLEGAL on ``response`` when the
    offset is not in the queue's run."""
    table = ctx.pop.table
    slot = await ctx.pop.slots.slot(topic, group, queue_id)
    current = table.pop_offset(slot)
    if current is not None and queue_offset < current:
        return response
    if not await lock_slot(ctx, slot):
        response.code = ResponseCode.SYSTEM_BUSY
        response.remark = "the queue is locked by another request, try again"
        return response
    try:
        now_ms = ctx.now_ms()
        take_pending_offset(table, slot, now_ms)
        current = table.pop_offset(slot)
        if current is not None and queue_offset < current:
            return response
        next_offset, info = _commit_and_next(table, slot, queue_offset, pop_time, now_ms)
        if next_offset > NEXT_OFFSET_ILLEGAL:
            table.set_pop_offset(slot, next_offset)
            if info is None or not info.need_block(None, invisible_time, now_ms):
                ctx.pop.notify_held()
        elif next_offset == NEXT_OFFSET_ILLEGAL:
            response.code = ResponseCode.MESSAGE_ILLEGAL
            response.remark = (f"offset is illegal, key:{pop.polling_key(topic, group, queue_id)}"
                               f", old:{-1 if current is None else current}, "
                               f"commit:{queue_offset}, next:{next_offset}, "
                               f"/{channel.remote_address}")
            return response
    finally:
        table.unlock(slot, ctx.pop.lock_tag)
    table.take_acked(slot, pop_time, 1)
    return response


def _commit_and_next(table, slot: int, queue_offset: int, pop_time: int,
                     now_ms: int) -> tuple[int, OrderInfo | None]:
    """Java ConsumerOrderInfoManager.commitAndNext over the slot's record."""
    record = table.order_record(slot)
    if record is None:
        return queue_offset + 1, None
    info = OrderInfo.from_json(orjson.loads(record))
    next_offset = info.commit_and_next(queue_offset, pop_time)
    if next_offset >= 0:
        table.set_order_record(slot, orjson.dumps(info.to_json(),
                                                  option=orjson.OPT_NON_STR_KEYS))
    return next_offset, info


HANDLERS: dict[int, Callable] = {RequestCode.ACK_MESSAGE: handle_ack_message,
                                 RequestCode.BATCH_ACK_MESSAGE: handle_ack_message}
