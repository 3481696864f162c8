# The state broker handlers work with: config, store, putter, metadata, long polling, clock.
""":class:`BrokerContext` and the :class:`Putter` protocol.

Handlers are ``async def handle(ctx, channel, request) -> RemotingCommand | None``. The same
handler code runs in a remoting worker (store = read-only reader, putter = send ring,
metadata = replica) and in tests (store = a MessageStore on a temp dir, putter =
:class:`StorePutter`, metadata = the authoritative state).
"""
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol

from pybroker import clock
from pybroker.protocol.command import RemotingCommand


class Putter(Protocol):
    """How encoded records reach the CommitLog."""

    async def put(self, records, topic: str, queue_id: int, count: int, sys_flag: int,
                  wait_store: bool) -> Any:
        """Append ``count`` whole encoded records of one topic/queue; returns a PutResult."""


class StorePutter:
    """Putter over an in-process MessageStore (tests, tools, the single-process store)."""

    def __init__(self, store):
        self.store = store

    async def put(self, records, topic: str, queue_id: int, count: int, sys_flag: int,
                  wait_store: bool):
        return self.store.put_messages(records, topic, queue_id, count, sys_flag,
                                       wait_store_ok=wait_store)


@dataclass
class BrokerContext:
    """Everything a handler may use. See docs/architecture.md for who owns what."""
    config: Any                      # pybroker.config.Config
    store: Any                       # pybroker.store.message_store.MessageStore (or reader)
    putter: Putter
    metadata: Any                    # pybroker.broker.metadata.MetadataState
    store_host: tuple[bytes, int]    # broker IP bytes + listen port
    long_poll: Any = None            # pybroker.broker.long_poll.LongPollService (workers only)
    stats: Any = None                # pybroker.stats.recorder.Recorder (counts requests)
    stats_service: Any = None        # pybroker.stats.service.StatsService (supervisor only)
    now_ms: Callable[[], int] = field(default=clock.now_ms)


Handler = Callable[[BrokerContext, Any, RemotingCommand], Awaitable[RemotingCommand | None]]
