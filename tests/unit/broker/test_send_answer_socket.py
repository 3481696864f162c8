"""The fast sends' answers written to the socket straight from C are the answers the
connection's transport writes, byte for byte and in the same order.

Method: test_send_fast.py's fast side twice with the same seeded requests, fed in the same
seeded chunks: once over its fake transport (every answer through
RemotingConnection.write_frames and the transport: the path before the socket was lent), once
as a real RemotingConnection over one end of a real TCP connection on 127.0.0.1 in a real
asyncio transport, wired as proc/remoting.py wires it (the connection lends its socket to the
fast port: SendCompletions.send_outputs writes each drain's answers with one send while
nothing is queued or buffered before them). What the other end of the TCP connection reads
must be the fake transport's bytes exactly, the ring's put requests and the counted figures
the same. A peer that stops reading (small socket buffers) must not block the worker's
wake-up nor lose or reorder an answer: the rest waits in the transport's buffer, the socket
is taken back from C until it is empty, and then lent again.
"""
import asyncio
import random
import socket

import pytest

from pybroker.broker import send
from tests.unit.broker.test_send_fast import (PEER, ROWS, Side, batch_body, feed, frame,
                                              settle, side_pairs)

_SEED = 20261206


@pytest.fixture
def sides(tmp_path):
    yield from side_pairs(tmp_path)


def _tcp_pair(buffer_bytes: int | None = None) -> tuple[socket.socket, socket.socket]:
    """(broker end, client end) of a TCP connection on 127.0.0.1, non-blocking; with
    ``buffer_bytes`` both ends' kernel buffers are that small (a slow reader fills them)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = socket.socket()
    if buffer_bytes is not None:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)
    client.connect(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    if buffer_bytes is not None:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_bytes)
    for end in (server, client):
        end.setblocking(False)
    return server, client


def _read_all(peer: socket.socket) -> bytes:
    data = bytearray()
    while True:
        try:
            chunk = peer.recv(1 << 20)
        except BlockingIOError:
            return bytes(data)
        if not chunk:
            return bytes(data)
        data += chunk


def _seeded_chunks(rand: random.Random, count: int) -> list[bytes]:
    """``count`` requests - the fast-path table's rows (fast and handler sends) and plain
    fast sends of random bodies - in chunks of 1 to 12 frames (one read each)."""
    frames = []
    for _ in range(count):
        if rand.random() < 0.3:
            frames.append(rand.choice(ROWS)[1])
        else:
            style = rand.choice(["binary", "json310", "go"])
            body = bytes(rand.randrange(256) for _ in range(rand.randrange(1, 300)))
            frames.append(frame(style, body=body, queue_id=str(rand.randrange(4)),
                                oneway=rand.random() < 0.05))
    frames.append(frame("batch-binary", batch="true",
                        body=batch_body([(0, b"b1", ""), (0, b"b2", "K\x01v\x02")])))
    chunks, at = [], 0
    while at < len(frames):
        size = rand.randrange(1, 13)
        chunks.append(b"".join(frames[at:at + size]))
        at += size
    return chunks


class _Counted:
    """A writer that counts what reaches the connection's write_frames (the transport path)."""

    def __init__(self, write):
        self.write = write
        self.bytes = 0

    def __call__(self, frames: bytes) -> None:
        self.bytes += len(frames)
        self.write(frames)


async def _serve_on_socket(side: Side, sock: socket.socket):
    """The fast side's connection over ``sock`` in a real asyncio transport, attached as a
    worker attaches it; (connection, transport, counted writer)."""
    loop = asyncio.get_running_loop()
    connection = side.new_connection()
    transport, _ = await loop.connect_accepted_socket(lambda: connection, sock)
    # The fake transport's peer (born host of the records, the handlers' remarks), so that
    # the two runs' requests are the same bytes.
    connection.remote_address = "%s:%d" % PEER
    writer = _Counted(connection.write_frames)
    side.attach(connection, writer)
    side.refresh()
    return connection, transport, writer


def _over_fake_transport(side: Side, chunks: list[bytes]) -> tuple[bytes, list, tuple]:
    async def main():
        send._random.seed(7)
        connection, transport = side.connect()
        side.refresh()
        for data in chunks:
            feed(connection, data)
            await settle(side, connection)
        return bytes(transport.written), side.appender.requests, side.counted()
    return asyncio.run(main())


def _over_socket(side: Side, chunks: list[bytes]) -> tuple[bytes, list, tuple, _Counted]:
    """``chunks`` through ``side`` on a real TCP connection: what the client end read, the
    ring's put requests, the counted figures and the writer that counted the transport
    path."""
    server, client = _tcp_pair()

    async def main():
        send._random.seed(7)
        connection, _, writer = await _serve_on_socket(side, server)
        received = bytearray()
        for data in chunks:
            feed(connection, data)
            await settle(side, connection)
            received += _read_all(client)
        connection.close()
        return bytes(received), side.appender.requests, side.counted(), writer
    try:
        return asyncio.run(main())
    finally:
        client.close()


