# The state broker handlers work with: config, store, putter, metadata, long polling, clock.
""":class:`BrokerContext` (what every handler gets) and :class:`MetadataContext` (what the
metadata handlers get in the metadata service), with the in-process implementations of the
seams in :mod:`pybroker.broker.interfaces`.

Handlers are ``async def handle(ctx, channel, request) -> RemotingCommand | None``. The same
handler code runs in a remoting worker (store = read-only reader, putter = send ring,
metadata = replica), in the metadata service (metadata = the single writer) and in tests
(store = a MessageStore on a temp dir, putter = :class:`StorePutter`, metadata = the
authoritative state).
"""
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from pybroker import clock
from pybroker.broker.interfaces import (ClientChannel, ControllerRole, MetadataView,
                                        MetadataWriter, Putter, StoreReader, TopicDeleter,
                                        TopicReadCheck)
from pybroker.broker.long_poll import LongPollService
from pybroker.config import Config
from pybroker.protocol.command import RemotingCommand
from pybroker.stats.recorder import Recorder
from pybroker.stats.service import StatsService
from pybroker.store.message_store import MessageStore, PutResult

__all__ = ["BrokerContext", "MetadataContext", "Handler", "MetadataHandler", "StorePutter",
           "StoreTopicDeleter"]


class StorePutter:
    """Putter over an in-process MessageStore (tests, tools, the single-process store)."""

    def __init__(self, store: MessageStore):
        self.store = store

    async def put(self, records: bytes | bytearray | memoryview, topic: str, queue_id: int,
                  count: int, sys_flag: int, wait_store: bool, *,
                  message_ids: bool = True) -> PutResult:
        return self.store.put_messages(records, topic, queue_id, count, sys_flag,
                                       wait_store_ok=wait_store)


class StoreTopicDeleter:
    """TopicDeleter over an in-process MessageStore: the queues go at once."""

    def __init__(self, store: MessageStore):
        self.store = store

    async def delete_topics(self, topics: Sequence[str]) -> bool:
        self.store.delete_topics(topics)
        return True


@dataclass
class BrokerContext:
    """Everything a handler may use. Who owns what: docs/architecture/layers.md."""
    config: Config
    store: StoreReader
    putter: Putter
    metadata: MetadataView
    store_host: tuple[bytes, int]    # broker IP bytes + listen port
    long_poll: LongPollService | None = None       # remoting workers only
    stats: Recorder | None = None                  # counts requests (remoting workers)
    stats_service: StatsService | None = None      # the supervisor's statistics
    read_check: TopicReadCheck | None = None       # ACL brokers: SUB on a record's topic
    now_ms: Callable[[], int] = field(default=clock.now_ms)
    # The shared POP state (broker/pop/state.py): remoting workers, the supervisor, tests.
    pop: Any = None
    # Messages parked in the timer slot of a time (ms): the send path's congestion check when
    # timerCongestNumEachSlot can be exceeded (broker/timer_message.py); None: not checked.
    timer_slot_num: Callable[[int], int] | None = None


@dataclass
class MetadataContext(BrokerContext):
    """The context of the metadata handlers (they run in the metadata service, the single
    writer): the metadata is the writer, and topic deletion reaches the data plane."""
    metadata: MetadataWriter
    topic_deleter: TopicDeleter = field(kw_only=True)
    replicas: ControllerRole | None = field(default=None, kw_only=True)   # controller mode
    # The supervisor's POP directory (broker/pop/directory.py): in-flight figures.
    pop_directory: Any = field(default=None, kw_only=True)
    # Topic routes from the NameServers (broker/pop/assignment.py: QUERY_ASSIGNMENT).
    topic_routes: Any = field(default=None, kw_only=True)


Handler = Callable[[BrokerContext, ClientChannel, RemotingCommand],
                   Coroutine[Any, Any, RemotingCommand | None]]
MetadataHandler = Callable[[MetadataContext, ClientChannel, RemotingCommand],
                           Coroutine[Any, Any, RemotingCommand | None]]
