# JSON (and compressed) request/response bodies of the RocketMQ protocol, with fastjson's quirks.
"""Encoders and decoders of RocketMQ command bodies (protocol.md §7, §8 items 10, 16, 17).

Output is compact JSON (no whitespace anywhere: Go splits route JSON on ``,`` and ``:``) with
object fields in alphabetical order, as fastjson writes Java beans. Decoders take any buffer
(bytes, bytearray, memoryview), accept standard JSON and fastjson's bare numeric keys, and raise
``ValueError`` with a message naming the body and field on malformed input.
"""
import json
import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from pybroker._fast.crc import crc32_masked
from pybroker._fast.jhash import java_hash
from pybroker.protocol import constants
from pybroker.protocol.constants import ConsumeFromWhere, ConsumeType, MessageModel

_SORTED = orjson.OPT_SORT_KEYS
_INT32 = struct.Struct(">i")
_JAVA_TRIM_CHARS = "".join(chr(code) for code in range(0x21))   # String.trim(): chars <= ' '
_REGISTER_TOPIC_COUNT_MAX = 1 << 20   # bound on a compressed register body's topic count
_REGISTER_INFLATED_MAX_BYTES = 256 << 20   # bound on what a compressed register body inflates to


# --- value types -------------------------------------------------------------------------------
@dataclass(slots=True)
class DataVersion:
    """Version of a broker's topic config table: ``timestamp`` in ms, ``counter`` bumps."""
    timestamp: int = 0
    counter: int = 0
    state_version: int | None = None   # 5.x only; omitted from JSON when None


@dataclass(slots=True)
class QueueData:
    """Queues of one topic on one broker name; ``perm`` is a constants.Perm mask."""
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclass(slots=True)
class BrokerData:
    """One master/slave set: ``broker_addrs`` maps brokerId (0 = master) to "ip:port"."""
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str]
    enable_acting_master: bool | None = None   # 5.x; omitted when None
    zone_name: str | None = None


@dataclass(slots=True)
class TopicRouteData:
    """GET_ROUTEINFO_BY_TOPIC response body."""
    queue_datas: list[QueueData]
    broker_datas: list[BrokerData]
    order_topic_conf: str | None = None
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)


@dataclass(slots=True)
class ClusterInfo:
    """GET_BROKER_CLUSTER_INFO response body: broker name -> data, cluster -> broker names."""
    broker_addr_table: dict[str, BrokerData]
    cluster_addr_table: dict[str, list[str]]


@dataclass(frozen=True, slots=True)
class MessageQueue:
    """One queue of a topic on one broker name (hashable, so it can live in sets)."""
    topic: str
    broker_name: str
    queue_id: int


@dataclass(slots=True)
class LockBatchRequest:
    """LOCK_BATCH_MQ / UNLOCK_BATCH_MQ request body."""
    consumer_group: str
    client_id: str
    mq_set: list[MessageQueue]
    only_this_broker: bool = False


@dataclass(slots=True)
class SubscriptionData:
    """One topic subscription of a consumer group; ``sub_version`` is the client's version
    stamp (ms from Java, ns from Go)."""
    topic: str
    sub_string: str = constants.SUBSCRIBE_ALL
    tags_set: frozenset[str] = frozenset()
    code_set: frozenset[int] = frozenset()
    sub_version: int = 0
    expression_type: str = constants.EXPRESSION_TYPE_TAG
    class_filter_mode: bool = False


@dataclass(slots=True)
class ConsumerData:
    """One consumer group as a client reports it in its heartbeat."""
    group_name: str
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    subscriptions: list[SubscriptionData] = field(default_factory=list)
    unit_mode: bool = False


@dataclass(slots=True)
class HeartbeatData:
    """HEART_BEAT request body."""
    client_id: str
    producer_groups: list[str] = field(default_factory=list)
    consumer_datas: list[ConsumerData] = field(default_factory=list)
    heartbeat_fingerprint: int | None = None   # 5.x; None = not sent (reads as 0)
    without_sub: bool | None = None            # 5.x; None = not sent


@dataclass(slots=True)
class RegisterBrokerBody:
    """REGISTER_BROKER body. ``topic_config_table`` maps topic name to a TopicConfig as a dict
    with Java's field names (topicName, readQueueNums, writeQueueNums, perm, topicFilterType,
    topicSysFlag, order, and 5.x attributes)."""
    data_version: DataVersion
    topic_config_table: dict[str, dict[str, Any]]
    filter_server_list: list[str] = field(default_factory=list)


