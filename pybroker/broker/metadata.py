# Broker metadata: the single writer composing the managers, and the replica kept by workers.
"""The metadata service's state (single writer) and the read-only replica kept by workers.

:class:`MetadataState` owns one of each manager of :mod:`pybroker.broker.managers` (as
RocketMQ's BrokerController owns TopicConfigManager, SubscriptionGroupManager,
ConsumerOffsetManager, ProducerManager, ConsumerManager, RebalanceLockManager and Broker2Client):
``topics``, ``groups``, ``offsets``, ``producers``, ``consumers``, ``locks``,
``client_calls`` and (5.x's MessageRequestModeManager) ``request_modes``. Handlers that
write (they run in the metadata service only) call the managers; the state itself holds what
spans several of them: the read API shared with the replica, the consumer-ids-changed
notification rule, channel expiry, snapshots, persistence.

READ API, offered by both :class:`MetadataState` and :class:`MetadataReplica` (a remoting
worker's copy, rebuilt from :meth:`MetadataState.snapshot` bytes):

* ``topic_config(topic) -> TopicConfig | None`` and ``topic_configs()``
* ``subscription_group(group) -> SubscriptionGroupConfig | None`` (auto-created when
  ``autoCreateSubscriptionGroup``, like Java's ``findSubscriptionGroupConfig``)
* ``consumer_subscription(group, topic) -> SubscriptionData | None`` (from heartbeats)
* ``async create_topic_on_send(topic, default_topic, queue_nums, topic_sys_flag)``
* ``async commit_offset(group, topic, queue_id, consumer_offset)``

Periodic work of the service: ``persist_if_dirty`` every flushConsumerOffsetInterval,
``scan_expired`` every 10 s, ``shutdown``. Times are ms from ``now_ms``.
"""
import logging
from collections.abc import Awaitable, Callable, Mapping

import orjson

from pybroker import clock
from pybroker.broker.managers.client_calls import CLIENT_CALL_TIMEOUT_MS, ClientCalls
from pybroker.broker.managers.consumer import ConsumerManager, subscriptions_from_snapshot
from pybroker.broker.managers.consumer_offset import ConsumerOffsetManager
from pybroker.broker.managers.message_request_mode import MessageRequestModeManager
from pybroker.broker.managers.producer import ProducerManager
from pybroker.broker.managers.rebalance_lock import REBALANCE_LOCK_LEASE_MS, RebalanceLockManager
from pybroker.broker.managers.subscription_group import (SubscriptionGroupManager, auto_created,
                                                         group_table_from_snapshot)
from pybroker.broker.managers.topic_config import TopicConfigManager, topic_table_from_snapshot
from pybroker.broker.runtime_settings import live_values
from pybroker.config import Config
from pybroker.protocol.bodies import SubscriptionData
from pybroker.store import paths
from pybroker.store.config_docs import (DataVersion, DelayOffsetDocument,
                                        SubscriptionGroupConfig, TopicConfig)

__all__ = ["MetadataState", "MetadataReplica", "CHANNEL_EXPIRED_TIMEOUT_MS"]

log = logging.getLogger(__name__)

CHANNEL_EXPIRED_TIMEOUT_MS = 120_000   # Java ConsumerManager/ProducerManager: idle clients


