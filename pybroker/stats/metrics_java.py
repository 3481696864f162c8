# Java 5.x's metric families that need more than one counter: keyed histograms, lag, transactions.
"""The rocketmq_* families of Java 5.3.3's BrokerMetricsManager and RemotingMetricsManager that
pybroker builds from the instrument region's keyed entries (stats/metric_names.py says how they
are keyed) and from the metadata, with Java's names as its Prometheus exporter prints them
(OpenTelemetry appends the unit: ``rocketmq_rpc_latency_milliseconds``) and Java's labels.

Scrape cost: a pass over the region's keyed entries, and per consumer group and queue of its
topics two offset look-ups (the max offset from the dispatcher's queue offset table,
pybroker/store/queue_offsets.py, the committed one from the metadata) and, for a queue behind
them, at most two store-timestamp reads (a ConsumeQueue unit and 8 bytes of its record, in
the page cache): O(groups x queues), never O(store), as Java's ConsumerLagCalculator.
"""
import time

from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily)

from pybroker.protocol.constants import RETRY_GROUP_TOPIC_PREFIX, Perm
from pybroker.stats import metric_names as names
from pybroker.stats.recorder import PUT_LABEL_STATS_ONLY
from pybroker._fast.stats import StatsKeyKind as K

__all__ = ["keyed_families", "consumer_families", "connection_families", "half_families",
           "delay_latency_family"]

_LAG_LABELS = ("consumer_group", "topic", "is_retry", "is_system")


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _histogram(name: str, doc: str, label_names, bounds, scale: float = 1.0):
    """A HistogramMetricFamily fed from {label values: ([count per bucket], sum)}."""
    family = HistogramMetricFamily(name, doc, labels=list(label_names))

    def add(series: dict) -> HistogramMetricFamily:
        for values, (counts, total) in sorted(series.items()):
            cumulative, buckets = 0, []
            for index, bound in enumerate(bounds):
                cumulative += counts[index]
                buckets.append((f"{bound:g}", cumulative))
            buckets.append(("+Inf", cumulative + counts[len(bounds)]))
            family.add_metric(list(values), buckets, total * scale)
        return family
    return add


def _accumulate(series: dict, values: tuple, bucket: int, size: int, count: int,
                total: int) -> None:
    counts, old_total = series.setdefault(values, ([0] * (size + 1), 0))
    counts[bucket] += count
    series[values] = (counts, old_total + total)


