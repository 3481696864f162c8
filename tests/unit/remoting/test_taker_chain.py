"""A chain of frame takers keeps a connection's requests in order and waits for the full one.

Method: a real RemotingConnection (a transport that keeps what it is given) walks real encoded
frames with a TakerChain of two takers that each take the frames of their own request code
(frame.next_frame locates them, command.decode reads the code) and log them; the frames of a
third code are the connection's, dispatched to a handler that logs them too. Frames of the
three codes, interleaved at random (seeded), in one read and byte by byte, must be logged in
the order they were sent; a taker that answers TAKE_FULL once stops the walk until its
wait_for_space resolves, then the walk goes on where it stopped.
"""
import asyncio

from pybroker._fast.frame import TAKE_END, TAKE_FULL, TAKE_OTHER, next_frame
from pybroker.protocol import command
from pybroker.protocol.command import RemotingCommand
from pybroker.remoting.connection import RemotingConnection
from pybroker.remoting.frame_taker import TakerChain
from pybroker.remoting.limits import ConnectionLimits

FIRST, SECOND, OTHER = 301, 302, 303


class Transport:
    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default

    def set_write_buffer_limits(self, high=None, low=None):
        pass

    def get_write_buffer_size(self):
        return 0

    def is_closing(self):
        return False

    def write(self, data):
        pass

    def writelines(self, chunks):
        pass

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


class CodeTaker:
    """Takes the leading frames of one request code; ``full_once_at``: answer TAKE_FULL once
    when that many frames were taken."""

    def __init__(self, code: int, log: list, full_once_at: int = -1):
        self.code, self.log, self.full_once_at = code, log, full_once_at
        self.taken = 0
        self.waits = 0
        self.closed = False

    def take(self, buffer, start, end):
        position = start
        while True:
            at, outcome, length = next_frame(buffer, position, end)
            if outcome == TAKE_END:
                return position, TAKE_END, 0
            if self.taken == self.full_once_at:
                self.full_once_at = -1
                return position, TAKE_FULL, 0
            request = command.decode(buffer, at, length)
            if request.code != self.code:
                return position, TAKE_OTHER, length
            self.log.append(request.opaque)
            self.taken += 1
            position += length

    def wait_for_space(self):
        self.waits += 1
        future = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.01, future.set_result, None)
        return future

    def close(self):
        self.closed = True


def frames(rand, count: int) -> tuple[bytes, list[int], list[int]]:
    """The frames, their opaques in order, and those of the connection's code."""
    data, opaques, others = b"", [], []
    for opaque in range(1, count + 1):
        code = rand.choice((FIRST, FIRST, SECOND, SECOND, OTHER))
        data += command.encode(RemotingCommand(code, 0, 395, opaque, 0, None, {"k": "v"}))
        opaques.append(opaque)
        if code == OTHER:
            others.append(opaque)
    return data, opaques, others


def run(data: bytes, count: int, byte_by_byte: bool, full_once_at: int = -1):
    log: list[int] = []
    dispatched: list[int] = []
    takers = [CodeTaker(FIRST, log), CodeTaker(SECOND, log, full_once_at)]

    async def main():
        connection = RemotingConnection(lambda _, request: (log.append(request.opaque),
                                                           dispatched.append(request.opaque)),
                                        ConnectionLimits())
        connection.connection_made(Transport())
        connection.use_frame_taker(TakerChain(takers))
        for chunk in ([data[at:at + 1] for at in range(len(data))] if byte_by_byte
                      else [data]):
            buffer = connection.get_buffer(len(chunk))
            buffer[:len(chunk)] = chunk
            del buffer
            connection.buffer_updated(len(chunk))
        for _ in range(200):       # bounded: the test then fails on the log
            if len(log) == count:
                break
            await asyncio.sleep(0.01)
        connection.frame_taker.close()
    asyncio.run(main())
    return log, dispatched, takers


def test_interleaved_frames_keep_their_order(rand):
    data, opaques, others = frames(rand, 60)
    for byte_by_byte in (False, True):
        log, dispatched, takers = run(data, len(opaques), byte_by_byte)
        assert log == opaques
        assert dispatched == others
        assert takers[0].taken and takers[1].taken
        assert all(taker.closed for taker in takers)


def test_a_full_taker_holds_the_rest_until_it_has_room(rand):
    data, opaques, others = frames(rand, 60)
    log, dispatched, takers = run(data, len(opaques), False, full_once_at=3)
    assert log == opaques and dispatched == others
    assert takers[1].waits == 1 and takers[0].waits == 0


def test_after_first_answers_as_take(rand):
    """A chain told its first taker's take (the reader in C makes it) answers, takes and
    waits as one that made the take itself: from every frame boundary of seeded frames of
    three codes, and with the first taker full at once."""
    data, opaques, _ = frames(rand, 40)
    buffer = bytearray(data)
    boundaries, at = [], 0
    while at < len(data):
        boundaries.append(at)
        at += int.from_bytes(data[at:at + 4], "big") + 4
    for start in boundaries:
        for full_once_at in (-1, 0):
            answers = []
            for told in (False, True):
                log: list[int] = []
                takers = [CodeTaker(FIRST, log, full_once_at), CodeTaker(SECOND, log)]
                chain = TakerChain(takers)
                if told:
                    answer = chain.after_first(buffer, len(data),
                                               takers[0].take(buffer, start, len(data)))
                else:
                    answer = chain.take(buffer, start, len(data))
                full = chain._full is takers[0] if answer[1] == TAKE_FULL else None
                answers.append((answer, log, full))
            assert answers[0] == answers[1], start
