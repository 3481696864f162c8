# Producer send handlers (SEND_MESSAGE 10, SEND_MESSAGE_V2 310, SEND_BATCH_MESSAGE 320).
"""The send path: checks in the Java broker's order, one encode per request, one put.

protocol.md §2.2, §3.1-3.7, §4.3, §5.1-5.3, §5.5. The request code only selects the header naming
(long names for 10, one-letter names for 310/320); batch-ness is the header's ``batch`` flag.

Check order (Java 4.9 ``AbstractSendMessageProcessor.msgCheck`` then ``SendMessageProcessor``):
broker write permission for order topics (NO_PERMISSION), topic name (SYSTEM_ERROR as 4.9 answers
``TopicValidator.validateTopic``), topics producers may not send to (NO_PERMISSION), topic exists
or is auto-created (TOPIC_NOT_EXIST), queue id < queue count (SYSTEM_ERROR), then the message:
body, properties, retry/DLQ, delay and transaction redirects. Every refusal stores nothing.

The helpers :func:`encode_message`, :func:`redirect_delay` and :func:`send_back_topic` are shared
with the one re-put path (:mod:`pybroker.broker.reput`) of the send-back, end-transaction,
schedule and transaction-check services.
"""
import random
import re
import socket

from pybroker.broker.interfaces import ClientChannel
from pybroker.protocol.command import RemotingCommand
from pybroker._fast import record as record_codec
from pybroker.broker.context import BrokerContext, Handler
from pybroker.protocol import headers
from pybroker.protocol.headers import java_parse_boolean
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_response
from pybroker.stats.metric_names import TransactionEvent
from pybroker.protocol.constants import (DLQ_GROUP_TOPIC_PREFIX, DLQ_QUEUE_NUMS_PER_GROUP,
                                         NAME_VALUE_SEPARATOR, PERM_READ_WRITE,
                                         PROPERTIES_MAX_BYTES, PROPERTY_SEPARATOR,
                                         RETRY_GROUP_TOPIC_PREFIX, TRANSACTION_TYPE_MASK,
                                         MessageSysFlag, MQVersion, Perm, Property,
                                         SystemTopic, TopicSysFlag)
from pybroker.protocol.message_id import create_uniq_id
from pybroker.protocol.properties import append_batch_properties, encode_properties
from pybroker.broker import timer_message
from pybroker.broker.timer_message import TimerRefused, TimerRules
from pybroker.store import layout
from pybroker.store.config_docs import TopicConfig
from pybroker.store.status import PutStatus, send_response

# proxy rule adopted on the broker (security-and-faults.md, "Must-refuse inputs")
PROPERTIES_COUNT_MAX = 128
_CONTROL_CHARACTERS = re.compile("[\x00\x03-\x1f]")
_V6_FLAGS = int(MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOSTADDRESS_V6)
_BORN_V6 = int(MessageSysFlag.BORNHOST_V6)
_STORE_V6 = int(MessageSysFlag.STOREHOSTADDRESS_V6)
_MULTI_TAGS = int(MessageSysFlag.MULTI_TAGS)
_PREPARED = int(MessageSysFlag.TRANSACTION_PREPARED_TYPE)
_WAIT = Property.WAIT_STORE_MSG_OK
_DELAY = Property.DELAY_TIME_LEVEL
_TRAN_MSG = Property.TRANSACTION_PREPARED
_BORN_HOSTS_MAX = 4096
_born_hosts: dict[str, tuple[bytes, int]] = {}
_random = random.Random()


class SendRefused(Exception):
    """A refusal with its RocketMQ response code and remark (nothing was stored)."""

    def __init__(self, code: int, remark: str | None):
        super().__init__(remark)
        self.code = code
        self.remark = remark


# --- shared helpers -----------------------------------------------------------------------------

def born_host_of(remote_address: str) -> tuple[bytes, int]:
    """(raw IP bytes, port) of a channel's ``ip:port`` (``[v6]:port`` too); cached per address.

    An address that does not parse becomes 0.0.0.0:0 rather than failing the send.
    """
    cached = _born_hosts.get(remote_address)
    if cached is not None:
        return cached
    host, _, port_text = remote_address.rpartition(":")
    host = host.strip("[]")
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        parsed = (socket.inet_pton(family, host), int(port_text))
        if not 0 <= parsed[1] <= 65535:
            raise ValueError(port_text)
    except (OSError, ValueError):
        parsed = (b"\0\0\0\0", 0)
    if len(_born_hosts) >= _BORN_HOSTS_MAX:
        _born_hosts.clear()
    _born_hosts[remote_address] = parsed
    return parsed


