# Python calls, C calls, loop turns and system calls per received and per acked gRPC message.
"""Count what a gRPC worker does per message a SimpleConsumer receives and acks (issue #26).

Wall-clock figures on the shared 2-core box are noise; counts are not. This starts
``pybroker standalone`` from this checkout with one gRPC worker (``--backend front``: the C++
front, grpcNativeFront=true, the default; ``grpcio``: grpcio serving the port), a topic of 8
queues and a backlog of 128 B messages, then drives a SimpleConsumer's load from this process
with grpcio's client and the vendored stubs, in the request shapes of the 5.x SDKs (their
metadata headers, the client settings on a Telemetry stream first):

* ``receive`` phase: ReceiveMessage of 32 messages (queue -1, long polling 5 s, invisible
  60 s), one call after another;
* ``ack`` phase: AckMessage of every message received, one entry per call as the SDKs'
  SimpleConsumer.ack sends them (``--ack-entries N``: N entries per call), all in flight
  together.

The two phases are measured apart (the messages of the receive phase are the ones acked), so
the counts are per received message and per acked message. Around each phase the worker's
main thread runs a profile hook (``sys.setprofile``, switched on and off by SIGUSR2 through a
``sitecustomize`` module this tool puts first on the broker's PYTHONPATH; forked workers
inherit it) that counts every Python call, every C call, the event loop's callbacks run
(``Handle._run``) and its turns (``_run_once``); ``strace -c -f`` of the worker (all its threads,
the front's and grpcio's too) counts its system calls over the same phase when strace is on the
PATH. The hook sees the worker's main thread only: with grpcio serving the port its poller
thread's Python is not counted. ``--top N``: the N Python and C functions called most.

Usage: ``python tools/count_grpc_calls.py [--backend front|grpcio] [--rounds 20] [--top 25]
[--ack-entries 1]`` (about a minute).
"""
import argparse
import asyncio
import json
import pathlib
import sys

import psutil

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import count_pop_calls as cpc  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOPIC = "CountGrpcTopic"
GROUP = "CountGrpcGroup"
QUEUES = 8
BATCH = 32
CLIENT_ID = "count-grpc-client@1"
METADATA = (("x-mq-client-id", CLIENT_ID), ("x-mq-language", "JAVA"),
            ("x-mq-protocol", "v2"), ("x-mq-client-version", "5.0.8"))


class _Consumer:
    """A SimpleConsumer's calls over one channel (grpc.aio, the vendored stubs)."""

    def __init__(self, port: int):
        import grpc
        from pybroker.protocol.rocketmq_v2 import service_pb2_grpc
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        self.stub = service_pb2_grpc.MessagingServiceStub(self.channel)
        self.telemetry = None
        self.outgoing: asyncio.Queue = asyncio.Queue()

    async def start(self) -> None:
        from google.protobuf import duration_pb2
        from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
        from pybroker.protocol.rocketmq_v2 import service_pb2 as spb
        await self.channel.channel_ready()

        async def commands():
            while (command := await self.outgoing.get()) is not None:
                yield command

        self.telemetry = self.stub.Telemetry(commands(), metadata=METADATA)
        await self.outgoing.put(spb.TelemetryCommand(settings=pb.Settings(
            client_type=pb.SIMPLE_CONSUMER, request_timeout=duration_pb2.Duration(seconds=3),
            subscription=pb.Subscription(group=pb.Resource(name=GROUP), subscriptions=[
                pb.SubscriptionEntry(topic=pb.Resource(name=TOPIC), expression=pb.FilterExpression(
                    type=pb.TAG, expression="*"))]))))
        answer = await self.telemetry.read()
        if answer.status.code != pb.OK:
            raise RuntimeError(f"client settings refused: {answer.status}")

    async def receive(self) -> list:
        from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
        from pybroker.protocol.rocketmq_v2 import service_pb2 as spb
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name=GROUP), message_queue=pb.MessageQueue(
                topic=pb.Resource(name=TOPIC), id=-1), batch_size=BATCH,
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
        request.long_polling_timeout.FromMilliseconds(5000)
        request.invisible_duration.FromMilliseconds(60000)
        found = []
        async for answer in self.stub.ReceiveMessage(request, metadata=METADATA, timeout=20):
            if answer.WhichOneof("content") == "message":
                found.append(answer.message)
            elif answer.WhichOneof("content") == "status" and answer.status.code != pb.OK:
                raise RuntimeError(f"receive answered {answer.status}")
        return found

    async def ack(self, found: list, entries_per_call: int) -> None:
        from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
        from pybroker.protocol.rocketmq_v2 import service_pb2 as spb

        async def one(chunk):
            answer = await self.stub.AckMessage(spb.AckMessageRequest(
                group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC), entries=[
                    spb.AckMessageEntry(message_id=m.system_properties.message_id,
                                        receipt_handle=m.system_properties.receipt_handle)
                    for m in chunk]), metadata=METADATA, timeout=20)
            if answer.status.code != pb.OK:
                raise RuntimeError(f"ack answered {answer.status}")

        await asyncio.gather(*(one(found[at:at + entries_per_call])
                               for at in range(0, len(found), entries_per_call)))

    async def close(self) -> None:
        await self.outgoing.put(None)
        await self.channel.close()


