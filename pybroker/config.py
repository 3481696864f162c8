# pybroker configuration: the one schema of every setting, broker.conf loading, derived values.
"""Configuration of pybroker's broker and NameServer processes.

Every setting is declared once, as a field of one frozen area dataclass (:class:`BrokerConfig`,
:class:`StoreConfig`, :class:`RemotingConfig`, :class:`NamesrvConfig`): the RocketMQ key
(``flushIntervalCommitLog``), the Python attribute (``flush_interval_commit_log``, always the
key in snake_case), the type (str, Java int, Java long, bool, float, or an enum of allowed
strings, taken from the annotation), Java's default, the unit, a validator and an ``important``
flag (RocketMQ's ``@ImportantField``). Keys marked ``pybroker_only`` do not exist in Java.

Files use Java ``Properties`` syntax (:func:`load_properties`), read as ISO-8859-1 like
``Properties.load(InputStream)``. Deliberate differences from Java's loader, each because Java
would silently run with a value the user did not mean:

* a value Java cannot parse (``listenPort=10911x``) is ignored by Java; here it stops start-up;
* booleans must be ``true`` or ``false`` (any case); Java reads every other word as false;
* surrounding whitespace of non-string values is stripped (Java keeps it and then fails or
  reads ``true `` as false); string values stay literal;
* an empty value of an optional string (``haMasterAddress=``) means "not set";
* no ``${...}`` or environment substitution (Java Properties has none either).

Unknown keys are logged on logger ``pybroker.config`` with the closest known key ("did you
mean ..."; an ERROR when that is a durability setting such as flushDiskType) and ignored, or
refused under ``strictConfig=true``; invalid values raise :class:`pybroker.errors.ConfigError`
with ``key=value: rule`` lines. This is the only
module that reads ``os.environ``.
"""
import dataclasses
import enum
import logging
import math
import os
import socket
from typing import Any, Mapping

import orjson

from pybroker.config_pop import PopSettings
from pybroker.config_not_acted_on import (  # noqa: F401
    JAVA_KEYS_NOT_USED, JAVA_KEYS_UNSUPPORTED, SETTINGS_NOT_ACTED_ON, not_acted_on_lines)
from pybroker.config_keys import DURABILITY_KEYS, check_unknown_keys
from pybroker.errors import ConfigError
from pybroker.properties import load_properties, parse_properties, properties_line  # noqa: F401
from pybroker.protocol.constants import PROPERTIES_MAX_BYTES, SystemTopic
# The declaration language and the store's own area are re-exported: one import for users.
from pybroker.schema import (ADDRESS_LIST_RULE, ADDRESS_RULE, DELAY_LEVEL_RULE,  # noqa: F401
                             DELETE_WHEN_RULE, HOST_RULE, JAVA_INT_MAX, JAVA_LONG_MAX, NAME_RULE,
                             NETWORK_LIST_RULE, PERCENT_RULE, PORT_RULE, Rule, SettingSpec,
                             at_least, between,
                             delete_when_hours, home, java_text, matches, only, parse_value,
                             power_of_two, setting, settings_of)
from pybroker.store import layout
from pybroker.store.control_block import REMOTING_WORKERS_MAX
from pybroker.store.settings import BrokerRole, FlushDiskType, StoreConfig  # noqa: F401
from pybroker.config_grpc import GrpcConfig

LOGGER = logging.getLogger("pybroker.config")

# Room for the request header around the largest record in one frame (SEND or PULL reply).
FRAME_HEADER_ALLOWANCE_BYTES = 64 * 1024


def _local_host_name() -> str:
    name = socket.gethostname()
    return name if NAME_RULE.check(name) else "DEFAULT_BROKER"   # Java's fallback name


def _local_address() -> str:
    """Like Java's RemotingUtil.getLocalAddress: a non-loopback IPv4, else 127.0.0.1."""
    import psutil   # imported here: only needed when brokerIP1/2 are not configured
    candidates = [address.address for addresses in psutil.net_if_addrs().values()
                  for address in addresses if address.family == socket.AF_INET
                  and not address.address.startswith("127.")]
    for address in candidates:
        if not address.startswith("192.168."):   # Java takes 192.168.x only as a last resort
            return address
    return candidates[-1] if candidates else "127.0.0.1"


def _namesrv_addr_from_environment() -> str | None:
    # Java's default for namesrvAddr is the NAMESRV_ADDR environment variable.
    return os.environ.get("NAMESRV_ADDR") or None


def default_namesrv_addr() -> str:
    """Name servers of command-line tools: NAMESRV_ADDR (as mqadmin), else 127.0.0.1:9876."""
    return _namesrv_addr_from_environment() or "127.0.0.1:9876"


def inner_credentials(text: str | None) -> tuple[str, str] | None:
    """(accessKey, secretKey) of ``innerClientAuthenticationCredentials`` (Java 5.x's JSON),
    or None when absent or not that shape."""
    if not text:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    access_key, secret_key = value.get("accessKey"), value.get("secretKey")
    if not (isinstance(access_key, str) and isinstance(secret_key, str)
            and access_key.strip() and secret_key.strip()):
        return None
    return access_key, secret_key


def _cpu_count() -> int:
    return max(1, min(REMOTING_WORKERS_MAX, os.cpu_count() or 1))


