"""Java's mqadmin reads our NameServer as it reads a Java one: clusterList, topicList, topicRoute.

Method: start `python -m pybroker namesrv` on a free 127.0.0.1 port, register a fake broker
(REGISTER_BROKER with a topic config body, over a real connection that stays open), then run the
pinned Java mqadmin (tools/java_rocketmq.py) with `-n <our address>` and check its output; one
KV write through mqadmin is read back over our own client. Skips with the reason when
java/javac/mvn or the jars are unavailable, unless PYBROKER_REQUIRE_PEERS=1.
"""
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from pybroker.protocol import bodies
from pybroker.protocol.codes import RequestCode as C
from pybroker.protocol.codes import ResponseCode as R
from pybroker.protocol.command import create_request
from pybroker.remoting.client import SyncRemotingClient
from tests import peers

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOLS_DIR = ROOT / "tools"
TOPIC = "PyNamesrvCompatTopic"


harness = peers.java_rocketmq


@pytest.fixture(scope="module")
def install():
    return peers.java_install()


@pytest.fixture
def namesrv_address(tmp_path):
    port = harness.free_port()
    conf = tmp_path / "namesrv.conf"
    conf.write_text(f"listenPort={port}\nkvConfigPath={tmp_path / 'kvConfig.json'}\n")
    log_path = tmp_path / "namesrv.log"
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen([sys.executable, "-m", "pybroker", "namesrv", "-c", str(conf)],
                                   cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log_file,
                                   stderr=subprocess.STDOUT)
    try:
        if not harness.wait_for_port(port, 20):
            pytest.fail(f"namesrv did not listen:\n{log_path.read_text()[-3000:]}")
        yield f"127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            assert process.wait(10) == 0, log_path.read_text()[-3000:]
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(10)


def _register(client: SyncRemotingClient, broker_address: str) -> None:
    body = bodies.encode_register_broker_body(bodies.RegisterBrokerBody(
        bodies.DataVersion(int(time.time() * 1000), 1),
        {TOPIC: {"topicName": TOPIC, "readQueueNums": 4, "writeQueueNums": 2, "perm": 6}}),
        compressed=True)
    response = client.invoke(create_request(C.REGISTER_BROKER, {
        "brokerName": "broker-py", "brokerAddr": broker_address, "clusterName": "PyCluster",
        "haServerAddr": "127.0.0.1:1", "brokerId": "0", "compressed": "true",
        "bodyCrc32": str(bodies.body_crc32(body))}, body))
    assert response.code == R.SUCCESS, response.remark


def test_mqadmin_against_our_namesrv(install, namesrv_address, tmp_path):
    # Nothing listens at the fake broker's address: mqadmin's per-broker calls just fail.
    broker_address = f"127.0.0.1:{harness.free_port()}"
    rmq = harness.JavaRocketMQ(tmp_path / "java", install)
    with SyncRemotingClient() as broker:
        broker.connect(namesrv_address)
        _register(broker, broker_address)
        clusters = rmq.mqadmin("clusterList", "-n", namesrv_address)
        rows = [line.split() for line in clusters.splitlines() if line.startswith("PyCluster")]
        assert rows and rows[0][:4] == ["PyCluster", "broker-py", "0", broker_address], clusters
        topics = rmq.mqadmin("topicList", "-n", namesrv_address)
        assert TOPIC in topics.split(), topics
        route = rmq.mqadmin("topicRoute", "-t", TOPIC, "-n", namesrv_address)
        decoded = bodies.decode_topic_route(route.encode())
        assert decoded.queue_datas == [bodies.QueueData("broker-py", 4, 2, 6, 0)]
        assert decoded.broker_datas[0].broker_addrs == {0: broker_address}
        rmq.mqadmin("updateKvConfig", "-s", "PY_NS", "-k", "key", "-v", "value",
                    "-n", namesrv_address)
        got = broker.invoke(create_request(C.GET_KV_CONFIG, {"namespace": "PY_NS", "key": "key"}))
        assert got.ext_fields == {"value": "value"}
