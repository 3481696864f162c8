"""The remoting transport answers, matches, defers and refuses exactly as RocketMQ's rules say.

Method: a real server and real clients on 127.0.0.1 ephemeral ports (and a unix socket in
tmp_path), each scenario run in a fresh event loop under asyncio.wait_for deadlines that FAIL the
test; misbehaving peers are raw sockets writing hand-built bytes. Every scenario also fails when
an exception reached the event loop's exception handler.
"""
import asyncio
import logging
import socket
import struct

import pytest

from pybroker._testbase.ports import free_port
from pybroker.errors import HeaderError
from pybroker.protocol import command as wire
from pybroker.protocol.command import RemotingCommand, create_request, create_response
from pybroker.remoting import (
    ConnectionLimits,
    RemotingClient,
    RemotingClientPool,
    RequestTable,
    SyncRemotingClient,
    start_server,
    start_unix_server,
)
from pybroker.remoting.receive_buffer import RECEIVE_BUFFER_INITIAL_BYTES

ECHO, SLOW, FAIL, FAIL_LATE, HEADER_BAD, DEFER, BIG = 101, 102, 103, 104, 105, 106, 107
NOTIFY_CONSUMER_IDS_CHANGED = 40
DEADLINE_S = 10.0


def run(scenario, deadline_s: float = DEADLINE_S):
    """Run ``scenario()`` in a new loop; fail on a missed deadline or a loop-handler error."""
    loop_errors = []

    async def guarded():
        asyncio.get_running_loop().set_exception_handler(
            lambda loop, context: loop_errors.append(context))
        return await asyncio.wait_for(scenario(), deadline_s)

    result = asyncio.run(guarded())
    assert not loop_errors, loop_errors
    return result


async def echo(connection, request):
    return create_response(request, 0, "echo", dict(request.ext_fields), request.body)


async def slow(connection, request):
    await asyncio.sleep(0)  # a bare yield first, then a future
    await asyncio.sleep(0.001)
    return create_response(request, 0, "slow", dict(request.ext_fields), request.body)


async def fail(connection, request):
    raise RuntimeError("boom in handler")


async def fail_late(connection, request):
    await asyncio.sleep(0.001)
    raise KeyError("late")


async def header_bad(connection, request):
    raise HeaderError("the custom field <topic> is null", 29)


async def defer(connection, request):
    asyncio.get_running_loop().call_later(
        0.02, connection.send, create_response(request, 0, "later"))
    return None


async def big(connection, request):
    return create_response(request, 0, body=b"\x5a" * int(request.ext_fields["bytes"]))


def first_of(future: asyncio.Future):
    """A callback resolving ``future`` with its first argument, the first time only."""
    return lambda value, *rest: future.done() or future.set_result(value)


def first_close_reason(future: asyncio.Future):
    """An on_close callback resolving ``future`` with the first closed connection's reason."""
    return lambda connection, exc: future.done() or future.set_result(connection.close_reason)


def make_table(eager: bool = True) -> RequestTable:
    return RequestTable({ECHO: echo, SLOW: slow, FAIL: fail, FAIL_LATE: fail_late,
                         HEADER_BAD: header_bad, DEFER: defer, BIG: big}, eager=eager)


async def connected_client(server, **kwargs) -> RemotingClient:
    client = RemotingClient(**kwargs)
    await client.connect(server.address, 2000)
    return client


async def read_frame(reader: asyncio.StreamReader) -> RemotingCommand:
    length = struct.unpack(">i", await reader.readexactly(4))[0]
    rest = await reader.readexactly(length)
    data = struct.pack(">i", length) + rest
    return wire.decode(data, 0, len(data), copy_body=True)


