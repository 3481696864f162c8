"""Source rules are tests: tools/tidy.py (lengths and bans), ruff (pyflakes-level errors) and
mypy (the interfaces of pybroker/broker/interfaces.py and every annotation over pybroker/).

Method: run each checker over the repository and fail with its output.
"""
import importlib.util
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_tidy():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "tidy.py"), str(ROOT)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install '.[test]' installs it)")
    result = subprocess.run([ruff, "check", "--no-cache", str(ROOT)], capture_output=True,
                            text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy():
    """mypy with the [tool.mypy] config of pyproject.toml (files = pybroker/)."""
    if importlib.util.find_spec("mypy") is None:
        pytest.fail("mypy is not installed: pip install -e '.[test]'")
    result = subprocess.run([sys.executable, "-m", "mypy", "--config-file",
                             str(ROOT / "pyproject.toml"), "--cache-dir",
                             str(ROOT / "build" / "mypy-cache")],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
