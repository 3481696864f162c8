# grpcNativeFront: the libgrpc++ front on grpcServerPort, grpcio behind it on a private socket.
"""How a gRPC worker serves grpcServerPort through the C++ front (docs/architecture/grpc.md).

The worker's grpcio server then listens only on a private unix socket in a directory of the
broker's user alone (:class:`Backend`); the front (``pybroker._fast.grpc_front``) binds the public
listeners and relays every call there, with the caller's grpc peer string in the metadata
key ``PEER_KEY``, which the service reads as the caller's address (request_context.py; the
front replaces any value a client sent under that key). TLS as the tls.* settings say
(tls.py): plain, TLS only (the front's own TLS listener), or permissive, where the worker's
first-byte relay (permissive.py) holds the port and hands each connection to the front's plain
or TLS unix listener; the front then sees the relay's unix socket (``unix:``) as the peer, as
grpcio does without the front.

The unary methods of ``HANDED_OFF`` (all the servicer answers) skip grpcio: the front hands
their request bytes, metadata and peer to the worker (:class:`HandOff`: an eventfd wakes the
worker's loop, which takes every waiting call at once), the servicer's own method answers the
parsed request, and the front writes the answer. The same code answers as behind grpcio;
grpcio's per-call Python machinery is what is saved. ReceiveMessage (``STREAMED``, a server
stream) is handed off the same way with its deadline: the servicer's own generator runs to its
end, the front writes all its responses, and reports how many it wrote; the worker NACKs the
messages it did not (receive.nack), and cancels the call's task when the front says its client
cancelled it (a held POP is dropped), as grpcio would. The SendMessage calls the front can put
itself skip the servicer too (front_send.py: their remoting frames onto the send ring).

The front is built only where libgrpc++ was found (setup.py), and grpcNativeFront is true by
default exactly where it is (config_grpc.front_built); asked for where it is missing,
:func:`front_type` warns and answers None, and grpcio serves the port itself.
"""
import asyncio
import logging
import os
import shutil
import tempfile
import time

import grpc
from google.protobuf.message import DecodeError

from pybroker.config_grpc import front_built as built  # noqa: F401 (the front's own question)
from pybroker.grpc_service import receive
from pybroker.grpc_service.request_context import context_of
from pybroker.grpc_service.tls import GrpcTls
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb
from pybroker.tasks import start_task

log = logging.getLogger("pybroker.grpc.front")


def front_type():
    """The front's class (grpcNativeFront true: by default where built, else set so), or None
    (a warning) when it cannot be loaded."""
    try:
        from pybroker._fast.grpc_front.front import Front
    except ImportError as error:
        log.warning("grpcNativeFront=true but the gRPC front is not built (%s; build it with "
                    "libgrpc++-dev installed): grpcio serves grpcServerPort", error)
        return None
    return Front


def peer_key() -> str:
    from pybroker._fast.grpc_front.front import PEER_KEY
    return PEER_KEY


class Backend:
    """The private address of gRPC worker ``index``'s grpcio server behind the front: a unix
    socket in a directory only the broker's user may enter (mkdtemp, mode 0700), so another
    local user cannot reach the backend, where TLS is not asked for and the caller's address
    is what the x-pybroker-peer header says (an abstract socket has no permissions). Removed
    at :meth:`close` (a worker killed with -9 leaves the empty directory behind in the
    temporary folder)."""

    def __init__(self, index: int):
        self.directory = tempfile.mkdtemp(prefix=f"pybroker-grpc-{os.getpid()}-")
        self.address = f"unix:{self.directory}/backend-{index}.sock"

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


SERVICE_PATH = "/apache.rocketmq.v2.MessagingService/"
# The methods the worker answers from the front's hand-off, with their request types: every
# unary method the servicer answers (MessagingService._unary, which reads nothing of the call
# but its metadata and peer); Telemetry (bidirectional) and the methods grpcio answers
# UNIMPLEMENTED are relayed.
HANDED_OFF = {name: getattr(spb, f"{name}Request") for name in (
    "QueryRoute", "QueryAssignment", "Heartbeat", "NotifyClientTermination", "SendMessage",
    "EndTransaction", "RecallMessage", "AckMessage", "ChangeInvisibleDuration",
    "ForwardMessageToDeadLetterQueue")}
# The server streams the worker answers from the hand-off (all its responses at once).
STREAMED = {"ReceiveMessage": spb.ReceiveMessageRequest}


def _unexpected(error: BaseException) -> tuple[int, str]:
    """grpc.aio's status for an exception out of a handler or the request's parsing, given
    for a handed-off call as well."""
    return grpc.StatusCode.UNKNOWN.value[0], f"Unexpected {type(error)}: {error}"


