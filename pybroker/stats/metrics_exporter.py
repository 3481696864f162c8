# The names apache/rocketmq-exporter serves, from the broker itself (metricsExporterCompat).
"""``metricsExporterCompat=exporter``: the metric names and labels of apache/rocketmq-exporter
(the standalone exporter that polls a 4.x cluster with admin requests), so the community
Grafana dashboards built on it (its rocketmq_exporter_overview.json and
rocketmq_exporter.json) read a pybroker broker's own endpoint unchanged.

Each figure is the one the exporter computes, from the broker's own sources instead of admin
requests: StatsItem minute windows (VIEW_BROKER_STATS_DATA's, stats/service.py) for the
``*_tps`` and ``*_message_size`` rates, consumer offsets for the diffs, the
GET_BROKER_RUNTIME_INFO table for the ``rocketmq_brokeruntime_*`` family. One broker serves
its own share: the exporter's cluster-wide sums are the sums over the brokers' series
(Prometheus gives each scraped broker its own ``instance``). Not served: the
``rocketmq_client_*`` figures (the exporter asks every consumer client for its running
info, a request per client that has no place on a scrape), ``rocketmq_group_count`` and
``rocketmq_producer_count``.
"""
import re
import time

from prometheus_client.core import GaugeMetricFamily

from pybroker.protocol.constants import (DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX,
                                         MessageModel)

__all__ = ["exporter_families", "RUNTIME_FAMILIES", "EXPORTER_COMPAT_VALUES"]

EXPORTER_COMPAT_VALUES = ("none", "exporter")
_RUNTIME_LABELS = ["cluster", "brokerIP", "brokerHost", "des", "boottime", "broker_version"]
# rocketmq_brokeruntime_<name> -> the runtime table key it reads (a number, or the first
# field of a "10 s 60 s 600 s" rate: "key#index").
RUNTIME_FAMILIES = {
    "msg_put_total_today_now": "msgPutTotalTodayNow",
    "msg_gettotal_today_now": "msgGetTotalTodayNow",
    "msg_gettotal_yesterdaymorning": "msgGetTotalYesterdayMorning",
    "msg_puttotal_yesterdaymorning": "msgPutTotalYesterdayMorning",
    "msg_gettotal_todaymorning": "msgGetTotalTodayMorning",
    "msg_puttotal_todaymorning": "msgPutTotalTodayMorning",
    "dispatch_behind_bytes": "dispatchBehindBytes",
    "put_message_size_total": "putMessageSizeTotal",
    "put_message_average_size": "putMessageAverageSize",
    "earliest_message_timestamp": "earliestMessageTimeStamp",
    "putmessage_entire_time_max": "putMessageEntireTimeMax",
    "start_accept_sendrequest_time": "startAcceptSendRequestTimeStamp",
    "send_threadpool_queue_size": "sendThreadPoolQueueSize",
    "putmessage_times_total": "putMessageTimesTotal",
    "getmessage_entire_time_max": "getMessageEntireTimeMax",
    "pagecache_lock_time_mills": "pageCacheLockTimeMills",
    "commitlog_disk_ratio": "commitLogDiskRatio",
    "consumequeue_disk_ratio": "consumeQueueDiskRatio",
    "pull_threadpoolqueue_size": "pullThreadPoolQueueSize",
    "query_threadpoolqueue_size": "queryThreadPoolQueueSize",
    "pull_threadpoolqueue_headwait_timemills": "pullThreadPoolQueueHeadWaitTimeMills",
    "query_threadpoolqueue_headwait_timemills": "queryThreadPoolQueueHeadWaitTimeMills",
    "send_threadpoolqueue_headwait_timemills": "sendThreadPoolQueueHeadWaitTimeMills",
    "commitlog_maxoffset": "commitLogMaxOffset",
    "commitlog_minoffset": "commitLogMinOffset",
    "remain_howmanydata_toflush": "remainHowManyDataToFlush",
    "put_latency_99": "putLatency99",
    "put_latency_999": "putLatency999",
    **{f"{name}_tps{seconds}": f"{key}#{index}"
       for name, key in (("put", "putTps"), ("getfound", "getFoundTps"),
                         ("getmiss", "getMissTps"), ("gettotal", "getTotalTps"),
                         ("gettransfered", "getTransferedTps"))
       for index, seconds in enumerate((10, 60, 600))},
}
# rocketmq_brokeruntime_pmdt_<name> -> the putMessageDistributeTime bucket it reads.
_DISTRIBUTION = {"0ms": "<=0ms", "0to10ms": "0~10ms", "10to50ms": "10~50ms",
                 "50to100ms": "50~100ms", "100to200ms": "100~200ms", "200to500ms": "200~500ms",
                 "500to1s": "500ms~1s", "1to2s": "1~2s", "2to3s": "2~3s", "3to4s": "3~4s",
                 "4to5s": "4~5s", "5to10s": "5~10s", "10stomore": "10s~"}
