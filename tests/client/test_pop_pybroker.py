# The Python client's POP scenarios (pop_scenarios.py) against pybroker.
"""Goal: the 5.x POP consumers of pybroker.client work against pybroker's broker, as they do
against Java 5.3.3 (test_pop_java.py runs the very same scenarios there).

Method: one `pybroker standalone` per module with two remoting workers (StandaloneBroker's
test profile), so the clients' connections land on both workers and the POP state they share
is the cross-process one; the scenarios of tests/client/pop_scenarios.py, unchanged.
"""
import pytest

from pybroker._testbase.cluster import StandaloneBroker
from tests.client.conftest import Peer
from tests.client.pop_scenarios import (  # noqa: F401 (collected here against pybroker)
    test_a_held_pop_is_answered_when_a_message_arrives,
    test_order_pop_holds_a_queue_until_its_run_is_acknowledged,
    test_pop_hands_each_message_to_one_consumer,
    test_push_over_pop_retries_then_dead_letters,
    test_unacknowledged_messages_come_back_acknowledged_ones_never,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def rocketmq_peer(tmp_path_factory):
    with StandaloneBroker(tmp_path_factory.mktemp("pybroker-pop")) as broker:
        yield Peer(broker.namesrv_addr, broker.broker_addr)
