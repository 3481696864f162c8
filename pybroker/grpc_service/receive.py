# ReceiveMessage: the proxy's ReceiveMessageActivity on this worker's own POP handler.
"""ReceiveMessage (server streaming) over the broker's POP_MESSAGE handler
(pybroker/broker/pop/pop_message.py), run in this worker as the Java 5.3.3 proxy runs it in
local mode: the same checks, the same long polling (the handler holds the request in the
worker's POP long polling until messages arrive or the poll time ends), the same check-point
before an answer. What the proxy adds, in its order:

* the client's settings (Telemetry) give FIFO (the group's consumeMessageOrderly: an order POP)
  and the delivery attempts allowed (the group's retryMaxTimes + 1);
* the polling time: the request's long_polling_timeout, else the call's time left minus half the
  client's request timeout, within grpcClientConsumerMin/MaxLongPollingTimeoutMillis and the
  call's deadline (ILLEGAL_POLLING_TIME when less than the minimum is left; BAD_REQUEST for a
  client older than 5.0.3);
* the invisible duration (minInvisibleTimeMillsForRecv..maxInvisibleTimeMills), or
  defaultInvisibleTimeMills for a receive that asks for auto-renew, whose messages the worker
  then keeps invisible until they are acked (grpc_service/renewal.py; enableProxyAutoRenew);
* the filter expression (ILLEGAL_FILTER_EXPRESSION), at most 32 messages, every queue of the
  topic (queue id -1), the retry topic by the broker's rules, initMode MAX;
* each message's receipt handle gets its CommitLog offset; a message whose tag the
  subscription does not hold is acked, one delivered as often as the group allows is sent to
  the DLQ, instead of being delivered (PopMessageResultFilterImpl).

The stream: a status (OK, MESSAGE_NOT_FOUND "no new message" / "no match message",
TOO_MANY_REQUESTS "polling full", or the refusal), the messages after an OK, and always a last
response with the delivery timestamp (ReceiveMessageResponseStreamWriter). Messages a client
stops reading are made visible again 1 s later (the writer's NACK).
"""
import asyncio
import itertools
import logging
import time

from google.protobuf import timestamp_pb2

from pybroker.broker.channel import Channel
from pybroker.grpc_service import checks, consumer, messages, route
from pybroker.grpc_service.status import (OK_STATUS, Code, GrpcRefused, proxy_exception,
                                          raise_for_remoting, status)
from pybroker.protocol import bodies, headers, pop
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import MappedBody, create_request
from pybroker.protocol.constants import (EXPRESSION_TYPE_SQL92, EXPRESSION_TYPE_TAG, Perm,
                                         PopConstants, Property)
from pybroker.protocol.properties import decode_properties
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb
from pybroker.tasks import start_task, within
from pybroker._fast import record as record_codec

__all__ = ["receive_message", "delivery_timestamp_response", "polling_time_ms", "nack"]

log = logging.getLogger("pybroker.grpc.receive")

POLLING_TIME_VERSION = "5.0.3"        # ILLEGAL_POLLING_TIME_INTRODUCED_CLIENT_VERSION
NACK_INVISIBLE_MS = 1000              # ReceiveMessageResponseStreamWriter.NACK_INVISIBLE_TIME
INIT_MODE_MAX = 1                     # ConsumeInitMode.MAX
HOLD_SLACK_MS = 3000                  # past the poll time, a held POP has surely answered
_calls = itertools.count(1)
# A receive from a client that sent no settings: the proxy fails on them (5.3.3 on Java 17).
NO_SETTINGS = ('Cannot invoke "apache.rocketmq.v2.Settings.getSubscription()" because '
               '"settings" is null. NullPointerException. org.apache.rocketmq.proxy.grpc.v2.'
               'consumer.ReceiveMessageActivity.receiveMessage(ReceiveMessageActivity.java:63)')


def delivery_timestamp_response() -> spb.ReceiveMessageResponse:
    """The stream's last response (the writer's onComplete)."""
    now = timestamp_pb2.Timestamp()
    now.FromMilliseconds(int(time.time() * 1000))
    return spb.ReceiveMessageResponse(delivery_timestamp=now)


