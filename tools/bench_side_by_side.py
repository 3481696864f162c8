# End-to-end benchmark driver: the same load against pybroker and Java RocketMQ, side by side.
"""Run RocketMQ-benchmark-style loads against pybroker and Java RocketMQ with one broker.conf.

    python tools/bench_side_by_side.py --quick            # 2 scenarios, pybroker + Java 4.9.8
    python tools/bench_side_by_side.py --full             # the matrix (+ Java 4.9.8/5.3.3), 40 min
    python tools/bench_side_by_side.py --profile          # one pybroker scenario under py-spy
    python tools/bench_side_by_side.py --ha               # master+slave pairs, ASYNC/SYNC_MASTER
    python tools/bench_side_by_side.py --pop              # POP consume TPS, POP-ACK round trip
    python tools/bench_side_by_side.py --full --only w64 --brokers pybroker --runs 1
    python tools/bench_side_by_side.py --quick --apache rocketmq-all-4.9.8   # Apache's classes
    python tools/bench_side_by_side.py --full --only w8 --brokers pybroker,floor --runs 1

The pybroker that runs is the one installed (README: ``python3 -m pip install .``):
``sys.executable -m pybroker``, else the ``pybroker`` on PATH, started from outside the source
tree, or ``--pybroker CMD``; without one the tool says in one line what to install. It fails
fast: a broker that does not start, dies, or a load that reports failed sends stops the run
at once with the reason in one line and exit status 1 (``--keep-going`` records and goes on);
what was measured until then is written as a partial result.

The load follows RocketMQ's benchmark tool: 64 sender threads (plus 8 and 32), 128 B and 1 KiB
bodies, a batch producer, a consumer draining a backlog. Every run lasts ``--duration`` seconds
(60 by default; ``--full`` plans it: the longest load that lets the whole matrix finish within
``--budget`` minutes, 40, which is 25 s loads with an 8 s warm-up for 8 scenarios x 3 brokers x
3 runs) and its first ``--warmup`` seconds (10) are discarded: the load program opens a
measured window after the warm-up and the broker's processes are sampled at the window's edges
(CPU µs and context switches per message per process, PSS throughout); the consumer's
window opens after its first CONSUME_WARMUP_MESSAGES instead. Each (run, scenario,
broker) starts a fresh broker on an empty store; brokers take turns within a run so that the
figures of one ratio are minutes apart. The load programs are the project's (tools/java_bench,
on the official 4.9.8 client jars: rocketmq-example is not on Maven Central) unless ``--apache
TAG`` names Apache's benchmark classes built by tools/apache_bench.py (or ``--apache-classes
DIR`` another build of them); the output says which load ran.

Results: benchmarks/results/<timestamp>-<mode>.json (``-partial`` when stopped early) naming
the load, the brokers' versions, the box (cores, load average before each run) and the commit;
docs/benchmarks.md is regenerated from the newest complete result of each mode. ``--quick``
also prints the change against the previous quick result (the commit before). Everything
started is stopped on exit, on exceptions and on signals.

``--brokers ...,floor`` adds tools/remoting_floor.py's floor as a broker column: a C server that
answers every send at once and stores nothing, with pybroker's NameServer; what the load program
reaches against it is the ceiling of any broker on this box. It runs the produce and batch
scenarios only (the others say once that they skip it); pybroker / floor ratios carry no goal.
"""
import argparse
import atexit
import dataclasses
import datetime
import json
import os
import pathlib
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

try:
    import psutil  # noqa: F401  (pybroker's dependency: the samplers read processes with it)
except ImportError:
    sys.exit(f"bench_side_by_side: pybroker is not installed for {sys.executable} (psutil "
             f"missing): install it with python3 -m pip install . (README's install, from the "
             f"clone)")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import apache_bench  # noqa: E402
