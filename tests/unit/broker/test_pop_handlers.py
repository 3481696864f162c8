"""Goal: POP_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, PEEK_MESSAGE,
NOTIFICATION and POLLING_INFO answer as Java 5.3.3's broker does (codes, remarks, header
fields) and write the revive log as it does (check-points and acks as timer messages), over a
real store. Method: tests/unit/broker/pop_harness.py's one-process broker (real MessageStore,
metadata, POP table and directory, one injected clock); requests as the Java client builds
them; stored records decoded and compared.
"""
import asyncio
import dataclasses
import importlib.util
import pathlib

import orjson
import pytest

from pybroker.protocol import pop, pop_bodies
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.constants import FAQ_SUGGEST_TODO_5X
from pybroker.store.config_docs import SubscriptionGroupConfig, TopicConfig
from pybroker.store.pop_checkpoint import decode_ack, decode_batch_ack, decode_checkpoint

_spec = importlib.util.spec_from_file_location(
    "pop_harness", pathlib.Path(__file__).with_name("pop_harness.py"))
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)
TOPIC, GROUP = harness.TOPIC, harness.GROUP
ZEROS = {"popTime": "0", "invisibleTime": "0", "reviveQid": "0", "restNum": "0"}


@pytest.fixture
def broker(tmp_path):
    created = harness.PopBroker(tmp_path, {"autoCreateSubscriptionGroup": "false",
                                           "popFromRetryProbability": "0"})
    created.metadata.groups.update_subscription_group(SubscriptionGroupConfig(GROUP))
    yield created
    created.close()


def run(coroutine):
    return asyncio.run(coroutine)


def test_pop_refusals_are_java_s(broker):
    broker.metadata.topics.update_topic_config(TopicConfig("Unreadable", 1, 1, perm=2))
    disabled = SubscriptionGroupConfig("Disabled")
    disabled.consume_enable = False
    broker.metadata.groups.update_subscription_group(disabled)
    ip = broker.config.broker.broker_ip1
    cases = [
        (dict(max_nums=33), ResponseCode.INVALID_PARAMETER,
         f"the broker[{ip}] pop message's num is greater than 32"),
        (dict(topic="Nope"), ResponseCode.TOPIC_NOT_EXIST,
         f"topic[Nope] not exist, apply first please! {FAQ_SUGGEST_TODO_5X}"),
        (dict(topic="Unreadable"), ResponseCode.NO_PERMISSION,
         "the topic[Unreadable] peeking message is forbidden"),
        (dict(queue_id=4), ResponseCode.INVALID_PARAMETER,
         "queueId[4] is illegal, topic:[PopTopic] topicConfig.readQueueNums:[4] "
         "consumer:[/10.1.2.3:40000]"),
        (dict(group="Unknown"), ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
         f"subscription group [Unknown] does not exist, {FAQ_SUGGEST_TODO_5X}"),
        (dict(group="Disabled"), ResponseCode.NO_PERMISSION,
         "subscription group no permission, Disabled"),
        (dict(exp="a = ", expType="SQL92"), ResponseCode.SUBSCRIPTION_PARSE_FAILED,
         "parse the consumer's subscription failed"),
        (dict(exp="x", expType="CLASS"), ResponseCode.SUBSCRIPTION_PARSE_FAILED,
         "parse the consumer's subscription failed"),
        (dict(bornTime=harness.START_MS - 5000, poll_ms=1000), ResponseCode.POLLING_TIMEOUT,
         f"the broker[{ip}] pop message is timeout too much"),
    ]
    for arguments, code, remark in cases:
        arguments = dict(arguments)
        born = arguments.pop("bornTime", None)
        extra = {"bornTime": born} if born is not None else {}
        response = run(broker.pop(**arguments, **extra))
        assert (response.code, response.remark) == (code, remark), arguments
        assert response.ext_fields == ZEROS, arguments
    timer_on = broker.ctx.config
    broker.ctx.config = dataclasses.replace(timer_on, store=dataclasses.replace(
        timer_on.store, timer_wheel_enable=False))
    response = run(broker.pop())
    assert (response.code, response.remark) == (
        ResponseCode.SYSTEM_ERROR,
        f"the broker[{ip}] pop message is forbidden because timerWheelEnable is false")
    broker.ctx.config = timer_on
    broker.config = broker.ctx.config = broker.config.__class__(
        **{**broker.config.__dict__,
           "broker": broker.config.broker.__class__(**{**broker.config.broker.__dict__,
                                                       "broker_permission": 2})})
    response = run(broker.pop())
    assert (response.code, response.remark) == (ResponseCode.NO_PERMISSION,
                                                f"the broker[{ip}] pop message is forbidden")


