"""A connection whose plain socket is read in C (pybroker._fast.socket_reader.SocketReader)
answers exactly as one read by asyncio's transport.

Method: the send fast path's side of test_send_fast.py (rings, putter, stand-in appender,
handlers) twice, each as a real RemotingConnection on one end of a real TCP connection on
127.0.0.1, wired as proc/remoting.py wires it: once with ``read_in_c=False`` (asyncio's
``_read_ready`` -> ``get_buffer`` -> ``recv_into`` -> ``buffer_updated``), once with the C
reader. The other end writes the same seeded requests in the same writes, and what it reads
back, the ring's put requests, the counted figures and how the connection ended must be the
same: fast sends and sends left to the handlers in chunks of 1 to 12 frames, frames split in
two at every byte, a malformed frame (the connection's protocol error); a peer that closes in
the middle of a frame or resets the connection (connection_lost once, with asyncio's error);
a peer that stops reading its answers (reading pauses and resumes, nothing lost or reordered).
"""
import asyncio
import fcntl
import random
import socket
import struct
import termios

import pytest

from pybroker.broker import send
from pybroker.remoting.limits import ConnectionLimits
from tests.unit.broker.test_send_answer_socket import _read_all, _seeded_chunks, _tcp_pair
from tests.unit.broker.test_send_fast import PEER, Side, frame, settle, side_pairs

_SEED = 20261207


@pytest.fixture
def sides(tmp_path):
    yield from side_pairs(tmp_path)


class _Ends:
    """Both ends of one run: the connection (read in C or not) and the peer's socket."""

    def __init__(self, side: Side, read_in_c: bool, limits: ConnectionLimits | None = None,
                 buffer_bytes: int | None = None):
        self.side = side
        self.server, self.client = _tcp_pair(buffer_bytes)
        # Each write leaves at once (no Nagle delay): the reads are the writes.
        self.client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.connection = side.new_connection(read_in_c)
        if limits is not None:
            self.connection.limits = limits
        self.lost: list = []        # connection_lost's exc, each time it runs
        self.received = bytearray()

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        send._random.seed(7)
        connection = self.connection
        lost = connection.connection_lost

        def connection_lost(exc):
            self.lost.append(exc)
            lost(exc)
        connection.connection_lost = connection_lost
        await loop.connect_accepted_socket(lambda: connection, self.server)
        # The fake transport's peer, so that the runs' records are the same bytes.
        connection.remote_address = "%s:%d" % PEER
        self.side.attach(connection)
        self.side.refresh()

    async def write(self, data: bytes) -> None:
        """The peer writes ``data``; the connection reads all of it (one read or more) and
        every put it made is answered before this returns."""
        loop = asyncio.get_running_loop()
        sent_at = loop.time()
        await loop.sock_sendall(self.client, data)
        for _ in range(10_000):
            if not _unread_bytes(self.server) or self.connection.is_closed \
                    or self.connection.is_reading_paused:
                break
            await asyncio.sleep(0)
        await settle(self.side, self.connection)
        self.received += _read_all(self.client)
        # The reads touched the idle timer (the answers in C do not).
        assert self.connection._timer.last_activity >= sent_at

    async def closed(self) -> None:
        await asyncio.wait_for(asyncio.shield(self.connection.closed_future), 10)
        for _ in range(5):
            await asyncio.sleep(0)      # a second connection_lost would run here

    def finish(self) -> tuple:
        """What the two runs must agree on."""
        self.client.close()
        counted = self.side.counted()
        # SEND_OLDEST_MS: a time when a send was left unanswered (the one before the fault).
        counted[0][-1] = bool(counted[0][-1])
        return (bytes(self.received), self.side.appender.requests, counted,
                [type(exc) for exc in self.lost], self.connection.close_reason)


def _run(side: Side, read_in_c: bool, scenario, **ends_options) -> tuple:
    ends = _Ends(side, read_in_c, **ends_options)

    async def main():
        await ends.open()
        assert (ends.connection._reader is not None) == read_in_c
        await scenario(ends)
        if not ends.connection.is_closed:
            ends.connection.close()
            await ends.closed()
    try:
        asyncio.run(main())
    finally:
        ends.client.close()
    return ends.finish()


def _both(sides, scenario, **ends_options) -> tuple:
    """(asyncio's reader's run, the C reader's run) of ``scenario`` on two fast sides."""
    _, by_asyncio = sides()
    _, in_c = sides()
    return (_run(by_asyncio, False, scenario, **ends_options),
            _run(in_c, True, scenario, **ends_options))


