# Request-reply (RocketMQ 4.6+): the replier's SEND_REPLY_MESSAGE pushed to the requester.
"""SEND_REPLY_MESSAGE (324) and SEND_REPLY_MESSAGE_V2 (325), Java's ReplyMessageProcessor.

A requester (``DefaultMQProducer.request``) sends an ordinary message carrying CORRELATION_ID
and REPLY_TO_CLIENT (its client id); the responder answers with a message to
``<cluster>_REPLY_TOPIC`` sent with these codes. The broker pushes that reply to the
requester's connection (PUSH_REPLY_MESSAGE_TO_CLIENT, 326), found among the heartbeat-registered
producers by client id, and stores it in the reply topic as well (Java's
storeReplyMessageEnable default). The answer is SUCCESS when the push succeeded (msgId "0" and
queue offset 0, replaced by the stored ones when the put succeeds), else SYSTEM_ERROR with
Java's remark. Runs in the metadata service: it owns the producer registry and the calls to
clients, and puts through the supervisor's own send ring.
"""
import logging

from pybroker import clock
from pybroker.broker import send
from pybroker.broker.context import MetadataContext, MetadataHandler
from pybroker.broker.interfaces import ClientChannel
from pybroker.protocol import headers
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_request, create_response
from pybroker.protocol.constants import Property
from pybroker.protocol.properties import encode_properties

__all__ = ["HANDLERS"]

log = logging.getLogger("pybroker.broker.reply")
_REPLY_TO = Property.MESSAGE_REPLY_TO_CLIENT
_PUSH_REPLY_TIME = "PUSH_REPLY_TIME"


def _java_address(address: str) -> str:
    # Java writes InetSocketAddress.toString(): "/ip:port"; the client parses it back.
    return "/" + address


async def _push(ctx: MetadataContext, channel: ClientChannel, header, properties: dict,
                queue_id: int, body) -> str | None:
    """Push the reply to the requester; None when it took it, else Java's remark."""
    sender = properties.get(_REPLY_TO)
    if sender is None:
        log.warning("%s is null, can not reply message", _REPLY_TO)
        return f"reply message properties[{_REPLY_TO}] is null"
    target = ctx.metadata.producers.find_channel(sender)
    if target is None:
        remark = f"push reply message fail, channel of <{sender}> not found."
        log.warning(remark)
        return remark
    pushed = dict(properties)
    pushed[_PUSH_REPLY_TIME] = str(clock.now_ms())
    store_ip, store_port = ctx.config.broker.broker_ip1, ctx.config.broker.listen_port
    values = {"producer_group": header.producer_group, "topic": header.topic,
              "default_topic": header.default_topic,
              "default_topic_queue_nums": header.default_topic_queue_nums,
              "queue_id": queue_id, "sys_flag": header.sys_flag,
              "born_timestamp": header.born_timestamp, "flag": header.flag,
              "properties": encode_properties(pushed),
              "reconsume_times": header.reconsume_times or 0, "unit_mode": header.unit_mode,
              "born_host": _java_address(channel.remote_address),
              "store_host": _java_address(f"{store_ip}:{store_port}"),
              "store_timestamp": clock.now_ms()}
    request = create_request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT,
                             headers.encode_header(headers.REPLY_MESSAGE_REQUEST, values),
                             bytes(body))
    try:
        answer = await ctx.metadata.client_calls.call_client(target, request)
    except (TimeoutError, ConnectionError, OSError, RuntimeError) as error:
        log.warning("push reply message to <%s> fail. %s", sender, error)
        return f"push reply message to {sender}fail."     # Java's text, space and all
    if answer.code != ResponseCode.SUCCESS:
        log.warning("push reply message to <%s> return fail, response remark: %s", sender,
                    answer.remark)
        return f"push reply message to {sender}fail."
    return None


async def handle_send_reply_message(ctx: MetadataContext, channel: ClientChannel,
                                    request: RemotingCommand) -> RemotingCommand | None:
    """SEND_REPLY_MESSAGE (324) / SEND_REPLY_MESSAGE_V2 (325): push, then store."""
    fields = send.send_response_fields(ctx)
    header = headers.parse_request_header(request.code, request.ext_fields)
    try:
        config = await send._topic_config(ctx, channel, header)
        queue_id = send._queue_id(header, config)
        body = send._body_of(ctx, request)
    except send.SendRefused as refusal:
        return create_response(request, refusal.code, refusal.remark, fields)
    properties = send.parse_properties(header.properties)
    remark = await _push(ctx, channel, header, properties, queue_id, body)
    code = ResponseCode.SYSTEM_ERROR if remark is not None else ResponseCode.SUCCESS
    if remark is None:
        fields.update(msgId="0", queueId=str(queue_id), queueOffset="0")
    # Stored with the properties the replier sent (Java stores the request's string).
    sys_flag = send._sys_flag(header, config)
    records = send.encode_message(header.topic, queue_id, header.flag, body,
                                  header.properties or "", sys_flag,
                                  header.born_timestamp,
                                  send.born_host_of(channel.remote_address), ctx.store_host,
                                  header.reconsume_times or 0)
    result = await send.timed_put(ctx, records, header.topic, queue_id, 1, sys_flag, True)
    if result.status.stored:
        fields.update(msgId=result.message_id, queueId=str(queue_id),
                      queueOffset=str(result.queue_offset))
    else:
        log.warning("process reply message, store put failed: %s", result.status)
    return create_response(request, code, remark, fields)


HANDLERS: dict[int, MetadataHandler] = {
    RequestCode.SEND_REPLY_MESSAGE: handle_send_reply_message,
    RequestCode.SEND_REPLY_MESSAGE_V2: handle_send_reply_message,
}
