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
connections use the send fast path's port instead (``pybroker.proc.send_port.FastSendPort``),
which takes the leading sends straight into the send ring.
"""
import asyncio
from typing import Protocol

from pybroker._fast.frame import next_frame

__all__ = ["FrameTaker", "WholeFrames"]


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
