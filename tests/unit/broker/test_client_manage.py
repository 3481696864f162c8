"""Client registration handlers register Java, Go, C++ and 5.x heartbeats and notify groups.

Method: handlers called directly with decoded commands - the Java 4.9.8 client's own frames
from tests/golden/java-4.9.8 and hand-written Go/C++/5.x bodies (protocol.md §7.3) - against a
real MetadataState in tmp_path; Channels record what is sent to them, and the broker's
NOTIFY_CONSUMER_IDS_CHANGED is compared with the one the Java broker sent.
"""
import asyncio
import json
import os

import orjson
import pytest

from pybroker.broker.channel import Channel
from pybroker.broker.client_manage import HANDLERS
from pybroker.broker.context import MetadataContext
from pybroker.broker.metadata import MetadataState
from pybroker.config import load_broker_config
from pybroker.errors import HeaderError
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request, decode
from pybroker.protocol.constants import ConsumeType, LanguageCode, MessageModel, MQVersion

GOLDEN = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "golden", "java-4.9.8")
JAVA_GROUP = "capture_push_consumer"
JAVA_CLIENT = "192.0.2.2@capture-push"


def golden_frames(name: str):
    """(command, direction) of every frame in a golden capture file."""
    frames = []
    with open(os.path.join(GOLDEN, name + ".jsonl")) as file:
        for line in file:
            record = json.loads(line)
            data = bytes.fromhex(record["hex"])
            frames.append((decode(data, 0, len(data), copy_body=True), record["dir"]))
    return frames


def make_context(tmp_path, **overrides) -> MetadataContext:
    values = {"brokerName": "broker-a", "brokerIP1": "127.0.0.1", "brokerIP2": "127.0.0.1",
              "storePathRootDir": str(tmp_path), "namesrvAddr": "127.0.0.1:9876"}
    values.update(overrides)
    config = load_broker_config(overrides=values)
    clock = [1_700_000_000_000]
    metadata = MetadataState(config, now_ms=lambda: clock[0])
    return MetadataContext(config, None, None, metadata, (bytes([127, 0, 0, 1]), 10911),
                           now_ms=lambda: clock[0], topic_deleter=None)


def make_channel(name: str, sent: list, language=LanguageCode.JAVA) -> Channel:
    return Channel(f"0:{name}", f"192.0.2.{len(name)}:40000", int(language),
                   int(MQVersion.V4_9_8), sent.append)


def call(ctx, channel, request):
    return asyncio.run(HANDLERS[request.code](ctx, channel, request))


def heartbeat_request(body: dict | bytes):
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    return create_request(RequestCode.HEART_BEAT, body=data)


def consumer_body(client_id, group, topics=("TopicTest",), **extra) -> dict:
    subscriptions = [{"classFilterMode": False, "codeSet": [], "expressionType": "TAG",
                      "subString": "*", "subVersion": 1, "tagsSet": [], "topic": topic}
                     for topic in topics]
    body = {"clientID": client_id, "producerDataSet": [], "consumerDataSet": [{
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "consumeType": "CONSUME_PASSIVELY",
        "groupName": group, "messageModel": "CLUSTERING", "subscriptionDataSet": subscriptions,
        "unitMode": False}]}
    body.update(extra)
    return body


def test_java_heartbeat_registers_and_notifies_like_the_java_broker(tmp_path):
    ctx = make_context(tmp_path)
    (request, _), (java_response, _) = golden_frames("heart_beat")
    (java_notify, _), = golden_frames("notify_consumer_ids_changed")
    sent = []
    response = call(ctx, make_channel("java", sent), request)
    assert response.code == java_response.code == ResponseCode.SUCCESS
    assert response.opaque == request.opaque and response.is_response
    assert response.version >= MQVersion.V4_9_4
    assert response.ext_fields == {"IS_SUPPORT_HEART_BEAT_V2": "true", "IS_SUB_CHANGE": "true"}
    metadata = ctx.metadata
    assert metadata.consumers.consumer_client_ids(JAVA_GROUP) == [JAVA_CLIENT]
    assert metadata.consumer_subscription(JAVA_GROUP, "CaptureTopic").sub_string == "*"
    retry = metadata.topic_config("%RETRY%" + JAVA_GROUP)
    assert (retry.read_queue_nums, retry.write_queue_nums, retry.perm) == (1, 1, 6)
    inner = metadata.producers.producer_groups["CLIENT_INNER_PRODUCER"]
    assert [c.client_id for c in inner.values()] == [JAVA_CLIENT]
    notify, = sent
    assert (notify.code, notify.flag, notify.ext_fields, notify.body) == \
        (java_notify.code, java_notify.flag, java_notify.ext_fields, java_notify.body)
    # The same heartbeat again changes nothing and notifies nobody.
    assert call(ctx, make_channel("java", sent), request).code == ResponseCode.SUCCESS
    assert len(sent) == 1


