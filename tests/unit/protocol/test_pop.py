"""Goal: POP's wire and record facts are Java 5.3.3's: retry topic names, receipt handles,
the answer's offset infos, check-point / ack / batch-ack bodies, BATCH_ACK_MESSAGE and
QUERY_ASSIGNMENT bodies, and order POP's counts, commits and consumerOrderInfo.json. Method:
encode and decode against texts Java 5.3.3 produced (tests/golden/java-5.3.3/pop/bodies.json,
written by tools/java_capture/capture_pop_bodies.py) and table-driven cases of the rules.
"""
import json
import pathlib

import orjson
import pytest

from pybroker.broker.pop.order_info import (NEXT_OFFSET_ILLEGAL, NEXT_OFFSET_NOT_COMMITTED,
                                            OrderInfo)
from pybroker.protocol import fastjson, pop, pop_bodies
from pybroker.protocol.bodies import MessageQueue
from pybroker.store import pop_checkpoint

GOLDEN = json.loads((pathlib.Path(__file__).parents[2] / "golden" / "java-5.3.3" / "pop" /
                     "bodies.json").read_text(encoding="utf-8"))
POP_TIME = 1700000000000


def test_retry_topic_names_and_flags():
    assert pop.retry_topic("t1", "g1", False) == "%RETRY%g1_t1"
    assert pop.retry_topic("t1", "g1", True) == "%RETRY%g1+t1"
    assert [pop.retry_flag(topic) for topic in ("t1", "%RETRY%g1_t1", "%RETRY%g1+t1",
                                                "%RETRY%g1")] == ["0", "1", "2", "1"]
    assert pop.normal_topic_of("%RETRY%g1_t1", "g1") == "t1"
    assert pop.normal_topic_of("%RETRY%g1+t1", "g1") == "t1"
    assert pop.normal_topic_of("t1", "g1") == "t1"
    assert pop.normal_topic_of_retry("%RETRY%g1+t1") == "t1"
    assert pop.normal_topic_of_retry("%RETRY%g1_t1") == "%RETRY%g1_t1"
    assert pop.real_topic("t1", "g1", "2") == "%RETRY%g1+t1"
    with pytest.raises(ValueError, match="getRetry fail"):
        pop.real_topic("t1", "g1", "3")
    assert pop.polling_key("t1", "g1", 3) == "t1@g1@3"
    assert pop.revive_topic("DefaultCluster") == "rmq_sys_REVIVE_LOG_DefaultCluster"


def test_receipt_handle_round_trip():
    text = pop.build_extra_info(5, POP_TIME, 60000, 1, "%RETRY%g1+t1", "broker-a", 0, 7)
    assert text == GOLDEN["extra_info"]
    info = pop.parse_extra_info(text)
    assert info == pop.ExtraInfo(5, POP_TIME, 60000, 1, "2", "broker-a", 0, 7)
    assert not info.is_order
    assert pop.parse_extra_info("5 1 2 999 0 b 3").is_order
    assert pop.parse_extra_info("5 1 2 999 0 b", pop.ACK_READS).queue_id == 0


@pytest.mark.parametrize("text", [None, "", "5 1 2", "x 1 2 3 0 b 0", "5 1 2 9999999999 0 b 0",
                                  "5 1 2 3 0 b 0 ٣"])
def test_bad_receipt_handles_are_refused(text):
    with pytest.raises(ValueError):
        pop.parse_extra_info(text)


# (handle, reads, Java's exception as its broker prints it in the remark): the first getter of
# the processor's order that fails names it; String.split drops trailing empty fields.
@pytest.mark.parametrize("text, reads, java", [
    (None, pop.ACK_READS, "java.lang.IllegalArgumentException: split extraInfo is null"),
    ("x", pop.ACK_READS,
     "java.lang.IllegalArgumentException: getBrokerName fail, extraInfoStrs length 1"),
    ("1 2 3 4 0  ", pop.ACK_READS,
     "java.lang.IllegalArgumentException: getBrokerName fail, extraInfoStrs length 5"),
    ("x 2 3 y 0 b", pop.ACK_READS, 'java.lang.NumberFormatException: For input string: "y"'),
    ("x 2 3 4 0 b", pop.ACK_READS, 'java.lang.NumberFormatException: For input string: "x"'),
    ("1 2 3  0 b", pop.ACK_READS, 'java.lang.NumberFormatException: For input string: ""'),
    ("x", pop.CHANGE_READS,
     "java.lang.IllegalArgumentException: getReviveQid fail, extraInfoStrs length 1"),
    ("1 2 3 4 0", pop.CHANGE_READS,
     "java.lang.IllegalArgumentException: getBrokerName fail, extraInfoStrs length 5"),
    ("1 2 3 y", pop.CHANGE_READS, 'java.lang.NumberFormatException: For input string: "y"'),
])
def test_bad_handles_fail_at_javas_getter(text, reads, java):
    with pytest.raises(pop.HandleError) as refused:
        pop.parse_extra_info(text, reads)
    assert refused.value.java_text == java


