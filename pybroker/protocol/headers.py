# Custom-header schemas of RocketMQ requests/responses (wire key, type, required) and codec.
"""Declarative custom-header schemas, one per request code (and per response that has one).

A custom header travels as the command's ``extFields`` string map. Each schema lists its fields as
``(wire name, type, required)``; the parsed header is a small immutable per-schema class (a
named tuple) whose attributes are the snake_case forms of the wire names, e.g.
``header.producer_group``.

Parsing rules (Java ``RemotingCommand.decodeCommandCustomHeader`` plus client quirks, protocol.md
§2, §8 item 3):

* a missing required field raises :class:`HeaderError` with remark
  ``the custom field <name> is null`` and code SYSTEM_ERROR;
* ``""`` for a numeric or optional string field counts as absent (Go sends empty strings);
* numbers must be decimal and fit their Java type (int = int32, long = int64);
* booleans are read as Java's ``Boolean.parseBoolean`` reads them: ``true`` in any case is
  true, any other text (``"1"``, ``"0"``, ``"yes"``, ``""``) is false, never an error;
* unknown ext keys (``bname``, ``ns``, ``AccessKey``, ...) are ignored.

SEND_MESSAGE (10) and SEND_REPLY_MESSAGE (324) use the long names; SEND_MESSAGE_V2 (310),
SEND_BATCH_MESSAGE (320) and SEND_REPLY_MESSAGE_V2 (325) the one-letter names ``a``..``n``; all
map to the same header class. The code only selects the naming; batch-ness is ``header.batch``.
"""
import collections
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from pybroker.errors import HeaderError
from pybroker.protocol import constants
from pybroker.protocol.codes import RequestCode, ResponseCode

STR = "str"
INT = "int"     # Java int: signed 32-bit
LONG = "long"   # Java long: signed 64-bit
BOOL = "bool"
FLOAT = "float"

_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_SIGNED_DECIMAL = re.compile(r"[+-]?[0-9]+", re.ASCII)
_REMARK_VALUE_MAX_CHARS = 64   # keep error remarks bounded whatever a peer sends


class Field(NamedTuple):
    """One custom-header field: Java wire key, Python attribute, type, required, default."""
    wire_name: str
    attribute: str
    type: str
    required: bool
    default: Any = None
    short_name: str | None = None


def _snake_case(wire_name: str) -> str:
    # producerGroup -> producer_group, clientID -> client_id, MSG_REGION -> msg_region
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", wire_name).lower()


def _bad_value(wire_name: str, kind: str, text: object) -> HeaderError:
    shown = repr(text)[:_REMARK_VALUE_MAX_CHARS]
    return HeaderError(f"the custom field <{wire_name}> has an invalid {kind} value: {shown}",
                       code=ResponseCode.SYSTEM_ERROR)


def _to_integer_slow(wire_name: str, text: str, low: int, high: int, kind: str) -> int:
    # Signs and anything unusual land here. The regex keeps Java's syntax: no spaces,
    # underscores or non-ASCII digits, all of which Python's int() would accept.
    if type(text) is not str or len(text) > 24 or _SIGNED_DECIMAL.fullmatch(text) is None:
        raise _bad_value(wire_name, kind, text)
    value = int(text)
    if value < low or value > high:
        raise _bad_value(wire_name, kind, text)
    return value


def _to_int(wire_name: str, text: str) -> int:
    # Fast path: plain ASCII digits short enough that int() is cheap and bounded.
    if text.isdigit() and text.isascii() and len(text) <= 10:
        value = int(text)
        if value <= _INT_MAX:
            return value
    return _to_integer_slow(wire_name, text, _INT_MIN, _INT_MAX, INT)


def _to_long(wire_name: str, text: str) -> int:
    if text.isdigit() and text.isascii() and len(text) <= 19:
        value = int(text)
        if value <= _LONG_MAX:
            return value
    return _to_integer_slow(wire_name, text, _LONG_MIN, _LONG_MAX, LONG)


def java_parse_boolean(text: str | None) -> bool:
    """Java's ``Boolean.parseBoolean``: True only for "true" in any case (None is False)."""
    return text is not None and (text == "true" or text.lower() == "true")


def _to_bool(wire_name: str, text: str) -> bool:
    # Java's Boolean.parseBoolean: "true" in any case is true, anything else is false. The C++
    # client core sends "0"/"1" and Java reads both as false; so do we. Never an error.
    return text == "true" or text.lower() == "true"


def _to_float(wire_name: str, text: str) -> float:
    try:
        if "_" in text:
            raise ValueError(text)
        return float(text)
    except (TypeError, ValueError):
        raise _bad_value(wire_name, FLOAT, text) from None


_CONVERTERS = {STR: None, INT: _to_int, LONG: _to_long, BOOL: _to_bool, FLOAT: _to_float}


