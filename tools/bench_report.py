# Aggregation of side-by-side benchmark records into result JSON and docs/benchmarks.md.
"""Medians, spreads and pybroker/Java ratios of bench_side_by_side.py records; the doc page."""
import json
import os
import pathlib
import platform
import statistics
import subprocess
import time

import psutil

# (record key, label, higher is better) for the per-broker aggregates.
METRICS = (
    ("send_tps", "send TPS"), ("consume_tps", "consume TPS"), ("avg_rt_ms", "avg RT ms"),
    ("p99_rt_ms", "p99 RT ms"), ("max_rt_ms", "max RT ms"), ("failures", "failures"),
    ("broker_cpu_s", "broker CPU s"), ("cpu_s_per_100k", "CPU s/100k msgs"),
    ("peak_rss_mib", "peak RSS MiB"), ("avg_b2c_rt_ms", "consume avg B2C ms"),
)
RATIO_METRICS = ("send_tps", "consume_tps", "avg_rt_ms", "cpu_s_per_100k", "peak_rss_mib")


def _value(record: dict, key: str):
    consumer = record.get("consumer") or {}
    if key == "failures":
        if "error" in record:
            return None
        return record.get("send_failed", 0) + record.get("response_failed", 0)
    if key in ("consume_tps", "avg_b2c_rt_ms"):
        return consumer.get(key)
    return record.get(key)


def _stats(values: list) -> dict | None:
    values = [value for value in values if value is not None]
    if not values:
        return None
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "n": len(values)}


def aggregate(records: list[dict]) -> list[dict]:
    """Per scenario: per broker median/min/max of every metric, and pybroker/java ratios."""
    rows = []
    for scenario in dict.fromkeys(record["scenario"] for record in records):
        row = {"scenario": scenario, "brokers": {}, "ratio_pybroker_over_java": {}}
        for broker in ("pybroker", "java"):
            mine = [r for r in records if r["scenario"] == scenario and r["broker"] == broker]
            if mine:
                row["brokers"][broker] = {key: _stats([_value(r, key) for r in mine])
                                          for key, _ in METRICS}
                row["brokers"][broker]["errors"] = sum("error" in r for r in mine)
        both = row["brokers"]
        if "pybroker" in both and "java" in both:
            for key in RATIO_METRICS:
                mine, theirs = both["pybroker"].get(key), both["java"].get(key)
                if mine and theirs and theirs["median"]:
                    row["ratio_pybroker_over_java"][key] = round(
                        mine["median"] / theirs["median"], 3)
        rows.append(row)
    return rows


def _command_output(argv: list[str]) -> str:
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"
    return (run.stdout + run.stderr).strip().splitlines()[0] if (run.stdout + run.stderr) \
        else "unavailable"


def machine() -> dict:
    """What the figures were measured on."""
    model = "unknown"
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu_model": model, "logical_cpus": os.cpu_count(),
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "kernel": platform.release(), "python": platform.python_version(),
            "java": _command_output(["java", "-version"]),
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()]}


def build_result(args, install, records: list[dict], scenarios, started: float) -> dict:
    import bench_side_by_side as driver
    mode = args.mode + (f" (only {args.only})" if args.only else "")
    return {
        "mode": mode, "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "duration_s": round(time.time() - started, 1), "runs": args.runs,
        "brokers": args.brokers, "java_rocketmq_version": install.version,
        "machine": machine(),
        "load": {"producer_threads": driver.PRODUCER_THREADS,
                 "batch_threads": driver.BATCH_THREADS, "batch_size": driver.BATCH_SIZE,
                 "consumer_threads": driver.CONSUMER_THREADS,
                 "go_async_inflight": driver.GO_INFLIGHT,
                 "scenarios": [{"name": s.name, "kind": s.kind, "body_bytes": s.body_bytes,
                                "messages": s.messages, "flush": s.flush} for s in scenarios]},
        "summary": aggregate(records), "records": records,
    }


def _cell(stats: dict | None, digits: int = 0) -> str:
    if not stats:
        return "–"
    fmt = f"{{:.{digits}f}}"
    if stats["n"] == 1:
        return fmt.format(stats["median"])
    return f"{fmt.format(stats['median'])} ({fmt.format(stats['min'])}–" \
           f"{fmt.format(stats['max'])})"


def _ratio(row: dict, key: str) -> str:
    value = row["ratio_pybroker_over_java"].get(key)
    return f"{value:.2f}" if value is not None else "–"


def table(result: dict) -> str:
    """Markdown tables: throughput/latency per scenario and broker, then resources."""
    lines = ["| scenario | broker | send TPS | consume TPS | avg RT ms | p99 RT ms | max RT ms "
             "| failures |", "|---|---|---|---|---|---|---|---|"]
    for row in result["summary"]:
        for broker, stats in row["brokers"].items():
            errors = f" ({stats['errors']} run errors)" if stats["errors"] else ""
            lines.append(f"| {row['scenario']} | {broker}{errors} | "
                         f"{_cell(stats['send_tps'])} | {_cell(stats['consume_tps'])} | "
                         f"{_cell(stats['avg_rt_ms'], 2)} | {_cell(stats['p99_rt_ms'], 1)} | "
                         f"{_cell(stats['max_rt_ms'], 0)} | {_cell(stats['failures'])} |")
    lines += ["", "| scenario | broker | broker CPU s | CPU s per 100k msgs | peak RSS MiB |",
              "|---|---|---|---|---|"]
    for row in result["summary"]:
        for broker, stats in row["brokers"].items():
            lines.append(f"| {row['scenario']} | {broker} | {_cell(stats['broker_cpu_s'], 1)} | "
                         f"{_cell(stats['cpu_s_per_100k'], 1)} | "
                         f"{_cell(stats['peak_rss_mib'])} |")
    lines += ["", "| scenario | send TPS | consume TPS | avg RT | CPU per msg | peak RSS |",
              "|---|---|---|---|---|---|"]
    for row in result["summary"]:
        if row["ratio_pybroker_over_java"]:
            lines.append(f"| {row['scenario']} | " + " | ".join(
                _ratio(row, key) for key in RATIO_METRICS) + " |")
    return "\n".join(lines)


