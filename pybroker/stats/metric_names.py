# Java RocketMQ 5.x's metric facts: explicit histogram buckets, label values, key formats.
"""What the metrics endpoint needs from Java 5.3.3's BrokerMetricsManager,
RemotingMetricsManager, PopMetricsManager and DefaultStoreMetricsManager, written once: the
explicit histogram bounds of its views, the timer's and POP's family names as its exporter
prints them (one ``Family`` each, used by the collector, tools and docs), the label
values (request and response codes as their lowercase names, ``is_system``), and how the
keyed histograms of the instrument region (``StatsKeyKind.KEY_RPC`` ...) spell their keys.
The recorders (stats/recorder.py, _fast/send/stats.pyx) and the collector
(stats/prometheus.py) both use these, so a bucket index means the same on both sides.
"""
import bisect
import enum
import functools
from typing import NamedTuple

from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.constants import (DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX,
                                         SYSTEM_GROUP_PREFIX, ConsumeType, LanguageCode,
                                         is_system_topic)

__all__ = ["RPC_BUCKETS_MS", "MESSAGE_SIZE_BUCKETS_BYTES", "FINISH_LATENCY_BUCKETS_S",
           "POP_BUFFER_SCAN_BUCKETS_MS", "DELAY_LATENCY_BUCKETS_S", "Family", "STORAGE_LABELS",
           "TIMER_ENQUEUE_LAG", "TIMER_ENQUEUE_LATENCY", "TIMER_DEQUEUE_LAG",
           "TIMER_DEQUEUE_LATENCY", "TIMING_MESSAGES", "TIMER_ENQUEUE", "TIMER_DEQUEUE",
           "TIMER_MESSAGE_SNAPSHOT", "DELAY_MESSAGE_LATENCY", "POP_REVIVE_IN",
           "POP_REVIVE_OUT", "POP_REVIVE_RETRY", "POP_REVIVE_LAG", "POP_REVIVE_LATENCY",
           "POP_CHECKPOINT_BUFFER_SIZE", "POP_OFFSET_BUFFER_SIZE", "POP_BUFFER_SCAN_TIME",
           "bucket_of", "rpc_bucket", "request_code_name", "response_code_name", "rpc_key",
           "parse_rpc_key", "message_size_label", "TransactionEvent", "is_retry_or_dlq",
           "traffic_is_system", "consumer_is_system", "MESSAGE_TYPE_LABELS"]

# RemotingMetricsManager's view of rocketmq_rpc_latency (ms).
RPC_BUCKETS_MS = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)
# BrokerMetricsManager's views: message size (bytes) and transaction finish latency (its
# recorded values are seconds, (now - born) / 1000, although the instrument says "ms").
MESSAGE_SIZE_BUCKETS_BYTES = (1 << 10, 4 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20)
FINISH_LATENCY_BUCKETS_S = (5, 60, 600, 3600, 12 * 3600, 24 * 3600)
# PopMetricsManager's view of rocketmq_pop_buffer_scan_time_consume (ms).
POP_BUFFER_SCAN_BUCKETS_MS = (1, 10, 100, 1000, 2000, 3000)
# DefaultStoreMetricsManager's view of rocketmq_delay_message_latency (s: 1 min .. 3 days).
DELAY_LATENCY_BUCKETS_S = (60, 600, 3600, 12 * 3600, 24 * 3600, 3 * 24 * 3600)
# label of KEY_TOPIC_PUT / KEY_MESSAGE_SIZE -> Java's TopicMessageType metrics value
MESSAGE_TYPE_LABELS = {0: "normal", 1: "delay", 2: "transaction"}
_SIZE_BUCKETS_PER_TYPE = 16
assert len(MESSAGE_SIZE_BUCKETS_BYTES) + 1 <= _SIZE_BUCKETS_PER_TYPE


class Family(NamedTuple):
    """A family as Java 5.3.3's Prometheus exporter prints it: OpenTelemetry appends the
    instrument's unit to the name (``_milliseconds``, ``_seconds``); a counter's name is given
    without ``_total``, which prometheus_client appends to its samples as Java's exporter
    does."""
    name: str
    doc: str            # the instrument's description (the HELP line)


