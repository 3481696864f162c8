# PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361): checks, store read, long polling, offset commit.
"""The pull handler (Java ``PullMessageProcessor``, protocol.md §2.3, §4.4, §8 items 8, 9, 22, 23).

PULL_MESSAGE (11) is answered as Java 4.9.8 answers it; LITE_PULL_MESSAGE (361), which only
5.x clients send, as Java 5.3.3: refused when litePullMessageEnable is off, INVALID_PARAMETER
for a queue id out of range, ``forbiddenType`` on NO_PERMISSION answers and the topic's and
group's sysFlag on the store answers.

Pre-checks run in Java's order with its codes and remarks: broker readable; subscription group
(auto-created by the metadata layer) exists and may consume; topic exists and is readable;
queueId below readQueueNums; subscription from the request (pull flag SUBSCRIPTION) or from
the consumer's heartbeat, not older than the request's subVersion; then its filter
(:mod:`pybroker.broker.message_filter`: tag codes, or an SQL92 selector evaluated per record
when enablePropertyFilter is on).

The store result becomes a response through :func:`pybroker.store.status.pull_response`; the
four header longs are always present (protocol.md §8 item 8). PULL_NOT_FOUND with the SUSPEND flag
on the first attempt parks the request in ``ctx.long_poll`` and returns None; the later answer goes
out through ``channel.send``; a re-run that only found messages its filter refuses parks again until
its deadline. A first attempt with the COMMIT_OFFSET flag on a master stores the piggy-backed
``commitOffset``.
"""
import functools

from pybroker.broker.context import BrokerContext, Handler
from pybroker.broker.interfaces import ClientChannel
from pybroker.broker.long_poll import HeldPull
from pybroker.broker.message_filter import FilterRefused, MessageFilter, message_filter
from pybroker.config import BrokerRole
from pybroker.protocol import constants
from pybroker.protocol.constants import ForbiddenType
from pybroker.protocol.bodies import SubscriptionData, build_subscription
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import MappedBody, RemotingCommand, create_response
from pybroker.protocol.headers import PULL_MESSAGE_RESPONSE, encode_header, parse_request_header
from pybroker.store.status import GetStatus, pull_response

__all__ = ["handle_pull_message", "process_pull", "request_subscription", "answer_fields",
           "HANDLERS"]

_PullFlag = constants.PullSysFlag
_MASTER_ID = 0


def _suggest_todo(request: RemotingCommand) -> str:
    """Java's FAQUrl.suggestTodo tail: 4.9's page for PULL_MESSAGE, 5.x's for LITE_PULL."""
    if request.code == RequestCode.LITE_PULL_MESSAGE:
        return constants.FAQ_SUGGEST_TODO_5X
    return constants.FAQ_SUGGEST_TODO


# Java MessageStoreConfig.offsetCheckInSlave default; not a pybroker setting.
_OFFSET_CHECK_IN_SLAVE = False
_FORBIDDEN_TYPE_KEY = PULL_MESSAGE_RESPONSE.field("forbidden_type").wire_name


def _refuse(request: RemotingCommand, code: int, remark: str,
            forbidden: ForbiddenType | None = None) -> RemotingCommand:
    # Java 4.9's pre-check answers carry an empty PullMessageResponseHeader: no ext fields;
    # 5.x (LITE_PULL_MESSAGE here) names what forbids a NO_PERMISSION answer.
    ext_fields = None
    if forbidden is not None and request.code == RequestCode.LITE_PULL_MESSAGE:
        # Java's header then holds only this field (the four longs stay null).
        ext_fields = {_FORBIDDEN_TYPE_KEY: str(int(forbidden))}
    return create_response(request, code, remark, ext_fields)


def _is_tag_type(expression_type: str | None) -> bool:
    return expression_type is None or expression_type == constants.EXPRESSION_TYPE_TAG


async def handle_pull_message(ctx: BrokerContext, channel: ClientChannel,
                              request: RemotingCommand) -> RemotingCommand | None:
    """Answer a PULL_MESSAGE / LITE_PULL_MESSAGE request, or hold it (returns None)."""
    return await process_pull(ctx, channel, request, allow_suspend=True)


