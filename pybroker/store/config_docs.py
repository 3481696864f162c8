# RocketMQ's config JSON documents (topics, offsets, groups, delay offsets): types, load, save.
"""The broker's metadata documents under ``<store>/config/`` (protocol.md §4.8).

Field names are Java's, read from fastjson output (bare integer keys accepted through
:mod:`pybroker.protocol.fastjson`) and written as standard, pretty-printed JSON with quoted keys,
which fastjson reads back. Unknown fields of a loaded document (5.x additions) are kept in
``extra`` and written back unchanged, so a round trip through pybroker loses nothing.

Safe write (Java ``MixAll.string2File``, made durable): new content to ``<file>.tmp`` (fsync),
previous content to ``<file>.bak`` (fsync), tmp renamed over the file, directory fsync. Load: the
file; if absent or unparsable, ``<file>.tmp`` when the file is absent (a save died between delete
and rename; the tmp was complete before the old file went away), then ``<file>.bak``. All absent
means an empty document (first start); a file that exists but is corrupt with no usable fallback
raises :class:`StoreCorruptError` naming it, instead of silently starting empty.
"""
import dataclasses
import logging
import os
from typing import Any, Callable, TypeVar

import orjson

from pybroker import clock
from pybroker.errors import StoreCorruptError
from pybroker.protocol import fastjson

__all__ = [
    "DataVersion", "TopicConfig", "SubscriptionGroupConfig", "TopicConfigDocument",
    "ConsumerOffsetDocument", "SubscriptionGroupDocument", "DelayOffsetDocument",
    "load_json_document", "save_json_document", "load_topics", "save_topics",
    "save_file", "load_consumer_offsets", "save_consumer_offsets", "load_subscription_groups",
    "save_subscription_groups", "load_delay_offsets", "save_delay_offsets",
    "RequestMode", "MessageRequestModeDocument", "load_message_request_modes",
    "save_message_request_modes",
]

log = logging.getLogger(__name__)

TMP_SUFFIX = ".tmp"
BAK_SUFFIX = ".bak"

T = TypeVar("T")


# --- value types -------------------------------------------------------------------------------

@dataclasses.dataclass
class DataVersion:
    """Version stamp of a document: ``timestamp`` (ms) and ``counter`` (+1 per change)."""

    timestamp: int = dataclasses.field(default_factory=clock.now_ms)
    counter: int = 0
    state_version: int | None = None   # 5.x only; written back only when it was read

    def next_version(self) -> None:
        """Record one change: counter + 1 and timestamp = now (ms)."""
        self.counter += 1
        self.timestamp = clock.now_ms()

    @classmethod
    def from_json(cls, value: Any) -> "DataVersion":
        if not isinstance(value, dict):
            return cls()
        return cls(timestamp=int(value.get("timestamp", 0)), counter=int(value.get("counter", 0)),
                   state_version=_optional_int(value.get("stateVersion")))

    def to_json(self) -> dict:
        result = {"counter": self.counter, "timestamp": self.timestamp}
        if self.state_version is not None:
            result["stateVersion"] = self.state_version
        return result


# (json name, python attribute, converter) tables: one place per type maps Java names.
_TOPIC_FIELDS = (
    ("topicName", "topic_name", str), ("readQueueNums", "read_queue_nums", int),
    ("writeQueueNums", "write_queue_nums", int), ("perm", "perm", int),
    ("topicFilterType", "topic_filter_type", str), ("topicSysFlag", "topic_sys_flag", int),
    ("order", "order", bool), ("attributes", "attributes", dict),
)


