"""Goal: the revive service brings back exactly the popped messages nobody acknowledged, after
their invisible time and not before, to the group's POP retry topic as Java 5.3.3 re-puts them,
and never an acknowledged one; Java's known failure modes do not happen: an acknowledged message
revived (apache/rocketmq #7724), the revive offset stuck behind acks without check-points
(#3443, #5408), slow consumers' acks arriving too late (#3787). Method: the one-process broker of
tests/unit/broker/pop_harness.py with an injected clock, revive rounds run by hand, the retry
topic and the revive group's committed offsets read back from the store and metadata.
Check-points and acks are parked in the harness's 5.x timer and delivered by its turns (each
revive round steps it first), so a check-point is due when the timer's delivered time passes
its revive time + 2 s, a whole timer precision after the revive time + 2 s at the latest.
"""
import asyncio
import importlib.util
import pathlib

import pytest

from pybroker.broker.pop.revive import DUE_MARGIN_MS
from pybroker.broker.timer import delivered_until_ms
from pybroker.protocol import pop
from pybroker.protocol.codes import ResponseCode
from pybroker.protocol.constants import PopConstants
from pybroker.store.config_docs import SubscriptionGroupConfig
from pybroker.store.message_store import PutResult
from pybroker.store.pop_checkpoint import decode_checkpoint
from pybroker.store.status import PutStatus

_spec = importlib.util.spec_from_file_location(
    "pop_harness", pathlib.Path(__file__).with_name("pop_harness.py"))
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)
TOPIC, GROUP = harness.TOPIC, harness.GROUP
RETRY = pop.retry_topic_v1(TOPIC, GROUP)
INVISIBLE_MS = 30000
PRECISION_MS = 1000                     # the timer's (timerPrecisionMs' default)
# Popped at a whole second: due once the timer has delivered the second after revive + 2 s.
DUE_AFTER_MS = INVISIBLE_MS + DUE_MARGIN_MS + PRECISION_MS


@pytest.fixture
def broker(tmp_path):
    created = harness.PopBroker(tmp_path, {"popFromRetryProbability": "0"})
    created.metadata.groups.update_subscription_group(SubscriptionGroupConfig(GROUP))
    yield created
    created.close()


def run(coroutine):
    return asyncio.run(coroutine)


def pop_all(broker, queue_id=-1, invisible_ms=INVISIBLE_MS, **extra):
    response = run(broker.pop(queue_id=queue_id, invisible_ms=invisible_ms, **extra))
    return harness.popped(response) if response.code == ResponseCode.SUCCESS else []


def retried(broker) -> list[tuple[bytes, int, dict]]:
    if broker.metadata.topic_config(RETRY) is None:
        return []
    return [(bytes(decoded.body), decoded.reconsume_times, properties)
            for decoded, properties in broker.records(RETRY, 0)]


def revive_offsets(broker) -> list[int]:
    topic = pop.revive_topic(broker.config.broker.broker_cluster_name)
    return [broker.metadata.offsets.query(PopConstants.REVIVE_GROUP, topic, queue_id)
            for queue_id in range(broker.config.broker.revive_queue_num)]


def test_unacknowledged_messages_come_back_after_their_invisible_time_only(broker):
    for i in range(6):
        broker.send(f"m{i}".encode(), queue_id=i % 2)
    messages = pop_all(broker)
    for message in messages:
        if message.body in (b"m0", b"m3", b"m4"):
            assert run(broker.ack(message)).code == ResponseCode.SUCCESS
    broker.clock.advance(DUE_AFTER_MS - 1)       # the timer has not delivered past the margin
    assert broker.revive_round() == 0
    assert retried(broker) == []
    broker.clock.advance(1)
    assert broker.revive_round() == 3
    back = retried(broker)
    assert sorted(body for body, _, _ in back) == [b"m1", b"m2", b"m5"]
    for _, reconsume, properties in back:
        assert reconsume == 1
        assert properties["1ST_POP_TIME"] == str(harness.START_MS)
    config = broker.metadata.topic_config(RETRY)
    assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (1, 1, 6)
    assert broker.metadata.offsets.query(GROUP, RETRY, 0) == 0
    assert sum(broker.directory.in_flight(GROUP, TOPIC).values()) == 0
    # Nothing is revived twice, and everything of the revive log is committed.
    assert broker.revive_round() == 0
    assert len(retried(broker)) == 3
    ends = [broker.store.get_max_offset_in_queue(
        pop.revive_topic(broker.config.broker.broker_cluster_name), queue_id) - 1
        for queue_id in range(broker.config.broker.revive_queue_num)]
    assert revive_offsets(broker) == [end if end >= 0 else -1 for end in ends]


