# Fixtures of the client suite: a broker peer (Java RocketMQ 4.9.8 by default) per test module.
"""``rocketmq_peer`` yields a running name server + broker as ``Peer(namesrv_addr, broker_addr)``.

By default it is the real Java RocketMQ started by tools/java_rocketmq.py on free ports, one per
module (a JVM pair takes seconds to boot). Override the fixture (e.g. in a conftest closer to the
tests, or with ``--client-peer=namesrv_addr,broker_addr``) to run the same scenarios against
pybroker's own broker. Missing Java skips, unless PYBROKER_REQUIRE_PEERS=1 makes it fail.
"""
import dataclasses

import pytest

from tests import peers


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


@pytest.fixture(scope="module")
def rocketmq_peer(request, tmp_path_factory):
    given = request.config.getoption("--client-peer")
    if given:
        namesrv_addr, broker_addr = given.split(",")
        yield Peer(namesrv_addr, broker_addr)
        return
    install = peers.java_install()
    with peers.java_broker(tmp_path_factory.mktemp("rmq"), install) as rmq:
        yield Peer(rmq.namesrv_addr, rmq.broker_addr)