def test_go_and_cpp_heartbeat_bodies_register(tmp_path):
    ctx = make_context(tmp_path)
    go_body = consumer_body("10.0.0.7@42@go", "GoGroup", topics=("GoTopic",))
    go_body["consumerDataSet"][0]["subscriptionDataSet"][0].update(
        {"subString": "TagA||TagB", "tagsSet": ["TagA", "TagB"],
         "codeSet": ["2598919", "2598920"], "subVersion": 1_700_000_000_123_456_789})
    cpp_body = consumer_body("10.0.0.8@cpp", "CppGroup", topics=("CppTopic",))
    cpp_body["consumerDataSet"][0].update({"consumeFromWhere": 4, "consumeType": 0,
                                           "messageModel": 0})
    go_sent, cpp_sent = [], []
    for body, channel in ((go_body, make_channel("go", go_sent, LanguageCode.GO)),
                          (cpp_body, make_channel("cpp", cpp_sent, LanguageCode.CPP))):
        assert call(ctx, channel, heartbeat_request(body)).code == ResponseCode.SUCCESS
    go_subscription = ctx.metadata.consumer_subscription("GoGroup", "GoTopic")
    assert go_subscription.code_set == {2598919, 2598920}
    assert go_subscription.sub_version == 1_700_000_000_123_456_789
    cpp_info = ctx.metadata.consumers.consumer_group_info("CppGroup")
    assert cpp_info.consume_type == ConsumeType.CONSUME_ACTIVELY
    assert cpp_info.channels["0:cpp"].language == LanguageCode.CPP
    assert ctx.metadata.topic_config("%RETRY%GoGroup") is not None
    # messageModel 0 is the ordinal of BROADCASTING: a broadcasting group is never notified.
    assert cpp_info.message_model == MessageModel.BROADCASTING
    assert (len(go_sent), len(cpp_sent)) == (1, 0)


def test_join_and_leave_notify_every_member(tmp_path):
    ctx = make_context(tmp_path)
    sent_a, sent_b = [], []
    channel_a, channel_b = make_channel("a", sent_a), make_channel("bb", sent_b)
    call(ctx, channel_a, heartbeat_request(consumer_body("A", "G")))
    call(ctx, channel_b, heartbeat_request(consumer_body("B", "G")))
    assert (len(sent_a), len(sent_b)) == (2, 1)
    unregister = create_request(RequestCode.UNREGISTER_CLIENT,
                                {"clientID": "B", "consumerGroup": "G"})
    assert call(ctx, channel_b, unregister).code == ResponseCode.SUCCESS
    assert (len(sent_a), len(sent_b)) == (3, 1)
    assert ctx.metadata.consumers.consumer_client_ids("G") == ["A"]
    assert all(c.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED for c in sent_a + sent_b)


def test_broadcasting_groups_are_never_notified(tmp_path):
    """Java 5.x fires no CHANGE for a broadcasting group (ConsumerManager's isBroadcastMode):
    not on join, subscription change, unregister or a closed channel. rocketmq-proxy 5.3.3's
    system consumer (CID_DefaultHeartBeatSyncerTopic) is one; notified, it pulled with a
    subscription version its heartbeat had not carried yet and got SUBSCRIPTION_NOT_LATEST."""
    ctx = make_context(tmp_path)

    def broadcasting(client, topics=("TopicTest",)):
        body = consumer_body(client, "Everyone", topics)
        body["consumerDataSet"][0]["messageModel"] = "BROADCASTING"
        return heartbeat_request(body)

    sent_a, sent_b = [], []
    channel_a, channel_b = make_channel("a", sent_a), make_channel("bb", sent_b)
    call(ctx, channel_a, broadcasting("A"))
    call(ctx, channel_b, broadcasting("B"))
    assert call(ctx, channel_a, broadcasting("A", ("TopicTest", "Other"))).code == \
        ResponseCode.SUCCESS
    assert ctx.metadata.consumers.consumer_client_ids("Everyone") == ["A", "B"]
    unregister = create_request(RequestCode.UNREGISTER_CLIENT,
                                {"clientID": "B", "consumerGroup": "Everyone"})
    assert call(ctx, channel_b, unregister).code == ResponseCode.SUCCESS
    call(ctx, channel_b, broadcasting("B"))
    ctx.metadata.consumers.remove_channels({channel_b.channel_id})
    assert ctx.metadata.consumers.consumer_client_ids("Everyone") == ["A"]
    assert sent_a == [] and sent_b == []