async def read_until_closed(reader: asyncio.StreamReader, limit_bytes: int = 1 << 20) -> bytes:
    """Everything the server sends until it closes (b"" when it closes without a reply)."""
    data = b""
    while len(data) < limit_bytes:
        try:
            chunk = await reader.read(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk
    raise AssertionError("server kept sending")


# --- answers ------------------------------------------------------------------------------------

@pytest.mark.parametrize("eager", [True, False])
@pytest.mark.parametrize("serialize_type", [0, 1])
@pytest.mark.parametrize("code", [ECHO, SLOW])
def test_round_trip_json_and_binary(serialize_type, code, eager):
    async def scenario():
        server = await start_server("127.0.0.1", 0, make_table(eager))
        client = await connected_client(server, serialize_type=serialize_type)
        request = create_request(code, {"topic": "TopicTest", "queueId": "3", "ü": "ß"},
                                 bytes(range(256)) * 3)
        response = await client.invoke(request, 2000)
        client.close()
        server.close()
        await server.wait_closed()
        return request, response

    request, response = run(scenario)
    assert response.is_response and response.opaque == request.opaque
    assert response.code == 0 and response.ext_fields == request.ext_fields
    assert response.body == request.body and isinstance(response.body, bytes)
    assert response.serialize_type == 0  # replies are always JSON (C++ reads only JSON)


@pytest.mark.parametrize("code", [ECHO, SLOW])
def test_1000_pipelined_requests_match_by_opaque(code):
    async def scenario():
        server = await start_server("127.0.0.1", 0, make_table())
        client = await connected_client(server)
        requests = [create_request(code, {"index": str(index)}, str(index).encode())
                    for index in range(1000)]
        responses = await asyncio.gather(*(client.invoke(request, 5000)
                                           for request in requests))
        client.close()
        server.close()
        return requests, responses

    requests, responses = run(scenario)
    assert len(responses) == 1000
    for request, response in zip(requests, responses, strict=True):
        assert response.opaque == request.opaque
        assert response.ext_fields == {"index": request.ext_fields["index"]}
        assert response.body == request.body
    assert len({response.opaque for response in responses}) == 1000


@pytest.mark.parametrize("eager", [True, False])
@pytest.mark.parametrize("code, expected_code, remark", [
    (999, 3, "request type 999 not supported"),
    (FAIL, 1, "RuntimeError: boom in handler"),
    (FAIL_LATE, 1, "KeyError: 'late'"),
    (HEADER_BAD, 29, "the custom field <topic> is null"),
])
def test_error_answers(code, expected_code, remark, eager, caplog):
    async def scenario():
        server = await start_server("127.0.0.1", 0, make_table(eager))
        client = await connected_client(server)
        response = await client.invoke(create_request(code), 2000)
        # The connection survives an error answer.
        after = await client.invoke(create_request(ECHO, body=b"still here"), 2000)
        client.close()
        server.close()
        return response, after

    with caplog.at_level(logging.ERROR, logger="pybroker.remoting"):
        response, after = run(scenario)
    assert (response.code, response.remark) == (expected_code, remark)
    assert "Traceback" not in response.remark
    assert after.body == b"still here"
    if expected_code == 1:  # the full trace goes to the log instead
        assert any(record.exc_info for record in caplog.records)


def test_reply_too_big_for_a_frame_becomes_system_error():
    async def scenario():
        server = await start_server("127.0.0.1", 0, make_table(), frame_max_bytes=1 << 16)
        client = await connected_client(server)
        response = await client.invoke(create_request(BIG, {"bytes": str(1 << 17)}), 2000)
        client.close()
        server.close()
        return response

    response = run(scenario)
    assert response.code == 1 and "frame_max_bytes" in response.remark


@pytest.mark.parametrize("code", [ECHO, SLOW, FAIL, FAIL_LATE, HEADER_BAD, 999])
def test_oneway_is_never_answered(code):
    handled = []

    async def record(connection, request):
        handled.append(request.opaque)

    async def scenario():
        table = make_table()
        table.register(7, record)
        server = await start_server("127.0.0.1", 0, table)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        oneway = create_request(code, body=b"x", oneway=True)
        marker = create_request(7, oneway=True)
        probe = create_request(ECHO, body=b"probe")
        writer.write(wire.encode(oneway) + wire.encode(marker) + wire.encode(probe))
        await writer.drain()
        first = await read_frame(reader)
        await asyncio.sleep(0.05)  # let a late (wrong) answer to a slow oneway arrive
        writer.write_eof()
        rest = await read_until_closed(reader)
        writer.close()
        server.close()
        return oneway, marker, probe, first, rest

    oneway, marker, probe, first, rest = run(scenario)
    assert first.opaque == probe.opaque and first.body == b"probe"
    assert rest == b""
    assert handled == [marker.opaque]


def test_deferred_answer_through_connection_send():
    async def scenario():
        server = await start_server("127.0.0.1", 0, make_table())
        client = await connected_client(server)
        deferred = asyncio.ensure_future(client.invoke(create_request(DEFER), 2000))
        quick = await client.invoke(create_request(ECHO, body=b"quick"), 2000)
        done_first = deferred.done()
        later = await deferred
        client.close()
        server.close()
        return quick, later, done_first

    quick, later, done_first = run(scenario)
    # the held request blocks nothing (protocol.md §8 item 23)
    assert quick.body == b"quick" and not done_first
    assert later.code == 0 and later.remark == "later"


def test_an_answer_after_a_wait_is_written_in_the_turn_the_handler_resumes(monkeypatch):
    """A handler that waits becomes a task of its connection's loop without asking asyncio
    for the running loop (a getpid system call per call on Python 3.11), and its answer, made
    alone in a later turn than its read, is written in the turn the handler resumes (not
    queued for one more turn)."""
    waited = 108

    async def scenario():
        loop = asyncio.get_running_loop()
        entered, gate = loop.create_future(), loop.create_future()
        finished = []

        async def gated(connection, request):
            entered.set_result(connection)
            await gate
            finished.append(request.opaque)
            return create_response(request, 0, "gated")

        table = make_table()
        table.register(waited, gated)
        server = await start_server("127.0.0.1", 0, table)
        client = await connected_client(server)
        asked = []
        real = asyncio.get_running_loop
        monkeypatch.setattr(asyncio, "get_running_loop", lambda: asked.append(1) or real())
        answer = asyncio.ensure_future(client.invoke(create_request(waited), 2000))
        connection = await entered
        await asyncio.sleep(0)          # the handler's task waits for the gate
        gate.set_result(None)
        await asyncio.sleep(0)          # the handler's task resumes in this turn, before us
        seen = (list(asked), bool(finished), connection.unsent_bytes)
        monkeypatch.undo()
        response = await answer
        client.close()
        server.close()
        return seen, response

    (asked, finished, unsent_bytes), response = run(scenario)
    assert asked == []
    assert finished and unsent_bytes == 0
    assert response.code == 0 and response.remark == "gated"


def test_server_to_client_request_answered_by_client_table():
    async def on_notify(connection, request):
        return create_response(request, 0, "client got " + request.ext_fields["consumerGroup"])

    async def scenario():
        connected = asyncio.get_running_loop().create_future()
        server = await start_server("127.0.0.1", 0, make_table(),
                                    on_connect=first_of(connected))
        client = RemotingClient(RequestTable({NOTIFY_CONSUMER_IDS_CHANGED: on_notify}))
        await client.connect(server.address, 2000)
        server_side = await connected
        notify = create_request(NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "g1"})
        answer = await server_side.invoke(notify, 2000)
        unknown = await server_side.invoke(create_request(41), 2000)
        # Requests from the client still work on the same connection.
        echoed = await client.invoke(create_request(ECHO, body=b"both ways"), 2000)
        client.close()
        server.close()
        return answer, unknown, echoed

    answer, unknown, echoed = run(scenario)
    assert (answer.code, answer.remark) == (0, "client got g1")
    assert (unknown.code, unknown.remark) == (3, "request type 41 not supported")
    assert echoed.body == b"both ways"


