# Python calls, C calls, loop turns and system calls per POP and per ACK of a real remoting worker.
"""Count what a remoting worker does per POP_MESSAGE and per ACK_MESSAGE (issue #24 item 8).

Wall-clock figures on the shared 2-core box are noise; counts are not. This starts
``pybroker standalone`` from this checkout with one remoting worker, a topic of 8 queues and a
backlog of 128 B messages, then drives one of two loads from this process with pybroker's own
client (the requests as the Java 5.3.3 client sends them):

* ``consume`` (the push consumer in POP mode): POP_MESSAGE of every queue (queueId -1, 32
  messages), then an ACK_MESSAGE per message, all in flight together on one connection (the
  20 consume threads of the Java consumer ack one by one, concurrently);
* ``roundtrip``: POP of one message, then its ACK, one at a time.

Around the measured rounds the worker's main thread runs a profile hook (``sys.setprofile``,
switched on and off by SIGUSR2 through a ``sitecustomize`` module this tool puts first on the
broker's PYTHONPATH; forked workers inherit it) that counts every Python call, every C call,
the event loop's callbacks run (``Handle._run``) and its turns (``_run_once``), the loop's and
the standard library's included; ``strace -c -f`` of the worker counts its system calls over the
same rounds when strace is on the PATH. Printed per POP request, per ACK request and per
consumed message, with ``--top N`` the N Python functions called most.

``--cpu-rounds N`` then runs N more rounds without hook and strace and prints the worker's CPU
time per message (psutil): an indication only on a shared box.

Usage: ``python tools/count_pop_calls.py [--load consume|roundtrip] [--rounds 40]
[--top 25] [--cpu-rounds 200]`` (about a minute).
"""
import argparse
import asyncio
import contextlib
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

import psutil

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_brokers as bb  # noqa: E402  (tools/ is not a package)

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOPIC = "CountPopTopic"
GROUP = "CountPopGroup"
QUEUES = 8
BODY = b"x" * 128
TOGGLE = signal.SIGUSR2
ENV_DIR = "PYBROKER_COUNT_DIR"
_HOOK = r'''
import collections, json, os, signal, sys

_out = os.environ.get("PYBROKER_COUNT_DIR")  # tidy: allow
if _out:
    _state = {"on": False}
    _calls = collections.Counter()
    _c_calls = collections.Counter()

    def _hook(frame, event, arg):
        if event == "call":
            code = frame.f_code
            _calls[(code.co_filename, code.co_firstlineno, code.co_name)] += 1
        elif event == "c_call":
            _c_calls[getattr(arg, "__qualname__", repr(arg))] += 1

    def _toggle(signum, frame):
        if not _state["on"]:
            _calls.clear()
            _c_calls.clear()
            _state["on"] = True
            sys.setprofile(_hook)
            return
        sys.setprofile(None)
        _state["on"] = False
        python = [[f"{name} ({os.path.basename(path)}:{line})", count]
                  for (path, line, name), count in _calls.most_common()]
        turns = sum(count for (path, line, name), count in _calls.items()
                    if name == "_run_once" and path.endswith("base_events.py"))
        handles = sum(count for (path, line, name), count in _calls.items()
                      if name == "_run" and path.endswith("events.py"))
        with open(os.path.join(_out, f"counts-{os.getpid()}.json"), "w") as handle:
            json.dump({"python": sum(_calls.values()), "c": sum(_c_calls.values()),
                       "turns": turns, "handles": handles, "top": python[:200],
                       "top_c": _c_calls.most_common(60)}, handle)

    signal.signal(signal.SIGUSR2, _toggle)
'''
_STRACE_LINE = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", re.M)


def child_process(broker: bb.PyBroker, prefix: str) -> psutil.Process:
    """The one process of the running ``broker`` whose name starts with ``prefix``."""
    assert broker.process is not None, "the broker is started"
    root = psutil.Process(broker.process.pid)
    found = [child for child in root.children(recursive=True)
             if child.name().startswith(prefix)]
    if len(found) != 1:
        raise RuntimeError(f"expected one {prefix} process, found {len(found)}")
    return found[0]


