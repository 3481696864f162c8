# Broker metadata: topics, subscription groups, consumer offsets, clients, ordered-consume locks.
"""The metadata service's state (single writer) and the read-only replica kept by workers.

:class:`MetadataState` is what RocketMQ spreads over TopicConfigManager, SubscriptionGroupManager,
ConsumerOffsetManager, ConsumerManager, ProducerManager and RebalanceLockManager. It lives in the
metadata service (the supervisor) and in tests; it persists ``config/topics.json``,
``config/subscriptionGroup.json`` and ``config/consumerOffset.json`` through
:mod:`pybroker.store.config_docs`.

READ API, offered by both :class:`MetadataState` and :class:`MetadataReplica` (a remoting
worker's copy, rebuilt from :meth:`MetadataState.snapshot` bytes):

* ``topic_config(topic) -> TopicConfig | None``
* ``subscription_group(group) -> SubscriptionGroupConfig | None`` (auto-created when
  ``autoCreateSubscriptionGroup``, like Java's ``findSubscriptionGroupConfig``)
* ``consumer_subscription(group, topic) -> SubscriptionData | None`` (from heartbeats)
* ``async create_topic_on_send(topic, default_topic, queue_nums, topic_sys_flag)``
* ``async commit_offset(group, topic, queue_id, consumer_offset)``

``producer_channels(group)`` (transaction checks) exists on MetadataState only: channels live
in the service. Everything else is used by the metadata handlers and periodic tasks in the
service (``persist_if_dirty`` every flushConsumerOffsetInterval, ``scan_expired`` every 10 s,
``shutdown``). Times are ms from ``now_ms``.
"""
import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import orjson

from pybroker import clock
from pybroker.protocol import constants
from pybroker.protocol.bodies import MessageQueue, SubscriptionData
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.command import RemotingCommand, create_request
from pybroker.protocol.constants import (
    ConsumeFromWhere, ConsumeType, MessageModel, Perm, SystemTopic)
from pybroker.store import config_docs, paths
from pybroker.store.config_docs import (
    ConsumerOffsetDocument, SubscriptionGroupConfig, SubscriptionGroupDocument, TopicConfig,
    TopicConfigDocument)

__all__ = ["MetadataState", "MetadataReplica", "ClientChannelInfo", "ConsumerGroupInfo",
           "CHANNEL_EXPIRED_TIMEOUT_MS", "CLIENT_CALL_TIMEOUT_MS", "REBALANCE_LOCK_LEASE_MS",
           "SCHEDULE_QUEUE_NUMS", "offset_table_key", "subscription_to_json", "make_channel_info"]

log = logging.getLogger(__name__)

CHANNEL_EXPIRED_TIMEOUT_MS = 120_000   # Java ConsumerManager/ProducerManager: idle clients
REBALANCE_LOCK_LEASE_MS = 60_000       # rocketmq.broker.rebalance.lockMaxLiveTime default
CLIENT_CALL_TIMEOUT_MS = 10_000       # Java Broker2Client.callClient
SCHEDULE_QUEUE_NUMS = 18               # Java's fixed queue count of SCHEDULE_TOPIC_XXXX
BENCHMARK_QUEUE_NUMS = 1024
CLUSTER_TOPIC_QUEUE_NUMS = 16
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"       # 5.x

# Topics TopicValidator always counts as system topics (more are added at start, below).
_STATIC_SYSTEM_TOPICS = frozenset({
    SystemTopic.AUTO_CREATE_TEMPLATE, SystemTopic.SCHEDULE, SystemTopic.BENCHMARK,
    SystemTopic.TRANS_HALF, SystemTopic.TRANS_OP_HALF, SystemTopic.TRANS_CHECK_MAX_TIME,
    SystemTopic.TRACE, SystemTopic.SELF_TEST, SystemTopic.OFFSET_MOVED_EVENT,
})
# Groups Java 4.9's SubscriptionGroupManager creates at start (all with default settings).
_SYSTEM_GROUPS = ("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP",
                  "CID_ONS-HTTP-PROXY", "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION",
                  "CID_ONSAPI_OWNER")

PERM_READ_WRITE = int(constants.PERM_READ_WRITE)


# --- client registry values -----------------------------------------------------------------
@dataclasses.dataclass
class ClientChannelInfo:
    """One client connection of a group: ``language``/``version`` as in its last request,
    ``last_update_ms`` = time of its last heartbeat (ms)."""
    client_id: str
    channel: Any                 # pybroker.broker.channel.Channel
    language: int
    version: int
    last_update_ms: int

    @property
    def channel_id(self) -> str:
        return self.channel.channel_id