def summary_text(result: dict) -> str:
    return f"mode {result['mode']}, {result['duration_s']} s\n" + table(result)


NOTES_MARKER = "<!-- Hand-written notes below this line are kept when the page is regenerated. -->"
INTRO = """# End-to-end benchmarks: pybroker next to Java RocketMQ

Generated by `tools/bench_side_by_side.py` (see `benchmarks/e2e/README.md`); raw figures are in
`benchmarks/results/*.json`. Do not edit above the marker at the end: the page is rewritten from
the newest result file of each mode.

**The load tool is ours.** RocketMQ's benchmark classes
(`org.apache.rocketmq.example.benchmark.Producer`, `Consumer`, `BatchProducer`,
`TransactionProducer`) live in `rocketmq-example`, which is not published on Maven Central at any
version, so `tools/java_bench/BenchProducer.java` (also the batch producer, `-b`),
`BenchConsumer.java` and `BenchTransactionProducer.java` re-implement their behaviour, flags
(`-w` threads, `-s` body bytes, `-q` message count, `-y` async, `-b` batch) and statistics
(Send TPS, Max/Average RT, Send Failed, Response Failed; Consume TPS, B2C/S2C RT) on top of
the official `rocketmq-client` jars; the producer uses the ROCKETMQ binary header
encoding, as the official Producer does. The Go client (`rmqgo send --mode async`, v2.1.2) is a
second, independent producer load (JSON headers).

**Method.** Both brokers get the same broker.conf (RocketMQ defaults except 128 MiB CommitLog
files, auto-create on, `flushDiskType` per scenario; pybroker `remotingWorkers=2`). Every
(run, broker) pair starts a fresh broker on an empty store; runs alternate between brokers so
each ratio compares figures taken minutes apart. Each run sends a fixed number of messages to a
fresh topic and stops by itself; produce_consume starts a push consumer (from the first offset)
alongside the producer and ends when it has received every message. RT is per request
(milliseconds, client side). Broker CPU = user+system seconds of every broker process
(pybroker: supervisor, NameServer, remoting workers, appender, dispatcher, flusher; Java:
NameServer and broker JVMs) during the load; peak RSS = the largest sum of their RSS (pages
shared between pybroker's forked processes count once per process, so pybroker's figure is an
upper bound). Cells are `median (min–max)` over the runs.

**Noise.** A 2-vCPU virtual machine shared with other engineers' test runs; the load generator
runs on the same two cores as the broker and competes with it. Absolute figures move by tens of
percent between sessions; ratios measured back to back are the figures to quote.
"""


def _section(result: dict) -> str:
    machine_info = result["machine"]
    load = result["load"]
    return "\n".join([
        f"## {result['mode']} — {result['started']} ({result['duration_s']} s, "
        f"{result['runs']} run(s), Java RocketMQ {result['java_rocketmq_version']})", "",
        f"Machine: {machine_info['cpu_model']}, {machine_info['logical_cpus']} logical CPUs, "
        f"{machine_info['memory_gib']} GiB, Linux {machine_info['kernel']}, Python "
        f"{machine_info['python']}, {machine_info['java']}; load average at the end "
        f"{machine_info['load_average_at_end']}.", "",
        f"Load: producer {load['producer_threads']} sync sender threads; batch "
        f"{load['batch_threads']} threads x {load['batch_size']} messages per request; consumer "
        f"{load['consumer_threads']} consume threads; Go producer async with "
        f"{load['go_async_inflight']} requests in flight. Messages per run: "
        + ", ".join(f"{s['name']} {s['messages']}" for s in load["scenarios"]) + ".", "",
        table(result), "",
        "Ratios are pybroker median / Java median (send and consume TPS: higher is better for "
        "pybroker;\nRT, CPU per message and RSS: lower is better).", ""])


def write_docs(results_dir: pathlib.Path, doc_path: pathlib.Path) -> None:
    """Rewrite doc_path from the newest result file of each mode; keep the notes section."""
    newest: dict[str, dict] = {}
    for path in sorted(results_dir.glob("*.json")):
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            continue
        if result.get("summary"):
            newest[result["mode"]] = result
    notes = ""
    if doc_path.exists():
        text = doc_path.read_text(encoding="utf-8")
        if NOTES_MARKER in text:
            notes = text.split(NOTES_MARKER, 1)[1]
    order = sorted(newest, key=lambda mode: ({"quick": 0, "full": 1}.get(mode, 2), mode))
    sections = [_section(newest[mode]) for mode in order]
    doc_path.write_text(INTRO + "\n" + "\n".join(sections) + "\n" + NOTES_MARKER
                        + (notes or "\n"), encoding="utf-8")
