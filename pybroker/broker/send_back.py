# CONSUMER_SEND_MSG_BACK (36): a consumer returns a message for retry or dead-lettering.
"""The send-back handler (protocol.md §2.7, §5.2; Java 4.9 ``consumerSendMsgBack``).

Steps in Java's order: group config (SUBSCRIPTION_GROUP_NOT_EXIST), broker write permission
(NO_PERMISSION), ``retryQueueNums <= 0`` (SUCCESS, dropped), retry topic ``%RETRY%<group>``
created if needed, the original record loaded by its physical offset (SYSTEM_ERROR when it is not
there), then either the DLQ ``%DLQ%<group>`` (reconsume times at the maximum, or delayLevel < 0)
or the retry topic with delay level ``3 + reconsumeTimes`` when the header says 0. The new record
(:func:`pybroker.broker.reput.reput_message`) keeps body, flag, sysFlag, born host/time and store
host; reconsume times + 1; ``RETRY_TOPIC``, ``ORIGIN_MESSAGE_ID``, ``WAIT=false`` and ``DELAY``
set as Java sets them; a retry goes via the schedule topic (REAL_TOPIC/REAL_QID added).
"""
import random

from pybroker.broker.context import BrokerContext, Handler
from pybroker.broker.interfaces import ClientChannel
from pybroker.protocol.command import RemotingCommand
from pybroker._fast import record as record_codec
from pybroker.broker import send
from pybroker.broker.reput import reput_message
from pybroker.protocol import headers
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_response
from pybroker.protocol.constants import (DLQ_GROUP_TOPIC_PREFIX, DLQ_QUEUE_NUMS_PER_GROUP,
                                         FAQ_SUGGEST_TODO, RETRY_GROUP_TOPIC_PREFIX, MQVersion,
                                         Perm, Property, TopicSysFlag)
from pybroker.protocol.message_id import offset_message_id
from pybroker.protocol.properties import decode_properties
from pybroker.store.status import PutStatus

_random = random.Random()


async def _retry_topic(ctx, header, group_config):
    """The retry topic's config (created RW when absent); SendRefused when unusable."""
    retry_topic = RETRY_GROUP_TOPIC_PREFIX + header.group
    topic_sys_flag = int(TopicSysFlag.UNIT_SUB) if header.unit_mode else 0
    config = await send.send_back_topic(ctx, retry_topic, group_config.retry_queue_nums,
                                        topic_sys_flag)
    if config is None:
        raise send.SendRefused(ResponseCode.SYSTEM_ERROR, f"topic[{retry_topic}] not exist")
    if not config.perm & Perm.WRITE:
        raise send.SendRefused(ResponseCode.NO_PERMISSION,
                               f"the topic[{retry_topic}] sending message is forbidden")
    return retry_topic


def _check_request(ctx, header):
    """Group name, group config and broker permission; returns the group config or None when
    the group has no retry queues (answered SUCCESS, message dropped)."""
    remark = headers.validate_group(header.group)
    if remark is not None:
        raise send.SendRefused(ResponseCode.SYSTEM_ERROR, remark)
    group_config = ctx.metadata.subscription_group(header.group)
    if group_config is None:
        raise send.SendRefused(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                               f"subscription group not exist, {header.group} "
                               f"{FAQ_SUGGEST_TODO}")
    broker = ctx.config.broker
    if not broker.broker_permission & Perm.WRITE:
        raise send.SendRefused(ResponseCode.NO_PERMISSION,
                               f"the broker[{broker.broker_ip1}] sending message is forbidden")
    if group_config.retry_queue_nums <= 0:
        return None
    return group_config


def _load_original(ctx, physical_offset: int):
    """(SelectResult, decoded record) at ``physical_offset``; the caller releases the result."""
    selected = ctx.store.look_message_by_offset(physical_offset) if physical_offset >= 0 else None
    if selected is None:
        raise send.SendRefused(ResponseCode.SYSTEM_ERROR,
                               f"look message by offset failed, {physical_offset}")
    decoded = record_codec.decode(selected.buffer, 0)
    if decoded.physical_offset != physical_offset:
        selected.release()
        raise send.SendRefused(ResponseCode.SYSTEM_ERROR,
                               f"look message by offset failed, {physical_offset}")
    return selected, decoded


