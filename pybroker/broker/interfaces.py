# The seams between broker handlers and what runs them: store reads, metadata, putter, channel.
"""Interfaces (typing.Protocol) that broker handlers and services are written against.

Each is implemented by a class per process, and mypy (tests/unit/repository/test_source.py)
checks every implementation against it where it is wired:

==================  =========================================  =================================
interface           remoting worker / supervisor               tests, single-process store
==================  =========================================  =================================
StoreReader         store.read_only_store.MessageStoreReader   store.message_store.MessageStore
MetadataView        broker.metadata.MetadataReplica (worker),  broker.metadata.MetadataState
                    MetadataState (service)
MetadataWriter      broker.metadata.MetadataState              the same
Putter              proc.ring_putter.RingPutter                broker.context.StorePutter
TopicDeleter        proc.topic_deletion.TopicDeletionRequests  broker.context.StoreTopicDeleter
ClientChannel       broker.channel.Channel                     the same (send = list.append)
TopicReadCheck      acl.validator.AccessValidator (ACL on)     the same
==================  =========================================  =================================
"""
from collections.abc import Mapping, Sequence
from typing import Protocol

from pybroker.broker.channel import ClientChannel
from pybroker.broker.managers.client_calls import ClientCalls
from pybroker.broker.managers.consumer import ConsumerManager
from pybroker.broker.managers.consumer_offset import ConsumerOffsetManager
from pybroker.broker.managers.message_request_mode import MessageRequestModeManager
from pybroker.broker.managers.producer import ProducerManager
from pybroker.broker.managers.rebalance_lock import RebalanceLockManager
from pybroker.broker.managers.subscription_group import SubscriptionGroupManager
from pybroker.broker.managers.topic_config import TopicConfigManager
from pybroker.config import Config
from pybroker.protocol.bodies import SubscriptionData
from pybroker.protocol.command import RemotingCommand
from pybroker.store.config_docs import (DataVersion, DelayOffsetDocument,
                                        SubscriptionGroupConfig, TopicConfig)
from pybroker.store.message_store import PutResult
from pybroker.store.read_api import GetResult, QueryResult, SelectResult

__all__ = ["ClientChannel", "StoreReader", "MetadataView", "MetadataWriter", "Putter",
           "AssemblingPutter", "RingFull", "TopicDeleter", "TopicReadCheck"]


class StoreReader(Protocol):
    """The store's read side: every result holding mapped views must be released."""

    def get_messages(self, group: str, topic: str, queue_id: int, queue_offset: int,
                     max_count: int, max_bytes: int | None = None,
                     tag_codes: frozenset[int] | None = None) -> GetResult:
        """Up to ``max_count`` messages of a queue from ``queue_offset`` (a pull)."""

    def look_message_by_offset(self, physical_offset: int) -> SelectResult | None:
        """The record at ``physical_offset`` (bytes), or None."""

    def view_message_by_id(self, message_id: str) -> SelectResult | None:
        """The record named by an offset message id, or None."""

    def query_messages(self, topic: str, key: str, max_num: int, begin_ms: int,
                       end_ms: int) -> QueryResult:
        """Messages of ``topic`` whose index key is ``key``, stored in [begin_ms, end_ms]."""

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """Queue offset one past the last entry (0 for an unknown queue)."""

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """Queue offset of the oldest entry still stored."""

    def get_offset_bounds_in_queue(self, topic: str, queue_id: int) -> tuple[int, int]:
        """``(get_min_offset_in_queue, get_max_offset_in_queue)`` in one call."""

    def offset_outside_queue(self, topic: str, queue_id: int,
                             queue_offset: int) -> tuple[int, int] | None:
        """None when ``queue_offset`` lies within the queue's bounds (min <= offset <= max),
        else those bounds (an ack's check)."""

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int,
                                    boundary: str = "lower") -> int:
        """The queue offset whose store time is nearest ``timestamp_ms``."""

    def get_message_store_timestamp(self, topic: str, queue_id: int, queue_offset: int) -> int:
        """Store time (ms) of one queue entry, or -1."""

    def get_earliest_message_time(self, topic: str | None = None, queue_id: int = 0) -> int:
        """Store time (ms) of the oldest message (of a queue), or -1."""

    def runtime_info(self) -> dict[str, str]:
        """Store figures of GET_BROKER_RUNTIME_INFO (Java's keys, string values)."""


