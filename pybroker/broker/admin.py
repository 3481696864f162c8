# Admin handlers (mqadmin): topics, groups, stats, connections, runtime info, client calls.
"""Handlers of the broker administration requests (protocol.md §2.10, §2.12), run in the
metadata service.

Bodies are what Java's fastjson writes, so ``mqadmin`` parses them: compact JSON with bean
fields in alphabetical order. Maps keyed by a MessageQueue (TopicStatsTable, ConsumeStats)
use fastjson's object-valued keys, which are not standard JSON:
``{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{...}}}``.

GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY are forwarded to the client's channel
with :meth:`MetadataState.call_client` (correlated by channel id and opaque; the service
hands the client's response to :meth:`MetadataState.complete_client_call`); the client's
answer is returned under the admin request's opaque.
INVOKE_BROKER_TO_RESET_OFFSET (222) commits the new offsets and tells every live member
(RESET_CONSUMER_CLIENT_OFFSET, oneway); INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223) asks each
member with GET_CONSUMER_STATUS_FROM_CLIENT (221).
"""
import logging
from collections.abc import Iterable

import orjson

from pybroker.broker import attributes, runtime_settings
from pybroker.broker.context import MetadataContext, MetadataHandler
from pybroker.broker.interfaces import ClientChannel
from pybroker.broker.managers.consumer import subscription_to_json
from pybroker.config import BrokerRole, all_settings
from pybroker.protocol import bodies, constants, fastjson
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_request, create_response
from pybroker.protocol.headers import parse_request_header, validate_group, validate_topic
from pybroker.protocol.message_id import decode_offset_message_id
from pybroker.broker.runtime_info import runtime_info
from pybroker.store import config_docs, paths
from pybroker.store.config_docs import SubscriptionGroupConfig, TopicConfig

__all__ = ["HANDLERS", "encode_message_queue_map", "encode_offset_map", "encode_topic_stats_table",
           "encode_consume_stats", "encode_consumer_connection"]

log = logging.getLogger(__name__)

_SORTED = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
SLAVE_REMARK = ("Can't modify topic or subscription group from slave broker, please execute it "
                "from master broker.")
QUEUE_NUMS_MAX = 65535          # bound on an admin-created topic's queue count
V3_0_7_SNAPSHOT = 28            # MQVersion ordinal: oldest client that answers 220/221
V3_1_8_SNAPSHOT = 62            # MQVersion ordinal: oldest client that answers 307/309
CONSUMER_STATUS_TIMEOUT_MS = 5000   # Java waits 5 s for each client's 221 answer


def _ok(request: RemotingCommand, body: bytes | None = None) -> RemotingCommand:
    return create_response(request, ResponseCode.SUCCESS, body=body)


def _error(request: RemotingCommand, remark: str,
           code: int = ResponseCode.SYSTEM_ERROR) -> RemotingCommand:
    return create_response(request, code, remark)


def _is_slave(ctx) -> bool:
    return ctx.config.store.broker_role == BrokerRole.SLAVE


def _json(value) -> bytes:
    return orjson.dumps(value, option=_SORTED)


# --- fastjson object-keyed maps ----------------------------------------------------------------
def encode_message_queue_map(entries) -> bytes:
    """A Java ``Map<MessageQueue, V>`` as fastjson writes it: each key a MessageQueue object,
    each value ``V`` as a JSON object with sorted fields. ``entries``: (MessageQueue, dict)."""
    parts = [bodies.encode_message_queue(queue) + b":" + _json(value) for queue, value in entries]
    return b"{" + b",".join(parts) + b"}"


def encode_offset_map(entries) -> bytes:
    """A Java ``Map<MessageQueue, Long>`` as fastjson writes it (ResetOffsetBody's
    offsetTable, GetConsumerStatusBody's tables). ``entries``: (MessageQueue, int)."""
    parts = [bodies.encode_message_queue(queue) + b":" + str(int(offset)).encode()
             for queue, offset in entries]
    return b"{" + b",".join(parts) + b"}"


def encode_topic_stats_table(entries) -> bytes:
    """TopicStatsTable: (MessageQueue, {"lastUpdateTimestamp","maxOffset","minOffset"})."""
    return b'{"offsetTable":' + encode_message_queue_map(entries) + b"}"


def encode_consume_stats(entries, consume_tps: float) -> bytes:
    """ConsumeStats: (MessageQueue, {"brokerOffset","consumerOffset","pullOffset",
    "lastTimestamp"})."""
    return (b'{"consumeTps":' + orjson.dumps(float(consume_tps)) + b',"offsetTable":'
            + encode_message_queue_map(entries) + b"}")


