# Fixtures of the client suite: a broker peer (Java RocketMQ 4.9.8 by default) per test module.
"""``rocketmq_peer`` yields a running name server + broker as ``Peer(namesrv_addr, broker_addr)``.

By default it is the real Java RocketMQ started by tools/java_rocketmq.py on free ports, one per
module (a JVM pair takes seconds to boot). Override the fixture (e.g. in a conftest closer to the
tests, or with ``--client-peer=namesrv_addr,broker_addr``) to run the same scenarios against
pybroker's own broker. Missing Java skips, unless PYBROKER_REQUIRE_PEERS=1 makes it fail.
"""
import dataclasses
import importlib.util
import pathlib
import sys

import pytest

from tests.conftest import require_peers

TOOLS_DIR = pathlib.Path(__file__).resolve().parents[2] / "tools"


@dataclasses.dataclass(frozen=True)
class Peer:
    namesrv_addr: str
    broker_addr: str
    broker_name: str = "broker-a"
    cluster_name: str = "DefaultCluster"


def pytest_addoption(parser):
    parser.addoption("--client-peer", action="store", default=None,
                     help="namesrv_addr,broker_addr of an already running broker for "
                          "tests/client (default: start Java RocketMQ)")


def _load_harness():
    spec = importlib.util.spec_from_file_location("java_rocketmq", TOOLS_DIR / "java_rocketmq.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("java_rocketmq", module)
    spec.loader.exec_module(module)
    return module


def _unavailable(reason: str):
    if require_peers():
        pytest.fail(f"Java RocketMQ peer required (PYBROKER_REQUIRE_PEERS=1): {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def rocketmq_peer(request, tmp_path_factory):
    given = request.config.getoption("--client-peer")
    if given:
        namesrv_addr, broker_addr = given.split(",")
        yield Peer(namesrv_addr, broker_addr)
        return
    harness = _load_harness()
    reason = harness.java_available()
    if reason:
        _unavailable(reason)
    install = harness.RocketMQInstall(harness.DEFAULT_VERSION)
    if not install.is_complete():
        _unavailable(f"Java RocketMQ {install.version} not installed "
                     "(python tools/java_rocketmq.py install)")
    rmq = harness.JavaRocketMQ(tmp_path_factory.mktemp("rmq"), install, free_ports=True)
    with rmq:
        yield Peer(rmq.namesrv_addr, rmq.broker_addr)