def test_large_frames_grow_then_shrink_the_receive_buffer():
    async def scenario():
        connected = asyncio.get_running_loop().create_future()
        server = await start_server("127.0.0.1", 0, make_table(), on_connect=first_of(connected))
        client = await connected_client(server)
        server_side = await connected
        body = bytes(range(256)) * 4096 * 3  # 3 MiB
        response = await client.invoke(create_request(ECHO, body=body), 5000)
        small = await client.invoke(create_request(ECHO, body=b"s"), 2000)
        capacity = server_side.receive_buffer_capacity_bytes
        client.close()
        server.close()
        return body, response, small, capacity

    body, response, small, capacity = run(scenario)
    assert response.body == body and small.body == b"s"
    assert capacity == RECEIVE_BUFFER_INITIAL_BYTES


def test_frame_arriving_byte_by_byte():
    async def scenario():
        server = await start_server("127.0.0.1", 0, make_table())
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        request = create_request(ECHO, {"k": "v"}, b"dribbled")
        frame = wire.encode(request, 1)
        for index in range(len(frame)):
            writer.write(frame[index:index + 1])
            await writer.drain()
            await asyncio.sleep(0)
        response = await read_frame(reader)
        writer.close()
        server.close()
        return request, response

    request, response = run(scenario)
    assert response.opaque == request.opaque and response.body == b"dribbled"