def _language_name(language: int) -> str:
    try:
        return constants.LanguageCode(language).name
    except ValueError:
        return constants.LanguageCode.OTHER.name


def encode_consumer_connection(info) -> bytes:
    """ConsumerConnection of a :class:`pybroker.broker.metadata.ConsumerGroupInfo`."""
    connections = [{"clientAddr": client.channel.remote_address, "clientId": client.client_id,
                    "language": _language_name(client.language), "version": client.version}
                   for client in info.channels.values()]
    return _json({
        "connectionSet": connections,
        "consumeFromWhere": constants.ConsumeFromWhere(info.consume_from_where).name,
        "consumeType": constants.ConsumeType(info.consume_type).name,
        "messageModel": constants.MessageModel(info.message_model).name,
        "subscriptionTable": {topic: subscription_to_json(subscription)
                              for topic, subscription in info.subscriptions.items()},
    })


def _message_queue(ctx, topic: str, queue_id: int) -> bodies.MessageQueue:
    return bodies.MessageQueue(topic, ctx.config.broker.broker_name, queue_id)


# --- topics -------------------------------------------------------------------------------------
def _topic_config_from_header(header) -> TopicConfig | str:
    if header.topic_filter_type not in constants.TOPIC_FILTER_TYPES:
        return f"unknown topicFilterType {header.topic_filter_type[:40]!r}"
    for name, value in (("readQueueNums", header.read_queue_nums),
                        ("writeQueueNums", header.write_queue_nums)):
        if not 0 <= value <= QUEUE_NUMS_MAX:
            return f"{name} {value} is out of range 0..{QUEUE_NUMS_MAX}"
    return TopicConfig(header.topic, header.read_queue_nums, header.write_queue_nums,
                       header.perm, header.topic_filter_type, header.topic_sys_flag or 0,
                       bool(header.order))


def _mixed_refused(ctx, modification: dict[str, str]) -> bool:
    # Java 5.x looks up the signed key as the request spelt it.
    return (not ctx.config.broker.enable_mixed_message_type
            and modification.get("+" + attributes.MESSAGE_TYPE.name)
            == attributes.TopicMessageType.MIXED)


async def handle_update_and_create_topic(ctx: MetadataContext, channel: ClientChannel,
                                         request: RemotingCommand) -> RemotingCommand | None:
    """UPDATE_AND_CREATE_TOPIC (17): create or replace a topic (Java 4.9 refuses system
    topics, which include the cluster and broker names), with the 5.x ``attributes``
    modification applied to the topic's attributes (broker/attributes.py: refusals are
    SYSTEM_ERROR with Java's message, MIXED without enableMixedMessageType INVALID_PARAMETER).
    Persisted; the service re-registers with the name servers on the change."""
    if _is_slave(ctx):
        return _error(request, SLAVE_REMARK)
    header = parse_request_header(request.code, request.ext_fields)
    remark = validate_topic(header.topic)
    if remark is not None:
        return _error(request, remark)
    if ctx.metadata.topics.is_system_topic(header.topic):
        return _error(request, f"The topic[{header.topic}] is conflict with system topic.")
    topic_config = _topic_config_from_header(header)
    if isinstance(topic_config, str):
        return _error(request, topic_config, ResponseCode.INVALID_PARAMETER)
    try:
        modification = attributes.parse_modification(header.attributes)
        if _mixed_refused(ctx, modification):
            return _error(request, "MIXED message type is not supported.",
                          ResponseCode.INVALID_PARAMETER)
        log.info("updateAndCreateTopic called by %s: %s %s", channel.remote_address,
                 topic_config, header.attributes or "")
        ctx.metadata.topics.update_topic_config(topic_config, modification)
    except attributes.AttributeRefused as refused:
        return _error(request, refused.remark)
    return _ok(request)


async def handle_delete_topic_in_broker(ctx: MetadataContext, channel: ClientChannel,
                                        request: RemotingCommand) -> RemotingCommand | None:
    """DELETE_TOPIC_IN_BROKER (215): forget the topic, its consume queues and its consumer
    offsets (CommitLog data ages out normally). System topics are refused."""
    if _is_slave(ctx):
        return _error(request, SLAVE_REMARK)
    header = parse_request_header(request.code, request.ext_fields)
    remark = validate_topic(header.topic)
    if remark is not None:
        return _error(request, remark)
    if ctx.metadata.topics.is_system_topic(header.topic):
        return _error(request, f"The topic[{header.topic}] is conflict with system topic.")
    log.info("deleteTopic %s called by %s", header.topic, channel.remote_address)
    ctx.metadata.topics.delete_topic_config(header.topic)
    ctx.metadata.offsets.remove_offsets_of_topic(header.topic)
    # Wait until the data plane destroyed the queues (the request then behaves as in Java: a
    # re-created topic starts at queue offset 0); say so when it did not answer in time.
    if not await ctx.topic_deleter.delete_topics([header.topic]):
        return _error(request, f"topic {header.topic} deleted, but the data plane did not "
                      "delete its consume queues in time; their files stay until they expire")
    return _ok(request)