_BINARY = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def _number(text: str | None) -> float | None:
    try:
        return float((text or "").split(" ")[0])
    except ValueError:
        return None


def _runtime_value(table: dict[str, str], source: str) -> float | None:
    key, _, index = source.partition("#")
    text = table.get(key)
    if text is None:
        return None
    if index:
        fields = text.split(" ")
        return _number(fields[int(index)]) if int(index) < len(fields) else None
    return _number(text)


def _capacity(table: dict[str, str]) -> dict[str, float]:
    """commitLogDirCapacity "Total : 9.8 GiB, Free : 1.2 GiB." in bytes (the exporter's
    parse)."""
    found = re.findall(r"(Total|Free) : ([\d.]+) (\w+)", table.get("commitLogDirCapacity", ""))
    return {name.lower(): float(value) * _BINARY.get(unit, 1) for name, value, unit in found}


def _runtime_families(cluster: str, broker_addr: str, table: dict[str, str]):
    """The exporter's BrokerRuntimeMetric labels: cluster, the master's address, an empty
    host, brokerVersionDesc, bootTimestamp and brokerVersion of the runtime table."""
    values = [cluster, broker_addr, "", table.get("brokerVersionDesc", ""),
              table.get("bootTimestamp", ""), table.get("brokerVersion", "")]

    def gauge(name: str, value: float | None):
        family = GaugeMetricFamily(f"rocketmq_brokeruntime_{name}", name,
                                   labels=_RUNTIME_LABELS)
        if value is not None:
            family.add_metric(values, value)
        return family
    for name, source in RUNTIME_FAMILIES.items():
        yield gauge(name, _runtime_value(table, source))
    distribution = dict(re.findall(r"\[([^\]]+)\]:(\d+)",
                                   table.get("putMessageDistributeTime") or ""))
    for name, bucket in _DISTRIBUTION.items():
        count = distribution.get(bucket)
        yield gauge(f"pmdt_{name}", float(count) if count is not None else None)
    capacity = _capacity(table)
    yield gauge("commitlogdir_capacity_free", capacity.get("free"))
    yield gauge("commitlogdir_capacity_total", capacity.get("total"))


def exporter_families(cluster: str, broker_name: str, broker_addr: str, service, metadata,
                      reader, runtime_table: dict[str, str], now_ms: int | None = None):
    """Every family of apache/rocketmq-exporter this broker can serve (module docstring)."""
    now_ms = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    yield from _runtime_families(cluster, broker_addr, runtime_table)
    yield from _broker_rates(cluster, broker_name, broker_addr, service)
    yield from _topic_families(cluster, broker_name, service, metadata, reader)
    yield from _group_families(cluster, broker_name, service, metadata, reader, now_ms)


def _minute(service, stats_name: str, key: str, field: str = "tps") -> float:
    data = service.view(stats_name, key)
    return float(data["statsMinute"][field]) if data else 0.0


def _broker_rates(cluster: str, broker_name: str, broker_addr: str, service):
    labels = ["cluster", "brokerIP", "broker"]
    for name, stats_name in (("rocketmq_broker_tps", "BROKER_PUT_NUMS"),
                             ("rocketmq_broker_qps", "BROKER_GET_NUMS")):
        family = GaugeMetricFamily(name, stats_name, labels=labels)
        family.add_metric([cluster, broker_addr, broker_name],
                          round(_minute(service, stats_name, cluster), 2))
        yield family


def _topic_families(cluster: str, broker_name: str, service, metadata, reader):
    labels = ["cluster", "broker", "topic"]
    tps = GaugeMetricFamily("rocketmq_producer_tps", "TopicPutNums", labels=labels)
    size = GaugeMetricFamily("rocketmq_producer_message_size", "TopicPutMessageSize",
                             labels=labels)
    offset = GaugeMetricFamily("rocketmq_producer_offset", "TopicOffset", labels=labels)
    retry = GaugeMetricFamily("rocketmq_topic_retry_offset", "TopicRetryOffset", labels=labels)
    dlq = GaugeMetricFamily("rocketmq_topic_dlq_offset", "TopicRetryOffset",
                            labels=["cluster", "broker", "group"])
    for topic, config in sorted(metadata.topic_configs().items()):
        total = sum(max(reader.get_max_offset_in_queue(topic, queue_id), 0)
                    for queue_id in range(config.write_queue_nums))
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            retry.add_metric([cluster, broker_name, topic], total)
            continue
        if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            dlq.add_metric([cluster, broker_name, topic[len(DLQ_GROUP_TOPIC_PREFIX):]], total)
            continue
        offset.add_metric([cluster, broker_name, topic], total)
        tps.add_metric([cluster, broker_name, topic],
                       round(_minute(service, "TOPIC_PUT_NUMS", topic), 2))
        size.add_metric([cluster, broker_name, topic],
                        round(_minute(service, "TOPIC_PUT_SIZE", topic), 2))
    yield from (tps, size, offset, retry, dlq)


