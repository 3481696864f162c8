# Python calls, C calls, loop turns and system calls per sent message: worker, appender, dispatcher.
"""Count what the remoting worker, the appender and the dispatcher do per SEND_MESSAGE_V2 (#28).

Wall-clock figures on the shared 2-core box are noise; counts are not. This starts
``pybroker standalone`` from this checkout with one remoting worker (ASYNC_FLUSH) and a topic
of 8 queues, then keeps ``--inflight`` async SEND_MESSAGE_V2 requests in flight from this
process, spread over ``--connections`` connections, as Apache's Producer threads send them:
raw frames with the one-letter header names and a JSON header (``--encoding rocketmq`` for the
binary one), each answer followed at once by the next send (a sliding window), one write per
request as each producer thread writes its own (``--batched``: the next sends of one read in
one write).

Around the measured sends the worker's, the appender's and the dispatcher's main threads run
the profile hook of ``tools/count_pop_calls.py`` (``sys.setprofile``, switched on and off by
SIGUSR2) counting every Python call, every C call, the event loop's callbacks and turns;
``strace -c -f`` of each process counts its system calls over the same window when strace is
on the PATH. Printed per
message and per cycle: the worker's cycle is a completion wake-up (its eventfd ``read`` under
strace, else ``RingPutter.on_wake``), the appender's a ring drained
(``_Appender._drain_ring``), the dispatcher's a dispatch batch (``_dispatch_batch``: it paces
itself under load, one batch a millisecond); with ``--top N`` the N Python and C functions
called most, per message.

``--cpu-messages N`` then sends N more without hook and strace and prints each process's CPU
time per message (psutil): an indication only on a shared box; and, over the same sends, its
minor and major page faults (/proc/PID/stat) and context switches per message, which are
counts. ``--perf DIR`` samples the
three processes over those N sends (``perf record -e cpu-clock -F 2000 -g``, kernel included;
the software clock, as a VM has no cycle counter) into ``DIR/worker-<size>.data``,
``DIR/appender-<size>.data`` and ``DIR/dispatcher-<size>.data``: ``perf report -i FILE
--no-children --sort dso,sym``.

Usage: ``python tools/count_send_calls.py [--size 128] [--inflight 64] [--connections 1]
[--messages 20000] [--top 25] [--cpu-messages 100000] [--perf DIR]`` (about a minute).
"""
import argparse
import asyncio
import json
import os
import pathlib
import signal
import subprocess
import sys
import time


sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_brokers as bb  # noqa: E402  (tools/ is not a package)
import count_pop_calls as cp  # noqa: E402  (the hook and the strace reading are its)

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOPIC = "CountSendTopic"
QUEUES = 8
_FRAMES_PER_CONNECTION = 256      # distinct opaques cycled through (answers are counted)


def _frames(size: int, encoding: int, connection: int) -> list[bytes]:
    """SEND_MESSAGE_V2 frames as Apache's Producer sends them (one-letter header names)."""
    from pybroker.protocol import properties as props
    from pybroker.protocol.codes import RequestCode
    from pybroker.protocol.command import RemotingCommand, create_request, encode
    body = b"x" * size
    frames = []
    for index in range(_FRAMES_PER_CONNECTION):
        ext = {"a": "CountSendProducer", "b": TOPIC, "c": "TBW102", "d": "4",
               "e": str(index % QUEUES), "f": "0", "g": str(int(time.time() * 1000)),
               "h": "0", "i": props.encode_properties(
                   {"UNIQ_KEY": f"7F0000010000{connection:04X}{index:016X}", "WAIT": "true"}),
               "j": "0", "k": "false", "m": "false"}
        request: RemotingCommand = create_request(RequestCode.SEND_MESSAGE_V2, ext, body)
        request.opaque = connection * _FRAMES_PER_CONNECTION + index + 1
        frames.append(encode(request, encoding))
    return frames