async def handle_get_all_topic_config(ctx: MetadataContext, channel: ClientChannel,
                                      request: RemotingCommand) -> RemotingCommand | None:
    """GET_ALL_TOPIC_CONFIG (21): the topics.json document (compact)."""
    return _ok(request, _json(ctx.metadata.topics.to_json()))


async def handle_get_topic_config(ctx: MetadataContext, channel: ClientChannel,
                                  request: RemotingCommand) -> RemotingCommand | None:
    """GET_TOPIC_CONFIG (351, 5.x): one topic's config as Java's TopicConfigAndQueueMapping
    (no queue mapping: pybroker has no static topics, so ``lo`` changes nothing)."""
    header = parse_request_header(request.code, request.ext_fields)
    topic_config = ctx.metadata.topic_config(header.topic)
    if topic_config is None:
        return _error(request, f"No topic in this broker. topic: {header.topic}",
                      ResponseCode.TOPIC_NOT_EXIST)
    return _ok(request, _json(topic_config.bean_json()))


async def handle_get_topic_stats_info(ctx: MetadataContext, channel: ClientChannel,
                                      request: RemotingCommand) -> RemotingCommand | None:
    """GET_TOPIC_STATS_INFO (202): min/max queue offset and last store time per write queue."""
    header = parse_request_header(request.code, request.ext_fields)
    topic_config = ctx.metadata.topic_config(header.topic)
    if topic_config is None:
        return _error(request, f"topic[{header.topic}] not exist", ResponseCode.TOPIC_NOT_EXIST)
    store = ctx.store
    entries = []
    for queue_id in range(topic_config.write_queue_nums):
        min_offset = max(store.get_min_offset_in_queue(header.topic, queue_id), 0)
        max_offset = max(store.get_max_offset_in_queue(header.topic, queue_id), 0)
        timestamp_ms = 0
        if max_offset > 0:
            timestamp_ms = store.get_message_store_timestamp(header.topic, queue_id,
                                                             max_offset - 1)
        entries.append((_message_queue(ctx, header.topic, queue_id),
                        {"lastUpdateTimestamp": timestamp_ms, "maxOffset": max_offset,
                         "minOffset": min_offset}))
    return _ok(request, encode_topic_stats_table(entries))


# --- consumers ----------------------------------------------------------------------------------
def _consume_stats_entries(ctx, group: str, topic: str, pulled: dict) -> list:
    """OffsetWrapper per queue. pullOffset is Java's (the newest pull's next offset, at least
    the consumer offset); for a queue the group pops, the consumer offset plus its in-flight
    (popped, not acknowledged, not revived) messages, so that mqadmin's #Inflight
    (pullOffset - consumerOffset) counts them."""
    topic_config = ctx.metadata.topic_config(topic)
    if topic_config is None:
        return []
    info = ctx.metadata.consumers.consumer_group_info(group)
    if ctx.metadata.consumer_subscription(group, topic) is None and \
            info is not None and info.subscriptions:
        return []   # the live group does not subscribe to this topic
    entries = []
    directory = ctx.pop_directory
    key = f"{topic}@{group}"
    for queue_id in range(topic_config.read_queue_nums):
        broker_offset = max(ctx.store.get_max_offset_in_queue(topic, queue_id), 0)
        consumer_offset = max(ctx.metadata.offsets.query(group, topic, queue_id), 0)
        pull_offset = max(consumer_offset, pulled.get((key, queue_id), consumer_offset))
        popped = directory.queue_figures(group, topic, queue_id) if directory else None
        if popped is not None:
            pull_offset = consumer_offset + popped[1]
        stats = {"brokerOffset": broker_offset, "consumerOffset": consumer_offset,
                 "pullOffset": pull_offset, "lastTimestamp": 0}
        if consumer_offset > 0:
            last_ms = ctx.store.get_message_store_timestamp(topic, queue_id, consumer_offset - 1)
            if last_ms > 0:
                stats["lastTimestamp"] = last_ms
        entries.append((_message_queue(ctx, topic, queue_id), stats))
    return entries


