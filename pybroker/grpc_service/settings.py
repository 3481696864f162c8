# Client settings of gRPC clients: what they declared on Telemetry, merged with the broker's.
"""The proxy's ``GrpcClientSettingsManager``, per gRPC worker.

A client declares its settings on its Telemetry stream (producer: the topics it publishes;
consumer: group and subscriptions); the server keeps them by client id and answers with the
settings in effect: a producer's backoff (grpcClientProducer* keys), its body limit
(maxMessageSize) and whether message types are checked; a consumer's receive batch size, long
polling time, FIFO flag and retry policy from its subscription group (retryMaxTimes + 1
attempts, the group's retry policy, Java's customized default). Heartbeat, NotifyClientTermination
and ReceiveMessage read them back; a client the worker has no settings for is
UNRECOGNIZED_CLIENT_TYPE, as with the proxy. An SDK's connection stays on one gRPC worker
(one HTTP/2 connection per endpoint), so each worker keeps the settings of its own clients.
"""
from google.protobuf import duration_pb2

from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb

# CustomizedRetryPolicy's default ``next`` (ms): Java's 18 delay levels.
CUSTOMIZED_NEXT_DEFAULT_MS = (1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000,
                              360000, 420000, 480000, 540000, 600000, 1200000, 1800000, 3600000,
                              7200000)
# ExponentialRetryPolicy's defaults (ms).
EXPONENTIAL_DEFAULT_MS = (5000, 7200000, 2)
RETRY_MAX_TIMES_DEFAULT = 16          # SubscriptionGroupConfig's retryMaxTimes
CLIENT_SETTINGS_MAX = 65536           # clients one worker remembers


def duration_ms(milliseconds: int) -> duration_pb2.Duration:
    value = duration_pb2.Duration()
    value.FromMilliseconds(int(milliseconds))
    return value


def _group_retry_policy(group) -> dict:
    """The group's groupRetryPolicy document (empty: Java's default, CUSTOMIZED)."""
    policy = getattr(group, "group_retry_policy", None)
    if policy is None and group is not None:
        policy = group.extra.get("groupRetryPolicy")
    return policy if isinstance(policy, dict) else {}


def _backoff_of_group(backoff: pb.RetryPolicy, group) -> None:
    policy = _group_retry_policy(group)
    if policy.get("type") == "EXPONENTIAL":
        exponential = policy.get("exponentialRetryPolicy") or {}
        initial, maximum, multiplier = EXPONENTIAL_DEFAULT_MS
        backoff.exponential_backoff.CopyFrom(pb.ExponentialBackoff(
            initial=duration_ms(exponential.get("initial", initial)),
            max=duration_ms(exponential.get("max", maximum)),
            multiplier=float(exponential.get("multiplier", multiplier))))
        return
    customized = policy.get("customizedRetryPolicy") or {}
    steps = customized.get("next") or CUSTOMIZED_NEXT_DEFAULT_MS
    backoff.customized_backoff.CopyFrom(
        pb.CustomizedBackoff(next=[duration_ms(step) for step in steps]))


def retry_delay_ms(group, reconsume_times: int) -> int:
    """The group's retry policy's nextDelayDuration for ``reconsume_times`` (Java 5.3.3's
    ExponentialRetryPolicy: initial x multiplier^n up to max, n within 0..32;
    CustomizedRetryPolicy: its (n + 2)-th step, the last past the end)."""
    times = max(reconsume_times, 0)
    policy = _group_retry_policy(group)
    if policy.get("type") == "EXPONENTIAL":
        exponential = policy.get("exponentialRetryPolicy") or {}
        initial, maximum, multiplier = EXPONENTIAL_DEFAULT_MS
        initial = int(exponential.get("initial", initial))
        maximum = int(exponential.get("max", maximum))
        multiplier = int(exponential.get("multiplier", multiplier))
        return min(maximum, initial * multiplier ** min(times, 32))
    steps = (policy.get("customizedRetryPolicy") or {}).get("next") or CUSTOMIZED_NEXT_DEFAULT_MS
    return int(steps[min(times + 2, len(steps) - 1)])