# --- the schema ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BrokerConfig(PopSettings):
    """Broker identity, registration and behaviour (Java ``BrokerConfig``, plus ``listenPort``
    of the broker's ``NettyServerConfig``); the POP keys are declared in config_pop.py."""
    broker_cluster_name: str = setting("brokerClusterName", "DefaultCluster",
        "cluster this broker registers under", rule=NAME_RULE, important=True)
    broker_name: str = setting("brokerName", _local_host_name,
        "master/slave set name; default: host name", rule=NAME_RULE, important=True)
    broker_id: int = setting("brokerId", 0, "0 = master, > 0 = slave; controller mode: -1 "
        "(the controller assigns the id) or the id it assigned", long=True,
        rule=between(-1, JAVA_LONG_MAX), important=True)
    broker_ip1: str = setting("brokerIP1", _local_address, "address given to clients",
        rule=HOST_RULE, important=True)
    broker_ip2: str = setting("brokerIP2", _local_address, "address given to slaves for HA",
        rule=HOST_RULE)
    namesrv_addr: str | None = setting("namesrvAddr", _namesrv_addr_from_environment,
        "NameServers, host:port;host:port; default: $NAMESRV_ADDR", rule=ADDRESS_LIST_RULE,
        important=True)
    listen_port: int = setting("listenPort", 10911,
        "main remoting port; listenPort-2 is the fast channel, listenPort+1 the default HA port",
        rule=between(3, 65534), important=True)
    broker_permission: int = setting("brokerPermission", 6,
        "PermName bits: 8 priority, 4 read, 2 write, 1 inherit", rule=between(0, 15))
    default_topic_queue_nums: int = setting("defaultTopicQueueNums", 8,
        "queues of an auto-created topic", unit="count", rule=between(1, 65535))
    auto_create_topic_enable: bool = setting("autoCreateTopicEnable", True,
        "create unknown topics on send (TBW102)", important=True)
    auto_create_subscription_group: bool = setting("autoCreateSubscriptionGroup", True,
        "create unknown groups", important=True)
    cluster_topic_enable: bool = setting("clusterTopicEnable", True,
        "cluster-name topic is writable")
    broker_topic_enable: bool = setting("brokerTopicEnable", True, "broker-name topic is writable")
    trace_topic_enable: bool = setting("traceTopicEnable", False, "create the trace topic",
        important=True)
    msg_trace_topic_name: str = setting("msgTraceTopicName", str(SystemTopic.TRACE), "trace topic",
        rule=NAME_RULE, important=True)
    register_name_server_period: int = setting("registerNameServerPeriod", 30000,
        "re-registration period (Java clamps; we reject)", unit="ms", rule=between(10000, 60000))
    register_broker_timeout_mills: int = setting("registerBrokerTimeoutMills", 6000,
        "REGISTER_BROKER timeout", unit="ms", rule=between(1, 600000))
    long_polling_enable: bool = setting("longPollingEnable", True,
        "hold pulls that find nothing until a message arrives")
    short_polling_time_mills: int = setting("shortPollingTimeMills", 1000,
        "hold time when long polling is off", unit="ms", long=True, rule=between(0, 600000))
    broker_fast_failure_enable: bool = setting("brokerFastFailureEnable", True,
        "answer SYSTEM_BUSY [TIMEOUT_CLEAN_QUEUE] to sends that waited in a remoting worker "
        "longer than waitTimeMillsInSendQueue", important=True)
    wait_time_mills_in_send_queue: int = setting("waitTimeMillsInSendQueue", 200,
        "fast failure: longest wait of a send before the appender takes it", unit="ms",
        long=True, rule=between(1, 600000))
    worker_hang_timeout_millis: int = setting("workerHangTimeoutMillis", 10000,
        "the supervisor restarts the generation when a worker's main loop stops turning "
        "this long while work waits for it", unit="ms", rule=between(1000, 3600000),
        pybroker_only=True)
    long_polling_suspend_max_ms: int = setting("longPollingSuspendMaxMs", 120000,
        "cap on a pull's suspendTimeoutMillis", unit="ms", rule=between(1000, 3600000),
        pybroker_only=True)
    notify_consumer_ids_changed_enable: bool = setting("notifyConsumerIdsChangedEnable", True,
        "tell consumers when group members change")
    slave_read_enable: bool = setting("slaveReadEnable", False, "serve pulls from a slave")
    reject_transaction_message: bool = setting("rejectTransactionMessage", False,
        "refuse half messages", important=True)
    transaction_time_out: int = setting("transactionTimeOut", 6000,
        "age of a half message before its first check", unit="ms", long=True, rule=at_least(0),
        important=True)
    transaction_check_max: int = setting("transactionCheckMax", 15,
        "checks before a half message is discarded", unit="count", rule=at_least(1), important=True)
    transaction_check_interval: int = setting("transactionCheckInterval", 60000,
        "check-back period (5.x: 30000)", unit="ms", long=True, rule=at_least(1000), important=True)
    flush_consumer_offset_interval: int = setting("flushConsumerOffsetInterval", 5000,
        "consumerOffset.json persist period", unit="ms", rule=at_least(100))
    region_id: str = setting("regionId", "DefaultRegion", "region reported in traces")
    trace_on: bool = setting("traceOn", True, "trace switch reported to clients")
    enable_property_filter: bool = setting("enablePropertyFilter", False, "allow SQL92 filters")
    enable_calc_filter_bit_map: bool = setting("enableCalcFilterBitMap", False,
        "precompute SQL92 filter bitmaps")
    compressed_register: bool = setting("compressedRegister", False,
        "compress REGISTER_BROKER bodies")
    force_register: bool = setting("forceRegister", True, "register even when unchanged")
    fetch_namesrv_addr_by_address_server: bool = setting("fetchNamesrvAddrByAddressServer", False,
        "learn NameServers from an address server",
        rule=only(False, "pybroker has no address-server client"), important=True)
    acl_enable: bool = setting("aclEnable", False,
        "ACL 1.0: every client request signed by an account of the plain ACL file",
        important=True)
    rocketmq_acl_plain_file: str = setting("rocketmq.acl.plain.file", "conf/plain_acl.yml",
        "plain_acl.yml; a relative path is under $ROCKETMQ_HOME when set, else the working "
        "directory (Java's system property of that name)", important=True, pybroker_only=True)
    inner_client_authentication_credentials: str | None = setting(
        "innerClientAuthenticationCredentials", None,
        "the broker's own account for its requests to NameServers and, on a slave, to its "
        "master: {\"accessKey\":\"...\",\"secretKey\":\"...\"} (Java 5.x AuthConfig)",
        rule=Rule("must be {\"accessKey\":\"...\",\"secretKey\":\"...\"}",
                  lambda value: inner_credentials(value) is not None), secret=True)
    metrics_exporter_type: str = setting("metricsExporterType", "DISABLE",
        "metrics exporter: DISABLE or PROM (Prometheus pull endpoint)", important=True,
        rule=Rule("must be DISABLE or PROM (pybroker has no OTLP_GRPC or LOG exporter)",
                  lambda value: value in ("DISABLE", "PROM")))
    metrics_prom_exporter_host: str = setting("metricsPromExporterHost", "",
        "address of the Prometheus endpoint; default: brokerIP1")
    metrics_prom_exporter_port: int = setting("metricsPromExporterPort", 5557,
        "port of the Prometheus endpoint", rule=between(1, 65535))
    metrics_label: str = setting("metricsLabel", "",
        "extra labels on every metric, 'key:value,key:value'")
    # --- controller mode (RocketMQ 5.x; docs/architecture/controller.md) -------------
    enable_controller_mode: bool = setting("enableControllerMode", False,
        "roles and failover decided by Apache's controller (controllerAddr); brokerRole is "
        "then ignored", important=True)
    controller_addr: str = setting("controllerAddr", "",
        "controllers, host:port;host:port (enableControllerMode)", important=True)
    sync_broker_metadata_period: int = setting("syncBrokerMetadataPeriod", 5000,
        "how often the role and SyncStateSet are read from the controller", unit="ms",
        long=True, rule=between(100, 3600000))
    check_sync_state_set_period: int = setting("checkSyncStateSetPeriod", 5000,
        "master: how often lagging replicas are taken out of the SyncStateSet", unit="ms",
        long=True, rule=between(100, 3600000))
    sync_controller_metadata_period: int = setting("syncControllerMetadataPeriod", 10000,
        "how often the controller leader's address is looked up", unit="ms", long=True,
        rule=between(100, 3600000))
    controller_heart_beat_timeout_mills: int = setting("controllerHeartBeatTimeoutMills",
        10000, "the controller deems this broker dead after this long without a heartbeat",
        unit="ms", long=True, rule=between(500, 3600000), important=True)
    broker_heartbeat_interval: int = setting("brokerHeartbeatInterval", 1000,
        "heartbeat period to the controller", unit="ms", rule=between(100, 3600000))
    send_heartbeat_timeout_millis: int = setting("sendHeartbeatTimeoutMillis", 1000,
        "a heartbeat that cannot be written this long counts as lost", unit="ms",
        rule=between(10, 600000))
    broker_election_priority: int = setting("brokerElectionPriority", JAVA_INT_MAX,
        "lower is preferred when the controller elects among equally up-to-date replicas")
    metrics_exporter_compat: str = setting("metricsExporterCompat", "none",
        "none, or exporter: the endpoint also serves apache/rocketmq-exporter's names and "
        "labels (rocketmq_group_diff, rocketmq_producer_tps, ...) that its Grafana "
        "dashboards query", pybroker_only=True,
        rule=Rule("must be none or exporter", lambda value: value in ("none", "exporter")))
    stats_instruments_enable: bool = setting("statsInstrumentsEnable", True,
        "record the runtime statistics (counters, histograms, keyed topic/group figures) that "
        "brokerStatus, statsAll, consumeTps, the metrics endpoint and pybroker prof read; false "
        "makes every recording a no-op and those figures are omitted or marked not measured",
        important=True, pybroker_only=True)
    # --- RocketMQ 5.x protocol basics (docs/compatibility.md, "5.x protocol basics") --------
    enable_mixed_message_type: bool = setting("enableMixedMessageType", False,
        "UPDATE_AND_CREATE_TOPIC accepts +message.type=MIXED (refused with "
        "INVALID_PARAMETER when false)")
    lite_pull_message_enable: bool = setting("litePullMessageEnable", True,
        "serve LITE_PULL_MESSAGE (361); false answers NO_PERMISSION")
    strict_config: bool = setting("strictConfig", False,
        "refuse to start on an unknown broker.conf key (with the closest known key) instead "
        "of warning and ignoring it", important=True, pybroker_only=True)