async def handle_get_consume_stats(ctx: MetadataContext, channel: ClientChannel,
                                   request: RemotingCommand) -> RemotingCommand | None:
    """GET_CONSUME_STATS (208): broker vs consumer offset per queue of the group's topics
    (those it committed offsets for, or the one named); consumeTps is the sum over those
    topics of GROUP_GET_NUMS tps in the last minute (Java's tpsGroupGetNums)."""
    header = parse_request_header(request.code, request.ext_fields)
    if header.topic is None or not header.topic.strip():
        topics = sorted(ctx.metadata.offsets.topics_of_group(header.consumer_group))
    else:
        topics = [header.topic]
    entries = []
    consume_tps = 0.0
    service = ctx.stats_service
    pulled = service.last.pull_offsets() if service is not None and service.last else {}
    for topic in topics:
        topic_entries = _consume_stats_entries(ctx, header.consumer_group, topic, pulled)
        entries += topic_entries
        if topic_entries and service is not None:
            consume_tps += service.group_get_tps(header.consumer_group, topic)
    return _ok(request, encode_consume_stats(entries, consume_tps))


async def handle_query_topic_consume_by_who(ctx: MetadataContext, channel: ClientChannel,
                                            request: RemotingCommand) -> RemotingCommand | None:
    """QUERY_TOPIC_CONSUME_BY_WHO (300): GroupList body ``{"groupList":[...]}`` of the groups
    with a live member subscribed to the topic or with committed offsets for it (mqadmin
    queryMsgById / messageTrackDetail ask this)."""
    header = parse_request_header(request.code, request.ext_fields)
    groups = (ctx.metadata.consumers.consumer_groups_of_topic(header.topic)
              | ctx.metadata.offsets.groups_of_topic(header.topic))
    return _ok(request, _json({"groupList": sorted(groups)}))


async def handle_get_producer_connection_list(ctx: MetadataContext, channel: ClientChannel,
                                              request: RemotingCommand) -> RemotingCommand | None:
    """GET_PRODUCER_CONNECTION_LIST (204): ProducerConnection of the group's live producers;
    SYSTEM_ERROR "the producer group[g] not exist" when it has none (as Java)."""
    header = parse_request_header(request.code, request.ext_fields)
    clients = ctx.metadata.producers.producer_clients(header.producer_group)
    if not clients:
        return _error(request, f"the producer group[{header.producer_group}] not exist")
    connections = [{"clientAddr": client.channel.remote_address, "clientId": client.client_id,
                    "language": _language_name(client.language), "version": client.version}
                   for client in clients]
    return _ok(request, _json({"connectionSet": connections}))


async def handle_view_broker_stats_data(ctx: MetadataContext, channel: ClientChannel,
                                        request: RemotingCommand) -> RemotingCommand | None:
    """VIEW_BROKER_STATS_DATA (315): BrokerStatsData (minute / hour / day sum, tps, avgpt) of
    a StatsItem such as TOPIC_PUT_NUMS <topic> or GROUP_GET_NUMS <topic@group>."""
    header = parse_request_header(request.code, request.ext_fields)
    service = ctx.stats_service
    data = service.view(header.stats_name, header.stats_key) if service is not None else None
    if data is None and service is not None and not service.region.enabled:
        return _error(request, "statistics are not recorded on this broker "
                               "(statsInstrumentsEnable=false)")
    if data is None:
        return _error(request, f"The stats <{header.stats_name}> <{header.stats_key}> not exist")
    return _ok(request, _json(data))


async def handle_get_consumer_connection_list(ctx: MetadataContext, channel: ClientChannel,
                                              request: RemotingCommand) -> RemotingCommand | None:
    """GET_CONSUMER_CONNECTION_LIST (203): the group's live connections and subscriptions;
    CONSUMER_NOT_ONLINE when it has none."""
    header = parse_request_header(request.code, request.ext_fields)
    info = ctx.metadata.consumers.consumer_group_info(header.consumer_group)
    if info is None:
        return _error(request, f"the consumer group[{header.consumer_group}] not online",
                      ResponseCode.CONSUMER_NOT_ONLINE)
    return _ok(request, encode_consumer_connection(info))


# --- broker -------------------------------------------------------------------------------------
async def handle_get_broker_runtime_info(ctx: MetadataContext, channel: ClientChannel,
                                         request: RemotingCommand) -> RemotingCommand | None:
    """GET_BROKER_RUNTIME_INFO (28): KVTable of runtime figures from the supervisor's
    statistics (pybroker/broker/runtime_info.py)."""
    return _ok(request, bodies.encode_kv_table(runtime_info(ctx)))


