# Side-by-side runs of the RocketMQ 5 SDKs through rocketmq-proxy: pybroker vs Java 5.3.3 behind it.
"""TPS of the official RocketMQ 5 SDKs (Python, Java) sending and consuming (SimpleConsumer,
receive + ack) through Apache's rocketmq-proxy 5.3.3 in CLUSTER mode, in front of pybroker and in
front of Java 5.3.3 in turns, each on a fresh broker and store, with the PSS of the whole
deployment (proxy + NameServer + broker) sampled while the load runs.

Usage (from the repository's root, pybroker installed as for tools/bench_side_by_side.py; the
proxy, the Java broker and the SDKs install on first use, tools/rocketmq_sdks.py)::

    python3 tools/bench_proxy.py [--brokers pybroker,java-5.3.3] [--sdks python,java]
                                 [--seconds 20] [--threads 8] [--size 128] [--work-dir DIR]

Per broker and SDK: a send run of ``--seconds`` (``--threads`` senders, ``--size``-byte bodies,
to a NORMAL topic of 8 queues), then a SimpleConsumer run of ``--seconds`` on what was sent.
Prints a table and writes ``benchmarks/results/<time>-proxy.json``. Figures from a busy box
are not comparable (the header records the load average before each run); the lead's quiet
runs are the ones to quote.
"""
import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_brokers as bb  # noqa: E402
import bench_sample  # noqa: E402
import java_rocketmq as jr  # noqa: E402
import rocketmq_proxy  # noqa: E402
import rocketmq_sdks  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
PYTHON_SDK_PROGRAM = ROOT / "tools" / "proxy_sdk" / "python_sdk.py"
TOPIC_QUEUES = 8
PROXY_HEAP_MB = 512


def sdk_argv(sdk: str, endpoint: str, classes: pathlib.Path | None) -> list[str]:
    if sdk == "python":
        return [str(rocketmq_sdks.python_sdk()), str(PYTHON_SDK_PROGRAM), "--endpoint",
                endpoint]
    lib = rocketmq_sdks.java_sdk()
    return ["java", "-Xms256m", "-Xmx256m", "-XX:+UseG1GC", "-cp",
            lib.classpath([classes]), "JavaSdk", endpoint]


def run_load(argv: list[str], timeout_s: float) -> dict:
    """Run one SDK program to its end: its bench RESULT line as a dict, or {"failed": the last
    line of its error} (a run that fails is reported in the table, not measured)."""
    run = jr.run_java(argv, timeout_s)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT op=bench")]
    if run.returncode != 0 or not lines:
        why = (run.stderr.strip().splitlines() or [f"exit {run.returncode}"])[-1]
        return {"failed": bb.one_line(f"{why} (timed out: {run.timed_out})", 200)}
    fields = dict(pair.split("=", 1) for pair in lines[-1].split()[1:])
    return {key: float(value) if key != "op" else value for key, value in fields.items()}


def create_normal_topic(broker, topic: str) -> None:
    """UPDATE_AND_CREATE_TOPIC with message.type NORMAL (what the SDKs' producers send)."""
    fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(TOPIC_QUEUES),
              "writeQueueNums": str(TOPIC_QUEUES), "perm": "6", "topicFilterType": "SINGLE_TAG",
              "topicSysFlag": "0", "order": "false", "attributes": "+message.type=NORMAL"}
    answer = bb.remoting_request(int(broker.broker_addr.rsplit(":", 1)[1]),
                                 bb.UPDATE_AND_CREATE_TOPIC, fields)
    if answer.get("code") != 0:
        raise jr.HarnessError(f"creating {topic} failed: {answer}")


def start_broker(name: str, work_dir: pathlib.Path):
    conf = bb.shared_broker_conf("ASYNC_FLUSH")
    if name == "pybroker":
        return bb.PyBroker(work_dir / "pybroker", conf).start()
    version = name.split("-", 1)[1]
    install = jr.RocketMQInstall(version)
    install.install()
    return bb.JavaBroker(work_dir / name, conf, install).start()