@dataclasses.dataclass(frozen=True)
class RemotingConfig:
    """Network settings: the Java Netty keys that mean something here, then pybroker's own.

    The server socket buffers default to 131072 bytes, as older Java brokers set them at start-up;
    Java 4.9.8 and 5.3.3 default to 0 (OS default, autotuned). 0 is accepted here too.
    """
    bind_address: str = setting("bindAddress", "0.0.0.0",
        "address listenPort and listenPort-2 listen on (5.x key); 0.0.0.0 = every interface",
        rule=HOST_RULE, important=True)
    server_worker_threads: int = setting("serverWorkerThreads", 8,
        "Java Netty threads; accepted, pybroker uses remotingWorkers", unit="count",
        rule=between(1, 1024))
    server_channel_max_idle_time_seconds: int = setting("serverChannelMaxIdleTimeSeconds", 120,
        "close idle connections after; 0 = never", unit="s", rule=at_least(0))
    server_socket_snd_buf_size: int = setting("serverSocketSndBufSize", 131072, "SO_SNDBUF",
        unit="bytes", rule=between(0, 64 << 20))
    server_socket_rcv_buf_size: int = setting("serverSocketRcvBufSize", 131072, "SO_RCVBUF",
        unit="bytes", rule=between(0, 64 << 20))
    server_socket_backlog: int = setting("serverSocketBacklog", 1024, "listen backlog",
        unit="count", rule=between(1, 65535))
    connect_timeout_millis: int = setting("connectTimeoutMillis", 3000, "outgoing connect timeout",
        unit="ms", rule=between(1, 600000))
    client_channel_max_idle_time_seconds: int = setting("clientChannelMaxIdleTimeSeconds", 120,
        "close idle outgoing connections after", unit="s", rule=at_least(0))
    client_socket_snd_buf_size: int = setting("clientSocketSndBufSize", 0,
        "SO_SNDBUF of outgoing connections", unit="bytes", rule=between(0, 64 << 20))
    client_socket_rcv_buf_size: int = setting("clientSocketRcvBufSize", 0,
        "SO_RCVBUF of outgoing connections", unit="bytes", rule=between(0, 64 << 20))
    use_tls: bool = setting("useTLS", False,
        "outgoing links use TLS (Java NettyClientConfig); default: tls.enable")
    remoting_workers: int = setting("remotingWorkers", _cpu_count,
        "remoting processes; default: CPU count", unit="count",
        rule=between(1, REMOTING_WORKERS_MAX), important=True,
        pybroker_only=True)
    frame_max_bytes: int = setting("frameMaxBytes", 16 << 20,
        "largest frame accepted (Java's 16 MiB)", unit="bytes", rule=between(4096, 1 << 30),
        important=True, pybroker_only=True)
    ext_fields_max: int = setting("extFieldsMax", 1024, "ext fields in one header", unit="count",
        rule=between(16, 65535), pybroker_only=True)
    send_ring_size_bytes: int = setting("sendRingSizeBytes", 32 << 20,
        "remoting -> appender ring per worker", unit="bytes", rule=power_of_two(1 << 16, 1 << 30),
        pybroker_only=True)
    completion_ring_slots: int = setting("completionRingSlots", 16384,
        "appender -> remoting completions per worker", unit="count", rule=power_of_two(64, 1 << 20),
        pybroker_only=True)