async def process_pull(ctx: BrokerContext, channel: ClientChannel, request: RemotingCommand,
                       allow_suspend: bool,
                       held: HeldPull | None = None) -> RemotingCommand | None:
    """Run a pull. ``allow_suspend`` is True on the first attempt (it may be held and may
    commit the piggy-backed offset) and False when a held pull (``held``) runs again; the
    re-run reads from the held pull's offset, past what earlier re-runs found unmatched."""
    header = parse_request_header(request.code, request.ext_fields)
    checked = _check_group_and_topic(ctx, channel, request, header)
    if isinstance(checked, RemotingCommand):
        return checked
    group_config, topic_config = checked
    subscription = _resolve_subscription(ctx, request, header)
    if isinstance(subscription, RemotingCommand):
        return subscription
    response: RemotingCommand | None    # None: the pull is held
    try:
        pull_filter = message_filter(subscription, bool(header.sys_flag & _PullFlag.SUBSCRIPTION),
                                     ctx.config.broker.enable_property_filter)
    except FilterRefused as refusal:
        return _refuse(request, refusal.code, refusal.remark)
    queue_offset = header.queue_offset if held is None else held.queue_offset
    response, status, next_offset = _read_store(ctx, request, header, group_config, pull_filter,
                                                queue_offset, topic_config.topic_sys_flag)
    if (held is not None and status is GetStatus.NO_MATCHED_MESSAGE and ctx.long_poll is not None
            and ctx.long_poll.hold_again(held, next_offset)):
        return None
    if (response.code == ResponseCode.PULL_NOT_FOUND and allow_suspend
            and header.sys_flag & _PullFlag.SUSPEND
            and _suspend(ctx, channel, request, header, pull_filter)):
        response = None
    if (allow_suspend and header.sys_flag & _PullFlag.COMMIT_OFFSET
            and ctx.config.store.broker_role != BrokerRole.SLAVE):
        await ctx.metadata.commit_offset(header.consumer_group, header.topic, header.queue_id,
                                         header.commit_offset)
    return response


def _check_group_and_topic(ctx, channel, request: RemotingCommand, header):
    """The subscription group config, or the refusal answering the request."""
    broker = ctx.config.broker
    lite = request.code == RequestCode.LITE_PULL_MESSAGE
    if not broker.broker_permission & constants.Perm.READ:
        return _refuse(request, ResponseCode.NO_PERMISSION,
                       f"the broker[{broker.broker_ip1}] pulling message is forbidden",
                       ForbiddenType.BROKER_FORBIDDEN)
    if lite and not broker.lite_pull_message_enable:
        return _refuse(request, ResponseCode.NO_PERMISSION,
                       f"the broker[{broker.broker_ip1}] for lite pull consumer is forbidden",
                       ForbiddenType.BROKER_FORBIDDEN)
    group = header.consumer_group
    group_config = ctx.metadata.subscription_group(group)
    if group_config is None:
        return _refuse(request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                       f"subscription group [{group}] does not exist, "
                       f"{_suggest_todo(request)}")
    if not group_config.consume_enable:
        return _refuse(request, ResponseCode.NO_PERMISSION,
                       f"subscription group no permission, {group}",
                       ForbiddenType.GROUP_FORBIDDEN)
    topic = header.topic
    topic_config = ctx.metadata.topic_config(topic)
    if topic_config is None:
        return _refuse(request, ResponseCode.TOPIC_NOT_EXIST,
                       f"topic[{topic}] not exist, apply first please! "
                       f"{_suggest_todo(request)}")
    if not topic_config.perm & constants.Perm.READ:
        return _refuse(request, ResponseCode.NO_PERMISSION,
                       f"the topic[{topic}] pulling message is forbidden",
                       ForbiddenType.TOPIC_FORBIDDEN)
    queue_id = header.queue_id
    if queue_id < 0 or queue_id >= topic_config.read_queue_nums:
        # Java 5.x answers INVALID_PARAMETER, 4.9 SYSTEM_ERROR.
        return _refuse(request, ResponseCode.INVALID_PARAMETER if lite else
                       ResponseCode.SYSTEM_ERROR,
                       f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                       f"topicConfig.readQueueNums:[{topic_config.read_queue_nums}] "
                       f"consumer:[/{channel.remote_address}]")
    return group_config, topic_config


