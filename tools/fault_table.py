# The reliability fault table: inject each fault into a real broker under load, count losses.
"""Run every fault of docs/reliability.md's table against real `pybroker standalone` brokers.

For each fault and run: a fresh broker (SYNC_FLUSH, small files) takes about 300 sends/s from
three producer threads (unique bodies, 4 queues); the fault is injected; the tool measures the
*recovery time* - from the fault until a probe send started after it is acknowledged (its own
connection and topic) - then stops the load,
reads every queue from offset 0 and counts acknowledged messages that are missing or changed.
Bounded: every wait has a deadline, every broker is killed at the end of its run.

Usage (under the heavy lock, it takes a while)::

    flock /tmp/pybroker-heavy.lock python tools/fault_table.py --runs 3 [--only NAME ...]

Prints a Markdown table: fault, runs, acknowledged, acknowledged lost, recovery seconds
(median and range).
"""
import argparse
import contextlib
import ctypes
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import orjson
import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pybroker._fast import record  # noqa: E402
from pybroker._testbase.cluster import StandaloneBroker  # noqa: E402
from pybroker.proc.service_socket import SOCKET_NAME  # noqa: E402
from pybroker.protocol import properties as props  # noqa: E402
from pybroker.protocol.codes import RequestCode, ResponseCode  # noqa: E402
from pybroker.protocol.command import create_request, encode  # noqa: E402
from pybroker.remoting.client import SyncRemotingClient  # noqa: E402
from pybroker.store import layout  # noqa: E402

TOPIC = "FaultTableTopic"
QUEUES = 4
PRODUCERS = 3
RATE_PER_S = 300
TIMEOUT_MS = 3000
SERVE_DEADLINE_S = 60.0
_SYS_PIDFD_GETFD = 438
FLOOD_S = 8.0
FLOOD_SETTLE_S = 3.0
DISK_FULL_HOLD_S = 2.0
OVERRIDES = {"flushDiskType": "SYNC_FLUSH", "mappedFileSizeCommitLog": str(1 << 20),
             "maxMessageSize": str(64 << 10), "mappedFileSizeConsumeQueue": str(2000 * 20)}


def _send(client, body: bytes, queue_id: int):
    properties = props.encode_properties({"WAIT": "true", "KEYS": body[:12].decode(),
                                          "UNIQ_KEY": body[:16].hex()})
    ext = {"a": "fault_producer", "b": TOPIC, "c": "TBW102", "d": str(QUEUES),
           "e": str(queue_id), "f": "0", "g": str(time.time_ns() // 1_000_000), "h": "0",
           "i": properties, "j": "0", "k": "false", "m": "false"}
    return client.invoke(create_request(RequestCode.SEND_MESSAGE_V2, ext, body), TIMEOUT_MS)


class Load:
    """Producer threads; ``acked`` maps body -> (queue id, queue offset)."""

    def __init__(self, broker):
        self.broker = broker
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.sequence = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._produce, args=(random.Random(n),),
                                         daemon=True) for n in range(PRODUCERS)]

    def __enter__(self) -> "Load":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(15)

    def _produce(self, generator: random.Random) -> None:
        client = None
        while not self.stop.is_set():
            if client is None:
                client = SyncRemotingClient()
                try:
                    client.connect(self.broker.broker_addr, 1000)
                except (OSError, TimeoutError):
                    client.close()
                    client = None
                    self.stop.wait(0.1)
                    continue
            with self.lock:
                self.sequence += 1
                body = b"%012d" % self.sequence + generator.randbytes(generator.randint(8, 500))
            try:
                response = _send(client, body, generator.randrange(QUEUES))
            except (OSError, TimeoutError, ConnectionError):
                client.close()
                client = None
                continue
            if response.code == ResponseCode.SUCCESS:
                with self.lock:
                    self.acked[body] = (int(response.ext_fields["queueId"]),
                                        int(response.ext_fields["queueOffset"]))
            self.stop.wait(PRODUCERS / RATE_PER_S)
        if client is not None:
            client.close()


def _stored(broker) -> dict[bytes, tuple[int, int]]:
    found = {}
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        for queue_id in range(QUEUES):
            offset = 0
            while True:
                ext = {"consumerGroup": "fault_table", "topic": TOPIC, "queueId": str(queue_id),
                       "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": "4",
                       "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
                       "subVersion": "0", "expressionType": "TAG"}
                response = client.invoke(create_request(RequestCode.PULL_MESSAGE, ext),
                                         TIMEOUT_MS)
                if response.code not in (ResponseCode.SUCCESS,
                                         ResponseCode.PULL_RETRY_IMMEDIATELY):
                    break
                data, position = bytes(response.body or b""), 0
                while position < len(data):
                    message = record.decode(data, position)
                    found[bytes(message.body)] = (queue_id, message.queue_offset)
                    position += message.total_size
                offset = int(response.ext_fields["nextBeginOffset"])
    return found


