"""A new user's first-hour mistakes each end in one line that names the thing, the value and
the fix, with no traceback (issue #30 item 1).

Method: real `python -m pybroker standalone | namesrv` processes started with the mistaken
broker.conf / namesrv.conf (a store path under a regular file, a directory the process may not
write, a privileged port, an address the machine does not have, a busy metrics port, a
misspelt durability key under strictConfig); each must exit 1 before serving, print exactly
one ERROR line (or the CLI's one line) with the expected words, and no traceback. The
permission cases drop the capability that lets root ignore file modes (setpriv), so they run
as root and as a plain user. One running standalone broker then serves the command-line
mistakes: `pybroker admin statsAll | head`, consumerProgress of a group nobody knows.
"""
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from pybroker._testbase.cluster import TEST_PROFILE, StandaloneBroker, free_port

pytestmark = [pytest.mark.slow]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
START_TIMEOUT_S = 60


def _environment() -> dict:
    environment = {key: value for key, value in os.environ.items() if key != "NAMESRV_ADDR"}
    environment["PYTHONPATH"] = ROOT
    return environment


def _drop(capability: str) -> list[str]:
    """argv prefix that runs the command without ``capability`` when we are root (a plain
    user has none to drop), so permission checks apply to root too."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: cannot drop " + capability)
    return ["setpriv", f"--bounding-set=-{capability}"]


def _run(argv: list[str], prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "pybroker", *argv],
                          capture_output=True, text=True, timeout=START_TIMEOUT_S,
                          env=_environment(), cwd=ROOT)


def _write_conf(path, values: dict) -> str:
    with open(path, "w", encoding="utf-8") as conf:
        conf.writelines(f"{key}={value}\n" for key, value in values.items())
    return str(path)


def _standalone(tmp_path, overrides: dict, prefix: tuple[str, ...] = ()):
    port = free_port((-2, 0, 1))
    values = dict(TEST_PROFILE, listenPort=str(port),
                  storePathRootDir=str(tmp_path / "store"))
    values.update(overrides)
    conf = _write_conf(tmp_path / "broker.conf", values)
    return _run(["standalone", "-c", conf, "--namesrv-port", str(free_port())], prefix)


def _the_one_line(result: subprocess.CompletedProcess) -> str:
    """The run failed with exactly one error line and no traceback; returns that line."""
    assert result.returncode == 1, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines()
              if " ERROR " in line or line.startswith("pybroker ")]
    assert len(errors) == 1, result.stderr[-3000:]
    assert "boot success" not in result.stderr
    return errors[0]


def test_store_path_under_a_regular_file(tmp_path):
    (tmp_path / "afile").write_text("not a directory")
    line = _the_one_line(_standalone(tmp_path, {
        "storePathRootDir": str(tmp_path / "afile" / "store")}))
    assert f"storePathRootDir={tmp_path}/afile/store: is under {tmp_path}/afile, which is a " \
           f"file, not a directory; set storePathRootDir in broker.conf to a directory" in line
    # The embedded NameServer was never started, so it cannot be what failed.
    assert "NameServer did not start" not in line


def test_store_path_the_process_may_not_write(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        line = _the_one_line(_standalone(tmp_path, {"storePathRootDir": str(locked / "store")},
                                         tuple(_drop("dac_override"))))
    finally:
        locked.chmod(0o755)
    assert f"storePathRootDir={locked}/store: user " in line
    assert f"may not create directories in {locked} (permission denied); set " \
           f"storePathRootDir in broker.conf to a directory user" in line


def test_commitlog_path_that_is_a_file(tmp_path):
    (tmp_path / "cl").write_text("")
    line = _the_one_line(_standalone(tmp_path, {"storePathCommitLog": str(tmp_path / "cl")}))
    assert f"storePathCommitLog={tmp_path}/cl: is a file, not a directory" in line


def test_privileged_port(tmp_path):
    line = _the_one_line(_standalone(tmp_path, {"listenPort": "80"},
                                     tuple(_drop("net_bind_service"))))
    assert "port 80 (listenPort) on 0.0.0.0: permission denied: ports below 1024 need root " \
           "or CAP_NET_BIND_SERVICE; set listenPort to 1024 or above" in line


def test_bind_address_not_of_this_machine(tmp_path):
    line = _the_one_line(_standalone(tmp_path, {"bindAddress": "192.0.2.123"}))
    assert "on 192.0.2.123: 192.0.2.123 is not an address of this machine; set bindAddress " \
           "to one of its addresses, or 0.0.0.0 for every interface" in line


def test_busy_metrics_port(tmp_path):
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        busy = blocker.getsockname()[1]
        line = _the_one_line(_standalone(tmp_path, {
            "metricsExporterType": "PROM", "metricsPromExporterHost": "127.0.0.1",
            "metricsPromExporterPort": str(busy)}))
    assert f"port {busy} (the metrics endpoint) on 127.0.0.1 is already in use: another " \
           f"broker or program listens there; stop it or set metricsPromExporterPort to a " \
           f"free port" in line


def test_misspelt_durability_key_under_strict_config(tmp_path):
    line = _the_one_line(_standalone(tmp_path, {"strictConfig": "true",
                                                "flushDiskTpye": "SYNC_FLUSH"}))
    assert "flushDiskTpye: unknown key; did you mean flushDiskType? (strictConfig=true " \
           "refuses unknown keys)" in line
    assert not os.path.exists(tmp_path / "store"), "refused before the store was touched"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A standalone broker whose broker.conf misspells flushDiskType (and nothing else)."""
    with StandaloneBroker(tmp_path_factory.mktemp("first-hour"),
                          {"flushDiskTpye": "SYNC_FLUSH"}) as running:
        yield running