async def _measure(port: int, worker: psutil.Process, rounds: int, ack_entries: int,
                   out_dir: pathlib.Path) -> dict:
    consumer = _Consumer(port)
    await consumer.start()
    try:
        for _ in range(3):                      # warm: routes, slots, connection, the front
            await consumer.ack(await consumer.receive(), ack_entries)
        received: list = []

        async def receive_phase():
            for _ in range(rounds):
                received.extend(await consumer.receive())

        receive = await cpc.hooked(worker, out_dir, "receive", receive_phase)
        ack = await cpc.hooked(worker, out_dir, "ack",
                            lambda: consumer.ack(received, ack_entries))
    finally:
        await consumer.close()
    messages = len(received)
    return {"rounds": rounds, "messages": messages, "ack_entries": ack_entries,
            "ack_calls": -(-messages // ack_entries), "receive": receive, "ack": ack}


def _report(result: dict, backend: str, top: int) -> None:
    messages = max(1, result["messages"])
    print(f"backend {backend}: {result['rounds']} ReceiveMessage calls, {result['messages']} "
          f"messages, {result['ack_calls']} AckMessage calls of {result['ack_entries']} "
          f"entries (gRPC worker; main thread for the hook, all threads for strace; 0.2 s "
          f"idle either side)")
    for phase, label in (("receive", "per received message"), ("ack", "per acked message")):
        part = result[phase]
        counts = part["counts"]
        print(f" {phase}:")
        for name, total in (("Python calls", counts["python"]), ("C calls", counts["c"]),
                            ("loop turns", counts["turns"]),
                            ("callbacks run", counts["handles"]),
                            ("system calls", part["syscalls"])):
            print(f"  {name:14s} {total:9d}  {label} {total / messages:8.1f}")
        cpc.print_busiest(part["syscalls_by_name"])
        cpc.print_top(counts, top, messages)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("front", "grpcio"), default="front")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--ack-entries", type=int, default=1)
    parser.add_argument("--top", type=int, default=0)
    parser.add_argument("--json", type=pathlib.Path, default=None, help="write the result here")
    args = parser.parse_args()
    with cpc.hooked_broker("count-grpc-", TOPIC, QUEUES, grpcWorkers="1",
                           grpcNativeFront=str(args.backend == "front").lower()) \
            as (broker, work_dir):
        port = int(broker.conf["grpcServerPort"])
        asyncio.run(cpc._fill(broker.namesrv_addr, (args.rounds + 10) * BATCH + 1024, TOPIC))
        result = asyncio.run(_measure(port, cpc.child_process(broker, "pb-grpc"), args.rounds,
                                      args.ack_entries, work_dir))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    _report(result, args.backend, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
