# Controller mode, measured: failover time and send TPS with allAckInSyncStateSet, side by side.
"""Failover time and send TPS of a two-broker set in controller mode, pybroker vs Java 5.3.3.

    python tools/bench_controller.py                              # both kinds, 60 s, 3 rounds
    python tools/bench_controller.py --brokers pybroker --duration 10 --warmup 2 --failovers 1

Each kind gets the same set-up: Apache's controller 5.3.3 (one node), a pybroker NameServer and
a broker set of two brokers of that kind with allAckInSyncStateSet=true and the timeouts of
``pybroker/_testbase/controller_cluster.py`` (so a SEND_OK means both brokers have the
message). Send TPS: tools/java_bench BenchProducer (the official Java client 4.9.8, routes from
the NameServer), ``--threads`` senders of ``--size`` bytes for ``--duration`` seconds, the
first ``--warmup`` discarded: 30 s by default, as Java 5.3.3's per-second TPS (broker and
client JIT) was still climbing 20 s into a run (1,200-2,500/s in seconds 5-9, 7,600-11,000/s
in seconds 17-20 of benchmarks/results/20261205-185246-controller.json; pybroker's showed
no trend). The measured window's per-second series is checked: when its last third averages
more than 15 % above its first, the result says ``tps_still_rising`` (the warm-up was too
short for that kind) and a warning is printed.
Failover: while SendLoad's 64 senders write (to a topic of their own), the master is killed
with -9; the failover time is from the kill to the first SEND_OK answered by the other broker
(probed directly every 10 ms). Then every message acknowledged so far (by either broker) is
counted back on the new master (``controller_cluster.count_back``, the CI failover tests'
count: raw pulls of every queue) and reported as lost/acknowledged for that failover; the
killed broker is started again and must rejoin the SyncStateSet before the next round.
Results: benchmarks/results/<timestamp>-controller.json and a table on stdout; the exit
status is 1 when a count-back missed an acknowledged message. Everything started is stopped
on exit. Measure on a quiet machine (docs/benchmarks.md says how the lead's runs are
scheduled).
"""
import argparse
import datetime
import json
import pathlib
import statistics
import sys
import tempfile
import time
import types

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import bench_brokers as bb  # noqa: E402
import bench_load  # noqa: E402
import java_rocketmq as jr  # noqa: E402

from pybroker._testbase import controller_cluster as cc  # noqa: E402
from pybroker._testbase.ha_cluster import BrokerProcess, NameServerProcess  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
GROUP = "broker-a"
TOPIC = "CtrlBenchTopic"
FAILOVER_TOPIC = "CtrlBenchFailoverTopic"
FAILOVER_QUEUES = 4
RISING_RATIO = 1.15           # last third of the window over its first: still warming up
KINDS = ("pybroker", "java-5.3.3")


class _PyMember:
    def __init__(self, work_dir, namesrv, controller):
        self.broker = BrokerProcess(work_dir, namesrv.address,
                                    dict(cc.CONTROLLER_TEST_PROFILE, brokerName=GROUP,
                                         controllerAddr=controller.address))
        self.address = self.broker.address

    def start(self) -> None:
        self.broker.start()

    def kill(self) -> None:
        self.broker.kill()


class _JavaMember:
    def __init__(self, work_dir, namesrv, controller, install):
        self.broker = jr.JavaRocketMQ(
            work_dir, install, free_ports=True, own_namesrv=False, broker_heap_mb=1024,
            broker_overrides=jr.controller_broker_overrides(
                controller.address, brokerName=GROUP, **cc.JAVA_CONTROLLER_TEST_PROFILE))
        self.broker.namesrv_port = namesrv.port
        self.broker.broker_namesrv_addr = namesrv.address
        self.address = self.broker.broker_addr

    def start(self) -> None:
        killed = self.broker.processes.pop("broker", None)
        if killed is not None:
            killed.wait(30)
        self.broker.start(detach=True)

    def kill(self) -> None:
        self.broker.kill("broker")

    def stop(self) -> None:
        self.broker.stop()


def _send_tps(args, tools, namesrv) -> dict:
    argv = tools.java_argv(bench_load.PRODUCER_CLASS, [
        "-n", namesrv.address, "-t", TOPIC, "-w", args.threads, "-s", args.size,
        "-T", args.duration, "-W", args.warmup], heap_mb=1024)
    result = bench_load.parse_result_line(bb.run_bounded(argv, args.duration + 120).stdout)
    if not result:
        raise jr.HarnessError("BenchProducer printed no result")
    result["tps_trend"] = _trend(result.get("tps_per_second") or [])
    result["tps_still_rising"] = result["tps_trend"] is not None and \
        result["tps_trend"] > RISING_RATIO
    return result


def _trend(series: list) -> float | None:
    """Mean of the last third of a per-second series over the mean of its first third (None
    for fewer than 3 seconds or an idle first third)."""
    third = len(series) // 3
    if third == 0:
        return None
    first, last = statistics.mean(series[:third]), statistics.mean(series[-third:])
    return round(last / first, 3) if first > 0 else None