@dataclasses.dataclass
class ConsumerGroupInfo:
    """The live members of one consumer group and what they subscribe to."""
    group_name: str
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    channels: dict[str, ClientChannelInfo] = dataclasses.field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = dataclasses.field(default_factory=dict)
    last_update_ms: int = 0

    def client_ids(self) -> list[str]:
        """Client ids of the live members, in registration order."""
        return [info.client_id for info in self.channels.values()]


@dataclasses.dataclass
class _LockEntry:
    client_id: str
    last_update_ms: int


# --- subscription JSON (snapshots, and ConsumerConnection bodies) ------------------------------
def subscription_to_json(subscription: SubscriptionData) -> dict:
    """A SubscriptionData as Java's JSON object (field names of §7.3)."""
    return {"topic": subscription.topic, "subString": subscription.sub_string,
            "tagsSet": sorted(subscription.tags_set), "codeSet": sorted(subscription.code_set),
            "subVersion": subscription.sub_version,
            "expressionType": subscription.expression_type,
            "classFilterMode": subscription.class_filter_mode}


def _subscription_from_json(value: dict) -> SubscriptionData:
    return SubscriptionData(
        topic=value["topic"], sub_string=value["subString"],
        tags_set=frozenset(value["tagsSet"]), code_set=frozenset(value["codeSet"]),
        sub_version=value["subVersion"], expression_type=value["expressionType"],
        class_filter_mode=value["classFilterMode"])


def offset_table_key(group: str, topic: str) -> str:
    """consumerOffset.json's key of a (group, topic): ``topic@group``."""
    return f"{topic}@{group}"


def _expire_client_call(future: asyncio.Future, timeout_ms: int) -> None:
    """Fail a broker -> client call still waiting after ``timeout_ms``."""
    if not future.done():
        future.set_exception(TimeoutError(f"no answer from the client in {timeout_ms} ms"))


