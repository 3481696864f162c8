# Benchmark: pybroker's Python client vs the Java client, sends/s and consumes/s, one pybroker.
"""Throughput of pybroker.client against one pybroker, side by side with the Java client.

    python benchmarks/e2e/bench_python_client.py                 # 128 B and 1 KiB, 3 runs each
    python benchmarks/e2e/bench_python_client.py --messages 5000 --runs 1

One pybroker (tools/bench_brokers.PyBroker, ASYNC_FLUSH, the shared broker.conf) serves every
load. Per (size, run, client): a fresh 4-queue topic; the producer sends ``--messages`` bodies
with PRODUCER_INFLIGHT requests in flight (Java: tools/java_bench/BenchProducer.java with as many
threads; Python: as many asyncio tasks each awaiting send), then a push consumer in a fresh
group consumes the backlog from the first offset (Java: BenchConsumer.java; Python:
PushConsumer). sends/s = acked / send span; consumes/s = messages / (last - first consume).
Prints a table (median and min-max over runs, Python/Java ratio) and writes
benchmarks/results/<timestamp>-python-client.json. Not a test; bounded by LOAD_TIMEOUT_S per load.
"""
import argparse
import asyncio
import datetime
import json
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
import bench_brokers as bb  # noqa: E402
import bench_side_by_side as bs  # noqa: E402
import java_rocketmq as jr  # noqa: E402

from pybroker.client.consumer import PushConsumer  # noqa: E402
from pybroker.client.listener import ConsumeStatus  # noqa: E402
from pybroker.client.message import Message, SendStatus  # noqa: E402
from pybroker.client.producer import Producer  # noqa: E402
from pybroker.protocol.constants import ConsumeFromWhere  # noqa: E402

RESULTS_DIR = ROOT / "benchmarks" / "results"
PRODUCER_INFLIGHT = 8
CONSUMER_THREADS = 4
LOAD_TIMEOUT_S = 120.0


async def _python_produce(namesrv: str, topic: str, body_bytes: int, count: int) -> dict:
    body = b"x" * body_bytes
    acked = failed = 0
    async with Producer(f"pg_{topic}", namesrv) as producer:
        await producer.send(Message(topic, body))      # route lookup and connect, not timed
        started = time.perf_counter()

        async def worker(share: int) -> None:
            nonlocal acked, failed
            for _ in range(share):
                result = await producer.send(Message(topic, body))
                if result.status == SendStatus.SEND_OK:
                    acked += 1
                else:
                    failed += 1
        shares = [count // PRODUCER_INFLIGHT + (i < count % PRODUCER_INFLIGHT)
                  for i in range(PRODUCER_INFLIGHT)]
        await asyncio.wait_for(asyncio.gather(*(worker(s) for s in shares)), LOAD_TIMEOUT_S)
        elapsed_s = time.perf_counter() - started
    return {"messages_ok": acked, "send_failed": failed, "elapsed_s": elapsed_s,
            "send_tps": acked / elapsed_s}


