# One PULL_MESSAGE round trip and the queue-offset queries both consumers share.
"""The pull request and its outcome (protocol.md §2.3, §2.6).

:func:`pull_message` sends one PULL_MESSAGE to the broker the queue's previous answer
suggested (``suggestWhichBrokerId``; the master at first, any broker of the set when the
suggested one is not routed, as Java's client does) and returns a
:class:`PullResult`: the decoded messages (FOUND), or none with the offset to continue from
(NO_NEW_MSG 19, NO_MATCHED_MSG 20, OFFSET_ILLEGAL 21). :func:`queue_offset_query` asks
GET_MAX_OFFSET / GET_MIN_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP for one queue.
"""
import dataclasses
from typing import Optional

from pybroker.client.errors import ClientError
from pybroker.client.instance import ClientInstance, check_response, request
from pybroker.client.message import MessageExt, decode_messages
from pybroker.errors import HeaderError, ProtocolError
from pybroker.protocol import headers
from pybroker.protocol.bodies import MessageQueue, SubscriptionData
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.constants import Property, PullSysFlag

_PULL_OK_CODES = (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND,
                  ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_OFFSET_MOVED)


@dataclasses.dataclass
class PullResult:
    """One pull's outcome. Offsets are queue offsets; ``messages`` empty unless FOUND."""
    code: int
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt]

    @property
    def offset_moved(self) -> bool:
        """True for OFFSET_ILLEGAL (21): the requested offset was outside [min, max]."""
        return self.code == ResponseCode.PULL_OFFSET_MOVED


async def pull_message(instance: ClientInstance, group: str, queue: MessageQueue,
                       queue_offset: int, subscription: SubscriptionData, *, max_nums: int = 32,
                       commit_offset: int = 0, suspend_timeout_ms: int = 15000,
                       timeout_ms: int = 30000, lite: bool = False,
                       post_subscription: bool = False) -> PullResult:
    """Pull up to ``max_nums`` messages of ``queue`` from ``queue_offset``.

    ``suspend_timeout_ms`` > 0 lets the broker hold an empty pull that long (long polling);
    ``commit_offset`` > 0 asks the broker to store it as the group's consumer offset.
    Waits at most ``timeout_ms``. Raises the typed error of any other response code.
    """
    # Java's PullAPIWrapper: the broker the previous answer suggested (slaveReadEnable), any
    # broker of the set when that one is not routed (the master is down: its slave).
    address = await instance.find_broker_for_subscribe(
        queue.broker_name, instance.pull_from_which_node(queue), queue.topic)
    sys_flag = 0
    if commit_offset > 0:
        sys_flag |= PullSysFlag.COMMIT_OFFSET
    if suspend_timeout_ms > 0:
        sys_flag |= PullSysFlag.SUSPEND
    if post_subscription:
        sys_flag |= PullSysFlag.SUBSCRIPTION
    if lite:
        sys_flag |= PullSysFlag.LITE_PULL_MESSAGE
    fields = headers.encode_header(headers.PULL_MESSAGE_REQUEST, {
        "consumer_group": group, "topic": queue.topic, "queue_id": queue.queue_id,
        "queue_offset": queue_offset, "max_msg_nums": max_nums, "sys_flag": int(sys_flag),
        "commit_offset": commit_offset, "suspend_timeout_millis": suspend_timeout_ms,
        "subscription": subscription.sub_string, "sub_version": subscription.sub_version,
        "expression_type": subscription.expression_type})
    fields["bname"] = queue.broker_name
    response = await instance.invoke(address, request(RequestCode.PULL_MESSAGE, fields),
                                     timeout_ms)
    check_response(response, address, _PULL_OK_CODES)
    try:
        header = headers.PULL_MESSAGE_RESPONSE.parse(response.ext_fields)
    except HeaderError as error:
        raise ProtocolError(f"pull response from {address}: {error.remark}") from None
    instance.suggest_pull_from(queue, header.suggest_which_broker_id)
    messages = []
    if response.code == ResponseCode.SUCCESS and response.body:
        messages = decode_messages(response.body, queue.broker_name)
        for message in messages:
            message.properties[Property.MIN_OFFSET] = str(header.min_offset)
            message.properties[Property.MAX_OFFSET] = str(header.max_offset)
    return PullResult(response.code, header.next_begin_offset, header.min_offset,
                      header.max_offset, messages)


async def queue_offset_query(instance: ClientInstance, queue: MessageQueue, code: int,
                             timestamp_ms: Optional[int] = None) -> int:
    """GET_MAX_OFFSET, GET_MIN_OFFSET or SEARCH_OFFSET_BY_TIMESTAMP (``timestamp_ms``) of
    ``queue``: a queue offset."""
    address = await instance.find_master(queue.broker_name, queue.topic)
    values = {"topic": queue.topic, "queue_id": queue.queue_id}
    if code == RequestCode.GET_MAX_OFFSET:
        schema = headers.GET_MAX_OFFSET_REQUEST
    elif code == RequestCode.GET_MIN_OFFSET:
        schema = headers.TOPIC_QUEUE_REQUEST
    elif code == RequestCode.SEARCH_OFFSET_BY_TIMESTAMP:
        if timestamp_ms is None:
            raise ValueError("SEARCH_OFFSET_BY_TIMESTAMP needs timestamp_ms")
        schema = headers.SEARCH_OFFSET_REQUEST
        values["timestamp"] = timestamp_ms
    else:
        raise ValueError(f"request code {code} is not a queue offset query")
    response = await instance.invoke(address, request(code, headers.encode_header(schema,
                                                                                   values)))
    check_response(response, address)
    try:
        return headers.QUEUE_OFFSET_RESPONSE.parse(response.ext_fields).queue_offset
    except HeaderError as error:
        raise ClientError(f"offset response from {address}: {error.remark}") from None