import bench_brokers as bb  # noqa: E402
import bench_ha  # noqa: E402
import bench_load  # noqa: E402
import bench_report  # noqa: E402
import bench_sample  # noqa: E402
import bench_timer  # noqa: E402
import java_rocketmq as jr  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
# Re-exported for benchmarks/e2e/bench_python_client.py.
LoadTools = bench_load.LoadTools
PRODUCER_CLASS = bench_load.PRODUCER_CLASS
CONSUMER_CLASS = bench_load.CONSUMER_CLASS
TRANSACTION_CLASS = "BenchTransactionProducer"
parse_result_line = bench_load.parse_result_line
BROKERS = ("pybroker", "java-4.9.8", "java-5.3.3", "java-5.5.1", "floor")
# "floor" (tools/remoting_floor.py): the cheapest server a send load can hit, the load program's
# ceiling on this box; it answers sends only, so it runs these kinds of one broker and no other.
FLOOR_KINDS = ("produce", "batch")
CONSUMER_THREADS = 20            # Apache's Consumer default
BACKLOG_PRODUCER_THREADS = 64
BACKLOG_MESSAGES = 1_000_000     # consume scenario: the backlog the consumer drains
# Apache's Consumer reports every 10 s; its first report must cover a busy 10 s on the fastest
# broker (Java 5.3.3 drained 310,653 msg/s), so its backlog is larger (the figure of issue #28).
APACHE_BACKLOG_MESSAGES = 5_000_000
BACKLOG_BATCH = 16               # the backlog is sent in batches: fast, and not measured
# Its warm-up is the first messages, not --warmup seconds: Java 4.9.8 drained the whole backlog
# within 10 s (no window left, 2026-12-04), so each broker gets the same messages to warm up on.
CONSUME_WARMUP_MESSAGES = 200_000
# --pop (5.x POP, pybroker and Java 5.3.3, the 5.3.3 client): the push consumer in POP mode
# (clientRebalance=false on a broker whose defaultMessageRequestMode is POP) draining the
# backlog, and one thread's POP-then-ACK round trips over a backlog of their own.
POP_KINDS = ("popconsume", "popack")
POP_ACK_BACKLOG_MESSAGES = 200_000
POP_CONSUME_WARMUP_MESSAGES = 20_000    # not measured (a slow POP broker never reaches 200,000)
BACKLOG_TIMEOUT_S = 400          # bound on producing it (pybroker at 5k/s would take 200 s)
START_SLACK_S = 60.0             # JVM start, route lookup: beyond --duration before a kill
# The --full plan (issue #28 item 7: the matrix in 40 minutes on this 2-core box). A load's wall
# time is --duration plus its broker's start, topic, load JVM and stop, plus the backlog a
# consume load produces first (Apache's Consumer drains 5x more). Measured on the whole matrix
# with Apache's classes (20261206T055421-full.json, the Java brokers killed after the load):
# median beyond --duration pybroker 1.7 s, Java 4.9.8 3.8 s, 5.3.3 6.1 s; consume loads up to
# 15 / 24 / 36 s; 32 minutes for a plan that said 39.5. Each record keeps its "elapsed_s".
FULL_BUDGET_MIN = 40
LOAD_OVERHEAD_S = {"pybroker": 2, "java-4.9.8": 4, "java-5.3.3": 7, "java-5.5.1": 7,
                   "floor": 2}
BACKLOG_EXTRA_S = 12             # a consume load's backlog, project's load (1,000,000)
APACHE_BACKLOG_EXTRA_S = 30      # Apache's Consumer's backlog (5,000,000)
PLAN_DURATIONS_S = (60, 50, 40, 35, 30, 25, 20)    # longest first; 20 s: a 14 s window
FIRST_FAILURE = "BENCH_FIRST_FAILURE "   # tools/java_bench: the first failed send, one line
APACHE_CONSUMER_STARTED = "Consumer Started."   # Apache's Consumer, after consumer.start()


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
        size = f"{self.body_bytes // 1024}KiB" if self.body_bytes % 1024 == 0 else \
            f"{self.body_bytes}B"
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
    if mode == "transaction":
        # Apache's TransactionProducer defaults: 32 threads, 2 KiB, every transaction commits.
        return [Scenario("transaction", 2048, 32, "ASYNC_FLUSH")]
    if mode == "timer":
        # Apache's TimerProducer defaults: 16 threads, 1 KiB (tools/bench_timer.py).
        return [Scenario("timer", 1024, 16, "ASYNC_FLUSH")]
    if mode == "pop":
        return [Scenario("popconsume", 128, CONSUMER_THREADS, "ASYNC_FLUSH"),
                Scenario("popack", 128, 1, "ASYNC_FLUSH")]
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
    backlog: int = 0     # messages the consume scenario drains (0: the load's default)

    def backlog_for(self, apache: bool, kind: str = "consume") -> int:
        if kind == "popack":
            return self.backlog or POP_ACK_BACKLOG_MESSAGES
        return self.backlog or (APACHE_BACKLOG_MESSAGES if apache else BACKLOG_MESSAGES)


def _load_argv(tools, scenario: Scenario, timing: Timing, namesrv: str, topic: str) -> list:
    """Command line of the measured load program (ours or Apache's)."""
    apache = tools.apache_classes is not None
    if scenario.kind == "popack":
        return tools.java_argv(bench_load.POP_ACK_CLASS, [
            "-n", namesrv, "-t", topic, "-g", f"cg_{topic}", "-w", scenario.threads,
            "-T", timing.duration_s, "-W", timing.warmup_s])
    if scenario.kind in ("consume", "popconsume"):
        if apache:
            return tools.java_argv(bench_load.APACHE_PACKAGE + "Consumer", [
                "-n", namesrv, "-t", topic, "-g", f"cg_{topic}", "-w", scenario.threads])
        return tools.java_argv(CONSUMER_CLASS, [
            "-n", namesrv, "-t", topic, "-g", f"cg_{topic}", "-w", scenario.threads,
            "-q", timing.backlog_for(False), "-T", timing.duration_s,
            "-M", POP_CONSUME_WARMUP_MESSAGES if scenario.kind == "popconsume"
            else CONSUME_WARMUP_MESSAGES, "-P", str(scenario.kind == "popconsume").lower()])
    common = ["-n", namesrv, "-t", topic, "-w", scenario.threads, "-s", scenario.body_bytes]
    if scenario.kind == "batch":
        common += ["-b", scenario.batch]
    if apache:
        main = {"batch": "BatchProducer", "transaction": "TransactionProducer"}.get(
            scenario.kind, "Producer")
        return tools.java_argv(bench_load.APACHE_PACKAGE + main, common, heap_mb=1024)
    main = TRANSACTION_CLASS if scenario.kind == "transaction" else PRODUCER_CLASS
    return tools.java_argv(main, common + ["-T", timing.duration_s, "-W", timing.warmup_s],
                           heap_mb=1024)