class _Connection:
    """One connection's sliding window of sends."""

    def __init__(self, frames: list[bytes]):
        self.frames = frames
        self.next = 0
        self.sent = self.answered = self.failed = 0

    def send(self, writer, count: int, batched: bool) -> None:
        """The next ``count`` frames: one write each (as each producer thread writes its
        own request), or one write for all of them."""
        frames = []
        for _ in range(count):
            frames.append(self.frames[self.next])
            self.next = (self.next + 1) % len(self.frames)
        self.sent += count
        if batched:
            writer.write(b"".join(frames))
            return
        for frame in frames:
            writer.write(frame)

    async def run(self, address: str, window: int, total: int, batched: bool) -> None:
        from pybroker.protocol.codes import ResponseCode
        host, port = address.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            self.send(writer, min(window, total), batched)
            buffer = bytearray()
            while self.answered < total:
                data = await reader.read(1 << 16)
                if not data:
                    raise RuntimeError("the broker closed the connection")
                buffer += data
                position = answers = 0
                while len(buffer) - position >= 8:
                    length = int.from_bytes(buffer[position:position + 4], "big")
                    if len(buffer) - position < 4 + length:
                        break
                    header_length = int.from_bytes(buffer[position + 4:position + 8],
                                                   "big") & 0xFFFFFF
                    header = bytes(buffer[position + 8:position + 8 + header_length])
                    if b'"code":%d,' % ResponseCode.SUCCESS not in header and \
                            not header.startswith(b"\x00\x00"):   # JSON: code 0 / binary
                        self.failed += 1
                    position += 4 + length
                    answers += 1
                del buffer[:position]
                self.answered += answers
                more = min(answers, total - self.sent)
                if more > 0:
                    self.send(writer, more, batched)
        finally:
            writer.close()


async def _send(address: str, size: int, encoding: int, connections: int, inflight: int,
                messages: int, batched: bool) -> int:
    per_connection = messages // connections
    window = max(1, inflight // connections)
    loads = [_Connection(_frames(size, encoding, index)) for index in range(connections)]
    await asyncio.gather(*(load.run(address, window, per_connection, batched) for load in loads))
    failed = sum(load.failed for load in loads)
    if failed:
        raise RuntimeError(f"{failed} sends were not answered SUCCESS")
    return per_connection * connections


def _perf_record(pid: int, out: pathlib.Path) -> subprocess.Popen:
    """``perf record`` of ``pid`` (software clock, call graphs) into ``out``, started."""
    out.parent.mkdir(parents=True, exist_ok=True)
    sampler = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", "2000", "-g",
                                "-o", str(out), "-p", str(pid)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)                               # attached before the first send
    return sampler