async def _fill(namesrv: str, messages: int, topic: str = TOPIC) -> None:
    from pybroker.client import Message, Producer
    producer = Producer("CountPopProducer", namesrv)
    await producer.start()
    try:
        for _ in range(messages // 32):
            await producer.send_batch([Message(topic, BODY) for _ in range(32)])
    finally:
        await producer.shutdown()


class _Load:
    """The client side: a ClientInstance and the POP/ACK requests of one load."""

    def __init__(self, namesrv: str, address: str, kind: str):
        from pybroker.client import ClientInstance
        self.instance = ClientInstance(namesrv)
        self.address, self.kind = address, kind
        self.pops = self.acks = self.messages = 0

    async def round(self) -> None:
        from pybroker.client import popping
        max_nums = 32 if self.kind == "consume" else 1
        result = await popping.pop_messages(self.instance, self.address, "broker-a", GROUP,
                                            TOPIC, queue_id=-1, max_nums=max_nums,
                                            poll_time_ms=0, init_mode=1)
        self.pops += 1
        self.messages += len(result.messages)
        if self.kind == "consume":
            await asyncio.gather(*(popping.ack_message(self.instance, self.address, GROUP,
                                                       message)
                                   for message in result.messages))
        else:
            for message in result.messages:
                await popping.ack_message(self.instance, self.address, GROUP, message)
        self.acks += len(result.messages)


def _strace(pid: int, out: pathlib.Path):
    if not bb.shutil.which("strace"):
        return None
    process = subprocess.Popen(["strace", "-c", "-f", "-p", str(pid), "-o", str(out)],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    time.sleep(0.5)         # attached
    return process


def _syscalls(out: pathlib.Path) -> tuple[int, dict]:
    text = out.read_text() if out.exists() else ""
    per_call = {name: int(count) for count, name in _STRACE_LINE.findall(text)
                if name != "total"}
    return sum(per_call.values()), per_call


async def hooked(worker: psutil.Process, out_dir: pathlib.Path, name: str, phase) -> dict:
    """Await ``phase()`` with the hook on in ``worker`` (and strace on it when there is one):
    ``{"counts", "syscalls", "syscalls_by_name"}``."""
    strace_out = out_dir / f"strace-{name}.txt"
    tracer = _strace(worker.pid, strace_out)
    os.kill(worker.pid, TOGGLE)
    await asyncio.sleep(0.2)                    # the hook is on before the first request
    await phase()
    await asyncio.sleep(0.2)                    # the last answers' completions ran
    os.kill(worker.pid, TOGGLE)
    return collected(out_dir, name, worker.pid, tracer)


def collected(out_dir: pathlib.Path, name: str, pid: int, tracer) -> dict:
    """After the hook of process ``pid`` was switched off: its counts (it writes them to
    ``counts-<pid>.json``; waited for, up to 10 s, then taken away) and, when ``tracer`` (the
    strace of ``strace-<name>.txt``) runs, its system calls, the tracer stopped:
    ``{"counts", "syscalls", "syscalls_by_name"}``. The count_*_calls tools share it."""
    counts_path = out_dir / f"counts-{pid}.json"
    deadline = time.monotonic() + 10
    while not counts_path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)          # (a load's loop waits too: its load has ended)
    if tracer is not None:
        tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=10)
    counts = json.loads(counts_path.read_text())
    counts_path.unlink()
    calls, per_call = _syscalls(out_dir / f"strace-{name}.txt") if tracer is not None \
        else (0, {})
    return {"counts": counts, "syscalls": calls, "syscalls_by_name": per_call}


async def _measure(broker: bb.PyBroker, worker: psutil.Process, kind: str, rounds: int,
                   cpu_rounds: int, out_dir: pathlib.Path) -> dict:
    load = _Load(broker.namesrv_addr, broker.broker_addr, kind)
    await load.instance.start()
    try:
        for _ in range(5):                      # warm: slots cached, connection open
            await load.round()
        load.pops = load.acks = load.messages = 0

        async def phase():
            for _ in range(rounds):
                await load.round()
        result = await hooked(worker, out_dir, "pop", phase)
        hooked_counts = (load.pops, load.acks, load.messages)
        cpu_s = 0.0
        if cpu_rounds:                          # without the hook and strace: CPU seconds
            before = sum(worker.cpu_times()[:2])
            for _ in range(cpu_rounds):
                await load.round()
            cpu_s = sum(worker.cpu_times()[:2]) - before
        cpu_messages = load.messages - hooked_counts[2]
    finally:
        await load.instance.shutdown()
    pops, acks, messages = hooked_counts
    return {"load": kind, "pops": pops, "acks": acks, "messages": messages, **result,
            "cpu_messages": cpu_messages,
            "cpu_us_per_message": cpu_s * 1e6 / cpu_messages if cpu_messages else None}


