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
"""
import asyncio

from pybroker._fast.frame import TAKE_END
from pybroker.protocol import command
from pybroker.protocol.command import RemotingCommand

__all__ = ["FastAcks"]

_LENGTH_BYTES = 4
_OPAQUE_MAX = 0x7FFF_FFFF          # an int32 opaque; turns round past it


class FastAcks:
    """The gRPC worker's door to its ACK fast path (``port``: proc/ack_port.FastAckPort)."""

    def __init__(self, port):
        self._port = port
        self._taker = None                  # opened on the worker's loop (its first ack)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: dict[int, asyncio.Future] = {}
        self._opaque = 0
        self.taken_total = 0

    def put(self, request: RemotingCommand) -> asyncio.Future | None:
        """The future of ``request``'s answer code when the fast path took it, else None (the
        handler's). ``request``'s opaque is replaced."""
        taker = self._taker
        if taker is None:
            taker = self._taker = self._port.open(self._answered)
            # (asyncio.get_running_loop() is a getpid system call on Python 3.11)
            self._loop = asyncio.get_running_loop()
        self._opaque = self._opaque % _OPAQUE_MAX + 1
        request.opaque = self._opaque
        frame = bytearray(command.encode(request))
        _, outcome, _ = taker.take(frame, 0, len(frame))
        if outcome != TAKE_END:
            return None
        assert self._loop is not None
        answered = self._loop.create_future()
        self._waiting[request.opaque] = answered
        self.taken_total += 1
        return answered

    def _answered(self, frames: bytes) -> None:
        """The fast path's answer frames (one write per batch of outcomes)."""
        at, end = 0, len(frames)
        while at < end:
            length = int.from_bytes(frames[at:at + _LENGTH_BYTES], "big") + _LENGTH_BYTES
            answer = command.decode(frames, at, length)
            at += length
            answered = self._waiting.pop(answer.opaque, None)
            if answered is not None and not answered.done():
                answered.set_result(answer.code)
