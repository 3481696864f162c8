"""The C++ gRPC front relays every kind of call to its backend unchanged: metadata in (minus
grpc's own headers, plus the caller's peer under x-pybroker-peer, which a client cannot forge),
messages both ways (large ones within max_message_bytes), the status code, details and trailing
metadata out, the caller's deadline and cancel through; the service reads the peer from it only
when told to; a worker without the built front warns and falls back.

Method: the real front (pybroker._fast.grpc_front) on a free 127.0.0.1 port in front of a real
grpcio thread-pool server on an abstract unix socket, called by grpcio's client; every wait is
bounded.
"""
import asyncio
import os
import socket
import sys
import threading
import time
from concurrent import futures

import grpc
import pytest

from pybroker._testbase.cluster import free_port
from pybroker.config_grpc import FRONT_MODULE
from pybroker.grpc_service import front as grpc_front
from pybroker.grpc_service.request_context import context_of
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb

if not grpc_front.built():
    pytest.skip("the gRPC front is not built (libgrpc++-dev missing at build time)",
                allow_module_level=True)

from pybroker._fast.grpc_front.front import PEER_KEY, Front  # noqa: E402

BIG = 6 << 20                   # over grpc's 4 MiB default limit
LIMIT = 8 << 20
WAIT_S = 10
DEADLINE_ROUNDING_S = 0.1
CONCURRENT = 256


class Backend:
    """A grpcio server on an abstract unix socket with the methods the tests call."""

    def __init__(self):
        self.seen: dict[str, object] = {}
        self.cancelled = threading.Event()
        handlers = {
            "Echo": grpc.unary_unary_rpc_method_handler(self._echo),
            "Chat": grpc.stream_stream_rpc_method_handler(self._chat),
            "Endless": grpc.unary_stream_rpc_method_handler(self._endless),
            "Remaining": grpc.unary_unary_rpc_method_handler(self._remaining),
        }
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=[
            ("grpc.max_receive_message_length", LIMIT),
            ("grpc.max_send_message_length", LIMIT)])
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("t.S", handlers),))
        self.address = f"unix-abstract:pybroker-front-test-{os.getpid()}-{id(self)}"
        self.server.add_insecure_port(self.address)
        self.server.start()

    def _echo(self, request, context):
        self.seen["metadata"] = list(context.invocation_metadata())
        return request[::-1]

    def _chat(self, requests, context):
        for request in requests:
            yield b"re:" + request
            if request == b"last":
                context.set_trailing_metadata((("x-why", "because"),))
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no more")

    def _endless(self, request, context):
        context.add_callback(self.cancelled.set)
        while context.is_active():
            yield b"tick"
            time.sleep(0.05)

    def _remaining(self, request, context):
        return repr(context.time_remaining()).encode()


@pytest.fixture(scope="module")
def relayed():
    backend = Backend()
    port = free_port()
    front = Front([f"127.0.0.1:{port}"], [], backend.address, max_message_bytes=LIMIT)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[
        ("grpc.max_receive_message_length", LIMIT), ("grpc.max_send_message_length", LIMIT)])
    grpc.channel_ready_future(channel).result(timeout=WAIT_S)
    yield backend, channel, front
    channel.close()
    front.stop(1.0)
    backend.server.stop(1).wait(WAIT_S)