def test_announced_length_alone_allocates_nothing_big():
    async def scenario():
        connected = asyncio.get_running_loop().create_future()
        server = await start_server("127.0.0.1", 0, make_table(), on_connect=first_of(connected))
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        server_side = await connected
        # Announce a frame of 15 MiB, then send only 100 KiB of it.
        writer.write(struct.pack(">ii", 15 << 20, 20) + b"{}" * 10 + b"\0" * (100 << 10))
        await writer.drain()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if server_side.receive_buffer_capacity_bytes > RECEIVE_BUFFER_INITIAL_BYTES:
                break
        capacity = server_side.receive_buffer_capacity_bytes
        writer.close()
        server.close()
        return capacity

    capacity = run(scenario)
    assert RECEIVE_BUFFER_INITIAL_BYTES < capacity <= 4 * (100 << 10)


# --- client behaviour ---------------------------------------------------------------------------

def test_invoke_timeout_and_connection_loss():
    async def hang(connection, request):
        await asyncio.sleep(60)

    async def scenario():
        table = make_table()
        table.register(50, hang)
        server = await start_server("127.0.0.1", 0, table)
        client = await connected_client(server)
        with pytest.raises(TimeoutError):
            await client.invoke(create_request(DEFER), 5)  # answered after 20 ms: too late
        assert client.connection.pending_requests_count == 0
        late_ok = await client.invoke(create_request(ECHO), 2000)  # late answer was dropped
        waiting = asyncio.ensure_future(client.invoke(create_request(50), 5000))
        await asyncio.sleep(0.05)
        server.close()
        with pytest.raises(ConnectionError):
            await waiting
        with pytest.raises(ConnectionError):
            await client.invoke(create_request(ECHO), 2000)
        with pytest.raises(ConnectionError):
            client.invoke_oneway(create_request(ECHO))
        await server.wait_closed()
        return late_ok

    assert run(scenario).code == 0


@pytest.mark.serial     # the verdict is a time with 250 ms of slack: alone in a parallel run
def test_each_invoke_keeps_its_own_deadline():
    async def hang(connection, request):
        await asyncio.sleep(60)

    async def scenario():
        loop = asyncio.get_running_loop()
        table = make_table()
        table.register(50, hang)
        server = await start_server("127.0.0.1", 0, table)
        client = await connected_client(server)
        started = loop.time()

        async def timed(request, timeout_ms):
            try:
                return await client.invoke(request, timeout_ms)
            except TimeoutError:
                return loop.time() - started

        # Longest first, so the sweep timer must move earlier for each later call.
        outcomes = await asyncio.gather(timed(create_request(50), 400),
                                        timed(create_request(DEFER), 2000),
                                        timed(create_request(50), 150),
                                        timed(create_request(50), 30))
        pending = client.connection.pending_requests_count
        client.close()
        server.close()
        return outcomes, pending

    (long_s, deferred, middle_s, short_s), pending = run(scenario)
    assert deferred.remark == "later" and pending == 0
    assert 0.025 <= short_s < middle_s < long_s
    assert 0.14 <= middle_s < 0.4 and 0.39 <= long_s < 2


