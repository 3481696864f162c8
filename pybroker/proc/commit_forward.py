# A remoting worker's pull-carried commit offsets, forwarded to the metadata service per interval.
"""Commit offsets carried by pulls, on their way to the metadata service
(docs/architecture/reads.md, "Commit offsets forwarded per interval").

A pull with the COMMIT_OFFSET flag stores the consumer's offset of its queue (Java's
PullMessageProcessor: ConsumerOffsetManager.commitOffset, an in-memory table persisted every
flushConsumerOffsetInterval). In pybroker the offsets live in the metadata service (the
supervisor), so a worker forwards them in one oneway COMMIT_OFFSET whose body lists the last
offset of each queue. :class:`CommitForwards` sends one at the next loop turn when none went
out in the last :data:`COMMIT_FORWARD_INTERVAL_S`, else that interval after the last one:
a consumer draining a backlog commits with every pull, and a forward per pull cost the
supervisor a request per pull (0.6 µs per consumed message of Apache's Consumer, 2026-12-07).
A forwarded client request sends the pending ones first (:meth:`CommitForwards.flush`), so the
worker's own requests (an UPDATE_CONSUMER_OFFSET, a QUERY_CONSUMER_OFFSET) come after them.
"""
import asyncio
from collections.abc import Callable, Iterable

import orjson

from pybroker.protocol.codes import InternalCode
from pybroker.protocol.command import RemotingCommand, create_request

__all__ = ["CommitForwards", "COMMIT_FORWARD_INTERVAL_S"]

# At most one COMMIT_OFFSET per worker per interval; a commit waits at most this long.
COMMIT_FORWARD_INTERVAL_S = 0.01


class CommitForwards:
    """One worker's pending commit offsets; ``send(command)`` writes a oneway request to the
    metadata service (MetadataLink.invoke_oneway). Used from the worker's event loop."""

    __slots__ = ("_send", "_pending", "_timer", "_forwarded_at")

    def __init__(self, send: Callable[[RemotingCommand], None]):
        self._send = send
        self._pending: dict[tuple[str, str, int], int] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._forwarded_at = float("-inf")       # loop time of the last forward

    def add(self, commits: Iterable[tuple[str, str, int, int]]) -> None:
        """Queue ``[(group, topic, queue_id, offset)]`` (in order: the last one of a queue
        wins, as in Java's table) for the next forward."""
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_at(
                self._forwarded_at + COMMIT_FORWARD_INTERVAL_S, self._due)
        pending = self._pending
        for group, topic, queue_id, offset in commits:
            pending[(group, topic, queue_id)] = offset

    def _due(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> None:
        """Forward what is pending now (before a forwarded request; when the worker stops)."""
        pending, self._pending = self._pending, {}
        if not pending:
            return
        self._send(create_request(
            InternalCode.COMMIT_OFFSET, {}, orjson.dumps(
                [[group, topic, queue_id, offset]
                 for (group, topic, queue_id), offset in pending.items()]),
            oneway=True))
        self._forwarded_at = asyncio.get_running_loop().time()

    def close(self) -> None:
        """Forward what is pending and stop the timer (the worker stops)."""
        self.flush()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