def test_pop_hands_out_writes_check_points_and_moves_offsets(broker):
    offsets = [broker.send(f"m{i}".encode(), queue_id=i % 2) for i in range(5)]
    assert offsets == [0, 0, 1, 1, 2]
    response = run(broker.pop(queue_id=-1, invisible_ms=30000))
    assert (response.code, response.remark) == (ResponseCode.SUCCESS, "FOUND")
    header = response.ext_fields
    assert header["invisibleTime"] == "30000" and header["popTime"] == str(harness.START_MS)
    assert header["restNum"] == "0"
    assert pop.parse_msg_offset_info(header["msgOffsetInfo"]) == {"0@0": [0, 1, 2],
                                                                  "0@1": [0, 1]}
    assert pop.parse_start_offset_info(header["startOffsetInfo"]) == {"0@0": 0, "0@1": 0}
    assert "orderCountInfo" not in header
    messages = harness.popped(response)
    assert sorted(message.body for message in messages) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    records = broker.revive_records()
    assert [tag for tag, *_ in records] == ["ck", "ck"]
    for _, body, properties, queue_id in records:
        ck = decode_checkpoint(body)
        assert queue_id == int(header["reviveQid"])
        assert (ck.cid, ck.topic, ck.pop_time, ck.invisible_time, ck.broker_name) == \
            (GROUP, TOPIC, harness.START_MS, 30000, harness.BROKER_NAME)
        assert ck.queue_offset_diff == list(range(ck.num))
        assert properties["TIMER_DELIVER_MS"] == str(harness.START_MS + 30000 - 1000)
        # Parked in the timer's slot before that second (Java's put-time hook).
        assert (properties["REAL_TOPIC"], properties["TIMER_OUT_MS"]) == \
            (pop.revive_topic(broker.config.broker.broker_cluster_name),
             str(harness.START_MS + 30000 - 2000))
        assert properties["UNIQ_KEY"] == \
            f"{TOPIC}@{ck.queue_id}@0@{GROUP}@{harness.START_MS}@broker-a@ck"
    # The group's offsets moved at pop time: nothing left, a POP without poll time times out.
    response = run(broker.pop())
    assert (response.code, response.remark) == (ResponseCode.POLLING_TIMEOUT,
                                                "NO_MESSAGE_IN_QUEUE")
    assert response.ext_fields["startOffsetInfo"] == ""
    broker.directory.harvest()
    assert broker.metadata.offsets.query(GROUP, TOPIC, 0) == 3
    assert broker.metadata.offsets.query(GROUP, TOPIC, 1) == 2
    assert sum(broker.directory.in_flight(GROUP, TOPIC).values()) == 5


def test_ack_and_batch_ack_write_acks_due_at_revive_time(broker):
    for i in range(4):
        broker.send(f"m{i}".encode())
    messages = harness.popped(run(broker.pop(queue_id=0, invisible_ms=20000)))
    response = run(broker.ack(messages[0]))
    assert (response.code, response.remark, response.ext_fields) == (ResponseCode.SUCCESS,
                                                                      None, {})
    info = pop.parse_extra_info(messages[1].handle)
    body = pop_bodies.encode_batch_ack_body(harness.BROKER_NAME, [pop_bodies.BatchAck(
        GROUP, TOPIC, "0", info.ck_queue_offset, 0, info.revive_qid, info.pop_time,
        info.invisible_time, [1, 2, 7])])
    response = run(broker.request(RequestCode.BATCH_ACK_MESSAGE, {}, body))
    assert response.code == ResponseCode.SUCCESS
    acks = [record for record in broker.revive_records() if record[0] != "ck"]
    assert [tag for tag, *_ in acks] == ["ack", "bAck"]
    single, batch = decode_ack(acks[0][1]), decode_batch_ack(acks[1][1])
    assert (single.ack_offset, single.start_offset, single.pop_time) == (0, 0,
                                                                         harness.START_MS)
    assert batch.ack_offsets == [1, 2] and batch.ack_offset == -1   # 7 is past the queue
    for _, _, properties, _ in acks:
        assert properties["TIMER_DELIVER_MS"] == str(harness.START_MS + 20000)
    assert sum(broker.directory.in_flight(GROUP, TOPIC).values()) == 1


