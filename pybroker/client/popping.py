# One POP_MESSAGE round trip and the acks: what the 5.x POP consumers of the client share.
"""The POP requests (5.x, protocol.md §2.3's POP codes) and their outcome, as Java 5.3.3's
MQClientAPIImpl sends and reads them.

:func:`pop_messages` sends one POP_MESSAGE (JSON header: codes past 32767 cannot travel in
the binary one) and returns a :class:`PopResult`: the messages (FOUND) each carrying its
*receipt handle* (property ``POP_CK``: the broker sets it for retried messages, the client
builds it from the answer's startOffsetInfo/msgOffsetInfo for the others), and for an order POP
the reconsume count the answer's orderCountInfo reports. POLLING_FULL, POLLING_TIMEOUT and
PULL_NOT_FOUND are statuses, anything else raises the typed error.

:func:`ack_message`, :func:`batch_ack_messages` and :func:`change_invisible_time` take
messages popped; the new handle of a changed message replaces its ``POP_CK``.
"""
import dataclasses
import enum
import time
from collections.abc import Iterable
from typing import Optional

from pybroker.client.errors import ClientError
from pybroker.client.instance import ClientInstance, check_response, request
from pybroker.client.message import MessageExt, decode_messages
from pybroker.errors import HeaderError
from pybroker.protocol import headers, pop, pop_bodies
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.constants import Property

__all__ = ["PopStatus", "PopResult", "pop_messages", "ack_message", "batch_ack_messages",
           "change_invisible_time", "receipt_handle"]

_POP_OK_CODES = (ResponseCode.SUCCESS, ResponseCode.POLLING_FULL, ResponseCode.POLLING_TIMEOUT,
                 ResponseCode.PULL_NOT_FOUND)


class PopStatus(enum.Enum):
    """A POP's outcome (Java PopStatus)."""
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    POLLING_FULL = "POLLING_FULL"
    POLLING_NOT_FOUND = "POLLING_NOT_FOUND"


@dataclasses.dataclass
class PopResult:
    """One POP. Times in ms; ``rest_num``: messages the broker says are left."""
    status: PopStatus
    messages: list[MessageExt]
    pop_time: int = 0
    invisible_time: int = 0
    rest_num: int = 0


def receipt_handle(message: MessageExt) -> str:
    """The handle acks and invisible-time changes send back (ClientError when the message was
    not popped)."""
    handle = message.properties.get(Property.POP_CK)
    if handle is None:
        raise ClientError("the message has no receipt handle (POP_CK): it was not popped")
    return handle


async def pop_messages(instance: ClientInstance, address: str, broker_name: str, group: str,
                       topic: str, *, queue_id: int = -1, max_nums: int = 32,
                       invisible_time_ms: int = 60000, poll_time_ms: int = 15000,
                       init_mode: int = 0, expression_type: Optional[str] = None,
                       expression: Optional[str] = None, order: bool = False,
                       attempt_id: Optional[str] = None,
                       timeout_ms: Optional[int] = None) -> PopResult:
    """POP up to ``max_nums`` messages of ``topic`` (queue ``queue_id``, -1: every queue) of
    the broker at ``address``, held by the broker up to ``poll_time_ms`` when there are none."""
    born_ms = time.time_ns() // 1_000_000
    fields = headers.encode_header(headers.POP_MESSAGE_REQUEST, {
        "consumer_group": group, "topic": topic, "queue_id": queue_id, "max_msg_nums": max_nums,
        "invisible_time": invisible_time_ms, "poll_time": poll_time_ms, "born_time": born_ms,
        "init_mode": init_mode, "exp_type": expression_type, "exp": expression,
        "order": order, "attempt_id": attempt_id})
    fields["bname"] = broker_name
    wait_ms = timeout_ms if timeout_ms is not None else poll_time_ms + 10000
    response = await instance.invoke(address, request(RequestCode.POP_MESSAGE, fields), wait_ms)
    check_response(response, address, _POP_OK_CODES)
    if response.code == ResponseCode.POLLING_FULL:
        return PopResult(PopStatus.POLLING_FULL, [])
    if response.code != ResponseCode.SUCCESS:
        return PopResult(PopStatus.POLLING_NOT_FOUND, [])
    try:
        header = headers.POP_MESSAGE_RESPONSE.parse(response.ext_fields)
    except HeaderError as error:
        raise ClientError(f"POP response from {address}: {error.remark}") from None
    messages = decode_messages(response.body or b"", broker_name)
    _attach_handles(messages, header, broker_name, order)
    for message in messages:
        message.topic = topic
    return PopResult(PopStatus.FOUND, messages, header.pop_time, header.invisible_time,
                     header.rest_num)