def _worker(broker, name: str) -> psutil.Process:
    for child in psutil.Process(broker.process.pid).children():
        if child.name() == f"pb-{name}":
            return child
    raise RuntimeError(f"no pb-{name}")


def _probe(broker) -> int:
    """The response code of one probe send on a new connection (its own topic, not counted in
    the load); -1 when it got no answer."""
    try:
        with SyncRemotingClient() as client:
            client.connect(broker.broker_addr, 500)
            ext = {"a": "fault_probe", "b": "FaultProbe", "c": "TBW102", "d": "1", "e": "0",
                   "f": "0", "g": "0", "h": "0", "i": "", "j": "0", "k": "false", "m": "false"}
            return client.invoke(create_request(RequestCode.SEND_MESSAGE_V2, ext, b"probe"),
                                 1000).code
    except (OSError, TimeoutError, ConnectionError):
        return -1


def _until_acked(load: Load, since: float) -> float:
    """Seconds from ``since`` until a probe send, started after the fault, is acknowledged."""
    deadline = since + SERVE_DEADLINE_S
    while time.monotonic() < deadline:
        if _probe(load.broker) == ResponseCode.SUCCESS:
            return time.monotonic() - since
        time.sleep(0.05)
    raise RuntimeError("the broker did not serve again")


# --- faults: each injects into a running broker under load and returns the recovery seconds ---

def _kill_worker(name: str):
    def inject(broker, load) -> float:
        os.kill(_worker(broker, name).pid, signal.SIGKILL)
        return _until_acked(load, time.monotonic())
    return inject


def _kill_broker(broker, load) -> float:
    started = time.monotonic()
    broker.kill()
    broker.start()
    return _until_acked(load, started)


def _stop_group_and_restart(broker, load) -> float:
    started = time.monotonic()
    os.killpg(broker.process.pid, signal.SIGTERM)
    if broker.process.wait(60) != 0:
        raise RuntimeError("the clean stop did not exit 0")
    broker.start()
    return _until_acked(load, started)


def _sigstop_appender(broker, load) -> float:
    appender = _worker(broker, "appender")
    started = time.monotonic()
    os.kill(appender.pid, signal.SIGSTOP)
    try:
        return _until_acked(load, started)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(appender.pid, signal.SIGCONT)


def _offline(damage):
    """Stop the broker cleanly, damage its files, restart: seconds from stop to serving."""
    def inject(broker, load) -> float:
        started = time.monotonic()
        if broker.stop() != 0:
            raise RuntimeError("the clean stop did not exit 0")
        damage(broker)
        broker.start()
        return _until_acked(load, started)
    return inject


def _garbage_in_queue_tail(broker) -> None:
    queue_dir = os.path.join(broker.store_dir, "consumequeue", TOPIC, "0")
    path = os.path.join(queue_dir, sorted(os.listdir(queue_dir))[-1])
    with open(path, "r+b") as file:
        data = file.read()
        end = len(data.rstrip(b"\0"))
        end += -end % layout.CQ_STORE_UNIT_SIZE
        file.seek(end)
        file.write(random.randbytes(min(800, len(data) - end)))


