# Tests of rmqgo, the Go-client (rocketmq-client-go v2.1.2) harness, and its Java round trip.
"""Goal: prove the rmqgo harness builds from the pinned Go module and talks to a real broker.

Method: build tests/compat/goclient with tools/go_client.py (skipped when `go` is missing, a
failure under PYBROKER_REQUIRE_PEERS=1), check the CLI contract (help, linked client version,
usage errors, bounded failure against refused and silent name servers), then, when the Java
RocketMQ harness (tools/java_rocketmq.py) is installed, send messages with the Go producer and
read them back with the Go push and pull consumers against the real Java broker, comparing
counts, ids, offsets and body checksums exactly.
"""
import hashlib
import json
import os
import pathlib
import socket
import subprocess
import threading
import time
import uuid

import pytest

from tests import peers

GO_CLIENT_VERSION = "v2.1.2"
ROUND_TRIP_COUNT = 20
# rmqgo's own hard bound past --timeout: watchdogGrace in main.go.
WATCHDOG_GRACE_S = 7


go_client = peers.go_client


@pytest.fixture(scope="module")
def rmqgo() -> pathlib.Path:
    return peers.rmqgo_path()


@pytest.fixture
def run_rmqgo(rmqgo, tmp_path):
    """Run rmqgo with args; returns (returncode, JSON records from stdout, stderr, seconds)."""
    # Broadcasting consumers keep offsets in a local file; keep it inside the test's tmp dir.
    env = dict(os.environ, **{"rocketmq.client.localOffsetStoreDir": str(tmp_path / "offsets")})

    def run(*args, timeout_s: float = 120):
        started = time.monotonic()
        result = subprocess.run([str(rmqgo), *map(str, args)], capture_output=True, text=True,
                                timeout=timeout_s, env=env, stdin=subprocess.DEVNULL)
        records = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
        return result.returncode, records, result.stderr, time.monotonic() - started
    return run


def _records(records, kind: str) -> list[dict]:
    return [record for record in records if record["type"] == kind]