def test_acks_of_a_queue_s_first_pop_count_though_its_slot_came_later(broker):
    """A queue's slot is assigned while its first POP runs, a moment after the POP's time (a
    round trip to the metadata service): the acks of that POP still take its messages out of
    the in-flight count (counting starts when the broker's table does, not at assignment)."""
    for i in range(3):
        broker.send(f"m{i}".encode())
    assign = broker.directory.slots_for

    def assign_later(keys):
        broker.clock.advance(3)
        return assign(keys)
    broker.directory.slots_for = assign_later
    messages = harness.popped(run(broker.pop(queue_id=0)))
    assert len(messages) == 3
    assert sum(broker.directory.in_flight(GROUP, TOPIC).values()) == 3
    for message in messages[:2]:
        assert run(broker.ack(message)).code == ResponseCode.SUCCESS
    assert sum(broker.directory.in_flight(GROUP, TOPIC).values()) == 1


def test_ack_refusals(broker):
    broker.send(b"m0")
    (message,) = harness.popped(run(broker.pop(queue_id=0)))
    handle = message.handle
    fields = {"consumerGroup": GROUP, "topic": "Nope", "queueId": 0, "extraInfo": handle,
              "offset": 0}
    response = run(broker.request(RequestCode.ACK_MESSAGE, fields))
    assert response.code == ResponseCode.TOPIC_NOT_EXIST
    response = run(broker.request(RequestCode.ACK_MESSAGE, {**fields, "topic": TOPIC,
                                                            "queueId": 9}))
    assert (response.code, response.remark) == (
        ResponseCode.MESSAGE_ILLEGAL, "queueId[9] is illegal, topic:[PopTopic] "
        "topicConfig.readQueueNums:[4] consumer:[/10.1.2.3:40000]")
    response = run(broker.request(RequestCode.ACK_MESSAGE, {**fields, "topic": TOPIC,
                                                            "offset": 5}))
    assert (response.code, response.remark) == (
        ResponseCode.NO_MESSAGE, "offset is illegal, key:PopTopic@0, commit:5, store:0~1")
    response = run(broker.request(RequestCode.BATCH_ACK_MESSAGE, {}, b'{"acks":[]}'))
    assert (response.code, response.remark) == (ResponseCode.NO_MESSAGE, None)


def test_change_invisible_time_writes_a_new_check_point_then_acks_the_old(broker):
    broker.send(b"m0")
    (message,) = harness.popped(run(broker.pop(queue_id=0, invisible_ms=10000)))
    broker.clock.advance(2000)
    response = run(broker.change_invisible(message, 40000))
    assert response.code == ResponseCode.SUCCESS
    assert response.ext_fields == {"popTime": str(harness.START_MS + 2000),
                                   "invisibleTime": "40000",
                                   "reviveQid": str(pop.parse_extra_info(message.handle)
                                                    .revive_qid)}
    tags = [(tag, body) for tag, body, _, _ in broker.revive_records()]
    assert [tag for tag, _ in tags] == ["ck", "ck", "ack"]
    new_ck = decode_checkpoint(tags[1][1])
    assert (new_ck.start_offset, new_ck.pop_time, new_ck.invisible_time, new_ck.num) == \
        (0, harness.START_MS + 2000, 40000, 1)
    old_ack = decode_ack(tags[2][1])
    assert (old_ack.pop_time, old_ack.start_offset) == (harness.START_MS, 0)
    response = run(broker.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {
        "consumerGroup": GROUP, "topic": TOPIC, "queueId": 0, "extraInfo": message.handle,
        "offset": 1, "invisibleTime": 1000}))
    assert (response.code, response.remark, response.ext_fields) == \
        (ResponseCode.NO_MESSAGE, "not set any response code",   # Java's default remark
         {"popTime": "0", "invisibleTime": "0", "reviveQid": "0"})


