"""kill -9 of the broker or of any one worker under load loses no acknowledged message.

Method: a real `pybroker standalone` broker (SYNC_FLUSH or ASYNC_FLUSH) takes a few hundred
messages per second from a producer thread (raw SEND_MESSAGE_V2 over SyncRemotingClient, unique
bodies, seeded random queues and sizes) while a consumer thread pulls every queue and checks
each served record (CRC, queue offset in sequence). After a seeded delay the whole broker, or
only the appender, dispatcher, flusher or a remoting worker (found by process name among the
supervisor's children), is killed with SIGKILL; the broker must come back (restart of the whole
broker, or the supervisor's new generation with abnormal recovery, seen in the log), the
producer reconnects and goes on, and at the end every queue is read from offset 0: offsets are
contiguous, every record is whole, every acknowledged message is at its acknowledged queue
offset, and no message is stored twice. Each case prints its seed. The store path is longer
than an AF_UNIX socket name can be (Java accepts any path), so every start, restart after
kill -9 and new generation also shows the supervisor's unix socket works from such a store.
"""
import os
import random
import signal
import threading
import time

import psutil
import pytest

from pybroker._fast import record
from pybroker._testbase.cluster import StandaloneBroker
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.remoting.client import SyncRemotingClient

pytestmark = [pytest.mark.crash, pytest.mark.slow, pytest.mark.timeout(180)]

TOPIC = "BrokerCrashTopic"
QUEUES = 4
SEND_RATE_PER_S = 300          # all producers together
PRODUCERS = 3
KILLS_PER_CASE = 2
TIMEOUT_MS = 5000
# A new generation must be serving this soon after a worker's death: the survivors stop at
# once (a stuck one costs WORKER_STOP_TIMEOUT_S = 15 s before the supervisor kills it).
RECOVERY_TIMEOUT_S = 12
# Longer than any AF_UNIX name (108 bytes with its NUL) plus run/metadata.sock.
LONG_STORE_PATH_BYTES = 200
TARGETS = ("broker", "appender", "dispatcher", "flusher", "remoting-0")
# Small files so that the load rolls CommitLog and ConsumeQueue files too.
OVERRIDES = {"mappedFileSizeCommitLog": str(256 * 1024),
             "maxMessageSize": str(64 * 1024), "mappedFileSizeConsumeQueue": str(200 * 20)}