def _report(result: dict, top: int) -> None:
    counts, pops, messages = result["counts"], result["pops"], result["messages"]
    requests = pops + result["acks"]
    print(f"load {result['load']}: {pops} POPs, {result['acks']} ACKs, {messages} messages "
          f"(worker main thread, loop included; 0.2 s idle either side)")
    for label, total in (("Python calls", counts["python"]), ("C calls", counts["c"]),
                         ("loop turns", counts["turns"]), ("callbacks run", counts["handles"]),
                         ("system calls", result["syscalls"])):
        print(f"  {label:14s} {total:9d}  per request {total / requests:8.1f}  per message "
              f"{total / max(1, messages):8.1f}")
    if result["cpu_us_per_message"] is not None:
        print(f"  worker CPU (psutil, no hook, {result['cpu_messages']} more messages; an "
              f"indication on a shared box): {result['cpu_us_per_message']:.1f} us per message")
    print_busiest(result["syscalls_by_name"])
    print_top(counts, top, messages)


def print_busiest(syscalls_by_name: dict) -> None:
    """The six system calls made most."""
    busiest = sorted(syscalls_by_name.items(), key=lambda item: -item[1])[:6]
    if busiest:
        print("  system calls by name: " + ", ".join(f"{name} {count}" for name, count
                                                      in busiest))


def print_top(counts: dict, top: int, messages: int) -> None:
    """The ``top`` Python and C functions of a hook's ``counts``, calls per message."""
    if not top:
        return
    print(f"  top {top} Python functions (calls per message):")
    for name, count in counts["top"][:top]:
        print(f"    {count / max(1, messages):8.3f}  {name}")
    print(f"  top {top} C functions (calls per message):")
    for name, count in counts["top_c"][:top]:
        print(f"    {count / max(1, messages):8.3f}  {name}")


@contextlib.contextmanager
def hooked_broker(prefix: str, topic: str, queues: int, hook: str = _HOOK, **conf: str):
    """``(broker, work_dir)``: a one-worker ASYNC_FLUSH broker of this checkout (``conf``: more
    broker.conf settings), started, with ``topic`` of ``queues`` queues, whose processes load
    ``hook`` as their sitecustomize (this tool's profile hook by default: SIGUSR2 toggles it;
    counts-<pid>.json land in ``work_dir``, the hook's PYBROKER_COUNT_DIR); stopped and
    removed after."""
    with tempfile.TemporaryDirectory(prefix=prefix) as work:
        work_dir = pathlib.Path(work)
        hook_dir = work_dir / "hook"
        hook_dir.mkdir()
        (hook_dir / "sitecustomize.py").write_text(hook)
        os.environ["PYTHONPATH"] = f"{hook_dir}{os.pathsep}{ROOT}"   # tidy: allow
        os.environ[ENV_DIR] = str(work_dir)                          # tidy: allow
        bb.use_pybroker(bb.PyBrokerInstall((sys.executable, "-m", "pybroker"), "checkout",
                                           str(ROOT / "pybroker"), ()))
        conf = dict(bb.shared_broker_conf("ASYNC_FLUSH"), remotingWorkers="1",
                    grpcServerPort=str(bb.jr.free_port()), **conf)   # not the default 8081
        broker = bb.PyBroker(work_dir / "broker", conf)
        try:
            broker.start()
            bb.create_topic(broker, topic, queues)
            yield broker, work_dir
        finally:
            broker.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", choices=("consume", "roundtrip"), default="consume")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--top", type=int, default=0)
    parser.add_argument("--cpu-rounds", type=int, default=0,
                        help="then this many rounds without the hook for the worker's CPU")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="write the result here")
    args = parser.parse_args()
    with hooked_broker("count-pop-", TOPIC, QUEUES) as (broker, work_dir):
        backlog = (args.rounds + args.cpu_rounds + 10) * \
            (32 if args.load == "consume" else 1) + 1024
        asyncio.run(_fill(broker.namesrv_addr, backlog))
        result = asyncio.run(_measure(broker, child_process(broker, "pb-remoting"), args.load,
                                      args.rounds, args.cpu_rounds, work_dir))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    _report(result, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
