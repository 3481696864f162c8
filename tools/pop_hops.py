# Where a POP-then-ACK round trip waits: the hops between worker, appender and client, timed.
"""Split one-thread POP-then-ACK round trips into the hops they wait on (issue #28).

Starts the one-worker broker of ``tools/count_pop_calls.py`` (its backlog, its ``roundtrip``
load: POP one message of an 8-queue topic, ACK it, one at a time, with pybroker's client as the
Java 5.3.3 client sends them) with another sitecustomize hook: on SIGUSR2 every broker process
wraps a few functions with a CLOCK_MONOTONIC stamp (the clock is the box's, so the worker's and
the appender's stamps compare), on the next SIGUSR2 it unwraps them and writes its stamps.
Each round trip is then cut at:

* worker: the POP's dispatch (``RequestTable.__call__``), its appender wake-up
  (``WakeFd.signal``), the completion's Python (``RingPutter.answer`` / ``on_wake``), the run
  resumed after the check-point put (``_QueuePop.finish``), the answer's write (``os.writev``
  or the transport's ``write``); the ACK's take (``AckFrameTaker.take``), its wake-up, its
  completion, its answer's write;
* appender: the drain's start (``_Appender.drain``) and its first signal (the completion).

Each wrapper adds about a microsecond; the client side is pybroker's Python client, not Java's.
Medians and 90th percentiles per hop, in µs. Scratch-grade by design: it names private
functions, so a rename shows as hops with no samples, never as wrong figures.

Usage: ``python tools/pop_hops.py [--rounds 1000] [--json FILE]`` (about half a minute).
"""
import argparse
import asyncio
import json
import os
import pathlib
import signal
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import count_pop_calls as cpc  # noqa: E402  (tools/ is not a package)

_HOOK = r'''
import json, os, signal, sys, time
_out = os.environ.get("PYBROKER_COUNT_DIR")  # tidy: allow
if _out:
    _stamps = []
    _state = {"on": False, "undo": []}
    _now = time.monotonic_ns

    def _wrap(owner, name, label, after=False, arg=None):
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        def wrapper(*args, **kwargs):
            if not after:
                _stamps.append((_now(), label, arg(args) if arg else None))
                return original(*args, **kwargs)
            result = original(*args, **kwargs)
            _stamps.append((_now(), label, None))
            return result
        setattr(owner, name, wrapper)
        _state["undo"].append((owner, name, original))

    def _install():
        mods = sys.modules
        if "pybroker.remoting.server" in mods:
            _wrap(mods["pybroker.remoting.server"].RequestTable, "__call__", "request",
                  arg=lambda a: a[2].code)
        if "pybroker.proc.ack_port" in mods:
            _wrap(mods["pybroker.proc.ack_port"].AckFrameTaker, "take", "ack_take")
        if "pybroker.proc.wake" in mods:
            _wrap(mods["pybroker.proc.wake"].WakeFd, "signal", "signal")
        if "pybroker.proc.appender" in mods:
            _wrap(mods["pybroker.proc.appender"]._Appender, "drain", "drain")
        if "pybroker.proc.ring_putter" in mods:
            putter = mods["pybroker.proc.ring_putter"].RingPutter
            _wrap(putter, "on_wake", "completion")
            _wrap(putter, "answer", "completion")
        if "pybroker.broker.pop.pop_message" in mods:
            _wrap(mods["pybroker.broker.pop.pop_message"]._QueuePop, "finish", "resumed")
        if "pybroker.remoting.write_queue" in mods:
            import asyncio.selector_events as selector_events
            _wrap(os, "writev", "written", after=True)
            _wrap(selector_events._SelectorSocketTransport, "write", "written", after=True)

    def _toggle(signum, frame):
        if not _state["on"]:
            _stamps.clear()
            _install()
            _state["on"] = True
            return
        for owner, name, original in reversed(_state["undo"]):
            setattr(owner, name, original)
        _state["undo"].clear()
        _state["on"] = False
        with open("/proc/self/comm") as comm:
            name = comm.read().strip()
        with open(os.path.join(_out, f"hops-{os.getpid()}.json"), "w") as handle:
            json.dump({"name": name, "stamps": _stamps}, handle)

    signal.signal(signal.SIGUSR2, _toggle)
'''
POP_MESSAGE = 200050
# (hop, process of its end, label of its end): each starts where the one before ended.
HOPS = (("pop: request -> check-point put, appender signalled", "worker", "signal"),
        ("pop: signal -> appender's drain starts", "appender", "drain"),
        ("pop: the drain (append, publish) -> completion signalled", "appender", "signal"),
        ("pop: completion signalled -> worker reads it", "worker", "completion"),
        ("pop: completion read -> POP run resumed", "worker", "resumed"),
        ("pop: resumed -> answer written", "worker", "written"),
        ("client: POP answer -> ACK taken", "worker", "ack_take"),
        ("ack: taken -> ack put, appender signalled", "worker", "signal"),
        ("ack: signal -> appender's drain starts", "appender", "drain"),
        ("ack: the drain -> completion signalled", "appender", "signal"),
        ("ack: completion signalled -> worker reads it", "worker", "completion"),
        ("ack: completion read -> answer written", "worker", "written"))