async def handle_get_broker_config(ctx: MetadataContext, channel: ClientChannel,
                                   request: RemotingCommand) -> RemotingCommand | None:
    """GET_BROKER_CONFIG (26): every effective setting as Java Properties text (``key=value``
    lines; unset values left out, as Java leaves out nulls). pybroker keeps no secrets in its
    settings. Response header ``version``: the configuration's DataVersion JSON (Java's
    Configuration.dataVersion)."""
    lines = [f"{key}={value}\n" for key, value in all_settings(ctx.config) if value != ""]
    version = ctx.metadata.config_version
    return create_response(request, ResponseCode.SUCCESS,
                           # Ext values travel as str; _json gives bytes.
                           ext_fields={"version": _json(version.to_json()).decode()},
                           body="".join(lines).encode("utf-8"))


async def handle_update_broker_config(ctx: MetadataContext, channel: ClientChannel,
                                      request: RemotingCommand) -> RemotingCommand | None:
    """UPDATE_BROKER_CONFIG (25): body = properties text. Only the settings a running broker
    reads again change (broker/runtime_settings.py); any other key refuses the whole request
    with NO_PERMISSION naming the key. An empty body changes nothing (Java: SUCCESS)."""
    if not request.body:
        return _ok(request)
    try:
        entries = runtime_settings.parse_update(bytes(request.body))
        config = runtime_settings.updated_config(ctx.config, entries)
    except runtime_settings.SettingRefused as refused:
        log.warning("updateBrokerConfig from %s refused: %s", channel.remote_address, refused)
        return _error(request, f"updateBrokerConfig: {refused}", ResponseCode.NO_PERMISSION)
    log.info("updateBrokerConfig called by %s: %s", channel.remote_address,
             ", ".join(f"{key}={value}" for key, value in entries.items()))
    ctx.config = config
    ctx.metadata.apply_settings(config)
    return _ok(request)


# --- subscription groups and offsets -------------------------------------------------------
async def handle_get_all_subscription_group_config(
        ctx: MetadataContext, channel: ClientChannel,
        request: RemotingCommand) -> RemotingCommand | None:
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): the subscriptionGroup.json document."""
    return _ok(request, _json(ctx.metadata.groups.to_json()))


async def handle_get_subscription_group_config(
        ctx: MetadataContext, channel: ClientChannel,
        request: RemotingCommand) -> RemotingCommand | None:
    """GET_SUBSCRIPTIONGROUP_CONFIG (352, 5.x): one group's config; an unknown group is
    created when autoCreateSubscriptionGroup is on and its name is valid (Java 5.x's
    findSubscriptionGroupConfig)."""
    header = parse_request_header(request.code, request.ext_fields)
    group = header.group
    known = ctx.metadata.groups.find(group) is not None
    group_config = ctx.metadata.subscription_group(group) \
        if known or validate_group(group) is None else None
    if group_config is None:
        return _error(request, "No group in this broker", ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST)
    return _ok(request, _json(group_config.bean_json()))


async def handle_update_and_create_subscription_group(
        ctx: MetadataContext, channel: ClientChannel,
        request: RemotingCommand) -> RemotingCommand | None:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200): body = a SubscriptionGroupConfig."""
    if _is_slave(ctx):
        return _error(request, SLAVE_REMARK)
    if not request.body:
        return _error(request, "SubscriptionGroupConfig body is empty")
    try:
        group_config = SubscriptionGroupConfig.from_json(fastjson.loads(request.body))
    except (ValueError, TypeError) as error:
        return _error(request, f"bad SubscriptionGroupConfig body: {error}")
    remark = validate_group(group_config.group_name)
    if remark is not None:
        return _error(request, remark)
    log.info("updateAndCreateSubscriptionGroup called by %s: %s", channel.remote_address,
             group_config)
    # 5.x: the body's attributes are a modification (signed keys) of the group's attributes;
    # no attribute exists for groups, and Java answers the uncaught exception's text.
    modification, group_config.attributes = group_config.attributes, {}
    try:
        ctx.metadata.groups.update_subscription_group(group_config, modification)
    except attributes.AttributeRefused as refused:
        return _error(request, f"java.lang.RuntimeException: {refused.remark}")
    return _ok(request)


