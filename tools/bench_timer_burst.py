# Timer burst: Apache's TimerProducer, 500,000 due in one second, every message's lateness.
"""Run Apache's 5.x timer benchmark (TimerProducer, TimerConsumer) against pybroker and Java
RocketMQ 5.3.3 with one broker.conf, and measure what issue #23 asks: how fast timer messages
are taken and parked, and how late each one is delivered (the side-by-side scenario,
``bench_side_by_side.py --timer`` through tools/bench_timer.py, measures throughput and the
consumer's mean lateness over 30 due seconds).

    python tools/bench_timer_burst.py --quick            # check it works: 20,000 due in one second
    python tools/bench_timer_burst.py --scenario burst   # 500,000 messages due in the same second
    python tools/bench_timer_burst.py --scenario spread  # 64 threads x 60 slots x 200 (768,000)
    python tools/bench_timer_burst.py --scenario burst --brokers pybroker --messages 100000

Apache's classes (example/.../benchmark/timer, not on Maven Central) are compiled from the
source tree given by ``--apache-src`` (default /work/ref/rocketmq-all-5.3.3) into a scratch
folder (``--classes-dir``, default a cache under ~/.cache/pybroker): never committed. They run
through tools/java_bench/TimerBench.java, which works around 5.3.3's ``-n`` bug (the NameServer
is read from the ``-t`` value) by setting the NameServer on the producer it built, stops the
producer once every send was answered, and runs a consumer that records every message's
lateness (received - MY_RECORD_TIMER_DELIVER_MS, the property Apache's producer sets) exactly.
Apache's TimerConsumer runs beside it with ``--apache-consumer`` (its percentiles are over
distinct values only).

Lateness is taken twice per message: *stored* (the store time of the delivered message: the
broker's own lateness) and *received* (the consumer's clock: the broker's plus the consumer's
delay; a push consumer on the same 2-core box cannot take 500,000 messages in 10 s).

Per broker (a fresh store, the shared conf of tools/bench_brokers.py plus the timer settings):
the topic is created with 8 queues, the lateness consumer starts, TimerProducer sends (every
message due at one time for ``burst``: Apache's first slot, 2 minutes after the start), then,
once every message is parked (at the latest 45 s before the due time),
``--warmup`` plain messages (100,000 by default) are sent so that the consumer is warm when
the burst falls due (the JIT of a consumer started cold took a third of the box during the
burst; the result records how long before the due time the warm-up was consumed; with
``--consumer-at-end`` the consumer starts only 10 s after the last due time, to separate the
broker's own lateness from the cores it shares with the consumer), and the
driver polls GET_BROKER_RUNTIME_INFO every second (timerCongestNum: parked, timerOffsetBehind,
timerEnqueueTps, timerDequeueTps). Figures: send TPS (client), parking TPS (messages / time
from the first send until every one is parked), lateness p50/p90/p99/p99.9/max, early
deliveries (must be 0), within one precision, within 10 s (the burst goal: all of them),
of both.
Results: benchmarks/results/<timestamp>-timer.json. Measure on a quiet machine; ``--quick``
only checks that the tooling works.
"""
import argparse
import datetime
import hashlib
import json
import pathlib
import shutil
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_brokers as bb  # noqa: E402
import java_rocketmq as jr  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
APACHE_SRC_DEFAULT = pathlib.Path("/work/ref/rocketmq-all-5.3.3")
APACHE_TIMER_DIR = "example/src/main/java/org/apache/rocketmq/example/benchmark/timer"
LAUNCHER = ROOT / "tools" / "java_bench" / "TimerBench.java"
TOPIC = "TimerBenchTopic"
BROKERS = ("pybroker", "java-5.3.3")
GET_BROKER_RUNTIME_INFO = 28
FIRST_SLOT_DELAY_S = 120          # TimerProducer's first slot is 2 minutes after its start
WARMUP_LEAD_S = 45                # the consumer's warm-up starts at the latest this long before
TIMER_CONF = {"timerWheelEnable": "true", "timerPrecisionMs": "1000"}
# scenario -> (threads, slots, messages per slot and thread, slot distance ms)
SCENARIOS = {"burst": (16, 1, 31_250, 1000), "spread": (64, 60, 200, 1000)}