class HeaderSchema:
    """The fields of one custom header and the immutable class its parsed values live in."""

    __slots__ = ("name", "fields", "header_class", "_plan", "_short_plan", "_by_attribute")

    def __init__(self, name: str, fields: tuple[Field, ...]):
        self.name = name
        self.fields = fields
        # One named-tuple class per header schema, made at import (a dynamic name by design).
        base = collections.namedtuple(name + "Base",  # type: ignore[misc]
                                      [f.attribute for f in fields])
        self.header_class: Any = type(name, (base,), {"__slots__": (), "schema": self})
        self._plan = tuple(self._step(f, f.wire_name) for f in fields)
        has_short = any(f.short_name for f in fields)
        self._short_plan = (tuple(self._step(f, f.short_name or f.wire_name) for f in fields)
                            if has_short else None)
        self._by_attribute = {f.attribute: f for f in fields}

    @staticmethod
    def _step(f: Field, key: str) -> tuple:
        # "" means absent except for a required string, which Java would accept as a value,
        # and a boolean, which Java parses (parseBoolean("") is false).
        if f.type == BOOL:
            empty_is_absent = False
        else:
            empty_is_absent = f.type != STR or not f.required
        return (key, _CONVERTERS[f.type], f.required, f.default, empty_is_absent)

    def field(self, attribute: str) -> Field:
        """The field whose Python attribute name is ``attribute`` (KeyError if none)."""
        return self._by_attribute[attribute]

    def parse(self, ext_fields: Mapping[str, str] | None, short_names: bool = False):
        """Parse ``ext_fields`` into an instance of :attr:`header_class`; raises HeaderError."""
        plan = self._short_plan if short_names and self._short_plan is not None else self._plan
        if ext_fields is None:
            ext_fields = {}
        values: list[Any] = []
        append = values.append
        get = ext_fields.get
        key = ""
        try:
            for key, convert, required, default, empty_is_absent in plan:
                text = get(key)
                if text is None or (empty_is_absent and text == ""):
                    if required:
                        raise HeaderError(f"the custom field <{key}> is null",
                                          code=ResponseCode.SYSTEM_ERROR)
                    append(default)
                elif convert is None:
                    append(text)
                else:
                    append(convert(key, text))
        except AttributeError:
            # A non-string ext value reached a numeric converter (callers should pass strings).
            raise _bad_value(key, "string", get(key)) from None
        return self.header_class._make(values)

    def __repr__(self) -> str:
        return f"HeaderSchema({self.name}, {len(self.fields)} fields)"


def define_schema(name: str, rows: list[tuple]) -> HeaderSchema:
    """Build a schema from rows ``(wire, type, required[, default[, short[, attribute]]])``
    (other protocol modules declare their headers with it, e.g. protocol/controller.py)."""
    fields = []
    for row in rows:
        wire_name, kind, required = row[0], row[1], row[2]
        default = row[3] if len(row) > 3 else None
        short_name = row[4] if len(row) > 4 else None
        attribute = row[5] if len(row) > 5 else _snake_case(wire_name)
        assert kind in _CONVERTERS, kind
        assert not (required and default is not None), wire_name
        fields.append(Field(wire_name, attribute, kind, required, default, short_name))
    return HeaderSchema(name, tuple(fields))


_schema = define_schema


EMPTY = _schema("EmptyHeader", [])
EMPTY_HEADER = EMPTY.header_class()


# --- Producer send (protocol.md §2.2) -------------------------------------------------------------
# Long name, type, required, default, V2 short name. `bname` is the long form of V2's `n`.
SEND_MESSAGE_REQUEST = _schema("SendMessageRequestHeader", [
    ("producerGroup", STR, True, None, "a"),
    ("topic", STR, True, None, "b"),
    ("defaultTopic", STR, True, None, "c"),
    ("defaultTopicQueueNums", INT, True, None, "d"),
    ("queueId", INT, True, None, "e"),
    ("sysFlag", INT, True, None, "f"),
    ("bornTimestamp", LONG, True, None, "g"),
    ("flag", INT, True, None, "h"),
    ("properties", STR, False, None, "i"),
    ("reconsumeTimes", INT, False, None, "j"),
    ("unitMode", BOOL, False, False, "k"),
    ("maxReconsumeTimes", INT, False, None, "l"),
    ("batch", BOOL, False, False, "m"),
    ("bname", STR, False, None, "n", "broker_name"),
])

SEND_MESSAGE_RESPONSE = _schema("SendMessageResponseHeader", [
    ("msgId", STR, True),
    ("queueId", INT, True),
    ("queueOffset", LONG, True),
    ("transactionId", STR, False),
    ("batchUniqId", STR, False),
    ("recallHandle", STR, False),
    # Not header fields in Java but always set by its broker; the Java client reads them.
    (constants.Property.MSG_REGION, STR, False),
    (constants.Property.TRACE_SWITCH, BOOL, False),
])

# --- Pull (protocol.md §2.3) ----------------------------------------------------------------------
PULL_MESSAGE_REQUEST = _schema("PullMessageRequestHeader", [
    ("consumerGroup", STR, True),
    ("topic", STR, True),
    ("queueId", INT, True),
    ("queueOffset", LONG, True),
    ("maxMsgNums", INT, True),
    ("sysFlag", INT, True),
    ("commitOffset", LONG, True),
    ("suspendTimeoutMillis", LONG, True),
    ("subscription", STR, False),
    ("subVersion", LONG, True),
    ("expressionType", STR, False, constants.EXPRESSION_TYPE_TAG),
    ("maxMsgBytes", INT, False),
    ("requestSource", INT, False),
    ("proxyFrowardClientId", STR, False, None, None, "proxy_forward_client_id"),
])

PULL_MESSAGE_RESPONSE = _schema("PullMessageResponseHeader", [
    ("suggestWhichBrokerId", LONG, True),
    ("nextBeginOffset", LONG, True),
    ("minOffset", LONG, True),
    ("maxOffset", LONG, True),
    ("offsetDelta", LONG, False),
    ("topicSysFlag", INT, False),
    ("groupSysFlag", INT, False),
    ("forbiddenType", INT, False),
])

# --- Query by key / view by id (protocol.md §2.4) -------------------------------------------------
QUERY_MESSAGE_REQUEST = _schema("QueryMessageRequestHeader", [
    ("topic", STR, True),
    ("key", STR, True),
    ("maxNum", INT, True),
    ("beginTimestamp", LONG, True),
    ("endTimestamp", LONG, True),
])
QUERY_MESSAGE_RESPONSE = _schema("QueryMessageResponseHeader", [
    ("indexLastUpdateTimestamp", LONG, True),
    ("indexLastUpdatePhyoffset", LONG, True, None, None, "index_last_update_physical_offset"),
])
VIEW_MESSAGE_REQUEST = _schema("ViewMessageRequestHeader", [
    ("offset", LONG, True, None, None, "physical_offset"),
    ("topic", STR, False),
])