def keyed_families(base_names, base, snapshot):
    """rpc latency, messages/throughput in and out, message size, DLQ sends, commits,
    rollbacks and finish latency, from the keyed entries of every writer."""
    labels = list(base_names)
    rpc: dict = {}
    sizes: dict = {}
    finish: dict = {}
    counters = _counters(labels)
    for (kind, label, key), words in sorted(snapshot.labelled_keys().items()):
        count, total = int(words[0]), int(words[1])
        if kind == K.KEY_TOPIC_PUT and label == PUT_LABEL_STATS_ONLY:
            continue          # the timer's deliveries: statsAll's, not rocketmq_messages_in's
        if kind == K.KEY_TOPIC_PUT and not names.is_retry_or_dlq(key):
            values = [key, names.MESSAGE_TYPE_LABELS.get(label, "normal"),
                      _bool(names.traffic_is_system(key))]
            counters["in"].add_metric(base + values, count)
            counters["in_bytes"].add_metric(base + values, total)
        elif kind == K.KEY_GROUP_GET:
            topic, _, group = key.partition("@")
            if not names.is_retry_or_dlq(topic):
                values = [topic, group, _bool(names.traffic_is_system(topic, group))]
                counters["out"].add_metric(base + values, count)
                counters["out_bytes"].add_metric(base + values, total)
        elif kind == K.KEY_RPC:
            _accumulate(rpc, tuple(base + ["remoting", *_rpc_labels(key)]), label,
                        len(names.RPC_BUCKETS_MS), count, total)
        elif kind == K.KEY_MESSAGE_SIZE and not names.is_retry_or_dlq(key):
            message_type, bucket = names.split_message_size_label(label)
            values = (*base, key, names.MESSAGE_TYPE_LABELS.get(message_type, "normal"),
                      _bool(names.traffic_is_system(key)))
            _accumulate(sizes, values, bucket, len(names.MESSAGE_SIZE_BUCKETS_BYTES), count,
                        total)
        elif kind == K.KEY_SEND_TO_DLQ:
            topic, _, group = key.partition("@")
            counters["dlq"].add_metric(
                base + [group, topic, _bool(names.consumer_is_system(topic, group))], count)
        elif kind == K.KEY_TRANSACTION and label in (names.TransactionEvent.COMMITTED,
                                                     names.TransactionEvent.ROLLED_BACK):
            which = "commit" if label == names.TransactionEvent.COMMITTED else "rollback"
            counters[which].add_metric(base + [key], count)
        elif kind == K.KEY_FINISH_LATENCY:
            _accumulate(finish, (*base, key), label, len(names.FINISH_LATENCY_BUCKETS_S),
                        count, total)
    yield from counters.values()
    yield _histogram("rocketmq_rpc_latency_milliseconds", "Rpc latency",
                     labels + ["protocol_type", "request_code", "response_code",
                               "is_long_polling", "result"],
                     names.RPC_BUCKETS_MS, 0.001)(rpc)
    yield _histogram("rocketmq_message_size", "Incoming messages size",
                     labels + ["topic", "message_type", "is_system"],
                     names.MESSAGE_SIZE_BUCKETS_BYTES)(sizes)
    # Java records (now - born) / 1000, i.e. seconds, on an instrument whose unit is "ms".
    yield _histogram("rocketmq_finish_message_latency_milliseconds",
                     "Transaction finish latency", labels + ["topic"],
                     names.FINISH_LATENCY_BUCKETS_S)(finish)


def delay_latency_family(base_names, base, snapshot):
    """rocketmq_delay_message_latency_seconds (DefaultStoreMetricsManager's view): per real
    topic, the delay each wheel-topic message the timer read was set, its delivery time - its
    birth in whole seconds (KEY_DELAY_LATENCY, written by the timer worker), with the store's
    labels."""
    local = names.STORAGE_LABELS
    bounds = names.DELAY_LATENCY_BUCKETS_S
    series: dict = {}
    for (kind, label, key), words in snapshot.labelled_keys().items():
        if kind == K.KEY_DELAY_LATENCY:
            _accumulate(series, (*base, *local.values(), key), label, len(bounds),
                        int(words[0]), int(words[1]))
    family = names.DELAY_MESSAGE_LATENCY
    yield _histogram(family.name, family.doc, [*base_names, *local, "topic"], bounds)(series)


def _counters(labels: list[str]) -> dict[str, CounterMetricFamily]:
    """The counter families of keyed_families, by short name."""
    return {
        "in": CounterMetricFamily("rocketmq_messages_in", "Total number of incoming messages",
                                  labels=labels + ["topic", "message_type", "is_system"]),
        "in_bytes": CounterMetricFamily("rocketmq_throughput_in",
                                        "Total traffic of incoming messages",
                                        labels=labels + ["topic", "message_type", "is_system"]),
        "out": CounterMetricFamily("rocketmq_messages_out", "Total number of outgoing messages",
                                   labels=labels + ["topic", "consumer_group", "is_system"]),
        "out_bytes": CounterMetricFamily("rocketmq_throughput_out",
                                         "Total traffic of outgoing messages",
                                         labels=labels + ["topic", "consumer_group",
                                                          "is_system"]),
        "dlq": CounterMetricFamily("rocketmq_send_to_dlq_messages",
                                   "Consumer send to DLQ messages",
                                   labels=labels + ["consumer_group", "topic", "is_system"]),
        "commit": CounterMetricFamily("rocketmq_commit_messages",
                                      "Total number of commit messages",
                                      labels=labels + ["topic"]),
        "rollback": CounterMetricFamily("rocketmq_rollback_messages",
                                        "Total number of rollback messages",
                                        labels=labels + ["topic"]),
    }


