# The first checks of POP, PEEK, NOTIFICATION and POLLING_INFO, with Java 5.3.3's codes and remarks.
"""Pre-checks shared by the POP family (Java's PopMessageProcessor, PeekMessageProcessor,
NotificationProcessor, PollingInfoProcessor): broker readable, topic known and readable,
queueId below readQueueNums (-1: every queue), group known and consuming. Each returns the
refusal or the configs the request goes on with.

Java creates these answers with their response header class, so every answer, refusals too,
carries the header's primitive fields at their zero values (``popTime``, ``invisibleTime``,
``reviveQid``, ``restNum``; ``hasMsg``, ``pollingFull``; ``pollingNum``): ``zero_fields``.
"""
from typing import Any, NamedTuple

from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response
from pybroker.protocol.constants import FAQ_SUGGEST_TODO_5X, Perm
from pybroker.protocol.headers import parse_request_header
from pybroker.store.config_docs import SubscriptionGroupConfig, TopicConfig

# The read bit as an int: an int & an IntFlag member runs the enum's Python operators.
_READ = int(Perm.READ)

__all__ = ["Checked", "Peeking", "check_broker", "check_peeking", "check_request", "refuse",
           "topic_not_exist_remark", "RETRY_FIRST_ONE_IN", "ZERO_FIELDS"]

# PEEK_MESSAGE and NOTIFICATION look at the retry topics first one time in this many (Java's
# PeekMessageProcessor / NotificationProcessor: randomQ % 5 == 0), else after the topic.
RETRY_FIRST_ONE_IN = 5


class Checked(NamedTuple):
    topic_config: TopicConfig
    group_config: SubscriptionGroupConfig


class Peeking(NamedTuple):
    header: Any
    checked: Checked


def topic_not_exist_remark(topic: str) -> str:
    return f"topic[{topic}] not exist, apply first please! {FAQ_SUGGEST_TODO_5X}"


ZERO_FIELDS: dict[int, dict[str, str]] = {
    RequestCode.POP_MESSAGE: {"popTime": "0", "invisibleTime": "0", "reviveQid": "0",
                              "restNum": "0"},
    RequestCode.PEEK_MESSAGE: {"popTime": "0", "invisibleTime": "0", "reviveQid": "0",
                               "restNum": "0"},
    RequestCode.NOTIFICATION: {"hasMsg": "false", "pollingFull": "false"},
    RequestCode.POLLING_INFO: {"pollingNum": "0"},
}


def refuse(request: RemotingCommand, code: int, remark: str | None) -> RemotingCommand:
    """An answer of ``code`` with the request's zero header fields (see the module doc)."""
    return create_response(request, code, remark, dict(ZERO_FIELDS.get(request.code, {})))


def check_broker(ctx, request: RemotingCommand, verb: str) -> RemotingCommand | None:
    """The refusal when the broker is not readable; ``verb`` names the request (``pop`` or
    ``peeking``)."""
    broker = ctx.config.broker
    if not broker.broker_permission & _READ:
        return refuse(request, ResponseCode.NO_PERMISSION,
                      f"the broker[{broker.broker_ip1}] {verb} message is forbidden")
    return None


def check_request(ctx, channel, request: RemotingCommand, header,
                  verb: str | None) -> Checked | RemotingCommand:
    """Java's checks in its order (the broker's first unless ``verb`` is None: the caller
    made it)."""
    if verb is not None:
        refused = check_broker(ctx, request, verb)
        if refused is not None:
            return refused
    topic_config = ctx.metadata.topic_config(header.topic)
    if topic_config is None:
        return refuse(request, ResponseCode.TOPIC_NOT_EXIST,
                      topic_not_exist_remark(header.topic))
    if not topic_config.perm & _READ:
        return refuse(request, ResponseCode.NO_PERMISSION,
                      f"the topic[{header.topic}] peeking message is forbidden")
    if header.queue_id >= topic_config.read_queue_nums:
        return refuse(
            request, ResponseCode.INVALID_PARAMETER,
            f"queueId[{header.queue_id}] is illegal, topic:[{header.topic}] "
            f"topicConfig.readQueueNums:[{topic_config.read_queue_nums}] "
            f"consumer:[/{channel.remote_address}]")
    group_config = ctx.metadata.subscription_group(header.consumer_group)
    if group_config is None:
        return refuse(request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                      f"subscription group [{header.consumer_group}] does not exist, "
                      f"{FAQ_SUGGEST_TODO_5X}")
    if not group_config.consume_enable:
        return refuse(request, ResponseCode.NO_PERMISSION,
                      f"subscription group no permission, {header.consumer_group}")
    return Checked(topic_config, group_config)


def check_peeking(ctx, channel, request: RemotingCommand) -> Peeking | RemotingCommand:
    """The first steps of PEEK_MESSAGE, NOTIFICATION and POLLING_INFO: the header, Java's checks
    (the broker's as ``peeking``), then a broker that serves POP at all."""
    header = parse_request_header(request.code, request.ext_fields)
    checked = check_request(ctx, channel, request, header, "peeking")
    if isinstance(checked, RemotingCommand):
        return checked
    if ctx.pop is None:
        return refuse(request, ResponseCode.SYSTEM_ERROR, "POP is not served here")
    return Peeking(header, checked)
