# AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue over the broker's POP.
"""The proxy's consumer activities that take a receipt handle, run on this worker's own POP
handlers (pybroker/broker/pop/: ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME) and send-back
(CONSUMER_SEND_MSG_BACK), as the Java 5.3.3 proxy sends them to its broker.

A gRPC receipt handle is the POP's extraInfo with the message's CommitLog offset appended
(the proxy's ``createHandle``: ``<ck offset> <pop time> <invisible time> <revive queue>
<retry flag> <broker> <queue id> <queue offset> <commit log offset>``). Refusals as the proxy
gives them (enableBatchAck=false, its default: entries acked one by one):

* a handle that does not parse: INTERNAL_SERVER_ERROR "<message>. <exception name>. <frame>"
  (the proxy's ExceptionUtils.getErrorDetailMessage; the frames the proxy 5.3.3 names on
  Java 17, as seen from it);
* a handle whose invisible time has passed (ack and change only): INVALID_RECEIPT_HANDLE
  "receipt handle is expired";
* a broker answer other than SUCCESS: the entry's INTERNAL_SERVER_ERROR "ack failed: status
  is abnormal" / "changeInvisibleDuration failed: status is abnormal"; a send-back's answer
  through the proxy's code table.
"""
import dataclasses
import logging

from pybroker import clock
from pybroker.broker.channel import Channel
from pybroker.grpc_service import checks
from pybroker.grpc_service.status import (OK_STATUS, Code, GrpcRefused, proxy_exception, status,
                                          status_of_answer)
from pybroker.protocol import headers, pop
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.protocol.constants import KEY_SEPARATOR
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb

__all__ = ["ReceiptHandle", "BadHandle", "decode_handle", "handle_expired", "ack_message",
           "change_invisible_duration", "change_invisible", "forward_to_dead_letter_queue",
           "ack_one", "ack_request", "acked_entry", "ack_response", "forward_one",
           "validate_invisible_time", "grpc_handle", "handle_request"]

log = logging.getLogger("pybroker.grpc.consumer")

_HANDLE_FIELDS_MIN = 8          # ReceiptHandle.decode: "Parse failed, dataList size N" below
# The top stack frames of the proxy's two parse failures (its getErrorDetailMessage).
_DECODE_FRAME = "org.apache.rocketmq.common.consumer.ReceiptHandle.decode(ReceiptHandle.java:56)"
_NUMBER_FRAME = ("java.base/java.lang.NumberFormatException.forInputString("
                 "NumberFormatException.java:67)")


@dataclasses.dataclass(frozen=True)
class ReceiptHandle:
    """A decoded gRPC receipt handle (Java's ReceiptHandle); ``text`` is the handle as sent."""
    start_offset: int
    retrieve_time: int
    invisible_time: int
    revive_queue_id: int
    retry: str
    broker_name: str
    queue_id: int
    offset: int
    commit_log_offset: int
    text: str

    @property
    def expired(self) -> bool:
        return handle_expired(self.retrieve_time, self.invisible_time, clock.now_ms())

    def real_topic(self, topic: str, group: str) -> str:
        """The topic the handle's message was popped from (the group's retry topic or
        ``topic``)."""
        return pop.real_topic(topic, group, self.retry)


def handle_expired(retrieve_time: int, invisible_time: int, now: int) -> bool:
    """ReceiptHandle.isExpired: the handle's invisible time has passed at ``now`` (ms)."""
    return retrieve_time + invisible_time <= now


class BadHandle(Exception):
    """A handle that does not parse, with the proxy's detail message."""


def decode_handle(text: str) -> ReceiptHandle:
    """ReceiptHandle.decode; BadHandle with the proxy's detail message when it fails."""
    parts = text.split(KEY_SEPARATOR)
    while parts and not parts[-1]:
        parts.pop()                      # Java's split drops trailing empty strings
    if len(parts) < _HANDLE_FIELDS_MIN:
        raise BadHandle(f"Parse failed, dataList size {len(parts)}. "
                         f"IllegalArgumentException. {_DECODE_FRAME}")
    try:
        info = pop.parse_extra_info(KEY_SEPARATOR.join(parts[:_HANDLE_FIELDS_MIN]),
                                    pop.CLIENT_READS + ("getQueueOffset",))
        commit_log_offset = pop.parse_java_long(parts[8]) if len(parts) > 8 else -1
    except ValueError as error:
        raise BadHandle(f"{error}. NumberFormatException. {_NUMBER_FRAME}") from None
    assert info.queue_offset is not None
    return ReceiptHandle(info.ck_queue_offset, info.pop_time, info.invisible_time,
                         info.revive_qid, info.retry, info.broker_name, info.queue_id,
                         info.queue_offset, commit_log_offset, text)