def test_connect_refused_and_bad_address():
    async def scenario():
        port = free_port()          # nothing listens there
        with pytest.raises(ConnectionError):
            await RemotingClient().connect(f"127.0.0.1:{port}", 2000)
        for address in ("127.0.0.1", "127.0.0.1:0", "127.0.0.1:99999", "host:port"):
            with pytest.raises(ValueError):
                await RemotingClient().connect(address, 2000)

    run(scenario)


def test_client_pool_reconnects_on_demand():
    async def scenario():
        connections = []
        server = await start_server("127.0.0.1", 0, make_table(), on_connect=connections.append)
        pool = RemotingClientPool()
        first = await pool.invoke(server.address, create_request(ECHO, body=b"1"), 2000)
        again = await pool.invoke(server.address, create_request(ECHO, body=b"2"), 2000)
        connections[0].abort("test drops the connection")
        await asyncio.sleep(0.05)
        third = await pool.invoke(server.address, create_request(ECHO, body=b"3"), 2000)
        pool.close()
        with pytest.raises(ConnectionError):
            await pool.invoke(server.address, create_request(ECHO), 2000)
        server.close()
        return [first.body, again.body, third.body], len(connections)

    bodies, connections_count = run(scenario)
    assert bodies == [b"1", b"2", b"3"] and connections_count == 2


def test_sync_client_in_its_own_thread():
    async def serve(started, stop):
        server = await start_server("127.0.0.1", 0, make_table())
        started.set_result(server.address)
        await stop
        server.close()

    async def scenario():
        loop = asyncio.get_running_loop()
        started, stop = loop.create_future(), loop.create_future()
        serving = asyncio.ensure_future(serve(started, stop))
        address = await started

        def blocking_calls():
            with SyncRemotingClient(serialize_type=1) as client:
                client.connect(address, 2000)
                response = client.invoke(create_request(ECHO, body=b"sync"), 2000)
                client.invoke_oneway(create_request(ECHO))
                with pytest.raises(TimeoutError):
                    client.invoke(create_request(DEFER), 1)
                return response

        response = await loop.run_in_executor(None, blocking_calls)
        stop.set_result(None)
        await serving
        return response

    assert run(scenario).body == b"sync"


def test_unix_socket_variant(tmp_path):
    async def on_check(connection, request):
        return create_response(request, 0, "checked")

    async def scenario():
        path = str(tmp_path / "metadata.sock")
        connected = asyncio.get_running_loop().create_future()
        server = await start_unix_server(path, make_table(), on_connect=first_of(connected))
        client = RemotingClient(RequestTable({39: on_check}))
        await client.connect(path, 2000)
        server_side = await connected
        response = await client.invoke(create_request(SLOW, body=b"over unix"), 2000)
        pipelined = await asyncio.gather(*(client.invoke(create_request(ECHO, body=b"%d" % i),
                                                         2000) for i in range(200)))
        check = await server_side.invoke(create_request(39), 2000)
        client.close()
        server.close()
        await server.wait_closed()
        return server.address, path, response, pipelined, check

    address, path, response, pipelined, check = run(scenario)
    assert address == path and response.body == b"over unix"
    assert [reply.body for reply in pipelined] == [b"%d" % i for i in range(200)]
    assert check.remark == "checked"


# --- bad input and limits -----------------------------------------------------------------------

def json_frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


