# Where a POP-then-ACK round trip's CPU goes, per broker process: perf stat, perf record, strace.
"""CPU per POP-then-ACK round trip of every broker process, from the kernel's own counters.

Starts the one-worker broker of ``tools/count_pop_calls.py`` (its backlog, its ``roundtrip``
load: pybroker's client POPs one message of an 8-queue topic and ACKs it, one at a time), warms
up, then for ``--seconds`` runs round trips while ``perf stat -e task-clock,context-switches,
cpu-migrations,page-faults`` watches each broker process (``pb-*``: remoting worker, appender,
dispatcher, timer, flusher, supervisor, ...). Printed per round trip and per process: CPU µs
(task-clock, and psutil's user + system over the same phase), context switches, migrations,
page faults. With ``--record NAME`` it records that process's stacks (``perf record -g``,
kernel included) over a second phase of the same length and prints ``perf report --no-children
--sort dso,symbol``'s top lines; with ``--strace NAME`` it counts that process's system calls
(``strace -c -f``) over a third phase.

Counts and CPU per round trip, not rates: the client shares the box's two cores, and the rate
is printed only to say how many round trips the figures are over.

Usage: ``python tools/pop_cpu.py [--seconds 20] [--record remoting] [--strace timer]``.
"""
import argparse
import asyncio
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

import psutil

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import count_pop_calls as cpc  # noqa: E402  (tools/ is not a package)

EVENTS = ("task-clock", "context-switches", "cpu-migrations", "page-faults")
_PERF_CSV = re.compile(r"^([\d.]+),[^,]*,([\w-]+)", re.M)


def broker_processes(broker) -> dict[str, psutil.Process]:
    """Every ``pb-<name>`` process of the running broker, by ``<name>``."""
    root = psutil.Process(broker.process.pid)
    found = {}
    for child in [root, *root.children(recursive=True)]:
        name = child.name()
        if name.startswith("pb-"):
            found[name[3:]] = child
    return found


def _stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGINT)
    process.wait(timeout=30)


async def _run_for(load, seconds: float) -> int:
    """Round trips of ``load`` for ``seconds``: how many."""
    done = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        await load.round()
        done += 1
    return done


async def _stat_phase(load, processes: dict, seconds: float, out: pathlib.Path) -> dict:
    stats = {}
    for name, process in processes.items():
        path = out / f"stat-{name}.csv"
        stats[name] = (path, subprocess.Popen(
            ["perf", "stat", "-x", ",", "-e", ",".join(EVENTS), "-p", str(process.pid),
             "-o", str(path)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL))
    await asyncio.sleep(0.5)                    # attached
    cpu_before = {name: sum(p.cpu_times()[:2]) for name, p in processes.items()}
    rounds = await _run_for(load, seconds)
    cpu_after = {name: sum(p.cpu_times()[:2]) for name, p in processes.items()}
    result = {}
    for name, (path, perf) in stats.items():
        _stop(perf)
        values = {event: float(value) for value, event in _PERF_CSV.findall(path.read_text())}
        result[name] = {"task_clock_us": values.get("task-clock", 0.0) * 1e3 / rounds,
                        "psutil_us": (cpu_after[name] - cpu_before[name]) * 1e6 / rounds,
                        **{event: values.get(event, 0.0) / rounds for event in EVENTS[1:]}}
    return {"rounds": rounds, "seconds": seconds, "per_process": result}


async def _record_phase(load, process, seconds: float, out: pathlib.Path) -> str:
    data = out / "perf.data"
    perf = subprocess.Popen(["perf", "record", "-g", "-F", "2000", "-p", str(process.pid),
                             "-o", str(data)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    await asyncio.sleep(0.5)
    rounds = await _run_for(load, seconds)
    _stop(perf)
    tables = [f"{rounds} round trips"]
    for sort, top in (("dso", 12), ("dso,symbol", 45)):
        report = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort",
                                 sort, "--stdio", "-g", "none"], capture_output=True,
                                text=True, check=False).stdout
        tables += [line.rstrip()[:110] for line in report.splitlines()
                   if line.strip() and not line.startswith("#")][:top]
    return "\n".join(tables)


async def _strace_phase(load, process, seconds: float, out: pathlib.Path) -> str:
    path = out / "strace.txt"
    tracer = cpc._strace(process.pid, path)
    if tracer is None:
        return "no strace on this machine"
    rounds = await _run_for(load, seconds)
    _stop(tracer)
    return f"{rounds} round trips\n" + path.read_text()


async def _measure(broker, args, out: pathlib.Path) -> None:
    load = cpc._Load(broker.namesrv_addr, broker.broker_addr, "roundtrip")
    await load.instance.start()
    try:
        await _run_for(load, 2.0)               # warm: slots cached, connection open
        processes = broker_processes(broker)
        stat = await _stat_phase(load, processes, args.seconds, out)
        print(f"{stat['rounds']} round trips in {args.seconds:.0f} s; per round trip:")
        print(f"  {'process':14s} {'task-clock us':>13s} {'psutil us':>10s} {'ctx sw':>7s} "
              f"{'migr':>6s} {'faults':>7s}")
        rows = sorted(stat["per_process"].items(), key=lambda item: -item[1]["task_clock_us"])
        for name, row in rows:
            print(f"  {name:14s} {row['task_clock_us']:13.1f} {row['psutil_us']:10.1f} "
                  f"{row['context-switches']:7.2f} {row['cpu-migrations']:6.2f} "
                  f"{row['page-faults']:7.2f}")
        total = sum(row["task_clock_us"] for row in stat["per_process"].values())
        print(f"  {'all':14s} {total:13.1f}")
        if args.record:
            print(f"perf record of {args.record}:")
            print(await _record_phase(load, cpc.child_process(broker, f"pb-{args.record}"),
                                      args.seconds, out))
        if args.strace:
            print(f"strace -c -f of {args.strace}:")
            print(await _strace_phase(load, cpc.child_process(broker, f"pb-{args.strace}"),
                                      args.seconds, out))
    finally:
        await load.instance.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--record", default=None, help="a process name: remoting, appender...")
    parser.add_argument("--strace", default=None, help="a process name: remoting, appender...")
    args = parser.parse_args()
    phases = 1 + bool(args.record) + bool(args.strace)
    backlog = int(args.seconds * phases * 2000) + 10_000    # above any one-thread rate here
    with cpc.hooked_broker("pop-cpu-", cpc.TOPIC, cpc.QUEUES) as (broker, _work_dir):
        asyncio.run(cpc._fill(broker.namesrv_addr, backlog))
        with tempfile.TemporaryDirectory(prefix="pop-cpu-out-") as out:
            asyncio.run(_measure(broker, args, pathlib.Path(out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
