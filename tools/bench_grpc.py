# RocketMQ 5 SDK benchmark: pybroker's own gRPC endpoint vs brokers behind Apache's proxy.
"""Measure what a RocketMQ 5 SDK sees (issue #26's table): send TPS, SimpleConsumer
receive+ack TPS with p99 latencies, and the whole deployment's PSS and CPU per message, for

- ``native``:         pybroker standalone serving gRPC itself (grpcWorkers), grpcio
                      (grpcNativeFront=false),
- ``native-front``:   the same behind the C++ front (grpcNativeFront=true, the default where
                      the front is built),
- ``pybroker-proxy``: pybroker standalone behind Apache's rocketmq-proxy 5.3.3 (CLUSTER mode),
- ``java-proxy``:     Java RocketMQ 5.3.3 (NameServer + broker) behind the same proxy.

Usage::

    python3 tools/bench_grpc.py                                  # every deployment, 60 s + 10 s
    python3 tools/bench_grpc.py --deployments native --duration 5 --warmup 3   # a brief check

The load is tools/java_bench_grpc/GrpcBench.java on the official Java SDK
(rocketmq-client-java 5.0.8): ``--threads`` senders sending ``--size``-byte messages
synchronously, then (``--consume``) as many SimpleConsumer threads receiving 32 at a time and
acking each, over the backlog the send phase left. The window opens after ``--warmup`` seconds
and lasts ``--duration``; the deployment's processes (broker tree, NameServer, proxy JVM) are
sampled at its edges for CPU µs per message and throughout for PSS. Each deployment starts
fresh on an empty store. The proxy deployments need tools/rocketmq_proxy.py (Apache's proxy
from Maven Central) and the SDK install of tools/rocketmq_sdks.py; without them the tool says
so and measures what it can. Results go to benchmarks/results/<timestamp>-grpc.json and are
printed as a table; figures from a loaded machine are not figures (the lead schedules quiet
runs).
"""
import argparse
import contextlib
import datetime
import json
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import bench_brokers as bb  # noqa: E402
import bench_load  # noqa: E402
import bench_sample  # noqa: E402
import java_rocketmq as jr  # noqa: E402

from pybroker._testbase.cluster import StandaloneBroker, free_port  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tools" / "java_bench_grpc" / "GrpcBench.java"
SDK_DIR = pathlib.Path.home() / ".cache" / "pybroker" / "rocketmq-client-java-5.0.8" / "lib"
DEPLOYMENTS = ("native", "native-front", "pybroker-proxy", "java-proxy")
NATIVE = ("native", "native-front")      # pybroker serving gRPC itself (grpcio / the C++ front)
TOPIC, GROUP = "BenchGrpc", "BenchGrpcGroup"
TOPIC_FIELDS = {"topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "8",
                "writeQueueNums": "8", "perm": "6", "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": "0", "order": "false", "attributes": "+message.type=NORMAL"}


