# A remoting worker's pull fast path: the C PullPath over its reader, Recorder and replica.
"""The door of a remoting worker's connections to the pull fast path (docs/architecture/reads.md).

One :class:`FastPullPort` per worker wraps :class:`pybroker._fast.pull_path.PullPath` over the
worker's :class:`~pybroker.store.read_only_store.MessageStoreReader` (positions, queues and the
CommitLog as the reader sees them) and its :class:`~pybroker.stats.recorder.Recorder` (the
same counters and keys as the handler's). :meth:`FastPullPort.refresh` rebuilds the (group,
topic) table from the worker's metadata replica (broker/pull_fast.py) whenever the replica
or the live settings change. Each client connection walks its receive buffer with a
:class:`PullTaker` (a frame taker, pybroker/remoting/frame_taker.py; chained after the send
fast path's port where there is one), which answers the leading fast pulls and writes the
answers itself, and the commit offsets the fast pulls carried go to ``commit_offsets``.
"""
import asyncio
from collections.abc import Callable
from typing import Protocol

from pybroker._fast import pull_path
from pybroker.broker import pull_fast

__all__ = ["FastPullPort", "PullTaker", "DirectWrites"]


class FastPullPort:
    """See the module docstring. ``commit_offsets([(group, topic, queue_id, offset)])``
    forwards what the fast pulls of one read committed (the handler's commit_offset)."""

    def __init__(self, config, reader, recorder,
                 commit_offsets: Callable[[list], object]):
        store = config.store
        self.path = pull_path.PullPath(
            reader.fast_positions, reader.fast_queue, reader.fast_commitlog,
            recorder.pull_offset_entry, recorder.writer, config.remoting.ext_fields_max,
            config.remoting.frame_max_bytes, store.check_crc_on_read, reader.memory_bytes,
            store.transfer_limits(), config.broker.slave_read_enable,
            pull_fast.response_template(), self._request_tag_codes, self._own_expression_entry)
        self._config = config
        self._replica = None
        self._commit_offsets = commit_offsets

    def refresh(self, config, replica) -> None:
        """Follow the replica (and the live settings in ``config``)."""
        self._config, self._replica = config, replica
        self.path.set_subscriptions(pull_fast.fast_subscriptions(config, replica))

    def _own_expression_entry(self, group: str, topic: str) -> tuple | None:
        if self._replica is None:
            return None
        return pull_fast.own_expression_entry(self._config, self._replica, group, topic)

    def _request_tag_codes(self, expression: str | None,
                           expression_type: str | None) -> tuple[bool, list[int] | None]:
        return pull_fast.request_tag_codes(self._config, expression, expression_type)

    def take(self, buffer, start: int, end: int, fd: int,
             pending_max: int) -> tuple[int, int, int, bytes | None]:
        """:meth:`PullPath.take`, then the commit offsets it collected are forwarded."""
        taken = self.path.take(buffer, start, end, fd, pending_max)
        commits = self.path.commits()
        if commits:
            self._commit_offsets(commits)
        return taken

    def close(self) -> None:
        """Give back every file held (the worker stops)."""
        self.path.reset()


class DirectWrites(Protocol):
    """What a :class:`PullTaker` uses of its connection (remoting.connection.RemotingConnection)."""

    def direct_write_fd(self) -> int:
        """The socket the taker may write whole answers to itself now, or -1."""

    def wrote_directly(self) -> None:
        """The taker wrote answers to that socket itself."""

    def write_frames(self, frames: bytes) -> None:
        """Write encoded frames after anything queued."""


class PullTaker:
    """One client connection's frame taker for the pull fast path (see the module docstring):
    answers go straight to the socket while nothing is queued or buffered before them (the
    records are not copied), else as one bytes object through the connection's writes. Once
    the answers of one walk reach ``pending_max_bytes`` it answers TAKE_FULL and the rest of
    the read waits for the connection's back-pressure check (the next loop turn)."""

    __slots__ = ("_port", "_connection", "_pending_max_bytes")

    def __init__(self, port: FastPullPort, connection: DirectWrites, pending_max_bytes: int):
        self._port = port
        self._connection = connection
        self._pending_max_bytes = pending_max_bytes

    def take(self, buffer, start: int, end: int) -> tuple[int, int, int]:
        """``(position, outcome, frame_length)`` after answering the fast pulls from start."""
        connection = self._connection
        position, outcome, frame_length, unsent = self._port.take(
            buffer, start, end, connection.direct_write_fd(), self._pending_max_bytes)
        if unsent is not None:
            connection.write_frames(unsent)
        elif position != start:
            connection.wrote_directly()
        return position, outcome, frame_length

    def wait_for_space(self) -> "asyncio.Future[None]":
        """Resolved at the next loop turn: the connection then checks its back-pressure."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        loop.call_soon(_resolve, future)
        return future

    def close(self) -> None:
        """Nothing to release: the files are the worker's port's."""


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