def _cancelled() -> tuple[int, str]:
    """The status of a handed-off stream cancelled before its answer (its client is gone)."""
    return grpc.StatusCode.CANCELLED.value[0], "Cancelled"


class _CallContext:
    """What the servicer's unary methods read of a grpc context, for a handed-off call."""

    def __init__(self, metadata: tuple, peer: str):
        self._metadata, self._peer = metadata, peer

    def invocation_metadata(self) -> tuple:
        return self._metadata

    def peer(self) -> str:
        return self._peer


class _StreamContext(_CallContext):
    """A handed-off stream's context: the unary one and the call's time left."""

    def __init__(self, metadata: tuple, peer: str, deadline: float | None):
        super().__init__(metadata, peer)
        self._deadline = deadline

    def time_remaining(self) -> float | None:
        """As grpc.aio's: seconds left (not below 0), None without a deadline."""
        if self._deadline is None:
            return None
        return max(self._deadline - time.time(), 0.0)


class HandOff:
    """The worker's side of the hand-off: the eventfd the front signals, each waiting call
    answered by ``service`` (the MessagingService servicer) in a task of its own."""

    def __init__(self, service):
        self.service = service
        self.eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.front = None
        self.calls: set[asyncio.Task] = set()
        # The front's fast sends (front_send.FastSends), signalled on the same eventfd.
        self.sends = None
        # The AckMessage calls put on the ACK fast path in one take (front_acks.FrontAcks).
        self.acks = None
        # Streamed calls by the front's id: those running (their tasks), and those answered
        # with messages whose count of responses written the front has yet to report.
        self.streaming: dict[int, asyncio.Task] = {}
        self.unreported: dict[int, tuple] = {}
        self.streams_served = self.streams_cancelled = 0     # for the stop's log

    @staticmethod
    def methods() -> list[str]:
        return [SERVICE_PATH + name for name in HANDED_OFF]

    @staticmethod
    def stream_methods() -> list[str]:
        return [SERVICE_PATH + name for name in STREAMED]

    @property
    def stream_counts(self) -> tuple[int, int]:
        """(streams answered, streams cancelled by their clients while running)."""
        return self.streams_served, self.streams_cancelled

    def start(self, front) -> None:
        self.front = front
        asyncio.get_running_loop().add_reader(self.eventfd, self._ready)

    async def stop(self, grace_s: float) -> None:
        """Stop the front (off this loop, which answers the calls meanwhile): it stops
        accepting at once, the calls in flight get their answers for up to ``grace_s`` and
        those left are ended then, as grpcio's ``stop(grace)`` does; the hand-offs still
        running then are cancelled (their answers are dropped: their calls have ended). Then
        close the eventfd."""
        loop = asyncio.get_running_loop()
        assert self.front is not None          # started
        await loop.run_in_executor(None, self.front.stop, grace_s)
        for call in list(self.calls):
            call.cancel()
        loop.remove_reader(self.eventfd)
        os.close(self.eventfd)

    def _ready(self) -> None:
        try:
            os.eventfd_read(self.eventfd)       # before the take: a later call signals again
        except BlockingIOError:
            pass
        front = self.front
        # A cancel always follows its call's hand-off: taken after the streams, it finds its task.
        for handle, call_id, method, request, metadata, peer, deadline in front.take_streams():
            self._answer_stream(handle, call_id, method, request, metadata, peer, deadline)
        for call_id in front.take_cancelled():
            running = self.streaming.get(call_id)
            if running is not None:
                self.streams_cancelled += 1
                running.cancel()
        for call_id, written in front.take_reports():
            self._written(call_id, written)
        calls = front.take()
        if self.acks is not None:           # the AckMessage calls it can answer (front_acks.py)
            calls = self.acks.answer(calls)
        for handle, method, request, metadata, peer in calls:
            self.answer_call(handle, method, request, metadata, peer)
        if self.sends is not None:
            self.sends.put()

    def answer_call(self, handle: int, method: str, request: bytes, metadata: tuple,
                    peer: str) -> None:
        """Answer a handed-off call in a task of its own."""
        call = start_task(self._answer(handle, method, request, metadata, peer),
                          "a handed-off gRPC call", None, log)
        self.calls.add(call)
        call.add_done_callback(self.calls.discard)

    def _parsed(self, handle: int, method: str, request: bytes, types: dict) -> tuple:
        """(method name, parsed request) of a handed-off call; the request None when it does
        not parse (then answered as grpc.aio answers it)."""
        name = method.removeprefix(SERVICE_PATH)
        try:
            return name, types[name].FromString(request)
        except DecodeError as error:
            assert self.front is not None
            self.front.answer(handle, b"", *_unexpected(error))
            return name, None

    async def _answer(self, handle: int, method: str, request: bytes, metadata: tuple,
                      peer: str) -> None:
        front = self.front
        assert front is not None            # started before the front hands anything off
        name, parsed = self._parsed(handle, method, request, HANDED_OFF)
        if parsed is None:
            return
        try:
            response = await getattr(self.service, name)(parsed, _CallContext(metadata, peer))
        except BaseException as error:      # the front waits for an answer to every call
            front.answer(handle, b"", *_unexpected(error))
            raise
        front.answer(handle, response.SerializeToString())


    def _answer_stream(self, handle: int, call_id: int, method: str, request: bytes,
                       metadata: tuple, peer: str, deadline: float | None) -> None:
        call = start_task(self._stream(handle, call_id, method, request, metadata, peer,
                                       deadline), "a handed-off gRPC stream", None, log)
        self.calls.add(call)
        self.streaming[call_id] = call

        def ended(task: asyncio.Task) -> None:
            self.calls.discard(task)
            self.streaming.pop(call_id, None)
        call.add_done_callback(ended)

    async def _stream(self, handle: int, call_id: int, method: str, request: bytes,
                      metadata: tuple, peer: str, deadline: float | None) -> None:
        """Run the servicer's stream to its end and give the front all its responses; the
        messages among them wait for the front's count of those written."""
        front = self.front
        assert front is not None
        name, parsed = self._parsed(handle, method, request, STREAMED)
        if parsed is None:
            return
        responses = []
        try:
            async for response in getattr(self.service, name)(
                    parsed, _StreamContext(metadata, peer, deadline)):
                responses.append(response)
        except BaseException as error:      # cancelled (its client or the stop) or a failure
            self._nack(metadata, peer, parsed, [r.message for r in responses
                                                if r.HasField("message")])
            front.answer(handle, b"", *(_cancelled() if isinstance(error, asyncio.CancelledError)
                                        else _unexpected(error)))
            raise
        sent = [(index, response.message) for index, response in enumerate(responses)
                if response.HasField("message")]
        if sent:
            self.unreported[call_id] = (metadata, peer, parsed, sent)
        self.streams_served += 1
        front.answer_stream(handle, [response.SerializeToString() for response in responses],
                            bool(sent))

    def _written(self, call_id: int, written: int) -> None:
        """The front wrote the first ``written`` responses of stream ``call_id``."""
        waiting = self.unreported.pop(call_id, None)
        if waiting is not None:
            metadata, peer, request, sent = waiting
            self._nack(metadata, peer, request,
                       [message for index, message in sent if index >= written])

    def _nack(self, metadata: tuple, peer: str, request, unwritten: list) -> None:
        if not unwritten:
            return
        host = self.service.host
        rctx = context_of(metadata, peer, host.peer_key)
        start_task(receive.nack(host, rctx, request.group.name,
                                request.message_queue.topic.name, unwritten),
                   "NACK of unwritten messages", None, log)


