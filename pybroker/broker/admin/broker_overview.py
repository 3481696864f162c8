# Whole-broker admin views: every group's consume stats (317), the system topic list (305).
"""Handlers of two admin requests that look at the whole broker, run in the metadata service.

GET_BROKER_CONSUME_STATS (317, mqadmin brokerConsumeStats): a ConsumeStatsList - for every
subscription group, one ConsumeStats per topic it committed offsets for (queues, broker and
consumer offsets, the store time of the last consumed message, the group's consume TPS), the
broker's address and the total lag. As Java: ``isOrder`` keeps only order topics, and a topic
the group's live members do not subscribe to is left out. The walk is over groups and their
committed offsets, as Java's (an admin request, never a scrape).

GET_SYSTEM_TOPIC_LIST_FROM_BROKER (305, used by mqadmin exportMetadata): the broker's system
topics (TopicValidator's and the ones it creates at start: its cluster and broker names).
"""
import orjson

from pybroker.broker.admin.offsets import (consume_stats_entries, encode_consume_stats,
                                           pulled_offsets)
from pybroker.broker.context import MetadataContext, MetadataHandler
from pybroker.broker.interfaces import ClientChannel
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response
from pybroker.protocol.constants import SYSTEM_TOPICS
from pybroker.protocol.headers import parse_request_header

__all__ = ["HANDLERS"]


def _group_stats(ctx: MetadataContext, group: str, order_only: bool) -> tuple[list[bytes], int]:
    """(one encoded ConsumeStats per topic of ``group``, the group's total lag)."""
    documents, lag = [], 0
    service, pulled = ctx.stats_service, pulled_offsets(ctx)
    for topic in sorted(ctx.metadata.offsets.topics_of_group(group)):
        topic_config = ctx.metadata.topic_config(topic)
        if topic_config is None or (order_only and not topic_config.order):
            continue
        entries = consume_stats_entries(ctx, group, topic, pulled)
        if not entries:
            continue
        tps = service.group_get_tps(group, topic) if service is not None else 0.0
        documents.append(encode_consume_stats(entries, tps))
        lag += sum(stats["brokerOffset"] - stats["consumerOffset"] for _, stats in entries)
    return documents, lag


async def handle_get_broker_consume_stats(ctx: MetadataContext, channel: ClientChannel,
                                          request: RemotingCommand) -> RemotingCommand | None:
    """GET_BROKER_CONSUME_STATS (317): ConsumeStatsList of every subscription group."""
    header = parse_request_header(request.code, request.ext_fields)
    parts, total = [], 0
    for group in sorted(ctx.metadata.groups.subscription_groups()):
        documents, lag = _group_stats(ctx, group, bool(header.is_order))
        total += lag
        parts.append(b"{" + orjson.dumps(group) + b":[" + b",".join(documents) + b"]}")
    body = (b'{"brokerAddr":' + orjson.dumps(ctx.config.derived.broker_addr)
            + b',"consumeStatsList":[' + b",".join(parts) + b'],"totalDiff":'
            + str(total).encode() + b"}")
    return create_response(request, ResponseCode.SUCCESS, body=body)


async def handle_get_system_topic_list(ctx: MetadataContext, channel: ClientChannel,
                                       request: RemotingCommand) -> RemotingCommand | None:
    """GET_SYSTEM_TOPIC_LIST_FROM_BROKER (305): TopicList of the system topics."""
    topics = set(SYSTEM_TOPICS) | {name for name in ctx.metadata.topic_configs()
                                   if ctx.metadata.topics.is_system_topic(name)}
    return create_response(request, ResponseCode.SUCCESS,
                           body=orjson.dumps({"topicList": sorted(topics)}))


HANDLERS: dict[int, MetadataHandler] = {
    RequestCode.GET_BROKER_CONSUME_STATS: handle_get_broker_consume_stats,
    RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: handle_get_system_topic_list,
}