def test_an_ack_reads_no_field_past_the_broker_name():
    assert pop.parse_extra_info("1 2 3 4 0 b x y", pop.ACK_READS) == \
        pop.ExtraInfo(1, 2, 3, 4, "0", "b", 0, None)


def test_offset_infos_as_java_builds_and_parses_them():
    infos = pop.OffsetInfos(order=True)
    infos.add_queue("%RETRY%g1_t1", 0, 4, [4, 6])
    infos.add_queue("t1", 3, 10, [10, 11, 13])
    infos.add_order_count("t1", 3, 11, 2)
    infos.add_order_count("t1", 3, None, 0)
    start, messages, counts = infos.texts()
    assert start == "1 0 4;0 3 10"
    assert messages == "1 0 4,6;0 3 10,11,13"
    assert counts == "0 qo3%11 2;0 3 0"
    assert pop.parse_start_offset_info(start) == {"1@0": 4, "0@3": 10}
    assert pop.parse_msg_offset_info(messages) == {"1@0": [4, 6], "0@3": [10, 11, 13]}
    assert pop.parse_order_count_info(counts) == {"0@qo3%11": 2, "0@3": 0}
    assert pop.queue_offset_key("0", 3, 11) == "0@qo3%11"
    assert pop.OffsetInfos(order=False).texts() == ("", "", None)
    with pytest.raises(ValueError, match="duplicate"):
        pop.parse_start_offset_info("0 3 10;0 3 11")
    with pytest.raises(ValueError):
        pop.parse_msg_offset_info("0 3")


def test_checkpoint_body_is_java_s():
    ck = pop_checkpoint.PopCheckPoint(topic="t1", cid="g1", queue_id=3, start_offset=5,
                                      pop_time=POP_TIME, invisible_time=60000, num=2,
                                      queue_offset_diff=[0, 2], broker_name="broker-a")
    assert ck.encode().decode() == GOLDEN["checkpoint"]
    ck.re_put_times, ck.bit_map = "1", 0x80000001
    assert ck.encode().decode() == GOLDEN["checkpoint_reput"]
    decoded = pop_checkpoint.decode_checkpoint(GOLDEN["checkpoint_reput"])
    assert decoded.bit_map == 0x80000001 and decoded.re_put_count() == 1
    assert decoded.key == "t1g135" + str(POP_TIME) + "broker-a"
    assert [decoded.index_of_ack(offset) for offset in (4, 5, 6, 7)] == [-1, 0, -1, 1]
    assert [decoded.ack_offset_by_index(index) for index in (0, 1)] == [5, 7]
    assert decoded.revive_time == POP_TIME + 60000
    old_style = pop_checkpoint.PopCheckPoint("t1", "g1", 3, 5, POP_TIME, 1000, num=3)
    assert [old_style.index_of_ack(offset) for offset in (5, 7, 8)] == [0, 2, -1]


def test_ack_bodies_are_java_s():
    ack = pop_checkpoint.AckMsg("t1", "g1", 3, 5, POP_TIME, 7, "broker-a")
    assert ack.encode().decode() == GOLDEN["ack"]
    assert pop_checkpoint.decode_ack(GOLDEN["ack"]) == ack
    # fastjson's alternate names (older brokers wrote the long ones)
    assert pop_checkpoint.decode_ack(
        '{"ackOffset":7,"consumerGroup":"g1","popTime":%d,"queueId":3,"startOffset":5,'
        '"topic":"t1"}' % POP_TIME).key("broker-b") == "t1g135%dbroker-b" % POP_TIME
    batch = pop_checkpoint.BatchAckMsg("%RETRY%g1_t1", "g1", 0, 5, POP_TIME, -1,
                                       ack_offsets=[5, 7])
    assert batch.encode().decode() == GOLDEN["batch_ack"]
    assert pop_checkpoint.decode_batch_ack(GOLDEN["batch_ack"]) == batch


@pytest.mark.parametrize("body", ['[]', '{"t":"t1"}', '{"t":"t1","c":"g","n":33}',
                                  '{"t":"t1","c":"g","d":"x"}', '{"t":"t1","c":"g","pt":"x"}',
                                  'nope'])