def start_front(front, config, index: int, backend: str, handoff: HandOff,
                fast_sends: bool = False):
    """Start the front before ``backend`` on the configured listeners, handing the methods of
    HANDED_OFF to ``handoff`` (and, with ``fast_sends``, putting the SendMessage calls it can
    itself: front_send.py); returns what it serves (for the log), the front, and in
    permissive mode the first-byte relay to start."""
    tls = GrpcTls.from_config(config.tls)
    address = f"{config.remoting.bind_address}:{config.grpc.grpc_server_port}"
    size_max = config.grpc.grpc_max_inbound_message_size
    options = {"certificate_chain": tls.certificate_chain, "private_key": tls.private_key,
               "trusted": tls.trusted or b"", "require_client_auth": tls.require_client_auth,
               "max_message_bytes": size_max}
    relay = None
    if tls.mode == "plain":
        plain, secure, served = [address], [], f"{address} (plain, C++ front)"
    elif tls.mode == "tls":
        plain, secure, served = [], [address], f"{address} (TLS only, C++ front)"
    else:
        from pybroker.grpc_service.permissive import relay_for
        relay = relay_for(config, index)
        inner_plain, inner_tls = relay.grpc_addresses()
        plain, secure = [inner_plain], [inner_tls]
        served = f"{address} (TLS and plain by first byte, C++ front)"
    started = front(plain, secure, backend, handoff_methods=handoff.methods(),
                    handoff_eventfd=handoff.eventfd, fast_sends=fast_sends,
                    stream_methods=handoff.stream_methods(), **options)
    handoff.start(started)
    return served, started, relay