def test_unary_metadata_peer_and_a_large_message(relayed):
    backend, channel, front = relayed
    body = bytes(range(256)) * (BIG // 256)
    answer = channel.unary_unary("/t.S/Echo")(
        body, metadata=(("x-mq-client-id", "c1"), (PEER_KEY, "ipv4:6.6.6.6:6")),
        timeout=WAIT_S)
    assert answer == body[::-1]
    metadata = backend.seen["metadata"]
    assert ("x-mq-client-id", "c1") in metadata
    peers = [value for key, value in metadata if key == PEER_KEY]
    assert len(peers) == 1 and peers[0].startswith("ipv4:127.0.0.1:"), peers
    assert not any(key.startswith("grpc-") for key, _ in metadata)
    assert front.calls_accepted >= 1


def test_many_calls_at_once(relayed):
    _, channel, _ = relayed
    echo = channel.unary_unary("/t.S/Echo")
    calls = [echo.future(b"call %d" % number, timeout=WAIT_S) for number in range(CONCURRENT)]
    assert [call.result() for call in calls] == [(b"call %d" % n)[::-1]
                                                 for n in range(CONCURRENT)]
    chats = [channel.stream_stream("/t.S/Chat")(iter([b"%d" % n] * 3), timeout=WAIT_S)
             for n in range(CONCURRENT // 8)]
    assert [list(chat) for chat in chats] == [[b"re:%d" % n] * 3
                                              for n in range(CONCURRENT // 8)]


def test_stream_status_details_and_trailing_metadata(relayed):
    _, channel, _ = relayed
    call = channel.stream_stream("/t.S/Chat")(iter([b"a", b"b", b"last"]), timeout=WAIT_S)
    answers = []
    with pytest.raises(grpc.RpcError) as ended:
        for answer in call:
            answers.append(answer)
    assert answers == [b"re:a", b"re:b", b"re:last"]
    assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ended.value.details() == "no more"
    assert ("x-why", "because") in ended.value.trailing_metadata()


def test_deadline_and_cancel_reach_the_backend(relayed):
    backend, channel, _ = relayed
    remaining = float(channel.unary_unary("/t.S/Remaining")(b"", timeout=3))
    # Without the deadline the backend would see None; each hop's grpc-timeout header rounds
    # the time left up (grpc's encoding), hence the small excess allowed.
    assert 2 < remaining <= 3 + DEADLINE_ROUNDING_S
    call = channel.unary_stream("/t.S/Endless")(b"", timeout=WAIT_S)
    assert next(call) == b"tick"
    call.cancel()
    assert backend.cancelled.wait(WAIT_S), "the backend's call was not cancelled"


def test_unknown_method_answered_by_the_backend(relayed):
    _, channel, _ = relayed
    with pytest.raises(grpc.RpcError) as refused:
        channel.unary_unary("/t.S/Nope")(b"", timeout=WAIT_S)
    assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_a_port_in_use_is_an_error():
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    try:
        with pytest.raises(OSError, match="could not bind"):
            Front([f"127.0.0.1:{holder.getsockname()[1]}"], [], "unix-abstract:nobody")
    finally:
        holder.close()


def test_the_service_takes_the_peer_from_the_front_only_when_told():
    metadata = [("x-mq-client-id", "c1"), (PEER_KEY, "ipv4:10.0.0.1:5")]
    assert context_of(metadata, "unix:", PEER_KEY).remote_address == "10.0.0.1:5"
    assert PEER_KEY not in context_of(metadata, "unix:", PEER_KEY).metadata
    assert context_of(metadata, "ipv4:127.0.0.1:9").remote_address == "127.0.0.1:9"
    assert context_of(metadata[:1], "ipv4:127.0.0.1:9", PEER_KEY).remote_address \
        == "127.0.0.1:9"


def test_without_the_built_front_the_worker_warns_and_falls_back(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, FRONT_MODULE, None)   # import fails
    assert grpc_front.front_type() is None
    assert "the gRPC front is not built" in caplog.text


def test_handed_off_calls_wait_for_the_worker_answer():
    """A unary method named as handed off skips the backend: the request, the caller's
    metadata and peer wait in the front's list (signalled on the eventfd) until answered."""
    backend = Backend()
    port = free_port()
    eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    front = Front([f"127.0.0.1:{port}"], [], backend.address,
                  handoff_methods=["/t.S/Hand"], handoff_eventfd=eventfd)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            hand = channel.unary_unary("/t.S/Hand")
            first = hand.future(b"first", metadata=(("x-mq-client-id", "c2"),), timeout=WAIT_S)
            second = hand.future(b"second", timeout=WAIT_S)
            taken: list = []
            deadline = time.monotonic() + WAIT_S
            while len(taken) < 2 and time.monotonic() < deadline:
                try:
                    os.eventfd_read(eventfd)
                except BlockingIOError:
                    time.sleep(0.01)
                    continue
                taken += front.take()
            assert len(taken) == 2, taken
            assert not first.done() and not second.done()       # waiting for the answers
            by_request = {request: (handle, method, metadata, peer)
                          for handle, method, request, metadata, peer in taken}
            handle, method, metadata, peer = by_request[b"first"]
            assert method == "/t.S/Hand" and ("x-mq-client-id", "c2") in metadata
            assert peer.startswith("ipv4:127.0.0.1:")
            front.answer(handle, b"answered")
            front.answer(by_request[b"second"][0], b"", grpc.StatusCode.NOT_FOUND.value[0],
                         "no such thing")
            assert first.result(timeout=WAIT_S) == b"answered"
            assert second.exception(timeout=WAIT_S).code() == grpc.StatusCode.NOT_FOUND
            assert second.exception().details() == "no such thing"
            assert channel.unary_unary("/t.S/Echo")(b"ab", timeout=WAIT_S) == b"ba"  # relayed
        assert front.calls_handed_off == 2 and front.calls_accepted == 3
    finally:
        front.stop(1.0)
        os.close(eventfd)
        backend.server.stop(1).wait(WAIT_S)


def _wait_for(eventfd: int, take, count: int) -> list:
    """``count`` entries of ``take`` (after the eventfd), within WAIT_S."""
    taken: list = []
    deadline = time.monotonic() + WAIT_S
    while len(taken) < count and time.monotonic() < deadline:
        try:
            os.eventfd_read(eventfd)
        except BlockingIOError:
            time.sleep(0.01)
        taken += take()
    assert len(taken) == count, taken
    return taken


def test_streamed_calls_carry_their_deadline_cancel_and_written_count():
    """A server-streaming method named as streamed waits for the worker with the call's id and
    deadline (wall clock; None without one); the worker's responses are written in order and
    end with OK, and the count written comes back; a client's cancel before the answer is
    reported by id, and a stream answered after it reports nothing written."""
    backend = Backend()
    port = free_port()
    eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    front = Front([f"127.0.0.1:{port}"], [], backend.address, handoff_eventfd=eventfd,
                  stream_methods=["/t.S/Stream"])
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stream = channel.unary_stream("/t.S/Stream")
            started = time.time()
            timed = stream(b"timed", metadata=(("x-mq-client-id", "c3"),), timeout=WAIT_S)
            endless = stream(b"endless")
            taken = {call[3]: call for call in _wait_for(eventfd, front.take_streams, 2)}
            handle, call_id, method, _, metadata, peer, deadline = taken[b"timed"]
            assert method == "/t.S/Stream" and ("x-mq-client-id", "c3") in metadata
            assert peer.startswith("ipv4:127.0.0.1:")
            assert started + WAIT_S - 1 < deadline < time.time() + WAIT_S + DEADLINE_ROUNDING_S
            assert taken[b"endless"][6] is None and taken[b"endless"][1] != call_id
            front.answer_stream(handle, [b"one", b"two", b"three"], True)
            assert list(timed) == [b"one", b"two", b"three"]
            assert timed.code() == grpc.StatusCode.OK
            assert _wait_for(eventfd, front.take_reports, 1) == [(call_id, 3)]
            endless.cancel()
            assert _wait_for(eventfd, front.take_cancelled, 1) == [taken[b"endless"][1]]
            front.answer_stream(taken[b"endless"][0], [b"late"], True)
            assert _wait_for(eventfd, front.take_reports, 1) == [(taken[b"endless"][1], 0)]
            with pytest.raises(ValueError):
                front.answer_stream(handle, [], False)
        assert front.calls_handed_off == 2
    finally:
        front.stop(1.0)
        os.close(eventfd)
        backend.server.stop(1).wait(WAIT_S)


def _handing_off(servicer) -> tuple[Backend, "grpc_front.HandOff", int]:
    """A front on a free port handing SendMessage and the other unary methods to
    ``servicer`` through grpc_service.front.HandOff (started on the running loop)."""
    backend = Backend()
    port = free_port()
    handoff = grpc_front.HandOff(servicer)
    front = Front([f"127.0.0.1:{port}"], [], backend.address,
                  handoff_methods=handoff.methods(), handoff_eventfd=handoff.eventfd)
    handoff.start(front)
    return backend, handoff, port


def test_the_worker_side_answers_and_stops_with_calls_still_running():
    """grpc_service.front.HandOff answers a handed-off call with the servicer's method; its
    stop ends in bounded time with a call still running, whose caller gets an error and whose
    task is cancelled after the grace, as grpcio's stop cancels its handlers."""

    class Servicer:
        def __init__(self):
            self.started = asyncio.Event()
            self.cancelled = False

        async def SendMessage(self, request, context):
            if request.messages[0].body == b"hang":
                self.started.set()
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    self.cancelled = True
                    raise
            return spb.SendMessageResponse(entries=[spb.SendResultEntry(
                message_id=dict(context.invocation_metadata())["x-mq-client-id"] + "|" +
                context.peer().partition(":")[0])])

    def request(body: bytes) -> bytes:
        return spb.SendMessageRequest(messages=[pb.Message(body=body)]).SerializeToString()

    async def scenario():
        servicer = Servicer()
        backend, handoff, port = _handing_off(servicer)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            send = channel.unary_unary(grpc_front.SERVICE_PATH + "SendMessage")
            answer = spb.SendMessageResponse.FromString(await send(
                request(b"ok"), metadata=(("x-mq-client-id", "c3"),), timeout=WAIT_S))
            assert answer.entries[0].message_id == "c3|ipv4"
            hanging = asyncio.ensure_future(send(request(b"hang"), timeout=WAIT_S))
            await asyncio.wait_for(servicer.started.wait(), WAIT_S)
            started = time.monotonic()
            await asyncio.wait_for(handoff.stop(0.5), WAIT_S)
            assert time.monotonic() - started < WAIT_S / 2
            with pytest.raises(grpc.aio.AioRpcError):
                await asyncio.wait_for(hanging, WAIT_S)
            await asyncio.sleep(0)              # the cancelled task runs its except clause
            assert servicer.cancelled and not handoff.calls
        backend.server.stop(1).wait(WAIT_S)

    asyncio.run(scenario())


def test_a_call_answered_within_the_stop_s_grace_gets_its_answer():
    """A handed-off call still running when the stop begins is answered to its caller when
    the worker answers it within the grace (grpcio's stop(grace) lets a handler finish), not
    ended: a send stored meanwhile is not reported failed to a client that would send it
    again. The stop then ends as soon as no call is left, well before the grace."""

    class Servicer:
        def __init__(self):
            self.started = asyncio.Event()
            self.release = asyncio.Event()

        async def SendMessage(self, request, context):
            self.started.set()
            await self.release.wait()
            return spb.SendMessageResponse(entries=[spb.SendResultEntry(message_id="late")])

    async def scenario():
        servicer = Servicer()
        backend, handoff, port = _handing_off(servicer)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            send = channel.unary_unary(grpc_front.SERVICE_PATH + "SendMessage")
            request = spb.SendMessageRequest(messages=[pb.Message(body=b"slow")])
            running = asyncio.ensure_future(send(request.SerializeToString(), timeout=WAIT_S))
            await asyncio.wait_for(servicer.started.wait(), WAIT_S)
            started = time.monotonic()
            stopping = asyncio.ensure_future(handoff.stop(WAIT_S))
            await asyncio.sleep(0.3)                # the stop is waiting for the call
            assert not stopping.done()
            servicer.release.set()
            answer = spb.SendMessageResponse.FromString(await asyncio.wait_for(running,
                                                                               WAIT_S))
            assert answer.entries[0].message_id == "late"
            await asyncio.wait_for(stopping, WAIT_S)
            assert time.monotonic() - started < WAIT_S / 2
        backend.server.stop(1).wait(WAIT_S)

    asyncio.run(scenario())
