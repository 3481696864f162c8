# Timer-message scenario of the side-by-side benchmark: Apache's TimerProducer and TimerConsumer.
"""Timer messages (RocketMQ 5.x ``TIMER_DELIVER_MS``) measured with Apache's own 5.x benchmark
programs, ``benchmark.timer.TimerProducer`` and ``TimerConsumer`` (tools/apache_bench.py
builds them from the rocketmq-all-5.3.3 source).

TimerConsumer subscribes first; TimerProducer then sends ``threads x slots x per_slot``
messages as fast as it can, each due at one of ``slots`` whole seconds starting 2 minutes
after its start (its fixed lead time), and reports its send TPS every 10 s; TimerConsumer
reports every 10 s the messages it received per second and their mean lateness (receive time
minus due time, ms), with percentiles over the distinct lateness values it saw. The run ends
when the consumer reports no message after having received some, or at the deadline.

Figures: put TPS (mean of the producer's busy reports but the last, which ends inside its 10 s),
delivery TPS (likewise for the consumer, without its first busy report either: deliveries
begin inside it), lateness (the consumer's mean, weighted by its reports' TPS; its last busy
report's p99 over distinct values, and max), and the broker's CPU per message from the first
send to the end of the deliveries (put, the wheel's two minutes, delivery). Messages received
before they were due (a negative mean lateness) are an error: a broker without timer support
delivers at once.

Both programs take the NameServer only from ``localhost:9876``: given ``-n`` they read the
address from ``-t`` (TimerProducer.java and TimerConsumer.java of 5.3.3), so the broker's
NameServer listens on 9876 for this scenario and the run stops when that port is taken.
"""
import pathlib
import re
import statistics
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_brokers as bb  # noqa: E402
import bench_load  # noqa: E402
import bench_sample  # noqa: E402
import java_rocketmq as jr  # noqa: E402

NAMESRV_PORT = 9876
PACKAGE = "org.apache.rocketmq.example.benchmark.timer."
LEAD_S = 120                     # TimerProducer's first due time: 2 minutes after its start
SLOTS = 30                       # due seconds (-st), one apart (-sd 1000)
PER_SLOT = 1000                  # messages per slot per thread (-mt): 16,000 due each second
SETTLE_S = 60                    # after the last due second, before the run is given up
RUN_S = 5 + LEAD_S + SLOTS + 25  # a run that keeps up: subscribe, lead, slots, 2 reports
_SEND = re.compile(r"^Send TPS: (\d+), .*Send Failed: (\d+), Response Failed: (\d+)")
_CONSUME = re.compile(r"^Consume TPS: (\d+), Avg delayedDuration:\s*(-?[0-9.]+|NaN), Max "
                      r"delayedDuration: (-?\d+)(?:.*%99: (-?\d+))?")


def port_free() -> str | None:
    """None when 127.0.0.1:9876 can be bound; else why this scenario cannot run."""
    if jr._ports_free([NAMESRV_PORT]):
        return None
    return (f"port {NAMESRV_PORT} is taken: Apache's TimerProducer and TimerConsumer reach the "
            f"NameServer only at localhost:{NAMESRV_PORT} (given -n they read the address "
            f"from -t)")


def _busy(values: list, began_inside: bool) -> list:
    """The full reports of a burst: without the zeros, the last busy one when a 0 report
    follows (the burst ended inside its 10 s), and the first busy one when the burst began
    inside it (deliveries start at a due time, sends at the program's start)."""
    busy = [index for index, value in enumerate(values) if value > 0]
    if busy and busy[-1] + 1 < len(values):
        busy = busy[:-1]
    if busy and began_inside:
        busy = busy[1:]
    return [values[index] for index in busy]


class _Consumed:
    """TimerConsumer's reports, and when to stop it (idle after messages came)."""

    def __init__(self, on_first, on_done):
        self.reports: list[tuple] = []
        self.on_first, self.on_done = on_first, on_done

    def __call__(self, line: str) -> bool:
        found = _CONSUME.search(line)
        if found is None:
            return False
        tps = int(found.group(1))
        lateness = float(found.group(2)) if found.group(2) != "NaN" else 0.0
        self.reports.append((tps, lateness, int(found.group(3)),
                             int(found.group(4)) if found.group(4) else None))
        if tps and len([r for r in self.reports if r[0]]) == 1:
            self.on_first()
        if not tps and any(report[0] for report in self.reports):
            self.on_done()
            return True
        return False


