# What a connection's receive loop walks its buffer with: a frame taker.
"""Frame takers: the one receive loop of :class:`pybroker.remoting.connection.RemotingConnection`
asks its taker, at each position of the receive buffer, what to do with the bytes there.

A taker answers ``(position, outcome, frame_length)`` with a frame taker's outcome
(``pybroker/_fast/frame.pxd``): TAKE_END (no whole frame at ``position``: wait for more bytes),
TAKE_OTHER (the frame of ``frame_length`` bytes at ``position`` is the connection's to decode and
dispatch), TAKE_FULL (the taker has no room now: reading pauses until :meth:`FrameTaker.
wait_for_space` resolves) or TAKE_FAULT (the frame at ``position`` is malformed). Everything
before ``position`` the taker has taken itself.

:class:`WholeFrames` takes nothing: every whole frame is the connection's (clients, the
NameServer, internal links, a broker without the send fast path). A remoting worker's client
connections use the send fast path's port (``pybroker.proc.send_port.FastSendPort``), which
takes the leading sends straight into the send ring, the ACK_MESSAGE fast path's
(``pybroker.proc.ack_port.AckFrameTaker``), which puts the leading acks' records into it, and
the pull fast path's (``pybroker.proc.pull_port.PullTaker``), which answers the leading pulls it
can, one after the other in a :class:`TakerChain`.

A taker may also have a ``c_first``: a ``pybroker._fast.socket_reader.CTaker`` making its first
step (the send port's take, ``pybroker._fast.send.port.PortTake``), which the reader in C of a
plain socket calls without a Python frame; a taker with more steps (a chain) goes on from that
step's answer with ``after_first(buffer, end, taken)``.
"""
import asyncio
from collections.abc import Sequence
from typing import Protocol

from pybroker._fast.frame import TAKE_FULL, TAKE_OTHER, next_frame

__all__ = ["FrameTaker", "WholeFrames", "TakerChain"]


class FrameTaker(Protocol):
    """How a connection's receive loop walks its buffer (see the module docstring)."""

    def take(self, buffer: bytearray, start: int, end: int) -> tuple[int, int, int]:
        """``(position, outcome, frame_length)`` after taking what it can from ``start``."""

    def wait_for_space(self) -> "asyncio.Future[None]":
        """Resolved when a TAKE_FULL may be retried."""

    def close(self) -> None:
        """The connection closed."""


class WholeFrames:
    """The taker that takes nothing: each whole frame is the connection's to decode."""

    __slots__ = ("_frame_max_bytes",)

    def __init__(self, frame_max_bytes: int):
        self._frame_max_bytes = frame_max_bytes

    def take(self, buffer: bytearray, start: int, end: int) -> tuple[int, int, int]:
        """``(start, TAKE_OTHER, length)`` for a whole frame at ``start``, ``(start, TAKE_END,
        0)`` for none yet; a malformed frame raises ProtocolError."""
        return next_frame(buffer, start, end, self._frame_max_bytes)

    def wait_for_space(self) -> "asyncio.Future[None]":
        """Never needed: this taker is never full."""
        raise RuntimeError("WholeFrames never answers TAKE_FULL")

    def close(self) -> None:
        """Nothing to release."""


class TakerChain:
    """Takers tried in turn: each takes what it can from where the one before it stopped,
    and a frame that every one of them declines is the connection's (a remoting worker's
    client connections: the send fast path's port, the ACK taker, the pull fast path's). A TAKE_FULL
    waits for the taker that said it."""

    __slots__ = ("_takers", "_full")

    def __init__(self, takers: Sequence[FrameTaker]):
        assert len(takers) >= 2, "a chain of fewer than two takers is the taker itself"
        self._takers = tuple(takers)
        self._full: FrameTaker | None = None

    def take(self, buffer: bytearray, start: int, end: int, index: int = 0,
             declined: int = 0) -> tuple[int, int, int]:
        """``(position, outcome, frame_length)``: TAKE_OTHER once every taker declined the
        frame at ``position``; any other outcome as the taker that gave it. ``index``: the
        taker to ask first, ``declined`` takers in a row having declined the frame at
        ``start`` already (:meth:`after_first`)."""
        takers = self._takers
        position = start
        while True:
            taker = takers[index]
            before = position
            position, outcome, frame_length = taker.take(buffer, position, end)
            if outcome != TAKE_OTHER:
                if outcome == TAKE_FULL:
                    self._full = taker
                return position, outcome, frame_length
            # Declined the frame at position (after taking the ones before it, if any).
            declined = declined + 1 if position == before else 1
            if declined == len(takers):
                return position, TAKE_OTHER, frame_length
            index = index + 1 if index + 1 < len(takers) else 0

    @property
    def c_first(self) -> object:
        """The first taker's step in C (its ``c_first``), or None (see the module
        docstring)."""
        return getattr(self._takers[0], "c_first", None)

    def after_first(self, buffer: bytearray, end: int,
                    taken: tuple[int, int, int]) -> tuple[int, int, int]:
        """:meth:`take`'s answer when the first taker's take, ``taken``, was made already (by
        the reader in C, with its ``c_first``)."""
        position, outcome, _ = taken
        if outcome != TAKE_OTHER:
            if outcome == TAKE_FULL:
                self._full = self._takers[0]
            return taken
        return self.take(buffer, position, end, 1, 1)

    def wait_for_space(self) -> "asyncio.Future[None]":
        """The wait of the taker that answered TAKE_FULL."""
        assert self._full is not None, "no taker of the chain answered TAKE_FULL"
        return self._full.wait_for_space()

    def close(self) -> None:
        """Close every taker."""
        for taker in self._takers:
            taker.close()