def merge_subscription(settings: pb.Settings, group, grpc_config) -> pb.Settings:
    """mergeSubscriptionData: the group's settings over a consumer's (``group`` None: a
    default SubscriptionGroupConfig)."""
    merged = pb.Settings()
    merged.CopyFrom(settings)
    subscription = merged.subscription
    subscription.receive_batch_size = grpc_config.grpc_client_consumer_long_polling_batch_size
    subscription.long_polling_timeout.CopyFrom(
        duration_ms(grpc_config.grpc_client_consumer_max_long_polling_timeout_millis))
    subscription.fifo = bool(group.consume_message_orderly) if group is not None else False
    retry_max_times = group.retry_max_times if group is not None else RETRY_MAX_TIMES_DEFAULT
    merged.backoff_policy.max_attempts = retry_max_times + 1
    merged.backoff_policy.ClearField("strategy")
    _backoff_of_group(merged.backoff_policy, group)
    return merged


def merge_producer(settings: pb.Settings, grpc_config, max_message_size: int) -> pb.Settings:
    """mergeProducerData: the broker's retry backoff, body limit and type check."""
    merged = pb.Settings()
    merged.CopyFrom(settings)
    backoff = merged.backoff_policy
    backoff.max_attempts = grpc_config.grpc_client_producer_max_attempts
    backoff.exponential_backoff.CopyFrom(pb.ExponentialBackoff(
        initial=duration_ms(grpc_config.grpc_client_producer_backoff_initial_millis),
        max=duration_ms(grpc_config.grpc_client_producer_backoff_max_millis),
        multiplier=float(grpc_config.grpc_client_producer_backoff_multiplier)))
    merged.publishing.validate_message_type = grpc_config.enable_topic_message_type_check
    merged.publishing.max_body_size = max_message_size
    return merged


def _metric_off(settings: pb.Settings) -> pb.Settings:
    # mergeMetric with metricCollectorMode OFF (the proxy's default; pybroker collects none).
    settings.metric.CopyFrom(pb.Metric(on=False))
    return settings


class ClientSettings:
    """Client id -> the settings it declared (one gRPC worker's clients)."""

    def __init__(self, config_source, group_of):
        # ``config_source()``: the worker's current Config; ``group_of(name)``: the
        # subscription group's config or None.
        self._config = config_source
        self._group_of = group_of
        self._raw: dict[str, pb.Settings] = {}

    def update(self, client_id: str, settings: pb.Settings) -> None:
        """updateClientSettings: a consumer's settings start from the default group's."""
        if settings.HasField("subscription"):
            config = self._config()
            stored = merge_subscription(pb.Settings(), None, config.grpc)
            stored.MergeFrom(settings)
            settings = stored
        if client_id not in self._raw and len(self._raw) >= CLIENT_SETTINGS_MAX:
            self._raw.pop(next(iter(self._raw)))
        self._raw[client_id] = settings

    def raw(self, client_id: str) -> pb.Settings | None:
        return self._raw.get(client_id)

    def effective(self, client_id: str) -> pb.Settings | None:
        """getClientSettings: what the client runs with, or None when it declared nothing."""
        return self._merged(self._raw.get(client_id))

    def remove(self, client_id: str) -> pb.Settings | None:
        """removeAndGetClientSettings."""
        return self._merged(self._raw.pop(client_id, None))

    def _merged(self, settings: pb.Settings | None) -> pb.Settings | None:
        if settings is None:
            return None
        config = self._config()
        if settings.HasField("publishing"):
            settings = merge_producer(settings, config.grpc, config.store.max_message_size)
        elif settings.HasField("subscription"):
            group = self._group_of(settings.subscription.group.name)
            if group is not None:
                settings = merge_subscription(settings, group, config.grpc)
        else:
            copied = pb.Settings()
            copied.CopyFrom(settings)
            settings = copied
        return _metric_off(settings)
