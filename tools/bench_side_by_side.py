# End-to-end benchmark driver: the same load against pybroker and Java RocketMQ, side by side.
"""Run RocketMQ-benchmark-style loads against pybroker and Java RocketMQ with one broker.conf.

    python tools/bench_side_by_side.py --quick                 # < 3 min, both brokers
    python tools/bench_side_by_side.py --full --runs 3         # the whole matrix, < 20 min
    python tools/bench_side_by_side.py --profile               # one pybroker scenario, py-spy
    python tools/bench_side_by_side.py --quick --brokers pybroker --runs 1

The load programs are ours (tools/java_bench/*.java, compiled here against the pinned Java
client jars) because org.apache.rocketmq:rocketmq-example is not published on Maven Central;
they take the official tool's flags and print its statistics. The Go client (rmqgo, v2.1.2) is a
second, independent producer. Each (run, broker) pair starts a fresh broker on a fresh store,
runs its scenarios one after another, and stops it; runs alternate brokers so that ratios are
measured back to back. Results: benchmarks/results/<timestamp>.json; docs/benchmarks.md is
regenerated from the newest result of each mode. Everything started is stopped on exit, on
exceptions and on SIGINT/SIGTERM.
"""
import argparse
import atexit
import dataclasses
import datetime
import json
import pathlib
import shutil
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_brokers as bb  # noqa: E402
import bench_report  # noqa: E402
import java_rocketmq as jr  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
JAVA_BENCH_DIR = ROOT / "tools" / "java_bench"
RESULTS_DIR = ROOT / "benchmarks" / "results"
PRODUCER_CLASS = "BenchProducer"
CONSUMER_CLASS = "BenchConsumer"
TRANSACTION_CLASS = "BenchTransactionProducer"
LOAD_TIMEOUT_S = 150.0          # hard bound on one load program
# Threads for a 2-core box shared by broker and load: enough in-flight requests to keep a broker
# busy, few enough that the client JVM does not starve it.
PRODUCER_THREADS = 8
BATCH_THREADS = 4
BATCH_SIZE = 32
CONSUMER_THREADS = 4
GO_INFLIGHT = 8


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One load: kind is produce | produce_consume | batch | transaction | go_produce;
    messages per run."""
    kind: str
    body_bytes: int
    messages: int
    flush: str

    @property
    def name(self) -> str:
        flush = "sync" if self.flush == "SYNC_FLUSH" else "async"
        size = "1KiB" if self.body_bytes == 1024 else f"{self.body_bytes}B"
        return f"{self.kind}-{size}-flush-{flush}"


def matrix(mode: str, with_go: bool) -> list[Scenario]:
    """The scenarios of a mode (message counts sized so pybroker runs take seconds)."""
    if mode in ("quick", "profile"):
        scenarios = [Scenario("produce", 128, 15000, "ASYNC_FLUSH"),
                     Scenario("produce_consume", 128, 15000, "ASYNC_FLUSH"),
                     Scenario("batch", 128, 30000, "ASYNC_FLUSH")]
        return scenarios[:1] if mode == "profile" else scenarios
    scenarios = []
    for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        for size in (128, 1024):
            scenarios += [Scenario("produce", size, 25000, flush),
                          Scenario("produce_consume", size, 25000, flush),
                          Scenario("batch", size, 50000, flush)]
    scenarios.append(Scenario("transaction", 128, 10000, "ASYNC_FLUSH"))
    if with_go:
        scenarios += [Scenario("go_produce", 128, 20000, "ASYNC_FLUSH"),
                      Scenario("go_produce", 1024, 20000, "ASYNC_FLUSH")]
    return scenarios


def parse_result_line(stdout: str) -> dict:
    """The JSON of the last "BENCH_RESULT {...}" line, or {} when there is none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("BENCH_RESULT "):
            return json.loads(line[len("BENCH_RESULT "):])
    return {}


class LoadTools:
    """Compiled Java load programs, a client-side harness for JVM flags, and rmqgo."""

    def __init__(self, work_dir: pathlib.Path, install: jr.RocketMQInstall, with_go: bool):
        self.client = jr.JavaRocketMQ(work_dir / "client", install=install)
        self.client.write_files()
        self.classes = jr.compile_java(install, sorted(JAVA_BENCH_DIR.glob("*.java")),
                                       work_dir / "classes")
        self.rmqgo = None
        if with_go:
            import go_client
            self.rmqgo = go_client.build_go_client().path

    def java_argv(self, main_class: str, args: list) -> list[str]:
        argv = self.client.client_argv(main_class, args, extra_classpath=[self.classes],
                                       heap_mb=256)
        # The client harness limits the JIT for short tools; a load generator wants C2.
        return [arg for arg in argv if arg != "-XX:TieredStopAtLevel=1"]

    def run_java(self, main_class: str, args: list) -> tuple[dict, jr.JavaRun]:
        run = bb.run_bounded(self.java_argv(main_class, args), LOAD_TIMEOUT_S,
                             cwd=self.client.work_dir)
        return parse_result_line(run.stdout), run