def _rpc_labels(key: str) -> list[str]:
    request, response, long_polling, result = names.parse_rpc_key(key)
    return [request, response, long_polling, result]


def half_families(base_names, base, counts: dict[str, int]):
    """rocketmq_half_messages: half messages not finished yet, per real topic."""
    family = GaugeMetricFamily("rocketmq_half_messages", "Half messages of all topics",
                               labels=list(base_names) + ["topic"])
    for topic, count in sorted(counts.items()):
        family.add_metric(base + [topic], count)
    yield family


def connection_families(base_names, base, metadata):
    """Producer and consumer connections with Java's labels (language, version, protocol
    type; for consumers also the group, consume mode and is_system), counted per label set."""
    labels = list(base_names)
    producers: dict[tuple, int] = {}
    for channels in metadata.producers.producer_groups.values():
        for info in channels.values():
            key = (names.language_name(info.language), names.version_name(info.version))
            producers[key] = producers.get(key, 0) + 1
    family = GaugeMetricFamily("rocketmq_producer_connections", "Producer connections",
                               labels=labels + ["language", "version", "protocol_type"])
    for (language, version), count in sorted(producers.items()):
        family.add_metric(base + [language, version, "remoting"], count)
    yield family
    consumers: dict[tuple, int] = {}
    for group, group_info in metadata.consumers.consumer_groups.items():
        mode = names.CONSUME_MODES.get(group_info.consume_type, "push")
        for info in group_info.channels.values():
            key = (group, names.language_name(info.language), names.version_name(info.version),
                   mode, _bool(names.consumer_is_system(None, group)))
            consumers[key] = consumers.get(key, 0) + 1
    family = GaugeMetricFamily("rocketmq_consumer_connections", "Consumer connections",
                               labels=labels + ["consumer_group", "language", "version",
                                                "consume_mode", "protocol_type", "is_system"])
    for (group, language, version, mode, system), count in sorted(consumers.items()):
        family.add_metric(base + [group, language, version, mode, "remoting", system], count)
    yield family


def _groups_and_topics(metadata) -> list[tuple[str, str]]:
    """(group, topic) pairs ConsumerLagCalculator reports: the topics each online group
    subscribes to, and (for groups gone offline, Java's compensation table) the topics the
    offset table holds for it; retry topics left out, as Java."""
    pairs: set[tuple[str, str]] = set()
    for group, info in metadata.consumers.consumer_groups.items():
        pairs.update((group, topic) for topic in info.subscriptions)
    for key in metadata.offsets.document.offset_table:
        topic, _, group = key.partition("@")
        pairs.add((group, topic))
    return sorted((group, topic) for group, topic in pairs
                  if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX))