TLS_CLIENT_HELLO = bytes.fromhex("160301020001000200") + b"\x03\x03" + b"\x00" * 64
BAD_INPUTS = {
    "garbage": b"\x00\x00\x00\x01\xff\xff\xff\xff",
    "oversized_length": struct.pack(">i", (1 << 24) + 1) + b"\x00\x00\x00\x10",
    "negative_length": struct.pack(">i", -5) + b"\x00" * 8,
    "tls_hello": TLS_CLIENT_HELLO,
    "http_get": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "serialize_type_7": struct.pack(">ii", 8, (7 << 24) | 4) + b"{}{}",
    "header_longer_than_frame": struct.pack(">ii", 8, 100) + b"{}{}",
    "json_not_object": json_frame(b"[1,2]"),
    "json_invalid": json_frame(b"{\"code\":"),
    "json_opaque_not_int": json_frame(b"{\"code\":101,\"opaque\":\"x\"}"),
}
HINTS = {"tls_hello": "TLS ClientHello", "http_get": "HTTP"}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_closes_only_that_connection(name, caplog):
    async def scenario():
        closed = []
        server = await start_server("127.0.0.1", 0, make_table(),
                                    on_close=lambda connection, exc: closed.append(connection))
        good = await connected_client(server)
        host, port = server.sockets[0].getsockname()[:2]
        reader, writer = await asyncio.open_connection(host, port)
        # A valid request first: answered, then the bad bytes end the connection.
        valid = create_request(ECHO, body=b"before")
        writer.write(wire.encode(valid))
        before = await read_frame(reader)
        writer.write(BAD_INPUTS[name])
        rest = await read_until_closed(reader)
        writer.close()
        after = await good.invoke(create_request(ECHO, body=b"unaffected"), 2000)
        good.close()
        server.close()
        return before, rest, after, [connection.close_reason for connection in closed]

    with caplog.at_level(logging.WARNING, logger="pybroker.remoting"):
        before, rest, after, reasons = run(scenario)
    assert before.body == b"before" and rest == b""
    assert after.body == b"unaffected"
    assert reasons and reasons[0].startswith("protocol error")
    lines = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(lines) == 1 and "closing remoting connection" in lines[0]