def test_a_mixed_stream_gets_the_same_answers(sides):
    """Seeded fast and handler sends in chunks, frames split at every byte, then a malformed
    frame: the same answers, records and figures, the same protocol error, one close."""
    chunks = _seeded_chunks(random.Random(_SEED), 300)
    split = [frame("binary", body=b"split-binary"),
             frame("go", queue_id="4")]       # queue 4 of 4: the handler's refusal
    # The first frame's length field says 40 bytes, its header length 1,000: malformed.
    malformed = (40).to_bytes(4, "big") + (1000).to_bytes(4, "big") + b"\0" * 40

    async def scenario(ends: _Ends) -> None:
        for data in chunks:
            await ends.write(data)
        for whole in split:
            for at in range(1, len(whole)):
                await ends.write(whole[:at])
                await ends.write(whole[at:])
        await ends.write(frame("binary", body=b"before-the-fault") + malformed)
        await ends.closed()
    by_asyncio, in_c = _both(sides, scenario)
    assert in_c == by_asyncio
    received, requests, _, lost, reason = in_c
    assert len(requests) > 250 + 160, "every split frame should reach the ring"
    assert _count_frames(received) > 300 + 2 * 160
    assert lost == [type(None)] and reason.startswith("protocol error: ")


@pytest.mark.parametrize("how", ["close", "reset"])
def test_a_peer_gone_in_the_middle_of_a_frame(sides, how):
    """The peer closes (EOF) or resets (ECONNRESET) with half a frame sent: the frames before
    it are answered, connection_lost runs once, with what asyncio reports (None for an EOF,
    ConnectionResetError for a reset)."""
    rand = random.Random(_SEED + 1)
    whole = [frame("binary", body=bytes([rand.randrange(256)]) * 50) for _ in range(20)]
    half = frame("json310", body=b"never-whole")

    async def scenario(ends: _Ends) -> None:
        await ends.write(b"".join(whole))
        await ends.write(half[:len(half) // 2])
        if how == "reset":
            ends.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                   (1).to_bytes(4, "little") + (0).to_bytes(4, "little"))
        ends.client.close()
        await ends.closed()
    by_asyncio, in_c = _both(sides, scenario)
    assert in_c == by_asyncio
    received, requests, _, lost, _ = in_c
    assert len(requests) == 20 and _count_frames(received) == 20
    assert lost == [ConnectionResetError if how == "reset" else type(None)]


def test_a_peer_that_stops_reading_pauses_reading_and_loses_nothing(sides):
    """The peer writes 2,400 fast sends without reading (4 KiB socket buffers, a 4 KiB
    write_buffer_high_bytes): reading pauses, resumes once the peer reads, and every answer
    arrives in order, as through asyncio's reader."""
    rand = random.Random(_SEED + 2)
    chunks = [b"".join(frame("json310", body=bytes([rand.randrange(256)]) * 200)
                       for _ in range(8)) for _ in range(300)]
    limits = ConnectionLimits(write_buffer_high_bytes=4096, write_buffer_max_bytes=64 << 20)
    expected_answers = 8 * len(chunks)

    async def scenario(ends: _Ends) -> None:
        loop = asyncio.get_running_loop()
        side, connection = ends.side, ends.connection
        writing = asyncio.ensure_future(loop.sock_sendall(ends.client, b"".join(chunks)))
        paused_seen = False
        for _ in range(20_000):         # the appender and the wake-ups run; the peer does not
            side.appender.run()
            side.putter.on_wake()
            await asyncio.sleep(0.0005)
            paused_seen = paused_seen or connection.is_reading_paused
            if paused_seen and connection.unsent_bytes:
                break
        assert paused_seen, "reading should pause while the peer does not read"
        answers = 0
        for _ in range(30_000):         # now the peer reads everything
            data = _read_all(ends.client)
            ends.received += data
            answers = _count_frames(ends.received)
            if answers == expected_answers and writing.done():
                break
            side.appender.run()
            side.putter.on_wake()
            await asyncio.sleep(0.0005)
        await writing
        assert not connection.is_reading_paused
        assert answers == expected_answers, answers
    by_asyncio, in_c = _both(sides, scenario, limits=limits, buffer_bytes=4096)
    assert in_c == by_asyncio
    assert len(in_c[1]) == 2400


def _unread_bytes(sock: socket.socket) -> int:
    """Bytes in ``sock``'s kernel receive queue (FIONREAD)."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]


def _count_frames(data: bytes) -> int:
    count = at = 0
    while at + 4 <= len(data):
        length = int.from_bytes(data[at:at + 4], "big") + 4
        if at + length > len(data):
            break
        at += length
        count += 1
    return count