def host_sys_flag(sys_flag: int, born_ip: bytes, store_ip: bytes) -> int:
    """``sys_flag`` with the born/store IPv6 bits set from the actual address sizes."""
    sys_flag &= ~_V6_FLAGS
    if len(born_ip) == 16:
        sys_flag |= _BORN_V6
    if len(store_ip) == 16:
        sys_flag |= _STORE_V6
    return sys_flag


def encode_message(topic: str, queue_id: int, flag: int, body, properties: str, sys_flag: int,
                   born_timestamp: int, born_host: tuple[bytes, int],
                   store_host: tuple[bytes, int], reconsume_times: int = 0,
                   prepared_transaction_offset: int = 0, store_timestamp: int = 0,
                   queue_offset: int = 0, physical_offset: int = 0) -> bytearray:
    """One whole CommitLog record in a new buffer (offsets and store time patched at append;
    set them only for a record that is sent rather than stored, e.g. a transaction check).

    Timestamps in ms; hosts are (raw IP, port). The IPv6 bits of ``sys_flag`` follow the hosts.
    ValueError when the topic or properties exceed 32767 bytes.
    """
    topic_bytes = topic.encode()
    properties_bytes = properties.encode()
    sys_flag = host_sys_flag(sys_flag, born_host[0], store_host[0])
    size = record_codec.encoded_size(len(body), len(topic_bytes), len(properties_bytes),
                                     sys_flag)
    buffer = bytearray(size)
    record_codec.encode_into(buffer, 0, topic_bytes, queue_id, flag, body, properties_bytes,
                             sys_flag, born_timestamp, born_host[0], born_host[1],
                             store_host[0], store_host[1], reconsume_times,
                             prepared_transaction_offset, queue_offset, physical_offset,
                             store_timestamp)
    return buffer


def delay_level_of(properties: dict[str, str]) -> int:
    """The ``DELAY`` level (0 when absent); SendRefused(MESSAGE_ILLEGAL) when not an integer."""
    text = properties.get(_DELAY)
    if text is None:
        return 0
    try:
        return int(text)
    except ValueError:
        raise SendRefused(ResponseCode.MESSAGE_ILLEGAL,
                          f"the message property DELAY is not a number: {text[:32]!r}") from None


def redirect_delay(topic: str, queue_id: int, properties: dict[str, str],
                   levels_count: int) -> tuple[str, int]:
    """Java's put-time delay redirect (protocol.md §5.1) for NOT/COMMIT type messages.

    With ``DELAY`` > 0: the level is capped at ``levels_count`` (and written back), REAL_TOPIC
    and REAL_QID are set, and the message goes to SCHEDULE_TOPIC_XXXX queue level - 1.
    ``properties`` is changed in place; returns the (topic, queue_id) to store under.
    """
    level = delay_level_of(properties)
    if level <= 0:
        return topic, queue_id
    if level > levels_count:
        level = levels_count
        properties[_DELAY] = str(level)
    properties[Property.REAL_TOPIC] = topic
    properties[Property.REAL_QUEUE_ID] = str(queue_id)
    return SystemTopic.SCHEDULE, level - 1


def redirect_scheduled(topic: str, queue_id: int, properties: dict[str, str],
                       levels_count: int, timer: TimerRules,
                       now_ms: int) -> tuple[str, int]:
    """Java 5.x's put-time redirects for NOT/COMMIT type messages, in Java's order (HookUtils
    handleScheduleMessage): the timer rule (broker/timer_message.py: a timer message goes to
    rmq_sys_wheel_timer, a delay level wins over it), then the delay level
    (:func:`redirect_delay`). ``properties`` changes in place; returns the (topic, queue id)
    to store under. A timer refusal raises SendRefused with Java's code and remark."""
    try:
        new_topic, new_queue_id = timer_message.redirect_timer(topic, queue_id, properties,
                                                               timer, now_ms)
    except TimerRefused as refused:
        code, remark = send_response(PutStatus[refused.status], timer=timer)
        raise SendRefused(code, remark) from None
    if new_topic == timer_message.TIMER_TOPIC and topic != new_topic:
        # Java 5.x gives every message a UNIQ_KEY before the store hooks run: the timer's
        # cancel marks and recall handles name it.
        properties.setdefault(Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, create_uniq_id())
        return new_topic, new_queue_id
    return redirect_delay(topic, queue_id, properties, levels_count)


