# Topics: system topics, auto-creation, updates and topics.json (Java TopicConfigManager).
"""The broker's topic configs, persisted in ``config/topics.json``.

System topics are put in first and the stored document loads over them (a stored config of a
system topic wins, as in Java). Every change bumps the document's data version, persists it at
once and calls ``on_change()`` (the owner pushes snapshots and re-registers with NameServers).
"""
import logging
from collections.abc import Callable, Mapping
from typing import Any

from pybroker.broker import attributes
from pybroker.config import BrokerConfig
from pybroker.protocol import constants, pop
from pybroker.protocol.constants import Perm, SystemTopic
from pybroker.broker.managers.versioned import VersionedDocumentManager
from pybroker.store import config_docs
from pybroker.store.config_docs import TopicConfig, TopicConfigDocument

__all__ = ["TopicConfigManager", "topic_table_from_snapshot", "SCHEDULE_QUEUE_NUMS",
           "SYSTEM_TOPIC_PREFIX"]

log = logging.getLogger("pybroker.broker.metadata")

SCHEDULE_QUEUE_NUMS = 18               # Java's fixed queue count of SCHEDULE_TOPIC_XXXX
BENCHMARK_QUEUE_NUMS = 1024
CLUSTER_TOPIC_QUEUE_NUMS = 16
SYSTEM_TOPIC_PREFIX = constants.SYSTEM_TOPIC_PREFIX       # 5.x
PERM_READ_WRITE = int(constants.PERM_READ_WRITE)

# Topics TopicValidator always counts as system topics (more are added at start, below).
_STATIC_SYSTEM_TOPICS = frozenset({
    SystemTopic.AUTO_CREATE_TEMPLATE, SystemTopic.SCHEDULE, SystemTopic.BENCHMARK,
    SystemTopic.TRANS_HALF, SystemTopic.TRANS_OP_HALF, SystemTopic.TRANS_CHECK_MAX_TIME,
    SystemTopic.TRACE, SystemTopic.SELF_TEST, SystemTopic.OFFSET_MOVED_EVENT,
})


def _system_topic_configs(broker: BrokerConfig) -> list[TopicConfig]:
    cluster_perm = int(Perm.INHERIT) | (PERM_READ_WRITE if broker.cluster_topic_enable else 0)
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
    configs.append(TopicConfig(broker.broker_cluster_name + SystemTopic.REPLY_TOPIC_SUFFIX, 1, 1))
    # 5.x: POP check-points and acks (Java puts it at every start, before loading the file).
    configs.append(TopicConfig(pop.revive_topic(broker.broker_cluster_name),
                               broker.revive_queue_num, broker.revive_queue_num))
    return configs


def topic_table_from_snapshot(value: Any) -> dict[str, TopicConfig]:
    """The topic table of a :meth:`TopicConfigManager.snapshot` (a replica's copy)."""
    return TopicConfigDocument.from_json(value).topic_config_table


class TopicConfigManager(VersionedDocumentManager):
    """Topic configs of one broker (single writer: the metadata service)."""

    def __init__(self, path: str, broker: BrokerConfig, on_change: Callable[[], None],
                 timer_wheel_enable: bool = False):
        self.path = path
        self.broker = broker
        self.on_change = on_change
        self.document: TopicConfigDocument = config_docs.load_topics(path)
        self._system_topics: set[str] = set(_STATIC_SYSTEM_TOPICS)
        table = self.document.topic_config_table
        for topic_config in _system_topic_configs(broker):
            self._system_topics.add(topic_config.topic_name)
            table.setdefault(topic_config.topic_name, topic_config)
        if timer_wheel_enable:
            # Java 5.x puts the timer's topic (one queue) at every start when the wheel is on.
            self._system_topics.add(SystemTopic.WHEEL_TIMER)
            table[SystemTopic.WHEEL_TIMER] = TopicConfig(SystemTopic.WHEEL_TIMER, 1, 1)

    # --- reads ----------------------------------------------------------------------------------
    def topic_config(self, topic: str) -> TopicConfig | None:
        """The config of ``topic``, or None."""
        return self.document.topic_config_table.get(topic)

    def topic_configs(self) -> Mapping[str, TopicConfig]:
        """All topic configs by name (the live table; do not mutate)."""
        return self.document.topic_config_table

    def is_system_topic(self, topic: str) -> bool:
        """True for TopicValidator's system topics and those created at start."""
        return topic in self._system_topics or topic.startswith(SYSTEM_TOPIC_PREFIX)

    def to_json(self) -> dict:
        """topics.json's content (GET_ALL_TOPIC_CONFIG's body)."""
        return self.document.to_json()

    def snapshot(self) -> dict:
        """This manager's part of a replica snapshot (:func:`topic_table_from_snapshot`)."""
        return self.document.to_json()

    # --- writes ---------------------------------------------------------------------------------
    def create_topic_on_send(self, topic: str, default_topic: str, queue_nums: int,
                             topic_sys_flag: int = 0) -> TopicConfig | None:
        """The topic's config, auto-creating it from ``default_topic`` (TBW102) for a send,
        with ``%RETRY%`` topics falling back to 1 read-write queue (protocol.md §5.5)."""
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
                not self.broker.auto_create_topic_enable:
            inherited = False
        if not inherited:
            log.warning("create topic %s: default topic %s has no inherit permission",
                        topic, default_topic)
            return None
        queue_count = max(0, min(queue_nums, template.write_queue_nums))
        created = TopicConfig(topic, queue_count, queue_count, template.perm & ~int(Perm.INHERIT),
                              template.topic_filter_type, topic_sys_flag)
        log.info("auto create topic %s from %s: %s", topic, default_topic, created)
        self._put(created)
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
        self._put(created)
        return created

    def update_topic_config(self, topic_config: TopicConfig,
                            modification: dict[str, str] | None = None) -> None:
        """Create or replace a topic's config (UPDATE_AND_CREATE_TOPIC); persisted.

        The new config's attributes are the current ones (none for a new topic) changed by
        ``modification`` (signed keys, :func:`pybroker.broker.attributes.parse_modification`);
        ``topic_config`` comes without attributes. Raises AttributeRefused (nothing changed)."""
        assert not topic_config.attributes, "attributes change through a modification"
        previous = self.topic_config(topic_config.topic_name)
        topic_config.attributes = attributes.apply_modification(
            attributes.TOPIC_ATTRIBUTES, previous is None,
            previous.attributes if previous is not None else {}, modification or {})
        log.info("update topic config, old: %s new: %s", previous, topic_config)
        self._put(topic_config)

    def delete_topic_config(self, topic: str) -> TopicConfig | None:
        """Remove a topic's config (persisted); returns it, or None when it did not exist."""
        removed = self.document.topic_config_table.pop(topic, None)
        if removed is not None:
            log.info("delete topic config %s", removed)
            self._changed()
        return removed

    def _put(self, topic_config: TopicConfig) -> None:
        self.document.topic_config_table[topic_config.topic_name] = topic_config
        self._changed()

    def persist(self) -> None:
        """Write topics.json (safe write, see pybroker.store.config_docs)."""
        config_docs.save_topics(self.path, self.document)