# --- Client registration (protocol.md §2.5) -------------------------------------------------------
HEARTBEAT_RESPONSE = _schema("HeartbeatResponseHeader", [
    ("IS_SUPPORT_HEART_BEAT_V2", BOOL, False, None, None, "is_support_heartbeat_v2"),
    ("IS_SUB_CHANGE", BOOL, False),
])
UNREGISTER_CLIENT_REQUEST = _schema("UnregisterClientRequestHeader", [
    ("clientID", STR, True),
    ("producerGroup", STR, False),
    ("consumerGroup", STR, False),
])
CONSUMER_GROUP_REQUEST = _schema("ConsumerGroupRequestHeader", [
    ("consumerGroup", STR, True),
])

# --- Offsets and queue queries (protocol.md §2.6) -------------------------------------------------
QUERY_CONSUMER_OFFSET_REQUEST = _schema("QueryConsumerOffsetRequestHeader", [
    ("consumerGroup", STR, True),
    ("topic", STR, True),
    ("queueId", INT, True),
    ("setZeroIfNotFound", BOOL, False),
])
UPDATE_CONSUMER_OFFSET_REQUEST = _schema("UpdateConsumerOffsetRequestHeader", [
    ("consumerGroup", STR, True),
    ("topic", STR, True),
    ("queueId", INT, True),
    ("commitOffset", LONG, True),
])
GET_MAX_OFFSET_REQUEST = _schema("GetMaxOffsetRequestHeader", [
    ("topic", STR, True),
    ("queueId", INT, True),
    ("committed", BOOL, False, True),
])
TOPIC_QUEUE_REQUEST = _schema("TopicQueueRequestHeader", [   # GET_MIN_OFFSET, EARLIEST_STORETIME
    ("topic", STR, True),
    ("queueId", INT, True),
])
SEARCH_OFFSET_REQUEST = _schema("SearchOffsetRequestHeader", [
    ("topic", STR, True),
    ("queueId", INT, True),
    ("timestamp", LONG, True),
    ("boundaryType", STR, False),
])
CONSUMER_OFFSET_RESPONSE = _schema("QueryConsumerOffsetResponseHeader", [
    ("offset", LONG, True, None, None, "consumer_offset"),
])
QUEUE_OFFSET_RESPONSE = _schema("QueueOffsetResponseHeader", [   # max/min/search offset
    ("offset", LONG, True, None, None, "queue_offset"),
])
STORE_TIMESTAMP_RESPONSE = _schema("GetEarliestMsgStoretimeResponseHeader", [
    ("timestamp", LONG, True),
])

# --- Send-back, transactions (protocol.md §2.7, §2.8) ---------------------------------------------
CONSUMER_SEND_MSG_BACK_REQUEST = _schema("ConsumerSendMsgBackRequestHeader", [
    ("offset", LONG, True, None, None, "physical_offset"),
    ("group", STR, True),
    ("delayLevel", INT, True),
    ("originMsgId", STR, False),
    ("originTopic", STR, False),
    ("unitMode", BOOL, False, False),
    ("maxReconsumeTimes", INT, False),
])
END_TRANSACTION_REQUEST = _schema("EndTransactionRequestHeader", [
    ("producerGroup", STR, True),
    ("tranStateTableOffset", LONG, True, None, None, "transaction_state_table_offset"),
    ("commitLogOffset", LONG, True),
    ("commitOrRollback", INT, True),
    ("fromTransactionCheck", BOOL, False, False),
    ("msgId", STR, True),
    ("transactionId", STR, False),
    ("topic", STR, False),
])
CHECK_TRANSACTION_STATE_REQUEST = _schema("CheckTransactionStateRequestHeader", [
    ("tranStateTableOffset", LONG, True, None, None, "transaction_state_table_offset"),
    ("commitLogOffset", LONG, True),
    ("msgId", STR, False),
    ("transactionId", STR, False),
    ("offsetMsgId", STR, False),
    ("topic", STR, False),
    ("bname", STR, False, None, None, "broker_name"),   # 5.x
])

# --- Topic / group administration (protocol.md §2.10) ---------------------------------------------
CREATE_TOPIC_REQUEST = _schema("CreateTopicRequestHeader", [
    ("topic", STR, True),
    ("defaultTopic", STR, True),
    ("readQueueNums", INT, True),
    ("writeQueueNums", INT, True),
    ("perm", INT, True),
    ("topicFilterType", STR, True),
    ("topicSysFlag", INT, False),
    ("order", BOOL, False, False),   # @CFNotNull in Java but defaulted; old tools omit it
    ("attributes", STR, False),
    ("force", BOOL, False, False),
])
TOPIC_REQUEST = _schema("TopicRequestHeader", [   # DELETE_TOPIC_IN_BROKER, GET_TOPIC_STATS_INFO,
    # GET_TOPIC_CONFIG
    ("topic", STR, True),
])
GET_ALL_TOPIC_CONFIG_REQUEST = _schema("GetAllTopicConfigRequestHeader", [
    ("topicSeq", INT, False),
    ("dataVersion", STR, False),
    ("maxTopicNum", INT, False),
])
GET_ALL_TOPIC_CONFIG_RESPONSE = _schema("GetAllTopicConfigResponseHeader", [
    ("totalTopicNum", INT, False),
])
DELETE_SUBSCRIPTION_GROUP_REQUEST = _schema("DeleteSubscriptionGroupRequestHeader", [
    ("groupName", STR, True),
    ("removeOffset", BOOL, False, False),   # 4.9.x name
    ("cleanOffset", BOOL, False, False),    # 5.x name
])
GET_SUBSCRIPTION_GROUP_CONFIG_REQUEST = _schema("GetSubscriptionGroupConfigRequestHeader", [
    ("group", STR, True),
])
VIEW_BROKER_STATS_DATA_REQUEST = _schema("ViewBrokerStatsDataRequestHeader", [
    ("statsName", STR, True),
    ("statsKey", STR, True),
])
PRODUCER_GROUP_REQUEST = _schema("GetProducerConnectionListRequestHeader", [
    ("producerGroup", STR, True),
])
GET_CONSUME_STATS_REQUEST = _schema("GetConsumeStatsRequestHeader", [
    ("consumerGroup", STR, True),
    ("topic", STR, False),
])
GET_BROKER_CONSUME_STATS_REQUEST = _schema("GetConsumeStatsInBrokerHeader", [   # 317
    ("isOrder", BOOL, True),
])
RESET_OFFSET_REQUEST = _schema("ResetOffsetRequestHeader", [   # 222 admin->broker, 220 ->client
    ("topic", STR, True),
    ("group", STR, True),
    ("timestamp", LONG, True),
    ("isForce", BOOL, True),
    ("queueId", INT, False, -1),
    ("offset", LONG, False, None, None, "consumer_offset"),
])