# --- shared decoding helpers -------------------------------------------------------------------
def _loads(data, what: str) -> Any:
    """Parse JSON from any buffer; fall back to the fastjson-tolerant reader on failure."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    from pybroker.protocol import fastjson   # lazily: only fastjson-isms need it
    try:
        return fastjson.loads(data)
    except ValueError as error:
        raise ValueError(f"{what}: body is not valid JSON ({error})") from None


def _object(value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


def _list(value: Any, what: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{what}: expected a JSON array, got {type(value).__name__}")
    return value


def _str(obj: dict, key: str, what: str, default: str | None = None) -> str:
    value = obj.get(key)
    if value is None:
        if default is None:
            raise ValueError(f"{what}: missing field {key!r}")
        return default
    if not isinstance(value, str):
        raise ValueError(f"{what}: field {key!r} must be a string, got {value!r:.60}")
    return value


def _integer(value: Any, what: str) -> int:
    """An integer given as a JSON number or a decimal string (Go sends some as strings)."""
    if isinstance(value, bool):
        raise ValueError(f"{what}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and 0 < len(value) <= 24:
        text = value[1:] if value[0] in "+-" else value
        if text.isascii() and text.isdigit():
            return int(value)
    raise ValueError(f"{what}: expected an integer, got {value!r:.60}")


def _int_field(obj: dict, key: str, what: str, default: int | None = None) -> int:
    value = obj.get(key)
    if value is None:
        if default is None:
            raise ValueError(f"{what}: missing field {key!r}")
        return default
    return _integer(value, f"{what}.{key}")


_TRUE_TEXTS = frozenset({"true", "1", "y", "t"})
_FALSE_TEXTS = frozenset({"false", "0", "f", "n"})


def _bool_field(obj: dict, key: str, what: str, default: bool = False) -> bool:
    """A boolean as fastjson reads one into a boolean field (TypeUtils.castToBoolean): true /
    false, a number (1 is true), or the strings true/1/Y/T and false/0/F/N (case aside);
    "" and "null" are absent."""
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return int(value) == 1
    if isinstance(value, str):
        text = value.lower()
        if text in ("", "null"):
            return default
        if text in _TRUE_TEXTS or text in _FALSE_TEXTS:
            return text in _TRUE_TEXTS
    raise ValueError(f"{what}: field {key!r} must be a boolean, got {value!r:.60}")


def _enum_field(obj: dict, key: str, enum_type, default, what: str):
    """A Java enum by name (Java, Go) or by ordinal (C++)."""
    value = obj.get(key)
    if value is None or value == "":
        return default
    if isinstance(value, str) and not value.lstrip("-").isdigit():
        try:
            return enum_type[value]
        except KeyError:
            raise ValueError(f"{what}: unknown {key} {value!r:.60}") from None
    ordinal = _integer(value, f"{what}.{key}")
    try:
        return enum_type(ordinal)
    except ValueError:
        raise ValueError(f"{what}: {key} ordinal {ordinal} out of range") from None


# --- route data (protocol.md §7.1, §7.2) ----------------------------------------------------------
def _dump_str(text: str, ascii_only: bool) -> bytes:
    # fastjson's BrowserCompatible (quoted form) escapes non-ASCII as \uXXXX; orjson never does.
    if ascii_only and not text.isascii():
        return json.dumps(text, ensure_ascii=True).encode("ascii")
    return orjson.dumps(text)


def _encode_broker_data(broker: BrokerData, quoted_keys: bool) -> bytes:
    entries = []
    for broker_id in sorted(broker.broker_addrs):
        key = b'"%d"' % broker_id if quoted_keys else b"%d" % broker_id
        entries.append(key + b":" + _dump_str(broker.broker_addrs[broker_id], quoted_keys))
    parts = [b'"brokerAddrs":{' + b",".join(entries) + b"}",
             b'"brokerName":' + _dump_str(broker.broker_name, quoted_keys),
             b'"cluster":' + _dump_str(broker.cluster, quoted_keys)]
    if broker.enable_acting_master is not None:
        parts.append(b'"enableActingMaster":' + orjson.dumps(bool(broker.enable_acting_master)))
    if broker.zone_name is not None:
        parts.append(b'"zoneName":' + _dump_str(broker.zone_name, quoted_keys))
    return b"{" + b",".join(parts) + b"}"


def _encode_queue_data(queue: QueueData, quoted_keys: bool) -> bytes:
    # Both spellings of the sys flag: Java >= 4.9 reads topicSysFlag, Java <= 4.8 and Go
    # read topicSynFlag.
    return b'{"brokerName":%s,"perm":%d,"readQueueNums":%d,"topicSynFlag":%d,' \
           b'"topicSysFlag":%d,"writeQueueNums":%d}' % (
               _dump_str(queue.broker_name, quoted_keys), queue.perm, queue.read_queue_nums,
               queue.topic_sys_flag, queue.topic_sys_flag, queue.write_queue_nums)


def encode_topic_route(route: TopicRouteData, quoted_keys: bool) -> bytes:
    """Encode TopicRouteData as the name server does.

    ``quoted_keys`` = request version >= 401 (V4_9_4) or header acceptStandardJsonOnly: then
    brokerAddrs keys are quoted and non-ASCII escaped (fastjson BrowserCompatible); otherwise
    fastjson's default with bare numeric keys (``{0:"ip:port"}``). Map keys are sorted in both.
    """
    brokers = b",".join(_encode_broker_data(b, quoted_keys) for b in route.broker_datas)
    servers = b",".join(
        _dump_str(address, quoted_keys) + b":" + orjson.dumps(list(route.filter_server_table[
            address])) for address in sorted(route.filter_server_table))
    queues = b",".join(_encode_queue_data(q, quoted_keys) for q in route.queue_datas)
    parts = [b'"brokerDatas":[' + brokers + b"]", b'"filterServerTable":{' + servers + b"}"]
    if route.order_topic_conf is not None:
        parts.append(b'"orderTopicConf":' + _dump_str(route.order_topic_conf, quoted_keys))
    parts.append(b'"queueDatas":[' + queues + b"]")
    return b"{" + b",".join(parts) + b"}"


def _decode_broker_data(obj: Any, what: str) -> BrokerData:
    obj = _object(obj, what)
    addresses = _object(obj.get("brokerAddrs") or {}, what + ".brokerAddrs")
    broker_addrs = {}
    for key, address in addresses.items():
        if not isinstance(address, str):
            raise ValueError(f"{what}.brokerAddrs: address must be a string, got {address!r:.60}")
        broker_addrs[_integer(key, what + ".brokerAddrs key")] = address
    acting = obj.get("enableActingMaster")
    return BrokerData(
        cluster=_str(obj, "cluster", what, ""), broker_name=_str(obj, "brokerName", what),
        broker_addrs=broker_addrs,
        enable_acting_master=None if acting is None else _bool_field(obj, "enableActingMaster",
                                                                     what),
        zone_name=obj.get("zoneName") if isinstance(obj.get("zoneName"), str) else None)


def _decode_queue_data(obj: Any, what: str) -> QueueData:
    obj = _object(obj, what)
    sys_flag_key = "topicSysFlag" if obj.get("topicSysFlag") is not None else "topicSynFlag"
    return QueueData(
        broker_name=_str(obj, "brokerName", what),
        read_queue_nums=_int_field(obj, "readQueueNums", what),
        write_queue_nums=_int_field(obj, "writeQueueNums", what),
        perm=_int_field(obj, "perm", what),
        topic_sys_flag=_int_field(obj, sys_flag_key, what, 0))


def decode_topic_route(data) -> TopicRouteData:
    """Decode a TopicRouteData body in either key form (quoted or fastjson's bare numbers)."""
    what = "TopicRouteData"
    obj = _object(_loads(data, what), what)
    servers = _object(obj.get("filterServerTable") or {}, what + ".filterServerTable")
    order_conf = obj.get("orderTopicConf")
    return TopicRouteData(
        queue_datas=[_decode_queue_data(q, what + ".queueDatas[]")
                     for q in _list(obj.get("queueDatas"), what + ".queueDatas")],
        broker_datas=[_decode_broker_data(b, what + ".brokerDatas[]")
                      for b in _list(obj.get("brokerDatas"), what + ".brokerDatas")],
        order_topic_conf=order_conf if isinstance(order_conf, str) else None,
        filter_server_table={str(k): [str(s) for s in _list(v, what + ".filterServerTable")]
                             for k, v in servers.items()})


def encode_cluster_info(info: ClusterInfo) -> bytes:
    """Encode ClusterInfo the way the name server always does: fastjson default (bare keys)."""
    brokers = b",".join(
        orjson.dumps(name) + b":" + _encode_broker_data(info.broker_addr_table[name], False)
        for name in sorted(info.broker_addr_table))
    clusters = orjson.dumps({name: sorted(names) for name, names in
                             info.cluster_addr_table.items()}, option=_SORTED)
    return b'{"brokerAddrTable":{' + brokers + b'},"clusterAddrTable":' + clusters + b"}"


def decode_cluster_info(data) -> ClusterInfo:
    """Decode a ClusterInfo body (either key form)."""
    what = "ClusterInfo"
    obj = _object(_loads(data, what), what)
    brokers = _object(obj.get("brokerAddrTable") or {}, what + ".brokerAddrTable")
    clusters = _object(obj.get("clusterAddrTable") or {}, what + ".clusterAddrTable")
    return ClusterInfo(
        broker_addr_table={name: _decode_broker_data(b, f"{what}.brokerAddrTable[{name}]")
                           for name, b in brokers.items()},
        cluster_addr_table={name: [str(n) for n in _list(names, what + ".clusterAddrTable")]
                            for name, names in clusters.items()})


# --- small bodies (protocol.md §7.5) --------------------------------------------------------------
def encode_topic_list(topics: Iterable[str], broker_addr: str | None = None) -> bytes:
    """TopicList ``{"topicList":[...]}``; sets are written sorted; null brokerAddr omitted
    (fastjson does not write null fields)."""
    names = sorted(topics) if isinstance(topics, set | frozenset) else list(topics)
    body: dict[str, Any] = {"topicList": names}
    if broker_addr is not None:
        body["brokerAddr"] = broker_addr
    return orjson.dumps(body, option=_SORTED)


def decode_topic_list(data) -> list[str]:
    """The topic names of a TopicList body."""
    obj = _object(_loads(data, "TopicList"), "TopicList")
    return [str(name) for name in _list(obj.get("topicList"), "TopicList.topicList")]


def encode_kv_table(table: Mapping[str, str]) -> bytes:
    """KVTable ``{"table":{"k":"v"}}`` with sorted keys."""
    return orjson.dumps({"table": dict(table)}, option=_SORTED)


def decode_kv_table(data) -> dict[str, str]:
    """The string map of a KVTable body (GET_KVLIST_BY_NAMESPACE, runtime info, ...)."""
    obj = _object(_loads(data, "KVTable"), "KVTable")
    table = _object(obj.get("table") or {}, "KVTable.table")
    return {str(k): v if isinstance(v, str) else str(v) for k, v in table.items()}


def _data_version_dict(version: DataVersion) -> dict[str, int]:
    out = {"counter": version.counter, "timestamp": version.timestamp}
    if version.state_version is not None:
        out["stateVersion"] = version.state_version
    return out


def encode_data_version(version: DataVersion) -> bytes:
    """DataVersion ``{"counter":n,"timestamp":ms}`` (+ ``stateVersion`` when set)."""
    return orjson.dumps(_data_version_dict(version), option=_SORTED)


def _decode_data_version_obj(obj: Any, what: str) -> DataVersion:
    obj = _object(obj, what)
    state = obj.get("stateVersion")
    return DataVersion(timestamp=_int_field(obj, "timestamp", what, 0),
                       counter=_int_field(obj, "counter", what, 0),
                       state_version=None if state is None else _integer(state, what))


def decode_data_version(data) -> DataVersion:
    """Decode a DataVersion body (QUERY_DATA_VERSION)."""
    return _decode_data_version_obj(_loads(data, "DataVersion"), "DataVersion")


def encode_consumer_list(consumer_ids: Iterable[str]) -> bytes:
    """GetConsumerListByGroupResponseBody ``{"consumerIdList":[...]}``."""
    return orjson.dumps({"consumerIdList": list(consumer_ids)})


def decode_consumer_list(data) -> list[str]:
    """The client ids of a GetConsumerListByGroupResponseBody."""
    what = "GetConsumerListByGroupResponseBody"
    obj = _object(_loads(data, what), what)
    return [str(i) for i in _list(obj.get("consumerIdList"), what)]


def message_queue_to_json(queue: MessageQueue) -> dict[str, Any]:
    """The JSON object of a MessageQueue (fields in fastjson order)."""
    return {"brokerName": queue.broker_name, "queueId": queue.queue_id, "topic": queue.topic}


def message_queue_from_json(obj: Any, what: str = "MessageQueue") -> MessageQueue:
    """A MessageQueue from its JSON object; ValueError if malformed."""
    obj = _object(obj, what)
    return MessageQueue(topic=_str(obj, "topic", what), broker_name=_str(obj, "brokerName", what),
                        queue_id=_int_field(obj, "queueId", what))


def encode_message_queue(queue: MessageQueue) -> bytes:
    """MessageQueue ``{"brokerName":..,"queueId":n,"topic":..}``."""
    return orjson.dumps(message_queue_to_json(queue))


def encode_lock_batch_request(request: LockBatchRequest) -> bytes:
    """LockBatchRequestBody / UnlockBatchRequestBody."""
    return orjson.dumps({
        "clientId": request.client_id, "consumerGroup": request.consumer_group,
        "mqSet": [message_queue_to_json(q) for q in request.mq_set],
        "onlyThisBroker": bool(request.only_this_broker)})


def decode_lock_batch_request(data) -> LockBatchRequest:
    """Decode a LOCK_BATCH_MQ / UNLOCK_BATCH_MQ body."""
    what = "LockBatchRequestBody"
    obj = _object(_loads(data, what), what)
    return LockBatchRequest(
        consumer_group=_str(obj, "consumerGroup", what), client_id=_str(obj, "clientId", what),
        mq_set=[message_queue_from_json(q, what + ".mqSet[]")
                for q in _list(obj.get("mqSet"), what + ".mqSet")],
        only_this_broker=_bool_field(obj, "onlyThisBroker", what))


def encode_lock_batch_response(locked: Iterable[MessageQueue]) -> bytes:
    """LockBatchResponseBody ``{"lockOKMQSet":[MessageQueue...]}``."""
    return orjson.dumps({"lockOKMQSet": [message_queue_to_json(q) for q in locked]})


def decode_lock_batch_response(data) -> list[MessageQueue]:
    """The locked queues of a LockBatchResponseBody."""
    what = "LockBatchResponseBody"
    obj = _object(_loads(data, what), what)
    return [message_queue_from_json(q, what + ".lockOKMQSet[]")
            for q in _list(obj.get("lockOKMQSet"), what)]


# --- subscriptions and heartbeats (protocol.md §7.3) ----------------------------------------------
def build_subscription(topic: str, sub_string: str | None,
                       expression_type: str | None = constants.EXPRESSION_TYPE_TAG,
                       sub_version: int = 0) -> SubscriptionData:
    """Parse a subscription expression with FilterAPI's rules.

    TAG: split on ``||``, trim each tag (Java ``trim``), skip empty ones; ``code_set`` holds the
    Java hashes of the tags; an empty expression or ``*`` subscribes to all (empty sets).
    SQL92: the expression is kept as is and must not be empty. ``sub_version`` is the caller's
    version stamp (Java: ms). Raises ValueError for an unknown type or empty SQL92 expression.
    """
    if not expression_type or expression_type == constants.EXPRESSION_TYPE_TAG:
        if not sub_string or sub_string == constants.SUBSCRIBE_ALL:
            return SubscriptionData(topic=topic, sub_version=sub_version)
        tags = [t.strip(_JAVA_TRIM_CHARS) for t in sub_string.split("||")]
        tags_set = frozenset(t for t in tags if t)
        return SubscriptionData(topic=topic, sub_string=sub_string, tags_set=tags_set,
                                code_set=frozenset(java_hash(t) for t in tags_set),
                                sub_version=sub_version)
    if expression_type != constants.EXPRESSION_TYPE_SQL92:
        raise ValueError(f"unsupported expression type {expression_type!r:.40}")
    if not sub_string:
        raise ValueError(f"Expression can't be null! {expression_type}")
    return SubscriptionData(topic=topic, sub_string=sub_string, sub_version=sub_version,
                            expression_type=expression_type)


def _decode_subscription(obj: Any, what: str) -> SubscriptionData:
    obj = _object(obj, what)
    tags = _list(obj.get("tagsSet"), what + ".tagsSet")
    if not all(isinstance(tag, str) for tag in tags):
        raise ValueError(f"{what}.tagsSet: tags must be strings")
    codes = _list(obj.get("codeSet"), what + ".codeSet")
    expression_type = obj.get("expressionType") or constants.EXPRESSION_TYPE_TAG
    if not isinstance(expression_type, str):
        raise ValueError(f"{what}: expressionType must be a string")
    return SubscriptionData(
        topic=_str(obj, "topic", what),
        sub_string=_str(obj, "subString", what, constants.SUBSCRIBE_ALL),
        tags_set=frozenset(tags),
        code_set=frozenset(_integer(code, what + ".codeSet[]") for code in codes),
        sub_version=_int_field(obj, "subVersion", what, 0),
        expression_type=expression_type,
        class_filter_mode=_bool_field(obj, "classFilterMode", what))


def _decode_consumer_data(obj: Any, what: str) -> ConsumerData:
    obj = _object(obj, what)
    return ConsumerData(
        group_name=_str(obj, "groupName", what),
        consume_type=_enum_field(obj, "consumeType", ConsumeType,
                                 ConsumeType.CONSUME_PASSIVELY, what),
        message_model=_enum_field(obj, "messageModel", MessageModel,
                                  MessageModel.CLUSTERING, what),
        consume_from_where=_enum_field(obj, "consumeFromWhere", ConsumeFromWhere,
                                       ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, what),
        subscriptions=[_decode_subscription(s, what + ".subscriptionDataSet[]")
                       for s in _list(obj.get("subscriptionDataSet"),
                                      what + ".subscriptionDataSet")],
        unit_mode=_bool_field(obj, "unitMode", what))


def decode_heartbeat(data) -> HeartbeatData:
    """Decode a HEART_BEAT body leniently (Java, Go and C++ shapes, protocol.md §7.3, §8 item 16).

    Enums by name or ordinal; codeSet entries as numbers or numeric strings; missing
    expressionType = TAG; missing heartbeatFingerprint = 0; any integer subVersion.
    Raises ValueError naming the problem for a malformed body.
    """
    what = "HeartbeatData"
    obj = _object(_loads(data, what), what)
    producers = []
    for producer in _list(obj.get("producerDataSet"), what + ".producerDataSet"):
        producers.append(_str(_object(producer, what + ".producerDataSet[]"), "groupName",
                              what + ".producerDataSet[]"))
    without_sub = obj.get("withoutSub", obj.get("isWithoutSub"))
    return HeartbeatData(
        client_id=_str(obj, "clientID", what),
        producer_groups=producers,
        consumer_datas=[_decode_consumer_data(c, what + ".consumerDataSet[]")
                        for c in _list(obj.get("consumerDataSet"), what + ".consumerDataSet")],
        heartbeat_fingerprint=_int_field(obj, "heartbeatFingerprint", what, 0),
        without_sub=False if without_sub is None else _bool_field(
            {"withoutSub": without_sub}, "withoutSub", what))


def _subscription_json(subscription: SubscriptionData) -> dict[str, Any]:
    return {"classFilterMode": subscription.class_filter_mode,
            "codeSet": sorted(subscription.code_set),
            "expressionType": subscription.expression_type,
            "subString": subscription.sub_string,
            "subVersion": subscription.sub_version,
            "tagsSet": sorted(subscription.tags_set),
            "topic": subscription.topic}


def encode_heartbeat(heartbeat: HeartbeatData) -> bytes:
    """Encode a HEART_BEAT body as the Java client does (enum names, sorted fields).

    ``heartbeatFingerprint`` and ``withoutSub`` are written only when set (5.x fields).
    """
    body: dict[str, Any] = {
        "clientID": heartbeat.client_id,
        "consumerDataSet": [{
            "consumeFromWhere": ConsumeFromWhere(c.consume_from_where).name,
            "consumeType": ConsumeType(c.consume_type).name,
            "groupName": c.group_name,
            "messageModel": MessageModel(c.message_model).name,
            "subscriptionDataSet": [_subscription_json(s) for s in c.subscriptions],
            "unitMode": c.unit_mode} for c in heartbeat.consumer_datas],
        "producerDataSet": [{"groupName": group} for group in heartbeat.producer_groups],
    }
    if heartbeat.heartbeat_fingerprint is not None:
        body["heartbeatFingerprint"] = heartbeat.heartbeat_fingerprint
    if heartbeat.without_sub is not None:
        body["withoutSub"] = heartbeat.without_sub
    return orjson.dumps(body, option=_SORTED)


# --- CHECK_CLIENT_CONFIG body (Java CheckClientRequestBody) --------------------------------------
@dataclass(frozen=True)
class CheckClientRequest:
    """A client's request to check a subscription's expression before it starts consuming."""
    client_id: str | None
    group: str | None
    subscription: SubscriptionData | None


def encode_check_client_request(request: CheckClientRequest) -> bytes:
    body: dict[str, Any] = {"clientId": request.client_id, "group": request.group}
    if request.subscription is not None:
        body["subscriptionData"] = _subscription_json(request.subscription)
    return orjson.dumps(body, option=_SORTED)


def decode_check_client_request(data) -> CheckClientRequest:
    """Decode a CHECK_CLIENT_CONFIG body; ValueError when it is not one."""
    what = "CheckClientRequestBody"
    obj = _object(_loads(data, what), what)
    subscription = obj.get("subscriptionData")
    if subscription is not None:
        subscription = _decode_subscription(subscription, what + ".subscriptionData")
    client_id, group = obj.get("clientId"), obj.get("group")
    if not isinstance(client_id, (str, type(None))) or not isinstance(group, (str, type(None))):
        raise ValueError(f"{what}: clientId and group must be strings")
    return CheckClientRequest(client_id, group, subscription)


# --- REGISTER_BROKER body (protocol.md §7.4) ------------------------------------------------------
_TOPIC_CONFIG_DEFAULTS: dict[str, Any] = {"readQueueNums": 16, "writeQueueNums": 16,
                          "perm": int(constants.PERM_READ_WRITE), "topicFilterType": "SINGLE_TAG",
                          "topicSysFlag": 0, "order": False}


def body_crc32(body) -> int:
    """The ``bodyCrc32`` header value of a body: CRC-32 masked to 31 bits."""
    return crc32_masked(body)


def _normalize_topic_config(name: str, config: Any, what: str) -> dict[str, Any]:
    config = _object(config, what)
    out = dict(config)
    out["topicName"] = _str(config, "topicName", what, name)
    for key in ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag"):
        out[key] = _int_field(config, key, what, _TOPIC_CONFIG_DEFAULTS[key])
    out["order"] = _bool_field(config, "order", what)
    filter_type = _str(config, "topicFilterType", what, "SINGLE_TAG")
    if filter_type not in constants.TOPIC_FILTER_TYPES:
        raise ValueError(f"{what}: unknown topicFilterType {filter_type!r:.40}")
    out["topicFilterType"] = filter_type
    return out


def _topic_config_text(config: Mapping[str, Any]) -> bytes:
    # "name read write perm filterType" - 4.x name servers require exactly these five parts;
    # 5.x appends " <attributes JSON>", written only when the config carries attributes.
    text = "%s %d %d %d %s" % (config["topicName"], config["readQueueNums"],
                               config["writeQueueNums"], config["perm"], config["topicFilterType"])
    attributes = config.get("attributes")
    if attributes is not None:
        text += " " + orjson.dumps(attributes, option=_SORTED).decode()
    return text.encode("utf-8")


def encode_register_broker_body(body: RegisterBrokerBody, compressed: bool) -> bytes:
    """Encode a REGISTER_BROKER body: JSON, or the zlib-compressed binary form (4.x layout)."""
    table = {name: _normalize_topic_config(name, config, "topicConfigTable")
             for name, config in body.topic_config_table.items()}
    if not compressed:
        return orjson.dumps({
            "filterServerList": list(body.filter_server_list),
            "topicConfigSerializeWrapper": {
                "dataVersion": _data_version_dict(body.data_version),
                "topicConfigTable": table}}, option=_SORTED)
    chunks = []
    version_json = encode_data_version(body.data_version)
    chunks += [_INT32.pack(len(version_json)), version_json, _INT32.pack(len(table))]
    for name in sorted(table):
        text = _topic_config_text(table[name])
        chunks += [_INT32.pack(len(text)), text]
    servers_json = orjson.dumps(list(body.filter_server_list))
    chunks += [_INT32.pack(len(servers_json)), servers_json]
    return zlib.compress(b"".join(chunks), 9)


class _Reader:
    """Bounded reader over an inflated register body."""

    def __init__(self, data: bytes):
        self.data = data
        self.position = 0

    def take(self, size: int, what: str) -> bytes:
        if size < 0 or self.position + size > len(self.data):
            raise ValueError(f"RegisterBrokerBody: truncated compressed body at {what}")
        chunk = self.data[self.position:self.position + size]
        self.position += size
        return chunk

    def int32(self, what: str) -> int:
        return _INT32.unpack(self.take(4, what))[0]

    def sized(self, what: str) -> bytes:
        return self.take(self.int32(what), what)


def _inflate(data) -> bytes:
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, _REGISTER_INFLATED_MAX_BYTES)
    except zlib.error as error:
        raise ValueError(f"RegisterBrokerBody: bad zlib stream ({error})") from None
    if inflater.unconsumed_tail:
        raise ValueError("RegisterBrokerBody: compressed body inflates beyond the limit")
    return out


