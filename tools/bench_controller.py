# Controller mode, measured: failover time and send TPS with allAckInSyncStateSet, side by side.
"""Failover time and send TPS of a two-broker set in controller mode, pybroker vs Java 5.3.3.

    python tools/bench_controller.py                              # both kinds, 30 s, 3 rounds
    python tools/bench_controller.py --brokers pybroker --duration 10 --failovers 1

Each kind gets the same set-up: Apache's controller 5.3.3 (one node), a pybroker NameServer and
a broker set of two brokers of that kind with allAckInSyncStateSet=true and the timeouts of
``pybroker/_testbase/controller_cluster.py`` (so a SEND_OK means both brokers have the
message). Send TPS: tools/java_bench BenchProducer (the official Java client 4.9.8, routes from
the NameServer), ``--threads`` senders of ``--size`` bytes for ``--duration`` seconds, the
first ``--warmup`` discarded. Failover: while SendLoad's 64 senders write, the master is killed
with -9; the failover time is from the kill to the first SEND_OK answered by the other broker
(probed directly every 10 ms); the killed broker is then started again and must rejoin the
SyncStateSet before the next round. Results: benchmarks/results/<timestamp>-controller.json
and a summary on stdout. Everything started is stopped on exit. Measure on a quiet machine
(docs/benchmarks.md says how the lead's runs are scheduled).
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
    return result


def _failovers(args, controller, members) -> list[float]:
    times = []
    load = cc.SendLoad(controller.address, GROUP, TOPIC, 4, senders=64, pace_s=0.02).start()
    try:
        for _ in range(args.failovers):
            info = cc.wait_for_master(controller.address, GROUP, 120, members={1, 2})
            master = next(m for m in members if m.address == info["master_address"])
            other = next(m for m in members if m is not master)
            load.wait_acked(load.acked_count() + 500, 60)
            killed_at = time.monotonic()
            master.kill()
            elapsed = time.monotonic() - killed_at
            times.append(elapsed + cc.first_send_ok(other.address, TOPIC, 60))
            print(f"  failover {len(times)}: {times[-1]:.3f} s", flush=True)
            master.start()
    finally:
        load.stop()
    return times


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
        bb.create_topic(types.SimpleNamespace(broker_addr=info["master_address"],
                                              namesrv_addr=namesrv.address), TOPIC, 8)
        tps = _send_tps(args, tools, namesrv)
        print(f"{kind}: send TPS {tps.get('send_tps')} (allAckInSyncStateSet, 2 replicas)",
              flush=True)
        times = _failovers(args, controller, members)
        return {"kind": kind, "send": tps, "failover_s": times,
                "failover_median_s": statistics.median(times) if times else None}
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
    parser.add_argument("--duration", type=int, default=30, help="TPS run, seconds")
    parser.add_argument("--warmup", type=int, default=5, help="discarded seconds")
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--size", type=int, default=128, help="message body bytes")
    parser.add_argument("--failovers", type=int, default=3)
    parser.add_argument("--out", default=None, help="result JSON (default benchmarks/results)")
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
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
    for result in results:
        print(f"{result['kind']:>11}: send TPS {result['send'].get('send_tps')}, failover "
              f"median {result['failover_median_s']} s of {result['failover_s']}")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        bb.stop_all()