class MetadataState:
    """Authoritative broker metadata (one instance, in the metadata service).

    ``config`` is the broker's :class:`pybroker.config.Config`; documents live under
    ``<store_root>/config/`` (``store_root`` defaults to ``config.store.store_path_root_dir``).
    ``now_ms`` is the clock (ms) used for client expiry and lock leases. ``on_change(kind)``
    is called after every change of ``"topics"``, ``"groups"`` or ``"subscriptions"`` (the
    service pushes snapshots and re-registers with name servers on ``"topics"``).
    ``delay_offsets()`` gives the delay service's live offsets (GET_ALL_DELAY_OFFSET), None
    when no delay service runs. Loads the documents and creates the system topics and groups
    on construction.
    """

    def __init__(self, config: Config, *, store_root: str | None = None,
                 now_ms: Callable[[], int] | None = None,
                 on_change: Callable[[str], None] | None = None,
                 delay_offsets: Callable[[], DelayOffsetDocument | None] | None = None,
                 lock_lease_ms: int = REBALANCE_LOCK_LEASE_MS,
                 channel_expired_timeout_ms: int = CHANNEL_EXPIRED_TIMEOUT_MS,
                 client_call_timeout_ms: int = CLIENT_CALL_TIMEOUT_MS):
        self.config = config
        # The configuration's data version (Java Configuration.dataVersion): stamped when the
        # broker starts, bumped by each UPDATE_BROKER_CONFIG (apply_settings).
        self.config_version = DataVersion()
        # Called with the new Config after apply_settings (the supervisor's own services).
        self.settings_listeners: list[Callable[[Config], None]] = []
        root = store_root if store_root is not None else config.store.store_path_root_dir
        self.now_ms = now_ms or clock.now_ms
        self.on_change = on_change
        self.delay_offsets = delay_offsets or (lambda: None)
        self.channel_expired_timeout_ms = channel_expired_timeout_ms
        broker = config.broker
        self.topics = TopicConfigManager(paths.config_path(root, paths.TOPICS_CONFIG), broker,
                                         lambda: self._changed("topics"),
                                         config.store.timer_wheel_enable)
        self.groups = SubscriptionGroupManager(
            paths.config_path(root, paths.SUBSCRIPTION_GROUP_CONFIG), broker,
            lambda: self._changed("groups"))
        self.offsets = ConsumerOffsetManager(
            paths.config_path(root, paths.CONSUMER_OFFSET_CONFIG))
        self.producers = ProducerManager(self.now_ms)
        self.consumers = ConsumerManager(self.now_ms, self.notify_consumer_ids_changed,
                                         lambda: self._changed("subscriptions"))
        self.locks = RebalanceLockManager(self.now_ms, lock_lease_ms)
        self.client_calls = ClientCalls(client_call_timeout_ms)
        self.request_modes = MessageRequestModeManager(
            paths.config_path(root, paths.MESSAGE_REQUEST_MODE_CONFIG))

    def _changed(self, kind: str) -> None:
        if self.on_change is not None:
            self.on_change(kind)

    # --- READ API ------------------------------------------------------------------------------
    def topic_config(self, topic: str) -> TopicConfig | None:
        """The config of ``topic``, or None."""
        return self.topics.topic_config(topic)

    def topic_configs(self) -> Mapping[str, TopicConfig]:
        """Every topic's config by name (do not mutate)."""
        return self.topics.topic_configs()

    def subscription_group(self, group: str) -> SubscriptionGroupConfig | None:
        """The config of ``group``; auto-created as Java's findSubscriptionGroupConfig."""
        return self.groups.subscription_group(group)

    def consumer_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        """The subscription of ``group`` to ``topic`` its members registered by heartbeat."""
        return self.consumers.consumer_subscription(group, topic)

    def consumer_subscriptions(self) -> Mapping[str, Mapping[str, SubscriptionData]]:
        """Every heartbeat-registered subscription, group -> topic -> subscription."""
        return {group: info.subscriptions
                for group, info in self.consumers.consumer_groups.items()}

    async def create_topic_on_send(self, topic: str, default_topic: str, queue_nums: int,
                                   topic_sys_flag: int = 0) -> TopicConfig | None:
        """The topic's config, auto-created from ``default_topic`` for a send."""
        return self.topics.create_topic_on_send(topic, default_topic, queue_nums,
                                                topic_sys_flag)

    async def commit_offset(self, group: str, topic: str, queue_id: int,
                            consumer_offset: int) -> None:
        """Record a consumer offset (pull piggy-back); persisted by :meth:`persist_if_dirty`."""
        self.offsets.commit(group, topic, queue_id, consumer_offset)

    async def create_topic_for_send_back(self, topic: str, queue_nums: int, perm: int,
                                         topic_sys_flag: int = 0) -> TopicConfig:
        """The config of a %RETRY%/%DLQ% topic, created with ``queue_nums`` and ``perm`` when
        absent (Java's createTopicInSendMessageBackMethod)."""
        return self.topics.create_topic_for_send_back(topic, queue_nums, perm, topic_sys_flag)

    # --- consumers ids changed (Java DefaultConsumerIdsChangeListener) -------------------------
    def notify_consumer_ids_changed(self, group: str) -> int:
        """Send NOTIFY_CONSUMER_IDS_CHANGED to every live member of ``group`` when
        notifyConsumerIdsChangedEnable is on for the broker and the group; returns the count
        sent."""
        info = self.consumers.consumer_group_info(group)
        if info is None or not self.config.broker.notify_consumer_ids_changed_enable:
            return 0
        group_config = self.groups.find(group)
        if group_config is not None and not group_config.notify_consumer_ids_changed_enable:
            return 0
        return self.client_calls.notify_consumer_ids_changed(group, info.channels.values())

    # --- channel life ----------------------------------------------------------------------------
    def channel_closed(self, channel_id: str) -> None:
        """A client connection is gone: remove it from every group and notify the rest."""
        self._remove_channels({channel_id})

    def worker_closed(self, channel_prefix: str) -> None:
        """A remoting worker went away: every client channel it held (ids starting with
        ``channel_prefix``) is closed."""
        channel_ids = self.consumers.channel_ids() | self.producers.channel_ids()
        for channel_id in sorted(channel_ids):
            if channel_id.startswith(channel_prefix):
                self.channel_closed(channel_id)

    def scan_expired(self, now_ms: int | None = None) -> set[str]:
        """Drop channels without a heartbeat for more than 120 s (call every 10 s); returns
        the ids dropped, so the service can close those connections."""
        now_ms = self.now_ms() if now_ms is None else now_ms
        limit = self.channel_expired_timeout_ms
        expired = self.consumers.expired_channels(now_ms, limit) | \
            self.producers.expired_channels(now_ms, limit)
        if expired:
            log.warning("client channels expired: %s", sorted(expired))
            self._remove_channels(expired)
        return expired

    def _remove_channels(self, channel_ids: set[str]) -> None:
        self.consumers.remove_channels(channel_ids)
        self.producers.remove_channels(channel_ids)

    # --- persistence ----------------------------------------------------------------------------
    def persist_if_dirty(self) -> bool:
        """Write consumerOffset.json when offsets changed since the last write; True if
        written. The service calls this every flushConsumerOffsetInterval ms."""
        return self.offsets.persist_if_dirty()

    def shutdown(self) -> None:
        """Persist everything (offsets, topics, groups), as Java does at broker shutdown."""
        self.offsets.persist()
        self.topics.persist()
        self.groups.persist()

    # --- snapshots for worker replicas ---------------------------------------------------------
    def versions(self) -> tuple:
        """(topics counter, topics timestamp, groups counter, groups timestamp,
        subscription version): changes whenever :meth:`snapshot` would."""
        topics, groups = self.topics.data_version, self.groups.data_version
        return (topics.counter, topics.timestamp, groups.counter, groups.timestamp,
                self.consumers.subscription_version, self.config_version.counter)

    def apply_settings(self, config: Config) -> None:
        """Run with ``config`` from now on (UPDATE_BROKER_CONFIG, broker/runtime_settings.py):
        the managers read it at once, the workers with the next snapshot. A brokerPermission
        change bumps the topics' version, which re-registers with the NameServers (as Java's
        updateBrokerConfig does)."""
        permission_changed = config.broker.broker_permission != \
            self.config.broker.broker_permission
        self.config = config
        self.topics.broker = config.broker
        self.groups.broker = config.broker
        self.config_version.next_version()
        if permission_changed:
            self.topics.data_version.next_version()
        for listener in self.settings_listeners:
            listener(config)

    def snapshot(self) -> bytes:
        """The managers' snapshots (topics, subscription groups, consumer subscriptions) with
        their versions, as compact JSON for :meth:`MetadataReplica.apply`."""
        return orjson.dumps({
            "versions": list(self.versions()),
            "autoCreateSubscriptionGroup": self.config.broker.auto_create_subscription_group,
            "settings": live_values(self.config),
            "topics": self.topics.snapshot(),
            "groups": self.groups.snapshot(),
            "subscriptions": self.consumers.snapshot(),
        }, option=orjson.OPT_NON_STR_KEYS)