async def handle_delete_subscription_group(ctx: MetadataContext, channel: ClientChannel,
                                           request: RemotingCommand) -> RemotingCommand | None:
    """DELETE_SUBSCRIPTIONGROUP (207): forget the group (and its offsets when
    ``removeOffset`` (4.9) or ``cleanOffset`` (5.x) is true)."""
    if _is_slave(ctx):
        return _error(request, SLAVE_REMARK)
    header = parse_request_header(request.code, request.ext_fields)
    ctx.metadata.groups.delete_subscription_group(header.group_name)
    if header.remove_offset or header.clean_offset:
        ctx.metadata.offsets.remove_offsets_of_group(header.group_name)
    return _ok(request)


async def handle_get_all_consumer_offset(ctx: MetadataContext, channel: ClientChannel,
                                         request: RemotingCommand) -> RemotingCommand | None:
    """GET_ALL_CONSUMER_OFFSET (43): the consumerOffset.json document (quoted queue-id keys,
    which fastjson reads as well as its own bare ones)."""
    return _ok(request, _json(ctx.metadata.offsets.to_json()))


async def handle_get_all_delay_offset(ctx: MetadataContext, channel: ClientChannel,
                                      request: RemotingCommand) -> RemotingCommand | None:
    """GET_ALL_DELAY_OFFSET (45): the delayOffset.json document, the schedule service's live
    one when it runs (``metadata.delay_offsets()``), else the file."""
    document = ctx.metadata.delay_offsets()
    if document is None:
        root = ctx.config.store.store_path_root_dir
        document = config_docs.load_delay_offsets(
            paths.config_path(root, paths.DELAY_OFFSET_CONFIG))
    return _ok(request, _json(document.to_json()))


# --- broker -> client calls ---------------------------------------------------------------------
async def _call_consumer(ctx, request, code: int, group: str, client_id: str | None):
    client = ctx.metadata.consumers.find_consumer_channel(group, client_id or "")
    if client is None:
        return _error(request, f"The Consumer <{group}> <{client_id}> not online")
    if client.version < V3_1_8_SNAPSHOT:
        return _error(request, f"The Consumer <{client_id}> Version <{client.version}> too low "
                               "to finish, please upgrade it to V3_1_8_SNAPSHOT")
    forwarded = create_request(code, dict(request.ext_fields), request.body)
    try:
        answer = await ctx.metadata.client_calls.call_client(client.channel, forwarded)
    except TimeoutError as error:
        return _error(request, f"consumer <{group}> <{client_id}> Timeout: {error!r}",
                      ResponseCode.CONSUME_MSG_TIMEOUT)
    except (ConnectionError, OSError, RuntimeError) as error:
        return _error(request, f"invoke consumer <{group}> <{client_id}> Exception: {error!r}")
    # The client's answer goes back under the admin request's opaque.
    return create_response(request, answer.code, answer.remark, dict(answer.ext_fields),
                           answer.body)


async def handle_get_consumer_running_info(ctx: MetadataContext, channel: ClientChannel,
                                           request: RemotingCommand) -> RemotingCommand | None:
    """GET_CONSUMER_RUNNING_INFO (307): ask the client; its ConsumerRunningInfo comes back."""
    header = parse_request_header(request.code, request.ext_fields)
    return await _call_consumer(ctx, request, RequestCode.GET_CONSUMER_RUNNING_INFO,
                                header.consumer_group, header.client_id)


def _message_record(ctx, message_id: str | None) -> bytes | None:
    try:
        _, _, physical_offset = decode_offset_message_id(message_id or "")
    except ValueError:
        return None   # Java also forwards the request unchanged when the id does not decode
    selected = ctx.store.look_message_by_offset(physical_offset)
    if selected is None:
        return None
    with selected:
        return bytes(selected.buffer)


async def handle_consume_message_directly(ctx: MetadataContext, channel: ClientChannel,
                                          request: RemotingCommand) -> RemotingCommand | None:
    """CONSUME_MESSAGE_DIRECTLY (309): send the stored message (by offset msgId) to the client
    to consume; its ConsumeMessageDirectlyResult comes back."""
    header = parse_request_header(request.code, request.ext_fields)
    request.ext_fields["brokerName"] = ctx.config.broker.broker_name
    record = _message_record(ctx, header.msg_id)
    if record is not None:
        request.body = record
    return await _call_consumer(ctx, request, RequestCode.CONSUME_MESSAGE_DIRECTLY,
                                header.consumer_group, header.client_id)


# --- offset reset and consumer status (mqadmin resetOffsetByTime, getConsumerStatus) -------
def _reset_target(ctx, header, queue_id: int) -> int:
    # 5.x explicit offset, else the offset by time (-1 = the end of the queue), never negative.
    if header.queue_id >= 0 and header.consumer_offset not in (None, -1):
        return header.consumer_offset
    if header.timestamp == -1:
        return max(ctx.store.get_max_offset_in_queue(header.topic, queue_id), 0)
    return max(ctx.store.get_offset_in_queue_by_time(header.topic, queue_id, header.timestamp), 0)