def recall_handle_of(properties: dict[str, str], broker_name: str) -> str | None:
    """The recall handle a single send's answer carries (Java attachRecallHandle): for a
    message parked in the timer wheel whose real topic is not a retry topic, else None."""
    out_ms = properties.get(Property.TIMER_OUT_MS)
    real_topic = properties.get(Property.REAL_TOPIC)
    if out_ms is None or real_topic is None or real_topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return None
    try:
        timer_out_ms = int(out_ms)
    except ValueError:
        return None
    return timer_message.build_recall_handle(
        real_topic, broker_name, timer_out_ms,
        properties.get(Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""))


# The TimerRules last made, with the (frozen) StoreConfig and wheel reader they were made of:
# a handler's next put asks again with the same two (a live settings change replaces the
# StoreConfig, so a new one makes new rules). One tuple, replaced whole: a reader in another
# thread sees an old entry or a new one, never a mix.
_RULES: list[tuple] = [(None, None, None)]


def timer_rules(ctx) -> TimerRules:
    """The put-time timer rules of a handler's broker (the context's wheel reader, if any)."""
    store, slot_num = ctx.config.store, ctx.timer_slot_num
    cached_store, cached_slot_num, rules = _RULES[0]
    if rules is None or store is not cached_store or slot_num is not cached_slot_num:
        rules = TimerRules.of(store, slot_num)
        _RULES[0] = (store, slot_num, rules)
    return rules


def stored_properties(properties: dict[str, str], cluster_name: str,
                      keep_wait: bool = False) -> str:
    """The properties string as stored: ``CLUSTER`` set and ``WAIT`` dropped (protocol.md §3.2, §8
    item 20) unless ``keep_wait``: Java recomputes the string from the whole map, WAIT included,
    when it redirects a message to the schedule or the transaction half topic."""
    wait = None if keep_wait else properties.pop(_WAIT, None)
    properties[Property.CLUSTER] = cluster_name
    text = encode_properties(properties)
    if wait is not None:
        properties[_WAIT] = wait
    return text


def wait_store_of(properties: dict[str, str]) -> bool:
    """``WAIT`` as Java reads it: absent means true, else Boolean.parseBoolean."""
    value = properties.get(_WAIT)
    return value is None or java_parse_boolean(value)


def parse_properties(text: str | None) -> dict[str, str]:
    """Strict properties parse; SendRefused(MESSAGE_ILLEGAL) for input clients cannot produce.

    Refused: over 32767 UTF-8 bytes, control characters other than the two separators, a pair
    without a name or with a second ``\\x01``, a repeated name, more than
    :data:`PROPERTIES_COUNT_MAX` pairs, a blank tag or one containing ``|``. Pairs with an empty
    value are dropped, as Java's decoder drops them.
    """
    if not text:
        return {}
    if len(text) > PROPERTIES_MAX_BYTES or len(text.encode()) > PROPERTIES_MAX_BYTES:
        raise SendRefused(ResponseCode.MESSAGE_ILLEGAL,
                          f"the message properties are longer than {PROPERTIES_MAX_BYTES} bytes")
    if _CONTROL_CHARACTERS.search(text) is not None:
        raise SendRefused(ResponseCode.MESSAGE_ILLEGAL,
                          "the message properties contain control characters")
    properties: dict[str, str] = {}
    segments = text.split(PROPERTY_SEPARATOR)
    for segment in segments:
        if not segment:
            continue
        name, separator, value = segment.partition(NAME_VALUE_SEPARATOR)
        if not name or not separator or NAME_VALUE_SEPARATOR in value:
            raise SendRefused(ResponseCode.MESSAGE_ILLEGAL,
                              f"the message properties have a malformed pair: {segment[:32]!r}")
        if name in properties:
            raise SendRefused(ResponseCode.MESSAGE_ILLEGAL,
                              f"the message property {name[:32]} is repeated")
        if value:
            properties[name] = value
    if len(segments) > PROPERTIES_COUNT_MAX + 1:
        raise SendRefused(ResponseCode.MESSAGE_ILLEGAL,
                          f"the message has more than {PROPERTIES_COUNT_MAX} properties")
    tags = properties.get(Property.TAGS)
    if tags is not None and (not tags.strip() or "|" in tags):
        raise SendRefused(ResponseCode.MESSAGE_ILLEGAL,
                          f"the message tag {tags[:32]!r} is blank or contains '|'")
    return properties