def _destination(request, header, group_config, decoded, retry_topic: str,
                 properties: dict[str, str]) -> tuple[str, int, bool]:
    """(topic, queue id, to DLQ) by the rules of protocol.md §5.2 step 6; sets the DELAY property.

    Java writes the level with setDelayTimeLevel, so a DLQ message carries ``DELAY=0`` and a
    retry one ``DELAY=<level>`` (which the put then turns into a schedule redirect).
    """
    max_reconsume_times = group_config.retry_max_times
    if request.version >= MQVersion.V3_4_9 and header.max_reconsume_times is not None:
        max_reconsume_times = header.max_reconsume_times
    if decoded.reconsume_times >= max_reconsume_times or header.delay_level < 0:
        properties[Property.DELAY_TIME_LEVEL] = "0"
        dlq_topic = DLQ_GROUP_TOPIC_PREFIX + header.group
        return dlq_topic, _random.randrange(DLQ_QUEUE_NUMS_PER_GROUP), True
    delay_level = header.delay_level or 3 + decoded.reconsume_times
    properties[Property.DELAY_TIME_LEVEL] = str(delay_level)
    return retry_topic, _random.randrange(group_config.retry_queue_nums), False


def _returned_properties(decoded) -> dict[str, str]:
    """The returned message's properties as Java 4.9's consumerSendMsgBack sets them before
    the destination: RETRY_TOPIC kept or set to the original topic, ``WAIT=false`` (written,
    not removed), ORIGIN_MESSAGE_ID kept or set to the record's offset message id."""
    properties = decode_properties(decoded.properties)
    properties.setdefault(Property.RETRY_TOPIC, decoded.topic)
    properties[Property.WAIT_STORE_MSG_OK] = "false"
    if not properties.get(Property.ORIGIN_MESSAGE_ID, "").strip():
        properties[Property.ORIGIN_MESSAGE_ID] = offset_message_id(
            decoded.store_host, decoded.store_port, decoded.physical_offset)
    return properties


async def _send_back(ctx, request, header) -> int:
    """The whole send-back; returns the response code (remark via SendRefused)."""
    group_config = _check_request(ctx, header)
    if group_config is None:
        return ResponseCode.SUCCESS
    retry_topic = await _retry_topic(ctx, header, group_config)
    selected, decoded = _load_original(ctx, header.physical_offset)
    try:
        properties = _returned_properties(decoded)
        # SNDBCK_PUT_NUMS is counted under the topic the message was first sent to.
        back_topic = properties[Property.RETRY_TOPIC]
        topic, queue_id, to_dlq = _destination(request, header, group_config, decoded,
                                               retry_topic, properties)
        if to_dlq and await send.send_back_topic(ctx, topic, DLQ_QUEUE_NUMS_PER_GROUP,
                                                 0) is None:
            raise send.SendRefused(ResponseCode.SYSTEM_ERROR, f"topic[{topic}] not exist")
        # The map the put sees is the stored one: a retry's DELAY redirects it to the
        # schedule topic with REAL_TOPIC/REAL_QID, a DLQ's DELAY=0 does not.
        reput = reput_message(decoded, topic, queue_id, properties, redirect=properties,
                              levels_count=len(ctx.config.derived.delay_levels_ms),
                              timer=send.timer_rules(ctx), now_ms=ctx.now_ms(),
                              reconsume_times=decoded.reconsume_times + 1)
    finally:
        del decoded
        selected.release()
    result = await send.timed_put(ctx, reput.records, reput.topic, reput.queue_id, 1,
                                  reput.sys_flag, False)
    if result.status is not PutStatus.PUT_OK:
        # Java (4.9 and 5.x): any put that is not PUT_OK is SYSTEM_ERROR named by its status.
        raise send.SendRefused(ResponseCode.SYSTEM_ERROR, result.status.name)
    if ctx.stats is not None:
        ctx.stats.send_back(back_topic, header.group)
        if to_dlq:        # Java counts it under the request's originTopic
            ctx.stats.send_to_dlq(header.origin_topic or back_topic, header.group)
    return ResponseCode.SUCCESS


async def handle_consumer_send_msg_back(ctx: BrokerContext, channel: ClientChannel,
                                        request: RemotingCommand) -> RemotingCommand | None:
    """CONSUMER_SEND_MSG_BACK (36): SUCCESS, or an error code with Java's remark.

    The header's ``offset`` is the CommitLog physical offset (bytes) of the returned message.
    """
    header = headers.parse_request_header(request.code, request.ext_fields)
    try:
        code = await _send_back(ctx, request, header)
        remark = None
    except send.SendRefused as refusal:
        code, remark = refusal.code, refusal.remark
    if request.is_oneway:
        return None
    return create_response(request, code, remark)


HANDLERS: dict[int, Handler] = {RequestCode.CONSUMER_SEND_MSG_BACK: handle_consumer_send_msg_back}