def _check_explicit_offset(ctx, header) -> str | None:
    if header.queue_id < 0 or header.consumer_offset in (None, -1):
        return None
    min_offset = ctx.store.get_min_offset_in_queue(header.topic, header.queue_id)
    max_offset = ctx.store.get_max_offset_in_queue(header.topic, header.queue_id)
    if min_offset >= 0 and header.consumer_offset < min_offset \
            or header.consumer_offset > max_offset:
        return (f"Target offset {header.consumer_offset} not in consume queue range "
                f"[{min_offset}-{max_offset}]")
    return None


def reset_offset_table(ctx, header, topic_config) -> dict[int, int] | str:
    """{queue_id: new consumer offset} of an INVOKE_BROKER_TO_RESET_OFFSET, or an error remark.

    Like Java's Broker2Client.resetOffset: without ``isForce`` a queue only moves backwards
    (a committed offset below the target stays). A queue the group never committed takes the
    target; a group with no committed offset on the topic is refused as Java refuses it.
    """
    committed = ctx.metadata.offsets.consumer_offsets(header.group, header.topic)
    if not committed:
        return f"THe consumer group <{header.group}> not exist"
    if header.queue_id >= 0:
        if header.queue_id >= topic_config.write_queue_nums:
            return f"queueId {header.queue_id} out of range of topic {header.topic}"
        queue_ids: Iterable[int] = [header.queue_id]
    else:
        queue_ids = range(topic_config.write_queue_nums)
    table = {}
    for queue_id in queue_ids:
        target = _reset_target(ctx, header, queue_id)
        current = committed.get(queue_id, -1)
        table[queue_id] = target if header.is_force or current < 0 or target < current \
            else current
    return table


def _old_client(clients) -> str | None:
    for client in clients:
        if client.version < V3_0_7_SNAPSHOT:
            return f"the client does not support this feature. version={client.version}"
    return None


async def handle_invoke_broker_to_reset_offset(ctx: MetadataContext, channel: ClientChannel,
                                               request: RemotingCommand) -> RemotingCommand | None:
    """INVOKE_BROKER_TO_RESET_OFFSET (222): move the group's consumer offsets of a topic to
    the offset of ``timestamp`` (ms; -1 = the end) or, 5.x, of ``queueId`` to ``offset``.

    The committed offsets are updated and RESET_CONSUMER_CLIENT_OFFSET (220, oneway) goes to
    every live member, which restarts those queues there. Answers the ResetOffsetBody;
    CONSUMER_NOT_ONLINE when the group has no live member (mqadmin then falls back to
    updating the offsets itself)."""
    if _is_slave(ctx):
        return _error(request, "Can not reset offset in slave broker")
    header = parse_request_header(request.code, request.ext_fields)
    topic_config = ctx.metadata.topic_config(header.topic)
    if topic_config is None:
        return _error(request, "[reset-offset] reset offset failed, no topic in this broker. "
                               f"topic={header.topic}")
    remark = _check_explicit_offset(ctx, header)
    table = remark or reset_offset_table(ctx, header, topic_config)
    if isinstance(table, str):
        return _error(request, table)
    info = ctx.metadata.consumers.consumer_group_info(header.group)
    clients = [] if info is None else list(info.channels.values())
    if not clients:
        return _error(request, "Consumer not online, so can not reset offset, Group: "
                               f"{header.group} Topic: {header.topic} Timestamp: "
                               f"{header.timestamp}", ResponseCode.CONSUMER_NOT_ONLINE)
    remark = _old_client(clients)
    if remark is not None:
        return _error(request, remark)
    for queue_id, consumer_offset in table.items():
        ctx.metadata.offsets.commit(header.group, header.topic, queue_id, consumer_offset,
                                    reset=True)
    body = b'{"offsetTable":' + encode_offset_map(
        (_message_queue(ctx, header.topic, queue_id), consumer_offset)
        for queue_id, consumer_offset in table.items()) + b"}"
    fields = {"topic": header.topic, "group": header.group,
              "timestamp": str(header.timestamp), "isForce": str(header.is_force).lower()}
    for client in clients:
        try:
            client.channel.send(create_request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                                               dict(fields), body, oneway=True))
        except (ConnectionError, OSError, RuntimeError) as error:
            log.warning("reset offset of %s to %s failed: %s", header.group, client.client_id,
                        error)
    log.info("reset offset of %s on %s by %s: %s", header.group, header.topic,
             channel.remote_address, table)
    return _ok(request, body)


