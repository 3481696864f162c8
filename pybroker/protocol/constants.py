# Wire constants fixed by the RocketMQ protocol: written once here, imported everywhere else.
"""RocketMQ protocol constants (facts from the protocol reference, protocol.md §1 and §3).

Request and response codes live in :mod:`pybroker.protocol.codes`; on-disk layouts in
:mod:`pybroker.store.layout`. Nothing here is configuration.
"""
import enum

# --- Remoting frame (protocol.md §1.1) ------------------------------------------------------------
FRAME_LENGTH_FIELD_BYTES = 4          # int32 length of everything after it
FRAME_HEADER_WORD_BYTES = 4           # serialize type << 24 | header length
FRAME_HEADER_LENGTH_MASK = 0xFFFFFF
FRAME_SERIALIZE_TYPE_SHIFT = 24


class SerializeType(enum.IntEnum):
    JSON = 0
    ROCKETMQ = 1


# Bits of RemotingCommand.flag (protocol.md §1.5)
RPC_TYPE_RESPONSE = 0x1
RPC_ONEWAY = 0x2

# ROCKETMQ binary header fixed part: code(2) language(1) version(2) opaque(4) flag(4)
# remark length(4) ext length(4) (protocol.md §1.4)
BINARY_HEADER_FIXED_BYTES = 2 + 1 + 2 + 4 + 4 + 4 + 4
assert BINARY_HEADER_FIXED_BYTES == 21


class LanguageCode(enum.IntEnum):
    """Sender language, by the byte sent in binary headers and the name sent in JSON (protocol.md
    §1.7)."""
    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


# MQVersion ordinals that change behaviour (protocol.md §1.6)
class MQVersion(enum.IntEnum):
    V3_0_11 = 37
    V3_4_9 = 121
    V4_1_0_SNAPSHOT = 232
    V4_5_2 = 317
    V4_6_0 = 333
    V4_9_3 = 400
    V4_9_4 = 401
    V4_9_8 = 409
    V5_0_0 = 413
    V5_3_1 = 475
    V5_3_3 = 479


# What pybroker stamps on the commands it creates: >= 401 so Java allows SQL92 and expects
# standard JSON route data.
CURRENT_VERSION = MQVersion.V4_9_8


# --- Message sysFlag bits (protocol.md §3.3) ------------------------------------------------------
class MessageSysFlag(enum.IntFlag):
    COMPRESSED = 0x001
    MULTI_TAGS = 0x002
    TRANSACTION_PREPARED_TYPE = 0x004
    TRANSACTION_COMMIT_TYPE = 0x008
    TRANSACTION_ROLLBACK_TYPE = 0x00C
    BORNHOST_V6 = 0x010
    STOREHOSTADDRESS_V6 = 0x020
    NEED_UNWRAP = 0x040
    INNER_BATCH = 0x080
    COMPRESSION_LZ4_TYPE = 0x100
    COMPRESSION_ZSTD_TYPE = 0x200
    COMPRESSION_ZLIB_TYPE = 0x300


TRANSACTION_NOT_TYPE = 0x000
TRANSACTION_TYPE_MASK = 0x00C
COMPRESSION_TYPE_MASK = 0x700


def transaction_type(sys_flag: int) -> int:
    """The transaction type bits (NOT/PREPARED/COMMIT/ROLLBACK) of a message sysFlag."""
    return sys_flag & TRANSACTION_TYPE_MASK


# --- Pull sysFlag bits (protocol.md §3.4) ---------------------------------------------------------
class PullSysFlag(enum.IntFlag):
    COMMIT_OFFSET = 0x01
    SUSPEND = 0x02
    SUBSCRIPTION = 0x04
    CLASS_FILTER = 0x08
    LITE_PULL_MESSAGE = 0x10


class ForbiddenType(enum.IntEnum):
    """``forbiddenType`` of a 5.x pull answer refused with NO_PERMISSION (Java ForbiddenType)."""
    BROKER_FORBIDDEN = 1
    GROUP_FORBIDDEN = 2
    TOPIC_FORBIDDEN = 3
    BROADCASTING_DISABLE_FORBIDDEN = 4
    SUBSCRIPTION_FORBIDDEN = 5


class TopicSysFlag(enum.IntFlag):
    UNIT = 0x1
    UNIT_SUB = 0x2


