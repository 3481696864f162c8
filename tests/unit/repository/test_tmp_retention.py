"""A passing test run leaves nothing in the temp directory; a failing one keeps its files.

Method: run pytest in a child process with this project's pytest configuration
(pyproject.toml) over a generated test file whose tests write into ``tmp_path`` and a
module-scoped ``tmp_path_factory`` directory, with pytest's temp root pointed at a directory of
our own (``PYTEST_DEBUG_TEMPROOT``); then list what is left under it after a passing run and
after a run with one failing test, in one process and with two pytest-xdist workers.
"""
import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.dataplane

ROOT = pathlib.Path(__file__).resolve().parents[3]
TESTS = '''
import pytest

@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    path = tmp_path_factory.mktemp("shared")
    (path / "store").write_bytes(b"x" * 100000)
    return path

def test_writes(tmp_path, shared):
    (tmp_path / "data").write_bytes(b"y" * 100000)

def test_maybe_fails(tmp_path, shared):
    (tmp_path / "kept").write_bytes(b"z")
    assert not FAIL
'''


def _run(work: pathlib.Path, fail: bool, workers: list[str]) -> tuple[int, list[str]]:
    test_file = work / "test_generated.py"
    test_file.write_text(TESTS.replace("FAIL", str(fail)))
    temp_root = work / "temproot"
    temp_root.mkdir(exist_ok=True)
    env = dict(os.environ, PYTEST_DEBUG_TEMPROOT=str(temp_root))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-c", str(ROOT / "pyproject.toml"),
         "--rootdir", str(work), *workers, str(test_file)],
        cwd=work, env=env, capture_output=True, text=True, timeout=120)
    left = sorted(str(path.relative_to(temp_root)) for path in temp_root.rglob("*")
                  if path.is_file())
    return result.returncode, left


# As README's test command runs (pytest-xdist workers: each has its own base directory under
# the run's), and in one process.
WORKERS = pytest.mark.parametrize("workers", [[], ["-n", "2", "--dist", "loadfile"]],
                                  ids=["one-process", "xdist"])


@WORKERS
def test_passing_run_removes_its_temp_files(tmp_path, workers):
    code, left = _run(tmp_path, fail=False, workers=workers)
    assert code == 0
    assert left == []


@WORKERS
def test_failing_run_keeps_the_failing_tests_files(tmp_path, workers):
    code, left = _run(tmp_path, fail=True, workers=workers)
    assert code == 1
    assert any(name.endswith("kept") for name in left), left
    assert not any(name.endswith("data") for name in left), left   # the passing test's
