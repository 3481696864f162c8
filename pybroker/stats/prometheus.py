# The Prometheus endpoint: Java 5.x's metric names and labels, plus pybroker's own instruments.
"""``metricsExporterType=PROM``: one endpoint, served by the supervisor from the shared region.

Java RocketMQ 5.x exports OpenTelemetry metrics through a Prometheus pull exporter on
``metricsPromExporterHost:metricsPromExporterPort`` (default brokerIP1:5557). pybroker serves
the same series names (as Java's exporter prints them, units appended:
``rocketmq_rpc_latency_milliseconds``) and labels where it measures the figure
(stats/metrics_java.py: BrokerMetricsConstant, DefaultStoreMetricsConstant,
RemotingMetricsConstant), every series with Java's common labels ``cluster``,
``node_type="broker"``, ``node_id=<brokerName>`` (+ ``metricsLabel``), and adds its own
``pybroker_*`` instruments (group commits, flushes, dispatch lag, wake-ups, per-process CPU
and RSS). The text format is written by ``prometheus_client``; the HTTP side is a small asyncio
server in the supervisor's loop (no thread in a process that forks its workers). For a queue
the group pops (POP), ``rocketmq_consumer_inflight_messages`` is its messages popped and neither
acknowledged nor revived (the POP table's count, Java's PopInflightMessageCounter), the ready
messages count from its pop offset, and its lag counts its in-flight messages too (Java
ConsumerLagCalculator). The POP revive families (``rocketmq_pop_revive_*``) come from the revive
service, which runs in this process; POP's buffer families are served as what they are here
(no check-point is ever buffered: sizes 0, no scans); the 5.x timer's metrics from
pybroker/stats/timer_gauges.py and the timer worker's section, with the store's
``storage_type`` / ``storage_medium`` labels as Java's. The timer's and POP's family names
are stats/metric_names.py's. Not exported: ``rocketmq_processor_watermark`` (no thread
pools) and RocksDB metrics.
With ``statsInstrumentsEnable=false`` the families read from the region (traffic, histograms,
half messages) are left out, the consumer figures count no pulls, and
``pybroker_stats_instruments_enabled`` is 0.
"""
import asyncio
import logging
import os
import time

import psutil
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily)

from pybroker._fast import stats as _stats
from pybroker._fast.stats import StatsHistogram as H
from pybroker._fast.stats import StatsKeyKind as K
from pybroker.protocol import pop as pop_names
from pybroker.protocol.constants import ConsumeType
from pybroker.stats import metric_names as names
from pybroker.stats import metrics_exporter, metrics_java
from pybroker.stats.timer_gauges import TimerGauges
from pybroker.store.control_block import APPENDER, DISPATCHER, FLUSHER
from pybroker.tasks import within

__all__ = ["BrokerCollector", "MetricsServer", "used_disk_bytes"]

log = logging.getLogger("pybroker.stats.prometheus")

_REQUEST_BYTES_MAX = 16 * 1024
_REQUEST_TIMEOUT_S = 5.0


def common_labels(config) -> dict[str, str]:
    """Java's LABEL_MAP: cluster, node_type, node_id and metricsLabel's key:value pairs."""
    broker = config.broker
    labels = {"cluster": broker.broker_cluster_name, "node_type": "broker",
              "node_id": broker.broker_name}
    for pair in broker.metrics_label.split(","):
        key, _, value = pair.partition(":")
        if key.strip() and value.strip():
            labels[key.strip()] = value.strip()
    return labels


# Exported log2 buckets: 0 .. _BUCKETS_EXPORTED-1 (values up to 2^27 - 1, e.g. 134 s in µs);
# larger values count in +Inf. A fixed set keeps the series stable across scrapes.
_BUCKETS_EXPORTED = 28


def _log2_buckets(words, scale: float = 1.0) -> tuple[list[tuple[str, float]], float]:
    """Cumulative (le, count) of a log2 histogram: bucket b holds values <= 2^b - 1."""
    counts = [int(count) for count in words[:_stats.HIST_BUCKETS]]
    buckets: list[tuple[str, float]] = []
    total = 0
    for bucket in range(_BUCKETS_EXPORTED):
        total += counts[bucket]
        buckets.append((f"{((1 << bucket) - 1) * scale:.9g}", total))
    buckets.append(("+Inf", int(words[_stats.HIST_COUNT_WORD])))
    return buckets, int(words[_stats.HIST_SUM_WORD]) * scale


