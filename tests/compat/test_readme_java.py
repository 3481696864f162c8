"""README's section for Java RocketMQ users is true: its Java quick start compiles and runs
against pybroker with the official client, and each of its mqadmin commands works.

Method: a `pybroker standalone` per module on free loopback ports. The Java block after
README's ``<!-- quickstart-java -->`` marker is written to QuickStart.java, compiled against
the official client jars (4.9.8 and 5.3.3, from Maven Central through tools/java_rocketmq.py)
and run with ``NAMESRV_ADDR`` set, as README says; it must print a SEND_OK result and the
message it received, and exit 0. Then every line of the ``<!-- quickstart-mqadmin -->`` block
is run through the command prefix README gives (``python3 tools/java_rocketmq.py mqadmin
--work-dir DIR --``), with README's default addresses replaced by this broker's; each must exit
0 without an error in its output and show what was asked for.
"""
import pathlib
import subprocess
import sys

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from tests import peers
from tests.broker.test_quickstart import readme_block

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(600)]
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with StandaloneBroker(tmp_path_factory.mktemp("readme-java")) as running:
        yield running


@pytest.mark.parametrize("version", ["4.9.8", "5.3.3"])
def test_java_quick_start_runs_against_pybroker(broker, tmp_path, monkeypatch, version):
    install = peers.java_install(version)
    source = tmp_path / "QuickStart.java"
    source.write_text(readme_block("quickstart-java", "java"), encoding="utf-8")
    classes = peers.compile_java(install, [source], tmp_path / "classes")
    monkeypatch.setenv("NAMESRV_ADDR", broker.namesrv_addr)
    java = peers.java_rocketmq.JavaRocketMQ(tmp_path / "java", install,
                                            namesrv_port=broker.namesrv_port)
    run = java.run_class("QuickStart", timeout_s=120, extra_classpath=[classes])
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    assert "sendStatus=SEND_OK" in run.stdout, run.stdout
    assert "received Hello RocketMQ" in run.stdout, run.stdout


def test_mqadmin_commands_work_against_pybroker(broker, tmp_path):
    peers.java_install("4.9.8")
    lines = readme_block("quickstart-mqadmin", "sh").strip().splitlines()
    outputs = {}
    for line in lines:
        words = line.replace("127.0.0.1:9876", broker.namesrv_addr) \
            .replace("127.0.0.1:10911", broker.broker_addr).split()
        assert words[0] == "mqadmin", line
        run = subprocess.run(
            [sys.executable, str(ROOT / "tools" / "java_rocketmq.py"), "mqadmin",
             "--work-dir", str(tmp_path / "mqadmin"), "--", *words[1:]],
            capture_output=True, text=True, timeout=150)
        text = run.stdout + run.stderr
        assert run.returncode == 0 and "Exception" not in text and "CODE:" not in text, \
            f"{line}:\n{text[-3000:]}"
        outputs[words[1]] = run.stdout
    assert broker.broker_addr in outputs["clusterList"]
    assert "TopicTest" in outputs["topicList"]
    queue_rows = [row.split() for row in outputs["topicStatus"].splitlines()[1:] if row.strip()]
    assert sorted(int(row[1]) for row in queue_rows) == [0, 1, 2, 3]    # -r 4 -w 4
    assert "brokerVersionDesc" in outputs["brokerStatus"]
