"""A parallel run (pytest-xdist with tests/parallel.py, as README's test command runs the suite)
keeps its promises: a ``serial`` test runs while no other test runs, two tests of the same
``fixed_port`` never overlap, and the workers' free ports never meet.

Method: run pytest with three xdist workers in a child process, with this project's pytest
configuration and the ``tests.parallel`` plugin, over generated test files whose tests append
their start and end times (and the ports free_port gave them) to a shared file: one file of
several sleeping tests, two files whose test binds and listens on the same fixed port for a
second (the second bind fails if they overlap), and a serial test that the scheduler hands to a
worker while the others are busy. Then compare the recorded intervals and ports.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from pybroker._testbase.ports import free_port

pytestmark = pytest.mark.dataplane

ROOT = pathlib.Path(__file__).resolve().parents[3]
RECORDER = '''
import json, os, socket, time
import pytest
from pybroker._testbase.ports import free_port, worker_slice

def record(name, started, **more):
    line = json.dumps(dict(name=name, start=started, end=time.monotonic(),
                           worker=os.environ["PYTEST_XDIST_WORKER"], **more))
    with open(os.environ["RECORD"], "a") as out:
        out.write(line + "\\n")

def busy(name, seconds):
    started = time.monotonic()
    ports = [free_port((-2, 0, 1)) for _ in range(8)]
    time.sleep(seconds)
    record(name, started, ports=ports, slice=list(worker_slice()))
'''
BUSY = '''
import pytest
from recorder import busy

@pytest.mark.parametrize("n", range(8))
def test_busy(n):
    busy(f"busy{n}", 0.4)
'''
FIXED = '''
import socket, time
import pytest
from recorder import record

@pytest.mark.fixed_port(PORT)
def test_binds_the_fixed_port():
    started = time.monotonic()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", PORT))
        listener.listen()
        time.sleep(1.0)
    record("fixedNAME", started)
'''
SERIAL = '''
import time
import pytest
from recorder import busy

pytestmark = pytest.mark.serial

def test_alone():
    busy("serial", 0.5)
'''


def _overlap(first: dict, second: dict) -> bool:
    return first["start"] < second["end"] and second["start"] < first["end"]


def test_serial_runs_alone_fixed_ports_never_overlap_workers_ports_never_meet(tmp_path):
    port = free_port()
    (tmp_path / "recorder.py").write_text(RECORDER)
    (tmp_path / "test_busy.py").write_text(BUSY)
    for name in ("1", "2"):
        (tmp_path / f"test_fixed_{name}.py").write_text(
            FIXED.replace("PORT", str(port)).replace("NAME", name))
    (tmp_path / "test_serial.py").write_text(SERIAL)
    record = tmp_path / "record.jsonl"
    inherited = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
    env = dict(os.environ, RECORD=str(record),
               PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path), *inherited]))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-c", str(ROOT / "pyproject.toml"),
         "--rootdir", str(tmp_path), "-p", "tests.parallel", "-n", "3", "--dist", "loadfile",
         "-p", "no:randomly", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = [json.loads(line) for line in record.read_text().splitlines()]
    by_name = {row["name"]: row for row in rows}
    assert len(by_name) == len(rows) == 11, sorted(by_name)

    serial = by_name["serial"]
    assert [row["name"] for row in rows if row is not serial and _overlap(row, serial)] == []
    assert not _overlap(by_name["fixed1"], by_name["fixed2"])
    # It ran in the middle of the busy file (handed out after a fixed-port file, about 1-2 s
    # in, while the busy file takes 3.2 s), not merely after everything else.
    assert any(row["start"] >= serial["end"] for row in rows if row["name"].startswith("busy"))

    ports_by_worker: dict[str, set[int]] = {}
    for row in rows:
        for base in row.get("ports", ()):
            low, high = row["slice"]
            assert low <= base - 2 and base + 1 < high, (base, row["slice"])
            ports_by_worker.setdefault(row["worker"], set()).update(range(base - 2, base + 2))
    workers = sorted(ports_by_worker)
    assert len(workers) >= 2, workers
    for index, worker in enumerate(workers):
        for other in workers[index + 1:]:
            assert not ports_by_worker[worker] & ports_by_worker[other], (worker, other)