def test_peek_notification_and_polling_info(broker):
    for i in range(3):
        broker.send(f"m{i}".encode(), queue_id=1)
    response = run(broker.request(RequestCode.PEEK_MESSAGE, {
        "consumerGroup": GROUP, "topic": TOPIC, "queueId": 1, "maxMsgNums": 2}))
    assert (response.code, response.remark) == (ResponseCode.SUCCESS, "FOUND")
    assert response.ext_fields == {**ZEROS, "restNum": "3"}
    assert [message.body for message in harness.popped(response)] == [b"m0", b"m1"]
    notification = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": -1, "pollTime": 0,
                    "bornTime": harness.START_MS}
    response = run(broker.request(RequestCode.NOTIFICATION, notification))
    assert (response.code, response.ext_fields) == (ResponseCode.SUCCESS,
                                                    {"hasMsg": "true", "pollingFull": "false"})
    run(broker.pop(queue_id=1))                       # takes all three
    response = run(broker.request(RequestCode.NOTIFICATION, notification))
    assert response.ext_fields == {"hasMsg": "false", "pollingFull": "false"}
    response = run(broker.request(RequestCode.PEEK_MESSAGE, {
        "consumerGroup": GROUP, "topic": TOPIC, "queueId": 1, "maxMsgNums": 2}))
    assert (response.code, response.remark) == (ResponseCode.PULL_NOT_FOUND,
                                                "NO_MESSAGE_IN_QUEUE")
    response = run(broker.request(RequestCode.POLLING_INFO, {
        "consumerGroup": GROUP, "topic": TOPIC, "queueId": -1}))
    assert (response.code, response.ext_fields) == (ResponseCode.SUCCESS, {"pollingNum": "0"})


def test_held_pop_is_answered_when_a_message_arrives_and_counted_by_polling_info(broker):
    async def scenario():
        request = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": -1, "maxMsgNums": 32,
                   "invisibleTime": 60000, "pollTime": 10000, "bornTime": broker.clock(),
                   "initMode": 0}
        response = await broker.request(RequestCode.POP_MESSAGE, request)
        assert response is None                                   # held
        info = await broker.request(RequestCode.POLLING_INFO, {
            "consumerGroup": GROUP, "topic": TOPIC, "queueId": -1})
        assert info.ext_fields == {"pollingNum": "1"}
        await broker.asend(b"late", queue_id=2)
        assert broker.pop_state.long_poll.check_held() == 1
        for _ in range(100):
            if broker.sent:
                break
            await asyncio.sleep(0.01)
        (answer,) = broker.sent
        assert answer.code == ResponseCode.SUCCESS
        assert [message.body for message in harness.popped(answer)] == [b"late"]
        info = await broker.request(RequestCode.POLLING_INFO, {
            "consumerGroup": GROUP, "topic": TOPIC, "queueId": -1})
        assert info.ext_fields == {"pollingNum": "0"}
    run(scenario())


def test_filters_tag_and_sql92_whatever_enable_property_filter_says(broker):
    assert not broker.config.broker.enable_property_filter
    for group in ("TagGroup", "SqlGroup"):
        broker.metadata.groups.update_subscription_group(SubscriptionGroupConfig(group))
    broker.send(b"a", TAGS="A", color="red")
    broker.send(b"b", TAGS="B", color="blue")
    broker.send(b"c", TAGS="A", color="blue")
    response = run(broker.pop(queue_id=0, exp="A", expType="TAG", group="TagGroup"))
    assert [message.body for message in harness.popped(response)] == [b"a", b"c"]
    ck = decode_checkpoint(broker.revive_records()[-1][1])
    assert (ck.start_offset, ck.queue_offset_diff) == (0, [0, 2])
    response = run(broker.pop(queue_id=0, exp="color = 'blue'", expType="SQL92",
                              group="SqlGroup"))
    assert [message.body for message in harness.popped(response)] == [b"b", b"c"]