def _next(stamps: list, after: int, label: str) -> int | None:
    for stamp, name, _ in stamps:
        if stamp >= after and name == label:
            return stamp
    return None


def split(worker: list, appender: list) -> dict[str, list[float]]:
    """Each hop's durations in µs, from the worker's and the appender's stamps; a round trip
    whose chain of stamps is incomplete or out of order (a wake-up not needed: the appender
    was awake) is left out."""
    streams = {"worker": worker, "appender": appender}
    pops = [stamp for stamp, name, code in worker if name == "request" and code == POP_MESSAGE]
    hops: dict[str, list[float]] = {name: [] for name, _, _ in HOPS}
    hops["client: ACK answer -> next POP request"] = []
    hops["round trip"] = []
    for start, next_pop in zip(pops, pops[1:], strict=False):
        chain: list[int] = [start]
        for _, process, label in HOPS:
            found = _next(streams[process], chain[-1], label)
            if found is None:
                break
            chain.append(found)
        else:
            chain.append(next_pop)
            if chain == sorted(chain):
                # 13 intervals: every hop but the whole round trip, counted below.
                for name, begin, end in zip(hops, chain, chain[1:], strict=False):
                    hops[name].append((end - begin) / 1000)
                hops["round trip"].append((next_pop - start) / 1000)
    return hops


async def _measure(rounds: int) -> tuple[dict, float]:
    with cpc.hooked_broker("pop-hops-", cpc.TOPIC, cpc.QUEUES, hook=_HOOK) as (broker, work):
        await cpc._fill(broker.namesrv_addr, rounds + 400)
        worker = cpc.child_process(broker, "pb-remoting")
        appender = cpc.child_process(broker, "pb-appender")
        load = cpc._Load(broker.namesrv_addr, broker.broker_addr, "roundtrip")
        await load.instance.start()
        try:
            for _ in range(100):                # warm: slots cached, connection open
                await load.round()
            for process in (worker, appender):
                os.kill(process.pid, signal.SIGUSR2)
            await asyncio.sleep(0.3)
            started = time.monotonic()
            for _ in range(rounds):
                await load.round()
            elapsed = time.monotonic() - started
            for process in (worker, appender):
                os.kill(process.pid, signal.SIGUSR2)
            stamps = {}
            for process, role in ((worker, "worker"), (appender, "appender")):
                path = work / f"hops-{process.pid}.json"
                deadline = time.monotonic() + 10
                while not path.exists() and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.1)        # written in full
                stamps[role] = json.loads(path.read_text())["stamps"]
        finally:
            await load.instance.shutdown()
    return stamps, elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--json", type=pathlib.Path, default=None, help="write the hops here")
    args = parser.parse_args()
    stamps, elapsed = asyncio.run(_measure(args.rounds))
    hops = split(stamps["worker"], stamps["appender"])
    print(f"{args.rounds} round trips in {elapsed:.2f} s ({args.rounds / elapsed:.0f}/s, "
          f"hooked); µs per hop:")
    summary = {}
    for name, values in hops.items():
        if not values:
            print(f"  {name:58s} no samples")
            continue
        values.sort()
        summary[name] = {"n": len(values), "median": statistics.median(values),
                         "p90": values[int(len(values) * 0.9)]}
        print(f"  {name:58s} n {len(values):5d}  median {summary[name]['median']:7.1f}  "
              f"p90 {summary[name]['p90']:7.1f}")
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