@dataclasses.dataclass(frozen=True)
class NamesrvConfig:
    """NameServer settings (Java ``NamesrvConfig`` plus the NameServer's ``listenPort``).

    Paths default under ``~/pybroker/namesrv`` (Java: ``~/namesrv``) so they never collide.
    """
    listen_port: int = setting("listenPort", 9876, "NameServer port", rule=PORT_RULE,
        important=True)
    kv_config_path: str = setting("kvConfigPath", home("pybroker", "namesrv", "kvConfig.json"),
        "KV config file", important=True)
    order_message_enable: bool = setting("orderMessageEnable", False,
        "serve ORDER_TOPIC_CONFIG KV in routes", important=True)
    scan_not_active_broker_interval: int = setting("scanNotActiveBrokerInterval", 5000,
        "expired-broker scan period (5.x key)", unit="ms", long=True, rule=at_least(100))
    broker_channel_expired_time_ms: int = setting("brokerChannelExpiredTimeMs", 120000,
        "drop a broker not heard from for (Java constant)", unit="ms", rule=between(1000, 3600000),
        pybroker_only=True)
    acl_enable: bool = setting("aclEnable", False,
        "ACL on the NameServer: KV writes, WIPE_WRITE_PERM_OF_BROKER, DELETE_TOPIC_IN_NAMESRV "
        "need a signed admin account (Java's NameServer checks nothing)", important=True,
        pybroker_only=True)
    rocketmq_acl_plain_file: str = setting("rocketmq.acl.plain.file", "conf/plain_acl.yml",
        "plain_acl.yml; a relative path is under $ROCKETMQ_HOME when set, else the working "
        "directory", important=True, pybroker_only=True)
    broker_registration_allowed_addresses: str = setting(
        "brokerRegistrationAllowedAddresses", "",
        "with aclEnable: IP addresses or CIDR networks (comma-separated) whose unsigned "
        "REGISTER_BROKER, UNREGISTER_BROKER and BROKER_HEARTBEAT are served (Java 4.x brokers "
        "never sign them); any other peer signs them with an admin account",
        rule=NETWORK_LIST_RULE, important=True, pybroker_only=True)
    strict_config: bool = setting("strictConfig", False,
        "refuse to start on an unknown namesrv.conf key instead of warning and ignoring it",
        important=True, pybroker_only=True)


class TlsMode(enum.StrEnum):
    """``tls.server.mode`` (Java ``TlsMode``): what a remoting port accepts."""
    DISABLED = "disabled"       # plain TCP only; a TLS ClientHello is closed
    PERMISSIVE = "permissive"   # TLS or plain TCP, told apart by the first byte
    ENFORCING = "enforcing"     # TLS only; plain TCP is closed


class ClientAuth(enum.StrEnum):
    """``tls.server.need.client.auth``: whether a TLS client must show a certificate."""
    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"


# Keys a tls.config.file may set (Java: every tls.* key but the mode and tls.enable).
TLS_FILE_KEYS = frozenset({
    "tls.test.mode.enable", "tls.server.need.client.auth", "tls.server.keyPath",
    "tls.server.keyPassword", "tls.server.certPath", "tls.server.authClient",
    "tls.server.trustCertPath", "tls.client.keyPath", "tls.client.keyPassword",
    "tls.client.certPath", "tls.client.authServer", "tls.client.trustCertPath"})


@dataclasses.dataclass(frozen=True)
class TlsConfig:
    """TLS of the remoting ports and of outgoing links (Java ``TlsSystemConfig``: JVM system
    properties there, broker.conf / namesrv.conf keys here, and the same ``tls.config.file``,
    whose values win over the conf file's as Java's win over system properties)."""
    tls_server_mode: TlsMode = setting("tls.server.mode", TlsMode.PERMISSIVE,
        "disabled, permissive (TLS or plain, by first byte) or enforcing; TLS needs a "
        "certificate: permissive without one serves plain TCP only", important=True)
    tls_config_file: str = setting("tls.config.file", "/etc/rocketmq/tls.properties",
        "Java properties file with tls.* keys, read when it exists")
    tls_test_mode_enable: bool = setting("tls.test.mode.enable", False,
        "Java's self-signed test context (default true there); pybroker never makes one")
    tls_server_need_client_auth: ClientAuth = setting("tls.server.need.client.auth",
        ClientAuth.NONE, "none, optional or require a client certificate")
    tls_server_key_path: str | None = setting("tls.server.keyPath", None,
        "server private key, PEM (PKCS#8 or traditional)")
    tls_server_key_password: str | None = setting("tls.server.keyPassword", None,
        "password of an encrypted server key", secret=True)
    tls_server_cert_path: str | None = setting("tls.server.certPath", None,
        "server certificate chain, PEM")
    tls_server_auth_client: bool = setting("tls.server.authClient", False,
        "verify client certificates (pybroker verifies any it asks for)")
    tls_server_trust_cert_path: str | None = setting("tls.server.trustCertPath", None,
        "CA certificates that client certificates must chain to, PEM")
    tls_client_key_path: str | None = setting("tls.client.keyPath", None,
        "private key shown by outgoing TLS links, PEM")
    tls_client_key_password: str | None = setting("tls.client.keyPassword", None,
        "password of an encrypted client key", secret=True)
    tls_client_cert_path: str | None = setting("tls.client.certPath", None,
        "certificate chain shown by outgoing TLS links, PEM")
    tls_client_auth_server: bool = setting("tls.client.authServer", False,
        "verify the server certificate of outgoing TLS links")
    tls_client_trust_cert_path: str | None = setting("tls.client.trustCertPath", None,
        "CA certificates for tls.client.authServer, PEM")
    tls_enable: bool = setting("tls.enable", False,
        "outgoing links (broker -> NameServer) use TLS; default: tls.server.mode is "
        "enforcing; useTLS in the conf file wins")