def _kernel_counts(process) -> tuple[int, int, int]:
    """(minor faults, major faults, context switches) of ``process`` so far: /proc's stat
    fields 10 and 12 (the name in parentheses may hold spaces: split after its end)."""
    with open(f"/proc/{process.pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    switches = process.num_ctx_switches()
    return int(fields[7]), int(fields[9]), switches.voluntary + switches.involuntary


def _cycles(counts: dict, python_name: str, c_name: str) -> int:
    if c_name:
        return sum(count for name, count in counts["top_c"] if name == c_name)
    return sum(count for name, count in counts["top"] if name.startswith(python_name))


def _measure(broker: bb.PyBroker, args, out_dir: pathlib.Path) -> dict:
    processes = {"worker": cp.child_process(broker, "pb-remoting"),
                 "appender": cp.child_process(broker, "pb-appender"),
                 "dispatcher": cp.child_process(broker, "pb-dispatcher")}
    run = lambda messages: asyncio.run(_send(broker.broker_addr, args.size,  # noqa: E731
                                             args.encoding, args.connections, args.inflight,
                                             messages, args.batched))
    run(min(args.messages, 5000))                               # warm
    tracers = {name: cp._strace(process.pid, out_dir / f"strace-{name}.txt")
               for name, process in processes.items()}
    for process in processes.values():
        os.kill(process.pid, cp.TOGGLE)
    time.sleep(0.2)                               # the hooks are on before the first send
    messages = run(args.messages)
    time.sleep(0.2)                               # the last completions ran
    for process in processes.values():
        os.kill(process.pid, cp.TOGGLE)
    result = {"size": args.size, "inflight": args.inflight, "connections": args.connections,
              "batched": args.batched,
              "messages": messages, "processes": {}}
    for name, process in processes.items():
        result["processes"][name] = cp.collected(out_dir, name, process.pid, tracers[name])
    if args.cpu_messages:                         # without hooks and strace: CPU seconds
        samplers = {name: _perf_record(process.pid, args.perf / f"{name}-{args.size}.data")
                    for name, process in processes.items()} if args.perf else {}
        before = {name: sum(process.cpu_times()[:2]) for name, process in processes.items()}
        kernel_before = {name: _kernel_counts(process) for name, process in processes.items()}
        sent = run(args.cpu_messages)
        for sampler in samplers.values():
            sampler.send_signal(signal.SIGINT)
            sampler.wait(timeout=30)
        for name, process in processes.items():
            used = sum(process.cpu_times()[:2]) - before[name]
            result["processes"][name]["cpu_us_per_message"] = used * 1e6 / sent
            minor, major, switches = (
                after - first for after, first in
                zip(_kernel_counts(process), kernel_before[name], strict=True))
            result["processes"][name]["kernel_per_message"] = {
                "minor_faults": minor / sent, "major_faults": major / sent,
                "context_switches": switches / sent}
        result["cpu_messages"] = sent
    return result


def _report(result: dict, top: int) -> None:
    messages = result["messages"]
    writes = "one write per read" if result["batched"] else "one write per send"
    print(f"{messages} sends of {result['size']} B, {result['inflight']} in flight on "
          f"{result['connections']} connection(s), {writes} (main threads, loop included; "
          f"0.2 s idle either side)")
    cycle_of = {"worker": ("on_wake (ring_putter.py", ""),
                "appender": ("_drain_ring (appender.py", ""),
                "dispatcher": ("_dispatch_batch (dispatcher.py", "")}
    for name, figures in result["processes"].items():
        counts = figures["counts"]
        cycles = _cycles(counts, *cycle_of[name])
        if name == "worker" and figures["syscalls_by_name"].get("read"):
            # The eventfd reads, one per wake-up (sockets are read with recvfrom): most
            # wake-ups of a send load no longer call RingPutter.on_wake (the completion
            # round in C, pybroker/_fast/send/round.pyx).
            cycles = figures["syscalls_by_name"]["read"]
        reads = 0
        if name == "worker":
            # recvfrom in strace (a plain socket is read in C, out of the hook's sight), else
            # asyncio's reads into the protocol.
            reads = figures["syscalls_by_name"].get("recvfrom", 0) \
                or _cycles(counts, "buffer_updated (connection.py", "")
        print(f" {name}: {cycles} cycles ({messages / max(1, cycles):.1f} messages per cycle"
              + (f", {reads / max(1, cycles):.2f} socket reads per cycle)" if reads else ")"))
        for label, total in (("Python calls", counts["python"]), ("C calls", counts["c"]),
                             ("loop turns", counts["turns"]),
                             ("callbacks run", counts["handles"]),
                             ("system calls", figures["syscalls"])):
            print(f"  {label:14s} {total:9d}  per message {total / messages:8.2f}  per cycle "
                  f"{total / max(1, cycles):8.1f}")
        if "cpu_us_per_message" in figures:
            print(f"  CPU (psutil, no hook, {result['cpu_messages']} more messages; an "
                  f"indication on a shared box): {figures['cpu_us_per_message']:.2f} us per "
                  f"message")
            kernel = figures["kernel_per_message"]
            print(f"  the same messages: {kernel['minor_faults']:.4f} minor and "
                  f"{kernel['major_faults']:.4f} major faults, "
                  f"{kernel['context_switches']:.3f} context switches per message")
        busiest = sorted(figures["syscalls_by_name"].items(), key=lambda item: -item[1])[:6]
        if busiest:
            print("  system calls by name: " + ", ".join(
                f"{call} {count / messages:.3f}" for call, count in busiest) + " per message")
        cp.print_top(counts, top, messages)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=128, help="body bytes")
    parser.add_argument("--inflight", type=int, default=64)
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--encoding", choices=("json", "rocketmq"), default="json")
    parser.add_argument("--batched", action="store_true",
                        help="the sends after one read in one write (default: one write each)")
    parser.add_argument("--top", type=int, default=0)
    parser.add_argument("--cpu-messages", type=int, default=0,
                        help="then this many sends without the hooks for each process's CPU")
    parser.add_argument("--perf", type=pathlib.Path, default=None,
                        help="perf record both processes over the --cpu-messages sends here")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="write the result here")
    args = parser.parse_args()
    if args.perf and not args.cpu_messages:
        parser.error("--perf samples the --cpu-messages sends: give both")
    args.encoding = 0 if args.encoding == "json" else 1
    with cp.hooked_broker("count-send-", TOPIC, QUEUES) as (broker, work_dir):
        result = _measure(broker, args, work_dir)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    _report(result, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