class Perm(enum.IntFlag):
    """Topic / broker permission bits (PermName)."""
    INHERIT = 0x1
    WRITE = 0x2
    READ = 0x4
    PRIORITY = 0x8


PERM_READ_WRITE = Perm.READ | Perm.WRITE              # 6: a normal topic
PERM_TEMPLATE = Perm.READ | Perm.WRITE | Perm.INHERIT  # 7: TBW102


# --- Enums carried in JSON bodies by name (Java/Go) or ordinal (C++) (protocol.md §3.4) -----------
class ConsumeType(enum.IntEnum):
    CONSUME_ACTIVELY = 0
    CONSUME_PASSIVELY = 1
    CONSUME_POP = 2


class MessageModel(enum.IntEnum):
    BROADCASTING = 0
    CLUSTERING = 1


class ConsumeFromWhere(enum.IntEnum):
    CONSUME_FROM_LAST_OFFSET = 0
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = 1
    CONSUME_FROM_MIN_OFFSET = 2
    CONSUME_FROM_MAX_OFFSET = 3
    CONSUME_FROM_FIRST_OFFSET = 4
    CONSUME_FROM_TIMESTAMP = 5


TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")
EXPRESSION_TYPE_TAG = "TAG"
EXPRESSION_TYPE_SQL92 = "SQL92"
SUBSCRIBE_ALL = "*"

# --- Message properties (protocol.md §3.1, §3.2) --------------------------------------------------
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "
PROPERTIES_MAX_BYTES = 32767  # stored with a signed 16-bit length


class Property:
    """Message property keys as they travel on the wire (MessageConst)."""
    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT_STORE_MSG_OK = "WAIT"
    DELAY_TIME_LEVEL = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QUEUE_ID = "REAL_QID"
    TRANSACTION_PREPARED = "TRAN_MSG"
    PRODUCER_GROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    BUYER_ID = "BUYER_ID"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    RECONSUME_TIME = "RECONSUME_TIME"
    MSG_REGION = "MSG_REGION"
    TRACE_SWITCH = "TRACE_ON"
    UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
    EXTEND_UNIQ_INFO = "EXTEND_UNIQ_INFO"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_ID = "__transactionId__"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    INSTANCE_ID = "INSTANCE_ID"
    CORRELATION_ID = "CORRELATION_ID"
    MESSAGE_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
    MESSAGE_TTL = "TTL"
    CLUSTER = "CLUSTER"
    MESSAGE_TYPE = "MSG_TYPE"
    SHARDING_KEY = "__SHARDINGKEY"
    TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
    TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
    TIMER_DELAY_MS = "TIMER_DELAY_MS"
    POP_CK = "POP_CK"
    POP_CK_OFFSET = "POP_CK_OFFSET"
    FIRST_POP_TIME = "1ST_POP_TIME"
    # 5.x timer internals (set by the broker, broker/timer_message.py and broker/timer.py)
    TIMER_OUT_MS = "TIMER_OUT_MS"
    TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
    TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
    TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
    TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
    BORN_TIMESTAMP = "BORN_TIMESTAMP"
    TRANSIENT_PREFIX = "__RMQ.TRANSIENT."
    TRANSFER_FLAG = "TRANSFER_FLAG"
    CORRECTION_FLAG = "CORRECTION_FLAG"
    MQ2_FLAG = "MQ2_FLAG"
    POP_CK = "POP_CK"
    POP_CK_OFFSET = "POP_CK_OFFSET"
    FIRST_POP_TIME = "1ST_POP_TIME"
    DUP_INFO = "DUP_INFO"
    REPLY_MESSAGE_ARRIVE_TIME = "ARRIVE_TIME"
    PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
    INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
    TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
    TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
    TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
    TIMER_OUT_MS = "TIMER_OUT_MS"
    TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
    TIMER_DELAY_LEVEL = "TIMER_DELAY_LEVEL"
    BORN_HOST = "__BORNHOST"
    BORN_TIMESTAMP = "BORN_TIMESTAMP"
    DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
    DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
    CRC32 = "__CRC32#"
    TRACE_CONTEXT = "TRACE_CONTEXT"


