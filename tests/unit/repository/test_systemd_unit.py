"""The sample systemd unit in docs/ is one systemd accepts and that stops the broker cleanly.

Method: read docs/pybroker.service; check the settings docs/reliability.md relies on (SIGTERM
as the stop signal, a KillMode whose signals the supervisor turns into a clean stop, restart on
failure only, a start command pybroker's CLI knows); where systemd-analyze is installed, verify
a copy whose ExecStart points at this virtualenv's pybroker and require no complaint at all
(systemd-analyze exits 0 even on unknown values; it only warns). The stop itself, by signals
and by `systemd-run`, is tests/broker/test_stops.py.
"""
import configparser
import os
import shutil
import subprocess
import sys

import pytest

UNIT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "pybroker.service")


def _unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str          # keys are case-sensitive in systemd
    with open(UNIT, encoding="utf-8") as file:
        parser.read_file(file)
    return parser


def test_stop_settings_are_the_documented_ones():
    service = _unit()["Service"]
    assert service["KillSignal"] == "SIGTERM"
    assert service.get("KillMode", "control-group") in ("mixed", "control-group")
    assert service["Restart"] == "on-failure"
    assert int(service["TimeoutStopSec"]) >= 30


@pytest.mark.dataplane
def test_exec_start_is_a_pybroker_command():
    words = _unit()["Service"]["ExecStart"].split()
    assert os.path.basename(words[0]) == "pybroker" and words[1] == "standalone"
    result = subprocess.run([sys.executable, "-m", "pybroker", *words[1:2], "--help"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "-c" in result.stdout


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_analyze_verify_accepts_the_unit(tmp_path):
    pybroker = os.path.join(os.path.dirname(sys.executable), "pybroker")
    if not os.access(pybroker, os.X_OK):
        pytest.skip(f"no pybroker script next to {sys.executable}")
    with open(UNIT, encoding="utf-8") as file:
        text = file.read().replace("/opt/pybroker/venv/bin/pybroker", pybroker)
    copy = tmp_path / "pybroker.service"
    copy.write_text(text, encoding="utf-8")
    result = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
