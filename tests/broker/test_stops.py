"""Stopping the broker the ways operators and service managers do is a clean, complete stop.

Method: a real `pybroker standalone` (supervisor, workers, embedded NameServer) in its own
process group on free ports. Each case takes some acknowledged sends, then delivers one stop:
SIGTERM or SIGINT to the supervisor alone, or to the whole process group as systemd's default
KillMode and `kill -TERM -- -PGID` do (and, where systemd runs, the real `systemd-run` unit
stop). The supervisor must exit 0, every process of the broker (workers, NameServer) must be
gone, the abort file removed, and the next start must recover normally with every message.
kill -9 of the supervisor alone must take every worker and the NameServer with it (no orphan
keeps a port), and a broker whose ports are taken must refuse to start with a clear message
while the running one keeps serving every new connection.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.remoting.client import SyncRemotingClient

pytestmark = [pytest.mark.slow]

TIMEOUT_MS = 10_000
TOPIC = "StopTopic"
MESSAGES = 30
GONE_TIMEOUT_S = 10.0


def _send(client, body: bytes):
    properties = props.encode_properties({"WAIT": "true", "UNIQ_KEY": body.hex()})
    ext = {"a": "stop_producer", "b": TOPIC, "c": "TBW102", "d": "4", "e": "0", "f": "0",
           "g": "1700000000000", "h": "0", "i": properties, "j": "0", "k": "false",
           "m": "false"}
    return client.invoke(create_request(RequestCode.SEND_MESSAGE_V2, ext, body), TIMEOUT_MS)


def _max_offset(broker) -> int:
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        response = client.invoke(create_request(RequestCode.GET_MAX_OFFSET,
                                                {"topic": TOPIC, "queueId": "0"}), TIMEOUT_MS)
        assert response.code == ResponseCode.SUCCESS, response.remark
        return int(response.ext_fields["offset"])


def _send_some(broker) -> None:
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        for index in range(MESSAGES):
            response = _send(client, b"stop-%d" % index)
            assert response.code == ResponseCode.SUCCESS, response.remark


def _broker_processes(broker) -> list[psutil.Process]:
    supervisor = psutil.Process(broker.process.pid)
    return [supervisor] + supervisor.children(recursive=True)


def _assert_all_gone(processes: list[psutil.Process], timeout_s: float = GONE_TIMEOUT_S):
    gone, alive = psutil.wait_procs(processes, timeout=timeout_s)
    assert not alive, f"still running: {[(p.pid, p.name()) for p in alive]}"


# Every log line: time, level, process name and pid, logger (pybroker/logs.py).
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (INFO|WARNING|ERROR|CRITICAL) "
                      r"\[(?P<name>[a-z0-9-]+) \d+\] pybroker[a-z_.]*: ")
# What standalone prints on stdout (not log lines): a banner and indented lines.
STDOUT_BANNER = re.compile(r"^pybroker \S+ standalone is serving.*?\nSend a test message:\n"
                           r"  .*?\n", re.MULTILINE | re.DOTALL)
PROCESS_NAMES = {"supervisor", "namesrv", "appender", "dispatcher", "flusher", "remoting-0",
                 "remoting-1"}


def _assert_log_lines(text: str) -> set[str]:
    """Every line is a full log line; returns the process names seen."""
    names = set()
    for line in STDOUT_BANNER.sub("", text).splitlines():
        assert not line.startswith("Traceback"), text[-3000:]
        found = LOG_LINE.match(line)
        assert found, f"log line without time, level or process: {line!r}"
        names.add(found["name"])
    return names


def _assert_stopped_cleanly(broker, log_offset: int) -> None:
    assert not os.path.exists(os.path.join(broker.store_dir, "abort")), "abort file left"
    tail = broker._log_text()[log_offset:]
    assert PROCESS_NAMES <= _assert_log_lines(broker._log_text())
    assert "died" not in tail and "restarting the data plane" not in tail, tail[-3000:]
    assert "stopped cleanly" in tail, tail[-3000:]
    # A clean stop says so and nothing else: no WARNING or ERROR of any process (a remoting
    # worker that saw the metadata service vanish used to warn "link ... lost").
    noisy = [line for line in tail.splitlines() if " WARNING [" in line or " ERROR [" in line]
    assert not noisy, noisy


def _assert_clean_restart(broker, log_offset: int, messages: int = MESSAGES) -> None:
    _assert_stopped_cleanly(broker, log_offset)
    restart_offset = len(broker._log_text())
    broker.start()
    assert "recovered (normal)" in broker._log_text()[restart_offset:]
    assert _max_offset(broker) == messages


def _wait_exit(broker, timeout_s: float = 30.0) -> int:
    try:
        return broker.process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        broker.kill()
        raise AssertionError(f"broker did not stop:\n{broker._log_text()[-3000:]}") from None


def _stop_with(broker, target: str, signal_number: int) -> None:
    processes = _broker_processes(broker)
    assert len(processes) >= 6, [p.name() for p in processes]   # + NameServer, workers
    log_offset = len(broker._log_text())
    if target == "group":
        os.killpg(broker.process.pid, signal_number)
    else:
        os.kill(broker.process.pid, signal_number)
    assert _wait_exit(broker) == 0, broker._log_text()[log_offset:][-3000:]
    _assert_all_gone(processes)
    _assert_stopped_cleanly(broker, log_offset)


@pytest.mark.parametrize("target", ["supervisor", "group"])
@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGINT],
                         ids=["SIGTERM", "SIGINT"])
def test_stop_signal_is_a_clean_stop(tmp_path, target, signal_number):
    # The HA port on loopback: on 0.0.0.0 every generation's start warns that it serves any
    # peer, and this test reads the restart's lines too.
    broker = StandaloneBroker(tmp_path, {"haListenAddress": "127.0.0.1"})
    with broker:
        _stop_with(broker, target, signal_number)        # at once after "boot success"
        log_offset = len(broker._log_text())
        broker.start()
        assert "recovered (normal)" in broker._log_text()[log_offset:]
        _send_some(broker)
        _stop_with(broker, target, signal_number)        # after traffic
        _assert_clean_restart(broker, log_offset)


def _systemd_available() -> bool:
    if shutil.which("systemd-run") is None:
        return False
    probe = subprocess.run(["systemctl", "is-system-running"], capture_output=True, text=True,
                           check=False)
    return probe.stdout.strip() in ("running", "degraded")


@pytest.mark.skipif(not _systemd_available(),
                    reason="systemd is not PID 1 here; the same signals are sent by hand above")
def test_systemd_unit_stop_is_a_clean_stop(tmp_path):
    broker = StandaloneBroker(tmp_path)
    unit = f"pybroker-test-{os.getpid()}-{broker.broker_port}"
    command = [sys.executable, "-m", "pybroker", "standalone", "-c", broker.conf_path,
               "--namesrv-port", str(broker.namesrv_port)]
    subprocess.run(["systemd-run", f"--unit={unit}", "--property=KillMode=control-group",
                    "--property=TimeoutStopSec=60", f"--property=StandardOutput=append:"
                    f"{broker.log_path}", "--property=StandardError=inherit",
                    *command], check=True)
    try:
        deadline = time.monotonic() + 60
        while "] boot success" not in broker._log_text():
            assert time.monotonic() < deadline, broker._log_text()[-3000:]
            time.sleep(0.1)
        _send_some(broker)
        log_offset = len(broker._log_text())
        subprocess.run(["systemctl", "stop", unit], check=True, timeout=90)
        result = subprocess.run(["systemctl", "show", unit, "-p", "ExecMainStatus"],
                                capture_output=True, text=True, check=True)
        assert result.stdout.strip() == "ExecMainStatus=0", result.stdout
        _assert_clean_restart(broker, log_offset)
        broker.stop()
    finally:
        subprocess.run(["systemctl", "stop", unit], check=False, timeout=90)
        broker.kill()


def test_kill_minus_9_of_the_supervisor_leaves_no_orphan(tmp_path):
    broker = StandaloneBroker(tmp_path)
    with broker:
        _send_some(broker)
        children = _broker_processes(broker)[1:]
        assert any(child.name() == "pb-namesrv" for child in children)
        os.kill(broker.process.pid, signal.SIGKILL)
        broker.process.wait(10)
        _assert_all_gone(children)
        # Nothing holds the ports: the next start binds them and recovers from the crash.
        log_offset = len(broker._log_text())
        broker.start()
        tail = broker._log_text()[log_offset:]
        assert "recovered (abnormal)" in tail, tail[-3000:]
        assert _max_offset(broker) == MESSAGES


def _served_by(broker_addr: str) -> bool:
    with SyncRemotingClient() as client:
        client.connect(broker_addr)
        response = client.invoke(create_request(RequestCode.GET_MAX_OFFSET,
                                                {"topic": TOPIC, "queueId": "0"}), TIMEOUT_MS)
        return response.code == ResponseCode.SUCCESS and \
            int(response.ext_fields["offset"]) == MESSAGES


def _blocker(port: int) -> socket.socket:
    """A plain listener on ``port`` (an orphaned NameServer, another program)."""
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", port))
    blocker.listen()
    return blocker


@pytest.mark.parametrize("port", ["listenPort", "fastPort", "namesrvPort"])
def test_a_busy_port_refuses_start_up(tmp_path, port):
    with StandaloneBroker(tmp_path / "first") as first:
        _send_some(first)
        if port == "listenPort":      # a second broker on the same ports
            second = StandaloneBroker(tmp_path / "second",
                                      {"listenPort": str(first.broker_port)})
            busy, blocker = first.broker_port, None
        else:
            second = StandaloneBroker(tmp_path / "second")
            busy = second.namesrv_port if port == "namesrvPort" else second.broker_port - 2
            blocker = _blocker(busy)
        try:
            with pytest.raises(RuntimeError, match="exited with 1"):
                second.start()
        finally:
            if blocker is not None:
                blocker.close()
        log = second._log_text()
        assert f"port {busy} " in log and "already in use" in log, log[-3000:]
        assert "boot success" not in log
        # Every new connection reaches the first broker (no second broker took a share).
        assert all(_served_by(first.broker_addr) for _ in range(100))