class MetadataReplica:
    """A remoting worker's read-only copy of the metadata, current as of the last
    :meth:`apply`. Writes go to the metadata service through the coroutines given:

    ``create_topic(topic, default_topic, queue_nums, topic_sys_flag) -> TopicConfig | None``,
    ``create_send_back_topic(topic, queue_nums, perm, topic_sys_flag) -> TopicConfig | None``
    and ``commit_offset(group, topic, queue_id, consumer_offset) -> None``.
    """

    def __init__(self, create_topic: Callable[[str, str, int, int],
                                              Awaitable[TopicConfig | None]],
                 commit_offset: Callable[[str, str, int, int], Awaitable[None]],
                 create_send_back_topic: Callable[[str, int, int, int],
                                                  Awaitable[TopicConfig | None]]):
        self._create_topic = create_topic
        self._commit_offset = commit_offset
        self._create_send_back_topic = create_send_back_topic
        self._versions: list = []
        self._topics: dict[str, TopicConfig] = {}
        self._groups: dict[str, SubscriptionGroupConfig] = {}
        self._subscriptions: dict[str, dict[str, SubscriptionData]] = {}
        self._auto_create_subscription_group = True
        # The live settings (broker/runtime_settings.py) as of the last snapshot.
        self.settings: dict[str, str] = {}

    @property
    def versions(self) -> tuple:
        """Versions of the snapshot last applied (see :meth:`MetadataState.versions`)."""
        return tuple(self._versions)

    def apply(self, snapshot) -> None:
        """Replace the state with a :meth:`MetadataState.snapshot` (any buffer). Parts whose
        version did not change are kept as they are. Raises ValueError for a bad snapshot."""
        try:
            value = orjson.loads(snapshot)
            versions = list(value["versions"])
            previous = self._versions or [None] * 6
            topics = self._topics
            if versions[0:2] != previous[0:2]:
                topics = topic_table_from_snapshot(value["topics"])
            groups = self._groups
            if versions[2:4] != previous[2:4]:
                groups = group_table_from_snapshot(value["groups"])
            subscriptions = self._subscriptions
            if versions[4] != previous[4]:
                subscriptions = subscriptions_from_snapshot(value["subscriptions"])
            auto_create = bool(value["autoCreateSubscriptionGroup"])
            settings = dict(value["settings"])
        except (orjson.JSONDecodeError, KeyError, TypeError, IndexError, AttributeError) as error:
            raise ValueError(f"bad metadata snapshot: {error!r:.200}") from None
        self._topics, self._groups, self._subscriptions = topics, groups, subscriptions
        self._auto_create_subscription_group = auto_create
        self.settings = settings
        self._versions = versions

    def topic_config(self, topic: str) -> TopicConfig | None:
        """The config of ``topic``, or None."""
        return self._topics.get(topic)

    def topic_configs(self) -> Mapping[str, TopicConfig]:
        """Every topic's config by name, as of the last snapshot (do not mutate)."""
        return self._topics

    def subscription_group(self, group: str) -> SubscriptionGroupConfig | None:
        """The config of ``group``. An unknown group reads as a default config when
        autoCreateSubscriptionGroup is on (the service creates it on the group's first
        heartbeat), else None."""
        found = self._groups.get(group)
        if found is None and auto_created(group, self._auto_create_subscription_group):
            return SubscriptionGroupConfig(group)
        return found

    def consumer_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        """The heartbeat-registered subscription of ``group`` to ``topic``, or None."""
        return self._subscriptions.get(group, {}).get(topic)

    def consumer_subscriptions(self) -> Mapping[str, Mapping[str, SubscriptionData]]:
        """Every heartbeat-registered subscription, group -> topic -> subscription, as of
        the last snapshot (do not mutate)."""
        return self._subscriptions

    async def create_topic_on_send(self, topic: str, default_topic: str, queue_nums: int,
                                   topic_sys_flag: int = 0) -> TopicConfig | None:
        """The topic's config; an unknown topic is created by the metadata service."""
        found = self._topics.get(topic)
        if found is not None:
            return found
        created = await self._create_topic(topic, default_topic, queue_nums, topic_sys_flag)
        if created is not None:
            # Visible here at once; the next snapshot carries it too.
            self._topics = {**self._topics, created.topic_name: created}
        return created

    async def create_topic_for_send_back(self, topic: str, queue_nums: int, perm: int,
                                         topic_sys_flag: int = 0) -> TopicConfig | None:
        """A %RETRY%/%DLQ% topic's config; an unknown one is created by the metadata service."""
        found = self._topics.get(topic)
        if found is not None:
            return found
        created = await self._create_send_back_topic(topic, queue_nums, perm, topic_sys_flag)
        if created is not None:
            self._topics = {**self._topics, created.topic_name: created}
        return created

    async def commit_offset(self, group: str, topic: str, queue_id: int,
                            consumer_offset: int) -> None:
        """Forward a consumer offset to the metadata service."""
        await self._commit_offset(group, topic, queue_id, consumer_offset)
