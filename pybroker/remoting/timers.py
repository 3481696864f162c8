# The deadlines of one remoting connection (idle, partial frame, write stall) on one timer.
"""One connection's time limits (:class:`ConnectionTimer`), each closing only that connection:
idle time (nothing read or written: ``idle_timeout_ms``), partial-frame time (a frame started
but not finished: slowloris, ``partial_frame_timeout_ms``) and a write stall (the peer read no
replies while reading from it was paused: ``write_stall_timeout_ms``).

One timer per connection, moved only when a deadline comes EARLIER than it (a write stall);
reads and writes just stamp times, and the timer re-checks when it fires. It never sleeps past
one partial-frame timeout, so a partial frame that starts later is still caught on time without
moving the timer on every read.
"""
import asyncio
from typing import Callable, Optional

from pybroker.remoting.limits import ConnectionLimits


class ConnectionTimer:
    """``expired(reason)`` runs when a deadline passes (the connection aborts)."""

    __slots__ = ("_limits", "_expired", "_loop", "_timer", "last_activity", "partial_since",
                 "stall_since", "stopped")

    def __init__(self, limits: ConnectionLimits, expired: Callable[[str], None]):
        self._limits = limits
        self._expired = expired
        self._loop: asyncio.AbstractEventLoop       # set by start
        self._timer: Optional[asyncio.TimerHandle] = None
        self.last_activity = 0.0                    # loop time of the last read or write
        self.partial_since: Optional[float] = None  # a frame started arriving then
        self.stall_since: Optional[float] = None    # reading paused for unread replies then
        self.stopped = False

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """The connection is made."""
        self._loop = loop
        self.last_activity = loop.time()
        self.arm()

    def stop(self) -> None:
        """The connection is closing: no deadline fires any more."""
        self.stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def touch(self) -> None:
        """Something was read or written now."""
        self.last_activity = self._loop.time()

    def stall_started(self) -> None:
        """Reading paused because the peer reads no replies: the stall deadline runs."""
        self.stall_since = self._loop.time()
        self.arm()

    def _deadlines(self) -> list[tuple[float, str]]:
        limits = self._limits
        deadlines = []
        if limits.idle_timeout_ms:
            deadlines.append((self.last_activity + limits.idle_timeout_ms / 1000,
                              f"idle for {limits.idle_timeout_ms} ms"))
        if self.partial_since is not None:
            deadlines.append((self.partial_since + limits.partial_frame_timeout_ms / 1000,
                              f"frame incomplete after {limits.partial_frame_timeout_ms} ms"))
        if self.stall_since is not None:
            deadlines.append((self.stall_since + limits.write_stall_timeout_ms / 1000,
                              f"peer read no replies for {limits.write_stall_timeout_ms} ms"))
        return deadlines

    def arm(self) -> None:
        """Make sure the timer fires by the earliest deadline."""
        if self.stopped:
            return
        earliest = self._loop.time() + self._limits.partial_frame_timeout_ms / 1000
        for deadline, _ in self._deadlines():
            earliest = min(earliest, deadline)
        if self._timer is not None:
            if self._timer.when() <= earliest:
                return
            self._timer.cancel()
        self._timer = self._loop.call_at(earliest, self._check)

    def _check(self) -> None:
        self._timer = None
        if self.stopped:
            return
        now = self._loop.time()
        for deadline, reason in self._deadlines():
            if now >= deadline:
                self._expired(reason)
                return
        self.arm()