# MessageConst.STRING_HASH_SET: the properties the system owns. A 5.x gRPC producer may not set
# them as user properties; a received message shows every other property as a user property
# (__SHARDINGKEY and TRACE_CONTEXT are not in Java's set).
SYSTEM_PROPERTY_NAMES = frozenset((
    Property.TRACE_SWITCH, Property.MSG_REGION, Property.KEYS, Property.TAGS,
    Property.WAIT_STORE_MSG_OK, Property.DELAY_TIME_LEVEL, Property.RETRY_TOPIC,
    Property.REAL_TOPIC, Property.REAL_QUEUE_ID, Property.TRANSACTION_PREPARED,
    Property.PRODUCER_GROUP, Property.MIN_OFFSET, Property.MAX_OFFSET, Property.BUYER_ID,
    Property.ORIGIN_MESSAGE_ID, Property.TRANSFER_FLAG, Property.CORRECTION_FLAG,
    Property.MQ2_FLAG, Property.RECONSUME_TIME, Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    Property.MAX_RECONSUME_TIMES, Property.CONSUME_START_TIMESTAMP, Property.POP_CK,
    Property.POP_CK_OFFSET, Property.FIRST_POP_TIME,
    Property.TRANSACTION_PREPARED_QUEUE_OFFSET, Property.DUP_INFO, Property.EXTEND_UNIQ_INFO,
    Property.INSTANCE_ID, Property.CORRELATION_ID, Property.MESSAGE_REPLY_TO_CLIENT,
    Property.MESSAGE_TTL, Property.REPLY_MESSAGE_ARRIVE_TIME, Property.PUSH_REPLY_TIME,
    Property.CLUSTER, Property.MESSAGE_TYPE, Property.INNER_MULTI_QUEUE_OFFSET,
    Property.TIMER_DELAY_MS, Property.TIMER_DELAY_SEC, Property.TIMER_DELIVER_MS,
    Property.TIMER_ENQUEUE_MS, Property.TIMER_DEQUEUE_MS, Property.TIMER_ROLL_TIMES,
    Property.TIMER_OUT_MS, Property.TIMER_DEL_UNIQKEY, Property.TIMER_DELAY_LEVEL,
    Property.BORN_HOST, Property.BORN_TIMESTAMP, Property.DLQ_ORIGIN_TOPIC,
    Property.DLQ_ORIGIN_MESSAGE_ID, Property.CRC32))
assert len(SYSTEM_PROPERTY_NAMES) == 51     # Java 5.3.3's STRING_HASH_SET.add calls


# --- Names (protocol.md §3.8) ---------------------------------------------------------------------
TOPIC_NAME_PATTERN = r"^[%|a-zA-Z0-9_-]+$"
TOPIC_NAME_MAX_LENGTH = 127
RETRY_TOPIC_NAME_MAX_LENGTH = 255
GROUP_NAME_MAX_LENGTH = 255   # Java Validators.CHARACTER_MAX_LENGTH

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
DLQ_QUEUE_NUMS_PER_GROUP = 1


class SystemTopic:
    AUTO_CREATE_TEMPLATE = "TBW102"
    SCHEDULE = "SCHEDULE_TOPIC_XXXX"
    BENCHMARK = "BenchmarkTest"
    TRANS_HALF = "RMQ_SYS_TRANS_HALF_TOPIC"
    TRANS_OP_HALF = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
    TRANS_CHECK_MAX_TIME = "TRANS_CHECK_MAX_TIME_TOPIC"
    TRACE = "RMQ_SYS_TRACE_TOPIC"
    SELF_TEST = "SELF_TEST_TOPIC"
    OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
    REPLY_TOPIC_SUFFIX = "_REPLY_TOPIC"
    WHEEL_TIMER = "rmq_sys_wheel_timer"      # 5.x timer messages parked (broker/timer.py)


# Producers may not send to these (TopicValidator's not-allowed-send set).
TOPICS_NOT_ALLOWED_TO_SEND = frozenset({
    SystemTopic.SCHEDULE, SystemTopic.TRANS_HALF, SystemTopic.TRANS_OP_HALF,
    SystemTopic.TRANS_CHECK_MAX_TIME, SystemTopic.SELF_TEST, SystemTopic.OFFSET_MOVED_EVENT,
})


# System topics and groups are recognised by these prefixes (TopicValidator, MixAll).
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"
# TopicValidator's system topics: this set and every name with the prefix.
SYSTEM_TOPICS = frozenset({
    SystemTopic.AUTO_CREATE_TEMPLATE, SystemTopic.SCHEDULE, SystemTopic.BENCHMARK,
    SystemTopic.TRANS_HALF, SystemTopic.TRACE, SystemTopic.TRANS_OP_HALF,
    SystemTopic.TRANS_CHECK_MAX_TIME, SystemTopic.SELF_TEST, SystemTopic.OFFSET_MOVED_EVENT,
    "CHECKPOINT_TOPIC"})