class MetadataView(Protocol):
    """Broker metadata as handlers read it; writes go to the single writer."""

    def topic_config(self, topic: str) -> TopicConfig | None:
        """The config of ``topic``, or None."""

    def topic_configs(self) -> Mapping[str, TopicConfig]:
        """Every topic's config by name (do not mutate)."""

    def subscription_group(self, group: str) -> SubscriptionGroupConfig | None:
        """The config of ``group`` (auto-created as Java's findSubscriptionGroupConfig)."""

    def consumer_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        """The subscription of ``group`` to ``topic`` its members registered by heartbeat."""

    def consumer_subscriptions(self) -> Mapping[str, Mapping[str, SubscriptionData]]:
        """Every heartbeat-registered subscription, group -> topic -> subscription (the
        pull fast path's table, broker/pull_fast.py)."""

    async def create_topic_on_send(self, topic: str, default_topic: str, queue_nums: int,
                                   topic_sys_flag: int = 0) -> TopicConfig | None:
        """The topic's config, auto-created from ``default_topic`` (TBW102) for a send."""

    async def create_topic_for_send_back(self, topic: str, queue_nums: int, perm: int,
                                         topic_sys_flag: int = 0) -> TopicConfig | None:
        """The config of a %RETRY%/%DLQ% topic, created with ``queue_nums`` and ``perm``
        when absent (Java's createTopicInSendMessageBackMethod)."""

    async def commit_offset(self, group: str, topic: str, queue_id: int,
                            consumer_offset: int) -> None:
        """Record a consumer offset."""


class MetadataWriter(MetadataView, Protocol):
    """The single writer of broker metadata, as the metadata handlers use it: the managers
    (pybroker/broker/managers/) and what spans them."""
    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    producers: ProducerManager
    consumers: ConsumerManager
    locks: RebalanceLockManager
    client_calls: ClientCalls
    request_modes: MessageRequestModeManager
    config_version: DataVersion

    def delay_offsets(self) -> DelayOffsetDocument | None:
        """The delay service's live offsets, None when no delay service runs here."""

    def channel_closed(self, channel_id: str) -> None:
        """A client connection is gone: remove it from every group."""

    def worker_closed(self, channel_prefix: str) -> None:
        """A remoting worker went away: every client channel it held is closed."""

    def versions(self) -> tuple:
        """Versions of what :meth:`snapshot` carries (it changes when they do)."""

    def apply_settings(self, config: Config) -> None:
        """Run with ``config`` from now on (UPDATE_BROKER_CONFIG)."""

    def snapshot(self) -> bytes:
        """The replica snapshot workers apply (pybroker.broker.metadata.MetadataReplica)."""


class Putter(Protocol):
    """How encoded records reach the CommitLog.

    A putter may also offer ``put_now(records, topic, queue_id, count, sys_flag, wait_store,
    future)`` (pybroker.proc.ring_putter.RingPutter): put() without a coroutine and without
    message ids, resolving the caller's ``future`` and waking the writer at once rather than
    at the end of this loop turn; it returns a refusal (PutResult) or None, and raises
    RingFull when it cannot take the records now."""

    async def put(self, records: bytes | bytearray | memoryview, topic: str, queue_id: int,
                  count: int, sys_flag: int, wait_store: bool, *,
                  message_ids: bool = True) -> PutResult:
        """Append ``count`` whole encoded records of one topic/queue. ``message_ids``
        False: the caller does not read ``PutResult.message_id`` (it may be left empty: the
        timer's re-puts, where computing one per record was most of the put's own cost)."""


class AssemblingPutter(Protocol):
    """A putter that also writes a timer run where it puts it (RingPutter: into the send
    ring's reserved space), from a held chunk's recipes and the parked records
    (broker/timer_runs.py ``prepared``), instead of taking the run's bytes."""

    async def put_assembled(self, assembly, run: int, topic: str, queue_id: int,
                            sys_flag: int, wait_store: bool) -> PutResult:
        """put() of run ``run`` of ``assembly`` (a _fast.timer_reput.Assembly); no message
        ids."""


class RingFull(Exception):
    """A putter's put_now cannot take the records now (put() waits for room)."""


class TopicDeleter(Protocol):
    """Destroys the consume queues of deleted topics (their single writer decides when)."""

    async def delete_topics(self, topics: Sequence[str]) -> bool:
        """True when the queues of ``topics`` are gone; False when the data plane did not
        answer in time (the queue files then stay until they expire)."""


class ControllerRole(Protocol):
    """Controller mode's view for the metadata handlers (pybroker/broker/controller_role.py);
    implemented by :class:`pybroker.broker.replicas_manager.ReplicasManager`."""

    def on_role_notification(self, master_broker_id: int | None, master_address: str | None,
                             master_epoch: int | None, set_epoch: int | None,
                             members: frozenset[int]) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED from the controller."""

    def epoch_cache(self) -> tuple[int, list, int]:
        """(broker id as registered, epoch entries, CommitLog max offset) for
        GET_BROKER_EPOCH_CACHE."""


class TopicReadCheck(Protocol):
    """ACL's SUB permission on a record's own topic, asked by the handlers that find records
    by something else than their topic (VIEW_MESSAGE_BY_ID: an offset; QUERY_MESSAGE: a key
    whose hash other topics share). The request passed the ACL guard already."""

    def may_read(self, request: RemotingCommand, remote_address: str, topic: str) -> bool:
        """True when the requester may read records of ``topic``."""

    def check_read(self, request: RemotingCommand, remote_address: str, topic: str) -> None:
        """Return when it may; raise the ACL refusal (a HeaderError) otherwise."""