def polling_time_ms(grpc_config, rctx, request, settings, remaining_ms: int | None) -> int:
    """How long the POP may be held (ms): the proxy's rules from the request, the client's
    request timeout and the call's time left (``remaining_ms``, None: no deadline)."""
    if request.HasField("long_polling_timeout"):
        polling_ms = request.long_polling_timeout.ToMilliseconds()
    elif remaining_ms is not None:
        polling_ms = remaining_ms - settings.request_timeout.ToMilliseconds() // 2
    else:
        polling_ms = grpc_config.grpc_client_consumer_max_long_polling_timeout_millis
    minimum = grpc_config.grpc_client_consumer_min_long_polling_timeout_millis
    polling_ms = min(max(polling_ms, minimum),
                     grpc_config.grpc_client_consumer_max_long_polling_timeout_millis)
    if remaining_ms is not None and polling_ms > remaining_ms:
        if remaining_ms < minimum:
            version = rctx.client_version
            code = Code.BAD_REQUEST if not version or POLLING_TIME_VERSION > version \
                else Code.ILLEGAL_POLLING_TIME
            raise GrpcRefused(code, "The deadline time remaining is not enough for polling, "
                              "please check network condition")
        polling_ms = remaining_ms
    return polling_ms


def _subscription(topic: str, expression: pb.FilterExpression):
    kind = EXPRESSION_TYPE_SQL92 if expression.type == pb.SQL else EXPRESSION_TYPE_TAG
    try:
        return bodies.build_subscription(topic, expression.expression, kind)
    except ValueError as error:
        raise GrpcRefused(Code.ILLEGAL_FILTER_EXPRESSION, str(error)) from None


def _check_readable(host, topic: str) -> None:
    topic_config = host.ctx.metadata.topic_config(topic)
    if topic_config is None:
        raise route.not_found(topic)
    if not route.topic_perm(host, topic_config) & Perm.READ or topic_config.read_queue_nums <= 0:
        raise proxy_exception(Code.FORBIDDEN, "no readable queue")


