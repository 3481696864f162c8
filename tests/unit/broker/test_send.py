# Tests of the SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE handler over a real store.
"""Goal: every client's send is stored as the Java broker stores it and answered with its fields,
and every must-refuse input gets its code and remark and stores nothing. Method: requests built
like the Java (310 short names, 320 batches), Go (10 long names) and C++ (310, batch flag on 310)
clients, the handler called directly over a real MessageStore on tmp_path with the real
MetadataState; stored records are read back through get_messages and decoded.
"""
import importlib.util
import pathlib

import pytest

from pybroker.broker import send
from pybroker.protocol.codes import ResponseCode
from pybroker.protocol.constants import MessageSysFlag, SystemTopic
from pybroker.protocol.message_id import decode_offset_message_id
from pybroker.store.config_docs import SubscriptionGroupConfig, TopicConfig

_spec = importlib.util.spec_from_file_location(
    "send_harness", pathlib.Path(__file__).with_name("send_harness.py"))
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)
TOPIC = harness.TOPIC
handle = send.handle_send_message
props = harness.properties_text


@pytest.fixture
def broker(tmp_path):
    created = harness.Broker(tmp_path)
    yield created
    created.close()


@pytest.mark.parametrize("style", ["java", "go", "cpp"])
def test_single_send_is_stored_and_answered(broker, style):
    request = harness.send_request(style, b"hello", queue_id=2,
                                   properties=props(UNIQ_KEY="U1", WAIT="true", TAGS="tagA"))
    response = broker.call(handle, request)
    assert response.code == ResponseCode.SUCCESS and response.opaque == request.opaque
    fields = response.ext_fields
    assert fields["queueId"] == "2" and fields["queueOffset"] == "0"
    assert fields["MSG_REGION"] == "DefaultRegion" and fields["TRACE_ON"] == "true"
    ip, port, physical_offset = decode_offset_message_id(fields["msgId"])
    assert (ip, port, physical_offset) == (harness.HOST, 10911, 0)
    [(decoded, properties)] = broker.records(TOPIC, 2)
    assert bytes(decoded.body) == b"hello" and decoded.born_timestamp == harness.BORN_MS
    assert (decoded.born_host, decoded.born_port) == (bytes([10, 1, 2, 3]), 40000)
    assert properties == {"UNIQ_KEY": "U1", "TAGS": "tagA", "CLUSTER": "ClusterX"}


def test_oneway_send_stores_and_answers_nothing(broker):
    assert broker.call(handle, harness.send_request("java", b"x", oneway=True)) is None
    assert len(broker.records(TOPIC, 0)) == 1


def test_negative_queue_id_picks_a_writable_queue(broker):
    for _ in range(8):
        response = broker.call(handle, harness.send_request("java", b"x", queue_id=-1))
        assert response.code == ResponseCode.SUCCESS
        assert 0 <= int(response.ext_fields["queueId"]) < 4


@pytest.mark.parametrize("style", ["java-batch", "cpp"])
def test_batch_is_one_record_per_message(broker, style):
    body = harness.batch_body([(b"m0", props(TAGS="t0")), (b"m1", ""), (b"m2", props(K="v"))])
    request = harness.send_request(style, body, batch=True, queue_id=1,
                                   properties=props(WAIT="false", UNIQ="b"))
    response = broker.call(handle, request)
    assert response.code == ResponseCode.SUCCESS
    ids = response.ext_fields["msgId"].split(",")
    records = broker.records(TOPIC, 1)
    assert len(ids) == len(records) == 3
    assert [decode_offset_message_id(i)[2] for i in ids] == [
        r.physical_offset for r, _ in records]
    assert [bytes(r.body) for r, _ in records] == [b"m0", b"m1", b"m2"]
    assert [p for _, p in records] == [
        {"TAGS": "t0", "UNIQ": "b", "CLUSTER": "ClusterX"},
        {"UNIQ": "b", "CLUSTER": "ClusterX"},
        {"K": "v", "UNIQ": "b", "CLUSTER": "ClusterX"}]