class MetadataState:
    """Authoritative broker metadata (one instance, in the metadata service).

    ``config`` is a :class:`pybroker.config.Config`; documents live under
    ``<store_root>/config/`` (``store_root`` defaults to ``config.store.store_path_root_dir``).
    ``now_ms`` is the clock (ms) used for client expiry and lock leases. ``on_change(kind)``
    is called after every change of ``"topics"``, ``"groups"`` or ``"subscriptions"`` (the
    service pushes snapshots and re-registers with name servers on ``"topics"``).
    Loads the documents and creates the system topics and groups on construction.
    """

    def __init__(self, config, *, store_root: str | None = None,
                 now_ms: Callable[[], int] | None = None,
                 on_change: Callable[[str], None] | None = None,
                 lock_lease_ms: int = REBALANCE_LOCK_LEASE_MS,
                 channel_expired_timeout_ms: int = CHANNEL_EXPIRED_TIMEOUT_MS,
                 client_call_timeout_ms: int = CLIENT_CALL_TIMEOUT_MS):
        self.config = config
        root = store_root if store_root is not None else config.store.store_path_root_dir
        self.topics_path = paths.config_path(root, paths.TOPICS_CONFIG)
        self.groups_path = paths.config_path(root, paths.SUBSCRIPTION_GROUP_CONFIG)
        self.offsets_path = paths.config_path(root, paths.CONSUMER_OFFSET_CONFIG)
        self.now_ms = now_ms or clock.now_ms
        self.on_change = on_change
        self.lock_lease_ms = lock_lease_ms
        self.channel_expired_timeout_ms = channel_expired_timeout_ms
        self.client_call_timeout_ms = client_call_timeout_ms
        self.topics: TopicConfigDocument = config_docs.load_topics(self.topics_path)
        self.groups: SubscriptionGroupDocument = config_docs.load_subscription_groups(
            self.groups_path)
        self.offsets: ConsumerOffsetDocument = config_docs.load_consumer_offsets(
            self.offsets_path)
        self.offsets_dirty = False
        self.consumer_groups: dict[str, ConsumerGroupInfo] = {}
        self.producer_groups: dict[str, dict[str, ClientChannelInfo]] = {}
        self.subscription_version = 0      # bumped whenever any group's subscriptions change
        self._locks: dict[str, dict[MessageQueue, _LockEntry]] = {}
        # Set by the schedule service: () -> DelayOffsetDocument for GET_ALL_DELAY_OFFSET.
        self.delay_offsets_provider: Callable[[], Any] | None = None
        # 5.x heartbeat V2: the last fingerprint each consumer group sent.
        self.heartbeat_fingerprints: dict[str, int] = {}
        # Broker -> client calls awaiting the client's response: (channel_id, opaque) -> future.
        self._client_calls: dict[tuple[str, int], asyncio.Future] = {}
        self._system_topics: set[str] = set(_STATIC_SYSTEM_TOPICS)
        self._add_system_topics()
        self._add_system_groups()

    # --- start-up ------------------------------------------------------------------------------
    def _system_topic_configs(self) -> list[TopicConfig]:
        broker = self.config.broker
        cluster_perm = int(Perm.INHERIT) | (PERM_READ_WRITE if broker.cluster_topic_enable
                                            else 0)
        broker_perm = int(Perm.INHERIT) | (PERM_READ_WRITE if broker.broker_topic_enable else 0)
        configs = [TopicConfig(SystemTopic.SELF_TEST, 1, 1)]
        if broker.auto_create_topic_enable:
            queue_nums = broker.default_topic_queue_nums
            configs.append(TopicConfig(SystemTopic.AUTO_CREATE_TEMPLATE, queue_nums, queue_nums,
                                       int(constants.PERM_TEMPLATE)))
        configs += [
            TopicConfig(SystemTopic.BENCHMARK, BENCHMARK_QUEUE_NUMS, BENCHMARK_QUEUE_NUMS),
            TopicConfig(broker.broker_cluster_name, CLUSTER_TOPIC_QUEUE_NUMS,
                        CLUSTER_TOPIC_QUEUE_NUMS, cluster_perm),
            TopicConfig(broker.broker_name, 1, 1, broker_perm),
            TopicConfig(SystemTopic.OFFSET_MOVED_EVENT, 1, 1),
            TopicConfig(SystemTopic.SCHEDULE, SCHEDULE_QUEUE_NUMS, SCHEDULE_QUEUE_NUMS),
        ]
        if broker.trace_topic_enable:
            configs.append(TopicConfig(broker.msg_trace_topic_name, 1, 1))
        configs.append(TopicConfig(broker.broker_cluster_name + SystemTopic.REPLY_TOPIC_SUFFIX,
                                   1, 1))
        return configs

    def _add_system_topics(self) -> None:
        # Java puts the system topics first and then loads topics.json over them: a stored
        # config of a system topic wins.
        table = self.topics.topic_config_table
        for topic_config in self._system_topic_configs():
            self._system_topics.add(topic_config.topic_name)
            table.setdefault(topic_config.topic_name, topic_config)

    def _add_system_groups(self) -> None:
        table = self.groups.subscription_group_table
        for group in _SYSTEM_GROUPS:
            table.setdefault(group, SubscriptionGroupConfig(group))

    def _changed(self, kind: str) -> None:
        if self.on_change is not None:
            self.on_change(kind)

    # --- READ API ------------------------------------------------------------------------------
    def topic_config(self, topic: str) -> TopicConfig | None:
        """The config of ``topic``, or None."""
        return self.topics.topic_config_table.get(topic)

    def subscription_group(self, group: str) -> SubscriptionGroupConfig | None:
        """The config of ``group``; created (and persisted) when absent and
        autoCreateSubscriptionGroup is on or the group is a ``CID_RMQ_SYS_`` group."""
        table = self.groups.subscription_group_table
        found = table.get(group)
        if found is not None:
            return found
        if not (self.config.broker.auto_create_subscription_group
                or group.startswith(SYSTEM_GROUP_PREFIX)):
            return None
        created = SubscriptionGroupConfig(group)
        self.update_subscription_group(created)
        log.info("auto create a subscription group %s", group)
        return created

    def consumer_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        """The subscription of ``group`` to ``topic`` its members registered by heartbeat."""
        info = self.consumer_groups.get(group)
        return None if info is None else info.subscriptions.get(topic)

    async def create_topic_on_send(self, topic: str, default_topic: str, queue_nums: int,
                                   topic_sys_flag: int = 0) -> TopicConfig | None:
        """The topic's config, auto-creating it from ``default_topic`` (TBW102) for a send,
        with ``%RETRY%`` topics falling back to 1 read-write queue (reference §5.5)."""
        return self.create_topic_on_send_now(topic, default_topic, queue_nums, topic_sys_flag)

    async def commit_offset(self, group: str, topic: str, queue_id: int,
                            consumer_offset: int) -> None:
        """Record a consumer offset (pull piggy-back); persisted by :meth:`persist_if_dirty`."""
        self.commit(group, topic, queue_id, consumer_offset)

    def producer_channels(self, group: str) -> list:
        """Channels of the live producers of ``group`` (transaction checks), oldest first."""
        return [info.channel for info in self.producer_groups.get(group, {}).values()]

    def producer_clients(self, group: str) -> list:
        """ClientChannelInfo of the live producers of ``group`` (GET_PRODUCER_CONNECTION_LIST)."""
        return list(self.producer_groups.get(group, {}).values())

    # --- topics ----------------------------------------------------------------------------------
    def is_system_topic(self, topic: str) -> bool:
        """True for TopicValidator's system topics and those created at start."""
        return topic in self._system_topics or topic.startswith(SYSTEM_TOPIC_PREFIX)

    def topic_configs(self) -> dict[str, TopicConfig]:
        """All topic configs by name (the live table; do not mutate)."""
        return self.topics.topic_config_table

    def create_topic_on_send_now(self, topic: str, default_topic: str, queue_nums: int,
                                 topic_sys_flag: int = 0) -> TopicConfig | None:
        """Synchronous form of :meth:`create_topic_on_send`."""
        found = self.topic_config(topic)
        if found is not None:
            return found
        created = self._create_from_template(topic, default_topic, queue_nums, topic_sys_flag)
        if created is None and topic.startswith(constants.RETRY_GROUP_TOPIC_PREFIX):
            return self.create_topic_for_send_back(topic, 1, PERM_READ_WRITE, topic_sys_flag)
        return created

    def _create_from_template(self, topic: str, default_topic: str, queue_nums: int,
                              topic_sys_flag: int) -> TopicConfig | None:
        template = self.topic_config(default_topic)
        if template is None:
            log.warning("create topic %s: default topic %s does not exist", topic, default_topic)
            return None
        inherited = bool(template.perm & Perm.INHERIT)
        # Java strips INHERIT from TBW102 when autoCreateTopicEnable is off.
        if default_topic == SystemTopic.AUTO_CREATE_TEMPLATE and \
                not self.config.broker.auto_create_topic_enable:
            inherited = False
        if not inherited:
            log.warning("create topic %s: default topic %s has no inherit permission",
                        topic, default_topic)
            return None
        queue_count = max(0, min(queue_nums, template.write_queue_nums))
        created = TopicConfig(topic, queue_count, queue_count, template.perm & ~int(Perm.INHERIT),
                              template.topic_filter_type, topic_sys_flag)
        log.info("auto create topic %s from %s: %s", topic, default_topic, created)
        self._put_topic(created)
        return created

    def create_topic_for_send_back(self, topic: str, queue_nums: int, perm: int,
                                   topic_sys_flag: int = 0) -> TopicConfig:
        """The topic's config, creating it with ``queue_nums`` queues and ``perm`` when
        absent (retry topics on heartbeat and send-back, DLQ topics)."""
        found = self.topic_config(topic)
        if found is not None:
            return found
        created = TopicConfig(topic, queue_nums, queue_nums, perm, topic_sys_flag=topic_sys_flag)
        log.info("create topic %s: %s", topic, created)
        self._put_topic(created)
        return created

    def update_topic_config(self, topic_config: TopicConfig) -> None:
        """Create or replace a topic's config (UPDATE_AND_CREATE_TOPIC); persisted."""
        previous = self.topic_config(topic_config.topic_name)
        log.info("update topic config, old: %s new: %s", previous, topic_config)
        self._put_topic(topic_config)

    def delete_topic_config(self, topic: str) -> TopicConfig | None:
        """Remove a topic's config (persisted); returns it, or None when it did not exist."""
        removed = self.topics.topic_config_table.pop(topic, None)
        if removed is not None:
            log.info("delete topic config %s", removed)
            self._topics_changed()
        return removed

    def _put_topic(self, topic_config: TopicConfig) -> None:
        self.topics.topic_config_table[topic_config.topic_name] = topic_config
        self._topics_changed()

    def _topics_changed(self) -> None:
        self.topics.data_version.next_version()
        config_docs.save_topics(self.topics_path, self.topics)
        self._changed("topics")

    # --- subscription groups -----------------------------------------------------------------
    def subscription_groups(self) -> dict[str, SubscriptionGroupConfig]:
        """All subscription group configs by name (the live table; do not mutate)."""
        return self.groups.subscription_group_table

    def has_subscription_group(self, group: str) -> bool:
        """True when ``group`` has a config (never creates one)."""
        return group in self.groups.subscription_group_table

    def update_subscription_group(self, group_config: SubscriptionGroupConfig) -> None:
        """Create or replace a group's config; persisted, data version bumped."""
        self.groups.subscription_group_table[group_config.group_name] = group_config
        self._groups_changed()

    def delete_subscription_group(self, group: str) -> SubscriptionGroupConfig | None:
        """Remove a group's config (persisted); returns it, or None when absent."""
        removed = self.groups.subscription_group_table.pop(group, None)
        if removed is not None:
            self._groups_changed()
        return removed

    def _groups_changed(self) -> None:
        self.groups.data_version.next_version()
        config_docs.save_subscription_groups(self.groups_path, self.groups)
        self._changed("groups")

    # --- consumer offsets --------------------------------------------------------------------
    def commit(self, group: str, topic: str, queue_id: int, consumer_offset: int) -> None:
        """Record ``consumer_offset`` of (group, topic, queue_id); persisted within the next
        :meth:`persist_if_dirty` (every flushConsumerOffsetInterval ms) or at shutdown."""
        queues = self.offsets.offset_table.setdefault(offset_table_key(group, topic), {})
        queues[queue_id] = consumer_offset
        self.offsets_dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed consumer offset, or -1 when none was committed."""
        queues = self.offsets.offset_table.get(offset_table_key(group, topic))
        if queues is None:
            return -1
        return queues.get(queue_id, -1)

    def consumer_offsets(self, group: str, topic: str) -> dict[int, int]:
        """{queue_id: consumer_offset} of (group, topic); empty when none (a copy)."""
        return dict(self.offsets.offset_table.get(offset_table_key(group, topic), {}))

    def topics_of_group(self, group: str) -> set[str]:
        """Topics ``group`` has committed offsets for."""
        suffix = "@" + group
        return {key[:-len(suffix)] for key in self.offsets.offset_table if key.endswith(suffix)}

    def groups_of_topic(self, topic: str) -> set[str]:
        """Groups that committed offsets for ``topic``."""
        prefix = topic + "@"
        return {key[len(prefix):] for key in self.offsets.offset_table
                if key.startswith(prefix)}

    def remove_offsets_of_group(self, group: str) -> None:
        """Forget every offset of ``group`` (DELETE_SUBSCRIPTIONGROUP with removeOffset)."""
        self._remove_offsets(lambda key: key.rsplit("@", 1)[-1] == group)

    def remove_offsets_of_topic(self, topic: str) -> None:
        """Forget every offset of ``topic`` (topic deleted)."""
        self._remove_offsets(lambda key: key.rsplit("@", 1)[0] == topic)

    def _remove_offsets(self, matches: Callable[[str], bool]) -> None:
        table = self.offsets.offset_table
        doomed = [key for key in table if matches(key)]
        for key in doomed:
            del table[key]
        if doomed:
            self.offsets_dirty = True

    def persist_if_dirty(self) -> bool:
        """Write consumerOffset.json when offsets changed since the last write; True if
        written. The service calls this every flushConsumerOffsetInterval ms."""
        if not self.offsets_dirty:
            return False
        self.offsets_dirty = False
        try:
            config_docs.save_consumer_offsets(self.offsets_path, self.offsets)
        except BaseException:
            self.offsets_dirty = True
            raise
        return True

    def shutdown(self) -> None:
        """Persist everything (offsets, topics, groups), as Java does at broker shutdown."""
        self.offsets_dirty = True
        self.persist_if_dirty()
        config_docs.save_topics(self.topics_path, self.topics)
        config_docs.save_subscription_groups(self.groups_path, self.groups)

    # --- consumers -----------------------------------------------------------------------------
    def register_consumer(self, group: str, client: ClientChannelInfo,
                          consume_type: ConsumeType, message_model: MessageModel,
                          consume_from_where: ConsumeFromWhere,
                          subscriptions: Iterable[SubscriptionData] | None,
                          notify_enabled: bool = True) -> bool:
        """Register a consumer's heartbeat; True when the group's membership or
        subscriptions changed (then members are notified if ``notify_enabled``).
        ``subscriptions`` None = a 5.x "without sub" heartbeat: subscriptions unchanged."""
        now_ms = self.now_ms()
        info = self.consumer_groups.get(group)
        if info is None:
            info = self.consumer_groups[group] = ConsumerGroupInfo(group)
        info.consume_type = ConsumeType(consume_type)
        info.message_model = MessageModel(message_model)
        info.consume_from_where = ConsumeFromWhere(consume_from_where)
        info.last_update_ms = now_ms
        client.last_update_ms = now_ms
        members_changed = self._update_channel(info, client)
        subscriptions_changed = (subscriptions is not None
                                 and self._update_subscriptions(info, subscriptions))
        if members_changed or subscriptions_changed:
            if notify_enabled:
                self.notify_consumer_ids_changed(group)
        return members_changed or subscriptions_changed

    @staticmethod
    def _update_channel(info: ConsumerGroupInfo, client: ClientChannelInfo) -> bool:
        previous = info.channels.get(client.channel_id)
        info.channels[client.channel_id] = client
        if previous is None:
            log.info("new consumer connected, group: %s %s", info.group_name, client.client_id)
            return True
        if previous.client_id != client.client_id:
            log.error("consumer channel exists with client id %s, new %s", previous.client_id,
                      client.client_id)
        return False

    def _update_subscriptions(self, info: ConsumerGroupInfo,
                              subscriptions: Iterable[SubscriptionData]) -> bool:
        changed, version_changed = False, False
        table = info.subscriptions
        topics = set()
        for subscription in subscriptions:
            topics.add(subscription.topic)
            previous = table.get(subscription.topic)
            if previous is None:
                table[subscription.topic] = subscription
                changed = True
            elif subscription.sub_version > previous.sub_version:
                # A newer expression: kept, but (like Java) not a membership change.
                table[subscription.topic] = subscription
                version_changed = True
        for topic in [topic for topic in table if topic not in topics]:
            del table[topic]
            changed = True
        if changed or version_changed:
            self.subscription_version += 1
            self._changed("subscriptions")
        return changed

    def unregister_consumer(self, group: str, channel_id: str, notify_enabled: bool = True
                            ) -> bool:
        """Remove one channel from ``group`` (UNREGISTER_CLIENT); True if it was there."""
        info = self.consumer_groups.get(group)
        if info is None or info.channels.pop(channel_id, None) is None:
            return False
        if not info.channels:
            self._drop_consumer_group(group)
        elif notify_enabled:
            self.notify_consumer_ids_changed(group)
        return True

    def _drop_consumer_group(self, group: str) -> None:
        info = self.consumer_groups.pop(group, None)
        log.info("unregister consumer group %s: no live members", group)
        if info is not None and info.subscriptions:
            self.subscription_version += 1
            self._changed("subscriptions")

    def consumer_group_info(self, group: str) -> ConsumerGroupInfo | None:
        """Live members and subscriptions of ``group``, or None."""
        return self.consumer_groups.get(group)

    def consumer_client_ids(self, group: str) -> list[str]:
        """Client ids of the live consumers of ``group`` (empty when none)."""
        info = self.consumer_groups.get(group)
        return [] if info is None else info.client_ids()

    def find_consumer_channel(self, group: str, client_id: str) -> ClientChannelInfo | None:
        """The live member of ``group`` with ``client_id`` (for 307/309 forwarding)."""
        info = self.consumer_groups.get(group)
        if info is None:
            return None
        for client in info.channels.values():
            if client.client_id == client_id:
                return client
        return None

    def consumer_groups_of_topic(self, topic: str) -> set[str]:
        """Groups with a live member subscribed to ``topic``."""
        return {group for group, info in self.consumer_groups.items()
                if topic in info.subscriptions}

    def notify_consumer_ids_changed(self, group: str) -> int:
        """Send NOTIFY_CONSUMER_IDS_CHANGED (oneway) to every live member of ``group`` when
        notifyConsumerIdsChangedEnable is on for the broker and the group; returns the count
        sent. A channel that cannot send is skipped (it will expire)."""
        info = self.consumer_groups.get(group)
        if info is None or not self.config.broker.notify_consumer_ids_changed_enable:
            return 0
        group_config = self.groups.subscription_group_table.get(group)
        if group_config is not None and not group_config.notify_consumer_ids_changed_enable:
            return 0
        sent = 0
        for client in list(info.channels.values()):
            request = create_request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                     {"consumerGroup": group}, oneway=True)
            try:
                client.channel.send(request)
                sent += 1
            except (ConnectionError, OSError, RuntimeError) as error:
                log.warning("notify consumer ids changed to %s failed: %s",
                            client.client_id, error)
        return sent

    # --- producers -----------------------------------------------------------------------------
    def register_producer(self, group: str, client: ClientChannelInfo) -> None:
        """Register (or refresh) a producer channel of ``group``."""
        client.last_update_ms = self.now_ms()
        channels = self.producer_groups.setdefault(group, {})
        previous = channels.get(client.channel_id)
        if previous is None:
            channels[client.channel_id] = client
            log.info("new producer connected, group: %s %s", group, client.client_id)
        else:
            previous.last_update_ms = client.last_update_ms
            previous.channel = client.channel

    def unregister_producer(self, group: str, channel_id: str) -> bool:
        """Remove one producer channel of ``group``; True if it was there."""
        channels = self.producer_groups.get(group)
        if channels is None or channels.pop(channel_id, None) is None:
            return False
        if not channels:
            del self.producer_groups[group]
        return True

    # --- channel life ----------------------------------------------------------------------------
    def channel_closed(self, channel_id: str) -> None:
        """A client connection is gone: remove it from every group and notify the rest."""
        self._remove_channels({channel_id})

    def scan_expired(self, now_ms: int | None = None) -> set[str]:
        """Drop channels without a heartbeat for more than 120 s (call every 10 s); returns
        the ids dropped, so the service can close those connections."""
        now_ms = self.now_ms() if now_ms is None else now_ms
        limit = self.channel_expired_timeout_ms
        expired = set()
        for info in self.consumer_groups.values():
            expired.update(channel_id for channel_id, client in info.channels.items()
                           if now_ms - client.last_update_ms > limit)
        for channels in self.producer_groups.values():
            expired.update(channel_id for channel_id, client in channels.items()
                           if now_ms - client.last_update_ms > limit)
        if expired:
            log.warning("client channels expired: %s", sorted(expired))
            self._remove_channels(expired)
        return expired

    def _remove_channels(self, channel_ids: set[str]) -> None:
        for group, info in list(self.consumer_groups.items()):
            removed = [cid for cid in channel_ids if info.channels.pop(cid, None) is not None]
            if not removed:
                continue
            if not info.channels:
                self._drop_consumer_group(group)
            else:
                self.notify_consumer_ids_changed(group)
        for group in list(self.producer_groups):
            for channel_id in channel_ids:
                self.unregister_producer(group, channel_id)

    # --- ordered-consume locks -----------------------------------------------------------------
    def try_lock_batch(self, group: str, queues: Iterable[MessageQueue], client_id: str,
                       only_this_broker: bool = True) -> list[MessageQueue]:
        """Lock ``queues`` for ``client_id`` (60 s lease); returns those now held by it.

        A queue is granted when unlocked, when its lease expired, or when ``client_id``
        already holds it (the lease is renewed). ``only_this_broker`` asks Java 5.x brokers
        to also lock on the other replicas of the broker set; pybroker has no replicas that
        lock, so both values give the same answer.
        """
        now_ms = self.now_ms()
        table = self._locks.setdefault(group, {})
        locked = []
        for queue in queues:
            entry = table.get(queue)
            if entry is None or entry.client_id == client_id or \
                    now_ms - entry.last_update_ms > self.lock_lease_ms:
                if entry is not None and entry.client_id != client_id:
                    log.warning("lock %s of %s: expired lease of %s taken over by %s", queue,
                                group, entry.client_id, client_id)
                table[queue] = _LockEntry(client_id, now_ms)
                locked.append(queue)
        return locked

    def unlock_batch(self, group: str, queues: Iterable[MessageQueue], client_id: str) -> None:
        """Release the queues ``client_id`` holds; others' locks are left alone."""
        table = self._locks.get(group)
        if table is None:
            return
        for queue in queues:
            entry = table.get(queue)
            if entry is not None and entry.client_id == client_id:
                del table[queue]
        if not table:
            del self._locks[group]

    def is_locked(self, group: str, queue: MessageQueue, client_id: str) -> bool:
        """True when ``client_id`` holds an unexpired lock of ``queue`` (renews it)."""
        entry = self._locks.get(group, {}).get(queue)
        now_ms = self.now_ms()
        if entry is None or entry.client_id != client_id or \
                now_ms - entry.last_update_ms > self.lock_lease_ms:
            return False
        entry.last_update_ms = now_ms
        return True

    # --- broker -> client calls (GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY) -----------
    async def call_client(self, channel, request: RemotingCommand,
                          timeout_ms: int | None = None) -> RemotingCommand:
        """Send ``request`` to the client on ``channel`` and wait for its response.

        ``timeout_ms`` defaults to ``client_call_timeout_ms`` (10 s, Java's). Correlation is
        by (channel id, opaque): whoever receives the client's response (the
        remoting worker relays responses it did not originate to the service) hands it to
        :meth:`complete_client_call`. Raises TimeoutError after ``timeout_ms`` and
        ConnectionError when the channel cannot send.
        """
        if timeout_ms is None:
            timeout_ms = self.client_call_timeout_ms
        key = (channel.channel_id, request.opaque)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._client_calls[key] = future
        # A timer, not asyncio.timeout(): eager request tables run handlers outside a task,
        # where asyncio.timeout() raises RuntimeError.
        timer = loop.call_later(timeout_ms / 1000, _expire_client_call, future, timeout_ms)
        try:
            channel.send(request)
            return await future
        finally:
            timer.cancel()
            self._client_calls.pop(key, None)

    def complete_client_call(self, channel_id: str, response: RemotingCommand) -> bool:
        """Deliver a client's response to the :meth:`call_client` waiting for it; False when
        none waits (late or unknown: dropped, as Java drops unmatched responses)."""
        future = self._client_calls.pop((channel_id, response.opaque), None)
        if future is None or future.done():
            return False
        future.set_result(response)
        return True

    # --- snapshots for worker replicas ---------------------------------------------------------
    def versions(self) -> tuple:
        """(topics counter, topics timestamp, groups counter, groups timestamp,
        subscription version): changes whenever :meth:`snapshot` would."""
        topics, groups = self.topics.data_version, self.groups.data_version
        return (topics.counter, topics.timestamp, groups.counter, groups.timestamp,
                self.subscription_version)

    def snapshot(self) -> bytes:
        """Compact JSON of topics, subscription groups and consumer subscriptions, with their
        data versions, for :meth:`MetadataReplica.apply`."""
        subscriptions = {
            group: [subscription_to_json(s) for s in info.subscriptions.values()]
            for group, info in self.consumer_groups.items() if info.subscriptions}
        return orjson.dumps({
            "versions": list(self.versions()),
            "autoCreateSubscriptionGroup": self.config.broker.auto_create_subscription_group,
            "topics": self.topics.to_json(),
            "groups": self.groups.to_json(),
            "subscriptions": subscriptions,
        }, option=orjson.OPT_NON_STR_KEYS)


