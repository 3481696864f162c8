# The store's settings, declared once with Java's names and defaults (MessageStoreConfig).
"""Store settings: :class:`StoreConfig` is the one declaration of every store setting (its
``broker.conf`` key, Java's default, unit, rule); ``pybroker.config`` composes it into the
broker's schema and loads it, and every store and data-plane class takes a StoreConfig.
Tests build one directly: ``StoreConfig(store_path_root_dir=..., mapped_file_size_commit_log=...)``.

Values are not validated when a StoreConfig is built directly (only when loaded from text by
``pybroker.config``); the derived properties (:attr:`StoreConfig.commitlog_dir`,
:attr:`StoreConfig.sync_flush`, ...) are the one place their rule is written.
"""
import dataclasses
import enum

from pybroker.schema import (ADDRESS_RULE, DELAY_LEVEL_RULE, DELETE_WHEN_RULE, HOST_RULE,
                             NETWORK_LIST_RULE, PERCENT_RULE, PORT_RULE, Rule, at_least, between,
                             home, parse_delay_levels, setting)
from pybroker.protocol.ha import TRANSFER_BODY_MAX_BYTES
from pybroker.store import layout, paths

__all__ = ["StoreConfig", "BrokerRole", "FlushDiskType", "timer_precision_of"]

# timerPrecisionMs values Java's setter keeps (MessageStoreConfig.setTimerPrecisionMs).
TIMER_PRECISIONS_MS = (100, 200, 500, 1000)


def timer_precision_of(value_ms: int) -> int:
    """Java's rounding of ``timerPrecisionMs``: the largest candidate not above the value,
    100 for anything below 200."""
    kept = TIMER_PRECISIONS_MS[0]
    for candidate in TIMER_PRECISIONS_MS[1:]:
        if value_ms < candidate:
            return kept
        kept = candidate
    return kept


class BrokerRole(enum.StrEnum):
    """``brokerRole``: how a broker replicates (RocketMQ ``BrokerRole``)."""
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


class FlushDiskType(enum.StrEnum):
    """``flushDiskType``: whether a send waits for its bytes to reach the disk."""
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