# --- Broker -> client (protocol.md §2.12) ---------------------------------------------------------
GET_CONSUMER_STATUS_REQUEST = _schema("GetConsumerStatusRequestHeader", [
    ("topic", STR, True),
    ("group", STR, True),
    ("clientAddr", STR, False),
])
GET_CONSUMER_RUNNING_INFO_REQUEST = _schema("GetConsumerRunningInfoRequestHeader", [
    ("consumerGroup", STR, True),
    ("clientId", STR, True),
    ("jstackEnable", BOOL, False, False),
])
CONSUME_MESSAGE_DIRECTLY_REQUEST = _schema("ConsumeMessageDirectlyResultRequestHeader", [
    ("consumerGroup", STR, True),
    ("clientId", STR, False),
    ("msgId", STR, False),
    ("brokerName", STR, False),
    ("topic", STR, False),
    ("topicSysFlag", INT, False),
    ("groupSysFlag", INT, False),
])
REPLY_MESSAGE_REQUEST = _schema("ReplyMessageRequestHeader", [   # PUSH_REPLY_MESSAGE_TO_CLIENT
    ("producerGroup", STR, True),
    ("topic", STR, True),
    ("defaultTopic", STR, True),
    ("defaultTopicQueueNums", INT, True),
    ("queueId", INT, True),
    ("sysFlag", INT, True),
    ("bornTimestamp", LONG, True),
    ("flag", INT, True),
    ("properties", STR, False),
    ("reconsumeTimes", INT, False),
    ("unitMode", BOOL, False, False),
    ("bornHost", STR, True),
    ("storeHost", STR, True),
    ("storeTimestamp", LONG, True),
])

# --- Name server (protocol.md §2.11) --------------------------------------------------------------
REGISTER_BROKER_REQUEST = _schema("RegisterBrokerRequestHeader", [
    ("brokerName", STR, True),
    ("brokerAddr", STR, True),
    ("clusterName", STR, True),
    ("haServerAddr", STR, True),
    ("brokerId", LONG, True),
    ("heartbeatTimeoutMillis", LONG, False),
    ("enableActingMaster", BOOL, False),
    ("compressed", BOOL, False, False),
    ("bodyCrc32", INT, False, 0),
])
REGISTER_BROKER_RESPONSE = _schema("RegisterBrokerResponseHeader", [
    ("haServerAddr", STR, False),
    ("masterAddr", STR, False),
])
BROKER_IDENTITY_REQUEST = _schema("BrokerIdentityRequestHeader", [   # UNREGISTER, DATA_VERSION
    ("brokerName", STR, True),
    ("brokerAddr", STR, True),
    ("clusterName", STR, True),
    ("brokerId", LONG, True),
])
QUERY_DATA_VERSION_RESPONSE = _schema("QueryDataVersionResponseHeader", [
    ("changed", BOOL, True),
])
GET_ROUTE_INFO_REQUEST = _schema("GetRouteInfoRequestHeader", [
    ("topic", STR, True),
    ("acceptStandardJsonOnly", BOOL, False, False),
])
KV_CONFIG_REQUEST = _schema("KVConfigRequestHeader", [   # GET_KV_CONFIG, DELETE_KV_CONFIG
    ("namespace", STR, True),
    ("key", STR, True),
])
PUT_KV_CONFIG_REQUEST = _schema("PutKVConfigRequestHeader", [
    ("namespace", STR, True),
    ("key", STR, True),
    ("value", STR, True),
])
GET_KV_CONFIG_RESPONSE = _schema("GetKVConfigResponseHeader", [
    ("value", STR, False),
])
GET_KV_LIST_BY_NAMESPACE_REQUEST = _schema("GetKVListByNamespaceRequestHeader", [
    ("namespace", STR, True),
])
BROKER_NAME_REQUEST = _schema("WipeWritePermOfBrokerRequestHeader", [
    ("brokerName", STR, True),
])
WIPE_WRITE_PERM_RESPONSE = _schema("WipeWritePermOfBrokerResponseHeader", [
    ("wipeTopicCount", INT, True),
])
DELETE_TOPIC_IN_NAMESRV_REQUEST = _schema("DeleteTopicFromNamesrvRequestHeader", [
    ("topic", STR, True),
    ("clusterName", STR, False),
])
GET_TOPICS_BY_CLUSTER_REQUEST = _schema("GetTopicsByClusterRequestHeader", [
    ("cluster", STR, True),
])
BROKER_HEARTBEAT_REQUEST = _schema("BrokerHeartbeatRequestHeader", [
    ("clusterName", STR, True),
    ("brokerAddr", STR, True),
    ("brokerName", STR, True),
    ("brokerId", LONG, False),
    ("epoch", INT, False),
    ("maxOffset", LONG, False),
    ("confirmOffset", LONG, False),
    ("heartbeatTimeoutMills", LONG, False),
    ("electionPriority", INT, False),
])

