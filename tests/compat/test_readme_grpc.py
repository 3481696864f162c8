"""README's RocketMQ 5 quick start runs as written: `pybroker standalone` serves the gRPC
protocol itself and the official Python SDK (rocketmq-python-client, from PyPI, in a virtual
environment of its own as README installs it) sends through it, with no Java anywhere.

Method: a `pybroker standalone` with grpcWorkers=1 on free ports (store in a temp directory);
README's `pybroker admin updateTopic` line and its quickstart5.py block run verbatim except
that README's default ports become the broker's; the script must print ``sent <id>`` and the
message must be in the topic's queues (raw remoting pulls), with the id as its UNIQ_KEY.
"""
import pathlib
import re
import subprocess
import sys

import pytest

from pybroker._testbase.cluster import StandaloneBroker, free_port
from pybroker.protocol import properties as props
from pybroker.protocol.codes import ResponseCode
from tests.broker.test_quickstart import readme_block
from tests.ha_support import client_for, pull, records_of, wait_for
from tests.peers import load_tool, unavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _readme_shell_lines() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick start (RocketMQ 5 SDK, gRPC)", 1)[1]
    return re.search(r"```sh\n(.*?)```", section, re.DOTALL).group(1).strip().splitlines()


def _sdk_python() -> pathlib.Path:
    sdk = load_tool("python_sdk_venv")
    try:
        return sdk.ensure()
    except (sdk.SdkVenvError, OSError) as error:
        unavailable(f"rocketmq-python-client cannot be installed: {error}")
        raise


def test_grpc_quick_start_runs_as_written(tmp_path):
    python = _sdk_python()
    lines = _readme_shell_lines()
    assert lines[0].startswith("pybroker admin updateTopic") and "quickstart5.py" in lines[-1]
    assert "rocketmq-python-client==5.1.2" in lines[1]
    code = readme_block("quickstart-grpc-python", "python")
    grpc_port = free_port()
    with StandaloneBroker(tmp_path / "broker", {"grpcWorkers": "1",
                                                "grpcServerPort": str(grpc_port)}) as broker:
        words = lines[0].replace("127.0.0.1:9876", broker.namesrv_addr) \
            .replace("127.0.0.1:10911", broker.broker_addr).split()
        created = subprocess.run([sys.executable, "-m", "pybroker", *words[1:]],
                                 capture_output=True, text=True, timeout=60)
        assert created.returncode == 0, created.stdout + created.stderr
        script = tmp_path / "quickstart5.py"
        script.write_text(code.replace("127.0.0.1:8081", f"127.0.0.1:{grpc_port}"))
        run = subprocess.run([str(python), str(script)], capture_output=True, text=True,
                             timeout=120, cwd=tmp_path)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
        word, message_id = run.stdout.split()
        assert word == "sent" and message_id
        remoting = client_for(broker.broker_addr)
        found: list = []

        def stored() -> bool:
            found[:] = [record for queue_id in range(8)
                        for answer in [pull(remoting, "QuickStart5", queue_id, 0)]
                        if answer.code == ResponseCode.SUCCESS
                        for record in records_of(answer.body)]
            return bool(found)
        wait_for(stored, 15, "the quick start's message in QuickStart5")
        remoting.close()
    (record,) = found
    assert bytes(record.body) == b"Hello RocketMQ 5"
    properties = props.decode_properties(record.properties)
    assert properties["UNIQ_KEY"] == message_id and properties["TAGS"] == "TagA"