def test_misspelt_durability_key_is_an_error_line_but_starts(broker):
    """Without strictConfig the broker starts, and says loudly which default stays."""
    log = broker._log_text()
    assert "ERROR [supervisor" in log and "flushDiskTpye: unknown key, ignored - did you mean " \
        "flushDiskType? flushDiskType is a durability setting and stays " \
        "flushDiskType=ASYNC_FLUSH" in log, log[-3000:]


def test_namesrv_kv_config_under_a_file(tmp_path):
    (tmp_path / "afile").write_text("")
    conf = _write_conf(tmp_path / "namesrv.conf", {
        "listenPort": str(free_port()), "kvConfigPath": f"{tmp_path}/afile/kv/kvConfig.json"})
    line = _the_one_line(_run(["namesrv", "-c", conf]))
    assert f"kvConfigPath={tmp_path}/afile/kv/kvConfig.json: its directory is under " \
           f"{tmp_path}/afile, which is a file, not a directory; set kvConfigPath" in line


def test_admin_output_into_a_closed_pipe(broker):
    """`pybroker admin statsAll | head`: the reader leaves before the output is written
    (`true` reads nothing and exits while the command still asks the broker); no complaint,
    exit 0 (bash's pipefail reports the command's own status)."""
    shell = f"{sys.executable} -m pybroker admin statsAll -n {broker.namesrv_addr} | true"
    result = subprocess.run(["bash", "-o", "pipefail", "-c", shell], capture_output=True,
                            text=True, timeout=START_TIMEOUT_S, env=_environment(), cwd=ROOT)
    assert result.stderr == "", result.stderr
    assert result.returncode == 0


def test_consumer_progress_of_an_unknown_group(broker):
    result = _run(["admin", "consumerProgress", "-n", broker.namesrv_addr, "-g", "nosuchgroup"])
    line = _the_one_line(result)
    assert result.stdout == ""
    assert line.startswith("pybroker admin consumerProgress: the consumer group [nosuchgroup] "
                           "has no offsets on any broker and no client online: check the "
                           "group name")


def test_stats_footers_explain_the_first_minutes(broker):
    """statsAll of a topic first written seconds ago and brokerStatus of a broker started
    seconds ago: Java's figures, and a footer saying what they mean in those first minutes."""
    from pybroker.admin.broker_commands import (BROKER_STATUS_NOTES, STATS_ALL_DAY_NOTE,
                                                STATS_ALL_TPS_NOTE)
    from pybroker.client import Message
    from pybroker.client.sync import Producer
    with Producer("first_hour_stats", broker.namesrv_addr) as producer:
        for _ in range(20):
            producer.send(Message("FirstHourStats", b"x"))
    deadline = time.monotonic() + 30              # the next 10 s snapshot of the item
    while True:
        stats = _run(["admin", "statsAll", "-t", "FirstHourStats", "-n", broker.namesrv_addr])
        row = next(line.split() for line in stats.stdout.splitlines()
                   if line.startswith("FirstHourStats"))
        if float(row[2]) > 0:                     # topic, accumulation, InTPS, 24 h, ...
            break
        assert time.monotonic() < deadline, stats.stdout
        time.sleep(1)
    assert row[3] == "20", row                    # InMsg24Hour, from the minute window
    footer = stats.stdout.split("\n\n", 1)[1].splitlines()
    assert footer == [STATS_ALL_TPS_NOTE, STATS_ALL_DAY_NOTE.format(rows=1)]
    status = _run(["admin", "brokerStatus", "-n", broker.namesrv_addr, "-b",
                   broker.broker_addr])
    assert status.returncode == 0, status.stderr
    notes = status.stdout.split("\n\n", 1)[1].splitlines()
    assert BROKER_STATUS_NOTES["latency"] in notes and BROKER_STATUS_NOTES["today"] in notes
    assert any(note.startswith("* putTps") for note in notes)   # 600 s not yet filled
    as_json = _run(["admin", "statsAll", "-t", "FirstHourStats", "--json", "-n",
                    broker.namesrv_addr])
    assert "* InTPS" not in as_json.stdout                   # footers are for people


def test_a_broker_port_given_as_name_server(broker):
    result = _run(["admin", "clusterList", "-n", broker.broker_addr])
    line = _the_one_line(result)
    assert f"{broker.broker_addr} is not a NameServer: it refused a request every " \
           f"NameServer serves" in line
    assert "namesrv_addr must name NameServers (port 9876 by default), not a broker" in line