# --- Controller mode (5.x; the bodies are in protocol/controller.py) ------------------------------
GET_METADATA_RESPONSE = _schema("GetMetaDataResponseHeader", [
    ("group", STR, False),
    ("controllerLeaderId", STR, False),
    ("controllerLeaderAddress", STR, False),
    ("isLeader", BOOL, False, False),
    ("peers", STR, False),
])
GET_NEXT_BROKER_ID_REQUEST = _schema("GetNextBrokerIdRequestHeader", [
    ("clusterName", STR, False),
    ("brokerName", STR, False),
])
GET_NEXT_BROKER_ID_RESPONSE = _schema("GetNextBrokerIdResponseHeader", [
    ("clusterName", STR, False),
    ("brokerName", STR, False),
    ("nextBrokerId", LONG, False),
])
APPLY_BROKER_ID_REQUEST = _schema("ApplyBrokerIdRequestHeader", [
    ("clusterName", STR, False),
    ("brokerName", STR, False),
    ("appliedBrokerId", LONG, False),
    ("registerCheckCode", STR, False),
])
REGISTER_TO_CONTROLLER_REQUEST = _schema("RegisterBrokerToControllerRequestHeader", [
    ("clusterName", STR, False),
    ("brokerName", STR, False),
    ("brokerId", LONG, False),
    ("brokerAddress", STR, False),
    ("invokeTime", LONG, False),
])
# Also the answers of elect-master and get-replica-info (sub-sets of these fields).
MASTER_INFO_RESPONSE = _schema("RegisterBrokerToControllerResponseHeader", [
    ("clusterName", STR, False),
    ("brokerName", STR, False),
    ("masterBrokerId", LONG, False),
    ("masterAddress", STR, False),
    ("masterEpoch", INT, False),
    ("syncStateSetEpoch", INT, False),
])
GET_REPLICA_INFO_REQUEST = _schema("GetReplicaInfoRequestHeader", [
    ("brokerName", STR, False),
])
ELECT_MASTER_REQUEST = _schema("ElectMasterRequestHeader", [
    ("clusterName", STR, True),
    ("brokerName", STR, True),
    ("brokerId", LONG, True),
    ("designateElect", BOOL, True),
    ("invokeTime", LONG, False),
])
ALTER_SYNC_STATE_SET_REQUEST = _schema("AlterSyncStateSetRequestHeader", [
    ("brokerName", STR, False),
    ("masterBrokerId", LONG, False),
    ("masterEpoch", INT, False),
    ("invokeTime", LONG, False),
])
ALTER_SYNC_STATE_SET_RESPONSE = _schema("AlterSyncStateSetResponseHeader", [
    ("newSyncStateSetEpoch", INT, False),
])
# Controller -> broker (oneway) when it elected a master; the body is a SyncStateSet.
NOTIFY_BROKER_ROLE_CHANGED_REQUEST = _schema("NotifyBrokerRoleChangedRequestHeader", [
    ("masterAddress", STR, False),
    ("masterEpoch", INT, False),
    ("syncStateSetEpoch", INT, False),
    ("masterBrokerId", LONG, False),
])


# --- 5.x POP (broker/pop/) ------------------------------------------------------------------------
# Every POP request names its queue first; queueId < 0 means every queue. A POP request's
# bornTime is filled in by the broker when missing or "0" (Java does so before decoding).
_POP_QUEUE = [("consumerGroup", STR, True), ("topic", STR, True), ("queueId", INT, True)]
_POP_HANDLE = [*_POP_QUEUE, ("extraInfo", STR, True),
               ("offset", LONG, True, None, None, "queue_offset")]
_POP_WAIT = [("pollTime", LONG, True), ("bornTime", LONG, False)]
_POP_ORDER = [("order", BOOL, False, False), ("attemptId", STR, False)]
_POP_ANSWER = [("popTime", LONG, True), ("invisibleTime", LONG, True), ("reviveQid", INT, True)]
POP_MESSAGE_REQUEST = _schema("PopMessageRequestHeader", [
    *_POP_QUEUE, ("maxMsgNums", INT, True), ("invisibleTime", LONG, True), *_POP_WAIT,
    ("initMode", INT, True), ("expType", STR, False), ("exp", STR, False), *_POP_ORDER])
POP_MESSAGE_RESPONSE = _schema("PopMessageResponseHeader", [
    *_POP_ANSWER, ("restNum", LONG, True), ("startOffsetInfo", STR, False),
    ("msgOffsetInfo", STR, False), ("orderCountInfo", STR, False)])
ACK_MESSAGE_REQUEST = _schema("AckMessageRequestHeader", _POP_HANDLE)
CHANGE_INVISIBLE_TIME_REQUEST = _schema("ChangeInvisibleTimeRequestHeader", [
    *_POP_HANDLE, ("invisibleTime", LONG, True)])
CHANGE_INVISIBLE_TIME_RESPONSE = _schema("ChangeInvisibleTimeResponseHeader", _POP_ANSWER)
PEEK_MESSAGE_REQUEST = _schema("PeekMessageRequestHeader", [*_POP_QUEUE,
                                                            ("maxMsgNums", INT, True)])
NOTIFICATION_REQUEST = _schema("NotificationRequestHeader", [*_POP_QUEUE, *_POP_WAIT,
                                                             *_POP_ORDER])
NOTIFICATION_RESPONSE = _schema("NotificationResponseHeader", [
    ("hasMsg", BOOL, True), ("pollingFull", BOOL, False)])
POLLING_INFO_REQUEST = _schema("PollingInfoRequestHeader", _POP_QUEUE)
POLLING_INFO_RESPONSE = _schema("PollingInfoResponseHeader", [("pollingNum", INT, True)])
# --- 5.x timer: RECALL_MESSAGE (370), issue #23 ---------------------------------------------
RECALL_MESSAGE_REQUEST = _schema("RecallMessageRequestHeader", [
    ("producerGroup", STR, False),
    ("topic", STR, True),
    ("recallHandle", STR, True),
    ("bname", STR, False, None, None, "broker_name"),
])
RECALL_MESSAGE_RESPONSE = _schema("RecallMessageResponseHeader", [
    ("msgId", STR, True),
])