def _producer_args(scenario: Scenario, namesrv: str, topic: str) -> list:
    args = ["-n", namesrv, "-t", topic, "-s", scenario.body_bytes, "-q", scenario.messages,
            "-T", int(LOAD_TIMEOUT_S - 30)]
    if scenario.kind == "batch":
        return args + ["-w", BATCH_THREADS, "-b", BATCH_SIZE]
    return args + ["-w", PRODUCER_THREADS]


def run_java_load(tools: LoadTools, scenario: Scenario, namesrv: str, topic: str) -> dict:
    """Producer (and, for produce_consume, a consumer started first) to completion."""
    consumer: dict = {}
    thread = None
    if scenario.kind == "produce_consume":
        consumer_args = ["-n", namesrv, "-t", topic, "-g", f"cg_{topic}", "-w",
                         CONSUMER_THREADS, "-q", scenario.messages, "-T",
                         int(LOAD_TIMEOUT_S - 20)]

        def consume():
            result, run = tools.run_java(CONSUMER_CLASS, consumer_args)
            consumer.update(result or {"error": run.stderr[-1500:] or run.stdout[-1500:]})
        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
    main_class = TRANSACTION_CLASS if scenario.kind == "transaction" else PRODUCER_CLASS
    result, run = tools.run_java(main_class, _producer_args(scenario, namesrv, topic))
    if not result:
        result = {"error": (run.stderr[-1500:] or run.stdout[-1500:]), "timed_out":
                  run.timed_out}
    if thread is not None:
        thread.join(LOAD_TIMEOUT_S + 30)
        result["consumer"] = consumer
    return result


def run_go_load(tools: LoadTools, scenario: Scenario, namesrv: str, topic: str) -> dict:
    """rmqgo send in async mode with GO_INFLIGHT requests in flight; RT from its records."""
    argv = [str(tools.rmqgo), "send", "--namesrv", namesrv, "--topic", topic,
            "--count", str(scenario.messages), "--mode", "async", "--inflight",
            str(GO_INFLIGHT), "--body-size", str(scenario.body_bytes), "--timeout",
            f"{int(LOAD_TIMEOUT_S - 30)}s", "--log-level", "error"]
    run = bb.run_bounded(argv, LOAD_TIMEOUT_S)
    rts_us, summary = [], {}
    for line in run.stdout.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("type") == "send" and record.get("status") == "SEND_OK":
            rts_us.append(record["elapsedUs"])
        elif record.get("type") == "summary":
            summary = record
    if not summary:
        return {"error": run.stderr[-1500:], "timed_out": run.timed_out}
    rts_us.sort()
    elapsed_s = max(summary["elapsedMs"], 1) / 1000
    count = len(rts_us)
    return {"messages_ok": summary["acked"], "elapsed_s": elapsed_s,
            "send_tps": summary["acked"] / elapsed_s,
            "avg_rt_ms": sum(rts_us) / count / 1000 if count else 0.0,
            "p99_rt_ms": rts_us[min(count - 1, int(count * 0.99))] / 1000 if count else 0.0,
            "max_rt_ms": rts_us[-1] / 1000 if count else 0.0,
            "send_failed": summary["failedRequests"], "response_failed": 0,
            "threads": GO_INFLIGHT, "async": True}


def run_scenario(tools: LoadTools, broker, scenario: Scenario, run_index: int) -> dict:
    """One load against a running broker, with the broker's process tree sampled meanwhile."""
    topic = f"bench_{scenario.kind}_{scenario.body_bytes}_{run_index}_{int(time.time())}"
    bb.create_topic(broker, topic)
    sampler = bb.TreeSampler(broker.root_pids()).start()
    started = time.monotonic()
    try:
        if scenario.kind == "go_produce":
            load = run_go_load(tools, scenario, broker.namesrv_addr, topic)
        else:
            load = run_java_load(tools, scenario, broker.namesrv_addr, topic)
    finally:
        resources = sampler.stop()
    record = {"scenario": scenario.name, "kind": scenario.kind, "broker": broker.name,
              "run": run_index, "flush": scenario.flush, "body_bytes": scenario.body_bytes,
              "messages": scenario.messages, "wall_s": round(time.monotonic() - started, 2),
              **resources, **load}
    ok = record.get("messages_ok", 0)
    record["cpu_s_per_100k"] = round(record["broker_cpu_s"] * 100000 / ok, 2) if ok else None
    return record