def _parse_topic_config_text(text: str) -> dict[str, Any]:
    parts = text.split(" ", 5)
    if len(parts) < 5:
        raise ValueError(f"RegisterBrokerBody: bad topic config text {text!r:.80}")
    config = {"topicName": parts[0], "readQueueNums": parts[1], "writeQueueNums": parts[2],
              "perm": parts[3], "topicFilterType": parts[4]}
    if len(parts) == 6 and parts[5]:
        try:
            config["attributes"] = orjson.loads(parts[5])
        except orjson.JSONDecodeError:
            pass   # Java ignores unparsable attributes too
    return _normalize_topic_config(parts[0], config, "topic config text")


def _decode_compressed_register_body(data) -> RegisterBrokerBody:
    reader = _Reader(_inflate(data))
    version = _decode_data_version_obj(_loads(reader.sized("dataVersion"), "DataVersion"),
                                       "DataVersion")
    count = reader.int32("topic count")
    if not 0 <= count <= _REGISTER_TOPIC_COUNT_MAX:
        raise ValueError(f"RegisterBrokerBody: bad topic count {count}")
    table = {}
    for _ in range(count):
        try:
            text = reader.sized("topic config").decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("RegisterBrokerBody: topic config is not UTF-8") from None
        config = _parse_topic_config_text(text)
        table[config["topicName"]] = config
    servers = _list(_loads(reader.sized("filterServerList"), "filterServerList"),
                    "filterServerList")
    # A 5.x broker appends a static-topic mapping section here; it is out of scope and ignored.
    return RegisterBrokerBody(data_version=version, topic_config_table=table,
                              filter_server_list=[str(s) for s in servers])