def check_tls(tls: TlsConfig) -> None:
    """Refuse TLS settings that cannot work (ConfigError naming the key)."""
    server_files = (tls.tls_server_cert_path, tls.tls_server_key_path)
    _require(all(server_files) or not any(server_files), "tls.server.certPath",
             tls.tls_server_cert_path, "tls.server.certPath and tls.server.keyPath go together")
    _require(tls.tls_server_mode != TlsMode.ENFORCING or all(server_files), "tls.server.mode",
             tls.tls_server_mode, "enforcing needs tls.server.certPath and tls.server.keyPath")
    asks = tls.tls_server_need_client_auth != ClientAuth.NONE or tls.tls_server_auth_client
    _require(not asks or bool(tls.tls_server_trust_cert_path), "tls.server.need.client.auth",
             tls.tls_server_need_client_auth, "client certificates are verified against "
             "tls.server.trustCertPath, which is not set")
    client_files = (tls.tls_client_cert_path, tls.tls_client_key_path)
    _require(all(client_files) or not any(client_files), "tls.client.certPath",
             tls.tls_client_cert_path, "tls.client.certPath and tls.client.keyPath go together")
    _require(not tls.tls_client_auth_server or bool(tls.tls_client_trust_cert_path),
             "tls.client.authServer", True, "needs tls.client.trustCertPath")
    if tls.tls_test_mode_enable:
        LOGGER.warning("tls.test.mode.enable=true: pybroker has no self-signed test mode; TLS "
                       "uses tls.server.certPath/keyPath (and is off without them)")


# --- loading ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class DerivedConfig:
    """Values computed from the broker settings right after loading (never set directly)."""
    fast_listen_port: int                     # listenPort - 2: Java's "VIP" channel
    broker_addr: str                          # brokerIP1:listenPort, registered with NameServers
    ha_server_addr: str                       # brokerIP2:haListenPort
    namesrv_addresses: tuple[tuple[str, int], ...]
    delay_levels_ms: tuple[int, ...]          # level i (1-based) -> delay in ms
    delete_when_hours: tuple[int, ...]
    consume_queue_entries_per_file: int       # entries (20 bytes each) in one CQ file
    record_size_max_bytes: int                # largest CommitLog record maxMessageSize allows
    index_file_size_bytes: int
    acl_file_path: str | None = None          # plain_acl.yml resolved, when aclEnable
    grpc_send_ring_bytes: int = 0             # a gRPC worker's send ring (grpcSendRingSizeBytes)


@dataclasses.dataclass(frozen=True)
class Config:
    """A broker process's effective configuration (``pybroker broker -c broker.conf``)."""
    broker: BrokerConfig
    store: StoreConfig
    remoting: RemotingConfig
    derived: DerivedConfig
    path: str | None = None                   # the broker.conf read, if any
    unknown_keys: tuple[str, ...] = ()
    tls: TlsConfig = TlsConfig()
    grpc: GrpcConfig = GrpcConfig()


@dataclasses.dataclass(frozen=True)
class NamesrvProcessConfig:
    """A NameServer process's effective configuration (``pybroker namesrv -c ...``)."""
    namesrv: NamesrvConfig
    remoting: RemotingConfig
    path: str | None = None
    unknown_keys: tuple[str, ...] = ()
    tls: TlsConfig = TlsConfig()
    acl_file_path: str | None = None          # plain_acl.yml resolved, when aclEnable


_BROKER_AREAS = {"broker": BrokerConfig, "store": StoreConfig, "remoting": RemotingConfig,
                 "tls": TlsConfig, "grpc": GrpcConfig}
_NAMESRV_AREAS = {"namesrv": NamesrvConfig, "remoting": RemotingConfig, "tls": TlsConfig}


def _key_index(areas: Mapping[str, type]) -> dict[str, tuple[str, SettingSpec]]:
    index = {}
    for area_name, area in areas.items():
        for spec in settings_of(area):
            # One table per mapping: a key feeds exactly one setting of a process.
            assert spec.key not in index, spec.key
            index[spec.key] = (area_name, spec)
    return index


_BROKER_KEYS = _key_index(_BROKER_AREAS)
_NAMESRV_KEYS = _key_index(_NAMESRV_AREAS)
assert not set(_BROKER_KEYS) & (JAVA_KEYS_NOT_USED | set(JAVA_KEYS_UNSUPPORTED))


def _read_entries(path: str | os.PathLike | None,
                  overrides: Mapping[str, Any] | None) -> dict[str, str]:
    entries = load_properties(path) if path is not None else {}
    for key, value in (overrides or {}).items():
        entries[key] = value if isinstance(value, str) else java_text(value)
    _merge_tls_file(entries)
    return entries


def _merge_tls_file(entries: dict[str, str]) -> None:
    """Java reads ``tls.config.file`` (default /etc/rocketmq/tls.properties) when it exists;
    its tls.* values win over the conf file's."""
    tls_file = entries.get("tls.config.file") or TlsConfig().tls_config_file
    if not os.path.isfile(tls_file) or not os.access(tls_file, os.R_OK):
        return
    for key, value in load_properties(tls_file).items():
        if key in TLS_FILE_KEYS:
            entries[key] = value
        else:
            LOGGER.warning("%s: %s is not a key a TLS config file may set (ignored)", tls_file,
                           key)
    LOGGER.info("TLS settings read from %s", tls_file)