async def send_back_topic(ctx: BrokerContext, topic: str, queue_nums: int,
                          topic_sys_flag: int) -> TopicConfig | None:
    """The config of a %RETRY%/%DLQ% topic, created (perm RW) when absent, as Java's
    createTopicInSendMessageBackMethod does; None if impossible."""
    config = ctx.metadata.topic_config(topic)
    if config is not None:
        return config
    return await ctx.metadata.create_topic_for_send_back(topic, queue_nums,
                                                         int(PERM_READ_WRITE), topic_sys_flag)


def send_response_fields(ctx) -> dict[str, str]:
    """The ext fields every send response carries (protocol.md §8 item 7)."""
    return send_response_fields_of(ctx.config)


def send_response_fields_of(config) -> dict[str, str]:
    """:func:`send_response_fields` from the broker's config (the fast path's templates)."""
    broker = config.broker
    return {Property.MSG_REGION: broker.region_id,
            Property.TRACE_SWITCH: "true" if broker.trace_on else "false"}


# --- request checks -----------------------------------------------------------------------------

async def _topic_config(ctx, channel, header):
    """msgCheck: permissions, name, existence (auto-create), queue id bound."""
    topic = header.topic
    broker = ctx.config.broker
    config = ctx.metadata.topic_config(topic)
    if not broker.broker_permission & Perm.WRITE and config is not None and config.order:
        raise SendRefused(ResponseCode.NO_PERMISSION,
                          f"the broker[{broker.broker_ip1}] sending message is forbidden")
    remark = headers.validate_topic(topic) or headers.topic_too_long_to_send(topic)
    if remark is not None:
        raise SendRefused(ResponseCode.SYSTEM_ERROR, remark)
    remark = headers.topic_not_allowed_to_send(topic)
    if remark is not None:
        raise SendRefused(ResponseCode.NO_PERMISSION, remark)
    if config is None:
        config = await _create_on_send(ctx, header)
    queue_nums = max(config.write_queue_nums, config.read_queue_nums)
    if header.queue_id >= queue_nums:
        raise SendRefused(ResponseCode.SYSTEM_ERROR,
                          f"request queueId[{header.queue_id}] is illegal, topic {topic} has "
                          f"{queue_nums} queues, Producer: {channel.remote_address}")
    return config


async def _create_on_send(ctx, header):
    topic = header.topic
    is_retry = topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
    topic_sys_flag = 0
    if header.unit_mode:
        topic_sys_flag = int(TopicSysFlag.UNIT_SUB if is_retry else TopicSysFlag.UNIT)
    config = None
    if ctx.config.broker.auto_create_topic_enable or is_retry:
        default_topic = header.default_topic
        if headers.validate_topic(default_topic) is None:
            config = await ctx.metadata.create_topic_on_send(
                topic, default_topic, header.default_topic_queue_nums, topic_sys_flag)
    if config is None and is_retry:
        config = await send_back_topic(ctx, topic, 1, topic_sys_flag)
    if config is None:
        raise SendRefused(ResponseCode.TOPIC_NOT_EXIST,
                          f"topic[{topic}] not exist, apply first please!")
    return config


def _queue_id(header, config) -> int:
    queue_id = header.queue_id
    if queue_id < 0:
        if config.write_queue_nums <= 0:
            raise SendRefused(ResponseCode.SYSTEM_ERROR,
                              f"topic[{header.topic}] has no writable queue")
        queue_id = _random.randrange(config.write_queue_nums)
    return queue_id


