# The statistics instruments' cost: pybroker with statsInstrumentsEnable=true vs false, A/B.
"""Issue #13 / #14 item 1: do the always-on counters and histograms cost anything measurable?

Runs the side-by-side benchmark's produce load (tools/bench_side_by_side.py ``measure``: our
Java producer on the official client, 64 threads, 128 B and 1 KiB, ASYNC_FLUSH, the first
``--warmup`` seconds discarded) against a fresh pybroker per run, alternating the two settings
(on, off, on, off, ...) so drift on a shared box hits both alike. Reports, per size and
setting, the median and range of send TPS and of the broker's CPU µs per message; writes the
records to ``benchmarks/results/<stamp>-stats-on-off.json`` (key "rows", not "summary":
tools/bench_report.py rebuilds docs/benchmarks.md from files with a "summary" of its own
schema).

    flock /tmp/pybroker-heavy.lock python benchmarks/e2e/bench_stats_on_off.py --runs 3
"""
import argparse
import atexit
import datetime
import json
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import bench_brokers as bb  # noqa: E402  (tools/ is not a package)
import bench_side_by_side as sbs  # noqa: E402
import java_rocketmq as jr  # noqa: E402
from bench_load import LoadTools  # noqa: E402

SETTINGS = {"on": "true", "off": "false"}


def _run_one(tools, work: pathlib.Path, scenario, timing, setting: str, run: int) -> dict:
    conf = dict(bb.shared_broker_conf(scenario.flush),
                statsInstrumentsEnable=SETTINGS[setting])
    broker = bb.PyBroker(work, conf).start()
    try:
        record = sbs.measure(tools, broker, scenario, timing, run)
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    record["stats"] = setting
    cpu = record.get("cpu") or {}
    sys.stderr.write(f"[stats-on-off] run {run} {scenario.name} stats {setting}: tps "
                     f"{record.get('tps') or 0:.0f}, broker {cpu.get('cpu_us_per_msg', 0):.1f} "
                     f"us/msg{' ERROR ' + record['error'][-300:] if 'error' in record else ''}\n")
    return record


def summary(records: list[dict]) -> list[dict]:
    """Per scenario and setting: median and range of TPS and broker CPU µs/msg."""
    rows = []
    for scenario in sorted({record["scenario"] for record in records}):
        for setting in SETTINGS:
            good = [record for record in records if record["scenario"] == scenario
                    and record["stats"] == setting and "error" not in record]
            if not good:
                continue
            tps = [record["tps"] for record in good]
            cpu = [record["cpu"]["cpu_us_per_msg"] for record in good]
            rows.append({"scenario": scenario, "stats": setting, "runs": len(good),
                         "tps_median": statistics.median(tps), "tps_min": min(tps),
                         "tps_max": max(tps), "cpu_us_median": statistics.median(cpu),
                         "cpu_us_min": min(cpu), "cpu_us_max": max(cpu)})
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| load | stats | runs | send TPS median (min-max) | broker CPU µs/msg median "
             "(min-max) |", "|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['scenario']} | {row['stats']} | {row['runs']} | "
                     f"{row['tps_median']:.0f} ({row['tps_min']:.0f}-{row['tps_max']:.0f}) | "
                     f"{row['cpu_us_median']:.1f} ({row['cpu_us_min']:.1f}-"
                     f"{row['cpu_us_max']:.1f}) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2, help="runs per size and setting")
    parser.add_argument("--duration", type=int, default=30, help="seconds per run")
    parser.add_argument("--warmup", type=int, default=10, help="discarded seconds")
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--sizes", default="128,1024", help="body bytes, comma list")
    args = parser.parse_args(argv)
    atexit.register(bb.stop_all)
    install = jr.RocketMQInstall("4.9.8")
    install.install()
    work_root = pathlib.Path(tempfile.mkdtemp(prefix="pybroker-stats-on-off-"))
    tools = LoadTools(work_root, install)
    timing = sbs.Timing(args.duration, args.warmup)
    scenarios = [sbs.Scenario("produce", int(size), args.threads, "ASYNC_FLUSH")
                 for size in args.sizes.split(",")]
    started = time.time()
    records = []
    try:
        for run in range(args.runs):
            for scenario in scenarios:
                for setting in SETTINGS:
                    work = work_root / f"{scenario.name}-{setting}-{run}"
                    records.append(_run_one(tools, work, scenario, timing, setting, run))
    finally:
        bb.stop_all()
        shutil.rmtree(work_root, ignore_errors=True)
    rows = summary(records)
    stamp = datetime.datetime.fromtimestamp(started).strftime("%Y%m%dT%H%M%S")
    path = ROOT / "benchmarks" / "results" / f"{stamp}-stats-on-off.json"
    path.write_text(json.dumps({"mode": "stats-on-off", "revision": sbs.git_revision(),
                                "started": started, "duration_s": args.duration,
                                "warmup_s": args.warmup, "rows": rows,
                                "records": records}, indent=1) + "\n", encoding="utf-8")
    sys.stdout.write(markdown(rows) + f"\nresults: {path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