# --- Tables: request code -> (schema, short names?) and request code -> response schema ---------
_C = RequestCode
REQUEST_SCHEMAS: dict[int, tuple[HeaderSchema, bool]] = {
    _C.SEND_MESSAGE: (SEND_MESSAGE_REQUEST, False),
    _C.SEND_MESSAGE_V2: (SEND_MESSAGE_REQUEST, True),
    _C.SEND_BATCH_MESSAGE: (SEND_MESSAGE_REQUEST, True),
    _C.SEND_REPLY_MESSAGE: (SEND_MESSAGE_REQUEST, False),
    _C.SEND_REPLY_MESSAGE_V2: (SEND_MESSAGE_REQUEST, True),
    _C.PULL_MESSAGE: (PULL_MESSAGE_REQUEST, False),
    _C.LITE_PULL_MESSAGE: (PULL_MESSAGE_REQUEST, False),
    _C.QUERY_MESSAGE: (QUERY_MESSAGE_REQUEST, False),
    _C.VIEW_MESSAGE_BY_ID: (VIEW_MESSAGE_REQUEST, False),
    _C.UNREGISTER_CLIENT: (UNREGISTER_CLIENT_REQUEST, False),
    _C.GET_CONSUMER_LIST_BY_GROUP: (CONSUMER_GROUP_REQUEST, False),
    _C.NOTIFY_CONSUMER_IDS_CHANGED: (CONSUMER_GROUP_REQUEST, False),
    _C.GET_CONSUMER_CONNECTION_LIST: (CONSUMER_GROUP_REQUEST, False),
    _C.GET_PRODUCER_CONNECTION_LIST: (PRODUCER_GROUP_REQUEST, False),
    _C.VIEW_BROKER_STATS_DATA: (VIEW_BROKER_STATS_DATA_REQUEST, False),
    _C.QUERY_CONSUMER_OFFSET: (QUERY_CONSUMER_OFFSET_REQUEST, False),
    _C.UPDATE_CONSUMER_OFFSET: (UPDATE_CONSUMER_OFFSET_REQUEST, False),
    _C.GET_MAX_OFFSET: (GET_MAX_OFFSET_REQUEST, False),
    _C.GET_MIN_OFFSET: (TOPIC_QUEUE_REQUEST, False),
    _C.GET_EARLIEST_MSG_STORETIME: (TOPIC_QUEUE_REQUEST, False),
    _C.SEARCH_OFFSET_BY_TIMESTAMP: (SEARCH_OFFSET_REQUEST, False),
    _C.CONSUMER_SEND_MSG_BACK: (CONSUMER_SEND_MSG_BACK_REQUEST, False),
    _C.END_TRANSACTION: (END_TRANSACTION_REQUEST, False),
    _C.CHECK_TRANSACTION_STATE: (CHECK_TRANSACTION_STATE_REQUEST, False),
    _C.UPDATE_AND_CREATE_TOPIC: (CREATE_TOPIC_REQUEST, False),
    _C.DELETE_TOPIC_IN_BROKER: (TOPIC_REQUEST, False),
    _C.GET_TOPIC_STATS_INFO: (TOPIC_REQUEST, False),
    _C.QUERY_TOPIC_CONSUME_BY_WHO: (TOPIC_REQUEST, False),
    _C.GET_ALL_TOPIC_CONFIG: (GET_ALL_TOPIC_CONFIG_REQUEST, False),
    _C.DELETE_SUBSCRIPTIONGROUP: (DELETE_SUBSCRIPTION_GROUP_REQUEST, False),
    _C.GET_CONSUME_STATS: (GET_CONSUME_STATS_REQUEST, False),
    _C.GET_BROKER_CONSUME_STATS: (GET_BROKER_CONSUME_STATS_REQUEST, False),
    _C.INVOKE_BROKER_TO_RESET_OFFSET: (RESET_OFFSET_REQUEST, False),
    _C.RESET_CONSUMER_CLIENT_OFFSET: (RESET_OFFSET_REQUEST, False),
    _C.GET_CONSUMER_STATUS_FROM_CLIENT: (GET_CONSUMER_STATUS_REQUEST, False),
    _C.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: (GET_CONSUMER_STATUS_REQUEST, False),
    _C.GET_CONSUMER_RUNNING_INFO: (GET_CONSUMER_RUNNING_INFO_REQUEST, False),
    _C.CONSUME_MESSAGE_DIRECTLY: (CONSUME_MESSAGE_DIRECTLY_REQUEST, False),
    _C.PUSH_REPLY_MESSAGE_TO_CLIENT: (REPLY_MESSAGE_REQUEST, False),
    _C.REGISTER_BROKER: (REGISTER_BROKER_REQUEST, False),
    _C.UNREGISTER_BROKER: (BROKER_IDENTITY_REQUEST, False),
    _C.QUERY_DATA_VERSION: (BROKER_IDENTITY_REQUEST, False),
    _C.GET_ROUTEINFO_BY_TOPIC: (GET_ROUTE_INFO_REQUEST, False),
    _C.GET_KV_CONFIG: (KV_CONFIG_REQUEST, False),
    _C.DELETE_KV_CONFIG: (KV_CONFIG_REQUEST, False),
    _C.PUT_KV_CONFIG: (PUT_KV_CONFIG_REQUEST, False),
    _C.GET_KVLIST_BY_NAMESPACE: (GET_KV_LIST_BY_NAMESPACE_REQUEST, False),
    _C.WIPE_WRITE_PERM_OF_BROKER: (BROKER_NAME_REQUEST, False),
    _C.DELETE_TOPIC_IN_NAMESRV: (DELETE_TOPIC_IN_NAMESRV_REQUEST, False),
    _C.GET_TOPICS_BY_CLUSTER: (GET_TOPICS_BY_CLUSTER_REQUEST, False),
    _C.BROKER_HEARTBEAT: (BROKER_HEARTBEAT_REQUEST, False),
    _C.CONTROLLER_GET_NEXT_BROKER_ID: (GET_NEXT_BROKER_ID_REQUEST, False),
    _C.CONTROLLER_APPLY_BROKER_ID: (APPLY_BROKER_ID_REQUEST, False),
    _C.CONTROLLER_REGISTER_BROKER: (REGISTER_TO_CONTROLLER_REQUEST, False),
    _C.CONTROLLER_GET_REPLICA_INFO: (GET_REPLICA_INFO_REQUEST, False),
    _C.CONTROLLER_ELECT_MASTER: (ELECT_MASTER_REQUEST, False),
    _C.CONTROLLER_ALTER_SYNC_STATE_SET: (ALTER_SYNC_STATE_SET_REQUEST, False),
    _C.NOTIFY_BROKER_ROLE_CHANGED: (NOTIFY_BROKER_ROLE_CHANGED_REQUEST, False),
    # RocketMQ 5.x protocol basics
    _C.GET_TOPIC_CONFIG: (TOPIC_REQUEST, False),
    _C.GET_SUBSCRIPTIONGROUP_CONFIG: (GET_SUBSCRIPTION_GROUP_CONFIG_REQUEST, False),
    _C.POP_MESSAGE: (POP_MESSAGE_REQUEST, False),
    _C.ACK_MESSAGE: (ACK_MESSAGE_REQUEST, False),
    _C.CHANGE_MESSAGE_INVISIBLETIME: (CHANGE_INVISIBLE_TIME_REQUEST, False),
    _C.PEEK_MESSAGE: (PEEK_MESSAGE_REQUEST, False),
    _C.NOTIFICATION: (NOTIFICATION_REQUEST, False),
    _C.POLLING_INFO: (POLLING_INFO_REQUEST, False),
    # 5.x timer
    _C.RECALL_MESSAGE: (RECALL_MESSAGE_REQUEST, False),
}

