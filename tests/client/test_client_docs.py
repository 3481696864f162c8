"""Every example of docs/client.md runs as written against a real broker and does what it says.

Method: read docs/client.md, take each ```python block preceded by its
``<!-- example: NAME; expect: TEXT -->`` marker (a python block without a marker fails the
collection check, so no example goes untested), and run it verbatim as ``python -c`` in a fresh
interpreter with ``NAMESRV_ADDR`` pointing at one `pybroker standalone` per module (free
loopback ports, store in a temp directory, 1 s transaction check interval so the check-back
example finishes quickly, enablePropertyFilter=true for the SQL92 example). Each example
checks its own results with asserts; here it must exit 0 within its deadline and print the
text its marker promises.
"""
import os
import pathlib
import re
import subprocess
import sys

import pytest

from pybroker._testbase.cluster import StandaloneBroker

pytestmark = [pytest.mark.slow]

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "client.md"
EXAMPLE = re.compile(r"<!-- example: ([\w-]+); expect: (.+?) -->\n```python\n(.*?)```",
                     re.DOTALL)
EXAMPLE_TIMEOUT_S = 180
BROKER_OVERRIDES = {"transactionTimeOut": "1000", "transactionCheckInterval": "1000",
                    "enablePropertyFilter": "true"}


def examples() -> list[tuple[str, str, str]]:
    """(name, expected output text, code) of every example, in document order."""
    return [match.groups() for match in EXAMPLE.finditer(DOC.read_text(encoding="utf-8"))]


def test_every_python_block_is_a_checked_example():
    text = DOC.read_text(encoding="utf-8")
    names = [name for name, _, _ in examples()]
    assert text.count("```python") == len(names)
    assert len(set(names)) == len(names)
    for feature in ("send-sync", "send-async", "send-oneway", "send-batch", "ordered", "delay",
                    "transaction", "push-clustering", "push-broadcasting", "filter",
                    "lite-pull-subscribe", "lite-pull-assign", "admin"):
        assert feature in names


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with StandaloneBroker(tmp_path_factory.mktemp("client-docs"), BROKER_OVERRIDES) as running:
        yield running


@pytest.mark.timeout(EXAMPLE_TIMEOUT_S + 30)
@pytest.mark.parametrize("name, expected, code", examples(), ids=[e[0] for e in examples()])
def test_example_runs(broker, tmp_path, name, expected, code):
    env = dict(os.environ, NAMESRV_ADDR=broker.namesrv_addr, HOME=str(tmp_path))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=EXAMPLE_TIMEOUT_S, env=env, cwd=tmp_path)
    assert run.returncode == 0, f"example {name} failed:\n{run.stdout}\n{run.stderr[-4000:]}"
    assert expected in run.stdout, f"example {name} printed:\n{run.stdout}"