# DefaultStoreMetricsManager: every series of its families carries these two labels.
STORAGE_LABELS = {"storage_type": "local", "storage_medium": "disk"}

# The 5.x timer's families (DefaultStoreMetricsManager; Java declares the two latency gauges
# and the delay histogram with a unit, the rest without).
TIMER_ENQUEUE_LAG = Family("rocketmq_timer_enqueue_lag", "Timer enqueue messages lag")
TIMER_ENQUEUE_LATENCY = Family("rocketmq_timer_enqueue_latency_milliseconds",
                               "Timer enqueue latency")
TIMER_DEQUEUE_LAG = Family("rocketmq_timer_dequeue_lag", "Timer dequeue messages lag")
TIMER_DEQUEUE_LATENCY = Family("rocketmq_timer_dequeue_latency_milliseconds",
                               "Timer dequeue latency")
TIMING_MESSAGES = Family("rocketmq_timing_messages", "Current message number in timing")
TIMER_ENQUEUE = Family("rocketmq_timer_enqueue", "Total number of timer enqueue")
TIMER_DEQUEUE = Family("rocketmq_timer_dequeue", "Total number of timer dequeue")
TIMER_MESSAGE_SNAPSHOT = Family(
    "rocketmq_timer_message_snapshot",
    "Timer message distribution snapshot, only count timing messages in 24h.")
DELAY_MESSAGE_LATENCY = Family("rocketmq_delay_message_latency_seconds",
                               "Timer message set latency distribution")

# POP's families (PopMetricsManager; the revive lag gauge is declared in milliseconds although
# it records a message count).
POP_REVIVE_IN = Family("rocketmq_pop_revive_in_message",
                       "Total number of put message to revive topic")
POP_REVIVE_OUT = Family("rocketmq_pop_revive_out_message",
                        "Total number of get message from revive topic")
POP_REVIVE_RETRY = Family("rocketmq_pop_revive_retry_messages",
                          "Total number of put message to pop retry topic")
POP_REVIVE_LAG = Family("rocketmq_pop_revive_lag_milliseconds",
                        "The processing lag of revive topic")
POP_REVIVE_LATENCY = Family("rocketmq_pop_revive_latency_milliseconds",
                            "The processing latency of revive topic")
POP_CHECKPOINT_BUFFER_SIZE = Family("rocketmq_pop_checkpoint_buffer_size",
                                    "The number of buffered checkpoint")
POP_OFFSET_BUFFER_SIZE = Family("rocketmq_pop_offset_buffer_size",
                                "Time number of buffered offset")
POP_BUFFER_SCAN_TIME = Family("rocketmq_pop_buffer_scan_time_consume_milliseconds",
                              "Time consuming of pop buffer scan")


def bucket_of(value: float, bounds: tuple) -> int:
    """Index of the explicit bucket holding ``value``: bucket i counts values <= bounds[i]
    (and > bounds[i - 1]); len(bounds) is the +Inf bucket (OpenTelemetry's rule)."""
    return bisect.bisect_left(bounds, value)


# bucket_of(ms, RPC_BUCKETS_MS) without a Python frame: every answered request has one.
rpc_bucket = functools.partial(bisect.bisect_left, RPC_BUCKETS_MS)


# The lowercase names by value, made once: every request's rpc key names its two codes, and
# the enum's lookup by value is several Python calls each time (an alias keeps its canonical
# member's name, as RequestCode(code).name does).
_REQUEST_CODE_NAMES = {int(member): member.name.lower() for member in RequestCode}
_RESPONSE_CODE_NAMES = {int(member): member.name.lower() for member in ResponseCode}


def request_code_name(code: int) -> str:
    """RemotingHelper.getRequestCodeDesc: the lowercase name, else the number."""
    name = _REQUEST_CODE_NAMES.get(code)
    return str(code) if name is None else name


def response_code_name(code: int) -> str:
    """RemotingHelper.getResponseCodeDesc: the lowercase name, else the number."""
    name = _RESPONSE_CODE_NAMES.get(code)
    return str(code) if name is None else name


# Every answered request names its series: a handful of distinct keys, made once each (the
# bound keeps a client sending odd request codes from growing it).
@functools.lru_cache(maxsize=1024)
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
