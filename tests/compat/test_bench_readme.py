"""README's "Benchmark against Java RocketMQ" works as a new user runs it: from a clone, after
README's non-editable install, the benchmark measures the installed pybroker next to Java
4.9.8 and writes a ratio table that names what ran; a broker that does not start and a load
that reports failures each stop the run at once with a one-line reason and exit status 1.

Method: one clean virtual environment per test session (``python3 -m venv``, no system site
packages) and one clone of this checkout (``git clone --shared`` plus the working tree's
uncommitted and untracked files, so the test runs what is here), into which README's
``python3 -m pip install .`` installs pybroker as a wheel (Cython extensions compiled by pip:
the session's slowest step, about 2 minutes on a busy 2-core box). Then README's benchmark
command runs with the venv's python from the clone, without PYTHONPATH, with tiny durations
(6 s runs, 1 run, the first of --quick's two scenarios: the second runs the same code); its
table must have pybroker's and Java's rows and the ratio filled, and the result file must name
the load, the broker versions (pybroker's package inside the venv, matching the checkout), the
box and the commit. The failing runs use real broker behaviour: an invalid ``flushDiskType``
(pybroker refuses to start) and a ``maxMessageSize`` below the body size (every send answered
MESSAGE_ILLEGAL); they come first, so the install (the first test's setup) shares the box in a
parallel run, while the measured runs are ``serial``. With PYBROKER_ROCKETMQ_GIT set to a git
URL or path of Apache RocketMQ (tags rocketmq-all-4.9.8), Apache's Producer is built and run
through the same install too.
"""
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import pytest

from tests import peers
from tests.broker.test_quickstart import readme_block

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(900)]
ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = ["--duration", "6", "--warmup", "2", "--runs", "1", "--no-docs"]
PIP_TIMEOUT_S = 900


def _clone(target: pathlib.Path) -> None:
    """A clone of HEAD with the working tree's changes on top (what a fresh clone would be if
    they were committed)."""
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(target)], check=True,
                   timeout=120)
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--modified", "--others",
                             "--exclude-standard"], capture_output=True, check=True,
                            timeout=60).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source, copy = ROOT / name, target / name
        if source.is_file():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy)
        elif copy.exists():
            copy.unlink()                       # deleted in the working tree


@pytest.fixture(scope="session")
def installed(tmp_path_factory):
    """(clone folder, venv python, environment) after README's install in a clean venv."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("the test clones this checkout with git")
    reason = peers.java_rocketmq.java_available()
    if reason:
        peers.unavailable(reason)
    base = tmp_path_factory.mktemp("bench-readme")
    clone, venv = base / "clone", base / "venv"
    _clone(clone)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    python = str(venv / "bin" / "python3")
    install, _ = _readme_commands()
    run = subprocess.run([python, *install[1:]], cwd=clone, env=env, capture_output=True,
                         text=True, timeout=PIP_TIMEOUT_S)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return clone, python, env


def _readme_commands() -> tuple[list, list]:
    """README's two benchmark commands (install, benchmark) as argv lists."""
    lines = readme_block("benchmark", "sh").strip().splitlines()
    assert len(lines) == 2, lines
    install, bench = (shlex.split(line) for line in lines)
    assert install[:4] == ["python3", "-m", "pip", "install"] and bench[0] == "python3"
    return install, bench


def _bench(installed, *extra, timeout_s=600) -> subprocess.CompletedProcess:
    """README's benchmark command with extra options, its stores in a short temporary folder
    (pybroker binds a unix socket in its store: sun_path holds 108 bytes)."""
    clone, python, env = installed
    _, bench = _readme_commands()
    with tempfile.TemporaryDirectory(prefix="pb-bench-") as work:
        return subprocess.run([python, *bench[1:], *extra, "--work-dir", work], cwd=clone,
                              env=env, capture_output=True, text=True, timeout=timeout_s)


def _result(run: subprocess.CompletedProcess) -> dict:
    found = re.findall(r"^results: (.+)$", run.stdout, re.MULTILINE)
    assert found, run.stdout[-2000:] + run.stderr[-3000:]
    return json.loads(pathlib.Path(found[-1]).read_text(encoding="utf-8"))


