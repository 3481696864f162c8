# Read-only data handlers: query by key, view by id, and queue offset / time look-ups.
"""QUERY_MESSAGE 12, VIEW_MESSAGE_BY_ID 33 (Java ``QueryMessageProcessor``, protocol.md §2.4) and
GET_MAX_OFFSET 30, GET_MIN_OFFSET 31, SEARCH_OFFSET_BY_TIMESTAMP 29, GET_EARLIEST_MSG_STORETIME 32
(Java ``AdminBrokerProcessor``, protocol.md §2.6).

Every answer is read from ``ctx.store`` in the worker that received the request. Record bodies
are the raw CommitLog records, copied once from the mapped file into the response body. Under
ACL (``ctx.read_check``) a record is answered only when the requester may SUB its own topic:
view by id names no topic, and a key query also finds records of other topics whose
``topic#key`` hashes the same.
"""
from pybroker._fast import record as record_codec
from pybroker.broker.context import BrokerContext, Handler
from pybroker.broker.interfaces import ClientChannel
from pybroker.protocol import constants
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response
from pybroker.protocol.headers import (QUERY_MESSAGE_RESPONSE, QUEUE_OFFSET_RESPONSE,
                                       STORE_TIMESTAMP_RESPONSE, encode_header,
                                       java_parse_boolean, parse_request_header)

__all__ = ["handle_query_message", "handle_view_message_by_id", "handle_get_max_offset",
           "handle_get_min_offset", "handle_search_offset_by_timestamp",
           "handle_get_earliest_msg_storetime", "HANDLERS"]

_BOUNDARY_UPPER = "upper"
_BOUNDARY_LOWER = "lower"
_BOUNDARY_NEAREST = "nearest"


async def handle_query_message(ctx: BrokerContext, channel: ClientChannel,
                               request: RemotingCommand) -> RemotingCommand:
    """QUERY_MESSAGE: records indexed under ``topic#key`` stored within [beginTimestamp,
    endTimestamp] (ms). With ext ``_UNIQUE_KEY_QUERY=true`` the key is a message's UNIQ_KEY
    and maxNum is the store's defaultQueryMaxNum. QUERY_NOT_FOUND when nothing matches; the
    index position header is present either way."""
    header = parse_request_header(request.code, request.ext_fields)
    max_num = header.max_num
    if java_parse_boolean(request.ext_fields.get(constants.UNIQUE_KEY_QUERY_EXT)):
        max_num = ctx.config.store.default_query_max_num
    result = ctx.store.query_messages(header.topic, header.key, max_num,
                                      header.begin_timestamp, header.end_timestamp)
    try:
        ext_fields = encode_header(QUERY_MESSAGE_RESPONSE, {
            "index_last_update_timestamp": result.index_last_update_timestamp,
            "index_last_update_physical_offset": result.index_last_update_phy_offset,
        })
        records = result.buffers
        check = ctx.read_check
        if check is not None:
            records = [record for record in records if check.may_read(
                request, channel.remote_address, record_codec.decode(record, 0).topic)]
        if records:
            return create_response(request, ResponseCode.SUCCESS, None, ext_fields,
                                   b"".join(records))
    finally:
        result.release()
    return create_response(request, ResponseCode.QUERY_NOT_FOUND,
                           "can not find message, maybe time range not correct", ext_fields)


async def handle_view_message_by_id(ctx: BrokerContext, channel: ClientChannel,
                                    request: RemotingCommand) -> RemotingCommand:
    """VIEW_MESSAGE_BY_ID: the one raw record at the CommitLog physical ``offset`` (bytes);
    SYSTEM_ERROR when no whole record starts there."""
    header = parse_request_header(request.code, request.ext_fields)
    physical_offset = header.physical_offset
    selected = ctx.store.look_message_by_offset(physical_offset) if physical_offset >= 0 else None
    if selected is None:
        return create_response(request, ResponseCode.SYSTEM_ERROR,
                               f"can not find message by the offset, {physical_offset}")
    with selected:
        if ctx.read_check is not None:
            ctx.read_check.check_read(request, channel.remote_address,
                                      record_codec.decode(selected.buffer, 0).topic)
        body = bytes(selected.buffer)
    return create_response(request, ResponseCode.SUCCESS, None, None, body)