@pytest.mark.parametrize("name", sorted(HINTS))
def test_foreign_protocol_hint_is_logged(name, caplog):
    async def scenario():
        server = await start_server("127.0.0.1", 0, make_table())
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        writer.write(BAD_INPUTS[name])
        rest = await read_until_closed(reader)
        writer.close()
        server.close()
        return rest

    with caplog.at_level(logging.WARNING, logger="pybroker.remoting"):
        assert run(scenario) == b""
    assert any(HINTS[name] in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize("limit, request_fields, request_body", [
    ({"frame_max_bytes": 1 << 16}, {}, b"x" * (1 << 16)),
    ({"ext_fields_max": 16}, {f"k{index}": "v" for index in range(17)}, b""),
])
@pytest.mark.parametrize("serialize_type", [0, 1])
def test_frame_and_ext_field_limits(limit, request_fields, request_body, serialize_type):
    async def scenario():
        closed = []
        server = await start_server("127.0.0.1", 0, make_table(),
                                    on_close=lambda connection, exc: closed.append(connection),
                                    **limit)
        good = await connected_client(server)
        within = await good.invoke(create_request(ECHO, {"k": "v"}, b"x" * 100), 2000)
        bad = await connected_client(server, serialize_type=serialize_type)
        with pytest.raises(ConnectionError):
            await bad.invoke(create_request(ECHO, request_fields, request_body), 2000)
        after = await good.invoke(create_request(ECHO, body=b"ok"), 2000)
        good.close()
        server.close()
        return within, after, [connection.close_reason for connection in closed]

    within, after, reasons = run(scenario)
    assert within.code == 0 and after.body == b"ok"
    assert len(reasons) == 1 and reasons[0].startswith("protocol error")


def test_idle_connection_is_closed():
    async def scenario():
        closed = asyncio.get_running_loop().create_future()
        server = await start_server(
            "127.0.0.1", 0, make_table(), idle_timeout_ms=300,
            on_close=first_close_reason(closed))
        loop = asyncio.get_running_loop()
        silent_reader, silent_writer = await asyncio.open_connection(
            *server.sockets[0].getsockname()[:2])
        started = loop.time()
        busy = await connected_client(server)
        # The busy client talks every 100 ms, so only the silent one goes idle.
        for _ in range(6):
            await busy.invoke(create_request(ECHO), 2000)
            await asyncio.sleep(0.1)
        rest = await read_until_closed(silent_reader)
        elapsed_s = loop.time() - started
        reason = await closed
        still = await busy.invoke(create_request(ECHO, body=b"alive"), 2000)
        silent_writer.close()
        busy.close()
        server.close()
        return rest, elapsed_s, reason, still

    rest, elapsed_s, reason, still = run(scenario)
    assert rest == b"" and reason == "idle for 300 ms"
    assert 0.25 <= elapsed_s < 5
    assert still.body == b"alive"


def test_partial_frame_is_closed_after_its_timeout():
    async def scenario():
        closed = asyncio.get_running_loop().create_future()
        server = await start_server(
            "127.0.0.1", 0, make_table(), idle_timeout_ms=60_000, partial_frame_timeout_ms=300,
            on_close=first_close_reason(closed))
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        frame = wire.encode(create_request(ECHO, body=b"x" * 100))
        # Slowloris: one byte every 50 ms keeps it from idling but never finishes the frame.
        sent = 0
        while not closed.done() and sent < len(frame) - 1:
            writer.write(frame[sent:sent + 1])
            sent += 1
            await asyncio.sleep(0.05)
        reason = await closed
        rest = await read_until_closed(reader)
        writer.close()
        server.close()
        return reason, rest, sent

    reason, rest, sent = run(scenario)
    assert reason == "frame incomplete after 300 ms" and rest == b""
    assert sent < 20


def stalled_peer_socket() -> socket.socket:
    """A client socket with a tiny receive window, so the server's replies back up fast."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    return sock


def test_peer_that_stops_reading_is_paused_then_closed():
    async def scenario():
        loop = asyncio.get_running_loop()
        connected, closed = loop.create_future(), loop.create_future()
        limits = dict(write_buffer_high_bytes=256 * 1024, write_stall_timeout_ms=400,
                      write_buffer_max_bytes=8 << 20)
        server = await start_server(
            "127.0.0.1", 0, make_table(), on_connect=first_of(connected),
            on_close=first_close_reason(closed),
            **limits)
        sock = stalled_peer_socket()
        await loop.sock_connect(sock, server.sockets[0].getsockname()[:2])
        server_side = await connected
        request = wire.encode(create_request(BIG, {"bytes": str(64 * 1024)}))
        sent_count, unsent_max_bytes, paused_seen = 0, 0, False
        # One request at a time, never reading a reply, until the server stops reading us.
        while not closed.done() and sent_count < 2000:
            try:
                sock.send(request)
                sent_count += 1
            except BlockingIOError:
                pass
            await asyncio.sleep(0.002)
            paused_seen = paused_seen or server_side.is_reading_paused
            unsent_max_bytes = max(unsent_max_bytes, server_side.unsent_bytes)
        reason = await closed
        other = await connected_client(server)
        still = await other.invoke(create_request(ECHO, body=b"served"), 2000)
        sock.close()
        server.close()
        return reason, paused_seen, unsent_max_bytes, sent_count, still

    reason, paused_seen, unsent_max_bytes, sent_count, still = run(scenario)
    assert reason == "peer read no replies for 400 ms"
    assert paused_seen and sent_count < 2000
    assert unsent_max_bytes <= 8 << 20
    assert still.body == b"served"


def test_unsent_bytes_over_the_hard_cap_close_at_once():
    async def scenario():
        loop = asyncio.get_running_loop()
        closed = loop.create_future()
        server = await start_server(
            "127.0.0.1", 0, make_table(), write_buffer_high_bytes=64 * 1024,
            write_stall_timeout_ms=60_000, write_buffer_max_bytes=1 << 20,
            on_close=first_close_reason(closed))
        sock = stalled_peer_socket()
        await loop.sock_connect(sock, server.sockets[0].getsockname()[:2])
        # Held frames keep a burst below the cap; one reply larger than it cannot be held.
        await loop.sock_sendall(sock, wire.encode(create_request(BIG, {"bytes": str(8 << 20)})))
        reason = await closed
        sock.close()
        server.close()
        return reason

    reason = run(scenario)
    assert reason.endswith("unsent bytes over write_buffer_max_bytes")


def test_burst_from_a_stalled_peer_is_held_then_answered_in_full():
    """Requests of one read are not all answered at once: frames wait in the receive buffer
    while the replies already queued exceed write_buffer_high_bytes, then run as they drain."""
    requests_count, reply_bytes, high_bytes = 64, 256 * 1024, 64 * 1024

    async def scenario():
        loop = asyncio.get_running_loop()
        connected, closed = loop.create_future(), loop.create_future()
        server = await start_server(
            "127.0.0.1", 0, make_table(), write_buffer_high_bytes=high_bytes,
            write_stall_timeout_ms=60_000, write_buffer_max_bytes=1 << 20,
            on_connect=first_of(connected), on_close=first_close_reason(closed))
        sock = stalled_peer_socket()
        await loop.sock_connect(sock, server.sockets[0].getsockname()[:2])
        server_side = await connected
        request = wire.encode(create_request(BIG, {"bytes": str(reply_bytes)}))
        await loop.sock_sendall(sock, request * requests_count)
        await asyncio.sleep(0.3)
        held_unsent_bytes = server_side.unsent_bytes
        still_open = not closed.done()
        received = bytearray()
        frame_bytes = len(wire.encode(create_response(create_request(BIG), 0,
                                                      body=b"\x5a" * reply_bytes)))
        while len(received) < requests_count * frame_bytes:
            chunk = await asyncio.wait_for(loop.sock_recv(sock, 1 << 20), DEADLINE_S / 2)
            assert chunk, f"closed: {closed.result() if closed.done() else None}"
            received += chunk
        sock.close()
        server.close()
        return still_open, held_unsent_bytes, len(received), frame_bytes

    still_open, held_unsent_bytes, received_bytes, frame_bytes = run(scenario)
    assert still_open
    # At most the pause threshold plus one reply (and its frame header) waits in memory.
    assert held_unsent_bytes <= high_bytes + frame_bytes
    assert received_bytes == requests_count * frame_bytes


@pytest.mark.parametrize("values", [
    {"frame_max_bytes": 4}, {"idle_timeout_ms": -1}, {"write_buffer_high_bytes": 0},
    {"write_buffer_high_bytes": 1 << 20, "write_buffer_max_bytes": 1 << 10},
    {"partial_frame_timeout_ms": 0}, {"ext_fields_max": "many"},
])
def test_limits_are_validated(values):
    with pytest.raises(ValueError):
        ConnectionLimits(**values)


def test_connections_over_the_cap_are_refused():
    async def scenario():
        opened, closed = [], []
        server = await start_server("127.0.0.1", 0, make_table(), connections_max=2,
                                    on_connect=opened.append,
                                    on_close=lambda connection, exc: closed.append(connection))
        first = await connected_client(server)
        second = await connected_client(server)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        refused = await read_until_closed(reader)
        writer.close()
        replies = [await client.invoke(create_request(ECHO, body=b"in"), 2000)
                   for client in (first, second)]
        first.close()
        await first.wait_closed()
        await asyncio.sleep(0.05)
        third = await connected_client(server)  # room again after one left
        reply = await third.invoke(create_request(ECHO, body=b"room"), 2000)
        counts = len(opened), len(closed), server.refused_connections_total
        server.close()
        return refused, replies, reply, counts

    refused, replies, reply, counts = run(scenario)
    assert refused == b"" and [r.body for r in replies] == [b"in", b"in"]
    assert reply.body == b"room" and counts == (3, 1, 1)