def test_answers_sent_in_c_are_the_transport_answers(sides):
    """Seeded requests: the bytes the client end reads equal the fake transport's."""
    chunks = _seeded_chunks(random.Random(_SEED), 400)
    _, reference_side = sides()
    _, socket_side = sides()
    expected = _over_fake_transport(reference_side, chunks)
    received, requests, counted, writer = _over_socket(socket_side, chunks)
    assert received == expected[0]
    assert requests == expected[1]
    assert counted == expected[2]
    assert socket_side.putter.core.fast_puts_total > 250, "the seed should hit the fast path"
    # Most answers went out in C (the handlers' answers take the socket back for a moment:
    # the fast answers right after them go through the transport).
    assert writer.bytes < len(received) // 2, (writer.bytes, len(received))


def test_fast_only_answers_never_reach_the_transport(sides):
    """A connection of fast sends only: every answer goes out in C."""
    rand = random.Random(_SEED + 1)
    chunks = [b"".join(frame("binary", body=bytes([rand.randrange(256)]) * 100)
                       for _ in range(rand.randrange(1, 9))) for _ in range(50)]
    _, reference_side = sides()
    _, socket_side = sides()
    expected = _over_fake_transport(reference_side, chunks)
    received, _, _, writer = _over_socket(socket_side, chunks)
    assert received == expected[0]
    assert writer.bytes == 0


def test_a_handler_answer_queued_first_stays_first(sides):
    """A handler's answer queued for the end of the loop turn when a completion wake-up
    answers fast sends in the same turn: it leaves first, as through the transport."""
    rounds = [frame("binary", body=b"fast-%d" % index) + frame("binary", queue_id="4")
              + frame("go", body=b"after-%d" % index) for index in range(20)]

    async def run(side: Side, connection) -> None:
        for data in rounds:
            feed(connection, data)      # the handler answers at once (an eager task)
            assert connection._writes, "the handler's answer should wait for the flush"
            side.appender.run()
            side.putter.on_wake()       # the eventfd's callback in the same loop turn
            await settle(side, connection)

    async def reference(side: Side) -> bytes:
        connection, transport = side.connect()
        side.refresh()
        await run(side, connection)
        return bytes(transport.written)

    async def on_socket(side: Side, sock: socket.socket, client: socket.socket) -> bytes:
        connection, _, writer = await _serve_on_socket(side, sock)
        await run(side, connection)
        connection.close()
        assert writer.bytes > 0
        return _read_all(client)
    _, reference_side = sides()
    _, socket_side = sides()
    expected = asyncio.run(reference(reference_side))
    server, client = _tcp_pair()
    try:
        received = asyncio.run(on_socket(socket_side, server, client))
    finally:
        client.close()
    assert received == expected


def test_a_peer_that_does_not_read_blocks_nothing_and_loses_nothing(sides):
    """The client end stops reading (4 KiB socket buffers): the wake-ups go on, the answers
    the socket does not take wait in the transport's buffer, the socket is taken back from C
    meanwhile and lent again once the buffer is empty; the client then reads every answer,
    in order, as the transport path writes them."""
    rand = random.Random(_SEED + 2)
    first = [b"".join(frame("json310", body=bytes([rand.randrange(256)]) * 200)
                      for _ in range(8)) for _ in range(300)]
    after = [b"".join(frame("binary", body=b"after") for _ in range(3)) for _ in range(5)]
    _, reference_side = sides()
    _, socket_side = sides()
    expected = _over_fake_transport(reference_side, first + after)[0]
    server, client = _tcp_pair(4096)

    async def main():
        connection, transport, writer = await _serve_on_socket(socket_side, server)
        for data in first:
            feed(connection, data)
            await settle(socket_side, connection)       # every wake-up returned
        assert transport.get_write_buffer_size() > 0, "the socket should have filled"
        assert not connection._socket_lent
        buffered_to = writer.bytes
        assert buffered_to > 0
        received = bytearray()
        for _ in range(10_000):      # the client reads; the loop drains the transport
            received += _read_all(client)
            if not transport.get_write_buffer_size():
                break
            await asyncio.sleep(0.001)
        for data in after:
            feed(connection, data)
            await settle(socket_side, connection)
            received += _read_all(client)
        # The first write after the buffer emptied gave the socket back to C.
        lent_again = connection._socket_lent
        connection.close()
        return bytes(received), lent_again, writer.bytes - buffered_to
    try:
        received, lent_again, written_after = asyncio.run(main())
    finally:
        client.close()
    assert received == expected
    assert lent_again
    assert written_after < sum(len(chunk) for chunk in after), written_after