def _status_table(answer) -> dict | None:
    # A client's GetConsumerStatusBody: its messageQueueTable, re-keyed by MessageQueue.
    if answer.code != ResponseCode.SUCCESS or not answer.body:
        return None
    try:
        document = fastjson.loads(answer.body)
        table = document.get("messageQueueTable") or {}
        return {bodies.message_queue_from_json(orjson.loads(key), "messageQueueTable key"):
                int(offset) for key, offset in table.items()}
    except (ValueError, TypeError, AttributeError, orjson.JSONDecodeError) as error:
        log.warning("bad GetConsumerStatusBody from a client: %s", error)
        return None


async def handle_invoke_broker_to_get_consumer_status(
        ctx: MetadataContext, channel: ClientChannel,
        request: RemotingCommand) -> RemotingCommand | None:
    """INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223): ask each live member of the group (or the
    one whose client id is ``clientAddr``) with GET_CONSUMER_STATUS_FROM_CLIENT (221) for its
    offsets of the topic; answers GetConsumerStatusBody ``consumerTable`` by client id."""
    header = parse_request_header(request.code, request.ext_fields)
    info = ctx.metadata.consumers.consumer_group_info(header.group)
    if info is None or not info.channels:
        return _error(request, "No Any Consumer online in the consumer group: "
                               f"[{header.group}]")
    clients = [client for client in info.channels.values()
               if not header.client_addr or header.client_addr == client.client_id]
    remark = _old_client(info.channels.values())
    if remark is not None:
        return _error(request, remark)
    parts = []
    for client in clients:
        forwarded = create_request(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT,
                                   {"topic": header.topic, "group": header.group})
        try:
            answer = await ctx.metadata.client_calls.call_client(client.channel, forwarded,
                                                    CONSUMER_STATUS_TIMEOUT_MS)
        except (TimeoutError, ConnectionError, OSError, RuntimeError) as error:
            log.warning("consumer status of %s failed: %s", client.client_id, error)
            continue
        table = _status_table(answer)
        if table is not None:
            parts.append(orjson.dumps(client.client_id) + b":"
                         + encode_offset_map(table.items()))
    body = b'{"consumerTable":{' + b",".join(parts) + b'},"messageQueueTable":{}}'
    return _ok(request, body)


_C = RequestCode
HANDLERS: dict[int, MetadataHandler] = {
    _C.UPDATE_AND_CREATE_TOPIC: handle_update_and_create_topic,
    _C.DELETE_TOPIC_IN_BROKER: handle_delete_topic_in_broker,
    _C.GET_ALL_TOPIC_CONFIG: handle_get_all_topic_config,
    _C.GET_TOPIC_CONFIG: handle_get_topic_config,
    _C.GET_SUBSCRIPTIONGROUP_CONFIG: handle_get_subscription_group_config,
    _C.GET_TOPIC_STATS_INFO: handle_get_topic_stats_info,
    _C.GET_CONSUME_STATS: handle_get_consume_stats,
    _C.GET_CONSUMER_CONNECTION_LIST: handle_get_consumer_connection_list,
    _C.GET_PRODUCER_CONNECTION_LIST: handle_get_producer_connection_list,
    _C.VIEW_BROKER_STATS_DATA: handle_view_broker_stats_data,
    _C.QUERY_TOPIC_CONSUME_BY_WHO: handle_query_topic_consume_by_who,
    _C.GET_BROKER_RUNTIME_INFO: handle_get_broker_runtime_info,
    _C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: handle_get_all_subscription_group_config,
    _C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: handle_update_and_create_subscription_group,
    _C.DELETE_SUBSCRIPTIONGROUP: handle_delete_subscription_group,
    _C.GET_ALL_CONSUMER_OFFSET: handle_get_all_consumer_offset,
    _C.GET_ALL_DELAY_OFFSET: handle_get_all_delay_offset,
    _C.GET_BROKER_CONFIG: handle_get_broker_config,
    _C.UPDATE_BROKER_CONFIG: handle_update_broker_config,
    _C.GET_CONSUMER_RUNNING_INFO: handle_get_consumer_running_info,
    _C.CONSUME_MESSAGE_DIRECTLY: handle_consume_message_directly,
    _C.INVOKE_BROKER_TO_RESET_OFFSET: handle_invoke_broker_to_reset_offset,
    _C.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: handle_invoke_broker_to_get_consumer_status,
}
del _C