def _resolve_subscription(ctx, request: RemotingCommand, header):
    """The subscription to filter with, or the refusal answering the request."""
    topic = header.topic
    if header.sys_flag & _PullFlag.SUBSCRIPTION:
        try:
            subscription = request_subscription(topic, header.subscription,
                                                header.expression_type, header.sub_version)
        except ValueError:
            return _refuse(request, ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                           "parse the consumer's subscription failed")
    else:
        subscription = ctx.metadata.consumer_subscription(header.consumer_group, topic)
        if subscription is None:
            return _refuse(request, ResponseCode.SUBSCRIPTION_NOT_EXIST,
                           "the consumer's subscription not exist" + _suggest_todo(request))
        if subscription.sub_version < header.sub_version:
            return _refuse(request, ResponseCode.SUBSCRIPTION_NOT_LATEST,
                           "the consumer's subscription not latest")
    return subscription


def request_subscription(topic: str, expression: str | None, expression_type: str | None,
                         sub_version: int) -> SubscriptionData:
    """The subscription a pull with the SUBSCRIPTION flag carries; ValueError when its
    expression does not parse (the handler answers SUBSCRIPTION_PARSE_FAILED)."""
    if expression_type is not None and not _is_tag_type(expression_type) and expression:
        # A non-tag expression is kept as is (Java FilterAPI.build); message_filter compiles it.
        return SubscriptionData(topic=topic, sub_string=expression, sub_version=sub_version,
                                expression_type=expression_type)
    return build_subscription(topic, expression, expression_type, sub_version)


def answer_fields(request_code: int, suggest: int, next_offset: int, min_offset: int,
                  max_offset: int, topic_sys_flag: int, group_sys_flag: int) -> dict[str, str]:
    """The ext fields of a store answer (broker/pull_fast.py cuts the fast path's template
    from them): the four longs; 5.x answers (LITE_PULL_MESSAGE) name both sysFlags too."""
    fields = {"suggest_which_broker_id": suggest, "next_begin_offset": next_offset,
              "min_offset": min_offset, "max_offset": max_offset}
    if request_code == RequestCode.LITE_PULL_MESSAGE:
        fields.update(topic_sys_flag=topic_sys_flag, group_sys_flag=group_sys_flag)
    return encode_header(PULL_MESSAGE_RESPONSE, fields)


def _suggest_broker_id(ctx, group_config, suggest_pull_from_slave: bool) -> int:
    if not ctx.config.broker.slave_read_enable:
        return _MASTER_ID
    if suggest_pull_from_slave:
        return group_config.which_broker_when_consume_slowly
    return group_config.broker_id


