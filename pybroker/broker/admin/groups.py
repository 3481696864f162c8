# Admin handlers of subscription groups: configs, create or update, delete, who consumes a topic.
"""Subscription-group requests of ``mqadmin`` (updateSubGroup, deleteSubGroup, the groups'
configs, queryMsgById's consumers of a topic), run in the metadata service
(protocol.md §2.10)."""
import logging

from pybroker.broker import attributes
from pybroker.broker.admin.answers import (SLAVE_REMARK, answer_error, answer_ok, is_slave,
                                           sorted_json)
from pybroker.broker.context import MetadataContext, MetadataHandler
from pybroker.broker.interfaces import ClientChannel
from pybroker.protocol import fastjson
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand
from pybroker.protocol.headers import parse_request_header, validate_group
from pybroker.store.config_docs import SubscriptionGroupConfig

__all__ = ["HANDLERS"]

log = logging.getLogger("pybroker.broker.admin")


async def handle_get_all_subscription_group_config(
        ctx: MetadataContext, channel: ClientChannel,
        request: RemotingCommand) -> RemotingCommand | None:
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): the subscriptionGroup.json document."""
    return answer_ok(request, sorted_json(ctx.metadata.groups.to_json()))


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
        return answer_error(request, "No group in this broker",
                            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST)
    return answer_ok(request, sorted_json(group_config.bean_json()))


async def handle_update_and_create_subscription_group(
        ctx: MetadataContext, channel: ClientChannel,
        request: RemotingCommand) -> RemotingCommand | None:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200): body = a SubscriptionGroupConfig."""
    if is_slave(ctx):
        return answer_error(request, SLAVE_REMARK)
    if not request.body:
        return answer_error(request, "SubscriptionGroupConfig body is empty")
    try:
        group_config = SubscriptionGroupConfig.from_json(fastjson.loads(request.body))
    except (ValueError, TypeError) as error:
        return answer_error(request, f"bad SubscriptionGroupConfig body: {error}")
    remark = validate_group(group_config.group_name)
    if remark is not None:
        return answer_error(request, remark)
    log.info("updateAndCreateSubscriptionGroup called by %s: %s", channel.remote_address,
             group_config)
    # 5.x: the body's attributes are a modification (signed keys) of the group's attributes;
    # no attribute exists for groups, and Java answers the uncaught exception's text.
    modification, group_config.attributes = group_config.attributes, {}
    try:
        ctx.metadata.groups.update_subscription_group(group_config, modification)
    except attributes.AttributeRefused as refused:
        return answer_error(request, f"java.lang.RuntimeException: {refused.remark}")
    return answer_ok(request)


async def handle_delete_subscription_group(ctx: MetadataContext, channel: ClientChannel,
                                           request: RemotingCommand) -> RemotingCommand | None:
    """DELETE_SUBSCRIPTIONGROUP (207): forget the group (and its offsets when
    ``removeOffset`` (4.9) or ``cleanOffset`` (5.x) is true)."""
    if is_slave(ctx):
        return answer_error(request, SLAVE_REMARK)
    header = parse_request_header(request.code, request.ext_fields)
    ctx.metadata.groups.delete_subscription_group(header.group_name)
    if header.remove_offset or header.clean_offset:
        ctx.metadata.offsets.remove_offsets_of_group(header.group_name)
    return answer_ok(request)


async def handle_query_topic_consume_by_who(ctx: MetadataContext, channel: ClientChannel,
                                            request: RemotingCommand) -> RemotingCommand | None:
    """QUERY_TOPIC_CONSUME_BY_WHO (300): GroupList body ``{"groupList":[...]}`` of the groups
    with a live member subscribed to the topic or with committed offsets for it (mqadmin
    queryMsgById / messageTrackDetail ask this)."""
    header = parse_request_header(request.code, request.ext_fields)
    groups = (ctx.metadata.consumers.consumer_groups_of_topic(header.topic)
              | ctx.metadata.offsets.groups_of_topic(header.topic))
    return answer_ok(request, sorted_json({"groupList": sorted(groups)}))



HANDLERS: dict[int, MetadataHandler] = {
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: handle_get_all_subscription_group_config,
    RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG: handle_get_subscription_group_config,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: handle_update_and_create_subscription_group,
    RequestCode.DELETE_SUBSCRIPTIONGROUP: handle_delete_subscription_group,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: handle_query_topic_consume_by_who,
}