class _Receive:
    """One ReceiveMessage call: its POP and the messages it hands out."""

    def __init__(self, host, rctx, request: spb.ReceiveMessageRequest, settings: pb.Settings):
        self.host, self.rctx, self.request = host, rctx, request
        self.topic = request.message_queue.topic.name
        self.group = request.group.name
        self.fifo = settings.subscription.fifo
        self.max_attempts = settings.backoff_policy.max_attempts
        self.channel_id = f"{host.channel_id(rctx)}/receive-{next(_calls)}"
        self.answered: asyncio.Future = asyncio.get_running_loop().create_future()

    def _deliver(self, response) -> None:
        # The POP long polling's late answer (Channel.send).
        if not self.answered.done():
            self.answered.set_result(response)

    async def pop(self, subscription, invisible_ms: int, polling_ms: int):
        """The POP_MESSAGE answer, waited for while the handler holds it."""
        request = self.request
        fields = headers.encode_header(headers.POP_MESSAGE_REQUEST, {
            "consumer_group": self.group, "topic": self.topic, "queue_id": -1,
            "max_msg_nums": min(request.batch_size, PopConstants.MAX_MSG_NUMS),
            "invisible_time": invisible_ms, "poll_time": polling_ms,
            "born_time": int(time.time() * 1000), "init_mode": INIT_MODE_MAX,
            "exp_type": subscription.expression_type, "exp": subscription.sub_string,
            "order": self.fifo,
            "attempt_id": request.attempt_id if request.HasField("attempt_id") else None})
        host, rctx = self.host, self.rctx
        channel = Channel(self.channel_id, rctx.remote_address, rctx.language, rctx.version,
                          self._deliver)
        handler = host.local_handler(RequestCode.POP_MESSAGE)
        answer = await handler(host.ctx, channel, create_request(RequestCode.POP_MESSAGE, fields))
        if answer is not None:
            return answer
        try:
            return await within(asyncio.shield(self.answered), (polling_ms + HOLD_SLACK_MS) / 1000)
        except asyncio.TimeoutError:
            log.warning("a held POP of %s@%s did not answer in its poll time", self.topic,
                        self.group)
            return None
        finally:
            long_poll = host.ctx.pop.long_poll if host.ctx.pop is not None else None
            if long_poll is not None:
                long_poll.channel_closed(self.channel_id)

    def messages_of(self, answer, subscription) -> list[pb.Message]:
        """The answer's messages as the SDK gets them (handles, result filter applied)."""
        header = _AnswerHeader(headers.POP_MESSAGE_RESPONSE.parse(answer.ext_fields))
        body = answer.body
        try:
            records = _records(body)
            return [message for record in records
                    if (message := self._message(record, header, subscription)) is not None]
        finally:
            if isinstance(body, MappedBody):
                body.release()

    def _message(self, record, answer_header: "_AnswerHeader",
                 subscription) -> pb.Message | None:
        header = answer_header.header
        properties = decode_properties(record.properties)
        extra_info = properties.get(Property.POP_CK) or _extra_info(
            answer_header, record, self.host.ctx.config.broker.broker_name)
        handle = consumer.grpc_handle(extra_info, record.physical_offset)
        properties[Property.POP_CK] = handle
        properties.setdefault(Property.FIRST_POP_TIME, str(header.pop_time))
        reconsume_times = record.reconsume_times
        if self.fifo:
            reconsume_times = _order_count(answer_header, record) or reconsume_times
        tags = properties.get(Property.TAGS)
        if subscription.tags_set and tags not in subscription.tags_set:
            self._later(self._ack(handle), "acking a message of another tag")
            return None
        if reconsume_times >= self.max_attempts:
            self._later(self._forward(handle, properties, record), "sending a message to the DLQ")
            return None
        message = messages.from_record(record, properties)
        message.system_properties.delivery_attempt = reconsume_times + 1
        return message

    def _later(self, coroutine, name: str) -> None:
        start_task(coroutine, name, None, log)

    async def _ack(self, handle: str) -> None:
        await consumer.ack_one(self.host, self.rctx, consumer.decode_handle(handle), self.group,
                               self.topic)

    async def _forward(self, handle: str, properties: dict[str, str], record) -> None:
        message_id = properties.get(Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or \
            messages.from_record(record, properties).system_properties.message_id
        await consumer.forward_one(self.host, self.rctx, consumer.decode_handle(handle),
                                   message_id, self.group, self.topic)


async def nack(host, rctx, group: str, topic: str, unwritten: list[pb.Message]) -> None:
    """Make messages the client did not get visible again soon (the writer's NACK; a message
    kept for renewal is kept no longer): the grpcio stream's messages left unwritten, and those
    the C++ front reports it could not write (grpc_service/front.py)."""
    for message in unwritten:
        request = spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=topic),
            receipt_handle=message.system_properties.receipt_handle,
            message_id=message.system_properties.message_id)
        request.invisible_duration.FromMilliseconds(NACK_INVISIBLE_MS)
        try:
            await consumer.change_invisible_duration(host, rctx, request)
        except GrpcRefused as refused:
            log.debug("NACK of an unwritten message refused: %s", refused.message)


def _records(body) -> list:
    if body is None:
        return []
    if isinstance(body, MappedBody):
        return [record_codec.decode(view, 0) for view in body.views]
    data, position, found = memoryview(bytes(body)), 0, []
    while position < len(data):
        decoded = record_codec.decode(data, position)
        found.append(decoded)
        position += decoded.total_size
    return found


class _AnswerHeader:
    """A POP answer's header, with its offset and count infos parsed once per answer (at
    their first use), not once per message."""

    __slots__ = ("header", "_starts", "_counts")

    def __init__(self, header):
        self.header = header
        self._starts: dict[str, int] | None = None
        self._counts: dict[str, int] | None = None

    def starts(self) -> dict[str, int]:
        if self._starts is None:
            self._starts = pop.parse_start_offset_info(self.header.start_offset_info)
        return self._starts

    def order_counts(self) -> dict[str, int]:
        if self._counts is None:
            self._counts = pop.parse_order_count_info(self.header.order_count_info)
        return self._counts