def test_bad_checkpoints_are_refused(body):
    with pytest.raises(ValueError):
        pop_checkpoint.decode_checkpoint(body)


def test_batch_ack_request_body():
    ack = pop_bodies.BatchAck("g1", "t1", "0", 5, 3, 1, POP_TIME, 60000, [0, 2, 9])
    assert pop_bodies.encode_batch_ack_body("broker-a", [ack]).decode() == \
        GOLDEN["batch_ack_request"]
    assert pop_bodies.decode_batch_ack_body(GOLDEN["batch_ack_request"]) == ("broker-a", [ack])
    assert pop_bodies.decode_batch_ack_body(b'{"brokerName":"b"}') == ("b", None)
    for bad in (b'{"acks":{}}', b'{"acks":[{"b":"!!"}]}', b'{"acks":[{"so":true}]}'):
        with pytest.raises(ValueError):
            pop_bodies.decode_batch_ack_body(bad)


def test_query_assignment_bodies():
    request = pop_bodies.QueryAssignmentRequest("t1", "g1", "c1", "AVG", "CLUSTERING")
    assert pop_bodies.encode_query_assignment_request(request).decode() == \
        GOLDEN["query_assignment_request"]
    assert pop_bodies.decode_query_assignment_request(GOLDEN["query_assignment_request"]) == \
        request
    answer = [pop_bodies.QueueAssignment(MessageQueue("t1", "broker-a", -1), "POP")]
    assert pop_bodies.encode_query_assignment_response(answer).decode() == \
        GOLDEN["query_assignment_response"]
    assert pop_bodies.decode_query_assignment_response(GOLDEN["query_assignment_response"]) == \
        answer


def _counts(info: OrderInfo, topic: str = "t1", queue_id: int = 0) -> str:
    infos = pop.OffsetInfos(order=True)
    info.add_order_counts(infos, topic, queue_id)
    return infos.texts()[2]


def test_order_info_follows_java():
    """The same steps as PopBodies.java's orderInfo(), with Java's answers."""
    now = 1800000000000          # after every invisible time of the run, as when captured
    first = OrderInfo.new_run("att", POP_TIME, 60000, [10, 11, 13], now)
    assert _counts(first) == GOLDEN["order_counts_first"]
    assert first.update_next_visible_time(11, POP_TIME, POP_TIME + 99999)
    assert not first.update_next_visible_time(11, 1, 5)
    assert str(first.commit_and_next(10, POP_TIME)) == GOLDEN["order_commit_10"]
    assert first.commit_and_next(11, 1) == NEXT_OFFSET_NOT_COMMITTED
    assert str(first.commit_and_next(12, POP_TIME)) == GOLDEN["order_commit_not_in_run"]
    assert first.commit_and_next(12, POP_TIME) == NEXT_OFFSET_ILLEGAL
    assert str(first.need_block("att", 60000, now)).lower() == GOLDEN["order_block_same_attempt"]
    assert str(first.need_block("att2", 60000, now)).lower() == \
        GOLDEN["order_block_other_attempt"]
    # Before the invisible times pass the head is held, for another attempt only.
    assert first.need_block("att2", 60000, POP_TIME + 1000)
    assert not first.need_block("att", 60000, POP_TIME + 1000)
    assert first.lock_free_timestamp(POP_TIME + 1000) == POP_TIME + 99999
    second = OrderInfo.new_run("att2", POP_TIME + 1000, 60000, [11, 13], now)
    second.merge_consumed_counts(first)
    assert _counts(second) == GOLDEN["order_counts_second"]
    third = OrderInfo.new_run("att2", POP_TIME + 2000, 60000, [11, 13, 14], now)
    third.merge_consumed_counts(second)
    assert _counts(third) == GOLDEN["order_counts_same_attempt"]
    assert [str(third.commit_and_next(offset, POP_TIME + 2000)) for offset in (11, 13, 14)] == \
        [GOLDEN["order_commit_11"], GOLDEN["order_commit_13"], GOLDEN["order_commit_14"]]
    third.last_consume_timestamp = 0
    java = fastjson.loads(GOLDEN["order_info_json"])["table"]["t1@g1"]["0"]
    assert orjson.loads(orjson.dumps(third.to_json(), option=orjson.OPT_NON_STR_KEYS)) == java
    assert OrderInfo.from_json(java) == third
    assert third.lock_free_timestamp(5) == 5          # all acked: free now


def test_order_info_json_refusals():
    for bad in ([], {"o": "x"}, {"o": [1], "popTime": "x"}, {"o": [1], "a": 5},
                {"o": [1], "ot": []}):
        with pytest.raises(ValueError):
            OrderInfo.from_json(bad)