async def _python_consume(namesrv: str, topic: str, count: int) -> dict:
    """Consume ``count`` messages (the warm-up message is one more, so stop at count + 1)."""
    stamps: list[float] = []
    done = asyncio.Event()

    async def listener(messages, context):
        now = time.perf_counter()
        stamps.extend(now for _ in messages)
        if len(stamps) >= count + 1:
            done.set()
        return ConsumeStatus.CONSUME_SUCCESS
    consumer = PushConsumer(f"cg_py_{topic}", namesrv,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    await consumer.start()
    try:
        await asyncio.wait_for(done.wait(), LOAD_TIMEOUT_S)
    finally:
        await consumer.shutdown()
    span_s = max(stamps[-1] - stamps[0], 1e-9)
    return {"received": len(stamps), "consume_tps": (len(stamps) - 1) / span_s}


def _java_load(tools: bs.LoadTools, namesrv: str, topic: str, body_bytes: int,
               count: int) -> dict:
    produced, run = tools.run_java(bs.PRODUCER_CLASS, [
        "-n", namesrv, "-t", topic, "-s", body_bytes, "-q", count, "-w", PRODUCER_INFLIGHT,
        "-T", int(LOAD_TIMEOUT_S - 30)])
    if not produced:
        return {"error": run.stderr[-1500:] or run.stdout[-1500:]}
    consumed, run = tools.run_java(bs.CONSUMER_CLASS, [
        "-n", namesrv, "-t", topic, "-g", f"cg_java_{topic}", "-w", CONSUMER_THREADS,
        "-q", count, "-T", int(LOAD_TIMEOUT_S - 20), "-f", "true"])
    if not consumed:
        return {"error": run.stderr[-1500:] or run.stdout[-1500:]}
    return {"send_tps": produced["send_tps"], "messages_ok": produced.get("messages_ok"),
            "consume_tps": consumed["consume_tps"], "received": consumed.get("received")}


def _python_load(namesrv: str, topic: str, body_bytes: int, count: int) -> dict:
    produced = asyncio.run(_python_produce(namesrv, topic, body_bytes, count))
    consumed = asyncio.run(_python_consume(namesrv, topic, count))
    return {**produced, **consumed}


def run_all(args, tools: bs.LoadTools, broker) -> list[dict]:
    """Every (size, run, client) load against ``broker``; clients alternate back to back."""
    records = []
    for body_bytes in args.sizes:
        for run_index in range(args.runs):
            for client in ("python", "java"):
                topic = f"bpc_{client}_{body_bytes}_{run_index}_{int(time.time() * 1000)}"
                bb.create_topic(broker, topic)
                if client == "python":
                    load = _python_load(broker.namesrv_addr, topic, body_bytes, args.messages)
                else:
                    load = _java_load(tools, broker.namesrv_addr, topic, body_bytes,
                                      args.messages)
                record = {"client": client, "body_bytes": body_bytes, "run": run_index,
                          "messages": args.messages, **load}
                records.append(record)
                sys.stderr.write(f"[bench] {json.dumps(record)}\n")
    return records


def summarize(records: list[dict]) -> list[dict]:
    """Median and spread of sends/s and consumes/s per (size, client), with Python/Java."""
    rows = []
    for body_bytes in sorted({r["body_bytes"] for r in records}):
        row = {"body_bytes": body_bytes}
        for client in ("python", "java"):
            for metric in ("send_tps", "consume_tps"):
                values = [r[metric] for r in records if r["client"] == client
                          and r["body_bytes"] == body_bytes and metric in r]
                row[f"{client}_{metric}"] = {
                    "median": statistics.median(values) if values else None,
                    "min": min(values, default=None), "max": max(values, default=None),
                    "runs": len(values)}
        for metric in ("send_tps", "consume_tps"):
            python, java = row[f"python_{metric}"]["median"], row[f"java_{metric}"]["median"]
            row[f"ratio_{metric}"] = python / java if python and java else None
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    def cell(stats: dict) -> str:
        if stats["median"] is None:
            return "n/a"
        return f"{stats['median']:8.0f} ({stats['min']:.0f}-{stats['max']:.0f})"
    lines = [f"{'size':>6} {'metric':<12} {'python median (min-max)':>26} "
             f"{'java median (min-max)':>26} {'py/java':>8}"]
    for row in rows:
        for metric, label in (("send_tps", "sends/s"), ("consume_tps", "consumes/s")):
            ratio = row[f"ratio_{metric}"]
            lines.append(f"{row['body_bytes']:>6} {label:<12} "
                         f"{cell(row[f'python_{metric}']):>26} {cell(row[f'java_{metric}']):>26} "
                         f"{(f'{ratio:.2f}' if ratio else 'n/a'):>8}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10000, help="messages per load")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", type=lambda text: [int(s) for s in text.split(",")],
                        default=[128, 1024], help="body sizes in bytes, comma separated")
    args = parser.parse_args(argv)
    install = jr.RocketMQInstall(jr.DEFAULT_VERSION)
    install.install()
    work_root = pathlib.Path(tempfile.mkdtemp(prefix="pybroker-bench-pyclient-"))
    started = time.time()
    broker = None
    try:
        tools = bs.LoadTools(work_root, install, with_go=False)
        broker = bb.PyBroker(work_root / "pybroker", bb.shared_broker_conf("ASYNC_FLUSH")).start()
        records = run_all(args, tools, broker)
    finally:
        if broker is not None:
            broker.stop()
        bb.stop_all()
        shutil.rmtree(work_root, ignore_errors=True)
    rows = summarize(records)
    result = {"tool": "benchmarks/e2e/bench_python_client.py", "started": started,
              "java_client_version": install.version, "producer_inflight": PRODUCER_INFLIGHT,
              "java_consumer_threads": CONSUMER_THREADS, "records": records, "summary": rows}
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.fromtimestamp(started).strftime("%Y%m%dT%H%M%S")
    path = RESULTS_DIR / f"{stamp}-python-client.json"
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    sys.stdout.write(table(rows) + f"\nresults: {path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