def test_delay_goes_to_the_schedule_queue_capped(broker):
    for level, queue_id in ((3, 2), (99, 17)):
        response = broker.call(handle, harness.send_request(
            "java", b"d", queue_id=1, properties=props(DELAY=str(level))))
        assert response.code == ResponseCode.SUCCESS
        assert response.ext_fields["queueId"] == "1"
        [(decoded, properties)] = broker.records(SystemTopic.SCHEDULE, queue_id)
        assert properties["REAL_TOPIC"] == TOPIC and properties["REAL_QID"] == "1"
        assert properties["DELAY"] == str(min(level, 18))
    assert broker.records(TOPIC, 1) == []


def test_transactional_send_goes_to_the_half_queue(broker):
    prepared = int(MessageSysFlag.TRANSACTION_PREPARED_TYPE)
    response = broker.call(handle, harness.send_request(
        "java", b"t", queue_id=3, sys_flag=prepared,
        properties=props(TRAN_MSG="true", PGROUP="PG", UNIQ_KEY="AB01")))
    assert response.code == ResponseCode.SUCCESS and response.ext_fields["queueOffset"] == "0"
    # Java 5.x's transactionId (the UNIQ_KEY): rocketmq-proxy ends the transaction with it.
    assert response.ext_fields["transactionId"] == "AB01"
    [(decoded, properties)] = broker.records(SystemTopic.TRANS_HALF, 0)
    assert decoded.sys_flag & 0xC == 0
    assert properties["REAL_TOPIC"] == TOPIC and properties["REAL_QID"] == "3"
    plain = broker.call(handle, harness.send_request("java", b"n",
                                                     properties=props(UNIQ_KEY="AB02")))
    assert "transactionId" not in plain.ext_fields


def test_multi_tag_topic_sets_the_flag(broker):
    broker.metadata.topics.update_topic_config(
        TopicConfig("MT", 1, 1, topic_filter_type="MULTI_TAG"))
    broker.call(handle, harness.send_request("go", b"x", topic="MT"))
    [(decoded, _)] = broker.records("MT", 0)
    assert decoded.sys_flag & int(MessageSysFlag.MULTI_TAGS)


def test_unknown_topic_is_auto_created_from_tbw102(broker):
    response = broker.call(handle, harness.send_request("go", b"x", topic="NewTopic"))
    assert response.code == ResponseCode.SUCCESS
    assert broker.metadata.topic_config("NewTopic").write_queue_nums == 4


def test_retry_topic_send_past_the_maximum_goes_to_the_dlq(broker):
    broker.metadata.groups.update_subscription_group(SubscriptionGroupConfig("CG"))
    retry = "%RETRY%CG"
    response = broker.call(handle, harness.send_request(
        "go", b"r", topic=retry, reconsumeTimes="2", maxReconsumeTimes="3"))
    assert response.code == ResponseCode.SUCCESS and len(broker.records(retry, 0)) == 1
    response = broker.call(handle, harness.send_request(
        "go", b"r", topic=retry, reconsumeTimes="3", maxReconsumeTimes="3"))
    assert response.code == ResponseCode.SUCCESS
    assert len(broker.records("%DLQ%CG", 0)) == 1


