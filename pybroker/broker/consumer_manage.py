# Consumer offset and ordered-consume lock handlers (QUERY/UPDATE_CONSUMER_OFFSET, LOCK/UNLOCK).
"""Handlers of consumer offsets (protocol.md §2.6) and ordered-consumption locks (§2.9).

They run in the metadata service: offsets and locks live in
:class:`pybroker.broker.metadata.MetadataState`; ``ctx.store`` answers queue min offsets.
"""
from pybroker.broker.context import MetadataContext, MetadataHandler
from pybroker.broker.interfaces import ClientChannel
from pybroker.protocol import bodies
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response
from pybroker.protocol.headers import CONSUMER_OFFSET_RESPONSE, encode_header, parse_request_header

__all__ = ["HANDLERS", "handle_query_consumer_offset", "handle_update_consumer_offset",
           "handle_lock_batch_mq", "handle_unlock_batch_mq"]

NOT_FOUND_REMARK = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
NOT_FOUND_NO_ZERO_REMARK = "Not found, do not set to zero, maybe this group boot first"


def _offset_response(request: RemotingCommand, consumer_offset: int) -> RemotingCommand:
    ext_fields = encode_header(CONSUMER_OFFSET_RESPONSE, {"consumer_offset": consumer_offset})
    return create_response(request, ResponseCode.SUCCESS, ext_fields=ext_fields)


async def handle_query_consumer_offset(ctx: MetadataContext, channel: ClientChannel,
                                       request: RemotingCommand) -> RemotingCommand:
    """QUERY_CONSUMER_OFFSET (14): the committed offset.

    Without one: QUERY_NOT_FOUND when the 5.x header says ``setZeroIfNotFound=false``;
    offset 0 when the queue still starts at 0 (its min offset <= 0: no file deleted, so the
    first message is still there, Java's "in memory" test simplified); else QUERY_NOT_FOUND.
    """
    header = parse_request_header(request.code, request.ext_fields)
    consumer_offset = ctx.metadata.offsets.query(header.consumer_group, header.topic,
                                                 header.queue_id)
    if consumer_offset >= 0:
        return _offset_response(request, consumer_offset)
    if header.set_zero_if_not_found is False:
        return create_response(request, ResponseCode.QUERY_NOT_FOUND, NOT_FOUND_NO_ZERO_REMARK)
    min_offset = ctx.store.get_min_offset_in_queue(header.topic, header.queue_id)
    if min_offset <= 0:
        return _offset_response(request, 0)
    return create_response(request, ResponseCode.QUERY_NOT_FOUND, NOT_FOUND_REMARK)


async def handle_update_consumer_offset(ctx: MetadataContext, channel: ClientChannel,
                                        request: RemotingCommand) -> RemotingCommand | None:
    """UPDATE_CONSUMER_OFFSET (15): record the offset (persisted every 5 s). No response to a
    flagged oneway request (Java's client); Go's unflagged "oneway" gets one."""
    header = parse_request_header(request.code, request.ext_fields)
    await ctx.metadata.commit_offset(header.consumer_group, header.topic, header.queue_id,
                                     header.commit_offset)
    if request.is_oneway:
        return None
    return create_response(request, ResponseCode.SUCCESS)


def _decode_lock_body(request: RemotingCommand) -> bodies.LockBatchRequest | RemotingCommand:
    try:
        return bodies.decode_lock_batch_request(request.body if request.body is not None
                                                else b"")
    except ValueError as error:
        return create_response(request, ResponseCode.SYSTEM_ERROR, str(error))


async def handle_lock_batch_mq(ctx: MetadataContext, channel: ClientChannel,
                               request: RemotingCommand) -> RemotingCommand:
    """LOCK_BATCH_MQ (41): lock queues for ordered consumption (60 s lease); the body lists
    the queues now held by the client."""
    body = _decode_lock_body(request)
    if isinstance(body, RemotingCommand):
        return body
    locked = ctx.metadata.locks.try_lock_batch(body.consumer_group, body.mq_set, body.client_id,
                                         body.only_this_broker)
    return create_response(request, ResponseCode.SUCCESS,
                           body=bodies.encode_lock_batch_response(locked))


async def handle_unlock_batch_mq(ctx: MetadataContext, channel: ClientChannel,
                                 request: RemotingCommand) -> RemotingCommand | None:
    """UNLOCK_BATCH_MQ (42): release the client's locks of the listed queues."""
    body = _decode_lock_body(request)
    if isinstance(body, RemotingCommand):
        return None if request.is_oneway else body
    ctx.metadata.locks.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
    if request.is_oneway:
        return None
    return create_response(request, ResponseCode.SUCCESS)


HANDLERS: dict[int, MetadataHandler] = {
    RequestCode.QUERY_CONSUMER_OFFSET: handle_query_consumer_offset,
    RequestCode.UPDATE_CONSUMER_OFFSET: handle_update_consumer_offset,
    RequestCode.LOCK_BATCH_MQ: handle_lock_batch_mq,
    RequestCode.UNLOCK_BATCH_MQ: handle_unlock_batch_mq,
}