def test_retry_topic_uses_group_retry_queues_and_unit_flag(tmp_path):
    ctx = make_context(tmp_path)
    group_config = ctx.metadata.subscription_group("Wide")
    group_config.retry_queue_nums = 3
    body = consumer_body("C", "Wide")
    body["consumerDataSet"][0]["unitMode"] = True
    call(ctx, make_channel("c", []), heartbeat_request(body))
    retry = ctx.metadata.topic_config("%RETRY%Wide")
    assert (retry.write_queue_nums, retry.topic_sys_flag) == (3, 2)


def test_no_group_config_registers_without_retry_topic(tmp_path):
    ctx = make_context(tmp_path, autoCreateSubscriptionGroup="false")
    call(ctx, make_channel("c", []), heartbeat_request(consumer_body("C", "Unknown")))
    assert ctx.metadata.consumers.consumer_client_ids("Unknown") == ["C"]
    assert ctx.metadata.topic_config("%RETRY%Unknown") is None


def test_5x_heartbeat_v2_without_sub_keeps_subscriptions(tmp_path):
    ctx = make_context(tmp_path)
    channel = make_channel("v2", [])
    first = call(ctx, channel, heartbeat_request(consumer_body(
        "C", "G", heartbeatFingerprint=11, withoutSub=False)))
    assert first.ext_fields["IS_SUB_CHANGE"] == "false"
    same = call(ctx, channel, heartbeat_request(consumer_body(
        "C", "G", topics=(), heartbeatFingerprint=11, withoutSub=True)))
    assert same.ext_fields == {"IS_SUPPORT_HEART_BEAT_V2": "true", "IS_SUB_CHANGE": "false"}
    assert ctx.metadata.consumer_subscription("G", "TopicTest") is not None
    changed = call(ctx, channel, heartbeat_request(consumer_body(
        "C", "G", topics=(), heartbeatFingerprint=12, withoutSub=True)))
    assert changed.ext_fields["IS_SUB_CHANGE"] == "true"
    unknown = call(ctx, channel, heartbeat_request(consumer_body(
        "C", "NewGroup", topics=(), heartbeatFingerprint=12, withoutSub=True)))
    assert unknown.ext_fields["IS_SUB_CHANGE"] == "true"   # e.g. after a broker restart


def test_consumer_list_by_group_matches_java_and_fails_when_empty(tmp_path):
    ctx = make_context(tmp_path)
    (heartbeat, _), _ = golden_frames("heart_beat")
    (request, _), (java_response, _) = golden_frames("get_consumer_list_by_group")
    channel = make_channel("java", [])
    call(ctx, channel, heartbeat)
    response = call(ctx, channel, request)
    assert response.code == java_response.code == ResponseCode.SUCCESS
    assert bytes(response.body) == bytes(java_response.body)
    missing = create_request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "None"})
    response = call(ctx, channel, missing)
    assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR,
                                                "no consumer for this group, None")


def test_java_unregister_frame_and_producer_unregister(tmp_path):
    ctx = make_context(tmp_path)
    (request, _), (java_response, _) = golden_frames("unregister_client")
    group = request.ext_fields["consumerGroup"]
    channel = make_channel("pull", [])
    call(ctx, channel, heartbeat_request(consumer_body(request.ext_fields["clientID"], group)))
    body = {"clientID": "P", "consumerDataSet": [], "producerDataSet": [{"groupName": "PG"}]}
    call(ctx, channel, heartbeat_request(body))
    assert call(ctx, channel, request).code == java_response.code
    assert ctx.metadata.consumers.consumer_group_info(group) is None
    producer = create_request(RequestCode.UNREGISTER_CLIENT, {"clientID": "P",
                                                              "producerGroup": "PG"})
    assert call(ctx, channel, producer).code == ResponseCode.SUCCESS
    assert ctx.metadata.producers.producer_channels("PG") == []


def test_bad_input_is_answered_or_raised_clearly(tmp_path):
    ctx = make_context(tmp_path)
    channel = make_channel("bad", [])
    for body in (b"", b"{", b'{"clientID":1}', b'{"clientID":"c","consumerDataSet":[{}]}'):
        response = call(ctx, channel, heartbeat_request(body))
        assert response.code == ResponseCode.SYSTEM_ERROR and response.remark
    assert call(ctx, channel, create_request(RequestCode.HEART_BEAT)).code == \
        ResponseCode.SYSTEM_ERROR
    with pytest.raises(HeaderError):
        call(ctx, channel, create_request(RequestCode.UNREGISTER_CLIENT, {}))
    with pytest.raises(HeaderError):
        call(ctx, channel, create_request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {}))
