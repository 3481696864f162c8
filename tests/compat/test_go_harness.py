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
import importlib.util
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
GO_CLIENT_VERSION = "v2.1.2"
ROUND_TRIP_COUNT = 20
# rmqgo's own hard bound past --timeout: watchdogGrace in main.go.
WATCHDOG_GRACE_S = 7


def _load_tool(name: str):
    """Import tools/<name>.py by path (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"_pybroker_tools_{name}",
                                                  ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _require_peers() -> bool:
    return os.environ.get("PYBROKER_REQUIRE_PEERS", "") not in ("", "0")


def _missing_peer(reason: str):
    if _require_peers():
        pytest.fail(f"PYBROKER_REQUIRE_PEERS=1 but {reason}")
    pytest.skip(reason)


go_client = _load_tool("go_client")


@pytest.fixture(scope="module")
def rmqgo() -> pathlib.Path:
    reason = go_client.go_available()
    if reason:
        _missing_peer(reason)
    return go_client.build_go_client().path


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


def _refused_address() -> str:
    """An address on which nothing listens: a bound port that never called listen()."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    _refused_address.holder = holder  # keep the port reserved for the test's lifetime
    return f"127.0.0.1:{holder.getsockname()[1]}"


@pytest.mark.compat
def test_refused_name_server_fails_fast_with_error_lines(run_rmqgo):
    namesrv = _refused_address()
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
@pytest.mark.parametrize("command", ["send", "consume"])
def test_silent_name_server_is_bounded_by_timeout(run_rmqgo, command):
    server = _SilentServer()
    try:
        code, _, stderr, seconds = run_rmqgo(command, "--namesrv", server.address,
                                             "--topic", "T", "--count", 1, "--timeout", "3s",
                                             "--log-level", "error", timeout_s=60)
    finally:
        server.close()
    assert code != 0 and stderr.strip()
    assert seconds < 3 + WATCHDOG_GRACE_S + 3