def compile_classes(apache_src: pathlib.Path, classes_dir: pathlib.Path | None,
                    install: jr.RocketMQInstall) -> pathlib.Path:
    """Apache's two timer classes and the launcher, compiled once per source digest."""
    sources = sorted((apache_src / APACHE_TIMER_DIR).glob("Timer*.java")) + [LAUNCHER]
    if len(sources) != 3:
        raise SystemExit(f"TimerProducer/TimerConsumer not found under {apache_src}")
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()[:16]
    out = (classes_dir or install.cache_dir.parent / "bench-timer-classes") / digest
    if not (out / "TimerBench.class").is_file():
        staging = pathlib.Path(tempfile.mkdtemp(prefix="bench-timer-"))
        jr.compile_java(install, sources, staging)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging), out)
    return out


def runtime_info(broker) -> dict:
    body = jr.remoting_call(int(broker.broker_addr.rsplit(":", 1)[1]), GET_BROKER_RUNTIME_INFO)
    return json.loads(body)["table"] if body else {}


def _java_argv(install, classes: pathlib.Path, args: list[str], heap_mb: int = 1024) -> list:
    return ["java", f"-Xms{heap_mb}m", f"-Xmx{heap_mb}m", "-XX:+UseG1GC",
            "-cp", install.classpath([classes]), "TimerBench", *args]


def _result(text: str) -> dict:
    for line in text.splitlines():
        if line.startswith("BENCH_RESULT "):
            return json.loads(line[len("BENCH_RESULT "):])
    raise jr.HarnessError(f"no BENCH_RESULT in:\n{text[-3000:]}")


def start_broker(name: str, work: pathlib.Path, installs: dict):
    conf = dict(bb.shared_broker_conf("ASYNC_FLUSH"), **TIMER_CONF)
    if name == "pybroker":
        return bb.PyBroker(work, conf).start()
    return bb.JavaBroker(work, conf, installs["5.3.3"]).start()