def _body_of(ctx, request) -> memoryview | bytes:
    body = request.body
    if body is None or len(body) == 0:
        raise SendRefused(ResponseCode.MESSAGE_ILLEGAL, "the message body is empty")
    max_message_size = ctx.config.store.max_message_size
    if len(body) > max_message_size:
        code, remark = send_response(PutStatus.MESSAGE_ILLEGAL, max_message_size)
        raise SendRefused(code, remark)
    return body


async def _retry_or_dlq(ctx, request, header, topic: str, queue_id: int, config):
    """handleRetryAndDLQ: a %RETRY% send past maxReconsumeTimes goes to the group's DLQ."""
    if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return topic, queue_id, config
    group = topic[len(RETRY_GROUP_TOPIC_PREFIX):]
    group_config = ctx.metadata.subscription_group(group)
    if group_config is None:
        raise SendRefused(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                          f"subscription group not exist, {group}")
    max_reconsume_times = group_config.retry_max_times
    if request.version >= MQVersion.V3_4_9 and header.max_reconsume_times is not None:
        max_reconsume_times = header.max_reconsume_times
    if (header.reconsume_times or 0) < max_reconsume_times:
        return topic, queue_id, config
    if ctx.stats is not None:     # Java: the request's topic and producer group
        ctx.stats.send_to_dlq(topic, header.producer_group)
    dlq_topic = DLQ_GROUP_TOPIC_PREFIX + group
    dlq_config = await send_back_topic(ctx, dlq_topic, DLQ_QUEUE_NUMS_PER_GROUP, 0)
    if dlq_config is None:
        raise SendRefused(ResponseCode.SYSTEM_ERROR, f"topic[{dlq_topic}] not exist")
    return dlq_topic, _random.randrange(DLQ_QUEUE_NUMS_PER_GROUP), dlq_config


def _sys_flag(header, config) -> int:
    sys_flag = header.sys_flag
    if config.topic_filter_type == "MULTI_TAG":
        sys_flag |= _MULTI_TAGS
    return sys_flag


# --- single message -----------------------------------------------------------------------------

async def _send_single(ctx, channel, request, header, config) -> tuple:
    """Build, redirect, encode and put one message; returns (put result, queue id, the
    recall handle of a parked timer message or None)."""
    body = _body_of(ctx, request)
    properties = parse_properties(header.properties)
    queue_id = _queue_id(header, config)
    topic, queue_id, config = await _retry_or_dlq(ctx, request, header, header.topic, queue_id,
                                                  config)
    response_queue_id = queue_id
    sys_flag = _sys_flag(header, config)
    reconsume_times = header.reconsume_times or 0
    if java_parse_boolean(properties.get(_TRAN_MSG)) and not (
            reconsume_times > 0 and delay_level_of(properties) > 0):
        broker = ctx.config.broker
        if broker.reject_transaction_message:
            raise SendRefused(ResponseCode.NO_PERMISSION,
                              f"the broker[{broker.broker_ip1}] sending transaction message is "
                              "forbidden")
        properties[Property.REAL_TOPIC] = topic
        properties[Property.REAL_QUEUE_ID] = str(queue_id)
        sys_flag &= ~TRANSACTION_TYPE_MASK
        topic, queue_id = SystemTopic.TRANS_HALF, 0
    elif sys_flag & TRANSACTION_TYPE_MASK in (0, int(MessageSysFlag.TRANSACTION_COMMIT_TYPE)):
        topic, queue_id = redirect_scheduled(topic, queue_id, properties,
                                             len(ctx.config.derived.delay_levels_ms),
                                             timer_rules(ctx), ctx.now_ms())
    redirected = topic in (SystemTopic.SCHEDULE, SystemTopic.TRANS_HALF, SystemTopic.WHEEL_TIMER)
    stored = stored_properties(properties, ctx.config.broker.broker_cluster_name, redirected)
    if len(stored.encode()) > PROPERTIES_MAX_BYTES:
        code, remark = send_response(PutStatus.PROPERTIES_SIZE_EXCEEDED,
                                     ctx.config.store.max_message_size)
        raise SendRefused(code, remark)
    records = encode_message(topic, queue_id, header.flag, body, stored, sys_flag,
                             header.born_timestamp, born_host_of(channel.remote_address),
                             ctx.store_host, reconsume_times)
    result = await timed_put(ctx, records, topic, queue_id, 1, sys_flag,
                             wait_store_of(properties))
    if topic == SystemTopic.TRANS_HALF and result.status.stored and ctx.stats is not None:
        # Java's TransactionMetrics: one more half message of the real topic.
        ctx.stats.transaction(properties[Property.REAL_TOPIC], TransactionEvent.PREPARED)
    recall_handle = None
    if topic == SystemTopic.WHEEL_TIMER:
        recall_handle = recall_handle_of(properties, ctx.config.broker.broker_name)
    return result, response_queue_id, recall_handle