def test_a_failing_broker_or_load_stops_the_run_in_one_line(installed, tmp_path):
    started = _bench(installed, *TINY, "--brokers", "pybroker", "--set",
                     "flushDiskType=SOMETIMES", "--results-dir", str(tmp_path / "a"),
                     timeout_s=300)
    assert started.returncode == 1, started.stdout[-2000:] + started.stderr[-2000:]
    last = started.stderr.strip().splitlines()[-1]
    assert last.startswith("bench_side_by_side: stopped: pybroker produce-128B-w64-async run 0:"
                           " did not start: pybroker exited (1): pybroker standalone: invalid "
                           "configuration in "), last
    assert "broker.conf: flushDiskType=SOMETIMES: must be one of ASYNC_FLUSH, SYNC_FLUSH" \
        in last, last
    result = _result(started)
    assert result["partial"] is True and result["stopped"] in last
    assert [record["broker"] for record in result["records"]] == ["pybroker"]   # stopped at once
    assert "-partial.json" in last and "PARTIAL: stopped early" in started.stdout
    failed = _bench(installed, *TINY, "--brokers", "pybroker", "--set", "maxMessageSize=100",
                    "--results-dir", str(tmp_path / "b"), timeout_s=300)
    assert failed.returncode == 1, failed.stdout[-2000:] + failed.stderr[-2000:]
    last = failed.stderr.strip().splitlines()[-1]
    assert re.match(r"bench_side_by_side: stopped: pybroker produce-128B-w64-async run 0: the "
                    r"load reported failures \(response failed \d+\); the first: .*CODE: 13 ",
                    last), last
    assert len(_result(failed)["records"]) == 1


# Alone in a parallel run: the benchmark loads both cores, and a send starved by other
# tests would count as failed.
@pytest.mark.serial
def test_readme_quick_benchmark_from_a_non_editable_install(installed, tmp_path):
    peers.java_install("4.9.8")
    clone, python, _ = installed
    # --keep-going: on a busy 2-core box Java 4.9.8 may answer a few sends with its own flow
    # control (SYSTEM_BUSY, [TIMEOUT_CLEAN_QUEUE]), which stops a default run (the test above).
    run = _bench(installed, *TINY, "--only", "128B-w64", "--keep-going", "--results-dir",
                 str(tmp_path / "results"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "[bench] load: the project's load classes" in run.stderr
    for scenario in ("produce-128B-w64-async",):
        rows = re.findall(rf"^\| {scenario} \| (pybroker|java-4\.9\.8) \| (\d+) \|", run.stdout,
                          re.MULTILINE)
        assert sorted(broker for broker, _ in rows) == ["java-4.9.8", "pybroker"], run.stdout
        assert all(int(tps) > 0 for _, tps in rows), rows
        ratio = re.search(rf"^\| {scenario} \| java-4\.9\.8 \| (\d+\.\d\d)", run.stdout,
                          re.MULTILINE)
        assert ratio and float(ratio.group(1)) > 0, run.stdout
    result = _result(run)
    assert not [r for r in result["records"] if "error" in r or (r["broker"] == "pybroker" and (
        r.get("send_failed") or r.get("response_failed")))], result["records"]
    mine = result["broker_versions"]["pybroker"]
    venv_site = pathlib.Path(python).parent.parent
    assert pathlib.Path(mine["package"]).is_relative_to(venv_site), mine
    assert mine["matches_checkout"] is True and mine["command"].startswith(python), mine
    assert result["broker_versions"]["java-4.9.8"]["client"] == "4.9.8"
    assert result["load"]["kind"] == "project" and result["partial"] is False
    assert result["machine"]["logical_cpus"] == os.cpu_count()
    assert all(len(record["load_before"]) == 3 for record in result["records"])
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert result["commit"] == head and result["revision"].startswith(head[:7])
    for line in ("load: ", "brokers: pybroker ", "box: ", "commit: "):
        assert f"\n{line}" in run.stdout, run.stdout[:2000]


# Alone in a parallel run: the benchmark loads both cores, and a send starved by other
# tests would count as failed.
@pytest.mark.serial
def test_apache_benchmark_classes_built_and_run_from_the_install(installed, tmp_path):
    url = os.environ.get("PYBROKER_ROCKETMQ_GIT")
    if not url:
        pytest.skip("PYBROKER_ROCKETMQ_GIT (a git URL or path of apache/rocketmq) is not set")
    peers.java_install("4.9.8")
    clone, python, env = installed
    build = subprocess.run([python, "tools/apache_bench.py", "build", "--git", url, "--tag",
                            "rocketmq-all-4.9.8", "-o", str(tmp_path / "apache")], cwd=clone,
                           env=env, capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, build.stdout + build.stderr
    run = _bench(installed, "--apache-classes", str(tmp_path / "apache"), "--only", "128B-w64",
                 "--brokers", "pybroker", "--duration", "22", "--runs", "1", "--no-docs",
                 "--results-dir", str(tmp_path / "results"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = _result(run)
    assert result["load"]["kind"] == "apache" and result["load"]["tag"] == "rocketmq-all-4.9.8"
    assert len(result["load"]["commit"]) == 40
    assert result["records"][0]["load_tool"] == "apache" and result["records"][0]["tps"] > 0