@dataclasses.dataclass
class TopicConfig:
    """One topic's configuration (Java ``TopicConfig``); defaults are Java's."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6                        # PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict = dataclasses.field(default_factory=dict)
    extra: dict = dataclasses.field(default_factory=dict)   # unknown fields, kept verbatim

    @classmethod
    def from_json(cls, value: Any, name: str = "") -> "TopicConfig":
        return _from_fields(cls, _TOPIC_FIELDS, value, {"topic_name": name})

    def to_json(self) -> dict:
        return _to_fields(self, _TOPIC_FIELDS)

    def bean_json(self) -> dict:
        """The fields of Java's bean only (what a Java broker answers GET_TOPIC_CONFIG with:
        unknown fields of a loaded file are not part of it)."""
        return _to_fields(self, _TOPIC_FIELDS, with_extra=False)


_GROUP_FIELDS = (
    ("groupName", "group_name", str), ("consumeEnable", "consume_enable", bool),
    ("consumeFromMinEnable", "consume_from_min_enable", bool),
    ("consumeBroadcastEnable", "consume_broadcast_enable", bool),
    ("retryQueueNums", "retry_queue_nums", int), ("retryMaxTimes", "retry_max_times", int),
    ("brokerId", "broker_id", int),
    ("whichBrokerWhenConsumeSlowly", "which_broker_when_consume_slowly", int),
    ("notifyConsumerIdsChangedEnable", "notify_consumer_ids_changed_enable", bool),
    ("consumeMessageOrderly", "consume_message_orderly", bool),
    ("groupSysFlag", "group_sys_flag", int),
    ("consumeTimeoutMinute", "consume_timeout_minute", int),
    ("groupRetryPolicy", "group_retry_policy", dict), ("attributes", "attributes", dict),
)


_SUBSCRIPTION_DATA_SET = "subscriptionDataSet"   # 5.x, kept in extra


@dataclasses.dataclass
class SubscriptionGroupConfig:
    """One consumer group's configuration (Java ``SubscriptionGroupConfig``), Java defaults."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    consume_message_orderly: bool = False
    group_sys_flag: int = 0
    consume_timeout_minute: int = 15
    # 5.x: the retry policy as Java writes it ({"type": "CUSTOMIZED"} by default) and the
    # group's attributes (Java 5.3.3 knows none; broker/attributes.py).
    group_retry_policy: dict = dataclasses.field(default_factory=lambda: {"type": "CUSTOMIZED"})
    attributes: dict = dataclasses.field(default_factory=dict)
    extra: dict = dataclasses.field(default_factory=dict)   # subscriptionDataSet, ...

    @classmethod
    def from_json(cls, value: Any, name: str = "") -> "SubscriptionGroupConfig":
        return _from_fields(cls, _GROUP_FIELDS, value, {"group_name": name})

    def to_json(self) -> dict:
        return _to_fields(self, _GROUP_FIELDS)

    def bean_json(self) -> dict:
        """Java's bean fields (GET_SUBSCRIPTIONGROUP_CONFIG's body): the known ones and
        ``subscriptionDataSet`` when the group has one; other unknown fields are dropped."""
        result = _to_fields(self, _GROUP_FIELDS, with_extra=False)
        if self.extra.get(_SUBSCRIPTION_DATA_SET) is not None:
            result[_SUBSCRIPTION_DATA_SET] = self.extra[_SUBSCRIPTION_DATA_SET]
        return result


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _convert(converter: Callable, value: Any) -> Any:
    if converter is bool:
        if isinstance(value, str):   # fastjson accepts "true"/"false" strings
            return value.lower() == "true"
        return bool(value)
    if converter is dict:
        return dict(value) if isinstance(value, dict) else {}
    return converter(value)


def _from_fields(cls: type[T], fields: tuple, value: Any, defaults: dict) -> T:
    if not isinstance(value, dict):
        raise ValueError(f"{cls.__name__} must be a JSON object, not {type(value).__name__}")
    known = {json_name for json_name, _, _ in fields}
    kwargs = dict(defaults)
    for json_name, attribute, converter in fields:
        if json_name in value and value[json_name] is not None:
            kwargs[attribute] = _convert(converter, value[json_name])
    kwargs["extra"] = {k: v for k, v in value.items() if k not in known}
    return cls(**kwargs)


def _to_fields(instance: Any, fields: tuple, with_extra: bool = True) -> dict:
    result = dict(instance.extra) if with_extra else {}
    for json_name, attribute, _ in fields:
        result[json_name] = getattr(instance, attribute)
    return result


