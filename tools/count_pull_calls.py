# Python calls, C calls, loop turns and system calls per pull of a consumer draining a backlog.
"""Count what the remoting worker and the supervisor do per PULL_MESSAGE (issue #28 item 1).

Wall-clock figures on the shared 2-core box are noise; counts are not. This starts
``pybroker standalone`` from this checkout with one remoting worker (ASYNC_FLUSH), a topic of
8 queues and a backlog of 128 B messages, sends one HEART_BEAT (the group subscribed to ``*``,
as Apache's push consumer's heartbeat registers it), then pulls as Apache's 4.9.8 Consumer
does while it drains a backlog: one PULL_MESSAGE in flight per queue (ROCKETMQ binary header,
32 messages, sysFlag COMMIT_OFFSET | SUSPEND, the queue's previous offset committed), each
answer followed at once by the queue's next pull, for ``--pulls`` pulls on one connection.
``--gap-ms`` waits that long before each next pull (the Java consumer's own time per pull
answer: decoding 32 messages and handing them to its threads, about 1 ms of wall time a
queue on this box at 255k msg/s); 0 pulls as fast as this process can.

Around the measured pulls the worker's and the supervisor's main threads run the profile hook
of ``tools/count_pop_calls.py`` (``sys.setprofile``, switched on and off by SIGUSR2) counting
every Python call, every C call, the event loop's callbacks and turns; ``strace -c -f`` of each
counts its system calls over the same window when strace is on the PATH (``-f``: the
supervisor's threads too: its scrubber's). Printed per pull and per message, with the
COMMIT_OFFSET forwards the supervisor received (``MetadataService._commit_offset`` calls) and
with ``--top N`` the N Python and C functions called most.

``--cpu-pulls N`` then pulls N more without hooks and strace and prints each process's CPU time
per message (psutil): an indication only on a shared box.

Usage: ``python tools/count_pull_calls.py [--pulls 4000] [--gap-ms 1] [--top 25]
[--cpu-pulls 8000]`` (about a minute).
"""
import argparse
import asyncio
import json
import os
import pathlib
import sys
import time

import psutil

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_brokers as bb  # noqa: E402  (tools/ is not a package)
import count_pop_calls as cp  # noqa: E402  (the hook and the strace reading are its)

TOPIC = "CountPullTopic"
GROUP = "CountPullGroup"
QUEUES = 8
BATCH = 32
SUB_VERSION = 1_700_000_000_000
_SYS_FLAG_COMMIT_OFFSET = 0x1
_SYS_FLAG_SUSPEND = 0x2


def _pull_frame(queue_id: int, queue_offset: int, opaque: int, commit_offset: int) -> bytes:
    """A PULL_MESSAGE frame as Apache's 4.9.8 push consumer sends it (ROCKETMQ header)."""
    from pybroker.protocol import command
    from pybroker.protocol.codes import RequestCode
    from pybroker.protocol.command import RemotingCommand
    from pybroker.protocol.constants import SerializeType
    sys_flag = _SYS_FLAG_SUSPEND | (_SYS_FLAG_COMMIT_OFFSET if commit_offset > 0 else 0)
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue_id),
              "queueOffset": str(queue_offset), "maxMsgNums": str(BATCH),
              "sysFlag": str(sys_flag), "commitOffset": str(commit_offset),
              "suspendTimeoutMillis": "15000", "subVersion": str(SUB_VERSION),
              "expressionType": "TAG"}
    return command.encode(RemotingCommand(RequestCode.PULL_MESSAGE, 0, 395, opaque, 0, None,
                                          fields), int(SerializeType.ROCKETMQ))


def _heartbeat_frame(opaque: int) -> bytes:
    from pybroker.protocol import bodies, command
    from pybroker.protocol.codes import RequestCode
    from pybroker.protocol.command import RemotingCommand
    heartbeat = bodies.HeartbeatData(client_id="127.0.0.1@count_pull", consumer_datas=[
        bodies.ConsumerData(group_name=GROUP, subscriptions=[
            bodies.build_subscription(TOPIC, "*", sub_version=SUB_VERSION)])])
    return command.encode(RemotingCommand(RequestCode.HEART_BEAT, 0, 395, opaque, 0, None, {},
                                          bodies.encode_heartbeat(heartbeat)))


async def _answer(reader: asyncio.StreamReader):
    """The next response (the broker's own requests, NOTIFY_CONSUMER_IDS_CHANGED, skipped)."""
    from pybroker.protocol import command
    while True:
        head = await reader.readexactly(4)
        frame = head + await reader.readexactly(int.from_bytes(head, "big"))
        answer = command.decode(frame, 0, len(frame))
        if answer.is_response:
            return answer


