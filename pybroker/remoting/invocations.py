# The requests one remoting connection sent and the responses they wait for, by opaque.
"""Outgoing invocations of one connection (:class:`Invocations`).

Both sides may send requests on one connection (broker -> client NOTIFY_CONSUMER_IDS_CHANGED /
CHECK_TRANSACTION_STATE). A request sent with ``RemotingConnection.invoke`` waits here for the
response carrying its opaque; a response nobody waits for is the connection's to log and drop
(protocol.md §1.5). One sweep timer serves every outstanding request instead of a timer each (a
timer per request cost ~15% of a round trip); it is moved only for an earlier deadline.
"""
import asyncio
from typing import Optional

from pybroker.protocol.command import RemotingCommand


class Invocations:
    """Futures of the requests sent and not answered yet, with their deadlines."""

    __slots__ = ("_loop", "_futures", "_deadlines", "_sweep_timer")

    def __init__(self):
        self._loop: asyncio.AbstractEventLoop       # set by start
        self._futures: dict[int, asyncio.Future] = {}
        self._deadlines: dict[int, tuple[float, int]] = {}  # (loop time, timeout_ms)
        self._sweep_timer: Optional[asyncio.TimerHandle] = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """The connection is made: deadlines count in ``loop``'s time."""
        self._loop = loop

    def __len__(self) -> int:
        return len(self._futures)

    def expect(self, opaque: int, timeout_ms: int) -> asyncio.Future:
        """The future of the response to ``opaque``, failed with TimeoutError after
        ``timeout_ms``; ValueError when the opaque is already outstanding."""
        if opaque in self._futures:
            raise ValueError(f"opaque {opaque} already has an outstanding request")
        loop = self._loop
        future = loop.create_future()
        deadline = loop.time() + timeout_ms / 1000
        self._futures[opaque] = future
        self._deadlines[opaque] = (deadline, timeout_ms)
        if self._sweep_timer is None or deadline < self._sweep_timer.when():
            self._arm_sweep(deadline)
        return future

    def forget(self, opaque: int, future: Optional[asyncio.Future] = None) -> None:
        """Stop waiting for ``opaque`` (only while it is still ``future``'s, when given)."""
        if future is not None and self._futures.get(opaque) is not future:
            return
        self._futures.pop(opaque, None)
        self._deadlines.pop(opaque, None)

    def answer(self, response: RemotingCommand) -> bool:
        """Resolve the request ``response`` answers; False when none waits for it."""
        future = self._futures.pop(response.opaque, None)
        self._deadlines.pop(response.opaque, None)
        if future is None or future.done():
            return False
        future.set_result(response)
        return True

    def fail_all(self, error_text: str) -> None:
        """The connection is lost: every waiting request fails with ConnectionError."""
        self.stop()
        futures, self._futures = self._futures, {}
        self._deadlines.clear()
        for future in futures.values():
            if not future.done():
                future.set_exception(ConnectionError(error_text))

    def stop(self) -> None:
        """Cancel the sweep timer."""
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
            self._sweep_timer = None

    def _arm_sweep(self, deadline: float) -> None:
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
        self._sweep_timer = self._loop.call_at(deadline, self._sweep_expired)

    def _sweep_expired(self) -> None:
        self._sweep_timer = None
        now = self._loop.time()
        earliest = None
        for opaque, (deadline, timeout_ms) in list(self._deadlines.items()):
            if deadline > now:
                earliest = deadline if earliest is None else min(earliest, deadline)
                continue
            future = self._futures.pop(opaque, None)
            del self._deadlines[opaque]
            if future is not None and not future.done():
                future.set_exception(TimeoutError(
                    f"no response to opaque {opaque} in {timeout_ms} ms"))
        if earliest is not None:
            self._arm_sweep(earliest)