# Response headers, keyed by the REQUEST code they answer (a response code alone is ambiguous).
RESPONSE_SCHEMAS: dict[int, HeaderSchema] = {
    _C.SEND_MESSAGE: SEND_MESSAGE_RESPONSE,
    _C.SEND_MESSAGE_V2: SEND_MESSAGE_RESPONSE,
    _C.SEND_BATCH_MESSAGE: SEND_MESSAGE_RESPONSE,
    _C.SEND_REPLY_MESSAGE: SEND_MESSAGE_RESPONSE,
    _C.SEND_REPLY_MESSAGE_V2: SEND_MESSAGE_RESPONSE,
    _C.PULL_MESSAGE: PULL_MESSAGE_RESPONSE,
    _C.LITE_PULL_MESSAGE: PULL_MESSAGE_RESPONSE,
    _C.QUERY_MESSAGE: QUERY_MESSAGE_RESPONSE,
    _C.HEART_BEAT: HEARTBEAT_RESPONSE,
    _C.QUERY_CONSUMER_OFFSET: CONSUMER_OFFSET_RESPONSE,
    _C.GET_MAX_OFFSET: QUEUE_OFFSET_RESPONSE,
    _C.GET_MIN_OFFSET: QUEUE_OFFSET_RESPONSE,
    _C.SEARCH_OFFSET_BY_TIMESTAMP: QUEUE_OFFSET_RESPONSE,
    _C.GET_EARLIEST_MSG_STORETIME: STORE_TIMESTAMP_RESPONSE,
    _C.GET_ALL_TOPIC_CONFIG: GET_ALL_TOPIC_CONFIG_RESPONSE,
    _C.REGISTER_BROKER: REGISTER_BROKER_RESPONSE,
    _C.GET_KV_CONFIG: GET_KV_CONFIG_RESPONSE,
    _C.WIPE_WRITE_PERM_OF_BROKER: WIPE_WRITE_PERM_RESPONSE,
    _C.QUERY_DATA_VERSION: QUERY_DATA_VERSION_RESPONSE,
    _C.CONTROLLER_GET_METADATA_INFO: GET_METADATA_RESPONSE,
    _C.CONTROLLER_GET_NEXT_BROKER_ID: GET_NEXT_BROKER_ID_RESPONSE,
    _C.CONTROLLER_APPLY_BROKER_ID: GET_NEXT_BROKER_ID_RESPONSE,
    _C.CONTROLLER_REGISTER_BROKER: MASTER_INFO_RESPONSE,
    _C.CONTROLLER_GET_REPLICA_INFO: MASTER_INFO_RESPONSE,
    _C.CONTROLLER_ELECT_MASTER: MASTER_INFO_RESPONSE,
    _C.CONTROLLER_ALTER_SYNC_STATE_SET: ALTER_SYNC_STATE_SET_RESPONSE,
    _C.POP_MESSAGE: POP_MESSAGE_RESPONSE,
    _C.PEEK_MESSAGE: POP_MESSAGE_RESPONSE,
    _C.CHANGE_MESSAGE_INVISIBLETIME: CHANGE_INVISIBLE_TIME_RESPONSE,
    _C.NOTIFICATION: NOTIFICATION_RESPONSE,
    _C.POLLING_INFO: POLLING_INFO_RESPONSE,
    _C.RECALL_MESSAGE: RECALL_MESSAGE_RESPONSE,
}
del _C


def parse_request_header(code: int, ext_fields: Mapping[str, str] | None):
    """Parse the custom header of a request with ``code`` from its ``ext_fields``.

    Returns an instance of the schema's header class (attributes in snake_case), or
    :data:`EMPTY_HEADER` for codes without a schema (HEART_BEAT, LOCK_BATCH_MQ, ...).
    Raises :class:`HeaderError` (code SYSTEM_ERROR) for a missing required field or a bad value.
    """
    entry = REQUEST_SCHEMAS.get(code)
    if entry is None:
        return EMPTY_HEADER
    return entry[0].parse(ext_fields, entry[1])