def measure_broker(name: str, args, work_dir: pathlib.Path, classes) -> list[dict]:
    """Every SDK's send and receive runs against one fresh broker behind one proxy."""
    rows = []
    broker = start_broker(name, work_dir)
    proxy = rocketmq_proxy.RocketMQProxy(work_dir / f"proxy-{name}", broker.namesrv_addr,
                                         free_ports=True, heap_mb=PROXY_HEAP_MB)
    try:
        proxy.start()
        roots = [*broker.root_pids(), proxy.process.pid]

        def role_of(process):
            return "proxy" if process.pid == proxy.process.pid else broker.role_of(process)
        for sdk in args.sdks:
            topic = f"Bench{sdk.capitalize()}"
            create_normal_topic(broker, topic)
            time.sleep(1.0)    # the proxy caches routes: the topic is there before it asks
            row = {"broker": name, "sdk": sdk, "load_avg_1m": round(os.getloadavg()[0], 2)}
            for op, extra in (("bench-send", [f"threads={args.threads}", f"size={args.size}"]),
                              ("bench-receive", [f"group=Bench{sdk.capitalize()}Group"])):
                watcher = bench_sample.PssWatcher(roots, role_of).start()
                argv = sdk_argv(sdk, proxy.grpc_endpoint, classes) + [
                    op, f"topic={topic}", f"seconds={args.seconds}", *extra]
                figures = run_load(argv, args.seconds + 120)
                memory = watcher.stop()
                if "failed" in figures:
                    row[op] = {"failed": figures["failed"], **memory}
                    continue
                count = figures.get("sent", figures.get("acked", 0.0))
                row[op] = {"tps": round(count / max(figures["seconds"], 1e-9), 1),
                           "messages": int(count), "errors": int(figures["errors"]), **memory}
            rows.append(row)
            sys.stderr.write(f"bench_proxy: {name} {sdk}: send {_tps(row['bench-send'])}, "
                             f"receive {_tps(row['bench-receive'])}\n")
    finally:
        proxy.stop(graceful=False)
        broker.stop()
    return rows


def _tps(figures: dict) -> str:
    return f"failed: {figures['failed']}" if "failed" in figures else str(figures["tps"])


def table(rows: list[dict]) -> str:
    lines = ["| broker | SDK | send TPS | receive+ack TPS | PSS peak, send (MiB) | "
             "PSS peak, receive (MiB) | errors |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        send, receive = row["bench-send"], row["bench-receive"]
        errors = send.get("errors", 0) + receive.get("errors", 0)
        lines.append(f"| {row['broker']} | {row['sdk']} | {_tps(send)} | {_tps(receive)} | "
                     f"{send.get('pss_peak_mib')} | {receive.get('pss_peak_mib')} | {errors} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", default="pybroker,java-5.3.3")
    parser.add_argument("--sdks", default="python,java")
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--work-dir", type=pathlib.Path, default=None)
    parser.add_argument("--out", type=pathlib.Path, default=None, help="result JSON path")
    args = parser.parse_args(argv)
    args.sdks = [sdk for sdk in args.sdks.split(",") if sdk]
    if any(sdk not in ("python", "java") for sdk in args.sdks):
        parser.error("--sdks takes python and java")
    rocketmq_proxy.install()
    if "python" in args.sdks:
        rocketmq_sdks.python_sdk()
    classes = None
    if "java" in args.sdks:
        lib = rocketmq_sdks.java_sdk()
        lib.install()
        classes = pathlib.Path(jr.compile_java(lib, [rocketmq_sdks.JAVA_SDK_SOURCE],
                                               tempfile.mkdtemp(prefix="bench-proxy-javac-")))
    work_dir = args.work_dir or pathlib.Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    rows = []
    try:
        for name in [name for name in args.brokers.split(",") if name]:
            rows += measure_broker(name, args, work_dir / name, classes)
    except (jr.HarnessError, subprocess.SubprocessError) as error:
        sys.stderr.write(f"bench_proxy: {error}\n")
        return 1
    finally:
        bb.stop_all()
    stamp = datetime.datetime.now().strftime("%Y%m%dT%H%M%S")
    out = args.out or RESULTS_DIR / f"{stamp}-proxy.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    document = {"time": stamp, "seconds": args.seconds, "threads": args.threads,
                "size": args.size, "cores": os.cpu_count(),
                "pybroker": bb.installed_pybroker().describe()
                if "pybroker" in args.brokers else None, "rows": rows}
    out.write_text(json.dumps(document, indent=1) + "\n")
    sys.stdout.write(table(rows) + f"\n\nwritten to {out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