# --- batch --------------------------------------------------------------------------------------

def _batch_properties(ctx, header) -> tuple[str, bool]:
    """(stored batch properties, wait flag); DELAY and transactions are refused (protocol.md
    §3.6)."""
    properties = parse_properties(header.properties)
    if delay_level_of(properties) > 0:
        raise SendRefused(ResponseCode.MESSAGE_ILLEGAL,
                          "batch messages do not support a delay level")
    if header.sys_flag & TRANSACTION_TYPE_MASK or java_parse_boolean(properties.get(_TRAN_MSG)):
        raise SendRefused(ResponseCode.MESSAGE_ILLEGAL,
                          "batch messages do not support transactions")
    wait = wait_store_of(properties)
    return stored_properties(properties, ctx.config.broker.broker_cluster_name), wait


def _batch_entries(ctx, body, batch_properties: str) -> list[tuple[int, int, int, str]]:
    """Split and check every inner message; any bad one refuses the whole batch."""
    try:
        entries = record_codec.split_batch(body)
    except ValueError as error:
        raise SendRefused(ResponseCode.MESSAGE_ILLEGAL,
                          f"the batch message body is malformed: {error}") from None
    max_message_size = ctx.config.store.max_message_size
    checked = []
    for flag, body_start, body_length, inner_text in entries:
        inner = parse_properties(inner_text)
        if delay_level_of(inner) > 0 or java_parse_boolean(inner.get(_TRAN_MSG)):
            raise SendRefused(ResponseCode.MESSAGE_ILLEGAL,
                              "batch messages do not support delay levels or transactions")
        combined = append_batch_properties(inner_text, batch_properties)
        if body_length > max_message_size or len(combined.encode()) > PROPERTIES_MAX_BYTES:
            code, remark = send_response(PutStatus.MESSAGE_ILLEGAL, max_message_size)
            raise SendRefused(code, remark)
        checked.append((flag, body_start, body_length, combined))
    if not checked:
        raise SendRefused(ResponseCode.MESSAGE_ILLEGAL, "the batch has no messages")
    return checked


async def _send_batch(ctx, channel, request, header, config) -> tuple:
    """Encode N records into one buffer and put them in one call (protocol.md §3.6)."""
    topic = header.topic
    if len(topic) > layout.TOPIC_MAX_BYTES_V1:
        raise SendRefused(ResponseCode.MESSAGE_ILLEGAL,
                          f"message topic length too long {len(topic)}")
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        raise SendRefused(ResponseCode.MESSAGE_ILLEGAL,
                          f"batch request does not support retry group {topic}")
    body = request.body
    if body is None or len(body) == 0:
        raise SendRefused(ResponseCode.MESSAGE_ILLEGAL, "the message body is empty")
    batch_properties, wait = _batch_properties(ctx, header)
    entries = _batch_entries(ctx, body, batch_properties)
    queue_id = _queue_id(header, config)
    born_host = born_host_of(channel.remote_address)
    store_host = ctx.store_host
    sys_flag = host_sys_flag(_sys_flag(header, config), born_host[0], store_host[0])
    topic_bytes = topic.encode()
    encoded = [(flag, body_start, body_length, text.encode())
               for flag, body_start, body_length, text in entries]
    total = sum(record_codec.encoded_size(body_length, len(topic_bytes), len(props), sys_flag)
                for _, _, body_length, props in encoded)
    records = bytearray(total)
    body_view = memoryview(body)
    position = 0
    born_timestamp, reconsume_times = header.born_timestamp, header.reconsume_times or 0
    for flag, body_start, body_length, props in encoded:
        position += record_codec.encode_into(
            records, position, topic_bytes, queue_id, flag,
            body_view[body_start:body_start + body_length], props, sys_flag, born_timestamp,
            born_host[0], born_host[1], store_host[0], store_host[1], reconsume_times)
    result = await timed_put(ctx, records, topic, queue_id, len(encoded), sys_flag, wait)
    return result, queue_id, None


