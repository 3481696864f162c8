# Admin handlers of offsets: consume stats, the offset documents, reset, the consumers' own.
"""Offset requests of ``mqadmin`` (consumerProgress, the consumerOffset.json and
delayOffset.json documents, resetOffsetByTime, getConsumerStatus), run in the metadata
service (protocol.md §2.10, §2.12).

INVOKE_BROKER_TO_RESET_OFFSET (222) commits the new offsets and tells every live member
(RESET_CONSUMER_CLIENT_OFFSET, oneway); INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223) asks each
member with GET_CONSUMER_STATUS_FROM_CLIENT (221).
"""
import logging
from collections.abc import Iterable

import orjson

from pybroker.broker.admin.answers import (answer_error, answer_ok, encode_message_queue_map,
                                           encode_offset_map, is_slave, message_queue,
                                           sorted_json)
from pybroker.broker.context import MetadataContext, MetadataHandler
from pybroker.broker.interfaces import ClientChannel
from pybroker.protocol import bodies, fastjson
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_request
from pybroker.protocol.headers import parse_request_header
from pybroker.store import config_docs, paths

__all__ = ["HANDLERS", "encode_consume_stats", "reset_offset_table", "consume_stats_entries",
           "pulled_offsets"]

log = logging.getLogger("pybroker.broker.admin")

V3_0_7_SNAPSHOT = 28            # MQVersion ordinal: oldest client that answers 220/221
CONSUMER_STATUS_TIMEOUT_MS = 5000   # Java waits 5 s for each client's 221 answer


def encode_consume_stats(entries, consume_tps: float) -> bytes:
    """ConsumeStats: (MessageQueue, {"brokerOffset","consumerOffset","pullOffset",
    "lastTimestamp"})."""
    return (b'{"consumeTps":' + orjson.dumps(float(consume_tps)) + b',"offsetTable":'
            + encode_message_queue_map(entries) + b"}")


def pulled_offsets(ctx) -> dict:
    """The remoting workers' newest pull offsets ((topic@group, queue id) -> next offset)
    from the last statistics snapshot; empty without one."""
    service = ctx.stats_service
    return service.last.pull_offsets() if service is not None and service.last else {}


def consume_stats_entries(ctx, group: str, topic: str, pulled: dict) -> list:
    """(MessageQueue, OffsetWrapper fields) of ``group`` on ``topic``'s queues; empty for an
    unknown topic or one the group's live members do not subscribe to. pullOffset is Java's
    (the newest pull's next offset, at least the consumer offset; ``pulled``:
    :func:`pulled_offsets`); for a queue the group pops, the consumer offset plus its
    in-flight (popped, not acknowledged, not revived) messages, so that mqadmin's #Inflight
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
        entries.append((message_queue(ctx, topic, queue_id), stats))
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
    pulled = pulled_offsets(ctx)
    for topic in topics:
        topic_entries = consume_stats_entries(ctx, header.consumer_group, topic, pulled)
        entries += topic_entries
        if topic_entries and service is not None:
            consume_tps += service.group_get_tps(header.consumer_group, topic)
    return answer_ok(request, encode_consume_stats(entries, consume_tps))


async def handle_get_all_consumer_offset(ctx: MetadataContext, channel: ClientChannel,
                                         request: RemotingCommand) -> RemotingCommand | None:
    """GET_ALL_CONSUMER_OFFSET (43): the consumerOffset.json document (quoted queue-id keys,
    which fastjson reads as well as its own bare ones)."""
    return answer_ok(request, sorted_json(ctx.metadata.offsets.to_json()))


async def handle_get_all_delay_offset(ctx: MetadataContext, channel: ClientChannel,
                                      request: RemotingCommand) -> RemotingCommand | None:
    """GET_ALL_DELAY_OFFSET (45): the delayOffset.json document, the schedule service's live
    one when it runs (``metadata.delay_offsets()``), else the file."""
    document = ctx.metadata.delay_offsets()
    if document is None:
        root = ctx.config.store.store_path_root_dir
        document = config_docs.load_delay_offsets(
            paths.config_path(root, paths.DELAY_OFFSET_CONFIG))
    return answer_ok(request, sorted_json(document.to_json()))


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
    if is_slave(ctx):
        return answer_error(request, "Can not reset offset in slave broker")
    header = parse_request_header(request.code, request.ext_fields)
    topic_config = ctx.metadata.topic_config(header.topic)
    if topic_config is None:
        return answer_error(request, "[reset-offset] reset offset failed, no topic in this broker. "
                                     f"topic={header.topic}")
    remark = _check_explicit_offset(ctx, header)
    table = remark or reset_offset_table(ctx, header, topic_config)
    if isinstance(table, str):
        return answer_error(request, table)
    info = ctx.metadata.consumers.consumer_group_info(header.group)
    clients = [] if info is None else list(info.channels.values())
    if not clients:
        return answer_error(request, "Consumer not online, so can not reset offset, Group: "
                                     f"{header.group} Topic: {header.topic} Timestamp: "
                                     f"{header.timestamp}", ResponseCode.CONSUMER_NOT_ONLINE)
    remark = _old_client(clients)
    if remark is not None:
        return answer_error(request, remark)
    for queue_id, consumer_offset in table.items():
        ctx.metadata.offsets.commit(header.group, header.topic, queue_id, consumer_offset,
                                    reset=True)
    body = b'{"offsetTable":' + encode_offset_map(
        (message_queue(ctx, header.topic, queue_id), consumer_offset)
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
    return answer_ok(request, body)


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
        return answer_error(request, "No Any Consumer online in the consumer group: "
                                     f"[{header.group}]")
    clients = [client for client in info.channels.values()
               if not header.client_addr or header.client_addr == client.client_id]
    remark = _old_client(info.channels.values())
    if remark is not None:
        return answer_error(request, remark)
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
    return answer_ok(request, body)



HANDLERS: dict[int, MetadataHandler] = {
    RequestCode.GET_CONSUME_STATS: handle_get_consume_stats,
    RequestCode.GET_ALL_CONSUMER_OFFSET: handle_get_all_consumer_offset,
    RequestCode.GET_ALL_DELAY_OFFSET: handle_get_all_delay_offset,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: handle_invoke_broker_to_reset_offset,
    RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: handle_invoke_broker_to_get_consumer_status,
}
