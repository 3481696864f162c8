# Java RocketMQ 5.x's metric facts: explicit histogram buckets, label values, key formats.
"""What the metrics endpoint needs from Java 5.3.3's BrokerMetricsManager and
RemotingMetricsManager, written once: the explicit histogram bounds of its views, the label
values (request and response codes as their lowercase names, ``is_system``), and how the
keyed histograms of the instrument region (``StatsKeyKind.KEY_RPC`` ...) spell their keys.
The recorders (stats/recorder.py, _fast/send_stats.pyx) and the collector
(stats/prometheus.py) both use these, so a bucket index means the same on both sides.
"""
import bisect
import enum

from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.constants import (DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX,
                                         SYSTEM_GROUP_PREFIX, ConsumeType, LanguageCode,
                                         is_system_topic)

__all__ = ["RPC_BUCKETS_MS", "MESSAGE_SIZE_BUCKETS_BYTES", "FINISH_LATENCY_BUCKETS_S",
           "bucket_of", "request_code_name", "response_code_name", "rpc_key",
           "parse_rpc_key", "message_size_label", "TransactionEvent", "is_retry_or_dlq",
           "traffic_is_system", "consumer_is_system", "MESSAGE_TYPE_LABELS"]

# RemotingMetricsManager's view of rocketmq_rpc_latency (ms).
RPC_BUCKETS_MS = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)
# BrokerMetricsManager's views: message size (bytes) and transaction finish latency (its
# recorded values are seconds, (now - born) / 1000, although the instrument says "ms").
MESSAGE_SIZE_BUCKETS_BYTES = (1 << 10, 4 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20)
FINISH_LATENCY_BUCKETS_S = (5, 60, 600, 3600, 12 * 3600, 24 * 3600)
# label of KEY_TOPIC_PUT / KEY_MESSAGE_SIZE -> Java's TopicMessageType metrics value
MESSAGE_TYPE_LABELS = {0: "normal", 1: "delay", 2: "transaction"}
_SIZE_BUCKETS_PER_TYPE = 16
assert len(MESSAGE_SIZE_BUCKETS_BYTES) + 1 <= _SIZE_BUCKETS_PER_TYPE


def bucket_of(value: float, bounds: tuple) -> int:
    """Index of the explicit bucket holding ``value``: bucket i counts values <= bounds[i]
    (and > bounds[i - 1]); len(bounds) is the +Inf bucket (OpenTelemetry's rule)."""
    return bisect.bisect_left(bounds, value)


def request_code_name(code: int) -> str:
    """RemotingHelper.getRequestCodeDesc: the lowercase name, else the number."""
    try:
        return RequestCode(code).name.lower()
    except ValueError:
        return str(code)


def response_code_name(code: int) -> str:
    """RemotingHelper.getResponseCodeDesc: the lowercase name, else the number."""
    try:
        return ResponseCode(code).name.lower()
    except ValueError:
        return str(code)


def rpc_key(request_code: int, response_code: int, long_polling: bool, result: str) -> str:
    """The KEY_RPC key of one rpc_latency series."""
    return (f"{request_code_name(request_code)}|{response_code_name(response_code)}|"
            f"{'true' if long_polling else 'false'}|{result}")


def parse_rpc_key(key: str) -> tuple[str, str, str, str]:
    """(request_code, response_code, is_long_polling, result) label values of a KEY_RPC key."""
    request, response, long_polling, result = key.split("|")
    return request, response, long_polling, result


def message_size_label(message_type: int, size_bytes: int) -> int:
    """KEY_MESSAGE_SIZE's label: message type and Java's size bucket of one put."""
    return message_type * _SIZE_BUCKETS_PER_TYPE + bucket_of(size_bytes,
                                                             MESSAGE_SIZE_BUCKETS_BYTES)


def split_message_size_label(label: int) -> tuple[int, int]:
    """(message type, bucket) of a KEY_MESSAGE_SIZE label."""
    return divmod(label, _SIZE_BUCKETS_PER_TYPE)


class TransactionEvent(enum.IntEnum):
    """KEY_TRANSACTION labels: what happened to half messages of a real topic."""
    PREPARED = 0        # a half message stored (SendMessageProcessor: +1)
    COMMITTED = 1       # END_TRANSACTION commit (rocketmq_commit_messages_total)
    ROLLED_BACK = 2     # END_TRANSACTION rollback (rocketmq_rollback_messages_total)
    DISCARDED = 3       # checked transactionCheckMax times and moved aside (-1, no counter)


# Java's MQVersion.Version ordinals: from V4_0_0_SNAPSHOT on, each x.y.z has a SNAPSHOT and a
# release entry, 4.0.0 .. 5.9.9, then HIGHER_VERSION (the 3.x entries before are irregular).
_V4_0_0_SNAPSHOT = 212
_HIGHER_VERSION = 612
CONSUME_MODES = {ConsumeType.CONSUME_ACTIVELY: "pull", ConsumeType.CONSUME_PASSIVELY: "push",
                 ConsumeType.CONSUME_POP: "pop"}


def version_name(version: int) -> str:
    """``version`` label: MQVersion.getVersionDesc(version).toLowerCase() ("v4_9_8");
    versions before 4.0.0 as their number (Java's 3.x names follow no rule)."""
    if version >= _HIGHER_VERSION:
        return "higher_version"
    if version < _V4_0_0_SNAPSHOT:
        return str(version)
    index, snapshot = divmod(version - _V4_0_0_SNAPSHOT, 2)
    name = f"v{4 + index // 100}_{index // 10 % 10}_{index % 10}"
    return name + ("_snapshot" if snapshot == 0 else "")


def language_name(language: int) -> str:
    """``language`` label: LanguageCode's name in lower case."""
    try:
        return LanguageCode(language).name.lower()
    except ValueError:
        return str(language)


def is_retry_or_dlq(topic: str) -> bool:
    """BrokerMetricsManager.isRetryOrDlqTopic: traffic of these is not exported."""
    return topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))


def traffic_is_system(topic: str, group: str | None = None) -> bool:
    """``is_system`` of messages in/out: a system topic, or a group with MixAll's system
    prefix (exactly CID_RMQ_SYS_)."""
    return is_system_topic(topic) or bool(group and group.startswith(SYSTEM_GROUP_PREFIX))


def consumer_is_system(topic: str | None, group: str) -> bool:
    """BrokerMetricsManager.isSystem (lag, DLQ and connection series): a system topic, or a
    group starting with cid_rmq_sys_ in any case."""
    return bool(topic and is_system_topic(topic)) or \
        group.lower().startswith(SYSTEM_GROUP_PREFIX.lower())