def _fill_backlog(tools, scenario: Scenario, namesrv: str, topic: str, count: int) -> dict:
    """Produce the consume scenario's backlog of count messages in batches (not measured); {}
    or {"error": ...}."""
    timeout_s = max(BACKLOG_TIMEOUT_S, count / 10_000 + 100)
    run = bb.run_bounded(tools.java_argv(PRODUCER_CLASS, [
        "-n", namesrv, "-t", topic, "-w", BACKLOG_PRODUCER_THREADS, "-s", scenario.body_bytes,
        "-b", BACKLOG_BATCH, "-q", count, "-T", int(timeout_s - 20)], heap_mb=1024),
        timeout_s, cwd=tools.client.work_dir)
    result = parse_result_line(run.stdout)
    if result.get("messages_ok", 0) < count:
        return {"error": f"backlog of {count} not produced (exit {run.returncode})\n"
                         + (run.stderr[-1500:] or run.stdout[-800:])}
    return {"backlog": count, "backlog_fill_tps": result.get("send_tps")}


class _Sampler:
    """Snapshots of the broker (by role) and the load program (role "load")."""

    def __init__(self, broker):
        self.broker = broker
        self.load_pid = 0
        self.snapshots: dict[str, dict] = {}
        self.history: dict[str, list] = {}     # every snapshot of each event, in order

    def role_of(self, process) -> str:
        return "load" if process.pid == self.load_pid else self.broker.role_of(process)

    def on_event(self, name: str) -> None:
        roots = self.broker.root_pids() + ([self.load_pid] if self.load_pid else [])
        self.snapshots[name] = bench_sample.take(roots, self.role_of)
        self.history.setdefault(name, []).append(self.snapshots[name])

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


def _apache_window(events, run, scenario: Scenario, sampler: _Sampler) -> dict:
    """TPS and window of Apache's periodic lines. Producers: the first line ends the warm-up,
    the later ones are measured. Consumer: the window opens at "Consumer Started." and every
    line is measured, but the last busy one before a 0 line is dropped (the backlog drained
    inside its 10 s)."""
    consume = scenario.kind == "consume"
    start = 0 if consume else 1
    stop = len(events.apache_tps) - (1 if consume and events.drained else 0)
    lines, rts = events.apache_tps[start:stop], events.apache_avg_rt_ms[start:stop]
    ends = sampler.history.get("measure_end", [])[:len(lines)]    # one per measured line
    if not lines or not ends or "warmup_done" not in sampler.snapshots:
        drained = " (the backlog drained within it: raise --backlog)" \
            if consume and events.drained else ""
        return {"error": f"Apache's tool printed {len(events.apache_tps)} TPS lines, none of "
                         f"them a full measured period{drained} (exit {run.returncode})\n"
                         f"{run.stderr_tail[-1500:]}\n{run.stdout[-800:]}"}
    sampler.snapshots["measure_end"] = ends[-1]
    window_s = ends[-1]["time"] - sampler.snapshots["warmup_done"]["time"]
    tps = statistics.fmean(lines)
    if tps <= 0:
        return {"error": "Apache's tool reported 0 TPS in its measured lines"}
    return {"tps": tps, "window_messages": int(tps * window_s), "tps_per_10s": lines,
            "avg_rt_ms": statistics.fmean(rts), "window_s": round(window_s, 1),
            "failed": events.apache_failed,
            "first_failure": next((line.strip() for line in run.stdout_lines
                                   + run.stderr_tail.splitlines() if "Exception" in line),
                                  None) if events.apache_failed else None}


def _window_result(events, run, tools, scenario: Scenario, sampler: _Sampler) -> dict:
    """TPS, RT and messages of the window from the program's result (or Apache's lines)."""
    if tools.apache_classes is not None:
        return _apache_window(events, run, scenario, sampler)
    first_failure = next((line[len(FIRST_FAILURE):] for line in run.stdout_lines
                          if line.startswith(FIRST_FAILURE)), None)
    result = parse_result_line(run.stdout)
    if not result:
        return {"error": f"the load program gave no result (exit {run.returncode})\n"
                         + (run.stderr_tail[-1500:] or run.stdout[-800:])}
    return {"tps": result["tps"], "window_messages": result["window_messages"],
            "first_failure": first_failure,
            **{key: result.get(key) for key in (
                "avg_rt_ms", "p50_rt_ms", "p99_rt_ms", "max_rt_ms", "send_failed",
                "response_failed", "tps_per_second", "window_s", "complete")},
            **{key: result[key] for key in ("pop_queues", "pops_empty", "pop_p99_ms",
                                            "ack_p99_ms", "failed") if key in result}}