# --- documents ---------------------------------------------------------------------------------

def _int_keyed(table: Any, what: str) -> dict[int, int]:
    """{qid: offset} with keys that fastjson wrote bare (arrive as str) or quoted."""
    if not isinstance(table, dict):
        raise ValueError(f"{what} must be a JSON object")
    return {int(key): int(value) for key, value in table.items()}


@dataclasses.dataclass
class TopicConfigDocument:
    """``topics.json`` (Java ``TopicConfigSerializeWrapper``)."""

    topic_config_table: dict[str, TopicConfig] = dataclasses.field(default_factory=dict)
    data_version: DataVersion = dataclasses.field(default_factory=DataVersion)
    extra: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, value: dict) -> "TopicConfigDocument":
        table = value.get("topicConfigTable") or {}
        return cls({name: TopicConfig.from_json(config, name) for name, config in table.items()},
                   DataVersion.from_json(value.get("dataVersion")),
                   _rest(value, ("topicConfigTable", "dataVersion")))

    def to_json(self) -> dict:
        return {**self.extra, "dataVersion": self.data_version.to_json(),
                "topicConfigTable": {n: c.to_json() for n, c in self.topic_config_table.items()}}


@dataclasses.dataclass
class ConsumerOffsetDocument:
    """``consumerOffset.json``: ``offset_table["topic@group"][queue_id] = consumer_offset``."""

    offset_table: dict[str, dict[int, int]] = dataclasses.field(default_factory=dict)
    data_version: DataVersion | None = None   # 5.x only
    extra: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, value: dict) -> "ConsumerOffsetDocument":
        table = value.get("offsetTable") or {}
        version = value.get("dataVersion")
        return cls({key: _int_keyed(queues, key) for key, queues in table.items()},
                   None if version is None else DataVersion.from_json(version),
                   _rest(value, ("offsetTable", "dataVersion")))

    def to_json(self) -> dict:
        result = {**self.extra, "offsetTable": self.offset_table}
        if self.data_version is not None:
            result["dataVersion"] = self.data_version.to_json()
        return result


@dataclasses.dataclass
class SubscriptionGroupDocument:
    """``subscriptionGroup.json`` (Java ``SubscriptionGroupWrapper`` + 5.x forbiddenTable)."""

    subscription_group_table: dict[str, SubscriptionGroupConfig] = dataclasses.field(
        default_factory=dict)
    data_version: DataVersion = dataclasses.field(default_factory=DataVersion)
    extra: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, value: dict) -> "SubscriptionGroupDocument":
        table = value.get("subscriptionGroupTable") or {}
        groups = {name: SubscriptionGroupConfig.from_json(config, name)
                  for name, config in table.items()}
        return cls(groups, DataVersion.from_json(value.get("dataVersion")),
                   _rest(value, ("subscriptionGroupTable", "dataVersion")))

    def to_json(self) -> dict:
        table = {name: group.to_json() for name, group in self.subscription_group_table.items()}
        return {**self.extra, "dataVersion": self.data_version.to_json(),
                "subscriptionGroupTable": table}


@dataclasses.dataclass
class DelayOffsetDocument:
    """``delayOffset.json``: ``offset_table[delay_level] = next queue_offset to deliver``."""

    offset_table: dict[int, int] = dataclasses.field(default_factory=dict)
    data_version: DataVersion | None = None   # 5.x only
    extra: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, value: dict) -> "DelayOffsetDocument":
        version = value.get("dataVersion")
        return cls(_int_keyed(value.get("offsetTable") or {}, "offsetTable"),
                   None if version is None else DataVersion.from_json(version),
                   _rest(value, ("offsetTable", "dataVersion")))

    def to_json(self) -> dict:
        result = {**self.extra, "offsetTable": self.offset_table}
        if self.data_version is not None:
            result["dataVersion"] = self.data_version.to_json()
        return result


