# Tests of rmqgo, the Go-client (rocketmq-client-go v2.1.2) harness, and its Java round trip.
"""Goal: prove the rmqgo harness builds from the pinned Go module and talks to a real broker.

Method: build tests/compat/goclient with tools/go_client.py (skipped when `go` is missing, a
failure under PYBROKER_REQUIRE_PEERS=1), check the CLI contract (help, linked client version,
usage errors, bounded failure against refused and silent name servers), then, when the Java
RocketMQ harness (tools/java_rocketmq.py) is installed, send messages with the Go producer and
read them back with the Go push and pull consumers against the real Java brokers, comparing
counts, ids, offsets and body checksums exactly: the scenarios of tests/go_scenarios.py, which
tests/compat/test_go_client_pybroker.py runs against pybroker.
"""
import json
import os
import pathlib
import socket
import subprocess
import threading
import time

import pytest

from tests import go_scenarios, peers

GO_CLIENT_VERSION = "v2.1.2"
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
# The scenarios are tests/go_scenarios.py's, the same ones test_go_client_pybroker.py runs
# against pybroker.

@pytest.fixture(scope="module", params=["4.9.8", "5.3.3"])
def java_broker(request, rmqgo, tmp_path_factory):
    """A Java NameServer + broker on free loopback ports, for one pinned RocketMQ version."""
    install = peers.java_install(request.param)
    work_dir = tmp_path_factory.mktemp(f"java-{request.param}")
    with peers.java_broker(work_dir, install) as broker:
        yield broker


@pytest.fixture
def go(rmqgo, tmp_path) -> go_scenarios.Rmqgo:
    return go_scenarios.Rmqgo(rmqgo, tmp_path / "offsets")


@pytest.mark.compat
@pytest.mark.slow
def test_round_trip_sync_send_and_push_consume_exact(go, java_broker):
    go_scenarios.sync_send_push_consume_exact(go, java_broker)


@pytest.mark.compat
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_batches_then_pull_from_offsets_and_commit(go, java_broker, mode):
    go_scenarios.batch_send_pull_commit_and_reread(go, java_broker, mode)


@pytest.mark.compat
@pytest.mark.slow
def test_orderly_send_by_sharding_key_and_orderly_consume(go, java_broker):
    go_scenarios.orderly_send_by_sharding_key_and_orderly_consume(go, java_broker)


@pytest.mark.compat
@pytest.mark.slow
def test_broadcasting_delivers_every_message_to_each_consumer(go, java_broker, tmp_path):
    go_scenarios.broadcasting_delivers_every_message_to_each_consumer(go, java_broker, tmp_path)


@pytest.mark.compat
@pytest.mark.slow
def test_retry_later_redelivers_through_the_retry_topic(go, java_broker):
    go_scenarios.consume_failure_redelivers_through_the_retry_topic(go, java_broker)