def measure(name: str, args, installs: dict, classes: pathlib.Path, work: pathlib.Path) -> dict:
    threads, slots, per_slot, distance = SCENARIOS[args.scenario]
    if args.messages:
        per_slot = max(args.messages // (threads * slots), 1)
    total = threads * slots * per_slot
    install = installs["5.3.3"]
    broker = start_broker(name, work / name, installs)
    try:
        bb.create_topic(broker, TOPIC)
        wait_s = FIRST_SLOT_DELAY_S + slots * distance / 1000 + args.late_limit_s + 120
        warmups = 0 if args.consumer_at_end else args.warmup
        consumer_args = ["consumer", broker.namesrv_addr, TOPIC, str(total), str(int(wait_s)),
                         str(warmups)]
        if args.apache_consumer:
            consumer_args.append("apache")

        def start_consumer():
            return bb.spawn(_java_argv(install, classes, consumer_args),
                            work / f"{name}-consumer.log")
        consumer = None if args.consumer_at_end else start_consumer()
        parked = _Parking(broker, total)
        producer_args = ["producer", broker.namesrv_addr, str(total), "--", "-t", TOPIC,
                         "-tc", str(threads), "-ms", str(args.message_size), "-p", "1000",
                         "-st", str(slots), "-mt", str(per_slot), "-sd", str(distance)]
        producer = bb.spawn(_java_argv(install, classes, producer_args),
                            work / f"{name}-producer.log")
        while producer.poll() is None:
            parked.poll()
            time.sleep(1)
        producer_log = (work / f"{name}-producer.log").read_text(errors="replace")
        sent = _result(producer_log)
        if consumer is None:
            warmup = None
            # Every slot's due time and 10 s more (the burst goal's bound) before any read.
            last_due_ms = _due_ms(producer_log) + (slots - 1) * distance
            while time.time() * 1000 < last_due_ms + 10_000:
                parked.poll()
                time.sleep(1)
            consumer = start_consumer()
        else:
            # Once every message is parked (the parking figure is the timer's alone), and
            # at the latest WARMUP_LEAD_S before the due time.
            warm_from_ms = _due_ms(producer_log) - WARMUP_LEAD_S * 1000
            while parked.all_parked_s is None and time.time() * 1000 < warm_from_ms:
                parked.poll()
                time.sleep(1)
            warmup = _warm_up(broker, args, install, classes, work / f"{name}-warmup.log",
                              warmups, parked)
        while consumer.poll() is None:
            parked.poll()
            time.sleep(1)
        consumer_log = (work / f"{name}-consumer.log").read_text(errors="replace")
        lateness = _result(consumer_log)
        if warmup is not None:
            warmup["consumed_before_due_s"] = _before_due_s(producer_log, consumer_log)
        return {"broker": name, "scenario": args.scenario, "messages": total,
                "warmup": warmup, "consumer_at_end": args.consumer_at_end,
                "threads": threads, "slots": slots, "message_size": args.message_size,
                "send": sent, "parking": parked.summary(), "lateness": lateness}
    finally:
        broker.stop()
        bb.stop_all()


def _warm_up(broker, args, install, classes: pathlib.Path, log: pathlib.Path,
             warmups: int, parked: "_Parking") -> dict | None:
    """``--warmup`` plain messages sent to the topic once every timer message is sent, well
    before the burst falls due: the lateness consumer takes them through its whole path, so
    its JIT has compiled it before the burst (started cold, the consumer's compiler threads
    took a third of the box's CPU during pybroker's burst, perf, 2026-12-07)."""
    if not warmups:
        return None
    process = bb.spawn(_java_argv(install, classes, [
        "warmup", broker.namesrv_addr, TOPIC, str(warmups), str(args.message_size)]), log)
    while process.poll() is None:
        parked.poll()
        time.sleep(1)
    return dict(_result(log.read_text(errors="replace")), messages=warmups)


def _mark(text: str, name: str) -> int | None:
    for line in text.splitlines():
        if line.startswith(f"BENCH_MARK {name} "):
            return int(line.split()[2])
    return None


def _before_due_s(producer_log: str, consumer_log: str) -> float | None:
    """How long before the burst's due time the consumer had taken the whole warm-up
    (negative: after it; None: never). The due time is TimerProducer's (its start's second
    + 2 min + 10 ms), its start taken at the producer's first_send mark, a few ms before."""
    consumed = _mark(consumer_log, "warmup_consumed")
    if consumed is None:
        return None
    return round((_due_ms(producer_log) - consumed) / 1000, 1)


def _due_ms(producer_log: str) -> int:
    """The first slot's due time: TimerProducer's start's second + 2 min + 10 ms, its start
    taken at the producer's first_send mark (a few ms before)."""
    first_send = _mark(producer_log, "first_send")
    if first_send is None:
        raise jr.HarnessError(f"no first_send mark in:\n{producer_log[-3000:]}")
    return first_send // 1000 * 1000 + FIRST_SLOT_DELAY_S * 1000 + 10


class _Parking:
    """GET_BROKER_RUNTIME_INFO once a second: when every message is parked, and the timer's
    own TPS figures."""

    def __init__(self, broker, total: int):
        self.broker = broker
        self.total = total
        self.started = time.monotonic()
        self.samples: list[dict] = []
        self.all_parked_s: float | None = None

    def poll(self) -> None:
        try:
            table = runtime_info(self.broker)
        except (OSError, ValueError, jr.HarnessError):
            return
        sample = {"t_s": round(time.monotonic() - self.started, 1)}
        # The pull figures (Java's 10 s / 1 min / 10 min rates): messages a found pull
        # carried, the consumer's side of the burst.
        for key in ("timerCongestNum", "timerOffsetBehind", "timerEnqueueTps",
                    "timerDequeueTps", "timerReadBehind", "getFoundTps", "getTransferedTps",
                    "getTotalTps"):
            sample[key] = table.get(key)
        self.samples.append(sample)
        if self.all_parked_s is None and int(table.get("timerCongestNum") or 0) >= self.total:
            self.all_parked_s = sample["t_s"]

    def summary(self) -> dict:
        enqueue = [float(s["timerEnqueueTps"]) for s in self.samples if s["timerEnqueueTps"]]
        dequeue = [float(s["timerDequeueTps"]) for s in self.samples if s["timerDequeueTps"]]
        return {"all_parked_s": self.all_parked_s,
                "parking_tps": round(self.total / self.all_parked_s, 1)
                if self.all_parked_s else None,
                "timer_enqueue_tps_max": max(enqueue, default=0.0),
                "timer_dequeue_tps_max": max(dequeue, default=0.0),
                "samples": self.samples}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="burst")
    parser.add_argument("--quick", action="store_true",
                        help="20,000 messages (a check that the tooling works, not a figure)")
    parser.add_argument("--messages", type=int, default=0, help="total messages (scaled)")
    parser.add_argument("--message-size", type=int, default=1024)
    parser.add_argument("--brokers", default=",".join(BROKERS))
    parser.add_argument("--apache-src", type=pathlib.Path, default=APACHE_SRC_DEFAULT)
    parser.add_argument("--classes-dir", type=pathlib.Path, default=None)
    parser.add_argument("--apache-consumer", action="store_true",
                        help="run Apache's TimerConsumer beside the lateness consumer")
    parser.add_argument("--warmup", type=int, default=100_000,
                        help="plain messages sent before the burst to warm the lateness "
                             "consumer's JIT (0: none, the consumer starts cold)")
    parser.add_argument("--consumer-at-end", action="store_true",
                        help="start the lateness consumer 10 s after the last slot's due "
                             "time (no warm-up): the stored lateness without a consumer "
                             "sharing the cores during the burst; the received lateness "
                             "then only says when it was read")
    parser.add_argument("--late-limit-s", type=int, default=60,
                        help="how long after the last slot to wait for deliveries")
    parser.add_argument("--pybroker", default=None, metavar="CMD",
                        help="the pybroker command to run (default: the installed one, as "
                             "bench_side_by_side.py; the result records whether its sources "
                             "are this checkout's)")
    parser.add_argument("--work-dir", type=pathlib.Path, default=None)
    parser.add_argument("--no-save", action="store_true")
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.quick:
        args.messages = args.messages or 20_000
    pybroker = None
    if "pybroker" in args.brokers.split(","):
        pybroker = bb.find_pybroker(args.pybroker)
        bb.use_pybroker(pybroker)
        if not pybroker.matches_checkout:
            print(f"note: {' '.join(pybroker.argv)} runs {pybroker.package}, whose sources "
                  f"differ from this checkout in {len(pybroker.differing)} files")
    install = jr.RocketMQInstall("5.3.3")
    install.install()
    classes = compile_classes(args.apache_src, args.classes_dir, install)
    work = args.work_dir or pathlib.Path(tempfile.mkdtemp(prefix="bench-timer-"))
    records = []
    try:
        for name in args.brokers.split(","):
            record = measure(name, args, {"5.3.3": install}, classes, work)
            records.append(record)
            _print(record)
    finally:
        bb.stop_all()
    if not args.no_save:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now().strftime("%Y%m%dT%H%M%S")
        path = RESULTS_DIR / f"{stamp}-timer{'-quick' if args.quick else ''}.json"
        path.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                    "pybroker": pybroker.describe() if pybroker else None,
                                    "records": records}, indent=1) + "\n")
        print(f"results: {path}")
    return 0


def _print(record: dict) -> None:
    send, parking, late = record["send"], record["parking"], record["lateness"]
    print(f"{record['broker']:>10} {record['scenario']} {record['messages']:,} messages: "
          f"send {send['sendTps']:,.0f}/s (failed {send['failed']}), "
          f"parked all after {parking['all_parked_s']} s ({parking['parking_tps']}/s), "
          f"delivered {late['count']:,}/{late['expected']:,} "
          f"(duplicates {late['duplicates']})")
    warmup = record.get("warmup")
    if warmup:
        print(f"{'':>10} warm-up: {warmup['sent']:,} of {warmup['messages']:,} sent in "
              f"{warmup['seconds']} s, all consumed {warmup['consumed_before_due_s']} s "
              f"before the due time")
    for side in ("stored", "received"):
        figures = late[side]
        print(f"{'':>10} lateness {side:>8} (ms): early {figures['early']}, p50 "
              f"{figures['p50']} p90 {figures['p90']} p99 {figures['p99']} p99.9 "
              f"{figures['p999']} max {figures['max']}, within 1 s "
              f"{figures['withinPrecision']:,}, within 10 s {figures['within10s']:,}")


if __name__ == "__main__":
    sys.exit(main())