_REQUEST_MODE_FIELDS = (
    ("consumerGroup", "consumer_group", str), ("mode", "mode", str),
    ("popShareQueueNum", "pop_share_queue_num", int), ("topic", "topic", str),
)


@dataclasses.dataclass
class RequestMode:
    """How a group consumes a topic (5.x ``SetMessageRequestModeRequestBody``): ``mode`` PULL
    or POP (Java's field default is PULL), and the queues POP consumers share."""

    topic: str = ""
    consumer_group: str = ""
    mode: str = "PULL"
    pop_share_queue_num: int = 0
    extra: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, value: Any) -> "RequestMode":
        return _from_fields(cls, _REQUEST_MODE_FIELDS, value, {})

    def to_json(self) -> dict:
        return _to_fields(self, _REQUEST_MODE_FIELDS)


@dataclasses.dataclass
class MessageRequestModeDocument:
    """``messageRequestMode.json`` (5.x ``MessageRequestModeManager``):
    ``mode_table[topic][consumer group]``."""

    mode_table: dict[str, dict[str, RequestMode]] = dataclasses.field(default_factory=dict)
    extra: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, value: dict) -> "MessageRequestModeDocument":
        table = value.get("messageRequestModeMap") or {}
        if not isinstance(table, dict):
            raise ValueError("messageRequestModeMap must be a JSON object")
        return cls({topic: {group: RequestMode.from_json(mode) for group, mode in
                            _object_of(groups, topic).items()}
                    for topic, groups in table.items()},
                   _rest(value, ("messageRequestModeMap",)))

    def to_json(self) -> dict:
        return {**self.extra, "messageRequestModeMap": {
            topic: {group: mode.to_json() for group, mode in groups.items()}
            for topic, groups in self.mode_table.items()}}


def _object_of(value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be a JSON object")
    return value


@dataclasses.dataclass
class TransactionMetricsDocument:
    """``config/transactionMetrics`` (Java 5.x TransactionMetrics): per real topic, the half
    messages neither committed, rolled back nor discarded: ``{topic: (count, timeStamp ms)}``."""

    counts: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    data_version: DataVersion = dataclasses.field(default_factory=DataVersion)
    extra: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, value: dict) -> "TransactionMetricsDocument":
        table = value.get("transactionCount") or {}
        if not isinstance(table, dict):
            raise ValueError("transactionCount is not an object")
        counts = {str(topic): (int(metric.get("count", 0)), int(metric.get("timeStamp", 0)))
                  for topic, metric in table.items() if isinstance(metric, dict)}
        return cls(counts, DataVersion.from_json(value.get("dataVersion")),
                   _rest(value, ("transactionCount", "dataVersion")))

    def to_json(self) -> dict:
        return {**self.extra, "dataVersion": self.data_version.to_json(),
                "transactionCount": {topic: {"count": count, "timeStamp": stamp}
                                     for topic, (count, stamp) in sorted(self.counts.items())}}


def _rest(value: dict, known: tuple) -> dict:
    return {key: item for key, item in value.items() if key not in known}


# --- safe load / save --------------------------------------------------------------------------

