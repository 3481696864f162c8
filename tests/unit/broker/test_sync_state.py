"""A controller-mode master's SyncStateSet follows Java's shrink and expand rules, and a slave
joins only once it holds every message acknowledged without it.

Method: control-block slave lines (as the ha worker publishes them) are fed to the pure rules
of broker/sync_state.py: members not connected or not caught up for haMaxTimeSlaveNotCatchup
leave, async learners and slaves behind the epoch start never join, the union of the
confirmed and proposed sets is what acknowledgements wait for, and a confirmation with an
older epoch changes nothing.
"""
from pybroker.broker import sync_state
from pybroker.store.control_block import HA_SLAVE_ASYNC_LEARNER


def line(broker_id, ack=100, caught_up_ms=1000, flags=0, required_from=0):
    return {"slot": broker_id, "broker_id": broker_id, "ack_offset": ack, "peer": 1,
            "connected_ms": 1, "caught_up_ms": caught_up_ms, "flags": flags,
            "required_from": required_from}


def test_union_while_a_proposal_is_pending():
    state = sync_state.SyncStateSet(frozenset({1, 2}), 3)
    assert state.required == {1, 2} and state.in_sync_count == 2
    shrinking = state.propose({1})
    assert shrinking.required == {1, 2} and shrinking.in_sync_count == 2
    growing = state.propose({1, 2, 3})
    assert growing.required == {1, 2, 3} and growing.in_sync_count == 3
    assert growing.confirm({1, 2, 3}, 3) is growing           # not newer: ignored
    confirmed = growing.confirm({1, 2, 3}, 4)
    assert confirmed.proposed is None and confirmed.required == {1, 2, 3}


def test_shrink_drops_lost_and_lagging_slaves():
    lines = [line(2, caught_up_ms=9_000), line(3, caught_up_ms=2_000)]
    assert sync_state.shrink(frozenset({1, 2, 3, 4}), lines, now_ms=10_000,
                             not_catchup_max_ms=5_000, self_id=1) == {1, 2}


def test_expansion_candidates():
    lines = [line(2), line(3, flags=HA_SLAVE_ASYNC_LEARNER), line(4, ack=40),
             line(5, caught_up_ms=0), line(6, caught_up_ms=1)]
    assert sync_state.expansion_candidates(frozenset({1}), lines, now_ms=1500,
                                           not_catchup_max_ms=1000, epoch_start=50) == {2}


def test_ready_to_join_needs_the_written_end_at_requirement():
    assert not sync_state.ready_to_join(2, [line(2, ack=100, required_from=0)])
    assert not sync_state.ready_to_join(2, [line(2, ack=100, required_from=102)])
    assert sync_state.ready_to_join(2, [line(2, ack=101, required_from=102)])
    assert not sync_state.ready_to_join(3, [line(2, ack=101, required_from=102)])