class MetadataReplica:
    """A remoting worker's read-only copy of the metadata, current as of the last
    :meth:`apply`. Writes go to the metadata service through the two coroutines given:

    ``create_topic(topic, default_topic, queue_nums, topic_sys_flag) -> TopicConfig | None``
    and ``commit_offset(group, topic, queue_id, consumer_offset) -> None``.
    """

    def __init__(self, create_topic: Callable[[str, str, int, int],
                                              Awaitable[TopicConfig | None]],
                 commit_offset: Callable[[str, str, int, int], Awaitable[None]]):
        self._create_topic = create_topic
        self._commit_offset = commit_offset
        self._versions: list = []
        self._topics: dict[str, TopicConfig] = {}
        self._groups: dict[str, SubscriptionGroupConfig] = {}
        self._subscriptions: dict[str, dict[str, SubscriptionData]] = {}
        self._auto_create_subscription_group = True

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
            previous = self._versions or [None] * 5
            topics = self._topics
            if versions[0:2] != previous[0:2]:
                document = TopicConfigDocument.from_json(value["topics"])
                topics = document.topic_config_table
            groups = self._groups
            if versions[2:4] != previous[2:4]:
                groups = SubscriptionGroupDocument.from_json(
                    value["groups"]).subscription_group_table
            subscriptions = self._subscriptions
            if versions[4] != previous[4]:
                subscriptions = {group: {s["topic"]: _subscription_from_json(s) for s in subs}
                                 for group, subs in value["subscriptions"].items()}
            auto_create = bool(value["autoCreateSubscriptionGroup"])
        except (orjson.JSONDecodeError, KeyError, TypeError, IndexError, AttributeError) as error:
            raise ValueError(f"bad metadata snapshot: {error!r:.200}") from None
        self._topics, self._groups, self._subscriptions = topics, groups, subscriptions
        self._auto_create_subscription_group = auto_create
        self._versions = versions

    def topic_config(self, topic: str) -> TopicConfig | None:
        """The config of ``topic``, or None."""
        return self._topics.get(topic)

    def subscription_group(self, group: str) -> SubscriptionGroupConfig | None:
        """The config of ``group``. An unknown group reads as a default config when
        autoCreateSubscriptionGroup is on (the service creates it on the group's first
        heartbeat), else None."""
        found = self._groups.get(group)
        if found is None and (self._auto_create_subscription_group
                              or group.startswith(SYSTEM_GROUP_PREFIX)):
            return SubscriptionGroupConfig(group)
        return found

    def consumer_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        """The heartbeat-registered subscription of ``group`` to ``topic``, or None."""
        return self._subscriptions.get(group, {}).get(topic)

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

    async def commit_offset(self, group: str, topic: str, queue_id: int,
                            consumer_offset: int) -> None:
        """Forward a consumer offset to the metadata service."""
        await self._commit_offset(group, topic, queue_id, consumer_offset)


def make_channel_info(channel, client_id: str, now_ms: int) -> ClientChannelInfo:
    """A :class:`ClientChannelInfo` for ``channel`` as of its latest request."""
    return ClientChannelInfo(client_id, channel, channel.language, channel.version, now_ms)

