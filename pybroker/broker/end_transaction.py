# END_TRANSACTION (37): commit or roll back a half (prepared) transactional message.
"""The end-transaction handler (protocol.md §2.8, §5.3; Java 4.9 ``EndTransactionProcessor``).

Commit: the half record at ``commitLogOffset`` is validated (it is a half message, its ``PGROUP``
is the request's producer group, its queue offset is ``tranStateTableOffset`` and its physical
offset ``commitLogOffset``; else SYSTEM_ERROR with Java's remark), the final message is rebuilt
(topic and queue from REAL_TOPIC/REAL_QID, properties as stored, sysFlag type COMMIT, prepared
transaction offset = the half record's physical offset, store time of the half record encoded,
which the store replaces at append as Java 4.9's does; see :func:`_final_message`) and put;
then the op marker
(topic RMQ_SYS_TRANS_OP_HALF_TOPIC, same queue as the half record, tag ``d``, body = the half
queue offset in decimal) is written. Rollback: validation and the op marker only. Unknown (0):
nothing, no response.
"""
from pybroker.broker.context import BrokerContext, Handler
from pybroker.broker.interfaces import ClientChannel
from pybroker.protocol.command import RemotingCommand
from pybroker._fast import record as record_codec
from pybroker.broker import send
from pybroker.broker.reput import RePut, real_destination, reput_message
from pybroker.protocol import headers
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_response
from pybroker.protocol.constants import (END_TRANSACTION_COMMIT, END_TRANSACTION_ROLLBACK,
                                         END_TRANSACTION_UNKNOWN, TRANSACTION_TYPE_MASK,
                                         Property, SystemTopic)
from pybroker.protocol.properties import decode_properties, encode_properties
from pybroker.stats.metric_names import TransactionEvent
from pybroker.store.status import send_response

OP_MARKER_TAG = "d"      # TransactionalMessageUtil.REMOVETAG
_FIND_FAILED = "Find prepared transaction message failed"
_CLEARED_ON_COMMIT = frozenset((Property.REAL_TOPIC, Property.REAL_QUEUE_ID,
                                Property.TRANSACTION_PREPARED))


def encode_op_marker(ctx, half_queue_id: int, half_queue_offset: int, now_ms: int) -> bytearray:
    """The op-queue record that marks half queue offset ``half_queue_offset`` finished."""
    properties = encode_properties({Property.TAGS: OP_MARKER_TAG})
    body = str(half_queue_offset).encode()
    return send.encode_message(SystemTopic.TRANS_OP_HALF, half_queue_id, 0, body, properties, 0,
                               now_ms, ctx.store_host, ctx.store_host)


async def put_op_marker(putter, ctx, half_queue_id: int, half_queue_offset: int, now_ms: int):
    """Write the op marker through ``putter``; returns the PutResult."""
    records = encode_op_marker(ctx, half_queue_id, half_queue_offset, now_ms)
    return await putter.put(records, SystemTopic.TRANS_OP_HALF, half_queue_id, 1, 0, False)


def _check_half(decoded, properties: dict[str, str], header) -> None:
    """checkPrepareMessage: SendRefused(SYSTEM_ERROR) with Java's remark on any mismatch."""
    if decoded.topic != SystemTopic.TRANS_HALF or decoded.physical_offset != \
            header.commit_log_offset:
        # Not a half record: Java would find "a message" there; refusing keeps clients from
        # committing arbitrary records.
        raise send.SendRefused(ResponseCode.SYSTEM_ERROR, _FIND_FAILED)
    if properties.get(Property.PRODUCER_GROUP) != header.producer_group:
        raise send.SendRefused(ResponseCode.SYSTEM_ERROR, "The producer group wrong")
    if decoded.queue_offset != header.transaction_state_table_offset:
        raise send.SendRefused(ResponseCode.SYSTEM_ERROR,
                               "The transaction state table offset wrong")