def _truncate_index(broker) -> None:
    index_dir = os.path.join(broker.store_dir, "index")
    for name in os.listdir(index_dir):
        path = os.path.join(index_dir, name)
        os.truncate(path, os.path.getsize(path) // 2)


def _garbage_checkpoint(broker) -> None:
    with open(os.path.join(broker.store_dir, "checkpoint"), "r+b") as file:
        file.write(random.randbytes(40))


def _cut_internal_links(broker, load) -> float:
    """shutdown(2) of every worker <-> metadata-service link (the supervisor's ends, through
    pidfd_getfd): seconds until every worker logged the link re-established."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(broker.process.pid)
    offset = len(broker._log_text())
    started = time.monotonic()
    try:
        for connection in psutil.Process(broker.process.pid).net_connections(kind="unix"):
            # Bound as /proc/self/fd/<run dir>/metadata.sock (proc/service_socket.py).
            if not connection.laddr.endswith("/" + SOCKET_NAME) or connection.fd < 0:
                continue
            copy = libc.syscall(_SYS_PIDFD_GETFD, pidfd, connection.fd, 0)
            if copy >= 0:
                with socket.socket(fileno=copy) as duplicate:
                    if not duplicate.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                        duplicate.shutdown(socket.SHUT_RDWR)
    finally:
        os.close(pidfd)
    workers = int(OVERRIDES.get("remotingWorkers", "2"))
    while broker._log_text()[offset:].count("link to the metadata service re-established") \
            < workers:
        if time.monotonic() > started + SERVE_DEADLINE_S:
            raise RuntimeError("the links were not re-established")
        time.sleep(0.02)
    return time.monotonic() - started


def _flip_bit_in_old_record(broker) -> None:
    """One flipped body bit in the oldest record of the CommitLog (valid records follow it):
    the broker must refuse to start, then start with skipDamagedRecordsOnRecover=true, which
    skips that one acknowledged record (counted as lost) and keeps every later one."""
    directory = os.path.join(broker.store_dir, "commitlog")
    path = os.path.join(directory, sorted(os.listdir(directory))[0])
    with open(path, "r+b") as file:
        file.seek(layout.RECORD_BODY_LENGTH_POSITION_V4 + 4 + 3)
        byte = file.read(1)[0]
        file.seek(layout.RECORD_BODY_LENGTH_POSITION_V4 + 4 + 3)
        file.write(bytes([byte ^ 0x10]))
    try:
        broker.start()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("the broker started on a damaged CommitLog")
    with open(broker.conf_path, "a", encoding="utf-8") as conf:
        conf.write("skipDamagedRecordsOnRecover=true\n")


def _flood_frames() -> bytes:
    heartbeat = orjson.dumps({"clientID": "flood@1", "producerDataSet": [], "consumerDataSet": [
        {"groupName": "flood_group", "consumeType": "CONSUME_PASSIVELY",
         "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
         "unitMode": False, "subscriptionDataSet": []}]})
    frames = [encode(create_request(RequestCode.HEART_BEAT, None, heartbeat)),
              encode(create_request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                  "consumerGroup": "flood_group", "topic": TOPIC, "queueId": "0",
                  "commitOffset": "1"})),
              encode(create_request(RequestCode.GET_ALL_TOPIC_CONFIG))]
    return b"".join(frames) * 50


def _flood_never_reading(broker, load) -> float:
    """Four raw connections pipeline heartbeats, offset commits and admin requests for
    FLOOD_S and never read a reply: seconds from FLOOD_SETTLE_S into the flood (replies piled
    up) until a probe on a new connection is acknowledged."""
    host, port = broker.broker_addr.rsplit(":", 1)
    flooders = []
    for _ in range(4):
        flooder = socket.socket()
        flooder.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        flooder.connect((host, int(port)))
        flooder.setblocking(False)
        flooders.append(flooder)
    data, stop = _flood_frames(), time.monotonic() + FLOOD_S
    probe_from, recovery_s = time.monotonic() + FLOOD_SETTLE_S, None
    try:
        while time.monotonic() < stop:
            for flooder in flooders:
                with contextlib.suppress(BlockingIOError, ConnectionError):
                    flooder.send(data)
            if recovery_s is None and time.monotonic() >= probe_from:
                recovery_s = _until_acked(load, time.monotonic())
            time.sleep(0.005)
    finally:
        for flooder in flooders:
            flooder.close()
    assert recovery_s is not None
    return recovery_s


def _fill_to(mount_point: str, ratio: float) -> None:
    """Grow or shrink a filler file so that the disk is ``ratio`` used."""
    filler = os.path.join(mount_point, "filler")
    current = os.path.getsize(filler) if os.path.exists(filler) else 0
    stats = os.statvfs(mount_point)
    used = (stats.f_blocks - stats.f_bfree) * stats.f_frsize
    target = max(current + int(ratio * stats.f_blocks * stats.f_frsize) - used, 0)
    with open(filler, "ab") as file:
        if target < current:
            file.truncate(target)
        elif target > current:
            os.posix_fallocate(file.fileno(), current, target - current)


def _disk_full(broker, load) -> float:
    """The store's small tmpfs filled to 93 % (above diskSpaceWarningLevelRatio, 90 %): sends
    must be refused; DISK_FULL_HOLD_S later the space is freed: seconds from freeing it until
    a probe is acknowledged."""
    mount_point = os.path.dirname(broker.store_dir)
    if not os.path.ismount(mount_point):
        raise RuntimeError(f"{mount_point} is not the fault's own tmpfs")
    _fill_to(mount_point, 0.93)
    deadline = time.monotonic() + 10
    while _probe(broker) != ResponseCode.SERVICE_NOT_AVAILABLE:
        if time.monotonic() > deadline:
            raise RuntimeError("sends were not refused on a full disk")
        time.sleep(0.1)
    time.sleep(DISK_FULL_HOLD_S)
    _fill_to(mount_point, 0.0)
    return _until_acked(load, time.monotonic())


@contextlib.contextmanager
def _small_disk(work_dir: str):
    """A fresh 192 MiB tmpfs under ``work_dir`` (root only); yields its mount point."""
    mount_point = os.path.join(work_dir, "disk")
    os.makedirs(mount_point)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={192 << 20}", "pybroker-fault",
                    mount_point], check=True, capture_output=True)
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", mount_point], check=False).returncode != 0:
            subprocess.run(["umount", "-l", mount_point], check=False)


FAULTS = {
    "kill -9 of the whole broker": _kill_broker,
    "kill -9 of the appender": _kill_worker("appender"),
    "kill -9 of the dispatcher": _kill_worker("dispatcher"),
    "kill -9 of the flusher": _kill_worker("flusher"),
    "kill -9 of a remoting worker": _kill_worker("remoting-0"),
    "SIGSTOP of the appender (watchdog)": _sigstop_appender,
    "SIGTERM to the process group, restart": _stop_group_and_restart,
    "garbage in a ConsumeQueue tail": _offline(_garbage_in_queue_tail),
    "truncated IndexFiles": _offline(_truncate_index),
    "garbage checkpoint": _offline(_garbage_checkpoint),
    "internal links cut (shutdown of the sockets)": _cut_internal_links,
    "flipped bit in an old record (refused, then skip option)":
        _offline(_flip_bit_in_old_record),
    "4 clients pipelining requests that never read replies": _flood_never_reading,
    "disk full (93 %), then space freed": _disk_full,
}
# Faults whose broker keeps its store on a small tmpfs of its own.
ON_SMALL_DISK = {"disk full (93 %), then space freed"}


def run_once(name: str, work_dir: str) -> tuple[int, int, float]:
    """(acknowledged, acknowledged lost, recovery seconds) of one run."""
    with contextlib.ExitStack() as stack:
        overrides = dict(OVERRIDES)
        if name in ON_SMALL_DISK:
            mount_point = stack.enter_context(_small_disk(work_dir))
            overrides.update(storePathRootDir=os.path.join(mount_point, "store"),
                             sendRingSizeBytes=str(1 << 20))
        broker = StandaloneBroker(os.path.join(work_dir, "broker"), overrides)
        # The faults find the store (and the disk-full fault its tmpfs) through store_dir.
        broker.store_dir = overrides.get("storePathRootDir", broker.store_dir)
        stack.callback(broker.kill)
        broker.start()
        with Load(broker) as load:
            deadline = time.monotonic() + 30
            while len(load.acked) < 300:
                if time.monotonic() > deadline:
                    raise RuntimeError("the load did not start")
                time.sleep(0.05)
            recovery_s = FAULTS[name](broker, load)
            started = time.monotonic()
            while len(load.acked) < 600 and time.monotonic() < started + 20:
                time.sleep(0.05)
        stored = _stored(broker)
        lost = sum(1 for body, where in load.acked.items() if stored.get(body) != where)
        return len(load.acked), lost, recovery_s


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=None, help="fault names (substrings)")
    args = parser.parse_args(argv)
    rows = []
    for name in FAULTS:
        if args.only and not any(part in name for part in args.only):
            continue
        results = []
        for run in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="pybroker-fault-") as work_dir:
                results.append(run_once(name, work_dir))
            sys.stderr.write(f"# {name} run {run + 1}: acked={results[-1][0]} "
                             f"lost={results[-1][1]} recovery={results[-1][2]:.2f} s\n")
            sys.stderr.flush()
        seconds = [r[2] for r in results]
        rows.append(f"| {name} | {len(results)} | {sum(r[0] for r in results)} | "
                    f"{sum(r[1] for r in results)} | {statistics.median(seconds):.1f} "
                    f"({min(seconds):.1f}-{max(seconds):.1f}) |")
    sys.stdout.write("| fault | runs | acknowledged | acknowledged lost | "
                     "recovery s, median (range) |\n|---|---|---|---|---|\n")
    sys.stdout.write("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