def test_revived_message_is_popped_under_its_topic_and_goes_back_to_the_retry_topic(broker):
    broker.send(b"once")
    pop_all(broker)
    broker.clock.advance(DUE_AFTER_MS)
    assert broker.revive_round() == 1
    broker.clock.advance(10)
    (again,) = pop_all(broker)
    assert again.decoded.topic == TOPIC and again.decoded.reconsume_times == 1
    info = pop.parse_extra_info(again.properties["POP_CK"])
    assert (info.retry, info.queue_id, info.queue_offset) == ("1", 0, 0)
    broker.clock.advance(DUE_AFTER_MS)
    assert broker.revive_round() == 1
    assert [(body, reconsume) for body, reconsume, _ in retried(broker)] == \
        [(b"once", 1), (b"once", 2)]
    broker.clock.advance(10)
    (third,) = pop_all(broker)
    assert run(broker.ack(third)).code == ResponseCode.SUCCESS
    broker.clock.advance(DUE_AFTER_MS)
    assert broker.revive_round() == 0


def test_exactly_the_popped_offsets_come_back_never_a_neighbour(broker):
    """#7724: a check-point whose messages are not contiguous (a filter skipped some); the
    acknowledged one in between must not be revived in place of a missing one."""
    broker.send(b"a0", TAGS="A")
    broker.send(b"b1", TAGS="B")
    broker.send(b"a2", TAGS="A")
    broker.send(b"b3", TAGS="B")
    broker.send(b"a4", TAGS="A")
    filtered = pop_all(broker, queue_id=0, exp="A", expType="TAG")
    assert [message.body for message in filtered] == [b"a0", b"a2", b"a4"]
    assert run(broker.ack(filtered[1])).code == ResponseCode.SUCCESS
    broker.metadata.groups.update_subscription_group(SubscriptionGroupConfig("Other"))
    others = harness.popped(run(broker.pop(queue_id=0, group="Other")))
    for message in others:
        run(broker.ack(message, group="Other"))
    broker.clock.advance(DUE_AFTER_MS)
    assert broker.revive_round() == 2
    assert [body for body, _, _ in retried(broker)] == [b"a0", b"a4"]


def test_more_acks_than_check_points_never_hold_the_revive_offset(broker):
    """#3443/#5408: acks acked twice and acks of check-points this broker never wrote sit
    after the last check-point; the committed revive offset still reaches the end."""
    broker.send(b"m0")
    (message,) = pop_all(broker, queue_id=0)
    for _ in range(3):
        assert run(broker.ack(message)).code == ResponseCode.SUCCESS
    broker.clock.advance(DUE_AFTER_MS)
    assert broker.revive_round() == 0
    revive_queue = pop.parse_extra_info(message.handle).revive_qid
    topic = pop.revive_topic(broker.config.broker.broker_cluster_name)
    end = broker.store.get_max_offset_in_queue(topic, revive_queue)
    assert end == 4 and revive_offsets(broker)[revive_queue] == end - 1
    queue = broker.revive.queues[revive_queue]
    assert queue.pending == {} and queue.scanned == end


def test_slow_consumer_acks_before_the_invisible_time_mean_no_duplicate(broker):
    """#3787: acks arriving one by one up to just before the invisible time are all counted
    (check-points are never buffered, so no ack is written too late)."""
    for i in range(32):
        broker.send(f"m{i}".encode())
    messages = pop_all(broker, queue_id=0)
    assert len(messages) == 32
    step_ms = (INVISIBLE_MS - 1000) // 32
    for message in messages:
        broker.clock.advance(step_ms)
        assert run(broker.ack(message)).code == ResponseCode.SUCCESS
        broker.revive_round()
    broker.clock.advance(DUE_AFTER_MS)
    assert broker.revive_round() == 0
    assert retried(broker) == []


def test_change_invisible_time_moves_the_message_s_return(broker):
    broker.send(b"m0")
    (message,) = pop_all(broker, queue_id=0)
    broker.clock.advance(1000)
    response = run(broker.change_invisible(message, 3 * INVISIBLE_MS))
    assert response.code == ResponseCode.SUCCESS
    broker.clock.advance(DUE_AFTER_MS)
    assert broker.revive_round() == 0                  # the old check-point is acked
    broker.clock.advance(2 * INVISIBLE_MS)
    assert broker.revive_round() == 1
    assert [body for body, _, _ in retried(broker)] == [b"m0"]


def test_no_revive_before_everything_written_is_read(broker):
    broker.send(b"m0")
    pop_all(broker, queue_id=0)
    broker.clock.advance(DUE_AFTER_MS)
    broker.revive.dispatched_position = lambda: 0        # dispatch lags the written end
    assert broker.revive_round() == 0
    broker.revive.dispatched_position = lambda: broker.store.max_physical_offset
    assert broker.revive_round() == 1