def _tool(name: str):
    path = ROOT / "tools" / f"{name}.py"
    if not path.is_file():
        return None
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"_bench_grpc_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compile(work: pathlib.Path) -> str:
    jars = sorted(SDK_DIR.glob("*.jar"))
    if not jars:
        raise SystemExit(f"bench_grpc: no rocketmq-client-java 5.0.8 under {SDK_DIR} (python3 "
                         f"tools/rocketmq_sdks.py install --java)")
    classes = work / "classes"
    run = subprocess.run(["javac", "-cp", f"{SDK_DIR}/*", "-d", str(classes), str(SOURCE)],
                         capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise SystemExit(f"bench_grpc: javac failed: {bb.one_line(run.stderr)}")
    return f"{SDK_DIR}/*:{classes}"


class Deployment:
    """A running deployment: its gRPC endpoint and the processes that make it."""

    def __init__(self, name: str, endpoint: str, root_pids: list[int], create_topic):
        self.name, self.endpoint, self.root_pids = name, endpoint, root_pids
        self.create_topic = create_topic

    def role_of(self, process) -> str:
        command = " ".join(process.cmdline()[:4])
        if "proxy" in command.lower() and "java" in command:
            return "proxy"
        return process.name()


def _remoting_topic(broker_port: int) -> None:
    answer = bb.remoting_request(broker_port, 17, TOPIC_FIELDS)
    if answer.get("code") != 0:
        raise SystemExit(f"bench_grpc: topic not created: {answer}")


@contextlib.contextmanager
def deployment(name: str, work: pathlib.Path, grpc_workers: int):
    """Start ``name`` in ``work``; yields a Deployment, stops everything after."""
    with contextlib.ExitStack() as stack:
        if name == "java-proxy":
            install = jr.RocketMQInstall("5.3.3")
            install.require()
            broker = stack.enter_context(jr.JavaRocketMQ(work / "java", install=install))
            namesrv, broker_port = broker.namesrv_addr, broker.broker_port
            roots = [process.pid for process in broker.processes.values()]
        else:
            settings = {"grpcWorkers": str(grpc_workers if name in NATIVE else 0)}
            if name in NATIVE:       # each named, whatever the default of this build
                settings["grpcNativeFront"] = str(name == "native-front").lower()
            grpc_port = free_port()
            settings["grpcServerPort"] = str(grpc_port)
            broker = stack.enter_context(StandaloneBroker(work / "pybroker", settings))
            namesrv, broker_port = broker.namesrv_addr, broker.broker_port
            roots = [broker.process.pid]
        if name in NATIVE:
            yield Deployment(name, f"127.0.0.1:{grpc_port}", roots,
                             lambda: _remoting_topic(broker_port))
            return
        proxy_tool = _tool("rocketmq_proxy")
        if proxy_tool is None:
            raise SystemExit("bench_grpc: the proxy deployments need tools/rocketmq_proxy.py")
        proxy = proxy_tool.RocketMQProxy(work / "proxy", namesrv, proxy_tool.install(),
                                         free_ports=True)
        proxy.start()
        stack.callback(proxy.stop)
        yield Deployment(name, proxy.grpc_endpoint, roots + [proxy.process.pid],
                         lambda: _remoting_topic(broker_port))


def _measure(deployment_: Deployment, classpath: str, mode: str, options) -> dict:
    snapshots: dict = {}
    load_pid: list[int] = []

    def role_of(process) -> str:
        return "load" if load_pid and process.pid == load_pid[0] else \
            deployment_.role_of(process)

    def on_event(name: str) -> None:
        snapshots[name] = bench_sample.take(deployment_.root_pids, role_of)
    pss = bench_sample.PssWatcher(deployment_.root_pids, deployment_.role_of).start()
    argv = ["java", "-Xmx512m", "-cp", classpath, "GrpcBench", deployment_.endpoint, mode, TOPIC,
            GROUP, str(options.threads), str(options.size), str(options.duration),
            str(options.warmup)]
    run = bench_load.run_streaming(argv, options.duration + options.warmup + 120,
                                   bench_load.WindowEvents(on_event, apache=False),
                                   on_start=load_pid.append)
    memory = pss.stop()
    result = bench_load.parse_result_line(run.stdout)
    if not result or "warmup_done" not in snapshots or "measure_end" not in snapshots:
        raise SystemExit(f"bench_grpc: {deployment_.name} {mode} load failed: "
                         f"{bb.one_line(run.stdout[-1500:] + run.stderr_tail)}")
    window = bench_sample.window_figures(snapshots["warmup_done"], snapshots["measure_end"],
                                         result["operations"])
    return dict(result, cpu_us_per_msg=window["cpu_us_per_msg"], cores=window["cores"],
                by_process=window["processes"], machine_busy=window["machine_busy"], **memory)


def _table(results: dict) -> str:
    lines = ["deployment       phase    TPS      p99 ms    CPU µs/msg  PSS peak MiB"]
    for name, phases in results.items():
        for phase, figures in phases.items():
            p99 = figures.get("send_p99_ms", figures.get("ack_p99_ms"))
            pss = figures.get("pss_peak_mib", 0)
            lines.append(f"{name:<16} {phase:<8} {figures['tps']:>8.0f} {p99 or 0:>9.2f} "
                         f"{figures['cpu_us_per_msg']:>11.1f} {pss:>13.1f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", default=",".join(DEPLOYMENTS))
    parser.add_argument("--duration", type=int, default=60, help="measured seconds")
    parser.add_argument("--warmup", type=int, default=10, help="discarded seconds first")
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--size", type=int, default=128, help="message body bytes")
    parser.add_argument("--grpc-workers", type=int, default=1)
    parser.add_argument("--consume", action="store_true",
                        help="also SimpleConsumer receive+ack (needs POP on the broker)")
    parser.add_argument("--work", type=pathlib.Path, default=None)
    options = parser.parse_args(argv)
    stamp = datetime.datetime.now().strftime("%Y%m%dT%H%M%S")
    work = options.work or pathlib.Path("/tmp") / f"bench-grpc-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    classpath = _compile(work)
    results: dict = {}
    try:
        for name in options.deployments.split(","):
            if name not in DEPLOYMENTS:
                raise SystemExit(f"bench_grpc: unknown deployment {name!r}")
            with deployment(name, work / name, options.grpc_workers) as running:
                running.create_topic()
                phases = {"send": _measure(running, classpath, "send", options)}
                if options.consume:
                    phases["consume"] = _measure(running, classpath, "consume", options)
                results[name] = phases
    finally:
        bb.stop_all()
    out = ROOT / "benchmarks" / "results" / f"{stamp}-grpc.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"options": vars(options) | {"work": str(work)},
                               "results": results}, indent=1, default=str))
    sys.stdout.write(_table(results) + f"\n(written to {out})\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
