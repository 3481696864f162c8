# The proxy's resource checks of every gRPC request: topic and consumer group names.
"""GrpcValidator.validateTopic / validateConsumerGroup: the client library's name rules
(Validators.checkTopic / checkGroup, their messages) and no access to system topics or system
groups. A refused name is ILLEGAL_TOPIC or ILLEGAL_CONSUMER_GROUP.
"""
import re

from pybroker.grpc_service.status import Code, GrpcRefused
from pybroker.protocol.constants import SystemTopic

TOPIC_MAX_LENGTH = 127           # Validators.TOPIC_MAX_LENGTH
GROUP_MAX_LENGTH = 255           # Validators.CHARACTER_MAX_LENGTH
_LEGAL = re.compile(r"[%|a-zA-Z0-9_-]+")
_PATTERN_TEXT = "^[%|a-zA-Z0-9_-]+$"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"
# TopicValidator.SYSTEM_TOPIC_SET as the proxy's static check sees it.
SYSTEM_TOPICS = frozenset({
    SystemTopic.AUTO_CREATE_TEMPLATE, SystemTopic.SCHEDULE, SystemTopic.BENCHMARK,
    SystemTopic.TRANS_HALF, SystemTopic.TRACE, SystemTopic.TRANS_OP_HALF,
    SystemTopic.TRANS_CHECK_MAX_TIME, SystemTopic.SELF_TEST, SystemTopic.OFFSET_MOVED_EVENT,
    "CHECKPOINT_TOPIC"})


def _blank(text: str) -> bool:
    return not text.strip()


def validate_topic(name: str) -> None:
    if _blank(name):
        raise GrpcRefused(Code.ILLEGAL_TOPIC, "The specified topic is blank")
    if len(name) > TOPIC_MAX_LENGTH:
        raise GrpcRefused(Code.ILLEGAL_TOPIC, "The specified topic is longer than topic max "
                          f"length {TOPIC_MAX_LENGTH}.")
    if not _LEGAL.fullmatch(name):
        raise GrpcRefused(Code.ILLEGAL_TOPIC, f"The specified topic[{name}] contains illegal "
                          f"characters, allowing only {_PATTERN_TEXT}")
    if name in SYSTEM_TOPICS or name.startswith(SYSTEM_TOPIC_PREFIX):
        raise GrpcRefused(Code.ILLEGAL_TOPIC, "cannot access system topic")


def validate_group(name: str) -> None:
    if _blank(name):
        raise GrpcRefused(Code.ILLEGAL_CONSUMER_GROUP, "the specified group is blank")
    if len(name) > GROUP_MAX_LENGTH:
        raise GrpcRefused(Code.ILLEGAL_CONSUMER_GROUP,
                          "the specified group is longer than group max length 255.")
    if not _LEGAL.fullmatch(name):
        raise GrpcRefused(Code.ILLEGAL_CONSUMER_GROUP, f"the specified group[{name}] contains "
                          f"illegal characters, allowing only {_PATTERN_TEXT}")
    if name.startswith(SYSTEM_GROUP_PREFIX):
        raise GrpcRefused(Code.ILLEGAL_CONSUMER_GROUP, "cannot use system consumer group")