def _read_candidate(path: str, decode: Callable[[dict], T]) -> tuple[bool, T | None, str]:
    """(exists, document or None, why it was unusable) for one file."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return False, None, "absent"
    if not data.strip():
        return True, None, "empty"
    try:
        value = fastjson.loads(data)
        if not isinstance(value, dict):
            raise ValueError(f"top level is {type(value).__name__}, not an object")
        return True, decode(value), ""
    except (ValueError, TypeError, AttributeError) as error:
        return True, None, str(error)


def load_json_document(path: str, decode: Callable[[dict], T], empty: Callable[[], T]) -> T:
    """Load one config document with Java's fallback to ``<path>.bak`` (see module doc).

    ``decode`` turns the parsed JSON object into the document; ``empty`` makes the document
    used when neither the file nor a fallback exists. Raises :class:`StoreCorruptError` naming
    the file when something exists but nothing usable does.
    """
    exists, document, why = _read_candidate(path, decode)
    if document is not None:
        return document
    problems = [f"{path}: {why}"]
    fallbacks = ([path + TMP_SUFFIX] if not exists else []) + [path + BAK_SUFFIX]
    any_exists = exists
    for fallback in fallbacks:
        fallback_exists, document, fallback_why = _read_candidate(fallback, decode)
        if document is not None:
            log.warning("config %s unusable (%s); loaded %s", path, why, fallback)
            return document
        any_exists = any_exists or fallback_exists
        problems.append(f"{fallback}: {fallback_why}")
    if not any_exists:
        return empty()
    raise StoreCorruptError("config document cannot be loaded: " + "; ".join(problems))


def _write_durably(path: str, data: bytes) -> None:
    with open(path, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


def _fsync_directory(directory: str) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def save_json_document(path: str, value: dict) -> None:
    """Write ``value`` as pretty-printed standard JSON to ``path`` with the safe-write steps.

    Every step is fsynced, so after a crash at any point :func:`load_json_document` finds
    either the old or the new content. OS errors propagate (durability failures are not
    swallowed).
    """
    save_file(path, orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))


def save_file(path: str, data: bytes) -> None:
    """The safe write of the module docstring for any content: ``<path>.tmp`` (fsync), the
    previous content to ``<path>.bak`` (fsync), rename, directory fsync. Java's readers of
    these files (``MixAll.file2String``, ``CheckpointFile``) find the old or the new content
    after a crash at any point."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    _write_durably(path + TMP_SUFFIX, data)
    try:
        with open(path, "rb") as file:
            previous = file.read()
    except FileNotFoundError:
        previous = None
    if previous:
        _write_durably(path + BAK_SUFFIX, previous)
    # Java deletes the old file and then renames; os.replace does both atomically, so there is
    # no moment without the file.
    os.replace(path + TMP_SUFFIX, path)
    _fsync_directory(directory)


def load_topics(path: str) -> TopicConfigDocument:
    """Load ``topics.json`` at ``path`` (empty document when it and its fallbacks are absent)."""
    return load_json_document(path, TopicConfigDocument.from_json, TopicConfigDocument)


def save_topics(path: str, document: TopicConfigDocument) -> None:
    """Safely write ``topics.json``."""
    save_json_document(path, document.to_json())


def load_consumer_offsets(path: str) -> ConsumerOffsetDocument:
    """Load ``consumerOffset.json`` at ``path``."""
    return load_json_document(path, ConsumerOffsetDocument.from_json, ConsumerOffsetDocument)


def save_consumer_offsets(path: str, document: ConsumerOffsetDocument) -> None:
    """Safely write ``consumerOffset.json``."""
    save_json_document(path, document.to_json())


def load_subscription_groups(path: str) -> SubscriptionGroupDocument:
    """Load ``subscriptionGroup.json`` at ``path``."""
    return load_json_document(path, SubscriptionGroupDocument.from_json,
                              SubscriptionGroupDocument)


def save_subscription_groups(path: str, document: SubscriptionGroupDocument) -> None:
    """Safely write ``subscriptionGroup.json``."""
    save_json_document(path, document.to_json())


def load_delay_offsets(path: str) -> DelayOffsetDocument:
    """Load ``delayOffset.json`` at ``path``."""
    return load_json_document(path, DelayOffsetDocument.from_json, DelayOffsetDocument)


def save_delay_offsets(path: str, document: DelayOffsetDocument) -> None:
    """Safely write ``delayOffset.json``."""
    save_json_document(path, document.to_json())


def load_message_request_modes(path: str) -> MessageRequestModeDocument:
    """Load ``messageRequestMode.json`` at ``path``."""
    return load_json_document(path, MessageRequestModeDocument.from_json,
                              MessageRequestModeDocument)


def save_message_request_modes(path: str, document: MessageRequestModeDocument) -> None:
    """Safely write ``messageRequestMode.json``."""
    save_json_document(path, document.to_json())