class _Consumer:
    """One connection; per queue the next offset and the offset to commit."""

    def __init__(self, address: str, gap_ms: float):
        self.address, self.gap_s = address, gap_ms / 1000
        self.offsets = [0] * QUEUES
        self.committed = [0] * QUEUES
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.opaque = 1

    async def open(self) -> None:
        host, port = self.address.rsplit(":", 1)
        self.reader, self.writer = await asyncio.open_connection(host, int(port))
        self.writer.write(_heartbeat_frame(self.opaque))
        self.opaque += 1
        answer = await _answer(self.reader)
        if answer.code != 0:
            raise RuntimeError(f"HEART_BEAT answered {answer.code}: {answer.remark}")

    def _send(self, queue_id: int, queued: dict) -> None:
        assert self.writer is not None
        queued[self.opaque] = queue_id
        self.writer.write(_pull_frame(queue_id, self.offsets[queue_id], self.opaque,
                                      self.committed[queue_id]))
        self.opaque += 1

    async def pulls(self, count: int) -> int:
        """``count`` pulls, one in flight per queue; the messages they brought."""
        assert self.reader is not None
        loop = asyncio.get_running_loop()
        queued: dict[int, int] = {}
        sent = answered = messages = 0
        for queue_id in range(QUEUES):
            self._send(queue_id, queued)
            sent += 1
        while answered < sent:
            answer = await _answer(self.reader)
            answered += 1
            queue_id = queued.pop(answer.opaque)
            if answer.code != 0:
                raise RuntimeError(f"pull of queue {queue_id} answered {answer.code} "
                                   f"({answer.remark}): the backlog is too small")
            next_offset = int(answer.ext_fields["nextBeginOffset"])
            messages += next_offset - self.offsets[queue_id]
            self.committed[queue_id] = self.offsets[queue_id]
            self.offsets[queue_id] = next_offset
            if sent < count:             # the queue's next pull, the others' still in flight
                if self.gap_s:
                    loop.call_later(self.gap_s, self._send, queue_id, queued)
                else:
                    self._send(queue_id, queued)
                sent += 1
        return messages

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            await self.writer.wait_closed()


async def _toggle(processes: dict) -> None:
    for process in processes.values():
        os.kill(process.pid, cp.TOGGLE)
    await asyncio.sleep(0.2)       # on: before the first pull; off: after the last forwards


async def _measure(broker: bb.PyBroker, args, out_dir: pathlib.Path) -> dict:
    processes = {"worker": cp.child_process(broker, "pb-remoting"),
                 "supervisor": psutil.Process(broker.root_pids()[0])}
    consumer = _Consumer(broker.broker_addr, args.gap_ms)
    await consumer.open()
    try:
        await consumer.pulls(QUEUES * 5)                          # warm: files mapped
        tracers = {name: cp._strace(process.pid, out_dir / f"strace-{name}.txt")
                   for name, process in processes.items()}
        await _toggle(processes)
        started = time.monotonic()
        messages = await consumer.pulls(args.pulls)
        elapsed = time.monotonic() - started
        await _toggle(processes)
        result = {"pulls": args.pulls, "messages": messages, "gap_ms": args.gap_ms,
                  "elapsed_s": round(elapsed, 2), "processes": {}}
        for name, process in processes.items():
            result["processes"][name] = cp.collected(out_dir, name, process.pid,
                                                     tracers[name])
        if args.cpu_pulls:                        # without hooks and strace: CPU seconds
            before = {name: sum(process.cpu_times()[:2])
                      for name, process in processes.items()}
            started = time.monotonic()
            pulled = await consumer.pulls(args.cpu_pulls)
            result["cpu_elapsed_s"] = round(time.monotonic() - started, 2)
            for name, process in processes.items():
                used = sum(process.cpu_times()[:2]) - before[name]
                result["processes"][name]["cpu_us_per_message"] = used * 1e6 / pulled
            result["cpu_messages"] = pulled
    finally:
        await consumer.close()
    return result


def _calls_of(counts: dict, python_name: str) -> int:
    return sum(count for name, count in counts["top"] if name.startswith(python_name))


def _report(result: dict, top: int) -> None:
    pulls, messages = result["pulls"], result["messages"]
    print(f"{pulls} pulls of {BATCH} ({messages} messages of 128 B), one in flight per queue "
          f"of {QUEUES}, {result['gap_ms']} ms before each next pull, in "
          f"{result['elapsed_s']} s (main threads, loop included; 0.2 s idle either side)")
    forwards = _calls_of(result["processes"]["supervisor"]["counts"],
                         "_commit_offset (metadata_service.py")
    print(f" COMMIT_OFFSET forwards received by the supervisor: {forwards} "
          f"({forwards / pulls:.3f} per pull)")
    for name, figures in result["processes"].items():
        counts = figures["counts"]
        print(f" {name}:")
        for label, total in (("Python calls", counts["python"]), ("C calls", counts["c"]),
                             ("loop turns", counts["turns"]),
                             ("callbacks run", counts["handles"]),
                             ("system calls", figures["syscalls"])):
            print(f"  {label:14s} {total:9d}  per pull {total / pulls:8.2f}  per message "
                  f"{total / messages:8.3f}")
        if "cpu_us_per_message" in figures:
            print(f"  CPU (psutil, no hook, {result['cpu_messages']} more messages in "
                  f"{result['cpu_elapsed_s']} s; an indication on a shared box): "
                  f"{figures['cpu_us_per_message']:.2f} us per message")
        cp.print_busiest(figures["syscalls_by_name"])
        cp.print_top(counts, top, messages)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pulls", type=int, default=4000)
    parser.add_argument("--gap-ms", type=float, default=1.0,
                        help="wait before each next pull of a queue (the consumer's own time)")
    parser.add_argument("--top", type=int, default=0)
    parser.add_argument("--cpu-pulls", type=int, default=0,
                        help="then this many pulls without the hooks for each process's CPU")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="write the result here")
    args = parser.parse_args()
    with cp.hooked_broker("count-pull-", TOPIC, QUEUES) as (broker, work_dir):
        # Each queue's share, with room for pulls spread a little unevenly over the queues.
        backlog = (args.pulls + args.cpu_pulls + QUEUES * 5) * BATCH * 11 // 10
        asyncio.run(cp._fill(broker.namesrv_addr, backlog, TOPIC))
        result = asyncio.run(_measure(broker, args, work_dir))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    _report(result, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
