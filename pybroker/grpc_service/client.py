# Heartbeat, NotifyClientTermination and Telemetry: gRPC clients in the broker's client registry.
"""The proxy's ``ClientActivity`` over pybroker's metadata service.

A gRPC client becomes a client of the broker's registry (producers, consumer groups) through the
same HEART_BEAT and UNREGISTER_CLIENT requests a remoting client sends, forwarded by this
worker to the metadata service with a channel of its own (``<worker>:grpc:<client id>``): a
producer under each topic it publishes (the topic is its producer group, where transaction
check-backs look), a consumer under its group with its subscriptions (SIMPLE_CONSUMER is
CONSUME_ACTIVELY, PUSH_CONSUMER CONSUME_PASSIVELY, always CLUSTERING from the last offset).

Commands the broker sends a client's channel reach its Telemetry stream (:class:`Telemetry`):
CHECK_TRANSACTION_STATE as RecoverOrphanedTransactionCommand, GET_CONSUMER_RUNNING_INFO with
jstack as PrintThreadStackTraceCommand, CONSUME_MESSAGE_DIRECTLY as VerifyMessageCommand; the
client's ThreadStackTrace and VerifyMessageResult come back as the remoting answers the
caller waits for (ConsumerRunningInfo with jstack; ConsumeMessageDirectlyResult "from gRPC
client"), as the proxy relays them. Other commands are not for gRPC clients and are dropped,
as the proxy drops them.
"""
import asyncio
import itertools
import logging

import orjson

from pybroker.grpc_service import checks, messages, producer
from pybroker.grpc_service.status import OK_STATUS, Code, GrpcRefused, status
from pybroker.protocol import bodies, headers
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response, decode, encode
from pybroker.protocol.constants import (EXPRESSION_TYPE_SQL92, EXPRESSION_TYPE_TAG,
                                         ConsumeFromWhere, ConsumeType, MessageModel)
from pybroker.protocol.properties import decode_properties
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb
from pybroker._fast import record as record_codec

log = logging.getLogger("pybroker.grpc.client")

_CONSUME_TYPES = {pb.SIMPLE_CONSUMER: ConsumeType.CONSUME_ACTIVELY,
                  pb.PUSH_CONSUMER: ConsumeType.CONSUME_PASSIVELY}
TELEMETRY_QUEUE_MAX = 1024        # commands waiting to be written to one client
PENDING_CALLS_MAX = 4096          # thread-stack and verify calls waiting for their client


def _subscriptions(entries) -> list:
    subscriptions = []
    for entry in entries:
        expression = entry.expression
        kind = EXPRESSION_TYPE_SQL92 if expression.type == pb.SQL else EXPRESSION_TYPE_TAG
        try:
            subscriptions.append(bodies.build_subscription(entry.topic.name,
                                                           expression.expression, kind))
        except ValueError:
            raise GrpcRefused(Code.ILLEGAL_FILTER_EXPRESSION,
                              "expression format is not correct") from None
    return subscriptions


def heartbeat_body(client_id: str, settings: pb.Settings, group: str | None) -> bytes:
    """The HEART_BEAT body registering a client with ``settings``."""
    if settings.client_type == pb.PRODUCER:
        return bodies.encode_heartbeat(bodies.HeartbeatData(
            client_id, producer_groups=[topic.name for topic in settings.publishing.topics]))
    consumer = bodies.ConsumerData(
        group or settings.subscription.group.name, _CONSUME_TYPES[settings.client_type],
        MessageModel.CLUSTERING, ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        _subscriptions(settings.subscription.subscriptions))
    return bodies.encode_heartbeat(bodies.HeartbeatData(client_id, consumer_datas=[consumer]))


async def _register(host, rctx, settings: pb.Settings, group: str | None) -> None:
    body = heartbeat_body(rctx.client_id, settings, group)
    answer = await host.forward(RequestCode.HEART_BEAT, {}, body, rctx)
    if answer.code != ResponseCode.SUCCESS:
        refused = status(Code.INTERNAL_SERVER_ERROR, answer.remark)
        raise GrpcRefused(refused.code, refused.message)


