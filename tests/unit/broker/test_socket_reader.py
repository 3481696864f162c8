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
The C reader runs on the remoting worker's loop (``selector.new_event_loop``: its selector
calls the reader itself, and a poll that finds a request reads it before asyncio's turn).
The C reader makes a read's first take with the send port's take in C (its ``c_first``); with
the port first of a TakerChain whose second taker answers frames of its own code (as the pull and
ACK takers do) the chain goes on in Python from that take: a seeded stream of sends, that
taker's frames and frames of a code no handler has, with a page-cache-busy moment in the middle
(fast failure diverts every send to the handlers) and the port closed at the end (the take
raises: the connection's fatal error); and sends and ACK_MESSAGEs through the send port and the
real ACK taker (test_pop_ack_fast.py's side), as a worker chains them.
"""
import asyncio
import fcntl
import random
import socket
import struct
import termios

import pytest

from pybroker import clock
from pybroker._fast.frame import TAKE_END, TAKE_OTHER, next_frame
from pybroker._fast.selector import new_event_loop
from pybroker.broker import send
from pybroker.broker.channel import Channel
from pybroker.broker.pop import ack
from pybroker.proc.remoting import _rpc_answer
from pybroker.protocol import command
from pybroker.protocol.command import RemotingCommand, create_response
from pybroker.remoting.connection import RemotingConnection
from pybroker.remoting.frame_taker import TakerChain
from pybroker.remoting.limits import ConnectionLimits
from pybroker.remoting.server import RequestTable
from pybroker.store.control_block import APPENDER
from tests.unit.broker.test_send_answer_socket import _read_all, _seeded_chunks, _tcp_pair
from tests.unit.broker.test_pop_ack_fast import AckSide
from tests.unit.broker.test_pop_ack_fast import _frames as _ack_frames
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
    # The C reader on the remoting worker's loop, whose selector calls it (selector.pyx).
    try:
        with asyncio.Runner(loop_factory=new_event_loop if read_in_c else None) as runner:
            runner.run(main())
    finally:
        ends.client.close()
    return ends.finish()


def _both(sides, scenario, wait_ms: int | None = None, **ends_options) -> tuple:
    """(asyncio's reader's run, the C reader's run) of ``scenario`` on two fast sides
    (``wait_ms``: with fast failure, its queue timeout)."""
    _, by_asyncio = sides(wait_ms=wait_ms)
    _, in_c = sides(wait_ms=wait_ms)
    return (_run(by_asyncio, False, scenario, **ends_options),
            _run(in_c, True, scenario, **ends_options))


def test_the_worker_loop_reads_the_socket_in_its_select(sides):
    """On the worker's loop the socket's C reader is called by the selector itself: a poll
    that finds the request hands no event of the socket back to asyncio, and the request is
    read and put (asyncio's own selector hands the socket's event back, unread)."""
    _, side = sides()

    async def scenario(ends: _Ends) -> None:
        await ends.write(frame("binary", body=b"first"))
        selector = asyncio.get_running_loop()._selector
        ends.client.sendall(frame("binary", body=b"in-select"))
        ready = selector.select(0.1)    # before the loop's own turn: the read is this select's
        assert ends.server.fileno() not in [key.fd for key, _ in ready]
        assert not _unread_bytes(ends.server)
        await settle(ends.side, ends.connection)
        ends.received += _read_all(ends.client)
    received, requests, _, _, _ = _run(side, True, scenario)
    assert len(requests) == 2 and _count_frames(received) == 2


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


_TAKEN_CODE, _UNKNOWN_CODE = 9001, 9002     # the second taker's frames; a code no handler has


class _CodeTaker:
    """A chain's taker after the send port, as the pull and ACK takers are: takes the leading
    frames of _TAKEN_CODE, answering them in one write through the connection."""

    def __init__(self, connection):
        self._connection = connection
        self.taken = 0

    def take(self, buffer, start: int, end: int) -> tuple[int, int, int]:
        position, answers = start, []
        try:
            while True:
                at, outcome, length = next_frame(buffer, position, end)
                if outcome == TAKE_END:
                    return position, TAKE_END, 0
                request = command.decode(buffer, at, length)
                if request.code != _TAKEN_CODE:
                    return position, TAKE_OTHER, length
                answers.append(command.encode(create_response(request, 0, "taken")))
                self.taken += 1
                position += length
        finally:
            if answers:
                self._connection.write_frames(b"".join(answers))

    def wait_for_space(self):
        raise AssertionError("never full")

    def close(self) -> None:
        pass


def _chain_chunks(rand: random.Random, count: int) -> list[bytes]:
    """_seeded_chunks' reads with the second taker's frames and unknown-code frames before,
    after or between them, or alone."""
    def request(code: int) -> bytes:
        return command.encode(RemotingCommand(code, 0, 395, rand.randrange(1 << 30), 0, None,
                                              {"k": "v"}))
    chunks = []
    for chunk in _seeded_chunks(rand, count):
        shape = rand.randrange(6)
        if shape == 0:
            chunk = request(_TAKEN_CODE) + chunk
        elif shape == 1:
            chunk = chunk + request(_TAKEN_CODE) + request(_TAKEN_CODE)
        elif shape == 2:
            chunk = chunk + request(_UNKNOWN_CODE) + request(_TAKEN_CODE)
        elif shape == 3:
            chunk = request(_TAKEN_CODE)
        elif shape == 4:
            chunk = request(_UNKNOWN_CODE) + request(_TAKEN_CODE) + chunk
        chunks.append(chunk)
    return chunks


def test_a_chain_after_the_port_taken_in_c_gets_the_same_answers(sides):
    """The port's take in C, then the chain in Python: the same answers, records, figures,
    the second taker's takes; a page-cache-busy moment sends every send to the handlers
    alike; a closed port ends both connections with the same fatal error (ValueError)."""
    chunks = _chain_chunks(random.Random(_SEED + 3), 300)
    takers: list[_CodeTaker] = []

    async def scenario(ends: _Ends) -> None:
        connection = ends.connection
        port = connection.frame_taker
        second = _CodeTaker(connection)
        takers.append(second)
        connection.use_frame_taker(TakerChain([port, second]))
        if connection._reader is not None:
            assert connection.frame_taker.c_first is port.c_first is not None
        busy_since = ends.side.control.worker(APPENDER.slot).storer("busy_since_ms")
        core = ends.side.putter.core
        for index, data in enumerate(chunks):
            if index == len(chunks) // 3:
                busy_since(clock.now_ms() - 60_000)     # a drain running for a minute
                fast_puts = core.fast_puts_total
            elif index == len(chunks) // 2:
                assert core.fast_puts_total == fast_puts, "a fast put while the cache was busy"
                busy_since(0)
            await ends.write(data)
        port.close()
        await ends.write(frame("binary", body=b"to-a-closed-port"))
        await ends.closed()
    by_asyncio, in_c = _both(sides, scenario, wait_ms=60_000)
    assert in_c == by_asyncio
    received, requests, _, lost, _ = in_c
    assert takers[0].taken == takers[1].taken > 30
    assert len(requests) > 150 and _count_frames(received) > 250
    assert lost == [ValueError]
    assert b"[PC_SYNCHRONIZED]" in received, "the busy moment's sends refused by the handlers"


class _ChainSide(AckSide):
    """A fast side whose connections are wired as proc/remoting.py wires a client connection
    of a worker with sends and acks on their fast paths: the send port, then the ACK taker,
    in a TakerChain; the send and ACK handlers behind them."""

    def new_connection(self, read_in_c: bool = True) -> RemotingConnection:
        ctx, stats = self.ctx, self.recorder

        def counted(kind, handler):
            async def handle(connection, request):
                # What proc/remoting.py's _local counts around a handler.
                started = stats.now_ns()
                token = stats.request_started(kind)
                response = None
                try:
                    response = await handler(ctx, connection.attachment, request)
                    return response
                finally:
                    stats.request_finished(kind, token, (stats.now_ns() - started) // 1000,
                                           _rpc_answer(request, response))
            return handle
        table = RequestTable({**{code: counted("send", send.handle_send_message)
                                 for code in send.HANDLERS},
                              **{code: counted("ack", ack.handle_ack_message)
                                 for code in ack.HANDLERS}})
        return RemotingConnection(table, ConnectionLimits.from_config(self.config.remoting),
                                  read_in_c=read_in_c)

    def attach(self, connection: RemotingConnection, write=None) -> None:
        connection.attachment = Channel("0:1", connection.remote_address, send=connection.send)
        port = self.putter.open_fast_port(send.born_host_of(connection.remote_address),
                                          connection.write_frames)
        connection.lend_socket(port.lend_socket)
        connection.use_frame_taker(TakerChain([port, self.port.open(connection.write_frames)]))


def test_sends_and_acks_through_the_chain_get_the_same_answers(tmp_path):
    """Seeded fast and handler sends and ACK_MESSAGEs (taken by the ACK taker or left to its
    handler) interleaved in reads of 1 to 12 frames: the same answers, records and figures
    read in C (the send port's take in C, the ACK taker after it in Python) as by asyncio."""
    rand = random.Random(_SEED + 4)
    frames = [whole for chunk in _seeded_chunks(rand, 200) for whole in _split(chunk)]
    frames += _ack_frames(rand, 200, False)
    rand.shuffle(frames)
    chunks, at = [], 0
    while at < len(frames):
        size = rand.randrange(1, 13)
        chunks.append(b"".join(frames[at:at + size]))
        at += size
    made: list[_ChainSide] = []

    def chain_sides(wait_ms=None):
        made.append(_ChainSide(tmp_path, f"chain{len(made)}", True))
        return None, made[-1]

    async def scenario(ends: _Ends) -> None:
        for data in chunks:
            await ends.write(data)
    try:
        by_asyncio, in_c = _both(chain_sides, scenario)
        assert in_c == by_asyncio
        assert made[0].ack_figures() == made[1].ack_figures()
        assert made[0].port.taker.acks_total == made[1].port.taker.acks_total > 40
        assert made[1].putter.core.fast_puts_total > 100
    finally:
        for side in made:
            side.close()


def _split(data: bytes) -> list[bytes]:
    """The frames of ``data``."""
    frames, at = [], 0
    while at < len(data):
        length = int.from_bytes(data[at:at + 4], "big") + 4
        frames.append(data[at:at + length])
        at += length
    return frames


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