def test_reset_offset_is_taken_by_the_next_pop(broker):
    for i in range(4):
        broker.send(f"m{i}".encode())
    run(broker.pop(queue_id=0))
    broker.metadata.offsets.commit(GROUP, TOPIC, 0, 1, reset=True)
    response = run(broker.pop(queue_id=0))
    assert [message.body for message in harness.popped(response)] == [b"m1", b"m2", b"m3"]
    # A client's commit behind the pop offset does not move it back.
    broker.metadata.offsets.commit(GROUP, TOPIC, 0, 0)
    response = run(broker.pop(queue_id=0))
    assert response.code == ResponseCode.POLLING_TIMEOUT


def test_init_mode_max_starts_at_the_last_message_when_not_in_memory(broker, tmp_path):
    for i in range(3):
        broker.send(f"m{i}".encode())
    response = run(broker.pop(queue_id=0, initMode=1))
    # initPopOffsetByCheckMsgInMem: the queue still starts at 0, so from its first message.
    assert len(harness.popped(response)) == 3
    settings = {**broker.config.broker.__dict__, "init_pop_offset_by_check_msg_in_mem": False}
    broker.ctx.config = broker.config.__class__(
        **{**broker.config.__dict__, "broker": broker.config.broker.__class__(**settings)})
    broker.metadata.groups.update_subscription_group(SubscriptionGroupConfig("Other"))
    response = run(broker.pop(queue_id=0, initMode=1, group="Other"))
    assert [message.body for message in harness.popped(response)] == [b"m2"]


def test_order_info_survives_in_the_slot_json(broker):
    broker.send(b"m0")
    run(broker.pop(queue_id=0, order="true", attemptId="a1"))
    slot = broker.directory.slot_of(harness_key(TOPIC, GROUP, 0))
    record = orjson.loads(broker.table.order_record(slot))
    assert record["a"] == "a1" and record["o"] == [0] and record["popTime"] == harness.START_MS


def harness_key(topic, group, queue_id):
    from pybroker.store.pop_table import SlotKey
    return SlotKey(topic, group, queue_id)


def test_acks_of_one_loop_turn_are_one_put_each_answered_once_stored(broker):
    """A busy connection's acks arrive many per read: the first one's record goes to the
    store at once, the others' as one put at the turn's end (broker/pop/revive_log.py
    RevivePuts), in the order the acks came, and every ack is answered after its put; a put
    that fails reaches each of its waiters."""
    from pybroker.broker.pop import revive_log
    for i in range(8):
        broker.send(f"m{i}".encode())
    messages = harness.popped(run(broker.pop(queue_id=0, invisible_ms=20000)))
    assert len(messages) == 8
    puts = revive_log.turn_puts(broker.putter)
    before = (puts.puts_total, puts.records_total)

    async def ack_all():
        return await asyncio.gather(*(broker.ack(message) for message in messages))

    responses = run(ack_all())
    assert [response.code for response in responses] == [ResponseCode.SUCCESS] * 8
    assert (puts.puts_total - before[0], puts.records_total - before[1]) == (2, 8)
    acks = [decode_ack(body) for tag, body, _, _ in broker.revive_records() if tag == "ack"]
    assert [ack.ack_offset for ack in acks] == list(range(8))
    assert sum(broker.directory.in_flight(GROUP, TOPIC).values()) == 0

    class Broken(OSError):
        pass

    async def failing_put(*args):
        raise Broken("the ring is gone")

    failing = revive_log.RevivePuts(type("P", (), {"put": staticmethod(failing_put)})())
    record = revive_log.ReviveRecord(bytearray(b"x"), "t", 0)

    async def both():
        return await asyncio.gather(failing.put(record), failing.put(record),
                                    return_exceptions=True)

    assert [type(result) for result in run(both())] == [Broken, Broken]
    assert failing.puts_total == 2
