# Compat: the RocketMQ C++ client core (PyPI `rocketmq` 0.4.4) against pybroker and Java 4.9.8.
"""Goal: the C++ client core that the PyPI `rocketmq` package and other language bindings wrap
sends (sync, oneway, batch) and push-consumes through pybroker exactly as through the Java
broker. It writes boolean header fields as "0"/"1" and several ext values as JSON numbers; the
Java broker reads "1" as false (Boolean.parseBoolean), so the C++ core's batch arrives as one
message whose body is the encoded batch — on both brokers alike.

Method: tests/compat/cppclient/rmqcpp.py runs the client core in a child process (ctypes over
librocketmq.so) against a `pybroker standalone` and a Java 4.9.8 broker; what the consumer
receives (bodies, tags, keys, a user property, reconsume times) is compared. The `rocketmq`
wheel is installed by .ci/run; without it the test skips (fails under PYBROKER_REQUIRE_PEERS=1).
"""
import importlib.util
import json
import pathlib
import subprocess
import sys
import uuid

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from tests import peers

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(600)]
DRIVER = pathlib.Path(__file__).with_name("cppclient") / "rmqcpp.py"
COUNT = 4


def _driver(*args) -> list[dict]:
    if importlib.util.find_spec("rocketmq") is None:
        peers.unavailable("the C++ client core (pip install rocketmq==0.4.4) is not installed")
    run = subprocess.run([sys.executable, str(DRIVER), *map(str, args)], capture_output=True,
                         text=True, timeout=180)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]


def _round_trip(namesrv: str) -> tuple[list[dict], list[dict]]:
    topic = f"CppTopic_{uuid.uuid4().hex[:8]}"
    sent = _driver("send", namesrv, topic, COUNT, f"cpp_p_{uuid.uuid4().hex[:6]}")
    received = _driver("consume", namesrv, topic, 2 * COUNT + 1,
                       f"cpp_c_{uuid.uuid4().hex[:6]}", 60)
    messages = sorted((record for record in received if record["op"] == "received"),
                      key=lambda record: record["body"])
    return sent, [{key: record[key] for key in ("body", "tags", "keys", "prop", "reconsume")}
                  for record in messages]


@pytest.fixture(scope="module")
def java(tmp_path_factory):
    install = peers.java_install("4.9.8")
    with peers.java_broker(tmp_path_factory.mktemp("java-cpp"), install) as rmq:
        yield rmq


def test_cpp_client_sends_and_consumes_through_pybroker_as_through_java(java, tmp_path):
    with StandaloneBroker(tmp_path) as broker:
        sent, ours = _round_trip(broker.namesrv_addr)
    assert [record["status"] for record in sent if "status" in record] == ["OK"] * (COUNT + 1)
    _, theirs = _round_trip(java.namesrv_addr)
    assert ours == theirs
    bodies = [message["body"] for message in ours]
    expected = [f"cpp-{kind}-{index}" for kind in ("oneway", "sync") for index in range(COUNT)]
    assert [body for body in bodies if body.startswith("cpp-")] == sorted(expected)
    for message in ours:
        if message["body"].startswith("cpp-"):
            kind, index = message["body"].split("-")[1:]
            assert message["tags"] == f"Tag{kind}" and message["prop"] == f"value-{index}"
            assert message["keys"] == f"key-{message['body']}"
    # The batch ("batch":"1" read as false, as Java reads it): one message, not three.
    assert len(ours) == 2 * COUNT + 1