def _attach_handles(messages: list[MessageExt], header, broker_name: str, order: bool) -> None:
    """Java processPopResponse: a handle for each message without one, the reconsume count of
    an order POP's messages from orderCountInfo."""
    starts = pop.parse_start_offset_info(header.start_offset_info) or {}
    counts = pop.parse_order_count_info(header.order_count_info) or {}
    for message in messages:
        flag = pop.retry_flag(message.topic)
        queue_key = f"{flag}@{message.queue_id}"
        if Property.POP_CK not in message.properties and queue_key in starts:
            message.properties[Property.POP_CK] = pop.build_extra_info(
                starts[queue_key], header.pop_time, header.invisible_time, header.revive_qid,
                message.topic, broker_name, message.queue_id, message.queue_offset)
        if order:
            count = counts.get(pop.queue_offset_key(flag, message.queue_id,
                                                    message.queue_offset),
                               counts.get(queue_key))
            if count:
                message.reconsume_times = count
        message.properties.setdefault(Property.FIRST_POP_TIME, str(header.pop_time))


def _ack_target(message: MessageExt, group: str) -> tuple[pop.ExtraInfo, str]:
    info = pop.parse_extra_info(receipt_handle(message))
    return info, pop.real_topic(message.topic, group, info.retry)


async def ack_message(instance: ClientInstance, address: str, group: str,
                      message: MessageExt) -> None:
    """ACK_MESSAGE of one popped message."""
    info, topic = _ack_target(message, group)
    offset = info.queue_offset if info.queue_offset is not None else message.queue_offset
    fields = headers.encode_header(headers.ACK_MESSAGE_REQUEST, {
        "consumer_group": group, "topic": topic, "queue_id": info.queue_id,
        "extra_info": receipt_handle(message), "queue_offset": offset})
    response = await instance.invoke(address, request(RequestCode.ACK_MESSAGE, fields))
    check_response(response, address)


async def batch_ack_messages(instance: ClientInstance, address: str, group: str,
                             messages: Iterable[MessageExt]) -> None:
    """BATCH_ACK_MESSAGE of popped messages of one broker (grouped per check-point)."""
    acks: dict[tuple, pop_bodies.BatchAck] = {}
    broker_name = None
    for message in messages:
        info = pop.parse_extra_info(receipt_handle(message))
        broker_name = info.broker_name
        offset = info.queue_offset if info.queue_offset is not None else message.queue_offset
        key = (info.retry, info.queue_id, info.ck_queue_offset, info.pop_time)
        batch = acks.get(key)
        if batch is None:
            batch = acks[key] = pop_bodies.BatchAck(
                group, message.topic, info.retry, info.ck_queue_offset, info.queue_id,
                info.revive_qid, info.pop_time, info.invisible_time, [])
        batch.bits.append(offset - info.ck_queue_offset)
    if not acks:
        return
    body = pop_bodies.encode_batch_ack_body(broker_name, list(acks.values()))
    response = await instance.invoke(address, request(RequestCode.BATCH_ACK_MESSAGE, body=body))
    check_response(response, address)


async def change_invisible_time(instance: ClientInstance, address: str, group: str,
                                message: MessageExt, invisible_time_ms: int) -> None:
    """CHANGE_MESSAGE_INVISIBLETIME; the message's handle becomes the new one."""
    info, topic = _ack_target(message, group)
    offset = info.queue_offset if info.queue_offset is not None else message.queue_offset
    fields = headers.encode_header(headers.CHANGE_INVISIBLE_TIME_REQUEST, {
        "consumer_group": group, "topic": topic, "queue_id": info.queue_id,
        "extra_info": receipt_handle(message), "queue_offset": offset,
        "invisible_time": invisible_time_ms})
    response = await instance.invoke(address, request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
                                                      fields))
    check_response(response, address)
    try:
        header = headers.CHANGE_INVISIBLE_TIME_RESPONSE.parse(response.ext_fields)
    except HeaderError as error:
        raise ClientError(f"change invisible time response from {address}: "
                          f"{error.remark}") from None
    message.properties[Property.POP_CK] = pop.build_extra_info(
        offset, header.pop_time, header.invisible_time, header.revive_qid, topic,
        info.broker_name, info.queue_id, offset)