# --- statistics ---------------------------------------------------------------------------------

def message_type_label(topic: str) -> int:
    """The message-type label a put to ``topic`` is counted under (the fast path's too)."""
    # Java counts a put under the topic it was stored in (delay and half-transaction
    # messages under their system topics); the label says which kind it was.
    if topic == SystemTopic.TRANS_HALF:
        return 2
    if topic in (SystemTopic.SCHEDULE, SystemTopic.WHEEL_TIMER):
        return 1
    return 0


async def timed_put(ctx, records, topic: str, queue_id: int, count: int, sys_flag: int,
                    wait_store: bool):
    """``ctx.putter.put`` counted as Java counts a put: its latency (putMessageEntireTime)
    and, when stored, TOPIC_PUT_NUMS / TOPIC_PUT_SIZE / BROKER_PUT_NUMS."""
    stats = ctx.stats
    if stats is None:
        return await ctx.putter.put(records, topic, queue_id, count, sys_flag, wait_store)
    started = stats.now_ns()
    result = await ctx.putter.put(records, topic, queue_id, count, sys_flag, wait_store)
    stats.put_latency(stats.now_ns() - started)
    if result.status.stored:
        stats.topic_put(topic, result.count, result.wrote_bytes, message_type_label(topic))
    return result


# --- handler ------------------------------------------------------------------------------------

def answer(request, code: int, remark: str | None, fields: dict[str, str]):
    """The response to a send-like request (None for a oneway one)."""
    if request.is_oneway:
        return None
    return create_response(request, code, remark, fields)


async def handle_send_message(ctx: BrokerContext, channel: ClientChannel,
                              request: RemotingCommand) -> RemotingCommand | None:
    """SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320).

    Returns the response (None for oneway requests). Response ext fields: ``msgId`` (offset
    ids, comma-joined for a batch), ``queueId``, ``queueOffset`` of the first record,
    ``MSG_REGION`` and ``TRACE_ON``; the code comes from :func:`store.status.send_response`.
    """
    fields = send_response_fields(ctx)
    # HeaderError propagates: the transport answers it (docs/architecture/layers.md).
    header = headers.parse_request_header(request.code, request.ext_fields)
    try:
        config = await _topic_config(ctx, channel, header)
        if header.batch:
            result, queue_id, recall_handle = await _send_batch(ctx, channel, request, header,
                                                                config)
        else:
            result, queue_id, recall_handle = await _send_single(ctx, channel, request, header,
                                                                 config)
    except SendRefused as refusal:
        return answer(request, refusal.code, refusal.remark, fields)
    code, remark = send_response(result.status, ctx.config.store.max_message_size,
                                 waited_ms=result.waited_ms, queue_size=result.queue_size)
    if result.status.stored:
        fields["msgId"] = result.message_id
        fields["queueId"] = str(queue_id)
        fields["queueOffset"] = str(result.queue_offset)
        transaction_id = _half_message_id(header)
        if transaction_id is not None:
            fields["transactionId"] = transaction_id
        if recall_handle is not None:
            fields["recallHandle"] = recall_handle
    return answer(request, code, remark, fields)


def _half_message_id(header) -> str | None:
    """The ``transactionId`` of a stored transactional half message's answer: its UNIQ_KEY.
    Java 5.x answers every send with it; rocketmq-proxy 5.3.3 needs it of a half message (its
    EndTransaction refuses an empty one), no client reads it of any other, so only the
    handler's path sets it (the C fast path never takes half messages)."""
    text = header.properties
    if not text or _TRAN_MSG not in text or header.batch:
        return None
    properties = parse_properties(text)
    if not java_parse_boolean(properties.get(_TRAN_MSG)):
        return None
    return properties.get(Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)


HANDLERS: dict[int, Handler] = {
    RequestCode.SEND_MESSAGE: handle_send_message,
    RequestCode.SEND_MESSAGE_V2: handle_send_message,
    RequestCode.SEND_BATCH_MESSAGE: handle_send_message,
}