def measure(tools, broker, scenario: Scenario, timing: Timing, run_index: int) -> dict:
    """One load against a running broker: window figures, per-process costs, PSS."""
    topic = f"bench_{scenario.kind}_{scenario.body_bytes}_{run_index}_{int(time.time())}"
    bb.create_topic(broker, topic)
    record = {"scenario": scenario.name, "kind": scenario.kind, "broker": broker.name,
              "run": run_index, "flush": scenario.flush, "body_bytes": scenario.body_bytes,
              "threads": scenario.threads, "batch": scenario.batch,
              "load_tool": "apache" if tools.apache_classes else "java_bench"}
    apache = tools.apache_classes is not None
    if scenario.kind in ("consume", *POP_KINDS):
        record.update(_fill_backlog(tools, scenario, broker.namesrv_addr, topic,
                                    timing.backlog_for(apache, scenario.kind)))
        if "error" in record:
            return record
    sampler = _Sampler(broker)
    pss = bench_sample.PssWatcher(broker.root_pids(), broker.role_of).start()
    events = bench_load.WindowEvents(
        sampler.on_event, apache, apache_lines_max=max(2, timing.duration_s // 10),
        apache_opens_at=APACHE_CONSUMER_STARTED if scenario.kind == "consume" else None)
    try:
        run = bench_load.run_streaming(
            _load_argv(tools, scenario, timing, broker.namesrv_addr, topic),
            timing.duration_s + START_SLACK_S, events, cwd=tools.client.work_dir,
            on_start=lambda pid: setattr(sampler, "load_pid", pid))
    finally:
        record.update(pss.stop())
    record.update(_window_result(events, run, tools, scenario, sampler))
    exited = broker.exited()
    if exited:
        record["error"] = exited
    elif scenario.kind == "popconsume" and not record.get("pop_queues"):
        record["error"] = "the consumer got no POP queue: the broker's QUERY_ASSIGNMENT " \
                          "did not answer POP"
    elif record.get("failed"):
        record["error"] = f"{record['failed']} POP-ACK round trips failed"
    if scenario.kind in ("consume", "popconsume"):
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


def runs_on(name: str, scenario: Scenario) -> bool:
    """Whether broker ``name`` takes part in ``scenario`` (the floor: one broker's sends)."""
    return name != "floor" or (scenario.kind in FLOOR_KINDS and not scenario.ha)


def _start_broker(name: str, work_dir: pathlib.Path, scenario: Scenario, installs: dict,
                  settings=()):
    conf = dict(bb.shared_broker_conf(scenario.flush), **dict(settings))
    if name == "floor":
        import remoting_floor
        return remoting_floor.FloorBroker(work_dir, conf, installs["floor"]).start()
    if scenario.kind in POP_KINDS:
        conf["defaultMessageRequestMode"] = "POP"
    if scenario.kind == "timer":
        port = bench_timer.NAMESRV_PORT
        if name == "pybroker":
            return bb.PyBroker(work_dir, conf, namesrv_port=port).start()
        return bb.JavaBroker(work_dir, conf, installs[name], namesrv_port=port).start()
    if scenario.ha and name == "pybroker":
        return bench_ha.PyBrokerPair(work_dir, conf, scenario.ha).start()
    if scenario.ha:
        return bench_ha.JavaBrokerPair(work_dir, conf, installs[name], scenario.ha).start()
    if name == "pybroker":
        return bb.PyBroker(work_dir, conf).start()
    return bb.JavaBroker(work_dir, conf, installs[name]).start()


class Stop(Exception):
    """The run cannot go on; str() is the reason, one line."""


def failure(record: dict) -> str | None:
    """Why a record stops the run (one line), or None: an error (the broker did not start or
    died, the load program failed) or failures the load reported."""
    where = f"{record['broker']} {record['scenario']} run {record['run']}"
    if "error" in record:
        return f"{where}: {bb.one_line(record['error'])}"
    failed = {key: record.get(key) or 0 for key in ("send_failed", "response_failed", "failed")}
    if any(failed.values()):
        parts = ", ".join(f"{key.replace('_', ' ')} {count}" for key, count in failed.items()
                          if count)
        first = record.get("first_failure")
        return f"{where}: the load reported failures ({parts})" + (f"; the first: {first}"
                                                                   if first else "")
    return None


def _measure_one(args, tools, installs, scenario, run_index, name, work_dir, timing) -> dict:
    """Start a fresh broker, run one load against it, stop it; the record (with "error")."""
    load_before = [round(value, 2) for value in os.getloadavg()]
    began = time.monotonic()
    try:
        broker = _start_broker(name, work_dir, scenario, installs, args.set)
    except jr.HarnessError as error:
        text = f"did not start: {error}"
        head, _, rest = text.partition("\n")
        record = {"scenario": scenario.name, "broker": name, "run": run_index,
                  "error": head + "\n" + rest[-3000:]}      # the log's end holds the cause
    else:
        try:
            record = bench_timer.measure(tools, broker, scenario, run_index) \
                if scenario.kind == "timer" else measure(tools, broker, scenario, timing,
                                                         run_index)
        finally:
            broker.stop()
    record["load_before"] = load_before
    record["elapsed_s"] = round(time.monotonic() - began, 1)   # start to stop: the plan's input
    return record


def run_matrix(args, tools, installs: dict, scenarios: list[Scenario], work_root,
               records: list) -> None:
    """For each run and scenario, every broker in turn, each fresh; appends to records. The
    first failure raises Stop (its broker's folder is kept) unless --keep-going."""
    timing = Timing(args.duration, args.warmup, args.backlog)
    skipped = [s.name for s in scenarios if not all(runs_on(name, s) for name in args.brokers)]
    if skipped:
        sys.stderr.write(f"[bench] floor: skipped for {', '.join(skipped)} (it answers one "
                         f"broker's sends only)\n")
    for run_index in range(args.runs):
        for scenario in scenarios:
            for name in args.brokers:
                if not runs_on(name, scenario):
                    continue
                work_dir = work_root / f"{name}-{scenario.name}-{run_index}"
                record = _measure_one(args, tools, installs, scenario, run_index, name,
                                      work_dir, timing)
                records.append(record)
                _progress(record)
                reason = failure(record)
                if reason and not args.keep_going:
                    for store in sorted(work_dir.glob("**/store"), reverse=True):
                        shutil.rmtree(store, ignore_errors=True)     # the logs are kept
                    raise Stop(f"{reason} (its logs: {work_dir})")
                shutil.rmtree(work_dir, ignore_errors=True)


def _progress(record: dict) -> None:
    cpu = record.get("cpu") or {}
    parts = ", ".join(f"{role} {f['cpu_us_per_msg']:.1f}"
                      for role, f in (cpu.get("processes") or {}).items())
    sys.stderr.write(
        f"[bench] {record['broker']:10} run {record['run']} {record['scenario']:28} "
        f"tps {record.get('tps') or 0:9.0f} p99 {record.get('p99_rt_ms') or 0:7.2f} ms "
        f"cpu {cpu.get('cpu_us_per_msg', 0):6.1f} us/msg ({parts}) "
        f"ctx {cpu.get('ctx_per_msg', 0):5.2f}/msg pss {record.get('pss_peak_mib', 0):7.1f} MiB"
        f" load before {record.get('load_before', ['?'])[0]}"
        f"{' ERROR ' + bb.one_line(record['error']) if 'error' in record else ''}\n")


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
                      help="the whole matrix against both Java versions, 3 runs, loads as "
                           "long as --budget allows (40 minutes: 25 s loads)")
    mode.add_argument("--profile", action="store_const", dest="mode", const="profile",
                      help="one pybroker scenario under py-spy (installs py-spy): produce "
                      "128 B, or the first scenario of the full matrix --only picks")
    mode.add_argument("--ha", action="store_const", dest="mode", const="ha",
                      help="produce 1 KiB with 64 threads to a master with one slave, "
                           "ASYNC_MASTER and SYNC_MASTER, pybroker's pair and Java 4.9.8's")
    mode.add_argument("--transaction", action="store_const", dest="mode", const="transaction",
                      help="transactional sends (TransactionProducer's defaults: 32 threads, "
                           "2 KiB, commit), 30 s runs, pybroker and Java 4.9.8, 2 runs")
    mode.add_argument("--timer", action="store_const", dest="mode", const="timer",
                      help="timer messages with Apache's TimerProducer and TimerConsumer "
                           "(--apache rocketmq-all-5.3.3), pybroker and Java 5.3.3, 2 runs of "
                           "about 3.5 minutes; the NameServer on port 9876")
    mode.add_argument("--pop", action="store_const", dest="mode", const="pop",
                      help="5.x POP with the 5.3.3 client: the push consumer in POP mode (20 "
                           "threads, 128 B) draining a backlog, and POP-then-ACK round trips "
                           "(1 thread); pybroker and Java 5.3.3, 30 s runs, 2 runs")
    parser.add_argument("--brokers", default=None,
                        help=f"comma list of {','.join(BROKERS)} (default: per mode; "
                             f"java-5.5.1 is broker 5.5.1 with the 5.3.3 NameServer; floor: "
                             f"tools/remoting_floor.py, sends only)")
    parser.add_argument("--runs", type=int, default=None, help="runs (default 3; quick 2)")
    parser.add_argument("--duration", type=int, default=None,
                        help="seconds per load run, warm-up included (default 60; quick 30; "
                             "full: planned from --budget)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="discarded seconds (10; --full's plan: a third of the load)")
    parser.add_argument("--budget", type=float, default=None, metavar="MIN",
                        help=f"--full: minutes the whole matrix may take (default "
                             f"{FULL_BUDGET_MIN}); the loads are as long as it allows")
    parser.add_argument("--backlog", type=int, default=0, metavar="N",
                        help=f"messages the consume scenario drains (default {BACKLOG_MESSAGES:,}"
                             f"; Apache's Consumer {APACHE_BACKLOG_MESSAGES:,})")
    parser.add_argument("--apache", nargs="?", const=apache_bench.DEFAULT_TAG, default=None,
                        choices=tuple(apache_bench.TAGS), metavar="TAG",
                        help="run Apache's benchmark classes of TAG (default "
                             f"{apache_bench.DEFAULT_TAG}) as built by tools/apache_bench.py "
                             "instead of the project's load classes")
    parser.add_argument("--apache-classes", type=pathlib.Path, default=None,
                        help="like --apache, from a folder of tools/apache_bench.py build -o "
                             "(or any folder of compiled org.apache... benchmark classes)")
    parser.add_argument("--pybroker", default=None, metavar="CMD",
                        help="the pybroker command to benchmark (default: the installed one)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker.conf property for every broker (repeatable)")
    parser.add_argument("--keep-going", action="store_true",
                        help="record failed runs and go on instead of stopping at the first")
    parser.add_argument("--work-dir", type=pathlib.Path, default=None,
                        help="stores and logs (default: a temporary directory, removed)")
    parser.add_argument("--results-dir", type=pathlib.Path, default=RESULTS_DIR,
                        help="where the result file goes (default benchmarks/results)")
    parser.add_argument("--only", default=None,
                        help="run only scenarios whose name contains these whole "
                             "dash-separated parts (w64, 1KiB-w64, syncmaster: not asyncmaster)")
    parser.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    parser.add_argument("--tag", default="", help="free text stored with the result")
    return parser


def estimate_s(scenarios: list[Scenario], brokers: list[str], runs: int, duration_s: int,
               apache: bool) -> float:
    """Wall seconds a matrix takes at ``duration_s`` per load (LOAD_OVERHEAD_S's figures)."""
    backlog = APACHE_BACKLOG_EXTRA_S if apache else BACKLOG_EXTRA_S
    per_run = sum(duration_s + LOAD_OVERHEAD_S[name] + (backlog if s.kind == "consume" else 0)
                  for s in scenarios for name in brokers if runs_on(name, s))
    return runs * per_run


def plan_duration(scenarios: list[Scenario], brokers: list[str], runs: int, apache: bool,
                  budget_min: float) -> int | None:
    """The longest load (PLAN_DURATIONS_S) whose matrix fits ``budget_min``; None if none."""
    for duration_s in PLAN_DURATIONS_S:
        if estimate_s(scenarios, brokers, runs, duration_s, apache) <= budget_min * 60:
            return duration_s
    return None


def _plan(args) -> None:
    """--full without --duration: loads as long as the budget allows (warm-up a third, 5-10 s);
    a matrix that does not fit even at the shortest load is refused with what would fit."""
    scenarios = [s for s in matrix(args.mode) if selected(s.name, args.only)]
    apache = bool(args.apache or args.apache_classes)
    budget = args.budget if args.budget is not None else FULL_BUDGET_MIN
    if args.duration is None:
        args.duration = plan_duration(scenarios, args.brokers, args.runs, apache, budget)
        if args.duration is None:
            shortest = estimate_s(scenarios, args.brokers, args.runs, PLAN_DURATIONS_S[-1],
                                  apache) / 60
            raise SystemExit(
                f"the matrix ({len(scenarios)} scenarios x {len(args.brokers)} brokers x "
                f"{args.runs} runs) needs about {shortest:.0f} minutes even with "
                f"{PLAN_DURATIONS_S[-1]} s loads, over --budget {budget:g}: run fewer brokers "
                f"(e.g. java-5.5.1 on its own: --brokers pybroker,java-5.5.1), --only, or give "
                f"--duration")
        if args.warmup is None:
            args.warmup = max(5, min(10, args.duration // 3))
    minutes = estimate_s(scenarios, args.brokers, args.runs, args.duration, apache) / 60
    args.planned_min = round(minutes, 1)
    over = f", over --budget {budget:g}" if minutes > budget else ""
    sys.stderr.write(f"[bench] plan: {args.duration} s loads (warm-up {args.warmup or 10} s), "
                     f"about {minutes:.0f} minutes{over}\n")


def _settle_args(args) -> None:
    args.mode = args.mode or "quick"
    quick = args.mode in ("quick", "transaction", "timer", "pop")
    short = quick or args.mode == "ha"
    default_brokers = "pybroker,java-4.9.8" if short else ",".join(BROKERS[:3])
    if args.mode in ("timer", "pop"):
        default_brokers = "pybroker,java-5.3.3"
    args.brokers = [name.strip() for name in (args.brokers or default_brokers).split(",")
                    if name.strip()]
    args.runs = args.runs or (2 if quick else 3)
    if not set(args.brokers) <= set(BROKERS) or not 1 <= args.runs <= 10:
        raise SystemExit(f"--brokers takes {','.join(BROKERS)}; --runs 1..10")
    if args.mode == "full":
        _plan(args)
    args.duration = args.duration or (30 if short else 60)
    args.warmup = 10 if args.warmup is None else args.warmup
    if not set(args.brokers) <= set(BROKERS) or not 1 <= args.runs <= 10:
        raise SystemExit(f"--brokers takes {','.join(BROKERS)}; --runs 1..10")
    if not 0 <= args.warmup < args.duration:
        raise SystemExit("--warmup must be below --duration")
    if args.apache and args.apache_classes:
        raise SystemExit("give --apache TAG or --apache-classes DIR, not both")
    try:
        args.set = [tuple(item.split("=", 1)) for item in args.set]
        if any(not key.strip() for key, _ in args.set):
            raise ValueError
    except ValueError:
        raise SystemExit("--set takes KEY=VALUE") from None


def git_revision() -> str:
    """HEAD's short id, with "+dirty" when tracked files differ."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", "HEAD", "--",
                                "pybroker", "setup.py"], timeout=10).returncode
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (head or "unknown") + ("+dirty" if head and dirty else "")


def selected(name: str, only: str | None) -> bool:
    """``--only``: whole dash-separated parts of a scenario name ("syncmaster" does not pick
    "asyncmaster", "1KiB-w64" picks both parts in a row)."""
    return not only or f"-{only}-" in f"-{name}-"


def apache_load(args) -> tuple[pathlib.Path | None, dict | None]:
    """(classes folder, its build.json or None) of the Apache load asked for; (None, None)
    for the project's classes. Stop when the classes are not there."""
    if args.apache:
        info = apache_bench.load_build(apache_bench.default_dir(args.apache))
        if info is None:
            raise Stop(f"Apache's benchmark classes of {args.apache} are not built: run "
                       f"{apache_bench.build_hint(args.apache)}")
        return apache_bench.default_dir(args.apache) / "classes", info
    if args.apache_classes is None:
        return None, None
    folder = args.apache_classes.expanduser().resolve()
    info = apache_bench.load_build(folder)
    if info is not None:
        return folder / "classes", info
    if (folder / "org").is_dir():
        return folder, apache_bench.load_build(folder.parent)
    raise Stop(f"--apache-classes {folder} holds no compiled Apache benchmark classes: run "
               f"{apache_bench.build_hint(apache_bench.DEFAULT_TAG)} -o {folder}")


def load_info(classes, build_info, client_version: str) -> dict:
    """What the load is, for the result file and the table."""
    if classes is None:
        return {"kind": "project", "classes": "tools/java_bench", "client": client_version,
                "text": f"the project's load classes (tools/java_bench: BenchProducer, "
                        f"BenchConsumer, BenchTransactionProducer) on rocketmq-client "
                        f"{client_version}"}
    named = apache_bench.describe(build_info) if build_info else \
        f"Apache's benchmark classes in {classes} (no build.json: source unknown)"
    info = {key: (build_info or {}).get(key) for key in ("tag", "kind", "source", "commit")}
    return {**info, "kind": "apache", "source_kind": info["kind"], "classes": str(classes),
            "client": client_version, "text": f"{named} on rocketmq-client {client_version}"}


def _install(version: str) -> jr.RocketMQInstall:
    install = jr.RocketMQInstall(version)
    try:
        install.install()
    except jr.HarnessError as error:
        raise Stop(f"installing Java RocketMQ {version} failed: {bb.one_line(error)}") from None
    return install


def prepare(args, work_root: pathlib.Path) -> dict:
    """Everything a run needs before its first broker: the pybroker, the Java installs, the
    load programs; Stop (one line) when something is missing."""
    reason = jr.java_available()
    if reason:
        raise Stop(f"Java is needed for the load programs and Java brokers: {reason}")
    classes, build_info = apache_load(args)
    if args.mode == "timer":
        if not build_info or not build_info["version"].startswith("5"):
            raise Stop("--timer runs Apache's TimerProducer and TimerConsumer: add --apache "
                       "rocketmq-all-5.3.3 (built by tools/apache_bench.py)")
        if bench_timer.port_free():
            raise Stop(bench_timer.port_free())
    if args.mode == "pop" and (classes is not None or "java-4.9.8" in args.brokers):
        raise Stop("--pop runs the project's POP load on the 5.3.3 client against brokers "
                   "with POP (pybroker, java-5.3.3, java-5.5.1): no --apache, no java-4.9.8")
    client_version = "5.3.3" if args.mode == "pop" else \
        build_info["version"] if build_info else jr.DEFAULT_VERSION
    versions = {}
    if {"pybroker", "floor"} & set(args.brokers) or args.mode == "profile":
        try:
            found = bb.find_pybroker(args.pybroker)
        except jr.HarnessError as error:
            raise Stop(str(error)) from None
        bb.use_pybroker(found)
        if "pybroker" in args.brokers or args.mode == "profile":
            versions["pybroker"] = found.describe()
    installs = {name: _install(name.split("-", 1)[1]) for name in args.brokers
                if name.startswith("java-")}
    client = installs.get(f"java-{client_version}") or _install(client_version)
    versions.update({name: install.server_versions() for name, install in installs.items()})
    if "floor" in args.brokers:       # what it starts from: the binary built here
        import remoting_floor
        try:
            installs["floor"] = remoting_floor.build(work_root / "floor-bin")
        except jr.HarnessError as error:
            raise Stop(str(error)) from None
        versions["floor"] = {"floor_server": remoting_floor.SOURCE.name,
                             "namesrv": f"pybroker {found.version}"}
    try:
        tools = LoadTools(work_root, client, apache_classes=classes,
                          client5=args.mode == "pop")
    except jr.HarnessError as error:
        raise Stop(f"the load programs did not compile: {bb.one_line(error)}") from None
    load = load_info(classes, build_info, client_version)
    if args.mode == "pop":
        load["text"] = (f"the project's POP load (tools/java_bench: BenchProducer, BenchConsumer "
                        f"-P true; tools/java_bench/pop5: BenchPopAck) on rocketmq-client "
                        f"{client_version}")
    return {"installs": installs, "tools": tools, "broker_versions": versions, "load": load}


def _announce(context: dict) -> None:
    mine = context["broker_versions"].get("pybroker")
    if mine and not mine["matches_checkout"]:
        sys.stderr.write(f"[bench] note: the pybroker that runs ({mine['package']}) differs "
                         f"from this checkout in {mine['differing_count']} source files (e.g. "
                         f"{mine['differing_files'][0]}): its figures are not those of "
                         f"{git_revision()}\n")
    sys.stderr.write(f"[bench] load: {context['load']['text']}\n[bench] brokers: "
                     + bench_report.brokers_text(context["broker_versions"]) + "\n")


def _run(args, context: dict, scenarios: list, work_root: pathlib.Path, records: list) -> None:
    tools = context["tools"]
    if args.mode == "profile":
        import bench_profile
        picked = [s for s in matrix("full") if args.only and selected(s.name, args.only)]
        scenario = picked[0] if picked else matrix("profile")[0]
        summary = bench_profile.profile(tools, scenario, work_root, measure,
                                        Timing(args.duration, args.warmup, args.backlog))
        sys.stdout.write(json.dumps(summary, indent=1) + "\n")
        return
    loads = args.runs * len(scenarios) * len(args.brokers)
    each = f"about {bench_timer.RUN_S // 60} minutes" if args.mode == "timer" else \
        f"{args.duration} s"
    sys.stderr.write(f"[bench] {loads} loads of {each} ({args.runs} run(s) x "
                     f"{len(scenarios)} scenario(s) x {len(args.brokers)} broker(s))\n")
    run_matrix(args, tools, context["installs"], scenarios, work_root, records)


def _write(args, records, scenarios, started, context, stopped) -> pathlib.Path:
    """The result file (``-partial`` when stopped early); docs and comparison when complete."""
    result = bench_report.build_result(args, records, scenarios, started, git_revision(),
                                       context, stopped)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.fromtimestamp(started).strftime("%Y%m%dT%H%M%S")
    path = args.results_dir / f"{stamp}-{args.mode}{'-partial' if stopped else ''}.json"
    previous = bench_report.previous_result(args.results_dir, result["mode"], path, result)
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if not args.no_docs and not stopped:
        bench_report.write_docs(args.results_dir, ROOT / "docs" / "benchmarks.md")
    text = bench_report.summary_text(result)
    if previous is not None and not stopped:
        text += "\n\n" + bench_report.compare_text(previous, result)
    sys.stdout.write(text + f"\nresults: {path}\n")
    return path


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    _settle_args(args)
    _install_signal_handlers()
    atexit.register(bb.stop_all)
    keep = args.work_dir is not None
    work_root = args.work_dir or pathlib.Path(tempfile.mkdtemp(prefix="pybroker-bench-"))
    work_root.mkdir(parents=True, exist_ok=True)
    started = time.time()
    records: list = []
    scenarios = [s for s in matrix(args.mode) if selected(s.name, args.only)]
    context: dict = {}
    stopped, code = None, 0
    try:
        context = prepare(args, work_root)
        _announce(context)
        _run(args, context, scenarios, work_root, records)
    except Stop as stop:
        stopped, code = str(stop), 1
    except KeyboardInterrupt:
        stopped, code = "interrupted", 130
    finally:
        bb.stop_all()
        if not keep and not (code == 1 and records):   # a failed broker's logs are kept
            shutil.rmtree(work_root, ignore_errors=True)
    path = _write(args, records, scenarios, started, context, stopped) if records else None
    if stopped:
        sys.stderr.write(f"bench_side_by_side: stopped: {stopped}"
                         + (f"; partial results: {path}" if path else "") + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