def _read_store(ctx, request: RemotingCommand, header, group_config, pull_filter: MessageFilter,
                queue_offset: int, topic_sys_flag: int) -> tuple[RemotingCommand, GetStatus, int]:
    """Read the queue from ``queue_offset`` and build the response (body = the raw records as
    views of the mapped CommitLog, a :class:`MappedBody` that owns the read's holds: the
    connection writes them without a copy and releases them); also the store status and the
    next offset to read."""
    stats = ctx.stats
    started = stats.now_ns() if stats is not None else 0
    result = ctx.store.get_messages(header.consumer_group, header.topic, header.queue_id,
                                    queue_offset, header.max_msg_nums, header.max_msg_bytes,
                                    pull_filter.tag_codes, pull_filter.record_filter,
                                    residency=stats is not None)
    residency = None
    if stats is not None:
        residency = _count_get(stats, header, result, started)
        # Java's pullOffsetTable (rocketmq_consumer_inflight_messages): what this pull hands
        # out ends below next_begin_offset, whether or not the consumer commits it.
        stats.pull_offset(header.topic, header.consumer_group, header.queue_id,
                          result.next_begin_offset, started)
    body: MappedBody | None = None
    try:
        code, _ = pull_response(result.status, queue_offset)
        suggest = _suggest_broker_id(ctx, group_config, result.suggest_pull_from_slave)
        # Java 4.9.x also sets PULL_RETRY_IMMEDIATELY for a slave without slaveReadEnable, but
        # its status mapping then overwrites that code: a slave serves what it has, suggesting
        # the master. Only an offset it cannot vouch for is refused.
        if (code == ResponseCode.PULL_OFFSET_MOVED and not _OFFSET_CHECK_IN_SLAVE
                and result.status is not GetStatus.MESSAGE_DAMAGED
                and ctx.config.store.broker_role == BrokerRole.SLAVE):
            code, suggest = ResponseCode.PULL_RETRY_IMMEDIATELY, group_config.broker_id
        if code == ResponseCode.SUCCESS:
            body = MappedBody(result.buffers, result.release)
        ext_fields = answer_fields(request.code, suggest, result.next_begin_offset,
                                   result.min_offset, result.max_offset, topic_sys_flag,
                                   group_config.group_sys_flag)
        if residency is not None and stats is not None:
            # The records are not copied here: cold pages fault in when the socket write
            # reads them, after this figure (the mincore above still saw them cold).
            stats.pull_residency(*residency, result.suggest_pull_from_slave,
                                 stats.now_ns() - started)
        # Java puts the GetMessageStatus name in the remark of every store answer.
        remark = result.status.name
        if result.damaged_physical_offset is not None:
            if stats is not None:
                stats.damaged_record_read()
            if result.status is GetStatus.MESSAGE_DAMAGED:
                remark = (f"{remark}: the message at queue offset {result.damaged_queue_offset} "
                          f"(CommitLog offset {result.damaged_physical_offset}) is damaged and "
                          f"is not served; the queue continues at {result.next_begin_offset}")
        response = create_response(request, code, remark, ext_fields, body)
        return response, result.status, result.next_begin_offset
    finally:
        if body is None:
            result.release()


def _count_get(stats, header, result, started_ns: int) -> tuple[int, int] | None:
    """Count a store read; for a found one also its pages and cold pages (mincore before
    the records are copied, so the answer is the page cache as the pull found it)."""
    found = result.status is GetStatus.FOUND
    size_bytes = sum(len(buffer) for buffer in result.buffers) if found else 0
    stats.store_get(found, result.message_count, size_bytes, stats.now_ns() - started_ns)
    if not found:
        return None
    pages, cold_pages = result.page_residency()
    stats.group_get(header.topic, header.consumer_group, result.message_count, size_bytes,
                    cold_pages > 0)
    return pages, cold_pages


def _suspend(ctx, channel, request: RemotingCommand, header,
             pull_filter: MessageFilter) -> bool:
    """Hand the pull to the long-poll service; False when it cannot hold it."""
    if ctx.long_poll is None:
        return False
    broker = ctx.config.broker
    if broker.long_polling_enable:
        timeout_ms = min(header.suspend_timeout_millis, broker.long_polling_suspend_max_ms)
    else:
        timeout_ms = broker.short_polling_time_mills
    held = HeldPull(header.topic, header.queue_id, header.queue_offset, pull_filter.tag_codes,
                    timeout_ms, channel, _NO_RERUN)
    held.rerun = functools.partial(process_pull, ctx, channel, request, False, held)
    if ctx.stats is not None:
        held.answered = functools.partial(_held_answered, ctx.stats, request.code,
                                          ctx.stats.now_ns())
    return ctx.long_poll.hold(held)


def _held_answered(stats, request_code: int, held_ns: int, response: RemotingCommand) -> None:
    """A held pull's answer went out: rpc_latency with is_long_polling=true, timed from when
    it was held (Java times it from the request's arrival; the pull's first read before it
    was held, usually well under a millisecond, is not counted)."""
    stats.rpc(request_code, response.code, (stats.now_ns() - held_ns) // 1000,
              long_polling=True)


async def _NO_RERUN() -> None:
    return None


HANDLERS: dict[int, Handler] = {
    RequestCode.PULL_MESSAGE: handle_pull_message,
    RequestCode.LITE_PULL_MESSAGE: handle_pull_message,
}