def _failover(controller, members, load) -> tuple[dict, list[str]]:
    """One kill -9 of the master: the time to the other broker's first SEND_OK, then the
    count-back of everything acknowledged so far (earlier rounds included) on it; the round's
    row and the keys missing."""
    info = cc.wait_for_master(controller.address, GROUP, 120, members={1, 2})
    master = next(m for m in members if m.address == info["master_address"])
    other = next(m for m in members if m is not master)
    load.wait_acked(load.acked_count() + 500, 60)
    killed_at = time.monotonic()
    master.kill()
    elapsed = time.monotonic() - killed_at
    failover_s = elapsed + cc.first_send_ok(other.address, FAILOVER_TOPIC, 60)
    counted = cc.count_back(other.address, FAILOVER_TOPIC, FAILOVER_QUEUES, load.acked_keys())
    print(f"  failover: {failover_s:.3f} s; {counted.line()}", flush=True)
    master.start()
    return {"failover_s": failover_s, "new_master": other.address,
            "acknowledged": counted.acknowledged, "lost": len(counted.missing),
            "lost_keys": counted.missing[:20]}, counted.missing


def _failovers(args, controller, members) -> tuple[list[dict], int]:
    """The rounds' rows and the number of acknowledged messages missing in any count-back."""
    rounds, lost = [], set()
    load = cc.SendLoad(controller.address, GROUP, FAILOVER_TOPIC, FAILOVER_QUEUES, senders=64,
                       pace_s=0.02).start()
    try:
        for _ in range(args.failovers):
            row, missing = _failover(controller, members, load)
            rounds.append(row)
            lost.update(missing)
    finally:
        load.stop()
    return rounds, len(lost)


def measure(kind: str, args, work: pathlib.Path, installs: dict, tools) -> dict:
    controller = jr.JavaController(work / "controller", installs["5.3.3"],
                                   overrides=cc.CONTROLLER_CONF).start()
    namesrv = NameServerProcess(work / "namesrv").start()
    members: list = []
    try:
        for index in range(2):
            member = _PyMember(work / f"b{index}", namesrv, controller) if kind == "pybroker" \
                else _JavaMember(work / f"b{index}", namesrv, controller, installs["5.3.3"])
            members.append(member)
            member.start()
            cc.wait_for_master(controller.address, GROUP, 120)
        info = cc.wait_for_master(controller.address, GROUP, 120, members={1, 2})
        master = types.SimpleNamespace(broker_addr=info["master_address"],
                                       namesrv_addr=namesrv.address)
        bb.create_topic(master, TOPIC, 8)
        bb.create_topic(master, FAILOVER_TOPIC, FAILOVER_QUEUES)
        tps = _send_tps(args, tools, namesrv)
        print(f"{kind}: send TPS {tps.get('send_tps')} (allAckInSyncStateSet, 2 replicas)",
              flush=True)
        if tps["tps_still_rising"]:
            print(f"{kind}: warning: TPS still rising through the window (last third "
                  f"{tps['tps_trend']}x the first): --warmup {args.warmup} is too short",
                  flush=True)
        rounds, lost = _failovers(args, controller, members)
        times = [round_["failover_s"] for round_ in rounds]
        return {"kind": kind, "send": tps, "failovers": rounds, "failover_s": times,
                "failover_median_s": statistics.median(times) if times else None,
                "lost": lost}
    finally:
        for member in members:
            member.kill()
            if isinstance(member, _JavaMember):
                member.stop()
        namesrv.kill()
        controller.stop()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", default=",".join(KINDS), help="pybroker,java-5.3.3")
    parser.add_argument("--duration", type=int, default=60,
                        help="TPS run, seconds (the warm-up included)")
    parser.add_argument("--warmup", type=int, default=30,
                        help="discarded first seconds of the TPS run (Java's JIT)")
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--size", type=int, default=128, help="message body bytes")
    parser.add_argument("--failovers", type=int, default=3)
    parser.add_argument("--out", default=None, help="result JSON (default benchmarks/results)")
    return parser


def _table(results: list[dict]) -> str:
    lines = ["| broker | send TPS | TPS trend | failover s (lost/acknowledged so far) | "
             "median s | lost |", "|---|---:|---:|---|---:|---:|"]
    for result in results:
        send = result["send"]
        rounds = ", ".join(f"{r['failover_s']:.3f} ({r['lost']}/{r['acknowledged']})"
                           for r in result["failovers"])
        median = result["failover_median_s"]
        lines.append(f"| {result['kind']} | {send.get('send_tps')} | {send.get('tps_trend')}"
                     f"{' rising' if send.get('tps_still_rising') else ''} | {rounds} | "
                     f"{'-' if median is None else f'{median:.3f}'} | {result['lost']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.duration <= args.warmup:
        parser.error(f"--duration {args.duration} leaves nothing after --warmup {args.warmup}")
    kinds = [kind for kind in args.brokers.split(",") if kind]
    installs = {version: jr.RocketMQInstall(version) for version in ("4.9.8", "5.3.3")}
    for install in installs.values():
        install.install()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-controller-") as root:
        tools = bench_load.LoadTools(pathlib.Path(root) / "tools", installs["4.9.8"])
        for kind in kinds:
            results.append(measure(kind, args, pathlib.Path(root) / kind, installs, tools))
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = pathlib.Path(args.out) if args.out else RESULTS_DIR / f"{stamp}-controller.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"settings": vars(args), "results": results}, indent=1))
    print(_table(results))
    print(f"results: {out}")
    return 1 if any(result["lost"] for result in results) else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        bb.stop_all()