def _figures(sent: list, consumed: _Consumed, messages: int) -> dict:
    put = _busy([tps for tps, _, _ in sent], began_inside=False)
    delivered = _busy([report[0] for report in consumed.reports], began_inside=True)
    weighted = [(tps, lateness) for tps, lateness, _, _ in consumed.reports if tps]
    figures = {"messages": messages, "put_tps": statistics.fmean(put) if put else None,
               "tps": statistics.fmean(delivered) if delivered else None,
               "consumer_reports": consumed.reports, "producer_reports": sent,
               "failed": max((failed + response for _, failed, response in sent), default=0)}
    if weighted:
        total = sum(tps for tps, _ in weighted)
        figures["lateness_avg_ms"] = sum(tps * late for tps, late in weighted) / total
        last = consumed.reports[-1] if consumed.reports[-1][0] else \
            [r for r in consumed.reports if r[0]][-1]
        figures.update(lateness_max_ms=last[2], lateness_p99_distinct_ms=last[3])
    return figures


def measure(tools, broker, scenario, run_index: int) -> dict:
    """One timer run against a broker whose NameServer is on 9876; the record."""
    topic = f"bench_timer_{run_index}_{int(time.time())}"
    bb.create_topic(broker, topic)
    record = {"scenario": scenario.name, "kind": "timer", "broker": broker.name,
              "run": run_index, "flush": scenario.flush, "body_bytes": scenario.body_bytes,
              "threads": scenario.threads, "load_tool": "apache", "slots": SLOTS,
              "per_slot_per_thread": PER_SLOT}
    messages = scenario.threads * SLOTS * PER_SLOT
    snapshots: dict = {}

    def snap(name):
        snapshots[name] = bench_sample.take(broker.root_pids(), broker.role_of)
    consumed = _Consumed(lambda: snap("first_delivery"), lambda: snap("measure_end"))
    pss = bench_sample.PssWatcher(broker.root_pids(), broker.role_of).start()
    deadline_s = LEAD_S + SLOTS + SETTLE_S
    consumer_run: list = []
    consumer = threading.Thread(target=lambda: consumer_run.append(bench_load.run_streaming(
        tools.java_argv(PACKAGE + "TimerConsumer", ["-t", topic], heap_mb=512),
        deadline_s + 30, consumed, cwd=tools.client.work_dir)), daemon=True)
    consumer.start()
    sent: list[tuple] = []

    def on_send(line: str) -> bool:
        if line.startswith("Start sending messages"):
            snap("warmup_done")
        found = _SEND.search(line)
        if found:
            sent.append(tuple(int(value) for value in found.groups()))
        return bool(found) and sent[-1][0] == 0 and any(tps for tps, _, _ in sent)
    try:
        time.sleep(5)            # the consumer subscribes before the first message is due
        producer = bench_load.run_streaming(
            tools.java_argv(PACKAGE + "TimerProducer", [
                "-t", topic, "-tc", scenario.threads, "-ms", scenario.body_bytes, "-p", 1000,
                "-st", SLOTS, "-mt", PER_SLOT, "-sd", 1000], heap_mb=1024),
            deadline_s, on_send, cwd=tools.client.work_dir)
        consumer.join(deadline_s + 60)
    finally:
        record.update(pss.stop())
    record.update(_figures(sent, consumed, messages))
    _judge(record, producer, consumer_run, broker)
    if "error" not in record and {"warmup_done", "measure_end"} <= set(snapshots):
        record["cpu"] = bench_sample.window_figures(snapshots["warmup_done"],
                                                    snapshots["measure_end"], messages)
        record["window_messages"] = messages
    return record


def _judge(record: dict, producer, consumer_run: list, broker) -> None:
    """Set record["error"] when the run cannot be counted."""
    exited = broker.exited()
    if exited:
        record["error"] = exited
    elif record.get("lateness_avg_ms") is not None and record["lateness_avg_ms"] < 0:
        record["error"] = (f"{record['broker']} delivered timer messages before they were due "
                           f"(mean lateness {record['lateness_avg_ms']:.0f} ms)")
    elif record.get("failed"):
        record["error"] = f"TimerProducer reported {record['failed']} failed sends\n" \
            + producer.stdout[-1200:]
    elif not record.get("tps"):
        tail = (consumer_run[0].stdout[-600:] if consumer_run else "") + producer.stdout[-600:]
        record["error"] = ("TimerConsumer reported no full period of deliveries "
                           f"({len(record.get('consumer_reports', []))} reports)\n"
                           + producer.stderr_tail[-1200:] + "\n" + tail)
