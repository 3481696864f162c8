# Admin handlers of topics: create or update, delete, configs, offsets per queue.
"""Topic requests of ``mqadmin`` (updateTopic, deleteTopic, topicList's configs,
topicStatus), run in the metadata service (protocol.md §2.10)."""
import logging

from pybroker.broker import attributes
from pybroker.broker.admin.answers import (SLAVE_REMARK, answer_error, answer_ok,
                                           encode_message_queue_map, is_slave, message_queue,
                                           sorted_json)
from pybroker.broker.context import MetadataContext, MetadataHandler
from pybroker.broker.interfaces import ClientChannel
from pybroker.protocol import constants
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand
from pybroker.protocol.headers import parse_request_header, validate_topic
from pybroker.store.config_docs import TopicConfig

__all__ = ["HANDLERS", "QUEUE_NUMS_MAX", "encode_topic_stats_table"]

log = logging.getLogger("pybroker.broker.admin")

QUEUE_NUMS_MAX = 65535          # bound on an admin-created topic's queue count


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


def _changeable_topic(ctx, request: RemotingCommand):
    """The header of a request that creates, changes or deletes a topic, or the refusal Java
    gives first: a slave, an invalid topic name, a system topic."""
    if is_slave(ctx):
        return answer_error(request, SLAVE_REMARK)
    header = parse_request_header(request.code, request.ext_fields)
    remark = validate_topic(header.topic)
    if remark is not None:
        return answer_error(request, remark)
    if ctx.metadata.topics.is_system_topic(header.topic):
        return answer_error(request, f"The topic[{header.topic}] is conflict with system topic.")
    return header


async def handle_update_and_create_topic(ctx: MetadataContext, channel: ClientChannel,
                                         request: RemotingCommand) -> RemotingCommand | None:
    """UPDATE_AND_CREATE_TOPIC (17): create or replace a topic (Java 4.9 refuses system
    topics, which include the cluster and broker names), with the 5.x ``attributes``
    modification applied to the topic's attributes (broker/attributes.py: refusals are
    SYSTEM_ERROR with Java's message, MIXED without enableMixedMessageType INVALID_PARAMETER).
    Persisted; the service re-registers with the name servers on the change."""
    header = _changeable_topic(ctx, request)
    if isinstance(header, RemotingCommand):
        return header
    topic_config = _topic_config_from_header(header)
    if isinstance(topic_config, str):
        return answer_error(request, topic_config, ResponseCode.INVALID_PARAMETER)
    try:
        modification = attributes.parse_modification(header.attributes)
        if _mixed_refused(ctx, modification):
            return answer_error(request, "MIXED message type is not supported.",
                                ResponseCode.INVALID_PARAMETER)
        log.info("updateAndCreateTopic called by %s: %s %s", channel.remote_address,
                 topic_config, header.attributes or "")
        ctx.metadata.topics.update_topic_config(topic_config, modification)
    except attributes.AttributeRefused as refused:
        return answer_error(request, refused.remark)
    return answer_ok(request)


async def handle_delete_topic_in_broker(ctx: MetadataContext, channel: ClientChannel,
                                        request: RemotingCommand) -> RemotingCommand | None:
    """DELETE_TOPIC_IN_BROKER (215): forget the topic, its consume queues and its consumer
    offsets (CommitLog data ages out normally). System topics are refused."""
    header = _changeable_topic(ctx, request)
    if isinstance(header, RemotingCommand):
        return header
    log.info("deleteTopic %s called by %s", header.topic, channel.remote_address)
    ctx.metadata.topics.delete_topic_config(header.topic)
    ctx.metadata.offsets.remove_offsets_of_topic(header.topic)
    # Wait until the data plane destroyed the queues (the request then behaves as in Java: a
    # re-created topic starts at queue offset 0); say so when it did not answer in time.
    if not await ctx.topic_deleter.delete_topics([header.topic]):
        return answer_error(request, f"topic {header.topic} deleted, but the data plane did not "
                            "delete its consume queues in time; their files stay until they expire")
    return answer_ok(request)


async def handle_get_all_topic_config(ctx: MetadataContext, channel: ClientChannel,
                                      request: RemotingCommand) -> RemotingCommand | None:
    """GET_ALL_TOPIC_CONFIG (21): the topics.json document (compact)."""
    return answer_ok(request, sorted_json(ctx.metadata.topics.to_json()))


async def handle_get_topic_config(ctx: MetadataContext, channel: ClientChannel,
                                  request: RemotingCommand) -> RemotingCommand | None:
    """GET_TOPIC_CONFIG (351, 5.x): one topic's config as Java's TopicConfigAndQueueMapping
    (no queue mapping: pybroker has no static topics, so ``lo`` changes nothing)."""
    header = parse_request_header(request.code, request.ext_fields)
    topic_config = ctx.metadata.topic_config(header.topic)
    if topic_config is None:
        return answer_error(request, f"No topic in this broker. topic: {header.topic}",
                            ResponseCode.TOPIC_NOT_EXIST)
    return answer_ok(request, sorted_json(topic_config.bean_json()))


def encode_topic_stats_table(entries) -> bytes:
    """TopicStatsTable: (MessageQueue, {"lastUpdateTimestamp","maxOffset","minOffset"})."""
    return b'{"offsetTable":' + encode_message_queue_map(entries) + b"}"


async def handle_get_topic_stats_info(ctx: MetadataContext, channel: ClientChannel,
                                      request: RemotingCommand) -> RemotingCommand | None:
    """GET_TOPIC_STATS_INFO (202): min/max queue offset and last store time per write queue."""
    header = parse_request_header(request.code, request.ext_fields)
    topic_config = ctx.metadata.topic_config(header.topic)
    if topic_config is None:
        return answer_error(request, f"topic[{header.topic}] not exist",
                            ResponseCode.TOPIC_NOT_EXIST)
    store = ctx.store
    entries = []
    for queue_id in range(topic_config.write_queue_nums):
        min_offset = max(store.get_min_offset_in_queue(header.topic, queue_id), 0)
        max_offset = max(store.get_max_offset_in_queue(header.topic, queue_id), 0)
        timestamp_ms = 0
        if max_offset > 0:
            timestamp_ms = store.get_message_store_timestamp(header.topic, queue_id,
                                                             max_offset - 1)
        entries.append((message_queue(ctx, header.topic, queue_id),
                        {"lastUpdateTimestamp": timestamp_ms, "maxOffset": max_offset,
                         "minOffset": min_offset}))
    return answer_ok(request, encode_topic_stats_table(entries))



HANDLERS: dict[int, MetadataHandler] = {
    RequestCode.UPDATE_AND_CREATE_TOPIC: handle_update_and_create_topic,
    RequestCode.DELETE_TOPIC_IN_BROKER: handle_delete_topic_in_broker,
    RequestCode.GET_ALL_TOPIC_CONFIG: handle_get_all_topic_config,
    RequestCode.GET_TOPIC_CONFIG: handle_get_topic_config,
    RequestCode.GET_TOPIC_STATS_INFO: handle_get_topic_stats_info,
}
