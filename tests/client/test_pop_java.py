# The Python client's POP scenarios (pop_scenarios.py) against the real Java 5.3.3 broker.
"""Goal: the same POP scenarios give the same results against Java RocketMQ 5.3.3 as against
pybroker (test_pop_pybroker.py): the reference for what the client and the broker must do.

Method: one Java 5.3.3 NameServer + broker per module (tools/java_rocketmq.py, its defaults:
timerWheelEnable on, which POP needs); the scenarios of
tests/client/pop_scenarios.py, the Java push consumer's run with the broker's own client jars.
Skips without Java unless PYBROKER_REQUIRE_PEERS=1.
"""
import pytest

from tests import peers
from tests.client.conftest import Peer
from tests.client.pop_scenarios import (  # noqa: F401 (collected here against Java 5.3.3)
    test_a_held_pop_is_answered_when_a_message_arrives,
    test_java_push_consumer_in_pop_mode,
    test_order_pop_holds_a_queue_until_its_run_is_acknowledged,
    test_pop_hands_each_message_to_one_consumer,
    test_push_over_pop_retries_then_dead_letters,
    test_unacknowledged_messages_come_back_acknowledged_ones_never,
)

pytestmark = [pytest.mark.peer, pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def java_broker(tmp_path_factory):
    install = peers.java_install("5.3.3")
    with peers.java_broker(tmp_path_factory.mktemp("rmq-pop"), install) as rmq:
        yield rmq, install


@pytest.fixture(scope="module")
def rocketmq_peer(java_broker):
    rmq, _ = java_broker
    return Peer(rmq.namesrv_addr, rmq.broker_addr)


@pytest.fixture(scope="module")
def java_pop_client(java_broker):
    return java_broker
