# The gRPC consumer activities' ACK_MESSAGE requests through the worker's ACK fast path.
"""ACK_MESSAGE of the gRPC consumer activities (AckMessage, the receive's result filter, the
ack after a DLQ send-back: ``consumer.ack_one``) through the gRPC worker's ACK_MESSAGE fast path
(proc/ack_port.py over ``_fast/pop/``, the remoting connections' door; docs/architecture/pop.md),
so the C rule a remoting ack takes also takes the proxy's acks, and no second ack rule is written.

:meth:`FastAcks.put` encodes the very request the handler would be given as a remoting frame
(JSON header, as the Java client sends it) and lets the worker's ``AckTaker`` take it: the ack
record goes into the send ring, its put's outcome ends it (``AckEnd``) and the fast path's
answer frame comes back to :meth:`FastAcks._answered`, which resolves the waiting future by the
frame's opaque. A request the taker does not take (its table's checks, an order or malformed
handle, the page cache busy, the ring full) is left to the caller, which runs the handler on it
as before; either way the answer's code is the handler's (tests/unit/grpc_service/
test_fast_acks.py drives both with the same seeded acks and compares answers and records).
:meth:`FastAcks.put_frames` offers frames written already (FrontAcks', one take per hand-off
wake-up). The answer frames are read by their opaque alone where they are the fast path's
SUCCESS answer (``ack_fast.answer_pieces``, AckEnd's), decoded otherwise.
"""
import asyncio
import functools

from pybroker._fast.frame import TAKE_END, TAKE_FULL
from pybroker.broker.pop import ack_fast
from pybroker.protocol import command
from pybroker.protocol.codes import ResponseCode
from pybroker.protocol.command import RemotingCommand

__all__ = ["FastAcks"]

_LENGTH_BYTES = 4
_FRAME_HEAD_BYTES = 8               # the frame's length word, then the header's
_OPAQUE_MAX = 0x7FFF_FFFF          # an int32 opaque; turns round past it


def _resolve(answered: asyncio.Future, code: int) -> None:
    if not answered.done():                 # (its awaiting task may have been cancelled)
        answered.set_result(code)


class FastAcks:
    """The gRPC worker's door to its ACK fast path (``port``: proc/ack_port.FastAckPort)."""

    def __init__(self, port):
        self._port = port
        self._taker = None                  # opened on the worker's loop (its first ack)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: dict = {}          # opaque -> its answer code's callback
        self._opaque = 0
        self.taken_total = 0
        # The fast path's answer header around its opaque (AckEnd's, SUCCESS).
        self._answer_pieces = ack_fast.answer_pieces()

    def _open(self):
        taker = self._taker
        if taker is None:
            taker = self._taker = self._port.open(self._answered)
            # (asyncio.get_running_loop() is a getpid system call on Python 3.11)
            self._loop = asyncio.get_running_loop()
        return taker

    def put(self, request: RemotingCommand) -> asyncio.Future | None:
        """The future of ``request``'s answer code when the fast path took it, else None (the
        handler's). ``request``'s opaque is replaced."""
        taker = self._open()
        request.opaque = self.next_opaque()
        frame = bytearray(command.encode(request))
        _, outcome, _ = taker.take(frame, 0, len(frame))
        if outcome != TAKE_END:
            return None
        assert self._loop is not None
        answered = self._loop.create_future()
        self._waiting[request.opaque] = functools.partial(_resolve, answered)
        self.taken_total += 1
        return answered

    def next_opaque(self) -> int:
        """The opaque of a frame for :meth:`put_frames`."""
        self._opaque = self._opaque % _OPAQUE_MAX + 1
        return self._opaque

    def put_frames(self, frames: bytearray, starts: list[int], opaques: list[int],
                   answered: list) -> list[int]:
        """Offer the ACK_MESSAGE frames in ``frames`` (the i-th at ``starts[i]``, its opaque
        ``opaques[i]`` from :meth:`next_opaque`) in one take: ``answered[i](code)`` is called
        with the answer code of each one the fast path took; returns the indexes of those it
        did not take (the handler's), in order."""
        taker = self._open()
        waiting = self._waiting
        count = len(starts)
        for index in range(count):
            # Registered before the take; the answers come on a later turn of the loop.
            waiting[opaques[index]] = answered[index]
        left: list[int] = []
        at, end, index = 0, len(frames), 0
        while at < end:
            position, outcome, frame_length = taker.take(frames, at, end)
            while index < count and starts[index] < position:
                index += 1                  # taken
            if outcome == TAKE_END:
                break
            if outcome == TAKE_FULL:        # no room now: the handler's (it waits for room)
                left.extend(range(index, count))
                break
            left.append(index)              # TAKE_OTHER or TAKE_FAULT: the handler judges it
            index += 1
            at = position + frame_length
        for index in left:
            del waiting[opaques[index]]
        self.taken_total += count - len(left)
        return left

    def _answered(self, frames: bytes) -> None:
        """The fast path's answer frames (one write per batch of outcomes): each the SUCCESS
        answer of ``ack_fast.answer_pieces`` around its opaque, read as such; any other frame
        decoded."""
        before, after = self._answer_pieces
        code: int
        opaque_at = _FRAME_HEAD_BYTES + len(before)
        at, end = 0, len(frames)
        while at < end:
            length = int.from_bytes(frames[at:at + _LENGTH_BYTES], "big") + _LENGTH_BYTES
            if frames.startswith(before, at + _FRAME_HEAD_BYTES) \
                    and frames.endswith(after, at, at + length):
                opaque = int(frames[at + opaque_at:at + length - len(after)])
                code = int(ResponseCode.SUCCESS)
            else:
                answer = command.decode(frames, at, length)
                opaque, code = answer.opaque, answer.code
            at += length
            answered = self._waiting.pop(opaque, None)
            if answered is not None:
                answered(code)