BIG = "x" * 40000
REFUSALS = [
    ({"topic": ""}, b"x", ResponseCode.SYSTEM_ERROR, "blank"),
    ({"topic": "a b"}, b"x", ResponseCode.SYSTEM_ERROR, "illegal characters"),
    ({"topic": "t" * 128}, b"x", ResponseCode.SYSTEM_ERROR, "longer than"),
    ({"topic": SystemTopic.SCHEDULE}, b"x", ResponseCode.NO_PERMISSION, "forbidden"),
    ({"topic": SystemTopic.TRANS_HALF}, b"x", ResponseCode.NO_PERMISSION, "forbidden"),
    ({"queue_id": 4}, b"x", ResponseCode.SYSTEM_ERROR, "queueId[4] is illegal"),
    ({}, None, ResponseCode.MESSAGE_ILLEGAL, "body is empty"),
    ({}, b"", ResponseCode.MESSAGE_ILLEGAL, "body is empty"),
    ({}, b"x" * 2049, ResponseCode.MESSAGE_ILLEGAL, "msg body length limit 2048B"),
    ({"properties": props(K=BIG)}, b"x", ResponseCode.MESSAGE_ILLEGAL, "32767"),
    ({"properties": "\x01v\x02"}, b"x", ResponseCode.MESSAGE_ILLEGAL, "malformed"),
    ({"properties": "k\x01v\x01w\x02"}, b"x", ResponseCode.MESSAGE_ILLEGAL, "malformed"),
    ({"properties": "k\x01a\x02k\x01b\x02"}, b"x", ResponseCode.MESSAGE_ILLEGAL, "repeated"),
    ({"properties": "k\x01a\x00b\x02"}, b"x", ResponseCode.MESSAGE_ILLEGAL, "control"),
    ({"properties": props(TAGS="a||b")}, b"x", ResponseCode.MESSAGE_ILLEGAL, "tag"),
    ({"properties": props(TAGS="  ")}, b"x", ResponseCode.MESSAGE_ILLEGAL, "tag"),
    ({"properties": "".join(f"k{i}\x01v\x02" for i in range(129))}, b"x",
     ResponseCode.MESSAGE_ILLEGAL, "more than 128"),
    ({"properties": props(DELAY="soon")}, b"x", ResponseCode.MESSAGE_ILLEGAL, "DELAY"),
    ({"topic": "%RETRY%NoSuchGroup"}, b"x", ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
     "NoSuchGroup"),
]


@pytest.mark.parametrize("style", ["java", "go", "cpp"])
@pytest.mark.parametrize("kwargs,body,code,remark", REFUSALS)
def test_must_refuse_single(tmp_path, style, kwargs, body, code, remark):
    broker = harness.Broker(tmp_path, {"maxMessageSize": "2048",
                                       "autoCreateSubscriptionGroup": "false"})
    try:
        response = broker.call(handle, harness.send_request(style, body, **kwargs))
        assert (response.code, response.remark) == (code, response.remark)
        assert remark in response.remark
        assert "msgId" not in response.ext_fields
        assert broker.commitlog_end() == 0
    finally:
        broker.close()


def test_unknown_topic_without_auto_create_is_refused(tmp_path):
    broker = harness.Broker(tmp_path, {"autoCreateTopicEnable": "false"})
    try:
        response = broker.call(handle, harness.send_request("java", b"x", topic="Nope"))
        assert response.code == ResponseCode.TOPIC_NOT_EXIST
        assert response.remark.startswith("topic[Nope] not exist")
        assert broker.commitlog_end() == 0
    finally:
        broker.close()


def test_rejected_transaction_message(tmp_path):
    broker = harness.Broker(tmp_path, {"rejectTransactionMessage": "true"})
    try:
        response = broker.call(handle, harness.send_request(
            "java", b"x", properties=props(TRAN_MSG="true", PGROUP="PG"), sys_flag=4))
        assert response.code == ResponseCode.NO_PERMISSION
        assert "sending transaction message is forbidden" in response.remark
        assert broker.commitlog_end() == 0
    finally:
        broker.close()


BATCH_REFUSALS = [
    ({"properties": props(DELAY="2")}, None, "delay"),
    ({"sys_flag": 4}, None, "transactions"),
    ({"topic": "%RETRY%CG"}, None, "retry group"),
    ({}, b"\x00\x00\x00\x30garbage", "malformed"),
    ({}, harness.batch_body([(b"ok", ""), (b"no", props(DELAY="1"))]), "delay"),
    ({}, harness.batch_body([(b"ok", ""), (b"no", "k\x01a\x02k\x01b\x02")]), "repeated"),
]


@pytest.mark.parametrize("kwargs,body,remark", BATCH_REFUSALS)
def test_must_refuse_batch(broker, kwargs, body, remark):
    body = body if body is not None else harness.batch_body([(b"a", ""), (b"b", "")])
    response = broker.call(handle, harness.send_request("java-batch", body, batch=True,
                                                        **kwargs))
    assert response.code == ResponseCode.MESSAGE_ILLEGAL and remark in response.remark
    assert broker.commitlog_end() == 0