def is_system_topic(topic: str) -> bool:
    """TopicValidator.isSystemTopic: a topic the broker and tools use, not an application."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


class PopConstants:
    """5.x POP facts (Java PopAckConstants, KeyBuilder, ConsumeInitMode)."""
    REVIVE_TOPIC_PREFIX = SYSTEM_TOPIC_PREFIX + "REVIVE_LOG_"   # + brokerClusterName
    REVIVE_GROUP = SYSTEM_GROUP_PREFIX + "REVIVE_GROUP"
    CK_TAG = "ck"
    ACK_TAG = "ack"
    BATCH_ACK_TAG = "bAck"
    SPLIT = "@"
    # The revive queue id an order POP answers with and its acks carry: no check-point exists.
    ORDER_REVIVE_QUEUE = 999
    # A check-point is delivered this much before its revive time, its acks at it.
    ACK_TIME_INTERVAL_MS = 1000
    SECOND_MS = 1000
    RETRY_QUEUE_NUMS = 1                  # queues of a POP retry topic
    RETRY_SEPARATOR_V1 = "_"              # %RETRY%<group>_<topic>
    RETRY_SEPARATOR_V2 = "+"              # %RETRY%<group>+<topic>
    INIT_MODE_MIN = 0                     # ConsumeInitMode: start at the queue's first message
    INIT_MODE_MAX = 1                     # ... at its last message
    MAX_MSG_NUMS = 32                     # a POP takes at most this many messages
    # The ack "localhost" Java commits revive offsets from (its offset table's client name).
    LOCAL_HOST = "127.0.0.1"


class SystemGroup:
    DEFAULT_PRODUCER = "DEFAULT_PRODUCER"
    DEFAULT_CONSUMER = "DEFAULT_CONSUMER"
    TOOLS_CONSUMER = "TOOLS_CONSUMER"
    SCHEDULE_CONSUMER = "SCHEDULE_CONSUMER"
    CLIENT_INNER_PRODUCER = "CLIENT_INNER_PRODUCER"
    TRANS_CHECK = "CID_RMQ_SYS_TRANS"


SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"
# MixAll.isSysConsumerGroupPullMessage's groups: tools, the broker's own services, ONS proxies.
SYSTEM_CONSUMER_GROUPS = frozenset({
    SystemGroup.DEFAULT_CONSUMER, SystemGroup.TOOLS_CONSUMER, SystemGroup.SCHEDULE_CONSUMER,
    "FILTERSRV_CONSUMER", "__MONITOR_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER", "CID_ONSAPI_PULL", SystemGroup.TRANS_CHECK})


def is_system_group(group: str) -> bool:
    """MixAll.isSysConsumerGroupPullMessage: a consumer group of tools or the broker itself."""
    return group in SYSTEM_CONSUMER_GROUPS or group.startswith(SYSTEM_GROUP_PREFIX)


# Extra ext keys of special meaning on requests/responses
UNIQUE_KEY_QUERY_EXT = "_UNIQUE_KEY_QUERY"
DEFAULT_REGION = "DefaultRegion"

# Commit/rollback values of END_TRANSACTION's commitOrRollback (same as the sysFlag type bits)
END_TRANSACTION_UNKNOWN = TRANSACTION_NOT_TYPE
END_TRANSACTION_COMMIT = int(MessageSysFlag.TRANSACTION_COMMIT_TYPE)
END_TRANSACTION_ROLLBACK = int(MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)

# Delay levels (protocol.md §5.1): the default string; the schedule topic has one queue per level.
DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


# Java FAQUrl.suggestTodo(FAQUrl.*): the tail of several of Java's refusal remarks (every FAQ
# constant of 4.9 points at this one page).
FAQ_SUGGEST_TODO = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
# The same tail in Java 5.x (every FAQ constant points at this page there).
FAQ_SUGGEST_TODO_5X = ("\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further "
                       "details.")
# RemotingCommand.createResponseCommand(Class)'s remark, left on an answer whose processor sets a
# code and no remark (Java 5.3.3's ChangeInvisibleTimeProcessor, for one).
UNSET_RESPONSE_REMARK = "not set any response code"
