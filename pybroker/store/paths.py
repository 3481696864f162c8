# Every on-disk path of a store root (protocol.md §4.1): the one place that spells them.
"""Paths inside a store root directory (``storePathRootDir``), RocketMQ's layout.

Every function takes the store root and returns a path string; nothing here touches the disk.
"""
import os

from pybroker.store import layout

COMMITLOG_DIR = "commitlog"
CONSUME_QUEUE_DIR = "consumequeue"
INDEX_DIR = "index"
CHECKPOINT_FILE = "checkpoint"
ABORT_FILE = "abort"
LOCK_FILE = "lock"
CONFIG_DIR = "config"

TOPICS_CONFIG = "topics.json"
CONSUMER_OFFSET_CONFIG = "consumerOffset.json"
SUBSCRIPTION_GROUP_CONFIG = "subscriptionGroup.json"
DELAY_OFFSET_CONFIG = "delayOffset.json"
CONSUMER_FILTER_CONFIG = "consumerFilter.json"
MESSAGE_REQUEST_MODE_CONFIG = "messageRequestMode.json"   # 5.x
TRANSACTION_METRICS_CONFIG = "transactionMetrics"   # Java 5.x: no .json suffix
# The 5.x timer store (store/timer_*.py): files in the root and the config directory.
TIMERLOG_DIR = "timerlog"
TIMER_WHEEL_FILE = "timerwheel"
TIMER_CHECK_CONFIG = "timercheck"
TIMER_METRICS_CONFIG = "timermetrics"


def commitlog_dir(store_root: str) -> str:
    """``<root>/commitlog``: CommitLog segments named by 20-digit start offset."""
    return os.path.join(store_root, COMMITLOG_DIR)


def consume_queue_root(store_root: str) -> str:
    """``<root>/consumequeue``: one directory per topic."""
    return os.path.join(store_root, CONSUME_QUEUE_DIR)


def consume_queue_dir(store_root: str, topic: str, queue_id: int) -> str:
    """``<root>/consumequeue/<topic>/<queue_id>``: segments of one consume queue."""
    if not topic or os.sep in topic or "\x00" in topic or topic in (".", ".."):
        raise ValueError(f"topic {topic!r} cannot name a directory")
    if queue_id < 0:
        raise ValueError(f"queue_id must be >= 0, got {queue_id}")
    return os.path.join(store_root, CONSUME_QUEUE_DIR, topic, str(queue_id))


def index_dir(store_root: str) -> str:
    """``<root>/index``: IndexFiles named by creation time (17 digits)."""
    return os.path.join(store_root, INDEX_DIR)


def checkpoint_path(store_root: str) -> str:
    """``<root>/checkpoint``: the 4096-byte checkpoint (protocol.md §4.6)."""
    return os.path.join(store_root, CHECKPOINT_FILE)


def abort_path(store_root: str) -> str:
    """``<root>/abort``: present while a store is open (protocol.md §4.7)."""
    return os.path.join(store_root, ABORT_FILE)


def damaged_records_path(store_root: str) -> str:
    """``<root>/damagedRecords.json``: CommitLog records recovery skipped at the operator's
    request (pybroker only; pybroker/store/damaged_records.py)."""
    return os.path.join(store_root, "damagedRecords.json")


def scrub_state_path(store_root: str) -> str:
    """``<root>/scrubber.json``: the scrubber's progress and the damage it found (pybroker
    only; pybroker/store/scrub.py)."""
    return os.path.join(store_root, "scrubber.json")


def lock_path(store_root: str) -> str:
    """``<root>/lock``: holds the exclusive lock of the broker owning the store (protocol.md
    §4.7)."""
    return os.path.join(store_root, LOCK_FILE)


def config_dir(store_root: str) -> str:
    """``<root>/config``: the broker's JSON documents (protocol.md §4.8)."""
    return os.path.join(store_root, CONFIG_DIR)


def config_path(store_root: str, file_name: str) -> str:
    """``<root>/config/<file_name>``, e.g. ``config_path(root, TOPICS_CONFIG)``."""
    if os.sep in file_name:
        raise ValueError(f"config file name {file_name!r} must not contain {os.sep!r}")
    return os.path.join(store_root, CONFIG_DIR, file_name)


def offset_file_path(directory: str, offset: int) -> str:
    """``<directory>/<offset as 20 digits>``: a CommitLog or ConsumeQueue segment."""
    return os.path.join(directory, str(offset).zfill(layout.OFFSET_FILE_NAME_DIGITS))


def run_dir(store_root: str) -> str:
    """``<root>/run``: the shared regions and sockets of a running broker (not data)."""
    return os.path.join(store_root, "run")


def stats_region_path(store_root: str) -> str:
    """``<root>/run/stats``: the instrument region (pybroker/stats/region.py); created by the
    supervisor at start, unlinked when it exits."""
    return os.path.join(run_dir(store_root), "stats")


def running_settings_path(store_root: str) -> str:
    """``<root>/run/broker.conf``: the effective settings of the broker serving this store
    (every key but secrets, Properties syntax), written at start and after each
    UPDATE_BROKER_CONFIG, removed at stop; what ``pybroker prof --store`` records."""
    return os.path.join(run_dir(store_root), "broker.conf")


def control_block_path(store_root: str) -> str:
    """``<root>/run/control``: the published positions (store/control_block.py)."""
    return os.path.join(run_dir(store_root), "control")


def ha_truncate_path(store_root: str) -> str:
    """``<root>/ha_truncate``: a slave's pending CommitLog truncation (store/replica.py); the
    next start applies it before recovery. Not a RocketMQ file."""
    return os.path.join(store_root, "ha_truncate")


def ha_master_address_path(store_root: str) -> str:
    """``<root>/run/ha-master``: the master HA address a slave's ha worker connects to
    (written by the supervisor from the NameServer's answer or haMasterAddress)."""
    return os.path.join(run_dir(store_root), "ha-master")


def epoch_file_path(store_root: str) -> str:
    """``<root>/epochFileCheckpoint``: the controller-mode epoch entries (store/epoch_file.py;
    Java's default ``storePathEpochFile``), with ``.bak`` beside it."""
    return os.path.join(store_root, "epochFileCheckpoint")


def broker_identity_path(store_root: str) -> str:
    """``<root>/brokerIdentity``: the broker id the controller assigned
    (store/broker_identity.py; Java's default ``storePathBrokerIdentity``); the application in
    progress is ``<root>/brokerIdentity-temp``."""
    return os.path.join(store_root, "brokerIdentity")


def timerlog_dir(store_root: str) -> str:
    """``<root>/timerlog``: the timer log's 20-digit-named files (store/timer_log.py)."""
    return os.path.join(store_root, TIMERLOG_DIR)


def timer_wheel_path(store_root: str) -> str:
    """``<root>/timerwheel``: the timer wheel, one fixed-size file (store/timer_wheel.py)."""
    return os.path.join(store_root, TIMER_WHEEL_FILE)
