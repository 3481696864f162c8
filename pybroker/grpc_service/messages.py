# Messages between RocketMQ 5's gRPC form and the broker's: checks, properties, conversions.
"""A gRPC ``Message`` becomes the properties, body and sysFlag of a remoting send (the proxy's
``SendMessageActivity.buildMessageProperty``), with its checks, codes and messages in the same
order; a stored record becomes a gRPC ``Message`` (``GrpcConverter.buildMessage``) for a
receive, a transaction check-back or a verify command.
"""
import dataclasses
import hashlib
import ipaddress
import time

from google.protobuf import timestamp_pb2

from pybroker.broker.attributes import TopicMessageType
from pybroker.grpc_service.status import Code, GrpcRefused
from pybroker.protocol.constants import (SYSTEM_PROPERTY_NAMES, MessageSysFlag, Property)
from pybroker.protocol.message_id import offset_message_id
from pybroker.protocol.properties import decode_properties
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb

KEY_SEPARATOR = " "       # MessageConst.KEY_SEPARATOR
_COMPRESSED = int(MessageSysFlag.COMPRESSED)
PREPARED_SYS_FLAG = int(MessageSysFlag.TRANSACTION_PREPARED_TYPE)


def has_control_character(text: str) -> bool:
    """Guava's CharMatcher.javaIsoControl: U+0000-U+001F and U+007F-U+009F."""
    return any(ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F for char in text)


def _is_blank(text: str) -> bool:
    # StringUtils.isBlank: empty or whitespace only (Java's Character.isWhitespace).
    return not text.strip()


@dataclasses.dataclass
class OutgoingMessage:
    """One gRPC message as the broker stores it."""
    body: bytes
    properties: dict[str, str]
    sys_flag: int
    message_group: str


