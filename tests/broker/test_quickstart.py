"""README's Python quick start runs as written against a real broker and prints what README says.

Method: take the code block after README's ``<!-- quickstart-python -->`` marker and run it
verbatim with ``python -c`` in a fresh interpreter, ``NAMESRV_ADDR`` pointing at a
`pybroker standalone` on free loopback ports (store in a temp directory), twice: each run
prints SEND_OK and then exactly the one message it sent (the second run's consumer group goes
on from the position the first one committed). README's mqadmin commands run the same way
through `pybroker admin` (README: "write `pybroker admin` for `mqadmin`"), README's default
addresses replaced by the broker's, after the quick start has made the group README's
consumerProgress asks about; each must exit 0 and show what was asked for.
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
QUICK_START_LINES_MAX = 12


def readme_block(marker: str, language: str) -> str:
    """The fenced ``language`` block right after ``<!-- marker -->`` in README.md."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(rf"<!-- {marker} -->\n```{language}\n(.*?)```", text, re.DOTALL)
    assert match, f"README.md has no {language} block after <!-- {marker} -->"
    return match.group(1)


def test_python_quick_start_runs_as_written(tmp_path):
    code = readme_block("quickstart-python", "python")
    assert len(code.splitlines()) <= QUICK_START_LINES_MAX
    with StandaloneBroker(tmp_path / "broker") as broker:
        env = dict(os.environ, NAMESRV_ADDR=broker.namesrv_addr, HOME=str(tmp_path))
        for _ in range(2):
            run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 timeout=120, env=env, cwd=tmp_path)
            assert run.returncode == 0, run.stderr[-3000:]
            assert run.stdout == "SEND_OK\n[b'Hello RocketMQ']\n", run.stdout


def test_readme_mqadmin_commands_work_with_pybroker_admin(tmp_path):
    lines = readme_block("quickstart-mqadmin", "sh").strip().splitlines()
    outputs = {}
    with StandaloneBroker(tmp_path / "broker") as broker:
        # README runs these after its quick start, whose consumer group consumerProgress
        # asks about (a group nobody knows is refused, as mqadmin refuses it).
        quick_start = readme_block("quickstart-python", "python").replace(
            '"quickstart_consumer"', '"quickstart_java_consumer"')
        env = dict(os.environ, NAMESRV_ADDR=broker.namesrv_addr, HOME=str(tmp_path))
        run = subprocess.run([sys.executable, "-c", quick_start], capture_output=True,
                             text=True, timeout=120, env=env, cwd=tmp_path)
        assert run.returncode == 0, run.stderr[-3000:]
        for line in lines:
            words = line.replace("127.0.0.1:9876", broker.namesrv_addr) \
                .replace("127.0.0.1:10911", broker.broker_addr).split()
            assert words[0] == "mqadmin", line
            run = subprocess.run([sys.executable, "-m", "pybroker", "admin", *words[1:]],
                                 capture_output=True, text=True, timeout=60)
            assert run.returncode == 0, f"{line}:\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
            outputs[words[1]] = run.stdout
    assert broker.broker_addr in outputs["clusterList"]
    assert "TopicTest" in outputs["topicList"].split()
    queue_rows = [row.split() for row in outputs["topicStatus"].splitlines()[1:] if row.strip()]
    assert sorted(int(row[1]) for row in queue_rows) == [0, 1, 2, 3]    # -r 4 -w 4
    assert "Diff Total" in outputs["consumerProgress"]
    assert "QuickStart" in outputs["consumerProgress"].split()
    assert "brokerVersionDesc" in outputs["brokerStatus"]