def _start_broker(name: str, work_dir: pathlib.Path, flush: str, install):
    conf = bb.shared_broker_conf(flush)
    if name == "pybroker":
        return bb.PyBroker(work_dir, conf).start()
    return bb.JavaBroker(work_dir, conf, install).start()


def run_matrix(args, tools: LoadTools, install, scenarios: list[Scenario], work_root) -> list:
    """For each flush mode and run: each broker fresh, all its scenarios; returns records."""
    records = []
    flushes = sorted({scenario.flush for scenario in scenarios})
    for flush in flushes:
        for run_index in range(args.runs):
            for name in args.brokers:
                work_dir = work_root / f"{name}-{flush}-{run_index}"
                broker = _start_broker(name, work_dir, flush, install)
                try:
                    for scenario in (s for s in scenarios if s.flush == flush):
                        record = run_scenario(tools, broker, scenario, run_index)
                        records.append(record)
                        _progress(record)
                finally:
                    broker.stop()
                    shutil.rmtree(work_dir / "store", ignore_errors=True)
    return records


def _progress(record: dict) -> None:
    consumer = record.get("consumer") or {}
    sys.stderr.write(
        f"[bench] {record['broker']:8} run {record['run']} {record['scenario']:34} "
        f"send {record.get('send_tps', 0):9.0f}/s consume {consumer.get('consume_tps', 0):8.0f}/s"
        f" avg {record.get('avg_rt_ms', 0):7.2f} ms max {record.get('max_rt_ms', 0):8.1f} ms "
        f"fail {record.get('send_failed', '?')}/{record.get('response_failed', '?')} "
        f"cpu {record['broker_cpu_s']:6.1f} s rss {record['peak_rss_mib']:7.1f} MiB"
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
                      help="3 scenarios, 128 B, async flush (default mode)")
    mode.add_argument("--full", action="store_const", dest="mode", const="full",
                      help="128 B and 1 KiB, async and sync flush, produce / consume / batch "
                           "and the Go producer")
    mode.add_argument("--profile", action="store_const", dest="mode", const="profile",
                      help="one pybroker scenario under py-spy (installs py-spy)")
    parser.add_argument("--brokers", default="pybroker,java",
                        help="comma list of pybroker,java (default both)")
    parser.add_argument("--runs", type=int, default=3, help="runs per scenario and broker")
    parser.add_argument("--java-version", default=jr.DEFAULT_VERSION, choices=jr.VERSIONS)
    parser.add_argument("--no-go", action="store_true", help="skip the Go producer (--full)")
    parser.add_argument("--work-dir", type=pathlib.Path, default=None,
                        help="stores and logs (default: a temporary directory, removed)")
    parser.add_argument("--only", default=None,
                        help="run only scenarios whose name contains this text")
    parser.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    args.mode = args.mode or "quick"
    args.brokers = [name.strip() for name in args.brokers.split(",") if name.strip()]
    if not set(args.brokers) <= {"pybroker", "java"} or not 1 <= args.runs <= 10:
        raise SystemExit("--brokers takes pybroker,java; --runs 1..10")
    _install_signal_handlers()
    atexit.register(bb.stop_all)
    install = jr.RocketMQInstall(args.java_version)
    install.install()
    keep = args.work_dir is not None
    work_root = args.work_dir or pathlib.Path(tempfile.mkdtemp(prefix="pybroker-bench-"))
    work_root.mkdir(parents=True, exist_ok=True)
    started = time.time()
    try:
        if args.mode == "profile":
            import bench_profile
            tools = LoadTools(work_root, install, with_go=False)
            summary = bench_profile.profile(tools, matrix("profile", False)[0], work_root,
                                            run_scenario)
            sys.stdout.write(json.dumps(summary, indent=1) + "\n")
            return 0
        with_go = args.mode == "full" and not args.no_go
        tools = LoadTools(work_root, install, with_go)
        scenarios = [s for s in matrix(args.mode, with_go) if (args.only or "") in s.name]
        records = run_matrix(args, tools, install, scenarios, work_root)
    except KeyboardInterrupt:
        sys.stderr.write("[bench] interrupted; stopping everything\n")
        return 130
    finally:
        bb.stop_all()
        if not keep:
            shutil.rmtree(work_root, ignore_errors=True)
    result = bench_report.build_result(args, install, records, scenarios, started)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.fromtimestamp(started).strftime("%Y%m%dT%H%M%S")
    path = RESULTS_DIR / f"{stamp}-{args.mode}.json"
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if not args.no_docs:
        bench_report.write_docs(RESULTS_DIR, ROOT / "docs" / "benchmarks.md")
    sys.stdout.write(bench_report.summary_text(result) + f"\nresults: {path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
