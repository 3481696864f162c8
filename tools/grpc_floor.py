# What the cheapest gRPC server of each kind costs per unary SendMessage on this box.
"""A floor for the native gRPC front (issue #26 item 5): before a broker does any work, what
does the server machinery alone cost per call? Each kind answers every SendMessage with the
same prepared SendMessageResponse (status OK, one entry):

* ``cxx``          libgrpc++ (Debian's 1.51) async generic service, one completion-queue thread
                   (``tools/grpc_floor/floor_server.cc``; the request is not parsed);
* ``aio-bytes``    grpcio's asyncio server, a generic handler on raw bytes (no protobuf);
* ``aio-servicer`` grpcio's asyncio server with the generated MessagingService servicer (the
                   request parsed into SendMessageRequest, the answer serialized) - the shape
                   pybroker's gRPC worker has before its handler runs;
* ``sync-bytes``   grpcio's thread-pool server, raw bytes.

The load is ``tools/grpc_floor/floor_client.cc`` (libgrpc++ generic stub, one channel as one SDK
client has, ``--in-flight`` calls outstanding), a 128-byte message with the system properties the
Java SDK sets. Printed per kind: calls/s, the server process's CPU µs per call (user + system,
all threads, from /proc) and its context switches per call. Kinds run one after another, in
rounds (``--rounds``), so a drift of the box shows as spread. Needs g++ and libgrpc++-dev
(``apt-get install libgrpc++-dev``); the binaries are built into ``--work-dir``.
"""
import argparse
import asyncio
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

from pybroker._testbase.cluster import free_port
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
from pybroker.protocol.rocketmq_v2 import service_pb2 as service

HERE = pathlib.Path(__file__).resolve().parent / "grpc_floor"
METHOD = "/apache.rocketmq.v2.MessagingService/SendMessage"
KINDS = ("cxx", "aio-bytes", "aio-servicer", "sync-bytes")


def build(work: pathlib.Path) -> None:
    """Compile the C++ server and client (pkg-config grpc++ protobuf)."""
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "grpc++", "protobuf"],
                           check=True, capture_output=True, text=True).stdout.split()
    for name in ("floor_server", "floor_client"):
        subprocess.run(["g++", "-O2", "-std=c++17", "-o", str(work / name),
                        str(HERE / f"{name}.cc"), *flags], check=True)


def messages(work: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """The request (one 128-byte message) and the prepared answer, as files."""
    request = service.SendMessageRequest()
    message = request.messages.add()
    message.topic.name = "GrpcFloorTopic"
    message.body = b"x" * 128
    system = message.system_properties
    system.tag = "TagA"
    system.message_id = "01A0B0C0D0E0F00000000000000001"
    system.body_encoding = pb.IDENTITY
    system.message_type = pb.NORMAL
    system.born_timestamp.FromMilliseconds(int(time.time() * 1000))
    system.born_host = "127.0.0.1"
    answer = service.SendMessageResponse()
    answer.status.code = pb.Code.OK
    answer.status.message = "OK"
    entry = answer.entries.add()
    entry.status.code = pb.Code.OK
    entry.status.message = "OK"
    entry.message_id = system.message_id
    entry.offset = 123456
    paths = work / "request.bin", work / "answer.bin"
    paths[0].write_bytes(request.SerializeToString())
    paths[1].write_bytes(answer.SerializeToString())
    return paths


def python_server(kind: str, port: int, answer_file: str) -> None:
    """Serve ``kind`` (one of the grpcio kinds) on ``port`` until killed."""
    import grpc

    from pybroker.protocol.rocketmq_v2 import service_pb2_grpc

    answer_bytes = pathlib.Path(answer_file).read_bytes()
    options = [("grpc.so_reuseport", 0)]
    if kind == "sync-bytes":
        from concurrent import futures
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=options)
        handler = grpc.unary_unary_rpc_method_handler(lambda request, context: answer_bytes)
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            "apache.rocketmq.v2.MessagingService", {"SendMessage": handler})])
        server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        print("listening", flush=True)
        server.wait_for_termination()
        return

    async def serve():
        server = grpc.aio.server(options=options)
        if kind == "aio-bytes":
            async def send(request, context):
                return answer_bytes
            server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
                "apache.rocketmq.v2.MessagingService",
                {"SendMessage": grpc.unary_unary_rpc_method_handler(send)})])
        else:
            prepared = service.SendMessageResponse.FromString(answer_bytes)

            class Servicer(service_pb2_grpc.MessagingServiceServicer):
                async def SendMessage(self, request, context):  # noqa: N802 (gRPC's name)
                    return prepared
            service_pb2_grpc.add_MessagingServiceServicer_to_server(Servicer(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        print("listening", flush=True)
        await server.wait_for_termination()
    asyncio.run(serve())


def one_run(kind: str, work: pathlib.Path, files, count: int, in_flight: int) -> dict:
    port = free_port()
    if kind == "cxx":
        command = [str(work / "floor_server"), str(port), str(files[1])]
    else:
        command = [sys.executable, __file__, "--serve", kind, "--port", str(port),
                   "--answer", str(files[1])]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        if server.stdout.readline().strip() != "listening":
            raise RuntimeError(f"{kind} server did not start")
        process = psutil.Process(server.pid)
        client = [str(work / "floor_client"), f"127.0.0.1:{port}", METHOD, str(files[0])]
        subprocess.run(client + [str(min(count // 10, 2000)), str(in_flight)], check=True,
                       capture_output=True, timeout=120)              # warm-up, discarded
        cpu, switches = process.cpu_times(), process.num_ctx_switches()
        done = subprocess.run(client + [str(count), str(in_flight)], check=True,
                              capture_output=True, text=True, timeout=600)
        cpu_after, switches_after = process.cpu_times(), process.num_ctx_switches()
        good, seconds = done.stdout.split()
        used = (cpu_after.user + cpu_after.system) - (cpu.user + cpu.system)
        switched = (switches_after.voluntary + switches_after.involuntary) - \
            (switches.voluntary + switches.involuntary)
        return {"calls_s": int(good) / float(seconds), "cpu_us": used / int(good) * 1e6,
                "switches": switched / int(good)}
    finally:
        server.kill()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--count", type=int, default=30_000, help="calls per run")
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work-dir", type=pathlib.Path, default=None)
    parser.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--answer", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        python_server(args.serve, args.port, args.answer)
        return
    work = args.work_dir or pathlib.Path(tempfile.mkdtemp(prefix="grpc-floor-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        build(work)
        files = messages(work)
        kinds = args.kinds.split(",")
        results: dict[str, list[dict]] = {kind: [] for kind in kinds}
        for _ in range(args.rounds):
            for kind in kinds:
                results[kind].append(one_run(kind, work, files, args.count, args.in_flight))
        print(f"{args.count} SendMessage calls per run, {args.in_flight} in flight, "
              f"{args.rounds} rounds: median (min-max)")
        for kind in kinds:
            line = [kind.ljust(13)]
            for key, unit in (("calls_s", "calls/s"), ("cpu_us", "server CPU us/call"),
                              ("switches", "switches/call")):
                values = [run[key] for run in results[kind]]
                line.append(f"{unit} {statistics.median(values):,.1f} "
                            f"({min(values):,.1f}-{max(values):,.1f})")
            print("  ".join(line))
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