def grpc_handle(extra_info: str, commit_log_offset: int) -> str:
    """The handle an SDK gets for a POP's extraInfo (the proxy's createHandle)."""
    return f"{extra_info}{KEY_SEPARATOR}{commit_log_offset}"


def validate_invisible_time(grpc_config, invisible_ms: int, minimum_ms: int = 0) -> None:
    """GrpcValidator.validateInvisibleTime."""
    if invisible_ms < minimum_ms:
        raise GrpcRefused(Code.ILLEGAL_INVISIBLE_TIME,
                          f"the invisibleTime is too small. min is {minimum_ms}")
    maximum_ms = grpc_config.max_invisible_time_mills
    if 0 < maximum_ms < invisible_ms:
        raise GrpcRefused(Code.ILLEGAL_INVISIBLE_TIME,
                          f"the invisibleTime is too large. max is {maximum_ms}")


def _expired_refusal() -> GrpcRefused:
    return proxy_exception(Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired")


def _channel(host, rctx) -> Channel:
    return Channel(host.channel_id(rctx), rctx.remote_address, rctx.language, rctx.version)


async def _run(host, rctx, code: int, fields: dict):
    return await handle_request(host, rctx, create_request(code, fields))


async def handle_request(host, rctx, request):
    """The worker's handler's answer to ``request`` (never held) for the call of ``rctx``."""
    handler = host.local_handler(request.code)
    assert handler is not None, f"no handler of {request.code} in a gRPC worker"
    answer = await handler(host.ctx, _channel(host, rctx), request)
    assert answer is not None, f"{request.code} is never held"
    return answer


def ack_request(handle: ReceiptHandle, group: str, topic: str):
    """The ACK_MESSAGE request of an unexpired ``handle`` (ConsumerProcessor.ackMessage)."""
    fields = headers.encode_header(headers.ACK_MESSAGE_REQUEST, {
        "consumer_group": group, "topic": handle.real_topic(topic, group),
        "queue_id": handle.queue_id, "extra_info": handle.text, "queue_offset": handle.offset})
    return create_request(RequestCode.ACK_MESSAGE, fields)


async def ack_one(host, rctx, handle: ReceiptHandle, group: str, topic: str) -> bool:
    """ACK_MESSAGE of one handle (ConsumerProcessor.ackMessage): through the worker's ACK
    fast path when it takes it (``host.fast_acks``), else the handler; True when the broker
    said SUCCESS. GrpcRefused when the handle has expired."""
    if handle.expired:
        raise _expired_refusal()
    request = ack_request(handle, group, topic)
    fast_acks = host.fast_acks
    answered = fast_acks.put(request) if fast_acks is not None else None
    if answered is not None:                # the ACK fast path took it (fast_acks.py)
        return await answered == ResponseCode.SUCCESS
    answer = await handle_request(host, rctx, request)
    return answer.code == ResponseCode.SUCCESS


def _entry_status(error: Exception) -> pb.Status:
    if isinstance(error, GrpcRefused):
        return status(error.code, error.message)
    return status(Code.INTERNAL_SERVER_ERROR, str(error))


async def _ack_entry(host, rctx, group: str, topic: str,
                     entry: spb.AckMessageEntry) -> spb.AckMessageResultEntry:
    result = spb.AckMessageResultEntry(message_id=entry.message_id,
                                       receipt_handle=entry.receipt_handle)
    try:
        text = await host.renewals.take(rctx, group, entry.message_id, entry.receipt_handle)
        acked = await ack_one(host, rctx, decode_handle(text), group, topic)
    except (GrpcRefused, BadHandle) as error:
        result.status.CopyFrom(_entry_status(error))
        return result
    return acked_entry(result, acked)


def acked_entry(result: spb.AckMessageResultEntry, acked: bool) -> spb.AckMessageResultEntry:
    """``result`` with the status of an ack the broker answered (``acked``: SUCCESS)."""
    result.status.CopyFrom(OK_STATUS if acked else status(
        Code.INTERNAL_SERVER_ERROR, "ack failed: status is abnormal"))
    return result


async def ack_message(host, rctx, request: spb.AckMessageRequest) -> spb.AckMessageResponse:
    """AckMessageActivity.ackMessageOneByOne: one status per entry, the response's is their
    common code (MULTIPLE_RESULTS when they differ)."""
    checks.validate_topic(request.topic.name)
    checks.validate_group(request.group.name)
    group, topic = request.group.name, request.topic.name
    return ack_response([await _ack_entry(host, rctx, group, topic, entry)
                         for entry in request.entries])


def ack_response(entries: list) -> spb.AckMessageResponse:
    """AckMessage's answer for its result entries."""
    codes = {entry.status.code for entry in entries}
    if len(codes) > 1:
        overall = status(Code.MULTIPLE_RESULTS)
    elif codes:
        overall = status(codes.pop())
    else:
        overall = status(Code.INTERNAL_SERVER_ERROR, "ack message result is empty")
    return spb.AckMessageResponse(status=overall, entries=entries)


async def change_invisible_duration(host, rctx, request: spb.ChangeInvisibleDurationRequest):
    """ChangeInvisibleDurationActivity: a new handle for the message, invisible for the
    duration from now (the broker's new one-message check-point)."""
    checks.validate_topic(request.topic.name)
    checks.validate_group(request.group.name)
    invisible_ms = request.invisible_duration.ToMilliseconds()
    validate_invisible_time(host.ctx.config.grpc, invisible_ms)
    group = request.group.name
    text = await host.renewals.take(rctx, group, request.message_id, request.receipt_handle)
    new_handle = await change_invisible(host, rctx, text, group, request.topic.name,
                                        invisible_ms)
    if new_handle is None:
        return spb.ChangeInvisibleDurationResponse(status=status(
            Code.INTERNAL_SERVER_ERROR, "changeInvisibleDuration failed: status is abnormal"))
    return spb.ChangeInvisibleDurationResponse(status=OK_STATUS, receipt_handle=new_handle)


async def change_invisible(host, rctx, text: str, group: str, topic: str,
                           invisible_ms: int) -> str | None:
    """CHANGE_MESSAGE_INVISIBLETIME of the handle ``text`` (ConsumerProcessor
    .changeInvisibleTime, for the activity and the renewals): the new handle, None when the
    broker did not answer SUCCESS; GrpcRefused when the handle does not parse or has
    expired."""
    try:
        handle = decode_handle(text)
    except BadHandle as error:
        raise GrpcRefused(Code.INTERNAL_SERVER_ERROR, str(error)) from None
    if handle.expired:
        raise _expired_refusal()
    topic = handle.real_topic(topic, group)
    fields = headers.encode_header(headers.CHANGE_INVISIBLE_TIME_REQUEST, {
        "consumer_group": group, "topic": topic, "queue_id": handle.queue_id,
        "extra_info": handle.text, "queue_offset": handle.offset,
        "invisible_time": invisible_ms})
    answer = await _run(host, rctx, RequestCode.CHANGE_MESSAGE_INVISIBLETIME, fields)
    if answer.code != ResponseCode.SUCCESS:
        return None
    header = headers.CHANGE_INVISIBLE_TIME_RESPONSE.parse(answer.ext_fields)
    # The proxy in cluster mode: a one-message check-point at the message's own offset.
    extra_info = pop.build_extra_info(handle.offset, header.pop_time, header.invisible_time,
                                      header.revive_qid, topic, handle.broker_name,
                                      handle.queue_id, handle.offset)
    return grpc_handle(extra_info, handle.commit_log_offset)


async def forward_one(host, rctx, handle: ReceiptHandle, message_id: str, group: str,
                      topic: str):
    """ProducerProcessor.forwardMessageToDeadLetterQueue: CONSUMER_SEND_MSG_BACK straight to
    the DLQ (delay level -1, max reconsume times 0), then the message is acked. Returns the
    send-back's answer."""
    if handle.commit_log_offset < 0:
        raise proxy_exception(Code.INVALID_RECEIPT_HANDLE, "commit log offset is empty")
    fields = headers.encode_header(headers.CONSUMER_SEND_MSG_BACK_REQUEST, {
        "physical_offset": handle.commit_log_offset, "group": group, "delay_level": -1,
        "origin_msg_id": message_id, "origin_topic": handle.real_topic(topic, group),
        "max_reconsume_times": 0})
    answer = await _run(host, rctx, RequestCode.CONSUMER_SEND_MSG_BACK, fields)
    if answer.code == ResponseCode.SUCCESS:
        try:
            await ack_one(host, rctx, handle, group, topic)
        except GrpcRefused as refused:          # the proxy ignores the ack's outcome
            log.debug("ack after the DLQ send-back refused: %s", refused.message)
    return answer


async def forward_to_dead_letter_queue(host, rctx,
                                       request: spb.ForwardMessageToDeadLetterQueueRequest):
    """ForwardMessageToDLQActivity: the send-back's answer through the proxy's code table."""
    checks.validate_topic(request.topic.name)
    checks.validate_group(request.group.name)
    text = await host.renewals.take(rctx, request.group.name, request.message_id,
                                    request.receipt_handle)
    try:
        handle = decode_handle(text)
    except BadHandle as error:
        raise GrpcRefused(Code.INTERNAL_SERVER_ERROR, str(error)) from None
    answer = await forward_one(host, rctx, handle, request.message_id, request.group.name,
                               request.topic.name)
    return spb.ForwardMessageToDeadLetterQueueResponse(
        status=status_of_answer(answer.code, answer.remark))