def _queue_offset_response(request: RemotingCommand, queue_offset: int) -> RemotingCommand:
    ext_fields = encode_header(QUEUE_OFFSET_RESPONSE, {"queue_offset": queue_offset})
    return create_response(request, ResponseCode.SUCCESS, None, ext_fields)


async def handle_get_max_offset(ctx: BrokerContext, channel: ClientChannel,
                                request: RemotingCommand) -> RemotingCommand:
    """GET_MAX_OFFSET: the queue's next offset to be written (its entry count); 0 when the
    queue does not exist. The 5.x ``committed`` flag changes nothing: only dispatched (hence
    committed) entries are visible to a worker."""
    header = parse_request_header(request.code, request.ext_fields)
    return _queue_offset_response(
        request, ctx.store.get_max_offset_in_queue(header.topic, header.queue_id))


async def handle_get_min_offset(ctx: BrokerContext, channel: ClientChannel,
                                request: RemotingCommand) -> RemotingCommand:
    """GET_MIN_OFFSET: the queue's first valid offset; 0 when the queue does not exist."""
    header = parse_request_header(request.code, request.ext_fields)
    queue_offset = ctx.store.get_min_offset_in_queue(header.topic, header.queue_id)
    # Java creates a missing consume queue on this look-up, so it answers 0, never -1.
    return _queue_offset_response(request, max(queue_offset, 0))


def _boundary(boundary_type: str | None) -> str:
    """Java 5.x BoundaryType.getType: "upper" in any case is UPPER, anything else LOWER. A
    request without boundaryType (4.x clients) gets Java 4.9's answer: the nearest store time
    (docs/compatibility.md)."""
    if boundary_type is None:
        return _BOUNDARY_NEAREST
    if boundary_type.lower() == _BOUNDARY_UPPER:
        return _BOUNDARY_UPPER
    return _BOUNDARY_LOWER


async def handle_search_offset_by_timestamp(ctx: BrokerContext, channel: ClientChannel,
                                            request: RemotingCommand) -> RemotingCommand:
    """SEARCH_OFFSET_BY_TIMESTAMP: the queue offset of the message stored at ``timestamp``
    (ms), by the LOWER or UPPER ``boundaryType`` (5.x clients), the nearest without one."""
    header = parse_request_header(request.code, request.ext_fields)
    queue_offset = ctx.store.get_offset_in_queue_by_time(
        header.topic, header.queue_id, header.timestamp, _boundary(header.boundary_type))
    return _queue_offset_response(request, queue_offset)


async def handle_get_earliest_msg_storetime(ctx: BrokerContext, channel: ClientChannel,
                                            request: RemotingCommand) -> RemotingCommand:
    """GET_EARLIEST_MSG_STORETIME: store time (ms) of the queue's first message; -1 if none."""
    header = parse_request_header(request.code, request.ext_fields)
    timestamp_ms = ctx.store.get_earliest_message_time(header.topic, header.queue_id)
    ext_fields = encode_header(STORE_TIMESTAMP_RESPONSE, {"timestamp": timestamp_ms})
    return create_response(request, ResponseCode.SUCCESS, None, ext_fields)


HANDLERS: dict[int, Handler] = {
    RequestCode.QUERY_MESSAGE: handle_query_message,
    RequestCode.VIEW_MESSAGE_BY_ID: handle_view_message_by_id,
    RequestCode.GET_MAX_OFFSET: handle_get_max_offset,
    RequestCode.GET_MIN_OFFSET: handle_get_min_offset,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: handle_search_offset_by_timestamp,
    RequestCode.GET_EARLIEST_MSG_STORETIME: handle_get_earliest_msg_storetime,
}