def _final_message(ctx, decoded, properties: dict[str, str]) -> RePut:
    """The committed message (Java 4.9 EndTransactionProcessor.endMessageTransaction).

    Java stores the half record's properties string unchanged: REAL_TOPIC, REAL_QID,
    TRAN_MSG=true, PGROUP and WAIT stay on the committed message. It removes REAL_TOPIC,
    REAL_QID and TRAN_MSG only from the map its store looks at, which matters for a DELAY the
    message carries (the delay redirect then recomputes the string from that map).
    """
    destination = real_destination(properties)
    if destination is None:
        raise send.SendRefused(ResponseCode.SYSTEM_ERROR,
                               "the half message has no REAL_TOPIC/REAL_QID")
    seen = {name: value for name, value in properties.items() if name not in _CLEARED_ON_COMMIT}
    sys_flag = (decoded.sys_flag & ~TRANSACTION_TYPE_MASK) | END_TRANSACTION_COMMIT
    return reput_message(decoded, destination[0], destination[1], properties, redirect=seen,
                         levels_count=len(ctx.config.derived.delay_levels_ms),
                         timer=send.timer_rules(ctx), now_ms=ctx.now_ms(),
                         sys_flag=sys_flag, prepared_transaction_offset=decoded.physical_offset,
                         store_timestamp=decoded.store_timestamp)


async def _end(ctx, header) -> None:
    """Validate the half record, put the final message on commit, then the op marker."""
    selected = ctx.store.look_message_by_offset(header.commit_log_offset) \
        if header.commit_log_offset >= 0 else None
    if selected is None:
        raise send.SendRefused(ResponseCode.SYSTEM_ERROR, _FIND_FAILED)
    decoded: record_codec.MessageRecord | None = None
    try:
        decoded = record_codec.decode(selected.buffer, 0)
        properties = decode_properties(decoded.properties)
        _check_half(decoded, properties, header)
        half_queue_id, half_queue_offset = decoded.queue_id, decoded.queue_offset
        real_topic, born_ms = properties.get(Property.REAL_TOPIC, ""), decoded.born_timestamp
        final = None
        if header.commit_or_rollback == END_TRANSACTION_COMMIT:
            final = _final_message(ctx, decoded, properties)
    finally:
        decoded = None
        selected.release()
    if final is not None:
        result = await ctx.putter.put(final.records, final.topic, final.queue_id, 1,
                                      final.sys_flag, False)
        if not result.status.stored:
            code, remark = send_response(result.status, ctx.config.store.max_message_size)
            raise send.SendRefused(code, remark)
    await put_op_marker(ctx.putter, ctx, half_queue_id, half_queue_offset, ctx.now_ms())
    if ctx.stats is not None:
        # Java's TransactionMetrics (-1) and commit / rollback counters, under the real topic;
        # the finish latency in seconds from the half message's birth, as Java records it.
        committed = final is not None
        ctx.stats.transaction(real_topic, TransactionEvent.COMMITTED if committed
                              else TransactionEvent.ROLLED_BACK)
        if committed:
            ctx.stats.transaction_finished(real_topic, (ctx.now_ms() - born_ms) // 1000)


async def handle_end_transaction(ctx: BrokerContext, channel: ClientChannel,
                                 request: RemotingCommand) -> RemotingCommand | None:
    """END_TRANSACTION (37). Offsets in the header: ``commitLogOffset`` is the half record's
    physical offset (bytes), ``tranStateTableOffset`` its half-queue offset.

    Returns SUCCESS or SYSTEM_ERROR/SLAVE_NOT_AVAILABLE with Java's remark; None for
    commitOrRollback 0 (unknown) and for oneway requests.
    """
    header = headers.parse_request_header(request.code, request.ext_fields)
    decision = header.commit_or_rollback
    if decision == END_TRANSACTION_UNKNOWN:
        return None
    code: int = ResponseCode.SUCCESS
    remark: str | None = None
    if str(ctx.config.store.broker_role) == "SLAVE":
        code, remark = ResponseCode.SLAVE_NOT_AVAILABLE, None
    elif decision not in (END_TRANSACTION_COMMIT, END_TRANSACTION_ROLLBACK):
        code, remark = (ResponseCode.SYSTEM_ERROR,
                        f"commitOrRollback {decision} is not 0, 8 or 12")
    else:
        try:
            await _end(ctx, header)
        except send.SendRefused as refusal:
            code, remark = refusal.code, refusal.remark
    if request.is_oneway:
        return None
    return create_response(request, code, remark)


HANDLERS: dict[int, Handler] = {RequestCode.END_TRANSACTION: handle_end_transaction}