async def heartbeat(host, rctx, request: spb.HeartbeatRequest) -> spb.HeartbeatResponse:
    settings = host.settings.effective(rctx.client_id)
    if settings is None:
        return spb.HeartbeatResponse(status=status(
            Code.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client"))
    if settings.client_type == pb.PRODUCER:
        await _register(host, rctx, settings, None)
    elif settings.client_type in _CONSUME_TYPES:
        checks.validate_group(request.group.name)
        await _register(host, rctx, settings, request.group.name)
    else:
        return spb.HeartbeatResponse(status=status(
            Code.UNRECOGNIZED_CLIENT_TYPE, pb.ClientType.Name(settings.client_type)))
    return spb.HeartbeatResponse(status=OK_STATUS)


async def notify_client_termination(host, rctx, request: spb.NotifyClientTerminationRequest):
    settings = host.settings.remove(rctx.client_id)
    if settings is None:
        return spb.NotifyClientTerminationResponse(status=status(
            Code.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client"))
    if settings.client_type == pb.PRODUCER:
        for topic in settings.publishing.topics:
            await _unregister(host, rctx, {"producerGroup": topic.name})
    elif settings.client_type in _CONSUME_TYPES:
        checks.validate_group(request.group.name)
        await _unregister(host, rctx, {"consumerGroup": request.group.name})
        host.renewals.client_gone(rctx.client_id, request.group.name)
    else:
        return spb.NotifyClientTerminationResponse(status=status(
            Code.UNRECOGNIZED_CLIENT_TYPE, pb.ClientType.Name(settings.client_type)))
    host.telemetry.drop(rctx.client_id)
    return spb.NotifyClientTerminationResponse(status=OK_STATUS)


async def _unregister(host, rctx, group_fields: dict[str, str]) -> None:
    fields = dict(group_fields, clientID=rctx.client_id)
    await host.forward(RequestCode.UNREGISTER_CLIENT, fields, None, rctx)


# --- Telemetry ----------------------------------------------------------------------------------

class TelemetryStream:
    """One client's open Telemetry stream: commands queued for it, written by its RPC."""

    def __init__(self, client_id: str):
        self.client_id = client_id
        self.outgoing: asyncio.Queue = asyncio.Queue(TELEMETRY_QUEUE_MAX)

    def write(self, command: spb.TelemetryCommand) -> bool:
        try:
            self.outgoing.put_nowait(command)
        except asyncio.QueueFull:
            log.warning("telemetry of client %s is not read: a command is dropped",
                        self.client_id)
            return False
        return True


class Telemetry:
    """The worker's Telemetry streams by client id, and the calls waiting for clients."""

    def __init__(self, relay_answer):
        # ``relay_answer(channel_id, response)``: a client's answer to a broker's call.
        self.relay_answer = relay_answer
        self.streams: dict[str, TelemetryStream] = {}
        self._pending: dict[str, tuple[str, RemotingCommand]] = {}
        self._nonces = itertools.count(1)

    def open(self, client_id: str) -> TelemetryStream:
        stream = TelemetryStream(client_id)
        self.streams[client_id] = stream
        return stream

    def close(self, stream: TelemetryStream) -> None:
        if self.streams.get(stream.client_id) is stream:
            del self.streams[stream.client_id]

    def drop(self, client_id: str) -> None:
        self.streams.pop(client_id, None)

    def _nonce(self, channel_id: str, request: RemotingCommand) -> str:
        if len(self._pending) >= PENDING_CALLS_MAX:
            self._pending.pop(next(iter(self._pending)))
        nonce = f"{next(self._nonces)}"
        self._pending[nonce] = (channel_id, request)
        return nonce

    def deliver(self, host, channel_id: str, client_id: str, frame: bytes) -> None:
        """A command of the broker for the client of ``channel_id`` (SEND_TO_CHANNEL)."""
        stream = self.streams.get(client_id)
        command = decode(frame, 0, len(frame), copy_body=True)
        if stream is None or command.is_response:
            return
        converted = self._convert(host, channel_id, command)
        if converted is not None:
            stream.write(converted)

    def _convert(self, host, channel_id: str, command: RemotingCommand):
        code, fields = command.code, command.ext_fields or {}
        if code == RequestCode.CHECK_TRANSACTION_STATE:
            header = headers.CHECK_TRANSACTION_STATE_REQUEST.parse(fields)
            # The header names the re-appended half record (its topic is the half topic, as
            # Java 5.3.3's sendCheckMessage fills it); the body is that record with its
            # REAL_TOPIC / REAL_QID restored, which the proxy shows the client (messageExt).
            record = record_codec.decode(bytes(command.body or b""), 0)
            message = messages.from_record(record)
            group = decode_properties(record.properties).get("PGROUP", record.topic)
            producer.remember_check(host, group, header.transaction_id or "",
                                    header.commit_log_offset,
                                    header.transaction_state_table_offset)
            return spb.TelemetryCommand(
                recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                    message=message, transaction_id=header.transaction_id or ""))
        if code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            header = headers.GET_CONSUMER_RUNNING_INFO_REQUEST.parse(fields)
            if not header.jstack_enable:
                return None
            return spb.TelemetryCommand(print_thread_stack_trace_command=(
                spb.PrintThreadStackTraceCommand(nonce=self._nonce(channel_id, command))))
        if code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
            record = record_codec.decode(bytes(command.body or b""), 0)
            return spb.TelemetryCommand(verify_message_command=spb.VerifyMessageCommand(
                nonce=self._nonce(channel_id, command), message=messages.from_record(record)))
        return None

    def thread_stack_trace(self, answer: pb.Status, trace: spb.ThreadStackTrace) -> None:
        """reportThreadStackTrace."""
        pending = self._pending.pop(trace.nonce, None)
        if pending is None:
            return
        channel_id, request = pending
        if answer.code == Code.OK:
            body = orjson.dumps({"jstack": trace.thread_stack_trace, "mqTable": {},
                                 "properties": {}, "statusTable": {}, "subscriptionSet": [],
                                 "userConsumerInfo": {}})
            response = create_response(request, ResponseCode.SUCCESS, "", body=body)
        elif answer.code == Code.VERIFY_FIFO_MESSAGE_UNSUPPORTED:
            response = create_response(request, ResponseCode.NO_PERMISSION,
                                       "forbidden to verify message")
        else:
            response = create_response(request, ResponseCode.SYSTEM_ERROR, "verify message failed")
        self.relay_answer(channel_id, encode(response))

    def verify_message_result(self, answer: pb.Status, result: spb.VerifyMessageResult) -> None:
        """reportVerifyMessageResult: ConsumeMessageDirectlyResult "from gRPC client"."""
        pending = self._pending.pop(result.nonce, None)
        if pending is None:
            return
        channel_id, request = pending
        outcome = {Code.OK: "CR_SUCCESS", Code.FAILED_TO_CONSUME_MESSAGE: "CR_LATER",
                   Code.MESSAGE_CORRUPTED: "CR_RETURN_NULL"}.get(answer.code)
        document: dict = {"autoCommit": True, "order": False, "remark": "from gRPC client",
                          "spentTimeMills": 0}
        if outcome is not None:
            document["consumeResult"] = outcome
        response = create_response(request, ResponseCode.SUCCESS, "",
                                   body=orjson.dumps(document))
        self.relay_answer(channel_id, encode(response))


async def settings_command(host, rctx, stream: TelemetryStream,
                           settings: pb.Settings) -> spb.TelemetryCommand:
    """processAndWriteClientSettings: register the client, keep its settings, answer them."""
    if settings.HasField("publishing"):
        for topic in settings.publishing.topics:
            checks.validate_topic(topic.name)
    elif settings.HasField("subscription"):
        checks.validate_group(settings.subscription.group.name)
    else:
        raise TelemetryInvalid("there is no publishing or subscription data in settings")
    host.settings.update(rctx.client_id, settings)
    effective = host.settings.effective(rctx.client_id)
    if settings.HasField("publishing"):
        await _register(host, rctx, effective, None)
    elif settings.client_type in _CONSUME_TYPES:
        await _register(host, rctx, effective, settings.subscription.group.name)
    return spb.TelemetryCommand(status=OK_STATUS, settings=effective)


class TelemetryInvalid(Exception):
    """The stream ends with gRPC INVALID_ARGUMENT and this description (the proxy's onError)."""