def _parse_entries(entries: Mapping[str, str], keys: Mapping[str, tuple[str, SettingSpec]],
                   source: str) -> tuple[dict[str, dict[str, Any]], tuple[str, ...]]:
    """Typed values per area, and the unknown keys; raises every invalid value at once."""
    values: dict[str, dict[str, Any]] = {area: {} for area, _ in keys.values()}
    unknown, errors = [], []
    for key, text in entries.items():
        if key in JAVA_KEYS_UNSUPPORTED:
            if text.strip().lower() != JAVA_KEYS_UNSUPPORTED[key]:
                errors.append(f"{key}={text}: must be {JAVA_KEYS_UNSUPPORTED[key]} "
                              "(pybroker does not implement this feature)")
            continue
        if key not in keys:
            unknown.append(key)
            continue
        area, spec = keys[key]
        if key in SETTINGS_NOT_ACTED_ON:
            LOGGER.warning("%s: %s=%s is accepted but not acted on: %s", source, key, text,
                           SETTINGS_NOT_ACTED_ON[key])
        try:
            values[area][spec.attribute] = parse_value(spec, text)
        except ConfigError as error:
            errors.append(str(error))
    if errors:
        raise ConfigError("\n".join(errors))
    return values, tuple(unknown)


assert DURABILITY_KEYS <= set(_BROKER_KEYS), DURABILITY_KEYS - set(_BROKER_KEYS)


def _check_unknown_keys(unknown: tuple[str, ...], keys: Mapping[str, tuple[str, SettingSpec]],
                        source: str, strict: bool, effective: Mapping[str, str]) -> None:
    check_unknown_keys(unknown, keys, JAVA_KEYS_NOT_USED, source, strict, effective, LOGGER)


def load_broker_config(path: str | os.PathLike | None = None,
                       overrides: Mapping[str, Any] | None = None,
                       strict: bool | None = None) -> Config:
    """Load a broker's configuration: defaults, then ``path`` (a broker.conf), then
    ``overrides`` ({RocketMQ key: value as text or typed}), then derived values.

    Unknown keys are logged on ``pybroker.config`` with the closest known key (an ERROR for a
    misspelt durability setting), or refused when ``strict`` (default: the file's
    strictConfig); invalid values raise :class:`ConfigError` with one ``key=value: rule``
    line per problem.
    """
    entries = _read_entries(path, overrides)
    source = os.fspath(path) if path is not None else "overrides"
    values, unknown = _parse_entries(entries, _BROKER_KEYS, source)
    broker = BrokerConfig(**values["broker"])
    store = StoreConfig(**values["store"])
    tls = TlsConfig(**values["tls"])
    check_tls(tls)
    _check_ha_tls(store, tls)
    remoting = _effective_remoting(RemotingConfig(**values["remoting"]), tls, set(entries))
    broker, store = _effective_broker_settings(broker, store, set(entries))
    derived = _derive_broker(broker, store, remoting)
    derived = dataclasses.replace(derived, acl_file_path=_acl_file_path(
        broker.acl_enable, broker.rocketmq_acl_plain_file))
    grpc = GrpcConfig(**values["grpc"])
    _require(remoting.remoting_workers + grpc.grpc_workers <= REMOTING_WORKERS_MAX,
             "grpcWorkers", grpc.grpc_workers, f"remotingWorkers + grpcWorkers must be at most "
             f"{REMOTING_WORKERS_MAX} (worker slots of the control block)")
    derived = dataclasses.replace(derived, grpc_send_ring_bytes=_grpc_send_ring_bytes(
        grpc, remoting, derived.record_size_max_bytes))
    config = Config(broker, store, remoting, derived,
                    os.fspath(path) if path is not None else None, unknown, tls, grpc)
    _check_unknown_keys(unknown, _BROKER_KEYS, source,
                        broker.strict_config if strict is None else strict,
                        dict(all_settings(config)))
    return config


def load_namesrv_config(path: str | os.PathLike | None = None,
                        overrides: Mapping[str, Any] | None = None,
                        strict: bool | None = None) -> NamesrvProcessConfig:
    """Load a NameServer's configuration (same rules as :func:`load_broker_config`)."""
    entries = _read_entries(path, overrides)
    source = os.fspath(path) if path is not None else "overrides"
    values, unknown = _parse_entries(entries, _NAMESRV_KEYS, source)
    namesrv = NamesrvConfig(**values["namesrv"])
    _check_unknown_keys(unknown, _NAMESRV_KEYS, source,
                        namesrv.strict_config if strict is None else strict, {})
    tls = TlsConfig(**values["tls"])
    check_tls(tls)
    remoting = _effective_remoting(RemotingConfig(**values["remoting"]), tls, set(entries))
    return NamesrvProcessConfig(namesrv, remoting,
                                os.fspath(path) if path is not None else None, unknown, tls,
                                _acl_file_path(namesrv.acl_enable,
                                               namesrv.rocketmq_acl_plain_file))


def _check_ha_tls(store: StoreConfig, tls: TlsConfig) -> None:
    """haTlsEnable: a master serves the HA port with the broker's certificate; a slave that
    does not verify it (tls.client.authServer) is told what then authenticates the master."""
    if not store.ha_tls_enable:
        return
    if store.broker_role is not BrokerRole.SLAVE:
        _require(bool(tls.tls_server_cert_path), "haTlsEnable", True,
                 "a master needs tls.server.certPath and tls.server.keyPath")
    elif not tls.tls_client_auth_server:
        LOGGER.warning("haTlsEnable=true without tls.client.authServer: the slave does not "
                       "verify the master's certificate%s", "" if store.ha_shared_secret else
                       " and, without haSharedSecret, nothing authenticates the master")


def _effective_remoting(remoting: RemotingConfig, tls: TlsConfig,
                        set_keys: set[str]) -> RemotingConfig:
    """Java 5.x: NettyClientConfig.useTLS defaults to tls.enable, which defaults to
    tls.server.mode == enforcing (a broker registering with an enforcing NameServer)."""
    if "useTLS" in set_keys:
        return remoting
    enable = tls.tls_enable if "tls.enable" in set_keys \
        else tls.tls_server_mode == TlsMode.ENFORCING
    return dataclasses.replace(remoting, use_tls=enable)


