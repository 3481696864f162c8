# The gRPC endpoint's area of the config schema (grpcWorkers, grpcServerPort, the proxy's limits).
"""GrpcConfig (grpc_service/ serves it): part of the one schema, declared in its own file beside
:mod:`pybroker.config`, which loads and re-exports it (as config_pop.py's POP keys), so the
config imports nothing above it; one key per setting.
"""
import dataclasses
import importlib.util

from pybroker.schema import Rule, at_least, between, setting
from pybroker.store.control_block import REMOTING_WORKERS_MAX

# The C++ gRPC front's extension (grpc_service/front.py); setup.py builds it only where
# pkg-config finds libgrpc++.
FRONT_MODULE = "pybroker._fast.grpc_front.front"
# A gRPC worker's send ring when grpcSendRingSizeBytes is set (0: sized from maxMessageSize).
GRPC_RING_BYTES_MIN, GRPC_RING_BYTES_MAX = 1 << 16, 1 << 30


def front_built() -> bool:
    """Whether this build has the C++ gRPC front: grpcNativeFront's default (looked up
    without importing it, so neither the front nor grpc is loaded here)."""
    return importlib.util.find_spec(FRONT_MODULE) is not None


@dataclasses.dataclass(frozen=True)
class GrpcConfig:
    """RocketMQ 5's gRPC endpoint served by the broker itself (docs/architecture/grpc.md).
    Java 5.3.3's ``ProxyConfig`` keys and defaults (rmq-proxy.json there, broker.conf here),
    checked where the proxy checks them; the body limit is the store's ``maxMessageSize``."""
    grpc_workers: int = setting("grpcWorkers", 0,
        "gRPC processes serving grpcServerPort; 0 = no gRPC endpoint (pybroker standalone: 1 "
        "unless set)", unit="count",
        rule=between(0, REMOTING_WORKERS_MAX), important=True, pybroker_only=True)
    grpc_server_port: int = setting("grpcServerPort", 8081,
        "port of the gRPC endpoint (apache.rocketmq.v2.MessagingService) on bindAddress",
        rule=between(1, 65535), important=True)
    grpc_native_front: bool = setting("grpcNativeFront", front_built,
        "serve grpcServerPort with the C++ front (libgrpc++), which relays every call to the "
        "worker's grpcio service on a private socket; default: true where the front is built "
        "(setup.py with libgrpc++-dev), else false; true without it: a warning and grpcio "
        "serves the port", pybroker_only=True)
    grpc_send_ring_size_bytes: int = setting("grpcSendRingSizeBytes", 0,
        "gRPC worker -> appender ring per gRPC worker (sendRingSizeBytes is the remoting "
        "workers'); 0 = the smallest power of two holding two of the largest records (16 MiB "
        "at the default maxMessageSize), at most sendRingSizeBytes", unit="bytes",
        rule=Rule(f"must be 0 or a power of two between {GRPC_RING_BYTES_MIN} and "
                  f"{GRPC_RING_BYTES_MAX}", lambda value: value == 0 or (
                      GRPC_RING_BYTES_MIN <= value <= GRPC_RING_BYTES_MAX
                      and value & (value - 1) == 0)),
        pybroker_only=True)
    grpc_max_inbound_message_size: int = setting("grpcMaxInboundMessageSize", 130 << 20,
        "largest gRPC message accepted", unit="bytes", rule=between(4096, 1 << 30))
    enable_message_body_empty_check: bool = setting("enableMessageBodyEmptyCheck", True,
        "gRPC sends: refuse an empty body (MESSAGE_BODY_EMPTY)")
    max_user_property_size: int = setting("maxUserPropertySize", 16 * 1024,
        "gRPC sends: user properties, tag and keys together", unit="bytes", rule=at_least(1))
    user_property_max_num: int = setting("userPropertyMaxNum", 128,
        "gRPC sends: user properties of one message", unit="count", rule=between(1, 65535))
    max_message_group_size: int = setting("maxMessageGroupSize", 64,
        "gRPC sends: a message group's UTF-8 bytes must stay below this", unit="bytes",
        rule=between(0, 1 << 20))
    max_delay_time_mills: int = setting("maxDelayTimeMills", 86400000,
        "gRPC sends: latest delivery time from now (ILLEGAL_DELIVERY_TIME); <= 0: no limit",
        unit="ms", long=True)
    max_transaction_recovery_second: int = setting("maxTransactionRecoverySecond", 3600,
        "gRPC sends: longest orphaned-transaction recovery duration", unit="s", long=True)
    enable_topic_message_type_check: bool = setting("enableTopicMessageTypeCheck", True,
        "gRPC sends: a message's type must be its topic's message.type "
        "(MESSAGE_PROPERTY_CONFLICT_WITH_TYPE)")
    grpc_client_producer_max_attempts: int = setting("grpcClientProducerMaxAttempts", 3,
        "told to producers in their settings: send attempts", unit="count",
        rule=between(1, 1000))
    grpc_client_producer_backoff_initial_millis: int = setting(
        "grpcClientProducerBackoffInitialMillis", 10, "told to producers: first retry backoff",
        unit="ms", long=True, rule=at_least(0))
    grpc_client_producer_backoff_max_millis: int = setting(
        "grpcClientProducerBackoffMaxMillis", 1000, "told to producers: longest retry backoff",
        unit="ms", long=True, rule=at_least(0))
    grpc_client_producer_backoff_multiplier: int = setting(
        "grpcClientProducerBackoffMultiplier", 2, "told to producers: backoff multiplier",
        rule=between(1, 1000))
    grpc_client_consumer_min_long_polling_timeout_millis: int = setting(
        "grpcClientConsumerMinLongPollingTimeoutMillis", 5000,
        "shortest long-polling time a receive is held", unit="ms", long=True, rule=at_least(0))
    grpc_client_consumer_max_long_polling_timeout_millis: int = setting(
        "grpcClientConsumerMaxLongPollingTimeoutMillis", 20000,
        "longest long-polling time a receive is held", unit="ms", long=True, rule=at_least(0))
    grpc_client_consumer_long_polling_batch_size: int = setting(
        "grpcClientConsumerLongPollingBatchSize", 32,
        "told to consumers in their settings: receive batch size", unit="count",
        rule=between(1, 1024))
    default_invisible_time_mills: int = setting(
        "defaultInvisibleTimeMills", 60000,
        "invisible time of a receive that asks for auto-renew (the SDKs' push consumers), "
        "renewed while the client works (grpc_service/renewal.py)", unit="ms", long=True,
        rule=at_least(1000))
    enable_proxy_auto_renew: bool = setting(
        "enableProxyAutoRenew", True,
        "keep what a receive with auto-renew delivered invisible until the client acks it; "
        "false: such a receive gets the invisible duration it asks for")
    max_renew_retry_times: int = setting(
        "maxRenewRetryTimes", 3, "failed renewals of one message before it is let go",
        unit="count", rule=between(0, 1000))
    renew_ahead_time_millis: int = setting(
        "renewAheadTimeMillis", 10_000,
        "a kept message is renewed when it would become visible within this", unit="ms",
        long=True, rule=at_least(0))
    renew_max_time_millis: int = setting(
        "renewMaxTimeMillis", 3 * 3600 * 1000,
        "after this long from its first retrieval a kept message gets its group's retry delay "
        "and is let go", unit="ms", long=True, rule=at_least(0))
    renew_schedule_period_millis: int = setting(
        "renewSchedulePeriodMillis", 5000, "how often kept messages are looked at",
        unit="ms", long=True, rule=between(100, 3600 * 1000))
    invisible_time_millis_when_clear: int = setting(
        "invisibleTimeMillisWhenClear", 1000,
        "a client gone from its group (or the worker stopping): its kept messages come back "
        "this long after", unit="ms", long=True, rule=at_least(0))
    min_invisible_time_mills_for_recv: int = setting(
        "minInvisibleTimeMillsForRecv", 10000,
        "shortest invisible duration a receive may ask for (ILLEGAL_INVISIBLE_TIME)", unit="ms",
        long=True, rule=at_least(0))
    max_invisible_time_mills: int = setting(
        "maxInvisibleTimeMills", 12 * 3600 * 1000,
        "longest invisible duration a receive or a change may ask for; <= 0: no limit",
        unit="ms", long=True)
