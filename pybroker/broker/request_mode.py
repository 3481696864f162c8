# SET_MESSAGE_REQUEST_MODE (401) and GET_ALL_MESSAGE_REQUEST_MODE (402) of RocketMQ 5.x.
"""Message request modes: whether a consumer group consumes a topic by PULL or by POP
(Java 5.x QueryAssignmentProcessor.setMessageRequestMode and
AdminBrokerProcessor.getAllMessageRequestMode), kept by
:class:`pybroker.broker.managers.message_request_mode.MessageRequestModeManager`.

401's body is a SetMessageRequestModeRequestBody (``topic``, ``consumerGroup``, ``mode``,
``popShareQueueNum``); the checks run in Java's order with its codes and remarks: a retry
topic is refused (NO_PERMISSION), the topic must exist (TOPIC_NOT_EXIST), the group must exist
or be auto-created (SUBSCRIPTION_GROUP_NOT_EXIST). Java has no slave check here, nor does
pybroker. Where Java fails with a NullPointerException (no body, no topic, no group), the
answer is SYSTEM_ERROR with a remark naming the missing part; a mode other than PULL or POP,
which Java stores as no mode at all, is refused with INVALID_PARAMETER
(docs/compatibility.md).
"""
import orjson

from pybroker.broker.context import MetadataContext, MetadataHandler
from pybroker.broker.interfaces import ClientChannel
from pybroker.broker.managers.message_request_mode import MESSAGE_REQUEST_MODES
from pybroker.protocol import fastjson
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response
from pybroker.protocol.constants import RETRY_GROUP_TOPIC_PREFIX
from pybroker.store.config_docs import RequestMode

__all__ = ["HANDLERS"]

_BODY = "SetMessageRequestModeRequestBody"


def _decode(body) -> tuple[RequestMode, bool] | str:
    """(the request's mode, whether it names a group), or the remark refusing it
    (SYSTEM_ERROR)."""
    if not body:
        return f"{_BODY} body is empty"
    try:
        value = fastjson.loads(body)
        request_mode = RequestMode.from_json(value)
    except (ValueError, TypeError) as error:
        return f"bad {_BODY} body: {error}"
    if value.get("topic") is None:
        return f"{_BODY} has no topic"
    return request_mode, value.get("consumerGroup") is not None


async def handle_set_message_request_mode(ctx: MetadataContext, channel: ClientChannel,
                                          request: RemotingCommand) -> RemotingCommand | None:
    """SET_MESSAGE_REQUEST_MODE (401): set a group's mode on a topic; persisted."""
    decoded = _decode(request.body)
    if isinstance(decoded, str):
        return create_response(request, ResponseCode.SYSTEM_ERROR, decoded)
    request_mode, names_group = decoded
    topic = request_mode.topic
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return create_response(request, ResponseCode.NO_PERMISSION,
                               "retry topic is not allowed to set mode")
    if ctx.metadata.topic_config(topic) is None:
        return create_response(request, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
    if not names_group:
        return create_response(request, ResponseCode.SYSTEM_ERROR, f"{_BODY} has no consumerGroup")
    if ctx.metadata.subscription_group(request_mode.consumer_group) is None:
        return create_response(request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                               "subscription group does not exist")
    if request_mode.mode not in MESSAGE_REQUEST_MODES:
        return create_response(request, ResponseCode.INVALID_PARAMETER,
                               f"mode {request_mode.mode[:32]!r} is not PULL or POP")
    ctx.metadata.request_modes.set_mode(request_mode)
    return create_response(request, ResponseCode.SUCCESS)


async def handle_get_all_message_request_mode(
        ctx: MetadataContext, channel: ClientChannel,
        request: RemotingCommand) -> RemotingCommand | None:
    """GET_ALL_MESSAGE_REQUEST_MODE (402): the whole table, as messageRequestMode.json holds
    it (compact, fields sorted as fastjson writes them)."""
    body = orjson.dumps(ctx.metadata.request_modes.to_json(), option=orjson.OPT_SORT_KEYS)
    return create_response(request, ResponseCode.SUCCESS, body=body)


HANDLERS: dict[int, MetadataHandler] = {
    RequestCode.SET_MESSAGE_REQUEST_MODE: handle_set_message_request_mode,
    RequestCode.GET_ALL_MESSAGE_REQUEST_MODE: handle_get_all_message_request_mode,
}
