# Compat: README's two commands (pybroker, then Apache's rocketmq-proxy in front of it) work.
"""Goal: the README's proxy section runs as written: `pybroker standalone`, then
`python3 tools/rocketmq_proxy.py run -n 127.0.0.1:9876` writes rmq-proxy.json for CLUSTER mode,
serves gRPC in front of the broker, the section's topic command and Python SDK program send a
message through it, and the proxy stops with its JVM on Ctrl-C.

Method: the two commands come from README.md's `<!-- proxy -->` block and run with free ports
(the broker as tests do, the proxy's command with `-n`, `--grpc-port`, `--remoting-port` and
`--work-dir` replaced); the test reads the printed serving line and rmq-proxy.json, checks the
proxy created its system topic on pybroker (the NameServer routes it), runs the admin command
and the Python program (with rocketmq-python-client's environment, tools/python_sdk_venv.py,
the addresses replaced) and checks the message id it prints, sends SIGINT to the command and waits
for the command and the JVM to end. Missing Java skips (fails under
PYBROKER_REQUIRE_PEERS=1).
"""
import json
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from pybroker._testbase.cluster import StandaloneBroker, free_port
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from tests import peers
from tests.ha_support import client_for, wait_for

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("<!-- proxy -->", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]


def _readme_sdk_snippet() -> tuple[str, str]:
    """(the admin command, the Python program) of README's `<!-- proxy-python -->` block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8").split("<!-- proxy-python -->", 1)[1]
    command = text.split("```sh\n", 1)[1].split("```", 1)[0].strip()
    program = text.split("```python\n", 1)[1].split("```", 1)[0]
    return command, program


def _run_sdk_snippet(tmp_path, namesrv: str, endpoint: str) -> str:
    """README's admin command and Python SDK program, with this test's addresses; the
    program's output."""
    command, program = _readme_sdk_snippet()
    argv = command.replace("127.0.0.1:9876", namesrv).split()
    assert argv[:2] == ["pybroker", "admin"], argv
    created = subprocess.run([sys.executable, "-m", "pybroker", *argv[1:]], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
    assert created.returncode == 0, created.stderr
    assert "message.type=NORMAL" in created.stdout
    script = tmp_path / "readme_sdk.py"
    script.write_text(program.replace("127.0.0.1:8091", endpoint))
    run = subprocess.run([str(peers.python_sdk_python()), str(script)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


def _route_code(namesrv_addr: str, topic: str) -> int:
    client = client_for(namesrv_addr)
    try:
        return client.invoke(create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                            {"topic": topic}), 5000).code
    finally:
        client.close()


def test_readme_proxy_commands(tmp_path):
    broker_command, proxy_command = _readme_commands()
    assert broker_command == "pybroker standalone"
    argv = proxy_command.split()
    assert argv[:4] == ["python3", "tools/rocketmq_proxy.py", "run", "-n"], argv
    assert argv[4] == "127.0.0.1:9876" and len(argv) == 5, argv
    peers.java_install("5.3.3")
    grpc_port, remoting_port = free_port(), free_port()
    with StandaloneBroker(tmp_path / "broker") as broker:
        namesrv = f"127.0.0.1:{broker.namesrv_port}"
        command = [sys.executable, *argv[1:4], namesrv, "--grpc-port", str(grpc_port),
                   "--remoting-port", str(remoting_port), "--work-dir", str(tmp_path / "proxy")]
        with open(tmp_path / "proxy.out", "wb") as out:
            process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        try:
            banner = wait_for(lambda: re.search(
                r"serving gRPC on 127\.0\.0\.1:(\d+) .* pid (\d+)",
                (tmp_path / "proxy.out").read_text()), 120, "the proxy's serving line")
            assert process.poll() is None
            assert int(banner.group(1)) == grpc_port
            jvm_pid = int(banner.group(2))
            config = json.loads((tmp_path / "proxy" / "conf" / "rmq-proxy.json").read_text())
            assert {key: config[key] for key in ("proxyMode", "namesrvAddr", "grpcServerPort",
                                                  "remotingListenPort")} == {
                "proxyMode": "cluster", "namesrvAddr": namesrv, "grpcServerPort": grpc_port,
                "remotingListenPort": remoting_port}
            wait_for(lambda: _route_code(namesrv, "DefaultHeartBeatSyncerTopic")
                     == ResponseCode.SUCCESS, 30, "the proxy's system topic on pybroker")
            printed = _run_sdk_snippet(tmp_path, namesrv, f"127.0.0.1:{grpc_port}")
            assert re.fullmatch(r"[0-9A-F]{34}\n", printed), printed
            masks = _signal_masks(process.pid)
            process.send_signal(signal.SIGINT)          # Ctrl-C
            try:
                assert process.wait(timeout=60) == 0
            except subprocess.TimeoutExpired:
                raise AssertionError(f"the command did not end within 60 s of SIGINT ({masks}):"
                                     f"\n{(tmp_path / 'proxy.out').read_text()}") from None
            deadline = time.monotonic() + 10
            while _alive(jvm_pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not _alive(jvm_pid), "the proxy's JVM outlived its command"
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
            peers.load_tool("java_rocketmq").cleanup_stale(tmp_path / "proxy")


def _signal_masks(pid: int) -> str:
    """The signal mask lines of /proc/<pid>/status (blocked, ignored, caught), for a report."""
    lines = pathlib.Path(f"/proc/{pid}/status").read_text().splitlines()
    return ", ".join(line.replace("\t", " ") for line in lines
                     if line.startswith(("SigBlk", "SigIgn", "SigCgt")))


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its parent counts as gone)."""
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
