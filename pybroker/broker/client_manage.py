# Client registration handlers: HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP.
"""Handlers of the client-registration requests (protocol.md §2.5), run in the metadata service.

Registration state lives in :class:`pybroker.broker.metadata.MetadataState`; it also sends
NOTIFY_CONSUMER_IDS_CHANGED (40, oneway, header ``consumerGroup``) through each member's
``Channel.send`` when a group's membership or subscriptions change.
"""
import logging

from pybroker.broker.context import MetadataContext, MetadataHandler
from pybroker.broker.interfaces import ClientChannel
from pybroker.broker.managers.client_channel import make_channel_info
from pybroker.protocol import bodies, constants
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response
from pybroker.protocol.headers import parse_request_header

__all__ = ["HANDLERS", "handle_heartbeat", "handle_unregister_client",
           "handle_get_consumer_list_by_group", "IS_SUPPORT_HEART_BEAT_V2", "IS_SUB_CHANGE"]

log = logging.getLogger(__name__)

# 5.x heartbeat response ext keys (MixAll): a 5.x client then sends fingerprinted heartbeats
# that may leave out unchanged subscriptions.
IS_SUPPORT_HEART_BEAT_V2 = "IS_SUPPORT_HEART_BEAT_V2"
IS_SUB_CHANGE = "IS_SUB_CHANGE"
NO_CONSUMER_REMARK = "no consumer for this group"    # GET_CONSUMER_LIST_BY_GROUP: none left


def _java_bool(value: bool) -> str:
    return "true" if value else "false"


async def handle_heartbeat(ctx: MetadataContext, channel: ClientChannel,
                           request: RemotingCommand) -> RemotingCommand:
    """HEART_BEAT (34): register the client's consumer and producer groups.

    For each consumer group with a subscription-group config (auto-created by default) the
    retry topic ``%RETRY%<group>`` is created with the group's retryQueueNums. A 5.x
    heartbeat with a non-zero fingerprint and ``withoutSub`` keeps the registered
    subscriptions. The response (version >= 401, from create_response) carries the 5.x ext
    fields ``IS_SUPPORT_HEART_BEAT_V2`` and ``IS_SUB_CHANGE``.
    """
    try:
        heartbeat = bodies.decode_heartbeat(request.body if request.body is not None else b"")
    except ValueError as error:
        return create_response(request, ResponseCode.SYSTEM_ERROR, str(error))
    metadata = ctx.metadata
    fingerprint = heartbeat.heartbeat_fingerprint or 0
    client = make_channel_info(channel, heartbeat.client_id, ctx.now_ms())
    subscription_changed = False
    for consumer_data in heartbeat.consumer_datas:
        group = consumer_data.group_name
        previous = metadata.consumers.heartbeat_fingerprints.get(group)
        if fingerprint != 0 and previous is not None and previous != fingerprint:
            subscription_changed = True
        if fingerprint != 0 and heartbeat.without_sub and previous is None:
            # Unlike Java: a group this broker has no subscriptions for (it restarted) asks
            # the client for a full heartbeat instead of staying without subscriptions.
            subscription_changed = True
        metadata.consumers.heartbeat_fingerprints[group] = fingerprint
        _register_consumer(ctx, client, consumer_data,
                           without_sub=fingerprint != 0 and bool(heartbeat.without_sub))
    for group in heartbeat.producer_groups:
        metadata.producers.register_producer(group, client)
    # A V1 heartbeat always carries subscriptions, so Java answers IS_SUB_CHANGE=true.
    sub_change = subscription_changed if fingerprint != 0 else True
    return create_response(request, ResponseCode.SUCCESS, ext_fields={
        IS_SUPPORT_HEART_BEAT_V2: "true", IS_SUB_CHANGE: _java_bool(sub_change)})


def _register_consumer(ctx, client, consumer_data: bodies.ConsumerData,
                       without_sub: bool) -> None:
    metadata = ctx.metadata
    group = consumer_data.group_name
    group_config = metadata.subscription_group(group)
    notify_enabled = True
    if group_config is not None:
        notify_enabled = group_config.notify_consumer_ids_changed_enable
        retry_topic = constants.RETRY_GROUP_TOPIC_PREFIX + group
        # Unit-mode consumers get a UNIT_SUB retry topic (TopicSysFlag.buildSysFlag).
        topic_sys_flag = int(constants.TopicSysFlag.UNIT_SUB) if consumer_data.unit_mode else 0
        metadata.topics.create_topic_for_send_back(retry_topic, group_config.retry_queue_nums,
                                                   int(constants.PERM_READ_WRITE),
                                                   topic_sys_flag)
    subscriptions = None if without_sub else consumer_data.subscriptions
    changed = metadata.consumers.register_consumer(
        group, client, consumer_data.consume_type, consumer_data.message_model,
        consumer_data.consume_from_where, subscriptions, notify_enabled)
    if changed:
        log.info("registerConsumer info changed %s %s", group, client.channel.remote_address)


async def handle_unregister_client(ctx: MetadataContext, channel: ClientChannel,
                                   request: RemotingCommand) -> RemotingCommand:
    """UNREGISTER_CLIENT (35): drop this channel from the named producer/consumer group."""
    header = parse_request_header(request.code, request.ext_fields)
    metadata = ctx.metadata
    if header.producer_group is not None:
        metadata.producers.unregister_producer(header.producer_group, channel.channel_id)
    if header.consumer_group is not None:
        group_config = metadata.subscription_group(header.consumer_group)
        notify_enabled = (group_config.notify_consumer_ids_changed_enable
                          if group_config is not None else True)
        metadata.consumers.unregister_consumer(header.consumer_group, channel.channel_id,
                                               notify_enabled)
    return create_response(request, ResponseCode.SUCCESS)


async def handle_get_consumer_list_by_group(ctx: MetadataContext, channel: ClientChannel,
                                            request: RemotingCommand) -> RemotingCommand:
    """GET_CONSUMER_LIST_BY_GROUP (38): client ids of the group's live consumers;
    SYSTEM_ERROR when it has none."""
    header = parse_request_header(request.code, request.ext_fields)
    client_ids = ctx.metadata.consumers.consumer_client_ids(header.consumer_group)
    if not client_ids:
        log.warning("getConsumerGroupInfo failed, %s %s", header.consumer_group,
                    channel.remote_address)
        return create_response(request, ResponseCode.SYSTEM_ERROR,
                               f"{NO_CONSUMER_REMARK}, {header.consumer_group}")
    return create_response(request, ResponseCode.SUCCESS,
                           body=bodies.encode_consumer_list(client_ids))


HANDLERS: dict[int, MetadataHandler] = {
    RequestCode.HEART_BEAT: handle_heartbeat,
    RequestCode.UNREGISTER_CLIENT: handle_unregister_client,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: handle_get_consumer_list_by_group,
}
