# A client connection's door to the send fast path: its frame taker over the RingPutter.
"""The send fast path's port (:class:`FastSendPort`): one per client connection of a remoting
worker, the connection's frame taker (:mod:`pybroker.remoting.frame_taker`). :meth:`FastSendPort.
take` puts the leading fast-path frames of the receive buffer into the send ring
(``pybroker._fast.send.take.SendPath.take``) and says what stopped it; the answers come back
through the writer the putter holds for the port's slot. The take, with fast failure's
page-cache check before it and the appender's wake-up and fast failure's timer after it, is
``pybroker._fast.send.port.PortTake``, the port's ``c_first``: the reader in C of a plain socket
calls it without a Python frame (docs/architecture/data-plane.md, "The read chain in C").

The port sees its putter (:class:`pybroker.proc.ring_putter.RingPutter`) through
:class:`PortPutter`, the putter's public members a port uses: the shared ``SendPath``, fast
failure, the counters, the appender wake-up after a commit, the wait for space and the close.
"""
import asyncio
from typing import Protocol

from pybroker._fast.send.port import PortTake
from pybroker._fast.send.take import SendPath
from pybroker._fast.wake import DeferredSignal
from pybroker.proc.fast_failure import FastFailure

__all__ = ["FastSendPort", "PortPutter"]


class PortPutter(Protocol):
    """What a :class:`FastSendPort` uses of its putter (ring_putter.RingPutter)."""
    core: SendPath
    fast_failure: FastFailure | None
    puts_total: int
    space_waits_total: int
    appender_signal: DeferredSignal       # the appender's wake-up (after_commit, in C)

    def after_commit(self, loop: asyncio.AbstractEventLoop, appender_asleep: bool,
                     puts: int) -> None:
        """Wake the appender (now or at the end of the loop turn) after ``puts`` commits."""

    def wait_for_space(self) -> asyncio.Future:
        """Resolved at the next wake-up that may have freed ring space or completion slots."""

    def close_fast_port(self, slot: int) -> None:
        """Drop the port of ``slot`` and the answers still due to it."""

    def lend_socket(self, slot: int, fd: int) -> None:
        """The socket the answers of ``slot`` may be written to straight from C, or -1."""


class FastSendPort:
    """One client connection's door to the send fast path: its frame taker
    (pybroker.remoting.frame_taker.FrameTaker, RemotingConnection.use_frame_taker)."""

    __slots__ = ("putter", "slot", "c_first")

    def __init__(self, putter: PortPutter, slot: int):
        self.putter = putter
        self.slot = slot
        # The take (socket_reader.SocketReader calls it in C: the taker's first step).
        self.c_first = PortTake(putter.core, slot, putter, putter.fast_failure,
                                asyncio.get_running_loop())

    def take(self, buffer, start: int, end: int) -> tuple[int, int, int]:
        """``(position, outcome, frame_length)`` after taking the fast frames from start."""
        return self.c_first.take(buffer, start, end)

    def wait_for_space(self) -> asyncio.Future:
        """Resolved when a TAKE_FULL may be retried."""
        self.putter.space_waits_total += 1
        return self.putter.wait_for_space()

    def lend_socket(self, fd: int) -> None:
        """The connection's socket, while nothing waits before the answers, or -1
        (RemotingConnection.lend_socket): the answers then go to it straight from C."""
        self.putter.lend_socket(self.slot, fd)

    def close(self) -> None:
        """The connection closed: answers still due to it are dropped."""
        self.putter.close_fast_port(self.slot)