def decode_register_broker_body(data, compressed: bool, expected_crc32: int = 0
                                ) -> RegisterBrokerBody:
    """Decode a REGISTER_BROKER body after checking ``bodyCrc32`` (0 = not checked).

    Raises ValueError("crc32 not match") on a CRC mismatch (the name server answers
    SYSTEM_ERROR with that remark) and ValueError for any malformed body.
    """
    if expected_crc32 and body_crc32(data) != expected_crc32:
        raise ValueError("crc32 not match")
    if compressed:
        return _decode_compressed_register_body(data)
    what = "RegisterBrokerBody"
    obj = _object(_loads(data, what), what)
    wrapper = _object(obj.get("topicConfigSerializeWrapper") or {},
                      what + ".topicConfigSerializeWrapper")
    table = _object(wrapper.get("topicConfigTable") or {}, what + ".topicConfigTable")
    return RegisterBrokerBody(
        data_version=_decode_data_version_obj(wrapper.get("dataVersion") or {},
                                              what + ".dataVersion"),
        topic_config_table={str(name): _normalize_topic_config(str(name), config,
                                                               f"topicConfigTable[{name}]")
                            for name, config in table.items()},
        filter_server_list=[str(s) for s in _list(obj.get("filterServerList"),
                                                  what + ".filterServerList")])