def _offsets_of(metadata, reader, topic: str, group: str,
                config) -> list[tuple[int, int, int]]:
    """(broker offset, consumer offset, queue id) of each queue the group committed on this
    broker."""
    committed = metadata.offsets.document.offset_table.get(f"{topic}@{group}", {})
    result = []
    for queue_id, offset in sorted(committed.items()):
        if queue_id < config.read_queue_nums:
            result.append((max(reader.get_max_offset_in_queue(topic, queue_id), 0),
                           max(offset, 0), queue_id))
    return result


def _group_families(cluster: str, broker_name: str, service, metadata, reader, now_ms: int):
    nums = ["cluster", "broker", "topic", "group"]
    families = {name: GaugeMetricFamily(name, doc, labels=nums) for name, doc in (
        ("rocketmq_consumer_tps", "GroupGetNums"),
        ("rocketmq_consumer_message_size", "GroupGetMessageSize"),
        ("rocketmq_send_back_nums", "SendBackNums"),
        ("rocketmq_consumer_offset", "GroupBrokerTotalOffset"),
        ("rocketmq_group_get_latency_by_storetime", "GroupGetLatencyByStoreTime"))}
    diff_labels = ["group", "topic", "countOfOnlineConsumers", "msgModel"]
    diffs = {name: GaugeMetricFamily(name, doc, labels=diff_labels) for name, doc in (
        ("rocketmq_group_diff", "GroupDiff"), ("rocketmq_group_retrydiff", "GroupRetryDiff"),
        ("rocketmq_group_dlqdiff", "GroupDLQDiff"))}
    for key in sorted(metadata.offsets.document.offset_table):
        topic, _, group = key.partition("@")
        config = metadata.topic_config(topic)
        if config is None:
            continue
        queues = _offsets_of(metadata, reader, topic, group, config)
        info = metadata.consumers.consumer_groups.get(group)
        online = len(info.channels) if info is not None else 0
        model = info.message_model if info is not None else MessageModel.CLUSTERING
        diff = sum(max(broker - consumer, 0) for broker, consumer, _ in queues)
        which = ("rocketmq_group_retrydiff" if topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
                 else "rocketmq_group_dlqdiff" if topic.startswith(DLQ_GROUP_TOPIC_PREFIX)
                 else "rocketmq_group_diff")
        if model == MessageModel.CLUSTERING:
            diffs[which].add_metric([group, topic, str(online), str(int(model))], diff)
        if which != "rocketmq_group_diff":
            continue
        values = [cluster, broker_name, topic, group]
        stats_key = f"{topic}@{group}"
        families["rocketmq_consumer_tps"].add_metric(
            values, round(_minute(service, "GROUP_GET_NUMS", stats_key), 2))
        families["rocketmq_consumer_message_size"].add_metric(
            values, round(_minute(service, "GROUP_GET_SIZE", stats_key), 2))
        families["rocketmq_send_back_nums"].add_metric(
            values, _minute(service, "SNDBCK_PUT_NUMS", stats_key, "sum"))
        families["rocketmq_consumer_offset"].add_metric(
            values, sum(consumer for _, consumer, _ in queues))
        if model == MessageModel.CLUSTERING:
            families["rocketmq_group_get_latency_by_storetime"].add_metric(
                values, _latency(reader, topic, queues, now_ms))
    yield from families.values()
    yield from diffs.values()


def _latency(reader, topic: str, queues, now_ms: int) -> int:
    """The exporter's: per queue now - store time of the message at the consumer offset (0
    when caught up), the largest over the queues."""
    latest = 0
    for broker, consumer, queue_id in queues:
        if consumer >= broker:
            continue
        stored = reader.get_message_store_timestamp(topic, queue_id, consumer)
        if stored > 0:
            latest = max(latest, now_ms - stored)
    return latest
