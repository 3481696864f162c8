# The Python client's broker scenarios (test_java_broker.py) run against pybroker itself.
"""Goal: prove pybroker.client works against pybroker's own broker, not only against Java.

Method: override ``rocketmq_peer`` with one `pybroker standalone` per module (StandaloneBroker:
NameServer + broker on free loopback ports, store in a temp directory) and collect the very
scenario functions of tests/client/test_java_broker.py here, unchanged: send modes, view and
query by key, push clustering with send-back, two consumers splitting queues, broadcasting,
lite pull with seek and commit, and the blocking facade, each counting exactly. No external
peer is needed, so these run in the default test run without the compat marker.
"""
import pytest

from pybroker._testbase.cluster import StandaloneBroker
from tests.client.conftest import Peer
from tests.client.test_java_broker import (  # noqa: F401 (collected here against pybroker)
    test_blocking_facade,
    test_broadcasting_each_client_gets_everything,
    test_lite_pull_assign_seek_commit,
    test_push_clustering_exact_with_send_back,
    test_send_modes_and_results,
    test_two_clustering_consumers_split_queues,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def rocketmq_peer(tmp_path_factory):
    """pybroker in place of the Java peer; shared by every scenario of this module."""
    with StandaloneBroker(tmp_path_factory.mktemp("pybroker-client")) as broker:
        yield Peer(broker.namesrv_addr, broker.broker_addr)