def parse_response_header(request_code: int, ext_fields: Mapping[str, str] | None):
    """Parse the custom header of a response to a request with ``request_code`` (client side).

    Callers parse only responses whose code carries the header (e.g. SUCCESS); a missing
    required field raises :class:`HeaderError`.
    """
    schema = RESPONSE_SCHEMAS.get(request_code)
    if schema is None:
        return EMPTY_HEADER
    return schema.parse(ext_fields)


def _format(f: Field, value: Any) -> str:
    kind = f.type
    if kind == STR:
        if type(value) is not str:
            raise ValueError(f"header field <{f.wire_name}> needs a str, got {value!r}")
        return value
    if kind == BOOL:
        if type(value) is not bool:
            raise ValueError(f"header field <{f.wire_name}> needs a bool, got {value!r}")
        return "true" if value else "false"
    if kind == FLOAT:
        return repr(float(value))
    low, high = (_INT_MIN, _INT_MAX) if kind == INT else (_LONG_MIN, _LONG_MAX)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"header field <{f.wire_name}> needs a Java {kind}, got {value!r}")
    return str(value)


def encode_header(schema_or_obj, values: Mapping[str, Any] | None = None, *,
                  short_names: bool = False) -> dict[str, str]:
    """Encode a custom header into an ``extFields`` map of strings.

    ``schema_or_obj`` is a :class:`HeaderSchema` (then ``values`` maps attribute names to
    values) or a parsed header object (its own values are used). ``None`` values are omitted;
    booleans become ``"true"``/``"false"``. ``short_names`` selects the one-letter send naming.
    Raises ValueError for a missing required field, an unknown attribute or a wrongly typed
    value (these are programming errors on our side, not peer input).
    """
    if isinstance(schema_or_obj, HeaderSchema):
        schema = schema_or_obj
        values = {} if values is None else values
        unknown = [name for name in values if name not in schema._by_attribute]
        if unknown:
            raise ValueError(f"{schema.name} has no field(s) {unknown}")
        pairs = [(f, values.get(f.attribute)) for f in schema.fields]
    else:
        header_schema = getattr(schema_or_obj, "schema", None)   # a header_class instance
        if not isinstance(header_schema, HeaderSchema) or values is not None:
            raise TypeError("encode_header takes a HeaderSchema and values, or a header object")
        schema = header_schema
        pairs = list(zip(schema.fields, schema_or_obj, strict=True))
    ext_fields: dict[str, str] = {}
    for f, value in pairs:
        key = f.short_name if short_names and f.short_name else f.wire_name
        if value is None:
            if f.required:
                raise ValueError(f"{schema.name}: required field <{f.wire_name}> is None")
            continue
        ext_fields[key] = _format(f, value)
    return ext_fields


# --- Name validation at the edge (protocol.md §3.8) -----------------------------------------------
_NAME_ALLOWED = frozenset("%|-_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
assert constants.TOPIC_NAME_PATTERN == r"^[%|a-zA-Z0-9_-]+$"


def _is_blank(name: str | None) -> bool:
    return name is None or name.strip() == ""


def _has_illegal_characters(name: str) -> bool:
    return not _NAME_ALLOWED.issuperset(name)


def validate_topic(name: str | None) -> str | None:
    """None when ``name`` is a valid topic name, else the Java broker's remark.

    Rules: not blank; only ``[%|a-zA-Z0-9_-]``; at most 127 bytes of UTF-8 (the commit-log
    record's 1-byte topic length), or 255 for ``%RETRY%``/``%DLQ%`` topics.
    """
    if name is None or _is_blank(name):
        return "The specified topic is blank."
    if _has_illegal_characters(name):
        return (f"The specified topic: {name[:_REMARK_VALUE_MAX_CHARS]}, contains illegal "
                f"characters, allowing only {constants.TOPIC_NAME_PATTERN}")
    # The charset is ASCII, so character and UTF-8 byte lengths agree from here on.
    length_bytes = len(name.encode("utf-8"))
    if name.startswith((constants.RETRY_GROUP_TOPIC_PREFIX, constants.DLQ_GROUP_TOPIC_PREFIX)):
        if length_bytes > constants.RETRY_TOPIC_NAME_MAX_LENGTH:
            return (f"The specified topic is DLQ or Retry topic: {name}, and it's longer than "
                    f"topic max length: {constants.RETRY_TOPIC_NAME_MAX_LENGTH}")
    elif length_bytes > constants.TOPIC_NAME_MAX_LENGTH:
        return (f"The specified topic: {name}, is longer than topic max length: "
                f"{constants.TOPIC_NAME_MAX_LENGTH}")
    return None


def validate_group(name: str | None) -> str | None:
    """None when ``name`` is a valid group name (same charset, at most 255), else the remark."""
    if name is None or _is_blank(name):
        return "The specified group is blank."
    if _has_illegal_characters(name):
        return (f"The specified group: {name[:_REMARK_VALUE_MAX_CHARS]}, contains illegal "
                f"characters, allowing only {constants.TOPIC_NAME_PATTERN}")
    if len(name.encode("utf-8")) > constants.GROUP_NAME_MAX_LENGTH:
        return (f"The specified group: {name}, is longer than group max length: "
                f"{constants.GROUP_NAME_MAX_LENGTH}")
    return None


def topic_too_long_to_send(name: str) -> str | None:
    """The remark when a producer's send names a topic past 127 bytes, else None: the Java
    broker's msgCheck allows 127 for every topic, retry and DLQ ones too (only the broker's
    own re-puts store longer retry topics, as message format V2)."""
    if len(name.encode("utf-8")) > constants.TOPIC_NAME_MAX_LENGTH:
        return (f"The specified topic: {name[:_REMARK_VALUE_MAX_CHARS]}, is longer than topic "
                f"max length: {constants.TOPIC_NAME_MAX_LENGTH}")
    return None


def topic_not_allowed_to_send(name: str) -> str | None:
    """The remark (answer with NO_PERMISSION) when producers may not send to ``name``, else None."""
    if name in constants.TOPICS_NOT_ALLOWED_TO_SEND:
        return f"Sending message to topic[{name}] is forbidden."
    return None