def _rocketmq_home() -> str | None:
    return os.environ.get("ROCKETMQ_HOME") or None


def _acl_file_path(acl_enable: bool, configured: str) -> str | None:
    """plain_acl.yml as Java finds it (under ROCKETMQ_HOME), else from the working directory;
    a missing file stops start-up (Java would create an empty one and refuse everybody)."""
    if not acl_enable:
        return None
    path = configured
    if not os.path.isabs(path):
        home_dir = _rocketmq_home()
        path = os.path.join(home_dir, path) if home_dir else os.path.abspath(path)
    _require(os.path.isfile(path), "rocketmq.acl.plain.file", configured,
             f"aclEnable=true needs the plain ACL file; {path} does not exist")
    return path


def _effective_broker_settings(broker: BrokerConfig, store: StoreConfig,
                               set_keys: set[str]) -> tuple[BrokerConfig, StoreConfig]:
    """Apply Java's start-up adjustments so each setting shows the value in effect."""
    changes: dict[str, Any] = {}
    if store.store_path_commit_log is None:
        changes["store_path_commit_log"] = os.path.join(store.store_path_root_dir, "commitlog")
    if "haListenPort" not in set_keys:   # 5.x rule; 4.9.x always forced listenPort + 1
        changes["ha_listen_port"] = broker.listen_port + 1
    changes.update(_ha_gap(store, set_keys))
    # Java's getter rounds the consume-queue file size up to whole 20-byte entries.
    unit = layout.CQ_STORE_UNIT_SIZE
    changes["mapped_file_size_consume_queue"] = \
        math.ceil(store.mapped_file_size_consume_queue / unit) * unit
    # Java's getter clamps the cleanup threshold to 10..95 %.
    ratio = min(95, max(10, store.disk_max_used_space_ratio))
    if ratio != store.disk_max_used_space_ratio:
        LOGGER.warning("diskMaxUsedSpaceRatio=%d is used as %d (RocketMQ's range is 10..95)",
                       store.disk_max_used_space_ratio, ratio)
        changes["disk_max_used_space_ratio"] = ratio
    store = dataclasses.replace(store, **changes)
    if broker.enable_controller_mode:
        return _controller_mode_settings(broker, store)
    if broker.broker_id < 0:
        raise ConfigError(f"brokerId={broker.broker_id}: must be >= 0 (-1 only with "
                          "enableControllerMode=true)")
    if store.broker_role is BrokerRole.SLAVE:
        if broker.broker_id <= 0:
            raise ConfigError(f"brokerId={broker.broker_id}: must be > 0 when brokerRole=SLAVE")
    elif broker.broker_id != 0:   # Java silently makes every master brokerId 0
        LOGGER.warning("brokerId=%d is used as 0: brokerRole=%s is a master",
                       broker.broker_id, store.broker_role)
        broker = dataclasses.replace(broker, broker_id=0)
    return broker, store


def _controller_mode_settings(broker: BrokerConfig,
                              store: StoreConfig) -> tuple[BrokerConfig, StoreConfig]:
    """Controller mode: the controller decides the role (a master is SYNC_MASTER, as in Java);
    brokerRole and brokerId of the file only say where the broker starts."""
    addresses = [part for part in broker.controller_addr.split(";") if part.strip()]
    _require(bool(addresses), "controllerAddr", broker.controller_addr,
             "enableControllerMode=true needs at least one controller host:port")
    for address in addresses:
        host, _, port = address.strip().rpartition(":")
        _require(bool(host) and port.isdigit() and 0 < int(port) < 65536, "controllerAddr",
                 broker.controller_addr, f"{address!r} is not host:port")
    _require(store.min_in_sync_replicas >= 1, "minInSyncReplicas", store.min_in_sync_replicas,
             "must be >= 1")
    if store.broker_role is not BrokerRole.SLAVE or broker.broker_id != -1:
        LOGGER.info("enableControllerMode=true: brokerRole=%s brokerId=%d are decided by the "
                    "controller", store.broker_role, broker.broker_id)
    return broker, store


def _ha_gap(store: StoreConfig, set_keys: set[str]) -> dict[str, Any]:
    """One meaning, two Java names: 4.9.x haSlaveFallbehindMax, 5.x haMaxGapNotInSync."""
    old, new = store.ha_slave_fallbehind_max, store.ha_max_gap_not_in_sync
    _require(old == new or not {"haSlaveFallbehindMax", "haMaxGapNotInSync"} <= set_keys,
             "haSlaveFallbehindMax", old, f"must equal haMaxGapNotInSync={new} (one setting)")
    gap = old if "haSlaveFallbehindMax" in set_keys else new
    return {"ha_slave_fallbehind_max": gap, "ha_max_gap_not_in_sync": gap}


