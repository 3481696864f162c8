# End-to-end benchmark driver: the same load against pybroker and Java RocketMQ, side by side.
"""Run RocketMQ-benchmark-style loads against pybroker and Java RocketMQ with one broker.conf.

    python tools/bench_side_by_side.py --quick            # 2 scenarios, pybroker + Java 4.9.8
    python tools/bench_side_by_side.py --full             # the matrix, pybroker + Java 4.9.8/5.3.3
    python tools/bench_side_by_side.py --profile          # one pybroker scenario under py-spy
    python tools/bench_side_by_side.py --ha               # master+slave pairs, ASYNC/SYNC_MASTER
    python tools/bench_side_by_side.py --full --only w64 --brokers pybroker --runs 1

The load follows RocketMQ's benchmark tool: 64 sender threads (plus 8 and 32), 128 B and 1 KiB
bodies, a batch producer, a consumer draining a backlog. Every run lasts ``--duration`` seconds
(60 by default) and its first ``--warmup`` seconds (10) are discarded: the load program opens a
measured window after the warm-up and the broker's processes are sampled at the window's edges
(CPU µs and context switches per message per process, PSS throughout); the consumer's
window opens after its first CONSUME_WARMUP_MESSAGES instead. Each (run, scenario,
broker) starts a fresh broker on an empty store; brokers take turns within a run so that the
figures of one ratio are minutes apart. The load programs are ours (tools/java_bench, on the
official 4.9.8 client jars: rocketmq-example is not on Maven Central) unless ``--apache-classes``
points at Apache's benchmark classes compiled from source (benchmarks/e2e/README.md).

Results: benchmarks/results/<timestamp>-<mode>.json; docs/benchmarks.md is regenerated from the
newest result of each mode. ``--quick`` also prints the change against the previous quick result
(the commit before). Everything started is stopped on exit, on exceptions and on signals.
"""
import argparse
import atexit
import dataclasses
import datetime
import json
import pathlib
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_brokers as bb  # noqa: E402
import bench_ha  # noqa: E402
import bench_load  # noqa: E402
import bench_report  # noqa: E402
import bench_sample  # noqa: E402
import java_rocketmq as jr  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
# Re-exported for benchmarks/e2e/bench_python_client.py.
LoadTools = bench_load.LoadTools
PRODUCER_CLASS = bench_load.PRODUCER_CLASS
CONSUMER_CLASS = bench_load.CONSUMER_CLASS
parse_result_line = bench_load.parse_result_line
BROKERS = ("pybroker", "java-4.9.8", "java-5.3.3")
CONSUMER_THREADS = 20            # Apache's Consumer default
BACKLOG_PRODUCER_THREADS = 64
BACKLOG_MESSAGES = 1_000_000     # consume scenario: the backlog the consumer drains
# Its warm-up is the first messages, not --warmup seconds: Java 4.9.8 drained the whole backlog
# within 10 s (no window left, 2026-12-04), so each broker gets the same messages to warm up on.
CONSUME_WARMUP_MESSAGES = 200_000
BACKLOG_TIMEOUT_S = 400          # bound on producing it (pybroker at 5k/s would take 200 s)
START_SLACK_S = 60.0             # JVM start, route lookup: beyond --duration before a kill


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One load: kind is produce | batch | consume; threads are sender (or consume) threads;
    batch is messages per request."""
    kind: str
    body_bytes: int
    threads: int
    flush: str
    batch: int = 1
    ha: str = ""          # "" one broker; ASYNC_MASTER / SYNC_MASTER: a master with a slave

    @property
    def name(self) -> str:
        flush = "sync" if self.flush == "SYNC_FLUSH" else "async"
        size = "1KiB" if self.body_bytes == 1024 else f"{self.body_bytes}B"
        threads = f"w{self.threads}" + (f"x{self.batch}" if self.batch > 1 else "")
        pair = f"-{self.ha.lower().replace('_', '')}" if self.ha else ""
        return f"{self.kind}-{size}-{threads}-{flush}{pair}"


def matrix(mode: str) -> list[Scenario]:
    """The scenarios of a mode (issue #9 item 6: Apache's defaults, 64 threads, plus 8, 32)."""
    produce_128 = Scenario("produce", 128, 64, "ASYNC_FLUSH")
    if mode == "profile":
        return [produce_128]
    if mode == "ha":
        # Issue #10 item 9: the pairs on one load; SYNC_MASTER's anchor is Java's own figure.
        return [Scenario("produce", 1024, 64, "ASYNC_FLUSH", ha="ASYNC_MASTER"),
                Scenario("produce", 1024, 64, "ASYNC_FLUSH", ha="SYNC_MASTER")]
    if mode == "quick":
        return [produce_128, Scenario("produce", 1024, 64, "ASYNC_FLUSH")]
    return [produce_128, Scenario("produce", 1024, 64, "ASYNC_FLUSH"),
            Scenario("produce", 128, 8, "ASYNC_FLUSH"),
            Scenario("produce", 128, 32, "ASYNC_FLUSH"),
            Scenario("produce", 128, 64, "SYNC_FLUSH"),
            Scenario("produce", 1024, 64, "SYNC_FLUSH"),
            Scenario("batch", 128, 64, "ASYNC_FLUSH", batch=16),
            Scenario("consume", 128, CONSUMER_THREADS, "ASYNC_FLUSH")]


@dataclasses.dataclass(frozen=True)
class Timing:
    duration_s: int      # whole load run, warm-up included
    warmup_s: int        # discarded at the start


def _load_argv(tools, scenario: Scenario, timing: Timing, namesrv: str, topic: str) -> list:
    """Command line of the measured load program (ours or Apache's)."""
    apache = tools.apache_classes is not None
    if scenario.kind == "consume":
        if apache:
            return tools.java_argv(bench_load.APACHE_PACKAGE + "Consumer", [
                "-n", namesrv, "-t", topic, "-g", f"cg_{topic}", "-w", scenario.threads])
        return tools.java_argv(CONSUMER_CLASS, [
            "-n", namesrv, "-t", topic, "-g", f"cg_{topic}", "-w", scenario.threads,
            "-q", BACKLOG_MESSAGES, "-T", timing.duration_s, "-M", CONSUME_WARMUP_MESSAGES])
    common = ["-n", namesrv, "-t", topic, "-w", scenario.threads, "-s", scenario.body_bytes]
    if scenario.kind == "batch":
        common += ["-b", scenario.batch]
    if apache:
        main = "BatchProducer" if scenario.kind == "batch" else "Producer"
        return tools.java_argv(bench_load.APACHE_PACKAGE + main, common, heap_mb=1024)
    return tools.java_argv(PRODUCER_CLASS, common + ["-T", timing.duration_s,
                                                     "-W", timing.warmup_s], heap_mb=1024)


def _fill_backlog(tools, scenario: Scenario, namesrv: str, topic: str) -> dict:
    """Produce the consume scenario's backlog (not measured); {} or {"error": ...}."""
    run = bb.run_bounded(tools.java_argv(PRODUCER_CLASS, [
        "-n", namesrv, "-t", topic, "-w", BACKLOG_PRODUCER_THREADS, "-s", scenario.body_bytes,
        "-q", BACKLOG_MESSAGES, "-T", BACKLOG_TIMEOUT_S - 20], heap_mb=1024),
        BACKLOG_TIMEOUT_S, cwd=tools.client.work_dir)
    result = parse_result_line(run.stdout)
    if result.get("messages_ok", 0) < BACKLOG_MESSAGES:
        return {"error": "backlog not produced: " + (run.stderr[-800:] or run.stdout[-800:])}
    return {"backlog_fill_tps": result.get("send_tps")}


class _Sampler:
    """Snapshots of the broker (by role) and the load program (role "load")."""

    def __init__(self, broker):
        self.broker = broker
        self.load_pid = 0
        self.snapshots: dict[str, dict] = {}

    def role_of(self, process) -> str:
        return "load" if process.pid == self.load_pid else self.broker.role_of(process)

    def on_event(self, name: str) -> None:
        roots = self.broker.root_pids() + ([self.load_pid] if self.load_pid else [])
        self.snapshots[name] = bench_sample.take(roots, self.role_of)

    def figures(self, messages: int) -> dict:
        before, after = self.snapshots["warmup_done"], self.snapshots["measure_end"]
        mine = {"broker": {}, "load": {}}
        for part in mine:
            keep = (lambda role: role == "load") if part == "load" else \
                (lambda role: role != "load")
            filtered = [dict(snapshot, processes={
                pid: p for pid, p in snapshot["processes"].items() if keep(p["role"])})
                for snapshot in (before, after)]
            mine[part] = bench_sample.window_figures(*filtered, messages)
        return mine


def _window_result(events, run, tools, sampler: _Sampler) -> dict:
    """TPS, RT and messages of the window from the program's result (or Apache's lines)."""
    if tools.apache_classes is None:
        result = parse_result_line(run.stdout)
        if not result:
            return {"error": run.stderr_tail[-800:] or run.stdout[-800:]}
        return {"tps": result["tps"], "window_messages": result["window_messages"],
                **{key: result.get(key) for key in (
                    "avg_rt_ms", "p50_rt_ms", "p99_rt_ms", "max_rt_ms", "send_failed",
                    "response_failed", "tps_per_second", "window_s", "complete")}}
    lines = events.apache_tps[1:]
    if not lines or "measure_end" not in sampler.snapshots:
        return {"error": "Apache tool printed fewer than 2 TPS lines:\n" + run.stdout[-800:]}
    window_s = sampler.snapshots["measure_end"]["time"] - \
        sampler.snapshots["warmup_done"]["time"]
    tps = statistics.fmean(lines)
    return {"tps": tps, "window_messages": int(tps * window_s), "tps_per_10s": lines,
            "avg_rt_ms": statistics.fmean(events.apache_avg_rt_ms[1:]),
            "window_s": round(window_s, 1)}


def measure(tools, broker, scenario: Scenario, timing: Timing, run_index: int) -> dict:
    """One load against a running broker: window figures, per-process costs, PSS."""
    topic = f"bench_{scenario.kind}_{scenario.body_bytes}_{run_index}_{int(time.time())}"
    bb.create_topic(broker, topic)
    record = {"scenario": scenario.name, "kind": scenario.kind, "broker": broker.name,
              "run": run_index, "flush": scenario.flush, "body_bytes": scenario.body_bytes,
              "threads": scenario.threads, "batch": scenario.batch,
              "load_tool": "apache" if tools.apache_classes else "java_bench"}
    if scenario.kind == "consume":
        record.update(_fill_backlog(tools, scenario, broker.namesrv_addr, topic))
        if "error" in record:
            return record
    sampler = _Sampler(broker)
    pss = bench_sample.PssWatcher(broker.root_pids(), broker.role_of).start()
    apache = tools.apache_classes is not None
    events = bench_load.WindowEvents(sampler.on_event, apache,
                                     apache_lines_max=max(2, timing.duration_s // 10))
    try:
        run = bench_load.run_streaming(
            _load_argv(tools, scenario, timing, broker.namesrv_addr, topic),
            timing.duration_s + START_SLACK_S, events, cwd=tools.client.work_dir,
            on_start=lambda pid: setattr(sampler, "load_pid", pid))
    finally:
        record.update(pss.stop())
    record.update(_window_result(events, run, tools, sampler))
    if scenario.kind == "consume":
        # Store-to-consume time of a backlog is its age, not a latency: not reported.
        for key in ("avg_rt_ms", "p50_rt_ms", "p99_rt_ms", "max_rt_ms"):
            record.pop(key, None)
    if "error" not in record and {"warmup_done", "measure_end"} <= set(sampler.snapshots):
        figures = sampler.figures(record["window_messages"])
        record.update(cpu=figures["broker"], load_cpu_us_per_msg=figures["load"]
                      ["cpu_us_per_msg"])
    elif "error" not in record:
        record["error"] = "the load program never opened or closed its window"
    return record


def _start_broker(name: str, work_dir: pathlib.Path, scenario: Scenario, installs: dict):
    conf = bb.shared_broker_conf(scenario.flush)
    if scenario.ha and name == "pybroker":
        return bench_ha.PyBrokerPair(work_dir, conf, scenario.ha).start()
    if scenario.ha:
        return bench_ha.JavaBrokerPair(work_dir, conf, installs[name], scenario.ha).start()
    if name == "pybroker":
        return bb.PyBroker(work_dir, conf).start()
    return bb.JavaBroker(work_dir, conf, installs[name]).start()


def run_matrix(args, tools, installs: dict, scenarios: list[Scenario], work_root) -> list:
    """For each run and scenario, every broker in turn, each fresh; returns the records."""
    records = []
    timing = Timing(args.duration, args.warmup)
    for run_index in range(args.runs):
        for scenario in scenarios:
            for name in args.brokers:
                work_dir = work_root / f"{name}-{scenario.name}-{run_index}"
                try:
                    broker = _start_broker(name, work_dir, scenario, installs)
                except jr.HarnessError as error:
                    record = {"scenario": scenario.name, "broker": name, "run": run_index,
                              "error": f"broker did not start: {error}"[-1500:]}
                else:
                    try:
                        record = measure(tools, broker, scenario, timing, run_index)
                    finally:
                        broker.stop()
                records.append(record)
                _progress(record)
                shutil.rmtree(work_dir, ignore_errors=True)
    return records


def _progress(record: dict) -> None:
    cpu = record.get("cpu") or {}
    parts = ", ".join(f"{role} {f['cpu_us_per_msg']:.1f}"
                      for role, f in (cpu.get("processes") or {}).items())
    sys.stderr.write(
        f"[bench] {record['broker']:10} run {record['run']} {record['scenario']:28} "
        f"tps {record.get('tps') or 0:9.0f} p99 {record.get('p99_rt_ms') or 0:7.2f} ms "
        f"cpu {cpu.get('cpu_us_per_msg', 0):6.1f} us/msg ({parts}) "
        f"ctx {cpu.get('ctx_per_msg', 0):5.2f}/msg pss {record.get('pss_peak_mib', 0):7.1f} MiB"
        f"{' ERROR ' + record['error'][-300:] if 'error' in record else ''}\n")


def _install_signal_handlers() -> None:
    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    # SIGINT too: a shell starts background jobs with SIGINT ignored, which Python inherits.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupt)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_const", dest="mode", const="quick",
                      help="produce 128 B and 1 KiB with 64 threads, 30 s runs, pybroker and "
                           "Java 4.9.8, 2 runs; compared with the previous quick result")
    mode.add_argument("--full", action="store_const", dest="mode", const="full",
                      help="the whole matrix against both Java versions, 60 s runs")
    mode.add_argument("--profile", action="store_const", dest="mode", const="profile",
                      help="one pybroker scenario under py-spy (installs py-spy): produce "
                      "128 B, or the first scenario of the full matrix --only picks")
    mode.add_argument("--ha", action="store_const", dest="mode", const="ha",
                      help="produce 1 KiB with 64 threads to a master with one slave, "
                           "ASYNC_MASTER and SYNC_MASTER, pybroker's pair and Java 4.9.8's")
    parser.add_argument("--brokers", default=None,
                        help=f"comma list of {','.join(BROKERS)} (default: per mode)")
    parser.add_argument("--runs", type=int, default=None, help="runs (default 3; quick 2)")
    parser.add_argument("--duration", type=int, default=None,
                        help="seconds per load run, warm-up included (default 60; quick 30)")
    parser.add_argument("--warmup", type=int, default=10, help="discarded seconds (10)")
    parser.add_argument("--apache-classes", type=pathlib.Path, default=None,
                        help="directory of Apache's compiled benchmark classes: use them as "
                             "the load instead of tools/java_bench")
    parser.add_argument("--work-dir", type=pathlib.Path, default=None,
                        help="stores and logs (default: a temporary directory, removed)")
    parser.add_argument("--only", default=None,
                        help="run only scenarios whose name contains these whole "
                             "dash-separated parts (w64, 1KiB-w64, syncmaster: not asyncmaster)")
    parser.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    parser.add_argument("--tag", default="", help="free text stored with the result")
    return parser


def _settle_args(args) -> None:
    args.mode = args.mode or "quick"
    quick = args.mode == "quick"
    short = quick or args.mode == "ha"
    default_brokers = "pybroker,java-4.9.8" if short else ",".join(BROKERS)
    args.brokers = [name.strip() for name in (args.brokers or default_brokers).split(",")
                    if name.strip()]
    args.runs = args.runs or (2 if quick else 3)
    args.duration = args.duration or (30 if short else 60)
    if not set(args.brokers) <= set(BROKERS) or not 1 <= args.runs <= 10:
        raise SystemExit(f"--brokers takes {','.join(BROKERS)}; --runs 1..10")
    if not 0 <= args.warmup < args.duration:
        raise SystemExit("--warmup must be below --duration")


def git_revision() -> str:
    """HEAD's short id, with "+dirty" when tracked files differ."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", "HEAD", "--",
                                "pybroker", "setup.py"], timeout=10).returncode
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def selected(name: str, only: str | None) -> bool:
    """``--only``: whole dash-separated parts of a scenario name ("syncmaster" does not pick
    "asyncmaster", "1KiB-w64" picks both parts in a row)."""
    return not only or f"-{only}-" in f"-{name}-"


def _run(args, installs: dict, work_root: pathlib.Path) -> tuple[list, list]:
    tools = LoadTools(work_root, installs["java-4.9.8"], apache_classes=args.apache_classes)
    if args.mode == "profile":
        import bench_profile
        picked = [s for s in matrix("full") if args.only and selected(s.name, args.only)]
        scenario = picked[0] if picked else matrix("profile")[0]
        summary = bench_profile.profile(tools, scenario, work_root, measure,
                                        Timing(args.duration, args.warmup))
        sys.stdout.write(json.dumps(summary, indent=1) + "\n")
        return [], []
    scenarios = [s for s in matrix(args.mode) if selected(s.name, args.only)]
    return run_matrix(args, tools, installs, scenarios, work_root), scenarios


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    _settle_args(args)
    _install_signal_handlers()
    atexit.register(bb.stop_all)
    installs = {}
    for name in {"java-4.9.8", *args.brokers} - {"pybroker"}:
        installs[name] = jr.RocketMQInstall(name.split("-", 1)[1])
        installs[name].install()
    keep = args.work_dir is not None
    work_root = args.work_dir or pathlib.Path(tempfile.mkdtemp(prefix="pybroker-bench-"))
    work_root.mkdir(parents=True, exist_ok=True)
    started = time.time()
    try:
        records, scenarios = _run(args, installs, work_root)
    except KeyboardInterrupt:
        sys.stderr.write("[bench] interrupted; stopping everything\n")
        return 130
    finally:
        bb.stop_all()
        if not keep:
            shutil.rmtree(work_root, ignore_errors=True)
    if not records:
        return 0
    result = bench_report.build_result(args, records, scenarios, started, git_revision())
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.fromtimestamp(started).strftime("%Y%m%dT%H%M%S")
    path = RESULTS_DIR / f"{stamp}-{args.mode}.json"
    previous = bench_report.previous_result(RESULTS_DIR, result["mode"], path)
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if not args.no_docs:
        bench_report.write_docs(RESULTS_DIR, ROOT / "docs" / "benchmarks.md")
    text = bench_report.summary_text(result)
    if previous is not None:
        text += "\n\n" + bench_report.compare_text(previous, result)
    sys.stdout.write(text + f"\nresults: {path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