def _extra_info(answer_header: _AnswerHeader, record, broker_name: str) -> str:
    """The POP_CK of a message the broker answered without one (MQClientAPIImpl's
    processPopResponse)."""
    header = answer_header.header
    start = answer_header.starts()[f"{pop.retry_flag(record.topic)}@{record.queue_id}"]
    return pop.build_extra_info(start, header.pop_time, header.invisible_time, header.revive_qid,
                                record.topic, broker_name, record.queue_id, record.queue_offset)


def _order_count(answer_header: _AnswerHeader, record) -> int | None:
    counts = answer_header.order_counts()
    flag = pop.retry_flag(record.topic)
    return counts.get(pop.queue_offset_key(flag, record.queue_id, record.queue_offset),
                      counts.get(f"{flag}@{record.queue_id}"))


def _remaining_ms(context) -> int | None:
    remaining = context.time_remaining()
    return None if remaining is None else int(remaining * 1000)


async def receive_message(host, rctx, request: spb.ReceiveMessageRequest, context):
    """ReceiveMessageActivity.receiveMessage: yields the stream's responses (a GrpcRefused
    raised before the first is the stream's status; the caller ends it)."""
    settings = host.settings.effective(rctx.client_id)
    if settings is None:
        raise GrpcRefused(Code.INTERNAL_SERVER_ERROR, NO_SETTINGS)
    grpc_config = host.ctx.config.grpc
    polling_ms = polling_time_ms(grpc_config, rctx, request, settings, _remaining_ms(context))
    topic, group = request.message_queue.topic.name, request.group.name
    checks.validate_topic(topic)
    checks.validate_group(group)
    if request.auto_renew and grpc_config.enable_proxy_auto_renew:
        invisible_ms = grpc_config.default_invisible_time_mills
    else:
        invisible_ms = request.invisible_duration.ToMilliseconds()
        consumer.validate_invisible_time(grpc_config, invisible_ms,
                                         grpc_config.min_invisible_time_mills_for_recv)
    subscription = _subscription(topic, request.filter_expression)
    _check_readable(host, topic)
    receive = _Receive(host, rctx, request, settings)
    answer = await receive.pop(subscription, invisible_ms, polling_ms)
    code = answer.code if answer is not None else ResponseCode.POLLING_TIMEOUT
    if code == ResponseCode.POLLING_FULL:
        yield spb.ReceiveMessageResponse(status=status(Code.TOO_MANY_REQUESTS, "polling full"))
    elif code in (ResponseCode.POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND):
        yield spb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
    elif code != ResponseCode.SUCCESS:
        raise_for_remoting(code, answer.remark)
    else:
        found = receive.messages_of(answer, subscription)
        if not found:
            yield spb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND,
                                                           "no match message"))
        else:
            if request.auto_renew and host.renewals.enabled:
                for message in found:
                    host.renewals.add(rctx, group, topic, message)
            yield spb.ReceiveMessageResponse(status=OK_STATUS)
            async for response in _write_messages(receive, found):
                yield response
    yield delivery_timestamp_response()


async def _write_messages(receive: _Receive, found: list[pb.Message]):
    handed = 0
    try:
        for message in found:
            # Once yielded, grpcio has it: a cancel while it writes it leaves open whether the
            # client got it, so it is the client's (back after its invisible time if unacked),
            # as what the C++ front wrote; only the ones never handed over are NACKed.
            handed += 1
            yield spb.ReceiveMessageResponse(message=message)
    except BaseException:
        unwritten = found[handed:]
        if unwritten:
            start_task(nack(receive.host, receive.rctx, receive.group, receive.topic,
                            unwritten), "NACK of unwritten messages", None, log)
        raise
