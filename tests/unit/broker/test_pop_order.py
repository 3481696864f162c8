"""Goal: order POP holds a queue's head until the run is acknowledged or its invisible time has
passed, as Java 5.3.3 does: the group's offset moves ack by ack, a POP repeating the run's
attemptId gets the run again, a run handed out again reports its consumed counts in
orderCountInfo, CHANGE_MESSAGE_INVISIBLETIME extends the hold, consumerOrderInfo.json keeps the
records; and a dead consumer does not block the queue for longer than its invisible time, nor a
retry with the same attemptId come back empty because another request held the queue's lock
(apache/rocketmq #10827). Method: tests/unit/broker/pop_harness.py's broker with an injected
clock; the POP table's slot lock taken by hand to stand for a concurrent request elsewhere.
"""
import asyncio
import importlib.util
import pathlib

import orjson
import pytest

from pybroker.broker.pop.directory import load_order_infos
from pybroker.protocol import pop
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.store.config_docs import SubscriptionGroupConfig
from pybroker.store.pop_table import SlotKey

_spec = importlib.util.spec_from_file_location(
    "pop_harness", pathlib.Path(__file__).with_name("pop_harness.py"))
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)
TOPIC, GROUP = harness.TOPIC, harness.GROUP
INVISIBLE_MS = 20000


@pytest.fixture
def broker(tmp_path):
    created = harness.PopBroker(tmp_path)
    created.metadata.groups.update_subscription_group(SubscriptionGroupConfig(GROUP))
    for i in range(5):
        created.send(f"m{i}".encode())
    yield created
    created.close()


def run(coroutine):
    return asyncio.run(coroutine)


def order_pop(broker, attempt, max_nums=2, **extra):
    response = run(broker.pop(queue_id=0, max_nums=max_nums, invisible_ms=INVISIBLE_MS,
                              order="true", attemptId=attempt, **extra))
    return response, harness.popped(response) if response.code == ResponseCode.SUCCESS else []


def test_the_head_is_held_until_the_run_is_acknowledged(broker):
    response, run1 = order_pop(broker, "a1")
    assert [message.body for message in run1] == [b"m0", b"m1"]
    header = response.ext_fields
    assert header["reviveQid"] == "999" and header["orderCountInfo"] == "0 0 0"
    assert pop.parse_extra_info(run1[0].handle).is_order
    assert [tag for tag, *_ in broker.revive_records()] == []      # no check-point
    assert order_pop(broker, "a2")[1] == []                         # held
    assert run(broker.ack(run1[0])).code == ResponseCode.SUCCESS
    broker.directory.harvest()
    assert broker.metadata.offsets.query(GROUP, TOPIC, 0) == 1
    assert order_pop(broker, "a3")[1] == []                         # m1 still unacked
    assert run(broker.ack(run1[1])).code == ResponseCode.SUCCESS
    _, run2 = order_pop(broker, "a4")
    assert [message.body for message in run2] == [b"m2", b"m3"]


def test_a_dead_consumer_holds_the_queue_no_longer_than_its_invisible_time(broker):
    _, run1 = order_pop(broker, "a1")
    broker.clock.advance(INVISIBLE_MS - 1)
    assert order_pop(broker, "a2")[1] == []
    broker.clock.advance(1)
    response, run2 = order_pop(broker, "a3")
    assert [message.body for message in run2] == [b"m0", b"m1"]
    counts = pop.parse_order_count_info(response.ext_fields["orderCountInfo"])
    assert counts == {"0@qo0%0": 1, "0@qo0%1": 1, "0@0": 1}     # the reconsume count


def test_a_retry_with_the_same_attempt_id_gets_the_run_again(broker):
    _, run1 = order_pop(broker, "a1")
    response, again = order_pop(broker, "a1")
    assert [message.body for message in again] == [b"m0", b"m1"]
    assert response.ext_fields["orderCountInfo"] == "0 0 0"       # not counted twice


def test_a_retry_waits_for_a_queue_lock_held_elsewhere(broker):
    """#10827: the same attemptId arrives while another request (another worker, say) holds
    the queue's lock; it must wait for the lock, not answer empty."""
    order_pop(broker, "a1")
    slot = broker.directory.slot_of(SlotKey(TOPIC, GROUP, 0))
    other = 99
    assert broker.table.try_lock(slot, other)

    async def scenario():
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, broker.table.unlock, slot, other)
        return await broker.pop(queue_id=0, max_nums=2, invisible_ms=INVISIBLE_MS,
                                order="true", attemptId="a1")
    response = run(scenario())
    assert [message.body for message in harness.popped(response)] == [b"m0", b"m1"]


def test_a_non_order_pop_skips_a_locked_queue_and_is_held_for_a_quick_retry(broker):
    slot_key = SlotKey(TOPIC, GROUP, 0)
    run(broker.pop_state.slots.slots([slot_key]))
    slot = broker.directory.slot_of(slot_key)
    assert broker.table.try_lock(slot, 99)

    async def scenario():
        response = await broker.pop(queue_id=0, poll_ms=5000)
        assert response is None                          # nothing taken, held
        broker.table.unlock(slot, 99)
        for _ in range(200):
            if broker.sent:
                return broker.sent[0]
            await asyncio.sleep(0.005)
        raise AssertionError("the held POP was not retried")
    answer = run(scenario())
    assert [message.body for message in harness.popped(answer)] == \
        [b"m0", b"m1", b"m2", b"m3", b"m4"]


def test_change_invisible_time_of_an_order_message_extends_the_hold(broker):
    _, run1 = order_pop(broker, "a1")
    run(broker.ack(run1[0]))
    broker.clock.advance(1000)
    response = run(broker.change_invisible(run1[1], 3 * INVISIBLE_MS))
    assert response.code == ResponseCode.SUCCESS
    assert response.ext_fields["popTime"] == str(harness.START_MS)
    assert response.ext_fields["invisibleTime"] == str(1000 + 3 * INVISIBLE_MS)
    broker.clock.advance(INVISIBLE_MS)
    assert order_pop(broker, "a2")[1] == []                         # still held
    broker.clock.advance(2 * INVISIBLE_MS)
    _, again = order_pop(broker, "a3")
    assert [message.body for message in again] == [b"m1", b"m2"]


def test_an_ack_not_in_the_run_is_illegal(broker):
    _, run1 = order_pop(broker, "a1")
    handle = run1[0].handle
    response = run(broker.request(RequestCode.ACK_MESSAGE, {
        "consumerGroup": GROUP, "topic": TOPIC, "queueId": 0, "extraInfo": handle,
        "offset": 3}))
    assert response.code == ResponseCode.MESSAGE_ILLEGAL
    assert response.remark.startswith("offset is illegal, key:PopTopic@PopGroup@0, old:0, "
                                      "commit:3, next:-1")


def test_order_records_are_persisted_and_reloaded(broker, tmp_path):
    order_pop(broker, "a1")
    broker.directory.persist_order_infos()
    table = load_order_infos(str(tmp_path / "consumerOrderInfo.json"))
    info = table[f"{TOPIC}@{GROUP}"][0]
    assert (info.attempt_id, info.offset_list, info.pop_time) == ("a1", [0, 1],
                                                                  harness.START_MS)
    on_disk = orjson.loads((tmp_path / "consumerOrderInfo.json").read_bytes())
    assert on_disk["table"][f"{TOPIC}@{GROUP}"]["0"]["o"] == [0, 1]