def validate_tag(tag: str) -> None:
    """GrpcValidator.validateTag."""
    if not tag:
        return
    if _is_blank(tag):
        raise GrpcRefused(Code.ILLEGAL_MESSAGE_TAG, "tag cannot be the char sequence of whitespace")
    if "|" in tag:
        raise GrpcRefused(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain '|'")
    if has_control_character(tag):
        raise GrpcRefused(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain control character")


def _validate_key(key: str) -> None:
    if not key:
        return
    if _is_blank(key):
        raise GrpcRefused(Code.ILLEGAL_MESSAGE_KEY, "key cannot be the char sequence of whitespace")
    if has_control_character(key):
        raise GrpcRefused(Code.ILLEGAL_MESSAGE_KEY, "key cannot contain control character")


def _validate_message_group(group: str, size_max: int) -> None:
    if _is_blank(group):
        raise GrpcRefused(Code.ILLEGAL_MESSAGE_GROUP,
                          "message group cannot be the char sequence of whitespace")
    if size_max <= 0:
        return
    if len(group.encode()) >= size_max:
        raise GrpcRefused(Code.ILLEGAL_MESSAGE_GROUP,
                          f"message group exceed the max size {size_max}")
    if has_control_character(group):
        raise GrpcRefused(Code.ILLEGAL_MESSAGE_GROUP,
                          "message group cannot contain control character")


def _validate_body(body: bytes, grpc_config, max_message_size: int) -> None:
    if grpc_config.enable_message_body_empty_check and not body:
        raise GrpcRefused(Code.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    if 0 < max_message_size < len(body):
        raise GrpcRefused(Code.MESSAGE_BODY_TOO_LARGE,
                          f"message body cannot exceed the max {max_message_size}")


def _user_properties(message: pb.Message, grpc_config) -> tuple[dict[str, str], int]:
    # In name order: a protobuf map has none of its own, and the C++ front stores a message's
    # properties in this order too (_fast/grpc_front/send.cc).
    user = dict(sorted(message.user_properties.items()))
    if len(user) > grpc_config.user_property_max_num:
        raise GrpcRefused(Code.MESSAGE_PROPERTIES_TOO_LARGE,
                          f"too many user properties, max is {grpc_config.user_property_max_num}")
    size = 0
    for key, value in user.items():
        if key in SYSTEM_PROPERTY_NAMES:
            raise GrpcRefused(Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                              f"property is used by system: {key}")
        if has_control_character(key):
            raise GrpcRefused(Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                              "the key of property cannot contain control character")
        if has_control_character(value):
            raise GrpcRefused(Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                              "the value of property cannot contain control character")
        size += len(key.encode()) + len(value.encode())
    return user, size


def _transaction_properties(system: pb.SystemProperties, properties: dict[str, str],
                            grpc_config) -> None:
    properties[Property.TRANSACTION_PREPARED] = "true"
    if system.HasField("orphaned_transaction_recovery_duration"):
        seconds = system.orphaned_transaction_recovery_duration.seconds
        limit = grpc_config.max_transaction_recovery_second
        if 0 < limit < seconds:
            raise GrpcRefused(Code.BAD_REQUEST, "the max transaction recovery time of message is "
                              f"too large, max is {limit}")
        properties[Property.CHECK_IMMUNITY_TIME_IN_SECONDS] = str(seconds)


def _delivery_properties(system: pb.SystemProperties, properties: dict[str, str],
                         grpc_config, now_ms: int) -> None:
    if not system.HasField("delivery_timestamp"):
        return
    deliver_ms = system.delivery_timestamp.ToMilliseconds()
    limit = grpc_config.max_delay_time_mills
    if limit > 0 and deliver_ms - now_ms > limit:
        raise GrpcRefused(Code.ILLEGAL_DELIVERY_TIME,
                          f"the max delay time of message is too large, max is {limit}")
    properties[Property.TIMER_DELIVER_MS] = str(deliver_ms)


def outgoing(message: pb.Message, topic: str, remote_address: str, grpc_config,
             max_message_size: int, now_ms: int | None = None) -> OutgoingMessage:
    """buildMessage: the checks in the proxy's order, then the stored properties (``PGROUP`` is
    the topic name: the producer group a transaction check-back looks for)."""
    body = bytes(message.body)
    _validate_body(body, grpc_config, max_message_size)
    properties, size = _user_properties(message, grpc_config)
    system = message.system_properties
    validate_tag(system.tag)
    if system.tag:
        properties[Property.TAGS] = system.tag
    size += len(system.tag.encode())
    for key in system.keys:
        _validate_key(key)
        size += len(key.encode())
    if system.keys:
        properties[Property.KEYS] = KEY_SEPARATOR.join(system.keys)
    if size > grpc_config.max_user_property_size:
        raise GrpcRefused(Code.MESSAGE_PROPERTIES_TOO_LARGE, "the total size of user property is "
                          f"too large, max is {grpc_config.max_user_property_size}")
    if _is_blank(system.message_id):
        raise GrpcRefused(Code.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    properties[Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = system.message_id
    if system.message_type == pb.TRANSACTION:
        _transaction_properties(system, properties, grpc_config)
    _delivery_properties(system, properties, grpc_config,
                         now_ms if now_ms is not None else int(time.time() * 1000))
    properties[Property.RECONSUME_TIME] = str(system.delivery_attempt)
    properties[Property.PRODUCER_GROUP] = topic
    if system.message_group:
        _validate_message_group(system.message_group, grpc_config.max_message_group_size)
        properties[Property.SHARDING_KEY] = system.message_group
    if system.trace_context:
        properties[Property.TRACE_CONTEXT] = system.trace_context
    born_host = system.born_host if not _is_blank(system.born_host) else remote_address
    if not _is_blank(born_host):
        properties[Property.BORN_HOST] = born_host
    if system.HasField("born_timestamp"):
        properties[Property.BORN_TIMESTAMP] = str(system.born_timestamp.ToMilliseconds())
    return OutgoingMessage(body, properties, sys_flag_of(message), system.message_group)


def sys_flag_of(message: pb.Message) -> int:
    """buildSysFlag: GZIP bodies are compressed, transactional messages prepared."""
    sys_flag = 0
    system = message.system_properties
    if system.body_encoding == pb.GZIP:
        sys_flag |= _COMPRESSED
    if system.message_type == pb.TRANSACTION:
        sys_flag |= PREPARED_SYS_FLAG
    return sys_flag


def message_type_of_properties(properties: dict[str, str]) -> str:
    """TopicMessageType.parseFromMessageProperty."""
    if properties.get(Property.TRANSACTION_PREPARED) == "true":
        return TopicMessageType.TRANSACTION
    if any(name in properties for name in (Property.DELAY_TIME_LEVEL, Property.TIMER_DELIVER_MS,
                                           Property.TIMER_DELAY_SEC, Property.TIMER_DELAY_MS)):
        return TopicMessageType.DELAY
    if Property.SHARDING_KEY in properties:
        return TopicMessageType.FIFO
    return TopicMessageType.NORMAL


# --- stored record -> gRPC message ------------------------------------------------------------

# protobuf's Timestamp range (well_known_types' _CheckTimestampValid), in seconds.
_TIMESTAMP_SECONDS_MIN, _TIMESTAMP_SECONDS_MAX = -62_135_596_800, 253_402_300_799


def _timestamp(milliseconds: int) -> timestamp_pb2.Timestamp:
    """Timestamp.FromMilliseconds, built in one call where it is in range (two per received
    message); out of range, protobuf's own method raises its ValueError."""
    seconds, rest = divmod(int(milliseconds), 1000)
    if _TIMESTAMP_SECONDS_MIN <= seconds <= _TIMESTAMP_SECONDS_MAX:
        return timestamp_pb2.Timestamp(seconds=seconds, nanos=rest * 1_000_000)
    value = timestamp_pb2.Timestamp()
    value.FromMilliseconds(int(milliseconds))
    return value


def _host_text(host: bytes, port: int) -> str:
    # NetworkUtil.socketAddress2String: "ip:port" (IPv6 without brackets, as Java prints it).
    if len(host) == 4:
        return f"{host[0]}.{host[1]}.{host[2]}.{host[3]}:{port}"
    return f"{ipaddress.IPv6Address(bytes(host))}:{port}"


def _message_type(properties: dict[str, str]) -> pb.MessageType:
    if properties.get(Property.TRANSACTION_PREPARED) == "true":
        return pb.TRANSACTION
    if Property.DELAY_TIME_LEVEL in properties or Property.TIMER_DELIVER_MS in properties \
            or Property.TIMER_DELAY_SEC in properties:
        return pb.DELAY
    if Property.SHARDING_KEY in properties:
        return pb.FIFO
    return pb.NORMAL


def _delivery_timestamp(properties: dict[str, str], now_ms: int) -> int | None:
    seconds = properties.get(Property.TIMER_DELAY_SEC)
    try:
        if seconds is not None:
            return now_ms + int(seconds) * 1000
        deliver = properties.get(Property.TIMER_DELIVER_MS)
        return int(deliver) if deliver is not None else None
    except ValueError:
        return None


def _system_properties(record, properties: dict[str, str], now_ms: int) -> pb.SystemProperties:
    system = pb.SystemProperties()
    if Property.TAGS in properties:
        system.tag = properties[Property.TAGS]
    if Property.KEYS in properties:
        system.keys.extend(properties[Property.KEYS].split(KEY_SEPARATOR))
    system.message_id = properties.get(Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or \
        offset_message_id(record.store_host, record.store_port, record.physical_offset)
    body = bytes(record.body)
    system.body_digest.CopyFrom(pb.Digest(type=pb.MD5,
                                          checksum=hashlib.md5(body).hexdigest().upper()))
    system.body_encoding = pb.GZIP if record.sys_flag & _COMPRESSED else pb.IDENTITY
    system.message_type = _message_type(properties)
    system.born_timestamp.CopyFrom(_timestamp(record.born_timestamp))
    born_host = properties.get(Property.BORN_HOST) or _host_text(record.born_host,
                                                                  record.born_port)
    system.born_host = born_host
    system.store_timestamp.CopyFrom(_timestamp(record.store_timestamp))
    system.store_host = _host_text(record.store_host, record.store_port)
    deliver_ms = _delivery_timestamp(properties, now_ms)
    if deliver_ms is not None:
        system.delivery_timestamp.CopyFrom(_timestamp(deliver_ms))
    if Property.SHARDING_KEY in properties:
        system.message_group = properties[Property.SHARDING_KEY]
    if Property.POP_CK in properties:
        system.receipt_handle = properties[Property.POP_CK]
    system.queue_id = record.queue_id
    system.queue_offset = record.queue_offset
    system.delivery_attempt = record.reconsume_times + 1
    if Property.TRACE_CONTEXT in properties:
        system.trace_context = properties[Property.TRACE_CONTEXT]
    origin_topic = properties.get(Property.DLQ_ORIGIN_TOPIC)
    origin_id = properties.get(Property.DLQ_ORIGIN_MESSAGE_ID)
    if origin_topic is not None and origin_id is not None:
        system.dead_letter_queue.CopyFrom(pb.DeadLetterQueue(topic=origin_topic,
                                                             message_id=origin_id))
    return system


def from_record(record, properties: dict[str, str] | None = None,
                now_ms: int | None = None) -> pb.Message:
    """GrpcConverter.buildMessage of a decoded CommitLog record (``properties`` override the
    record's: a receive shows its POP_CK)."""
    if properties is None:
        properties = decode_properties(record.properties)
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    user = {key: value for key, value in properties.items() if key not in SYSTEM_PROPERTY_NAMES}
    return pb.Message(topic=pb.Resource(name=record.topic),
                      user_properties=user,
                      system_properties=_system_properties(record, properties, now_ms),
                      body=bytes(record.body))