def test_no_revive_before_the_timer_delivered_the_acks(broker):
    """Due by the timer's progress, not the clock: with the timer behind, an ack parked until
    the revive time is not on the revive log yet, and its check-point waits for it."""
    broker.send(b"m0")
    broker.send(b"m1")
    messages = pop_all(broker, queue_id=0)
    assert run(broker.ack(messages[0])).code == ResponseCode.SUCCESS
    broker.clock.advance(INVISIBLE_MS - 1000)
    run(broker.step_timer())              # the check-point is delivered, the ack not yet
    broker.clock.advance(DUE_AFTER_MS)    # the timer makes no turn meanwhile

    async def revive_only() -> int:
        return sum([await broker.revive.revive_queue(queue) for queue in broker.revive.queues])
    assert run(revive_only()) == 0
    assert broker.revive_round() == 1     # the timer's turns: the ack is read with its CK
    assert [body for body, _, _ in retried(broker)] == [b"m1"]


def test_delivered_time_waits_for_the_timer_s_enqueue():
    """While messages wait to be enqueued, the timer has delivered no further than the store
    time of the last one it enqueued (a waiting one was put later, and is due later)."""
    assert delivered_until_ms(10_000, 5, 7_000, 5) == 10_000
    assert delivered_until_ms(10_000, 4, 7_000, 5) == 7_000
    assert delivered_until_ms(10_000, 4, 12_000, 5) == 10_000


def test_a_restarted_revive_reads_its_pending_check_points_and_acks_again(broker):
    for i in range(3):
        broker.send(f"m{i}".encode())
    messages = pop_all(broker, queue_id=0)
    run(broker.ack(messages[1]))
    assert broker.revive_round() == 0
    broker.revive = broker.new_revive()
    broker.clock.advance(DUE_AFTER_MS)
    assert broker.revive_round() == 2
    assert [body for body, _, _ in retried(broker)] == [b"m0", b"m2"]


def test_a_failed_re_put_writes_the_check_point_again_later(broker):
    broker.send(b"m0")
    (message,) = pop_all(broker, queue_id=0)
    real_put = broker.putter.put

    async def refuse_retry(records, topic, queue_id, count, sys_flag, wait_store, **keywords):
        if topic == RETRY:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE)
        return await real_put(records, topic, queue_id, count, sys_flag, wait_store,
                              **keywords)
    broker.putter.put = refuse_retry
    broker.clock.advance(DUE_AFTER_MS)
    assert broker.revive_round() == 0
    rewritten = [decode_checkpoint(body) for tag, body, _, _ in broker.revive_records()
                 if tag == "ck"][-1]
    assert (rewritten.re_put_times, rewritten.start_offset, rewritten.num) == ("1", 0, 1)
    assert rewritten.invisible_time == INVISIBLE_MS + 10000
    broker.putter.put = real_put
    broker.clock.advance(10000)
    assert broker.revive_round() == 1
    assert [body for body, _, _ in retried(broker)] == [b"m0"]


def test_a_round_comes_back_when_the_oldest_check_point_can_be_due(broker):
    """An idle queue's rounds slow down to reviveMaxSlow intervals; the check-point arrives
    when the timer delivers it (a second before its revive time) and brings the next round to
    the time it can be due (Java's round polls while it waits for one), not a slow interval
    later."""
    broker.send(b"m0")
    revive_ms = broker.clock() + INVISIBLE_MS
    (message,) = pop_all(broker, queue_id=0)
    queue = broker.revive.queues[pop.parse_extra_info(message.handle).revive_qid]

    def run_once() -> int:
        async def turn() -> int:
            await broker.step_timer()
            return await broker.revive.run_once()
        return asyncio.run(turn())
    assert run_once() == 0
    slowest = broker.config.broker.revive_interval * broker.config.broker.revive_max_slow
    for _ in range(5):                  # idle rounds while the check-point is parked
        broker.clock.now_ms = queue.next_round_ms
        assert run_once() == 0
    assert queue.pending == {} and queue.next_round_ms == broker.clock() + slowest
    broker.clock.now_ms = revive_ms - 1000      # the timer delivers it
    assert run_once() == 0 and len(queue.pending) == 1
    due_at = revive_ms + DUE_MARGIN_MS + PRECISION_MS
    while queue.next_round_ms < due_at:
        broker.clock.now_ms = queue.next_round_ms
        assert run_once() == 0
    assert queue.next_round_ms == due_at          # not due_at - 1000 + slowest
    broker.clock.now_ms = due_at
    assert run_once() == 1
