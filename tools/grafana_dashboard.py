# Writes docs/grafana/pybroker.json: a Grafana dashboard of pybroker's metrics endpoint.
"""Generate the Grafana dashboard shipped in docs/grafana/ (``python tools/grafana_dashboard.py``).

Panels query the Java 5.x family names pybroker serves (docs/statistics.md, "Prometheus
endpoint"; the timer's and POP's names from pybroker/stats/metric_names.py) and pybroker's
own ``pybroker_*`` instruments; variables pick the Prometheus data source, the cluster and
the broker (``node_id``). tests/broker/test_prometheus.py checks the file against Grafana's
dashboard schema (the grafana-foundation-sdk models), that every query names a family the
endpoint serves, and runs every query on a real Prometheus scraping a real broker.
"""
import json
import pathlib
import sys

from pybroker.stats import metric_names as names

OUT = pathlib.Path(__file__).resolve().parents[1] / "docs" / "grafana" / "pybroker.json"
SELECT = 'cluster=~"$cluster",node_id=~"$broker"'
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# (row title, [(panel title, unit, [(legend, expression)])]); ``{s}`` is the selector.
ROWS = [
    ("Traffic", [
        ("Messages in per second, by topic", "ops", [
            ("{{topic}}", 'sum by (topic) (rate(rocketmq_messages_in_total{{{s},'
                          'is_system="false"}}[1m]))')]),
        ("Messages out per second, by topic and group", "ops", [
            ("{{topic}} / {{consumer_group}}",
             'sum by (topic, consumer_group) (rate(rocketmq_messages_out_total{{{s},'
             'is_system="false"}}[1m]))')]),
        ("Bytes in and out per second", "Bps", [
            ("in", 'sum(rate(rocketmq_throughput_in_total{{{s}}}[1m]))'),
            ("out", 'sum(rate(rocketmq_throughput_out_total{{{s}}}[1m]))')]),
        ("Message size, p50 and p99 (Java's buckets)", "bytes", [
            ("p50", 'histogram_quantile(0.5, sum by (le) (rate('
                    'rocketmq_message_size_bucket{{{s}}}[5m])))'),
            ("p99", 'histogram_quantile(0.99, sum by (le) (rate('
                    'rocketmq_message_size_bucket{{{s}}}[5m])))')]),
    ]),
    ("Latency", [
        ("Request latency p99, by request code", "ms", [
            ("{{request_code}}", 'histogram_quantile(0.99, sum by (le, request_code) (rate('
                                 'rocketmq_rpc_latency_milliseconds_bucket{{{s},'
                                 'is_long_polling="false"}}[1m])))')]),
        ("Put latency in the broker (p50, p99)", "s", [
            ("p50", 'histogram_quantile(0.5, sum by (le) (rate('
                    'pybroker_put_latency_seconds_bucket{{{s}}}[1m])))'),
            ("p99", 'histogram_quantile(0.99, sum by (le) (rate('
                    'pybroker_put_latency_seconds_bucket{{{s}}}[1m])))')]),
        ("CommitLog flush call p99, and records per group commit p50", "s", [
            ("flush p99", 'histogram_quantile(0.99, sum by (le) (rate('
                          'pybroker_flush_latency_seconds_bucket{{{s}}}[1m])))'),
            ("group commit p50 (records)", 'histogram_quantile(0.5, sum by (le) (rate('
                                           'pybroker_group_commit_messages_bucket{{{s}}}'
                                           '[1m])))')]),
    ]),
    ("Consumers", [
        ("Lag (messages), by group and topic", "short", [
            ("{{consumer_group}} / {{topic}}",
             'sum by (consumer_group, topic) (rocketmq_consumer_lag_messages{{{s},'
             'is_system="false"}})')]),
        ("Lag (age of the oldest unconsumed message)", "ms", [
            ("{{consumer_group}} / {{topic}}",
             'max by (consumer_group, topic) (rocketmq_consumer_lag_latency_milliseconds{{{s},'
             'is_system="false"}})')]),
        ("Inflight and ready messages", "short", [
            ("inflight {{consumer_group}}", 'sum by (consumer_group) ('
                                            'rocketmq_consumer_inflight_messages{{{s}}})'),
            ("ready {{consumer_group}}", 'sum by (consumer_group) ('
                                         'rocketmq_consumer_ready_messages{{{s}}})')]),
        ("Messages sent to a DLQ per minute", "short", [
            ("{{consumer_group}}", 'sum by (consumer_group) (increase('
                                   'rocketmq_send_to_dlq_messages_total{{{s}}}[1m]))')]),
        ("Connections", "short", [
            ("producers", 'sum(rocketmq_producer_connections{{{s}}})'),
            ("consumers {{consumer_group}}", 'sum by (consumer_group) ('
                                             'rocketmq_consumer_connections{{{s}}})')]),
    ]),
    ("Transactions", [
        ("Commits and rollbacks per minute", "short", [
            ("commit {{topic}}", 'sum by (topic) (increase('
                                 'rocketmq_commit_messages_total{{{s}}}[1m]))'),
            ("rollback {{topic}}", 'sum by (topic) (increase('
                                   'rocketmq_rollback_messages_total{{{s}}}[1m]))')]),
        ("Half messages not finished", "short", [
            ("{{topic}}", 'sum by (topic) (rocketmq_half_messages{{{s}}})')]),
    ]),
    ("Storage", [
        ("Store size on disk", "bytes", [
            ("{{node_id}}", 'rocketmq_storage_size_bytes{{{s}}}')]),
        ("Flush and dispatch behind the writer", "bytes", [
            ("flush", 'rocketmq_storage_flush_behind_bytes{{{s}}}'),
            ("dispatch", 'rocketmq_storage_dispatch_behind_bytes{{{s}}}')]),
        ("Age of the oldest stored message", "ms", [
            ("{{node_id}}", 'rocketmq_storage_message_reserve_time_milliseconds{{{s}}}')]),
    ]),
    ("Timer and POP", [
        ("Timer messages parked and not yet enqueued", "short", [
            ("parked from the read time", names.TIMER_DEQUEUE_LAG.name + '{{{s}}}'),
            ("not yet enqueued", names.TIMER_ENQUEUE_LAG.name + '{{{s}}}')]),
        ("Timer messages enqueued and delivered per second", "ops", [
            ("enqueued", f'sum(rate({names.TIMER_ENQUEUE.name}_total{{{{{{s}}}}}}[1m]))'),
            ("delivered", f'sum(rate({names.TIMER_DEQUEUE.name}_total{{{{{{s}}}}}}[1m]))')]),
        # Java records the dequeue's delay behind now in seconds (its unit says ms).
        ("Timer dequeue behind now", "s", [
            ("{{node_id}}", names.TIMER_DEQUEUE_LATENCY.name + '{{{s}}}')]),
        # Java's revive lag gauge counts records, though its name says milliseconds.
        ("POP revive log records not yet revived", "short", [
            ("{{queue_id}}", f'sum by (queue_id) ({names.POP_REVIVE_LAG.name}{{{{{{s}}}}}})')]),
    ]),
    ("Processes", [
        ("CPU per broker process", "percentunit", [
            ("{{process}}", 'rate(pybroker_process_cpu_seconds_total{{{s}}}[1m])')]),
        ("Resident memory per broker process", "bytes", [
            ("{{process}}", 'pybroker_process_rss_bytes{{{s}}}')]),
    ]),
]


