"""The `pybroker` command line works as a user runs it: exit codes, stdout data, stderr warnings.

Method: run `python -m pybroker ...` as a real subprocess against the golden broker.conf and
files written to tmp_path; parse what it prints and compare with pybroker.config's own answer.
"""
import os
import pathlib
import subprocess
import sys

import pytest

import pybroker
from pybroker import config

pytestmark = pytest.mark.dataplane
ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "broker.conf"


def run(*args: str) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key != "NAMESRV_ADDR"}
    environment["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "pybroker", *args], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, env=environment)


def printed_settings(stdout: str) -> dict[str, str]:
    return config.parse_properties(stdout)


def test_version():
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"pybroker {pybroker.__version__}"


def test_no_subcommand_prints_help_and_fails():
    result = run()
    assert result.returncode == 2
    assert "config" in result.stderr and result.stdout == ""


def test_config_prints_important_settings_of_golden_file():
    result = run("config", "-c", str(GOLDEN))
    assert result.returncode == 0, result.stderr
    printed = printed_settings(result.stdout)
    expected = dict(config.important_settings(config.load_broker_config(GOLDEN)))
    assert printed == expected
    assert printed["brokerName"] == "broker-a" and printed["brokerRole"] == "SYNC_MASTER"
    # Keys Java reads but pybroker does not use are named on stderr, not on stdout.
    assert "sendMessageThreadPoolNums" in result.stderr
    assert "sendMessageThreadPoolNums" not in result.stdout


def test_config_all_prints_every_setting():
    result = run("config", "-c", str(GOLDEN), "--all")
    assert result.returncode == 0, result.stderr
    printed = printed_settings(result.stdout)
    assert printed == dict(config.all_settings(config.load_broker_config(GOLDEN)))
    assert printed["messageDelayLevel"].endswith("2h 1d")
    assert len([line for line in result.stdout.splitlines()
                if not line.startswith("#")]) == len(printed)


def test_config_warns_about_unknown_key(tmp_path):
    path = tmp_path / "broker.conf"
    path.write_text("brokerName=b\nlistenPrt=1\n")
    result = run("config", "-c", str(path))
    assert result.returncode == 2          # valid, but with a key the broker would ignore
    warnings = [line for line in result.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1
    assert warnings[0].endswith("listenPrt: unknown key (ignored); did you mean listenPort?")


def test_config_misspelt_durability_key_is_an_error_line(tmp_path):
    path = tmp_path / "broker.conf"
    path.write_text("flushDiskTpye=SYNC_FLUSH\nbrokerrole=SYNC_MASTER\nnoSuchThing=1\n")
    result = run("config", "-c", str(path))
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    errors = [line for line in lines if " ERROR " in line]
    assert [line.split(": ", 2)[2] for line in errors] == [
        "flushDiskTpye: unknown key, ignored - did you mean flushDiskType? flushDiskType is a "
        "durability setting and stays flushDiskType=ASYNC_FLUSH: correct the key "
        "(strictConfig=true refuses unknown keys)",
        "brokerrole: unknown key, ignored - did you mean brokerRole? brokerRole is a "
        "durability setting and stays brokerRole=ASYNC_MASTER: correct the key "
        "(strictConfig=true refuses unknown keys)"]
    assert any(line.endswith("noSuchThing: unknown key (ignored)") for line in lines)


def test_config_strict_refuses_unknown_keys(tmp_path):
    path = tmp_path / "broker.conf"
    path.write_text("flushDiskTpye=SYNC_FLUSH\n")
    for argv, strict_in_file in ((["--strict"], False), ([], True)):
        if strict_in_file:
            path.write_text("strictConfig=true\nflushDiskTpye=SYNC_FLUSH\n")
        result = run("config", *argv, "-c", str(path))
        assert result.returncode == 1
        assert result.stdout == ""
        assert result.stderr == (
            f"pybroker config: invalid configuration in {path}: flushDiskTpye: unknown key; "
            f"did you mean flushDiskType? (strictConfig=true refuses unknown keys)\n")


def test_config_java_keys_are_not_refused_by_strict(tmp_path):
    """A Java broker.conf's keys pybroker does not use stay warnings under strictConfig."""
    key = sorted(config.JAVA_KEYS_NOT_USED)[0]
    path = tmp_path / "broker.conf"
    path.write_text(f"strictConfig=true\n{key}=1\n")
    result = run("config", "-c", str(path))
    assert result.returncode == 0, result.stderr
    assert f"{key}: a RocketMQ setting pybroker does not use (ignored)" in result.stderr


def test_config_bad_value_exits_1_with_the_rule(tmp_path):
    path = tmp_path / "broker.conf"
    path.write_text("listenPort=abc\nflushDiskType=FAST\n")
    result = run("config", "-c", str(path))
    assert result.returncode == 1
    assert result.stdout == ""
    assert "listenPort=abc: must be a Java int" in result.stderr
    assert "flushDiskType=FAST: must be one of ASYNC_FLUSH, SYNC_FLUSH" in result.stderr


def test_config_missing_file_exits_1(tmp_path):
    result = run("config", "-c", str(tmp_path / "absent.conf"))
    assert result.returncode == 1
    assert "absent.conf" in result.stderr


def test_config_namesrv(tmp_path):
    path = tmp_path / "namesrv.conf"
    path.write_text("listenPort=9988\n")
    result = run("config", "--namesrv", "-c", str(path))
    assert result.returncode == 0, result.stderr
    assert printed_settings(result.stdout)["listenPort"] == "9988"