def consumer_families(base_names, base, metadata, reader, pull_offsets, permission: int,
                      now_ms: int | None = None, popped=lambda group, topic, queue_id: None,
                      pop_retry_topic=lambda group, topic: None):
    """Java's ConsumerLagCalculator figures per (group, topic), summed over the topic's
    write queues: lag and lag latency (from the committed offset), inflight and queueing
    latency (from the pull offset, the newest pull's next offset; the committed offset for a
    queue not pulled since the broker started), ready messages (max offset - pull offset; 0
    for a queue not pulled since start, as Java's pullOffsetTable then has nothing).
    A queue the group pops (``popped(group, topic, queue_id)``: (pop offset, in-flight
    messages), else None) counts the POP table's in-flight messages in its lag and inflight,
    its pop offset in place of the pull offset (Java's ConsumerLagCalculator for POP); a
    POP group's retry topic (``pop_retry_topic(group, topic)``, None without one) gets its own
    series under the original topic with is_retry="true", as Java's.
    ``pull_offsets`` None (statsInstrumentsEnable=false: the pull offsets are not recorded):
    only the two lag families, which need none."""
    now_ms = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    labels = list(base_names) + list(_LAG_LABELS)
    families = {name: GaugeMetricFamily(name, doc, labels=labels) for name, doc in (
        ("rocketmq_consumer_lag_messages", "Consumer lag messages"),
        ("rocketmq_consumer_lag_latency_milliseconds", "Consumer lag time"),
        ("rocketmq_consumer_inflight_messages", "Consumer inflight messages"),
        ("rocketmq_consumer_queueing_latency_milliseconds", "Consumer queueing time"),
        ("rocketmq_consumer_ready_messages", "Consumer ready messages"))}
    pulls_known = pull_offsets is not None
    pull_offsets = pull_offsets or {}
    def readable(config) -> bool:
        return config is not None and bool(config.perm & permission & (Perm.READ | Perm.WRITE))

    for group, topic in _groups_and_topics(metadata):
        config = metadata.topic_config(topic)
        if not readable(config):
            continue
        retry = pop_retry_topic(group, topic)
        retry_config = metadata.topic_config(retry) if retry is not None else None
        for counted, counted_config, is_retry in ((topic, config, "false"),
                                                  (retry, retry_config, "true")):
            if counted is None or counted_config is None or not readable(counted_config):
                continue
            figures = _group_figures(metadata, reader, pull_offsets, group, counted,
                                     counted_config.write_queue_nums, popped)
            lag, lag_since, inflight, pull_since, ready = figures
            values = base + [group, topic, is_retry,
                             _bool(names.consumer_is_system(topic, group))]
            families["rocketmq_consumer_lag_messages"].add_metric(values, lag)
            families["rocketmq_consumer_lag_latency_milliseconds"].add_metric(
                values, now_ms - lag_since if lag_since else 0)
            families["rocketmq_consumer_inflight_messages"].add_metric(values, inflight)
            families["rocketmq_consumer_queueing_latency_milliseconds"].add_metric(
                values, now_ms - pull_since if pull_since else 0)
            families["rocketmq_consumer_ready_messages"].add_metric(values, ready)
    yield from (family for name, family in families.items()
                if pulls_known or "_lag_" in name)


def _group_figures(metadata, reader, pull_offsets, group: str, topic: str, queues: int,
                   popped):
    key = f"{topic}@{group}"
    committed_table = metadata.offsets.document.offset_table.get(key, {})
    lag = inflight = ready = 0
    lag_since = pull_since = 0
    for queue_id in range(queues):
        broker_offset = max(reader.get_max_offset_in_queue(topic, queue_id), 0)
        committed = committed_table.get(queue_id, -1)
        committed = broker_offset if committed < 0 else committed
        lag += max(broker_offset - committed, 0)
        if committed < broker_offset:
            lag_since = _earliest(lag_since, reader.get_message_store_timestamp(
                topic, queue_id, committed))
        pop = popped(group, topic, queue_id)
        if pop is not None:
            pull_offset, popped_inflight = pop
            lag += popped_inflight
            inflight += popped_inflight
            ready += max(broker_offset - pull_offset, 0)
        else:
            pulled = pull_offsets.get((key, queue_id))
            pull_offset = committed if pulled is None else pulled
            inflight += max(pull_offset - committed, 0)
            ready += max(broker_offset - pulled, 0) if pulled is not None else 0
        if pull_offset < broker_offset:
            pull_since = _earliest(pull_since, reader.get_message_store_timestamp(
                topic, queue_id, pull_offset))
    return lag, lag_since, inflight, pull_since, ready


def _earliest(known: int, timestamp: int) -> int:
    if timestamp <= 0:
        return known
    return timestamp if not known else min(known, timestamp)