def _send(client, body: bytes, queue_id: int, uniq_key: str):
    properties = props.encode_properties({"TAGS": "T", "KEYS": uniq_key, "WAIT": "true",
                                          "UNIQ_KEY": uniq_key})
    ext = {"a": "crash_producer", "b": TOPIC, "c": "TBW102", "d": str(QUEUES),
           "e": str(queue_id), "f": "0", "g": str(time.time_ns() // 1_000_000), "h": "0",
           "i": properties, "j": "0", "k": "false", "m": "false"}
    return client.invoke(create_request(RequestCode.SEND_MESSAGE_V2, ext, body), TIMEOUT_MS)


def _pull(client, queue_id: int, queue_offset: int):
    ext = {"consumerGroup": "crash_consumer", "topic": TOPIC, "queueId": str(queue_id),
           "queueOffset": str(queue_offset), "maxMsgNums": "32", "sysFlag": "4",
           "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
           "subVersion": "0", "expressionType": "TAG"}
    return client.invoke(create_request(RequestCode.PULL_MESSAGE, ext), TIMEOUT_MS)


def _whole_records(body, queue_id: int, first_queue_offset: int) -> list[bytes]:
    """The bodies of a pull answer; AssertionError unless every record is whole and in order."""
    data, position, bodies = bytes(body or b""), 0, []
    while position < len(data):
        status, total_size = record.check(data, position, len(data), True)
        assert status == record.RECORD_OK, f"half-written record served at {position}"
        message = record.decode(data, position)
        assert (message.topic, message.queue_id) == (TOPIC, queue_id)
        assert message.queue_offset == first_queue_offset + len(bodies), "offset gap"
        bodies.append(bytes(message.body))
        position += total_size
    return bodies


class Load:
    """Producer and consumer threads against one broker address; errors are collected."""

    def __init__(self, broker_addr: str, rand):
        self.broker_addr = broker_addr
        self.rand = rand
        self.acked: dict[tuple[int, int], bytes] = {}
        self.sent = 0
        self.consumed = 0
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        # Several producers, so that a kill finds more than one send in flight.
        self.threads = [threading.Thread(target=self._guard, daemon=True,
                                         args=(self._produce, random.Random(rand.random())))
                        for _ in range(PRODUCERS)]
        self.threads.append(threading.Thread(target=self._guard, args=(self._consume,),
                                             daemon=True))

    def __enter__(self) -> "Load":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def _guard(self, loop, *args) -> None:
        try:
            loop(*args)
        except AssertionError as error:
            self.failures.append(f"{loop.__name__}: {error}")

    def _connected(self) -> SyncRemotingClient | None:
        client = SyncRemotingClient()
        try:
            client.connect(self.broker_addr, 1000)
            return client
        except (OSError, TimeoutError):
            client.close()
            time.sleep(0.1)
            return None

    def _produce(self, generator: random.Random) -> None:
        client, interval_s = None, PRODUCERS / SEND_RATE_PER_S
        while not self.stop.is_set():
            client = client or self._connected()
            if client is None:
                continue
            with self.lock:
                sequence = self.sent
                self.sent += 1
            body = b"%08d:" % sequence + generator.randbytes(generator.randint(8, 600))
            queue_id = generator.randrange(QUEUES)
            try:
                response = _send(client, body, queue_id, f"crash-{sequence}")
            except (OSError, TimeoutError, ConnectionError):
                client.close()
                client = None
                continue
            if response.code == ResponseCode.SUCCESS:
                where = (int(response.ext_fields["queueId"]),
                         int(response.ext_fields["queueOffset"]))
                with self.lock:
                    assert where[0] == queue_id and where not in self.acked, where
                    self.acked[where] = body
            time.sleep(interval_s)
        if client is not None:
            client.close()

    def _consume(self) -> None:
        client, next_offsets = None, [0] * QUEUES
        while not self.stop.is_set():
            client = client or self._connected()
            if client is None:
                continue
            for queue_id in range(QUEUES):
                try:
                    response = _pull(client, queue_id, next_offsets[queue_id])
                except (OSError, TimeoutError, ConnectionError):
                    client.close()
                    client = None
                    break
                if response.code == ResponseCode.SUCCESS:
                    bodies = _whole_records(response.body, queue_id, next_offsets[queue_id])
                    next_offsets[queue_id] += len(bodies)
                    self.consumed += len(bodies)
            time.sleep(0.05)
        if client is not None:
            client.close()


def _worker_pid(broker: StandaloneBroker, name: str) -> int:
    """The pid of the supervisor's child named pb-<name> (see supervisor._set_process_name)."""
    supervisor = psutil.Process(broker.process.pid)
    for child in supervisor.children():
        if child.name() == f"pb-{name}":
            return child.pid
    raise AssertionError(f"no worker pb-{name} among "
                         f"{[child.name() for child in supervisor.children()]}")


def _wait_for_log(broker: StandaloneBroker, text: str, after: int, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        tail = broker._log_text()[after:]
        if text in tail:
            return tail
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not logged within {timeout_s} s:\n"
                         f"{broker._log_text()[after:][-4000:]}")


def _crash(broker: StandaloneBroker, target: str) -> None:
    """kill -9 the target; return once the broker serves again after abnormal recovery."""
    log_offset = len(broker._log_text())
    if target == "broker":
        broker.kill()
        broker.start()
    else:
        os.kill(_worker_pid(broker, target), signal.SIGKILL)
        _wait_for_log(broker, "boot success", log_offset, RECOVERY_TIMEOUT_S)
    tail = broker._log_text()[log_offset:]
    assert "recovered (abnormal)" in tail, tail[-4000:]
    if target != "broker":
        assert f"worker {target} (pid" in tail and "killed by signal 9" in tail, tail[-4000:]


def _wait_acked(broker: StandaloneBroker, load: "Load", count: int, timeout_s: float,
                what: str) -> None:
    """Wait until ``count`` sends are acknowledged; on failure say how far it got, with the
    broker's log tail (the failure seen once could not be explained without them)."""
    deadline = time.monotonic() + timeout_s
    while len(load.acked) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(load.acked) >= count, (f"{what}: {len(load.acked)} of {count} acknowledged, "
                                      f"load failures {load.failures}\n"
                                      f"{broker._log_text()[-3000:]}")


def _read_everything(broker_addr: str) -> dict[tuple[int, int], bytes]:
    """Every record of every queue from offset 0 (whole, contiguous) as (queue, offset)->body."""
    stored = {}
    with SyncRemotingClient() as client:
        client.connect(broker_addr)
        for queue_id in range(QUEUES):
            queue_offset = 0
            while True:
                response = _pull(client, queue_id, queue_offset)
                if response.code != ResponseCode.SUCCESS:
                    assert response.code == ResponseCode.PULL_NOT_FOUND, response.remark
                    assert int(response.ext_fields["maxOffset"]) == queue_offset
                    break
                for body in _whole_records(response.body, queue_id, queue_offset):
                    stored[(queue_id, queue_offset)] = body
                    queue_offset += 1
    return stored


@pytest.mark.parametrize("flush_disk_type", ["SYNC_FLUSH", "ASYNC_FLUSH"])
@pytest.mark.parametrize("target", TARGETS)
def test_kill_minus_9_under_load(tmp_path, rand, target, flush_disk_type):
    broker = StandaloneBroker(os.path.join(tmp_path, "long-store-path-" + "d" * 100, "e" * 120),
                              dict(OVERRIDES, flushDiskType=flush_disk_type))
    assert len(broker.store_dir.encode()) > LONG_STORE_PATH_BYTES
    with broker:
        with Load(broker.broker_addr, rand) as load:
            for _ in range(KILLS_PER_CASE):
                before = len(load.acked)
                time.sleep(rand.uniform(0.5, 2.0))      # a random moment of the load
                _wait_acked(broker, load, before + 21, 10, "the load did not run before the kill")
                _crash(broker, target)
                _wait_acked(broker, load, len(load.acked) + 100, 10,
                            "the producer did not resume")
        assert not load.failures, load.failures
        assert load.consumed > 0, "the consumer thread read nothing"
        for queue_id in range(QUEUES):      # the last acknowledged sends dispatched
            acked_offsets = [offset for queue, offset in load.acked if queue == queue_id]
            broker.wait_max_offset(TOPIC, queue_id, max(acked_offsets, default=-1) + 1)
        stored = _read_everything(broker.broker_addr)
    print(f"sent={load.sent} acknowledged={len(load.acked)} stored={len(stored)} "  # noqa: T201
          f"consumed_live={load.consumed}")
    for where, body in load.acked.items():
        assert stored.get(where) == body, f"acknowledged message lost or moved at {where}"
    bodies = list(stored.values())
    assert len(set(bodies)) == len(bodies), "a message is stored twice"
    assert len(stored) <= load.sent