def _panel(panel_id: int, title: str, unit: str, queries, x: int, y: int) -> dict:
    return {
        "id": panel_id, "type": "timeseries", "title": title, "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom",
                               "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
        "targets": [{"refId": chr(ord("A") + index), "datasource": DATASOURCE,
                     "expr": expression.format(s=SELECT), "legendFormat": legend}
                    for index, (legend, expression) in enumerate(queries)],
    }


def _variable(name: str, label: str, query: str) -> dict:
    return {"name": name, "label": label, "type": "query", "datasource": DATASOURCE,
            "query": {"query": query, "refId": name},
            "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "options": [], "sort": 1, "hide": 0}


def dashboard() -> dict:
    panels, panel_id, y = [], 1, 0
    for title, row_panels in ROWS:
        panels.append({"id": panel_id, "type": "row", "title": title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        panel_id, y = panel_id + 1, y + 1
        for index, (panel_title, unit, queries) in enumerate(row_panels):
            panels.append(_panel(panel_id, panel_title, unit, queries, 12 * (index % 2), y))
            panel_id += 1
            if index % 2 == 1 or index == len(row_panels) - 1:
                y += 8
    return {
        "uid": "pybroker-overview", "title": "pybroker", "tags": ["pybroker", "rocketmq"],
        "description": "pybroker's metrics endpoint (metricsExporterType=PROM): Java RocketMQ "
                       "5.x families and pybroker's own; docs/statistics.md explains each.",
        "editable": True, "graphTooltip": 1, "schemaVersion": 39, "version": 1,
        "timezone": "browser", "refresh": "30s", "fiscalYearStartMonth": 0, "liveNow": False,
        "time": {"from": "now-1h", "to": "now"},
        "annotations": {"list": []}, "links": [],
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource",
             "query": "prometheus", "refresh": 1, "hide": 0, "options": [],
             "current": {}},
            _variable("cluster", "Cluster", "label_values(rocketmq_topic_number, cluster)"),
            _variable("broker", "Broker", 'label_values(rocketmq_topic_number{cluster=~'
                                          '"$cluster"}, node_id)')]},
        "panels": panels,
    }


def main() -> int:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(dashboard(), indent=2) + "\n", encoding="utf-8")
    sys.stdout.write(f"{OUT}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