def _derive_broker(broker: BrokerConfig, store: StoreConfig,
                   remoting: RemotingConfig) -> DerivedConfig:
    record_max = layout.record_size(store.max_message_size, layout.TOPIC_MAX_BYTES,
                                    PROPERTIES_MAX_BYTES, born_host_v6=True, store_host_v6=True,
                                    topic_length_bytes=layout.TOPIC_LENGTH_BYTES_V2)
    fast_port = broker.listen_port - 2
    _require(store.ha_listen_port not in (broker.listen_port, fast_port), "haListenPort",
             store.ha_listen_port, f"must differ from listenPort {broker.listen_port} and the "
             f"fast port {fast_port}")
    # A record never spans CommitLog files and each file keeps room for its BLANK marker. Java
    # loads a file size below maxMessageSize (small test deployments do) and refuses a message
    # that does not fit a whole file at put time (MESSAGE_ILLEGAL); so does the CommitLog here.
    # (The schema's own minimum, 4096 bytes, holds the smallest records.)
    if store.mapped_file_size_commit_log < record_max + layout.END_FILE_MIN_BLANK_BYTES:
        LOGGER.warning("mappedFileSizeCommitLog=%d is smaller than the largest record "
                       "maxMessageSize=%d allows (%d bytes): messages that do not fit one "
                       "CommitLog file are refused with MESSAGE_ILLEGAL",
                       store.mapped_file_size_commit_log, store.max_message_size, record_max)
    _require(remoting.frame_max_bytes >= record_max + FRAME_HEADER_ALLOWANCE_BYTES,
             "frameMaxBytes", remoting.frame_max_bytes,
             f"must carry the largest record ({record_max} bytes) plus "
             f"{FRAME_HEADER_ALLOWANCE_BYTES} bytes of header")
    # The appender takes whole records from the ring: two largest records must fit.
    _require(remoting.send_ring_size_bytes >= 2 * record_max, "sendRingSizeBytes",
             remoting.send_ring_size_bytes, f"must hold two largest records ({record_max} "
             "bytes each)")
    index_size = layout.index_file_size(store.max_hash_slot_num, store.max_index_num)
    _require(index_size <= JAVA_INT_MAX, "maxIndexNum", store.max_index_num,
             f"IndexFile would be {index_size} bytes (> 2 GiB) with maxHashSlotNum="
             f"{store.max_hash_slot_num}")
    assert store.mapped_file_size_consume_queue % layout.CQ_STORE_UNIT_SIZE == 0
    levels, hours = store.delay_levels_ms, delete_when_hours(store.delete_when)
    assert hours is not None   # it passed its rule
    addresses = tuple((host, int(port)) for host, port in (
        part.rsplit(":", 1) for part in (broker.namesrv_addr or "").split(";") if part))
    return DerivedConfig(
        fast_listen_port=fast_port,
        broker_addr=f"{broker.broker_ip1}:{broker.listen_port}",
        ha_server_addr=f"{broker.broker_ip2}:{store.ha_listen_port}",
        namesrv_addresses=addresses, delay_levels_ms=levels, delete_when_hours=hours,
        consume_queue_entries_per_file=(store.mapped_file_size_consume_queue
                                        // layout.CQ_STORE_UNIT_SIZE),
        record_size_max_bytes=record_max, index_file_size_bytes=index_size)


def _grpc_send_ring_bytes(grpc: GrpcConfig, remoting: RemotingConfig, record_max: int) -> int:
    """A gRPC worker's send ring: grpcSendRingSizeBytes, or (0) the smallest power of two that
    holds two of the largest records, at most sendRingSizeBytes. A gRPC worker's sends come
    at the rate of one process's gRPC calls (some 10,000 a second, 2-3 MB/s at 128 B), a
    remoting worker's at up to a hundred times that; the ring is resident once it wrapped
    (docs/architecture/grpc.md, "Memory of the consume phase")."""
    if grpc.grpc_send_ring_size_bytes:
        _require(grpc.grpc_send_ring_size_bytes >= 2 * record_max, "grpcSendRingSizeBytes",
                 grpc.grpc_send_ring_size_bytes, f"must hold two largest records ({record_max} "
                 "bytes each)")
        return grpc.grpc_send_ring_size_bytes
    return min(1 << (2 * record_max - 1).bit_length(), remoting.send_ring_size_bytes)


def _require(condition: bool, key: str, value: Any, rule: str) -> None:
    if not condition:
        raise ConfigError(f"{key}={java_text(value)}: {rule}")


# --- listing ------------------------------------------------------------------------------------
def _area_values(config: Config | NamesrvProcessConfig):
    for field in dataclasses.fields(config):
        area = getattr(config, field.name)
        if dataclasses.is_dataclass(area) and not isinstance(area, DerivedConfig):
            for spec in settings_of(type(area)):
                yield spec, getattr(area, spec.attribute)


def all_settings(config: Config | NamesrvProcessConfig) -> list[tuple[str, str]]:
    """Every effective setting as (RocketMQ key, value in broker.conf spelling); secrets
    (key passwords) are never listed."""
    return [(spec.key, java_text(value)) for spec, value in _area_values(config)
            if not spec.secret]


def settings_text(config: Config | NamesrvProcessConfig) -> str:
    """Every effective setting (secrets left out) as Properties text, one ``key=value`` a
    line, which :func:`parse_properties` reads back."""
    return "".join(properties_line(key, value) + "\n" for key, value in all_settings(config))


def important_settings(config: Config | NamesrvProcessConfig) -> list[tuple[str, str]]:
    """The settings flagged important (logged at start-up), as (key, value text)."""
    return [(spec.key, java_text(value)) for spec, value in _area_values(config)
            if spec.important and not spec.secret]


def broker_setting_area(key: str) -> str | None:
    """The area ("broker", "store", "remoting", "tls") of a broker.conf key, None if unknown."""
    found = _BROKER_KEYS.get(key)
    return found[0] if found is not None else None


def namesrv_setting_area(key: str) -> str | None:
    """The area ("namesrv", "remoting", "tls") of a namesrv.conf key, None if unknown."""
    found = _NAMESRV_KEYS.get(key)
    return found[0] if found is not None else None


def with_broker_settings(config: Config, entries: Mapping[str, str]) -> Config:
    """``config`` with the given {RocketMQ key: text} values (a running broker's
    UPDATE_BROKER_CONFIG); every key must be a broker setting. Raises :class:`ConfigError`
    ``key=value: rule`` for a value the key's rule refuses."""
    return _with_settings(config, entries, _BROKER_KEYS)


def with_namesrv_settings(config: NamesrvProcessConfig,
                          entries: Mapping[str, str]) -> NamesrvProcessConfig:
    """:func:`with_broker_settings` for a running NameServer (UPDATE_NAMESRV_CONFIG)."""
    return _with_settings(config, entries, _NAMESRV_KEYS)


def _with_settings(config, entries: Mapping[str, str],
                   keys: Mapping[str, tuple[str, SettingSpec]]):
    changes: dict[str, dict[str, Any]] = {}
    errors = []
    for key, text in entries.items():
        area, spec = keys[key]
        try:
            changes.setdefault(area, {})[spec.attribute] = parse_value(spec, text)
        except ConfigError as error:
            errors.append(str(error))
    if errors:
        raise ConfigError("\n".join(errors))
    return dataclasses.replace(config, **{
        area: dataclasses.replace(getattr(config, area), **values)
        for area, values in changes.items()})
