# The MessagingService servicer: every RPC's context, ACL check, activity and error answer.
"""apache.rocketmq.v2.MessagingService for grpc.aio, over a host (the gRPC worker).

Each unary RPC: the client's context from its metadata (a missing client id is
CLIENT_ID_REQUIRED), the ACL check when aclEnable (pybroker/grpc_service/acl.py), then the
activity. A :class:`GrpcRefused` becomes the response's status; any other exception
INTERNAL_SERVER_ERROR with its type and message, as the proxy's ResponseBuilder answers an
unexpected throwable. RPCs the service does not override (PullMessage, UpdateOffset,
GetOffset, QueryOffset, SyncLiteSubscription) answer gRPC UNIMPLEMENTED, as the Java 5.3.3
proxy's generated base class does.

The host provides: ``ctx`` (a BrokerContext), ``settings`` (ClientSettings), ``telemetry``
(client.Telemetry), ``transactions`` (producer.TransactionData), ``queue_selector``,
``access`` (GrpcAccessCheck or None), ``forward(code, ext_fields, body, rctx)`` (a metadata
request through the metadata service), ``channel_id(rctx)`` and ``peer_key`` (the metadata key of
the caller's peer behind the C++ front, or None: grpc_service/front.py).
"""
import asyncio
import logging

import grpc

from pybroker.grpc_service import client, consumer, producer, receive, route
from pybroker.grpc_service.request_context import RequestContext, context_of
from pybroker.grpc_service.status import Code, GrpcRefused, status
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb
from pybroker.protocol.rocketmq_v2 import service_pb2_grpc

log = logging.getLogger("pybroker.grpc.service")


def unexpected_status(error: BaseException):
    log.exception("gRPC request failed")
    return status(Code.INTERNAL_SERVER_ERROR, f"{type(error).__name__}: {error}".strip())


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    """The servicer of one gRPC worker (``host``)."""

    def __init__(self, host):
        self.host = host

    def _context(self, context, request, rpc: str) -> RequestContext:
        rctx = context_of(context.invocation_metadata(), context.peer(), self.host.peer_key)
        rctx.require_client_id()
        access = self.host.access
        if access is not None:
            access.check(rctx, rpc, request)
        return rctx

    # Behind the C++ front these run on calls handed off by it (grpc_service/front.py,
    # HANDED_OFF), whose context offers invocation_metadata() and peer() only.
    async def _unary(self, rpc: str, activity, request, context, response_type):
        try:
            rctx = self._context(context, request, rpc)
            return await activity(self.host, rctx, request)
        except GrpcRefused as refused:
            return response_type(status=status(refused.code, refused.message))
        except Exception as error:  # noqa: BLE001 (answered as the proxy answers it)
            return response_type(status=unexpected_status(error))

    async def QueryRoute(self, request, context):
        return await self._unary("QueryRoute", route.query_route, request, context,
                                 spb.QueryRouteResponse)

    async def QueryAssignment(self, request, context):
        return await self._unary("QueryAssignment", route.query_assignment, request, context,
                                 spb.QueryAssignmentResponse)

    async def Heartbeat(self, request, context):
        return await self._unary("Heartbeat", client.heartbeat, request, context,
                                 spb.HeartbeatResponse)

    async def NotifyClientTermination(self, request, context):
        return await self._unary("NotifyClientTermination", client.notify_client_termination,
                                 request, context, spb.NotifyClientTerminationResponse)

    async def SendMessage(self, request, context):
        return await self._unary("SendMessage", producer.send_message, request, context,
                                 spb.SendMessageResponse)

    async def EndTransaction(self, request, context):
        return await self._unary("EndTransaction", producer.end_transaction_rpc, request,
                                 context, spb.EndTransactionResponse)

    async def RecallMessage(self, request, context):
        return await self._unary("RecallMessage", producer.recall_message, request, context,
                                 spb.RecallMessageResponse)

    async def AckMessage(self, request, context):
        return await self._unary("AckMessage", consumer.ack_message, request, context,
                                 spb.AckMessageResponse)

    async def ChangeInvisibleDuration(self, request, context):
        return await self._unary("ChangeInvisibleDuration", consumer.change_invisible_duration,
                                 request, context, spb.ChangeInvisibleDurationResponse)

    async def ForwardMessageToDeadLetterQueue(self, request, context):
        return await self._unary("ForwardMessageToDeadLetterQueue",
                                 consumer.forward_to_dead_letter_queue, request, context,
                                 spb.ForwardMessageToDeadLetterQueueResponse)

    async def ReceiveMessage(self, request, context):
        """Server streaming: a status, the messages, the delivery timestamp
        (receive.receive_message); a refusal is the status, then the timestamp."""
        try:
            rctx = self._context(context, request, "ReceiveMessage")
            async for response in receive.receive_message(self.host, rctx, request, context):
                yield response
            return
        except GrpcRefused as refused:
            failed = status(refused.code, refused.message)
        except Exception as error:  # noqa: BLE001
            failed = unexpected_status(error)
        yield spb.ReceiveMessageResponse(status=failed)
        yield receive.delivery_timestamp_response()

    async def Telemetry(self, request_iterator, context):
        """Client settings both ways, and the broker's commands for the client."""
        rctx = context_of(context.invocation_metadata(), context.peer(), self.host.peer_key)
        host = self.host
        stream = host.telemetry.open(rctx.client_id)
        # Both awaited below (asyncio.wait, then result() or cancel()).
        reader = asyncio.ensure_future(  # tidy: allow (awaited)
            self._read_telemetry(rctx, stream, request_iterator))
        try:
            while True:
                getter = asyncio.ensure_future(stream.outgoing.get())  # tidy: allow (awaited)
                done, _ = await asyncio.wait({getter, reader},
                                             return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    await context.write(getter.result())
                    continue
                getter.cancel()
                failure = reader.result()
                if failure is not None:
                    await context.abort(*failure)
                return
        finally:
            reader.cancel()
            host.telemetry.close(stream)

    async def _read_telemetry(self, rctx, stream, request_iterator):
        """Handle the client's commands; returns None at the stream's end, or the (code,
        description) to end it with (processTelemetryException)."""
        host = self.host
        async for command in request_iterator:
            try:
                rctx.require_client_id()
                if host.access is not None:
                    host.access.check(rctx, "Telemetry", command)
                which = command.WhichOneof("command")
                if which == "settings":
                    stream.write(await client.settings_command(host, rctx, stream,
                                                               command.settings))
                elif which == "thread_stack_trace":
                    host.telemetry.thread_stack_trace(command.status, command.thread_stack_trace)
                elif which == "verify_message_result":
                    host.telemetry.verify_message_result(command.status,
                                                         command.verify_message_result)
            except client.TelemetryInvalid as invalid:
                return grpc.StatusCode.INVALID_ARGUMENT, str(invalid)
            except GrpcRefused as refused:
                code = grpc.StatusCode.INVALID_ARGUMENT \
                    if Code.BAD_REQUEST <= refused.code < Code.INTERNAL_ERROR \
                    else grpc.StatusCode.INTERNAL
                return code, f"process client telemetryCommand failed. {refused.message}"
            except Exception as error:  # noqa: BLE001
                log.exception("telemetry command failed")
                return (grpc.StatusCode.INTERNAL,
                        f"process client telemetryCommand failed. {error}")
        return None