def _expected_body(index: int, size_bytes: int) -> bytes:
    """The body rmqgo generates for message `index`: "rmqgo:<index>:" repeated, cut to size."""
    unit = f"rmqgo:{index}:".encode()
    return (unit * (size_bytes // len(unit) + 1))[:size_bytes]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.compat
@pytest.mark.slow
def test_build_is_cached_by_source_digest(rmqgo):
    again = go_client.build_go_client()
    assert again.path == rmqgo and not again.built
    assert rmqgo.name == f"rmqgo-{go_client.source_digest(toolchain=go_client.go_version())}"
    assert rmqgo.stat().st_size > 1_000_000


@pytest.mark.compat
def test_help_lists_every_subcommand(run_rmqgo):
    code, records, stderr, _ = run_rmqgo("--help")
    assert code == 0 and records == []
    for name in ("send", "consume", "pull", "admin", "version"):
        assert f"  {name} " in stderr
    code, _, stderr, _ = run_rmqgo("send", "-h")
    assert code == 0
    for flag in ("-mode", "-batch", "-props", "-selector", "-timeout", "-namesrv"):
        assert flag in stderr


@pytest.mark.compat
def test_version_reports_the_linked_client(run_rmqgo):
    code, records, _, _ = run_rmqgo("version")
    assert code == 0
    assert records == [{"type": "version", "rmqgo": records[0]["rmqgo"],
                        "client": GO_CLIENT_VERSION, "go": records[0]["go"]}]
    assert records[0]["go"].startswith("go1.")


@pytest.mark.compat
@pytest.mark.parametrize("args", [
    (),
    ("no-such-subcommand",),
    ("send",),
    ("send", "--topic", "T", "--mode", "sometimes"),
    ("send", "--topic", "T", "--count", "0"),
    ("send", "--topic", "T", "--selector", "manual"),
    ("send", "--topic", "T", "--body-size", "-1"),
    ("send", "--topic", "T", "--namesrv", ""),
    ("consume", "--topic", "T", "--model", "sideways"),
    ("consume", "--topic", "T", "--from", "timestamp"),
    ("pull", "--topic", "T", "--offset", "-2"),
    ("admin", "create-topic", "--topic", "T"),
    ("admin", "rename-topic"),
    ("send", "--topic", "T", "stray-argument"),
])
def test_usage_errors_exit_2_without_output(run_rmqgo, args):
    code, records, stderr, _ = run_rmqgo(*args)
    assert code == 2, stderr
    assert records == [] and stderr.strip()


@pytest.fixture
def refused_namesrv():
    """An address on which nothing listens: a bound port that never called listen()."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    yield f"127.0.0.1:{holder.getsockname()[1]}"
    holder.close()


@pytest.mark.compat
def test_refused_name_server_fails_fast_with_error_lines(run_rmqgo, refused_namesrv):
    namesrv = refused_namesrv
    code, records, stderr, seconds = run_rmqgo("send", "--namesrv", namesrv, "--topic", "T",
                                               "--count", 3, "--timeout", "20s")
    assert code == 1 and "3 of 3 requests failed" in stderr
    sends = _records(records, "send")
    assert [s["index"] for s in sends] == [0, 1, 2]
    assert all(s["status"] == "ERROR" and s["error"] for s in sends)
    assert _records(records, "summary")[0]["failedRequests"] == 3
    assert seconds < 20
    for command in ("consume", "pull"):
        code, _, stderr, seconds = run_rmqgo(command, "--namesrv", namesrv, "--topic", "T",
                                             "--timeout", "20s")
        assert code == 1 and stderr.strip() and seconds < 20


class _SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never answers (a hung name server)."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.connections = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.listener.getsockname()[1]}"

    def _accept(self):
        while not self.stopping.is_set():
            try:
                self.connections.append(self.listener.accept()[0])
            except OSError:
                continue

    def close(self):
        self.stopping.set()
        self.thread.join(timeout=5)
        for connection in self.connections:
            connection.close()
        self.listener.close()


@pytest.mark.compat
@pytest.mark.slow
def test_silent_name_server_is_bounded_by_timeout(rmqgo):
    server = _SilentServer()
    started = time.monotonic()
    try:
        # Concurrently: each is held by the silent peer until rmqgo's own deadline or watchdog.
        processes = [subprocess.Popen([str(rmqgo), command, "--namesrv", server.address,
                                       "--topic", "T", "--count", "1", "--timeout", "3s",
                                       "--log-level", "error"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for command in ("send", "consume", "pull")]
        outcomes = [process.communicate(timeout=60) + (process.returncode,)
                    for process in processes]
    finally:
        server.close()
    assert time.monotonic() - started < 3 + WATCHDOG_GRACE_S + 3
    for _, stderr, returncode in outcomes:
        assert returncode != 0 and stderr.strip()


# ---- against the real Java broker (tools/java_rocketmq.py) ----

@pytest.fixture(scope="module", params=["4.9.8", "5.3.3"])
def java_broker(request, rmqgo, tmp_path_factory):
    """A Java NameServer + broker on free loopback ports, for one pinned RocketMQ version."""
    install = peers.java_install(request.param)
    work_dir = tmp_path_factory.mktemp(f"java-{request.param}")
    with peers.java_broker(work_dir, install) as broker:
        yield broker


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def _create_topic(run_rmqgo, broker, topic: str, queues: int, *extra) -> None:
    code, records, stderr, _ = run_rmqgo(
        "admin", "create-topic", "--namesrv", broker.namesrv_addr, "--topic", topic,
        "--broker-addr", broker.broker_addr, "--read-queues", queues,
        "--write-queues", queues, *extra)
    assert code == 0 and records[-1]["error"] == "", stderr
    code, records, stderr, _ = run_rmqgo("admin", "queues", "--namesrv", broker.namesrv_addr,
                                         "--topic", topic)
    assert code == 0, stderr
    assert sorted(q["queueId"] for q in _records(records, "queue")) == list(range(queues))


def _check_sends(sends, count: int, body_size: int) -> dict:
    """Every send acknowledged once; returns {msgId: send record} for single-message sends."""
    assert [s["status"] for s in sends] == ["SEND_OK"] * len(sends), sends
    assert sum(s["count"] for s in sends) == count
    shas = [sha for s in sends for sha in s["bodySha256"]]
    assert shas == [_sha256(_expected_body(i, body_size)) for i in range(count)]
    positions = [(s["queueId"], s["queueOffset"]) for s in sends]
    assert len(set(positions)) == len(positions)
    return {s["msgId"]: s for s in sends}


@pytest.mark.compat
@pytest.mark.slow
def test_round_trip_sync_send_and_push_consume_exact(run_rmqgo, java_broker):
    topic, group, body_size = _unique("GoRoundTrip"), _unique("go_rt"), 200
    _create_topic(run_rmqgo, java_broker, topic, 4)
    code, records, stderr, _ = run_rmqgo(
        "send", "--namesrv", java_broker.namesrv_addr, "--topic", topic,
        "--count", ROUND_TRIP_COUNT, "--tag", "TagA", "--keys", "key-{i},shared",
        "--props", "color=c{i%3}", "--body-size", body_size)
    assert code == 0, stderr
    sent = _check_sends(_records(records, "send"), ROUND_TRIP_COUNT, body_size)
    assert len(sent) == ROUND_TRIP_COUNT
    for queue_id in range(4):  # a fresh topic: each queue's offsets are 0, 1, 2, ...
        offsets = sorted(s["queueOffset"] for s in sent.values() if s["queueId"] == queue_id)
        assert offsets == list(range(len(offsets)))

    code, records, stderr, _ = run_rmqgo(
        "consume", "--namesrv", java_broker.namesrv_addr, "--topic", topic, "--group", group,
        "--count", ROUND_TRIP_COUNT, "--linger", "2s", "--timeout", "90s")
    assert code == 0, stderr
    messages = _records(records, "message")
    assert len(messages) == ROUND_TRIP_COUNT  # nothing extra arrived during the linger
    assert {m["msgId"] for m in messages} == set(sent)
    for message in messages:
        send = sent[message["msgId"]]
        index = send["index"]
        assert message["delivery"] == 1 and message["reconsumeTimes"] == 0
        assert (message["queueId"], message["queueOffset"]) == (send["queueId"],
                                                                send["queueOffset"])
        assert message["offsetMsgId"] == send["offsetMsgId"]
        assert message["bodySha256"] == _sha256(_expected_body(index, body_size))
        assert message["bodySize"] == body_size
        assert message["tags"] == "TagA" and message["keys"] == f"key-{index} shared"
        assert message["props"]["color"] == f"c{index % 3}"
        assert message["props"]["UNIQ_KEY"] == message["msgId"]
    summary = _records(records, "summary")[0]
    assert (summary["distinct"], summary["deliveries"], summary["duplicated"]) == (
        ROUND_TRIP_COUNT, ROUND_TRIP_COUNT, 0)


@pytest.mark.compat
@pytest.mark.slow
def test_async_batches_then_pull_from_offsets_and_commit(run_rmqgo, java_broker):
    topic, group, body_size, batch = _unique("GoBatch"), _unique("go_pull"), 50, 5
    namesrv = ("--namesrv", java_broker.namesrv_addr, "--topic", topic)
    _create_topic(run_rmqgo, java_broker, topic, 2)
    code, records, stderr, _ = run_rmqgo("send", *namesrv, "--mode", "async", "--batch", batch,
                                         "--count", ROUND_TRIP_COUNT, "--body-size", body_size)
    assert code == 0, stderr
    sends = sorted(_records(records, "send"), key=lambda s: s["index"])
    assert [s["index"] for s in sends] == list(range(0, ROUND_TRIP_COUNT, batch))
    _check_sends(sends, ROUND_TRIP_COUNT, body_size)
    expected = {}  # (queueId, queueOffset) -> (offsetMsgId, body sha256)
    for send in sends:
        # v2.1.2 gives batch messages no UNIQ_KEY, so the result's msgId is empty and the
        # broker's comma-joined offset msgIds are the only ids.
        assert send["msgId"] == ""
        offset_ids = send["offsetMsgId"].split(",")
        assert len(offset_ids) == batch
        for k in range(batch):
            expected[(send["queueId"], send["queueOffset"] + k)] = (
                offset_ids[k], _sha256(_expected_body(send["index"] + k, body_size)))

    code, records, stderr, _ = run_rmqgo("pull", *namesrv, "--offset", 0,
                                         "--count", ROUND_TRIP_COUNT, "--timeout", "60s")
    assert code == 0, stderr
    pulled = {(m["queueId"], m["queueOffset"]): (m["offsetMsgId"], m["bodySha256"])
              for m in _records(records, "message")}
    assert len(_records(records, "message")) == ROUND_TRIP_COUNT and pulled == expected

    per_queue = {q: sum(1 for (queue_id, _) in expected if queue_id == q) for q in (0, 1)}
    code, records, stderr, _ = run_rmqgo("pull", *namesrv, "--group", group, "--offset", -1,
                                         "--commit", "--count", ROUND_TRIP_COUNT)
    assert code == 0, stderr
    assert {r["queueId"]: r["stored"] for r in _records(records, "offset")} == {0: 0, 1: 0}
    assert {r["queueId"]: r["offset"] for r in _records(records, "commit")} == per_queue
    code, records, stderr, _ = run_rmqgo("pull", *namesrv, "--group", group, "--offset", -1,
                                         "--count", 1, "--timeout", "3s")
    assert code == 3, stderr  # nothing new after the committed offsets
    assert {r["queueId"]: r["stored"] for r in _records(records, "offset")} == per_queue
    assert _records(records, "message") == []


@pytest.mark.compat
@pytest.mark.slow
def test_orderly_send_by_sharding_key_and_orderly_consume(run_rmqgo, java_broker):
    topic, group, count, keys = _unique("GoOrder"), _unique("go_order"), 40, 4
    namesrv = ("--namesrv", java_broker.namesrv_addr, "--topic", topic)
    _create_topic(run_rmqgo, java_broker, topic, 4, "--order")
    code, records, stderr, _ = run_rmqgo("send", *namesrv, "--count", count, "--selector",
                                         "hash", "--sharding-key", f"order-{{i%{keys}}}",
                                         "--props", "seq={i}", "--body-size", 16)
    assert code == 0, stderr
    queue_of_key = {}
    for send in _records(records, "send"):
        key = f"order-{send['index'] % keys}"
        assert queue_of_key.setdefault(key, send["queueId"]) == send["queueId"]
    code, records, stderr, _ = run_rmqgo("consume", *namesrv, "--group", group, "--orderly",
                                         "--count", count, "--timeout", "90s")
    assert code == 0, stderr
    messages = _records(records, "message")
    assert len(messages) == count
    sequences = {}
    for message in messages:
        key = message["props"]["SHARDING_KEY"]
        assert message["queueId"] == queue_of_key[key]
        sequences.setdefault(key, []).append(int(message["props"]["seq"]))
    assert sequences == {f"order-{k}": list(range(k, count, keys)) for k in range(keys)}


@pytest.mark.compat
@pytest.mark.slow
def test_broadcasting_delivers_every_message_to_each_consumer(rmqgo, run_rmqgo, java_broker,
                                                              tmp_path):
    topic, group, count = _unique("GoBroadcast"), _unique("go_bc"), 10
    namesrv = ("--namesrv", java_broker.namesrv_addr, "--topic", topic)
    code, records, stderr, _ = run_rmqgo("send", *namesrv, "--count", count)  # auto-created
    assert code == 0, stderr
    sent = {s["msgId"] for s in _records(records, "send")}
    consumers = []
    for n in range(2):
        env = dict(os.environ,
                   **{"rocketmq.client.localOffsetStoreDir": str(tmp_path / f"offsets{n}")})
        consumers.append(subprocess.Popen(
            [str(rmqgo), "consume", *namesrv, "--group", group, "--model", "broadcasting",
             "--count", str(count), "--linger", "1s", "--timeout", "90s"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    for process in consumers:
        stdout, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr
        records = [json.loads(line) for line in stdout.splitlines()]
        assert sorted(m["msgId"] for m in _records(records, "message")) == sorted(sent)


@pytest.mark.compat
@pytest.mark.slow
def test_retry_later_redelivers_through_the_retry_topic(run_rmqgo, java_broker):
    topic, group, count = _unique("GoRetry"), _unique("go_retry"), 4
    namesrv = ("--namesrv", java_broker.namesrv_addr, "--topic", topic)
    code, records, stderr, _ = run_rmqgo("send", *namesrv, "--count", count)
    assert code == 0, stderr
    sent = {s["msgId"] for s in _records(records, "send")}
    # Without this the Go client first sees %RETRY%<group> on its 30 s route poll, so the
    # redelivery arrives after ~40 s instead of the 10 s of delay level 3.
    _create_topic(run_rmqgo, java_broker, f"%RETRY%{group}", 1)
    code, records, stderr, _ = run_rmqgo("consume", *namesrv, "--group", group, "--retry-first",
                                         "--count", count, "--timeout", "90s")
    assert code == 0, stderr
    deliveries = {}
    for message in _records(records, "message"):
        deliveries.setdefault(message["msgId"], []).append(
            (message["delivery"], message["reconsumeTimes"], message["topic"]))
    # First delivery refused (CONSUMER_SEND_MSG_BACK), second one from %RETRY%<group>, which
    # the client reports under the original topic.
    assert deliveries == {msg_id: [(1, 0, topic), (2, 1, topic)] for msg_id in sent}