@dataclasses.dataclass(frozen=True)
class StoreConfig:
    """CommitLog, ConsumeQueue, index, flush, cleanup and HA (Java ``MessageStoreConfig``).

    Differences from Java's defaults: ``storePathRootDir`` is ``~/pybroker/store`` (Java:
    ``~/store``) so the two never share a store by accident; ``storePathCommitLog`` follows
    ``storePathRootDir`` when not set (5.x behaviour; 4.9.x kept ``~/store/commitlog``).
    """
    store_path_root_dir: str = setting("storePathRootDir", home("pybroker", "store"),
        "store root directory", important=True)
    store_path_commit_log: str | None = setting("storePathCommitLog", None,
        "CommitLog directory; default: <root>/commitlog", important=True)
    mapped_file_size_commit_log: int = setting("mappedFileSizeCommitLog", 1 << 30,
        "CommitLog file size", unit="bytes", rule=at_least(4096))
    mapped_file_size_consume_queue: int = setting("mappedFileSizeConsumeQueue", 300000 * 20,
        "ConsumeQueue file size, rounded up to a multiple of 20", unit="bytes",
        rule=at_least(layout.CQ_STORE_UNIT_SIZE))
    flush_disk_type: FlushDiskType = setting("flushDiskType", FlushDiskType.ASYNC_FLUSH,
        "SYNC_FLUSH: a send waits for fdatasync", important=True)
    broker_role: BrokerRole = setting("brokerRole", BrokerRole.ASYNC_MASTER, "replication role",
        important=True)
    flush_interval_commit_log: int = setting("flushIntervalCommitLog", 500, "async flush period",
        unit="ms", rule=between(1, 60000), important=True)
    commit_interval_commit_log: int = setting("commitIntervalCommitLog", 200,
        "transient pool commit period", unit="ms", rule=between(1, 60000), important=True)
    flush_commit_log_timed: bool = setting("flushCommitLogTimed", True,
        "flush on the period only (pybroker's flusher always sleeps the period)", important=True)
    flush_commit_log_least_pages: int = setting("flushCommitLogLeastPages", 4,
        "dirty pages before an async flush", unit="pages", rule=at_least(0))
    flush_commit_log_thorough_interval: int = setting("flushCommitLogThoroughInterval", 10000,
        "flush regardless of pages after", unit="ms", rule=at_least(0))
    flush_interval_consume_queue: int = setting("flushIntervalConsumeQueue", 1000,
        "ConsumeQueue flush period", unit="ms", rule=between(1, 60000))
    flush_consume_queue_least_pages: int = setting("flushConsumeQueueLeastPages", 2,
        "dirty pages before a CQ flush", unit="pages", rule=at_least(0))
    flush_consume_queue_thorough_interval: int = setting("flushConsumeQueueThoroughInterval", 60000,
        "CQ flush regardless after", unit="ms", rule=at_least(0))
    flush_delay_offset_interval: int = setting("flushDelayOffsetInterval", 10000,
        "delayOffset.json persist period", unit="ms", long=True, rule=at_least(100))
    sync_flush_timeout: int = setting("syncFlushTimeout", 5000,
        "SYNC_FLUSH wait for the flush before FLUSH_DISK_TIMEOUT", unit="ms",
        rule=between(1, 600000))
    slave_timeout: int = setting("slaveTimeout", 3000,
        "SYNC_MASTER wait for a slave's acknowledgement before FLUSH_SLAVE_TIMEOUT", unit="ms",
        rule=between(1, 600000))
    max_message_size: int = setting("maxMessageSize", 4 << 20, "largest message body", unit="bytes",
        rule=between(1, 1 << 30))
    check_crc_on_recover: bool = setting("checkCRCOnRecover", True, "verify body CRC in recovery")
    check_crc_on_read: bool = setting("checkCRCOnRead", True,
        "a pull, view or query verifies each record's body CRC (its layout and own offset "
        "always) and never serves a damaged one", pybroker_only=True)
    store_scrub_rate_megabytes_per_second: int = setting(
        "storeScrubRateMegabytesPerSecond", 16,
        "the scrubber reads every CommitLog record (CRC) and consume-queue unit of the store "
        "in the background at most this fast; 0 turns it off", unit="MB/s",
        rule=between(0, 100000), pybroker_only=True, important=True)
    store_scrub_pass_interval_seconds: int = setting(
        "storeScrubPassIntervalSeconds", 86400,
        "a scrubber pass starts at most this long after the previous one started",
        unit="s", rule=at_least(0), pybroker_only=True)
    os_page_cache_busy_time_out_mills: int = setting("osPageCacheBusyTimeOutMills", 1000,
        "a put arriving while the running append is older than this is refused "
        "[PC_SYNCHRONIZED]", unit="ms", long=True, rule=between(1, 600000))
    skip_damaged_records_on_recover: bool = setting("skipDamagedRecordsOnRecover", False,
        "a damaged CommitLog record with valid records after it: false = refuse to start "
        "(name file and offset), true = skip it, log it, never serve it, keep the rest",
        pybroker_only=True, important=True)
    message_delay_level: str = setting("messageDelayLevel",
        "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h", "delay of level 1, 2, ...",
        rule=DELAY_LEVEL_RULE)
    delete_when: str = setting("deleteWhen", "04", "hours when expired files are deleted",
        rule=DELETE_WHEN_RULE, important=True)
    file_reserved_time: int = setting("fileReservedTime", 72, "keep CommitLog files this long",
        unit="hours", rule=at_least(0), important=True)
    disk_max_used_space_ratio: int = setting("diskMaxUsedSpaceRatio", 75,
        "clean when the disk is fuller (Java uses 10..95)", unit="percent", rule=PERCENT_RULE)
    disk_space_warning_level_ratio: int = setting("diskSpaceWarningLevelRatio", 90,
        "refuse sends above (5.x key)", unit="percent", rule=PERCENT_RULE)
    disk_space_clean_forcibly_ratio: int = setting("diskSpaceCleanForciblyRatio", 85,
        "delete unexpired files above (5.x key)", unit="percent", rule=PERCENT_RULE)
    clean_file_forcibly_enable: bool = setting("cleanFileForciblyEnable", True,
        "delete unexpired files when the disk is full", important=True)
    clean_resource_interval: int = setting("cleanResourceInterval", 10000, "cleanup period",
        unit="ms", rule=at_least(100))
    delete_commit_log_files_interval: int = setting("deleteCommitLogFilesInterval", 100,
        "pause between two file deletions", unit="ms", rule=at_least(0))
    delete_consume_queue_files_interval: int = setting("deleteConsumeQueueFilesInterval", 100,
        "pause between two CQ deletions", unit="ms", rule=at_least(0))
    destroy_maped_file_interval_forcibly: int = setting("destroyMapedFileIntervalForcibly", 120000,
        "unmap a still-held file after", unit="ms", rule=at_least(0))
    redelete_hanged_file_interval: int = setting("redeleteHangedFileInterval", 120000,
        "retry a failed deletion after", unit="ms", rule=at_least(0))
    max_hash_slot_num: int = setting("maxHashSlotNum", 5000000, "hash slots per IndexFile",
        unit="count", rule=at_least(1))
    max_index_num: int = setting("maxIndexNum", 20000000, "entries per IndexFile", unit="count",
        rule=at_least(1))
    message_index_enable: bool = setting("messageIndexEnable", True, "build IndexFiles",
        important=True)
    message_index_safe: bool = setting("messageIndexSafe", False,
        "recover the index from the older checkpoint", important=True)
    max_transfer_bytes_on_message_in_memory: int = setting("maxTransferBytesOnMessageInMemory",
        256 << 10, "pull reply cap, hot data", unit="bytes", rule=at_least(1), important=True)
    max_transfer_count_on_message_in_memory: int = setting("maxTransferCountOnMessageInMemory", 32,
        "pull reply cap, hot data", unit="count", rule=at_least(1), important=True)
    max_transfer_bytes_on_message_in_disk: int = setting("maxTransferBytesOnMessageInDisk",
        64 << 10, "pull reply cap, cold data", unit="bytes", rule=at_least(1), important=True)
    max_transfer_count_on_message_in_disk: int = setting("maxTransferCountOnMessageInDisk", 8,
        "pull reply cap, cold data", unit="count", rule=at_least(1), important=True)
    access_message_in_memory_max_ratio: int = setting("accessMessageInMemoryMaxRatio", 40,
        "share of RAM counted as hot", unit="percent", rule=PERCENT_RULE, important=True)
    default_query_max_num: int = setting("defaultQueryMaxNum", 32, "query result default cap",
        unit="count", rule=at_least(1))
    warm_maped_file_enable: bool = setting("warmMapedFileEnable", False,
        "the allocator fallocates, faults in and mlocks each next CommitLog file ahead of "
        "the writer (default: sparse files, a pre-fault window)")
    flush_least_pages_when_warm_maped_file: int = setting("flushLeastPagesWhenWarmMapedFile",
        4096, "SYNC_FLUSH: msync a file being warmed every this many pages", unit="pages",
        rule=at_least(1))
    transient_store_pool_enable: bool = setting("transientStorePoolEnable", False,
        "ASYNC_FLUSH master: the appender writes to pool buffers, a commit step writes them "
        "to the file", important=True)
    transient_store_pool_size: int = setting("transientStorePoolSize", 5, "buffers in the pool",
        unit="count", rule=at_least(1))
    commit_commit_log_least_pages: int = setting("commitCommitLogLeastPages", 4,
        "transient pool: pages written before a commit", unit="pages", rule=at_least(0))
    commit_commit_log_thorough_interval: int = setting("commitCommitLogThoroughInterval", 200,
        "transient pool: commit regardless of pages after", unit="ms", rule=at_least(0))
    ha_listen_port: int = setting("haListenPort", 10912, "HA port; default: listenPort+1",
        rule=PORT_RULE)
    ha_send_heartbeat_interval: int = setting("haSendHeartbeatInterval", 5000,
        "master heartbeat when idle", unit="ms", rule=at_least(100))
    ha_housekeeping_interval: int = setting("haHousekeepingInterval", 20000,
        "drop a silent HA peer after", unit="ms", rule=at_least(1000))
    ha_transfer_batch_size: int = setting("haTransferBatchSize", 32 << 10, "HA chunk size "
        "(at most what a Java slave's 4 MiB read buffer takes)", unit="bytes",
        rule=between(1, TRANSFER_BODY_MAX_BYTES))
    ha_master_address: str | None = setting("haMasterAddress", None,
        "slave: master's HA address; default: from the NameServer", rule=ADDRESS_RULE,
        important=True)
    ha_slave_fallbehind_max: int = setting("haSlaveFallbehindMax", 256 << 20,
        "4.9.x name of haMaxGapNotInSync", unit="bytes", rule=at_least(0))
    ha_max_gap_not_in_sync: int = setting("haMaxGapNotInSync", 256 << 20,
        "SYNC_MASTER: a slave this far behind answers SLAVE_NOT_AVAILABLE (4.9.x: "
        "haSlaveFallbehindMax)", unit="bytes", rule=at_least(0))
    # Who may replicate from the HA port (proc/ha_access.py, docs/security.md "The HA port").
    ha_listen_address: str | None = setting("haListenAddress", None,
        "master: address the HA port listens on; default: bindAddress", rule=HOST_RULE,
        important=True, pybroker_only=True)
    ha_allowed_slave_addresses: str = setting("haAllowedSlaveAddresses", "",
        "master: IP addresses or CIDR networks (comma-separated) whose connections to the HA "
        "port are served, Java slaves too; empty: every peer, as Java", rule=NETWORK_LIST_RULE,
        important=True, pybroker_only=True)
    ha_tls_enable: bool = setting("haTlsEnable", False,
        "HA connections speak TLS (pybroker master and slaves only): the master's "
        "tls.server.certPath/keyPath, the slave's tls.client.* as its other links",
        important=True, pybroker_only=True)
    ha_shared_secret: str | None = setting("haSharedSecret", None,
        "master and slave prove knowledge of it on every HA connection (pybroker master and "
        "slaves only)", rule=Rule("must have at least 16 characters",
                                  lambda value: len(value) >= 16), secret=True,
        pybroker_only=True)
    # --- RocketMQ 5.x protocol basics --------------------------------------------------------
    auto_message_version_on_topic_len: bool = setting("autoMessageVersionOnTopicLen", True,
        "records of topics longer than 127 bytes use message format V2 (2-byte topic length); "
        "false refuses them (MESSAGE_ILLEGAL), where Java would write a V1 record whose "
        "1-byte topic length cannot hold the name")

    # --- timer (Java 5.x timer wheel, issue #23: store/timer_*.py, broker/timer.py) -----------
    timer_wheel_enable: bool = setting("timerWheelEnable", True,
        "timer messages (TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS) are parked in "
        "the timer wheel; false: they are refused (SYSTEM_ERROR)", important=True)
    timer_precision_ms: int = setting("timerPrecisionMs", 1000,
        "timer slot length; Java rounds down to 100, 200, 500 or 1000", unit="ms",
        rule=at_least(1))
    timer_max_delay_sec: int = setting("timerMaxDelaySec", 3 * 24 * 3600,
        "longest timer delay accepted", unit="s", rule=at_least(1))
    timer_roll_window_slot: int = setting("timerRollWindowSlot", 2 * 24 * 3600,
        "timer messages due further ahead are parked again (rolled) as they come closer",
        unit="count", rule=at_least(0))
    mapped_file_size_timer_log: int = setting("mappedFileSizeTimerLog", 100 << 20,
        "timerlog file size", unit="bytes",
        rule=at_least(layout.TIMERLOG_UNIT_SIZE + layout.TIMERLOG_MIN_BLANK_BYTES))
    timer_flush_interval_ms: int = setting("timerFlushIntervalMs", 1000,
        "timerlog, timerwheel and timercheck flush period", unit="ms", rule=at_least(1))
    timer_congest_num_each_slot: int = setting("timerCongestNumEachSlot", (1 << 31) - 1,
        "a timer slot holding more refuses sends to it, at random up to twice as many and "
        "always beyond (SYSTEM_ERROR)", unit="count", rule=at_least(0))
    timer_stop_enqueue: bool = setting("timerStopEnqueue", False,
        "stop parking timer messages in the wheel (they wait in rmq_sys_wheel_timer)")
    timer_stop_dequeue: bool = setting("timerStopDequeue", False,
        "stop delivering due timer messages")
    timer_skip_unknown_error: bool = setting("timerSkipUnknownError", False,
        "a timer message that cannot be read or put for an unknown reason is skipped "
        "(logged) instead of retried")
    timer_enable_retry_until_success: bool = setting("timerEnableRetryUntilSuccess", False,
        "retry a due message's put until it succeeds (false: 3 tries, then it is logged "
        "and dropped, as Java)")
    timer_warm_enable: bool = setting("timerWarmEnable", False,
        "pre-read the next slots' messages (Java 5.3.3 never does: its warm call is "
        "commented out)")
    timer_progress_log_interval_ms: int = setting("timerProgressLogIntervalMs", 10000,
        "period of the timer's progress log line", unit="ms", rule=at_least(1))
    timer_preconvert_max_bytes: int = setting("timerPreconvertMaxBytes", 256 << 20,
        "pybroker's own: re-puts of the used slots not begun are converted ahead, the "
        "nearest first (beyond 3 s only slots too large to convert in time when due), "
        "and held in the timer worker's memory as recipes (each record "
        "without its body) up to this many bytes (past it they are converted when due, "
        "as with 0)",
        unit="bytes", rule=at_least(0), pybroker_only=True)
    # Java's BrokerConfig keys, with the timer because they act on it (broker/timer_requests.py).
    recall_message_enable: bool = setting("recallMessageEnable", False,
        "RECALL_MESSAGE (370) cancels a parked timer message by its recall handle; false: "
        "refused (NO_PERMISSION)")
    allow_recall_when_broker_not_writeable: bool = setting(
        "allowRecallWhenBrokerNotWriteable", True,
        "RECALL_MESSAGE is served while brokerPermission forbids writes")

    # --- controller mode (Java MessageStoreConfig; docs/architecture/controller.md) ---
    all_ack_in_sync_state_set: bool = setting("allAckInSyncStateSet", False,
        "controller mode: SEND_OK only once every SyncStateSet member has the message",
        important=True)
    read_un_committed: bool = setting("readUnCommitted", False,
        "consumers are served messages past the confirm offset (controller mode: not yet on "
        "every SyncStateSet member a send waits for; SYNC_FLUSH: not yet flushed); false "
        "holds dispatch at it, as Java")
    enable_auto_in_sync_replicas: bool = setting("enableAutoInSyncReplicas", False,
        "slaveActingMaster mode only (which pybroker lacks); Java ignores it in controller mode")
    in_sync_replicas: int = setting("inSyncReplicas", 1, "controller mode without "
        "allAckInSyncStateSet: replicas (the master included) a send waits for", unit="count",
        rule=between(1, 64))
    min_in_sync_replicas: int = setting("minInSyncReplicas", 1, "controller mode: a smaller "
        "SyncStateSet refuses sends (in-sync replicas not enough)", unit="count",
        rule=between(1, 64))
    ha_max_time_slave_not_catchup: int = setting("haMaxTimeSlaveNotCatchup", 15000,
        "controller mode: a slave not caught up this long leaves the SyncStateSet", unit="ms",
        long=True, rule=between(100, 3600000))
    sync_from_last_file: bool = setting("syncFromLastFile", False,
        "controller mode: an empty slave starts at the master's last CommitLog file (else "
        "its first)")
    async_learner: bool = setting("asyncLearner", False,
        "controller mode: this slave replicates but never joins the SyncStateSet")
    store_path_epoch_file: str | None = setting("storePathEpochFile", None,
        "controller mode: epoch file; default: <root>/epochFileCheckpoint")
    store_path_broker_identity: str | None = setting("storePathBrokerIdentity", None,
        "controller mode: assigned broker id file; default: <root>/brokerIdentity")

    # --- derived -------------------------------------------------------------------------------
    @property
    def commitlog_dir(self) -> str:
        """``storePathCommitLog``, or ``<storePathRootDir>/commitlog`` when not set."""
        return self.store_path_commit_log or paths.commitlog_dir(self.store_path_root_dir)

    @property
    def epoch_file_path(self) -> str:
        """``storePathEpochFile``, or ``<storePathRootDir>/epochFileCheckpoint``."""
        return self.store_path_epoch_file or paths.epoch_file_path(self.store_path_root_dir)

    @property
    def broker_identity_path(self) -> str:
        """``storePathBrokerIdentity``, or ``<storePathRootDir>/brokerIdentity``."""
        return self.store_path_broker_identity or \
            paths.broker_identity_path(self.store_path_root_dir)

    @property
    def sync_flush(self) -> bool:
        """``flushDiskType`` is SYNC_FLUSH: a send waits for its bytes to reach the disk."""
        return self.flush_disk_type == FlushDiskType.SYNC_FLUSH

    @property
    def is_slave(self) -> bool:
        """``brokerRole`` is SLAVE."""
        return self.broker_role == BrokerRole.SLAVE

    @property
    def transient_store_pool_active(self) -> bool:
        """``transientStorePoolEnable`` and the broker is an ASYNC_FLUSH master: Java 4.9
        (MessageStoreConfig.isTransientStorePoolEnable) uses the pool only then."""
        return self.transient_store_pool_enable and not self.sync_flush and not self.is_slave

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        """``messageDelayLevel`` as the delay of level 1, 2, ... in ms (ValueError if bad)."""
        return parse_delay_levels(self.message_delay_level)

    @property
    def timer_precision_effective_ms(self) -> int:
        """``timerPrecisionMs`` as Java's setter rounds it: the largest of 100, 200, 500, 1000
        not above it (100 below 200)."""
        return timer_precision_of(self.timer_precision_ms)

    @property
    def timer_roll_window_slots(self) -> int:
        """``timerRollWindowSlot`` as the timer uses it: outside [2, slots - blank slots] it is
        the whole wheel but the blank slots (Java's TimerMessageStore constructor)."""
        most = layout.TIMER_WHEEL_SLOTS - layout.TIMER_BLANK_SLOTS
        window = self.timer_roll_window_slot
        return most if window > most or window < 2 else window

    def transfer_limits(self) -> tuple[int, int, int, int]:
        """Pull caps: (in-memory bytes, in-memory count, in-disk bytes, in-disk count)."""
        return (self.max_transfer_bytes_on_message_in_memory,
                self.max_transfer_count_on_message_in_memory,
                self.max_transfer_bytes_on_message_in_disk,
                self.max_transfer_count_on_message_in_disk)
