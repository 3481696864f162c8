"""Goal: grpcNativeFront is true by default exactly where the C++ front is built: a broker
with gRPC workers and no grpcNativeFront in its broker.conf serves grpcServerPort with the front
where this build has it, and with grpcio, saying so at info level and without a warning, where
it does not; grpcNativeFront=false serves with grpcio; grpcNativeFront=true on a build without
the front warns and serves with grpcio.

Method: real `pybroker standalone` processes (grpcWorkers=1, a free port), each answering one
QueryRoute of grpcio's client; which server took the call is read from the worker's log: its
serving line ("(plain, C++ front)" or "(plain, grpcio)") and, at its stop, the front's count of
the calls it took. A build without the front is this build with the front's extension hidden
from the interpreter before pybroker starts (``sys.modules`` maps it to None, so it is neither
found nor imported, as where setup.py left it out); the workers fork from that interpreter.
"""
import re
import sys

import grpc
import pytest

from pybroker._testbase.cluster import StandaloneBroker, free_port, read_log
from pybroker.config_grpc import FRONT_MODULE
from pybroker.grpc_service import front as grpc_front
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb
from pybroker.protocol.rocketmq_v2 import service_pb2_grpc
from tests.ha_support import wait_for

pytestmark = [pytest.mark.timeout(120)]

METADATA = (("x-mq-client-id", "default-test@1"), ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "GRPC_V2"), ("x-mq-client-version", "5.1.2"))
# `python -m pybroker` with the front's extension hidden: a build without the front.
WITHOUT_FRONT = [sys.executable, "-c",
                 f"import runpy, sys; sys.modules[{FRONT_MODULE!r}] = None; "
                 "runpy.run_module('pybroker', run_name='__main__', alter_sys=True)"]
NOT_BUILT_INFO = "this build has no C++ gRPC front"
ASKED_WARNING = "grpcNativeFront=true but the gRPC front is not built"


def _serve_one_call(tmp_path, settings: dict, hide_front: bool) -> str:
    """Start a broker, answer one QueryRoute, stop it; its log."""
    port = free_port()
    broker = StandaloneBroker(tmp_path / "b", {"grpcWorkers": "1", "grpcServerPort": str(port),
                                               **settings})
    if hide_front:
        broker.command = WITHOUT_FRONT
    broker.start()
    try:
        wait_for(lambda: "gRPC worker 0 serving" in read_log(broker.log_path), 30,
                 "the gRPC worker's serving line")
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            answer = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopic")),
                                     metadata=METADATA, timeout=30)
            assert answer.status.code == pb.TOPIC_NOT_FOUND, answer.status
    finally:
        assert broker.stop() == 0
    return read_log(broker.log_path)


def _served_by_front(log: str) -> bool:
    """Whether the front served the port (its serving line, and its count at the stop)."""
    serving = [line for line in log.splitlines() if "gRPC worker 0 serving" in line]
    assert len(serving) == 1, serving
    assert serving[0].endswith(("(plain, C++ front)", "(plain, grpcio)")), serving[0]
    front = serving[0].endswith("(plain, C++ front)")
    took = re.search(r"the front took (\d+) calls", log)
    assert (took is not None) == front, took
    if front:
        assert took is not None and int(took.group(1)) >= 1     # the QueryRoute at least
    return front


def test_the_default_is_the_front_where_it_is_built(tmp_path):
    log = _serve_one_call(tmp_path, {}, hide_front=False)
    assert _served_by_front(log) == grpc_front.built()
    assert (NOT_BUILT_INFO in log) == (not grpc_front.built())
    assert ASKED_WARNING not in log


def test_false_serves_with_grpcio(tmp_path):
    log = _serve_one_call(tmp_path, {"grpcNativeFront": "false"}, hide_front=False)
    assert not _served_by_front(log)
    assert (NOT_BUILT_INFO in log) == (not grpc_front.built())
    assert ASKED_WARNING not in log


def test_without_the_front_the_default_is_grpcio_said_at_info_level(tmp_path):
    log = _serve_one_call(tmp_path, {}, hide_front=True)
    assert not _served_by_front(log)
    said = [line for line in log.splitlines() if NOT_BUILT_INFO in line]
    assert len(said) == 1 and " INFO " in said[0], said
    assert ASKED_WARNING not in log
    assert not [line for line in log.splitlines() if " WARNING " in line and "grpc" in line]


def test_without_the_front_asking_for_it_warns_and_serves_with_grpcio(tmp_path):
    log = _serve_one_call(tmp_path, {"grpcNativeFront": "true"}, hide_front=True)
    assert not _served_by_front(log)
    warned = [line for line in log.splitlines() if ASKED_WARNING in line]
    assert len(warned) == 1 and " WARNING " in warned[0], warned
    assert NOT_BUILT_INFO not in log
