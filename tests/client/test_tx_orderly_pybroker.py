"""Goal: prove transactions with check-back, orderly consumption with queue locks and the
broker -> client calls work against pybroker's own broker.

Method: override ``rocketmq_peer`` with one `pybroker standalone` per module (1 s transaction
timeout and check interval) and collect the very scenario functions of
tests/client/test_tx_orderly_java.py here, unchanged, each counting exactly.
"""
import pytest

from pybroker._testbase.cluster import StandaloneBroker
from tests.client.conftest import Peer
from tests.client.test_tx_orderly_java import (  # noqa: F401 (collected here against pybroker)
    TRANSACTION_OVERRIDES,
    test_broker_calls_running_info_direct_consume_and_reset,
    test_orderly_dead_letter_after_max_reconsume,
    test_orderly_locks_order_and_takeover,
    test_transaction_commit_rollback_and_check_back,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def rocketmq_peer(tmp_path_factory):
    """pybroker in place of the Java peer; shared by every scenario of this module."""
    with StandaloneBroker(tmp_path_factory.mktemp("pybroker-tx"),
                          TRANSACTION_OVERRIDES) as broker:
        yield Peer(broker.namesrv_addr, broker.broker_addr)