class BrokerCollector:
    """A prometheus_client collector over the supervisor's StatsService and metadata."""

    def __init__(self, config, service, metadata, reader, children=lambda: {},
                 half_messages=None, runtime_table=None, pop=lambda: None):
        self.config = config              # replaced by the supervisor on UPDATE_BROKER_CONFIG
        self.service = service
        self.metadata = metadata
        self.reader = reader
        self.children = children          # {pid: worker name}
        self.pop = pop                    # the supervisor's PopOwner (broker/pop/owner.py)
        self.half_messages = half_messages
        # () -> the GET_BROKER_RUNTIME_INFO table (metricsExporterCompat=exporter's runtime)
        self.runtime_table = runtime_table
        self.labels = common_labels(config)
        self.timer = TimerGauges(config, lambda: service.control, reader)

    def _family(self, kind, name: str, doc: str, extra=(), **options):
        return kind(name, doc, labels=[*self.labels, *extra], **options)

    def _java_family(self, kind, family: names.Family, extra=()):
        return self._family(kind, family.name, family.doc, extra)

    def collect(self):
        region = self.service.region
        enabled = region.enabled
        yield self._gauge("pybroker_stats_instruments_enabled", "1: the region's counters and "
                          "histograms are recorded; 0: statsInstrumentsEnable=false, the "
                          "families read from them are not exported", int(enabled))
        base_names, base = list(self.labels), list(self.labels.values())
        snapshot = region.snapshot()
        if enabled:
            yield from metrics_java.keyed_families(base_names, base, snapshot)
            yield from self._histograms(snapshot)
            yield from self._pop_puts(snapshot)
            if self.half_messages is not None:
                yield from metrics_java.half_families(base_names, base,
                                                      self.half_messages.counts(snapshot))
        yield self._gauge("rocketmq_broker_permission", "Broker permission",
                          self.config.broker.broker_permission)
        yield from self._metadata_gauges()
        yield from self._revive()
        yield from self._pop_buffers()
        yield from metrics_java.connection_families(base_names, base, self.metadata)
        yield from metrics_java.consumer_families(
            base_names, base, self.metadata, self.reader,
            snapshot.pull_offsets() if enabled else None, self.config.broker.broker_permission,
            popped=self._popped, pop_retry_topic=self._pop_retry_topic)
        yield from self._storage()
        yield from self._scrub(snapshot)
        if self.timer.enabled:
            yield from self._timer(snapshot if enabled else None)
        yield from self._processes()
        broker = self.config.broker
        if broker.metrics_exporter_compat == "exporter" and self.runtime_table is not None:
            yield from metrics_exporter.exporter_families(
                broker.broker_cluster_name, broker.broker_name,
                self.config.derived.broker_addr, self.service, self.metadata, self.reader,
                self.runtime_table())

    def _histograms(self, snapshot):
        base = list(self.labels.values())
        specs = (
            ("pybroker_put_latency_seconds", "Put request to completion, SYNC_FLUSH wait "
             "included", H.PUT_LATENCY_US, 1e-6, {}),
            ("pybroker_group_commit_messages", "Records appended per appender drain",
             H.GROUP_COMMIT_MESSAGES, 1.0, {}),
            ("pybroker_group_commit_bytes", "Bytes appended per appender drain",
             H.GROUP_COMMIT_BYTES, 1.0, {}),
            ("pybroker_flush_latency_seconds", "One CommitLog flush (msync) call",
             H.FLUSH_LATENCY_US, 1e-6, {}),
            ("pybroker_flush_bytes", "Bytes made durable per flush", H.FLUSH_BYTES, 1.0, {}),
            ("pybroker_dispatch_lag_bytes", "Written minus dispatched when a dispatch batch "
             "starts", H.DISPATCH_LAG_BYTES, 1.0, {}),
        )
        for name, doc, index, scale, extra in specs:
            family = HistogramMetricFamily(name, doc, labels=[*self.labels, *extra])
            buckets, total = _log2_buckets(snapshot.histogram(index), scale)
            family.add_metric(base + list(extra.values()), buckets, total)
            yield family

    def _gauge(self, name: str, doc: str, value, extra: dict | None = None):
        family = self._family(GaugeMetricFamily, name, doc, tuple(extra or ()))
        family.add_metric(list(self.labels.values()) + list((extra or {}).values()), value)
        return family

    def _metadata_gauges(self):
        metadata = self.metadata
        yield self._gauge("rocketmq_topic_number", "Active topic number",
                          len(metadata.topic_configs()))
        yield self._gauge("rocketmq_consumer_group_number", "Active subscription group number",
                          len(metadata.groups.subscription_groups()))

    def _pop_retry_topic(self, group: str, topic: str) -> str | None:
        """The retry topic of a POP group on ``topic`` that exists (Java ConsumerLagCalculator:
        the group's live clients consume by POP; its retry topic by enableRetryTopicV2's
        naming, then the V1 name while retrieveMessageFromPopRetryTopicV1), else None. A group
        with no live client counts as POP when such a topic exists (only POP creates one)."""
        info = self.metadata.consumers.consumer_group_info(group)
        if info is not None and info.consume_type != ConsumeType.CONSUME_POP:
            return None
        broker = self.config.broker
        candidates = [pop_names.retry_topic(topic, group, broker.enable_retry_topic_v2)]
        if broker.enable_retry_topic_v2 and broker.retrieve_message_from_pop_retry_topic_v1:
            candidates.append(pop_names.retry_topic_v1(topic, group))
        return next((name for name in candidates
                     if self.metadata.topic_config(name) is not None), None)

    def _popped(self, group: str, topic: str, queue_id: int) -> tuple[int, int] | None:
        """(pop offset, in-flight messages) of a queue the group pops, else None."""
        owner = self.pop()
        return owner.directory.queue_figures(group, topic, queue_id) if owner else None

    def _pop_puts(self, snapshot):
        """Java's rocketmq_pop_revive_in_message_total: check-point and ack records stored in
        the revive log (the remoting workers count them; failed puts are logged, not
        counted, so every series is put_status PUT_OK)."""
        family = self._java_family(CounterMetricFamily, names.POP_REVIVE_IN,
                                   ("consumer_group", "topic", "revive_message_type",
                                    "put_status"))
        base = list(self.labels.values())
        for (kind, _label, key), words in sorted(snapshot.labelled_keys().items()):
            if kind not in (K.KEY_GROUP_CK, K.KEY_GROUP_ACK):
                continue
            topic, _, group = key.partition("@")
            is_ck = kind == K.KEY_GROUP_CK
            family.add_metric(base + [group, topic, "CK" if is_ck else "ACK", "PUT_OK"],
                              words[0] if is_ck else words[1])
        yield family

    def _revive(self):
        """Java PopMetricsManager's revive families, from the revive service (a master's)."""
        owner = self.pop()
        revive = owner.revive if owner is not None else None
        if revive is None:
            return
        base = list(self.labels.values())
        # Java's lag gauge says milliseconds and records messages (getReviveBehindMessages).
        lag = self._java_family(GaugeMetricFamily, names.POP_REVIVE_LAG, ("queue_id",))
        latency = self._java_family(GaugeMetricFamily, names.POP_REVIVE_LATENCY, ("queue_id",))
        for queue_id, (messages, millis) in sorted(revive.behind_by_queue().items()):
            lag.add_metric(base + [str(queue_id)], messages)
            latency.add_metric(base + [str(queue_id)], millis)
        yield lag
        yield latency
        read = self._java_family(CounterMetricFamily, names.POP_REVIVE_OUT,
                                 ("consumer_group", "topic", "queue_id", "revive_message_type"))
        for (group, topic, queue_id, kind), count in sorted(revive.records_read.items()):
            read.add_metric(base + [group, topic, str(queue_id), kind], count)
        yield read
        retried = self._java_family(CounterMetricFamily, names.POP_REVIVE_RETRY,
                                    ("consumer_group", "topic", "put_status"))
        for (group, topic, status), count in sorted(revive.retry_puts.items()):
            retried.add_metric(base + [group, topic, status], count)
        yield retried

    def _pop_buffers(self):
        """Java's PopBufferMergeService figures. pybroker has no such buffer: every
        check-point and ack is written to the revive log before its answer goes out
        (docs/architecture/pop.md), so no check-point or offset is ever held in one (0) and no
        buffer scan ever runs (a histogram of no scans)."""
        yield self._gauge(names.POP_CHECKPOINT_BUFFER_SIZE.name,
                          names.POP_CHECKPOINT_BUFFER_SIZE.doc, 0)
        yield self._gauge(names.POP_OFFSET_BUFFER_SIZE.name, names.POP_OFFSET_BUFFER_SIZE.doc,
                          0)
        scans = self._java_family(HistogramMetricFamily, names.POP_BUFFER_SCAN_TIME)
        scans.add_metric(list(self.labels.values()),
                         [(f"{bound:g}", 0) for bound in names.POP_BUFFER_SCAN_BUCKETS_MS]
                         + [("+Inf", 0)], 0)
        yield scans

    def _storage(self):
        control = self.service.control
        written = control.written_position
        store = self.config.store
        local = names.STORAGE_LABELS
        used = used_disk_bytes(store.store_path_root_dir)
        if used is not None:
            yield self._gauge("rocketmq_storage_size_bytes", "Broker storage size", used, local)
        yield self._gauge("rocketmq_storage_flush_behind_bytes", "Broker flush behind bytes",
                          max(written - control.flushed_position, 0), local)
        yield self._gauge("rocketmq_storage_dispatch_behind_bytes",
                          "Broker dispatch behind bytes",
                          max(control.confirm_offset() - control.dispatched_position, 0), local)
        earliest = self.reader.get_earliest_message_time()
        yield self._gauge("rocketmq_storage_message_reserve_time_milliseconds",
                          "Broker message reserve time",
                          time.time_ns() // 1_000_000 - earliest if earliest > 0 else 0, local)

    def _scrub(self, snapshot):
        """The scrubber's progress and findings (pybroker/proc/scrubber.py), and reads that
        met a damaged record."""
        status = self.service.scrubber_status
        if status is not None:
            figures = status()
            base = list(self.labels.values())
            verified = self._family(CounterMetricFamily, "pybroker_scrub_verified_bytes",
                                    "CommitLog bytes and queue units the scrubber checked")
            verified.add_metric(base, int(figures["scrubVerifiedBytes"]))
            yield verified
            passes = self._family(CounterMetricFamily, "pybroker_scrub_passes",
                                  "Scrubber passes completed over the whole store")
            passes.add_metric(base, int(figures["scrubPasses"]))
            yield passes
            yield self._gauge("pybroker_scrub_position_bytes", "CommitLog offset the running "
                              "scrubber pass reached", int(figures["scrubPosition"]))
            damage = self._family(GaugeMetricFamily, "pybroker_scrub_damage",
                                  "Damaged places the scrubber knows of", ("file_kind",))
            damage.add_metric(base + ["commitlog"], int(figures["scrubDamagedRecords"]))
            damage.add_metric(base + ["consumequeue"], int(figures["scrubDamagedUnits"]))
            yield damage
        if snapshot is not None:
            read = self._family(CounterMetricFamily, "pybroker_damaged_records_read",
                                "Reads that met a damaged record and did not serve it")
            read.add_metric(list(self.labels.values()),
                            snapshot.counter(_stats.StatsCounter.DAMAGED_RECORDS_READ))
            yield read

    def _timer(self, snapshot):
        """Java 5.x's timer metrics (DefaultStoreMetricsManager: its storage labels on every
        series), read from the timer line, the wheel, the metrics document and the timer
        worker's section, and pybroker's lateness histogram."""
        timer = self.timer
        now_ms = time.time_ns() // 1_000_000
        local = names.STORAGE_LABELS
        for family, value in (
                (names.TIMER_ENQUEUE_LAG, timer.enqueue_behind_messages()),
                (names.TIMER_ENQUEUE_LATENCY, timer.enqueue_behind_ms(now_ms)),
                (names.TIMER_DEQUEUE_LAG, timer.congest_num()),
                # Java records getDequeueBehind() here, in seconds despite its unit.
                (names.TIMER_DEQUEUE_LATENCY, timer.dequeue_behind_s(now_ms))):
            yield self._gauge(family.name, family.doc, value, local)
        base = list(self.labels.values()) + list(local.values())
        timing = self._java_family(GaugeMetricFamily, names.TIMING_MESSAGES, (*local, "topic"))
        for topic, metric in sorted(timer.metrics().timing_count.items()):
            timing.add_metric(base + [topic], metric.count)
        yield timing
        snapshot_family = self._java_family(GaugeMetricFamily, names.TIMER_MESSAGE_SNAPSHOT,
                                            (*local, "timer_bound_s"))
        for bound, count in timer.distribution():
            snapshot_family.add_metric(base + [str(bound)], count)
        yield snapshot_family
        if snapshot is not None:
            yield from self._timer_counts(snapshot)

    def _timer_counts(self, snapshot):
        local = names.STORAGE_LABELS
        base = list(self.labels.values()) + list(local.values())
        families = {
            K.KEY_TIMER_ENQUEUE: self._java_family(CounterMetricFamily, names.TIMER_ENQUEUE,
                                                   (*local, "topic")),
            K.KEY_TIMER_DEQUEUE: self._java_family(CounterMetricFamily, names.TIMER_DEQUEUE,
                                                   (*local, "topic"))}
        for (kind, _label, key), words in sorted(snapshot.labelled_keys().items()):
            if kind in families:
                families[kind].add_metric(base + [key], words[0])
        yield from families.values()
        yield from metrics_java.delay_latency_family(list(self.labels), list(self.labels.values()),
                                                     snapshot)
        base = list(self.labels.values())
        lateness = HistogramMetricFamily(
            "pybroker_timer_lateness_seconds", "Timer messages: stored after their slot's end",
            labels=list(self.labels))
        buckets, total = _log2_buckets(snapshot.histogram(H.TIMER_LATENESS_MS), 0.001)
        lateness.add_metric(base, buckets, total)
        yield lateness

    def _processes(self):
        base = list(self.labels.values())
        cpu = self._family(CounterMetricFamily, "pybroker_process_cpu_seconds",
                           "CPU time of each broker process", ("process",))
        rss = self._family(GaugeMetricFamily, "pybroker_process_rss_bytes",
                           "Resident set size of each broker process", ("process",))
        processes = {os.getpid(): "supervisor", **self.children()}
        for pid, name in sorted(processes.items(), key=lambda item: item[1]):
            try:
                process = psutil.Process(pid)
                times, memory = process.cpu_times(), process.memory_info()
            except psutil.Error:
                continue
            cpu.add_metric(base + [name], times.user + times.system)
            rss.add_metric(base + [name], memory.rss)
        yield cpu
        yield rss
        wakeups = self._family(CounterMetricFamily, "pybroker_wakeups",
                               "Times a data-plane worker woke from a sleep", ("process",))
        control = self.service.control
        for worker in (APPENDER, DISPATCHER, FLUSHER):
            wakeups.add_metric(base + [worker.name], control.worker(worker.slot).wakeups)
        yield wakeups


def used_disk_bytes(path: str) -> int | None:
    """Java DefaultStoreMetricsManager's storage size: total minus free bytes of the file
    system holding the store root (File.getTotalSpace - getFreeSpace), one statvfs call, not
    a walk of the store (a scrape stays O(1) however large the store grows); None when the
    directory is missing or reports no space (Java records nothing then)."""
    try:
        disk = os.statvfs(path)
    except OSError:
        return None
    total = disk.f_blocks * disk.f_frsize
    return total - disk.f_bfree * disk.f_frsize if total > 0 else None


class MetricsServer:
    """GET /metrics over HTTP/1.x in the caller's event loop (one request per connection)."""

    def __init__(self, collector: BrokerCollector, host: str, port: int):
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self.host, self.port = host, port
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, self.host, self.port,
                                                 reuse_address=True)
        log.info("Prometheus metrics on http://%s:%d/metrics", self.host, self.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        try:
            head = await within(reader.readuntil(b"\r\n\r\n"), _REQUEST_TIMEOUT_S)
            if len(head) > _REQUEST_BYTES_MAX:
                raise ValueError("request head too large")
            method, path = (head.split(b"\r\n", 1)[0].split(b" ") + [b"", b""])[:2]
            if method not in (b"GET", b"HEAD"):
                status, body = b"405 Method Not Allowed", b"only GET\n"
            elif path.split(b"?")[0] not in (b"/metrics", b"/"):
                status, body = b"404 Not Found", b"try /metrics\n"
            else:
                status, body = b"200 OK", generate_latest(self.registry)
            writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: "
                         + CONTENT_TYPE_LATEST.encode() + b"\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n"
                         + (body if method != b"HEAD" else b""))
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError,
                ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
