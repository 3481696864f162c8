"""JSON and compressed bodies match the reference shapes byte for byte and decode every client's.

Method: golden strings built from the reference examples (protocol.md §7), both route key forms
checked for whitespace Go's parser would choke on, round trips with seeded random data, lenient
heartbeat variants in the Java, Go and C++ shapes, a compressed register body built independently in
the test, and malformed inputs that must raise ValueError.
"""
import re
import struct
import zlib

import orjson
import pytest

from pybroker.protocol import bodies
from pybroker.protocol.bodies import (
    BrokerData, ClusterInfo, ConsumerData, DataVersion, HeartbeatData, LockBatchRequest,
    MessageQueue, QueueData, RegisterBrokerBody, SubscriptionData, TopicRouteData)
from pybroker.protocol.constants import ConsumeFromWhere, ConsumeType, MessageModel


def java_hash_oracle(text: str) -> int:
    """Java String.hashCode over UTF-16 code units (test oracle)."""
    units = text.encode("utf-16-be")
    value = 0
    for index in range(0, len(units), 2):
        value = (31 * value + int.from_bytes(units[index:index + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def reference_route() -> TopicRouteData:
    return TopicRouteData(
        queue_datas=[QueueData("broker-a", read_queue_nums=4, write_queue_nums=4, perm=6)],
        broker_datas=[BrokerData("DefaultCluster", "broker-a",
                                 {1: "10.0.0.2:10911", 0: "10.0.0.1:10911"})])


GOLDEN_ROUTE_UNQUOTED = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},'
    b'"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},'
    b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSynFlag":0,'
    b'"topicSysFlag":0,"writeQueueNums":4}]}')
GOLDEN_ROUTE_QUOTED = GOLDEN_ROUTE_UNQUOTED.replace(b"{0:", b'{"0":').replace(b",1:", b',"1":')


def outside_strings(data: bytes) -> bytes:
    """The JSON text with every string literal replaced by an empty one."""
    return re.sub(rb'"(?:[^"\\]|\\.)*"', b'""', data)


def test_route_golden_both_key_forms():
    assert bodies.encode_topic_route(reference_route(), quoted_keys=False) == GOLDEN_ROUTE_UNQUOTED
    assert bodies.encode_topic_route(reference_route(), quoted_keys=True) == GOLDEN_ROUTE_QUOTED


def test_route_is_safe_for_go_parser(rand):
    brokers = [BrokerData(f"Cluster{i}", f"broker-{i}",
                          {broker_id: f"10.0.{i}.{broker_id}:{10911 + broker_id}"
                           for broker_id in rand.sample(range(20), rand.randrange(1, 5))})
               for i in range(5)]
    route = TopicRouteData([QueueData(b.broker_name, 8, 8, 6, 1) for b in brokers], brokers,
                           order_topic_conf="broker-0:8;broker-1:8",
                           filter_server_table={"10.0.0.1:10911": ["10.0.0.1:30000"]})
    for quoted in (False, True):
        data = bodies.encode_topic_route(route, quoted)
        assert not re.search(rb"\s", outside_strings(data)), rand
        assert bodies.decode_topic_route(data) == route
    addrs = re.search(rb'"brokerAddrs":\{([^}]*)\}', bodies.encode_topic_route(route, False))
    ids = [int(item.split(b":", 1)[0]) for item in addrs.group(1).split(b",")]
    assert ids == sorted(ids)


def test_route_keys_sort_numerically_and_order_conf_only_when_set():
    route = TopicRouteData([], [BrokerData("C", "b", {10: "x:1", 2: "y:2"})])
    data = bodies.encode_topic_route(route, True)
    assert b'{"2":"y:2","10":"x:1"}' in data and b"orderTopicConf" not in data
    route.order_topic_conf = "b:4"
    assert b'"orderTopicConf":"b:4","queueDatas"' in bodies.encode_topic_route(route, False)


def test_route_non_ascii_escaped_only_in_quoted_form():
    route = TopicRouteData([], [BrokerData("Cl\u00fcster", "b", {0: "h:1"})])
    assert b'"Cl\\u00fcster"' in bodies.encode_topic_route(route, True)
    assert "\"Cl\u00fcster\"".encode() in bodies.encode_topic_route(route, False)
    assert bodies.decode_topic_route(bodies.encode_topic_route(route, True)) == route


def test_route_decode_old_and_fastjson_forms():
    old = GOLDEN_ROUTE_QUOTED.replace(b'"topicSynFlag":0,"topicSysFlag":0', b'"topicSynFlag":1')
    assert bodies.decode_topic_route(old).queue_datas[0].topic_sys_flag == 1
    pretty = GOLDEN_ROUTE_UNQUOTED.replace(b",", b", ").replace(b"{0:", b"{ 0 : ")
    decoded = bodies.decode_topic_route(memoryview(pretty))
    assert decoded.broker_datas[0].broker_addrs == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}


@pytest.mark.parametrize("data", [b"", b"[]", b"{", b'{"queueDatas":{}}',
                                  b'{"queueDatas":[{"brokerName":"b"}]}',
                                  b'{"brokerDatas":[{"brokerName":"b","brokerAddrs":{"x":"a"}}]}',
                                  b'{"brokerDatas":[{"brokerName":"b","brokerAddrs":{"0":5}}]}'])
def test_route_decode_errors(data):
    with pytest.raises(ValueError):
        bodies.decode_topic_route(data)


def test_cluster_info_golden_uses_bare_keys():
    info = ClusterInfo({"broker-a": reference_route().broker_datas[0]},
                       {"DefaultCluster": {"broker-a"}})
    data = bodies.encode_cluster_info(info)
    assert data == (b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"10.0.0.1:10911",'
                    b'1:"10.0.0.2:10911"},"brokerName":"broker-a","cluster":"DefaultCluster"}},'
                    b'"clusterAddrTable":{"DefaultCluster":["broker-a"]}}')
    decoded = bodies.decode_cluster_info(data)
    assert decoded.broker_addr_table == info.broker_addr_table
    assert decoded.cluster_addr_table == {"DefaultCluster": ["broker-a"]}


def test_small_bodies_golden_and_round_trip():
    assert bodies.encode_topic_list({"b", "a"}) == b'{"topicList":["a","b"]}'
    assert bodies.encode_topic_list(["x"], "h:1") == b'{"brokerAddr":"h:1","topicList":["x"]}'
    assert bodies.decode_topic_list(b'{"topicList":["a","b"],"brokerAddr":null}') == ["a", "b"]
    assert bodies.encode_kv_table({"k2": "v", "k1": "w"}) == b'{"table":{"k1":"w","k2":"v"}}'
    assert bodies.decode_kv_table(b'{"table":{"k":"v"}}') == {"k": "v"}
    version = DataVersion(timestamp=1700000000000, counter=3)
    assert bodies.encode_data_version(version) == b'{"counter":3,"timestamp":1700000000000}'
    assert bodies.decode_data_version(b'{"counter":3,"stateVersion":0,"timestamp":5}') == \
        DataVersion(5, 3, 0)
    assert bodies.encode_consumer_list(["ip@1", "ip@2"]) == b'{"consumerIdList":["ip@1","ip@2"]}'
    assert bodies.decode_consumer_list(b'{"consumerIdList":["a"]}') == ["a"]
    queue = MessageQueue("T", "broker-a", 0)
    assert bodies.encode_message_queue(queue) == \
        b'{"brokerName":"broker-a","queueId":0,"topic":"T"}'


def test_lock_batch_bodies():
    request = LockBatchRequest("G", "10.0.0.9@1", [MessageQueue("T", "broker-a", 0)])
    data = bodies.encode_lock_batch_request(request)
    assert data == (b'{"clientId":"10.0.0.9@1","consumerGroup":"G","mqSet":[{"brokerName":'
                    b'"broker-a","queueId":0,"topic":"T"}],"onlyThisBroker":false}')
    assert bodies.decode_lock_batch_request(data) == request
    response = bodies.encode_lock_batch_response([MessageQueue("T", "b", 1)])
    assert response == b'{"lockOKMQSet":[{"brokerName":"b","queueId":1,"topic":"T"}]}'
    assert bodies.decode_lock_batch_response(response) == [MessageQueue("T", "b", 1)]
    with pytest.raises(ValueError, match="queueId"):
        bodies.decode_lock_batch_response(b'{"lockOKMQSet":[{"brokerName":"b","topic":"T"}]}')


# --- subscriptions -------------------------------------------------------------------------------
@pytest.mark.parametrize("expression, tags", [
    ("TagA || TagB", {"TagA", "TagB"}), (" TagA||||TagB ||", {"TagA", "TagB"}),
    ("TagA\t||\nTagA", {"TagA"}), ("\x01TagA||\u00a0TagB", {"TagA", "\u00a0TagB"}),
    ("\u00e9t\u00e9 || \U0001f600", {"\u00e9t\u00e9", "\U0001f600"}),
])
def test_build_subscription_tags_and_java_codes(expression, tags):
    subscription = bodies.build_subscription("T", expression, sub_version=42)
    assert subscription.tags_set == tags
    assert subscription.code_set == {java_hash_oracle(tag) for tag in tags}
    assert subscription.sub_string == expression and subscription.sub_version == 42


def test_build_subscription_reference_codes_and_special_cases():
    assert bodies.build_subscription("T", "TagA||TagB").code_set == {2598919, 2598920}
    for everything in ("*", "", None):
        subscription = bodies.build_subscription("T", everything)
        assert subscription.sub_string == "*" and not subscription.tags_set
        assert not subscription.code_set
    sql = bodies.build_subscription("T", "a > 5", "SQL92")
    assert sql.expression_type == "SQL92" and not sql.tags_set
    with pytest.raises(ValueError):
        bodies.build_subscription("T", "", "SQL92")
    with pytest.raises(ValueError):
        bodies.build_subscription("T", "x", "XPATH")


# --- heartbeats ----------------------------------------------------------------------------------
JAVA_HEARTBEAT = b"""{"clientID":"10.0.0.9@12345#83741298372115",
 "consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",
   "consumeType":"CONSUME_PASSIVELY","groupName":"GroupA","messageModel":"CLUSTERING",
   "subscriptionDataSet":[{"classFilterMode":false,"codeSet":[2598919,2598920],
      "expressionType":"TAG","subString":"TagA||TagB","subVersion":1700000000000,
      "tagsSet":["TagA","TagB"],"topic":"TopicTest"},
     {"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*",
      "subVersion":1700000000000,"tagsSet":[],"topic":"%RETRY%GroupA"}],
   "unitMode":false}],
 "producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"},{"groupName":"ProducerGroupA"}],
 "heartbeatFingerprint":0,"withoutSub":false}
"""


def test_java_heartbeat_decodes_and_re_encodes_compactly():
    heartbeat = bodies.decode_heartbeat(JAVA_HEARTBEAT)
    assert heartbeat.client_id == "10.0.0.9@12345#83741298372115"
    assert heartbeat.producer_groups == ["CLIENT_INNER_PRODUCER", "ProducerGroupA"]
    consumer = heartbeat.consumer_datas[0]
    assert consumer.consume_type is ConsumeType.CONSUME_PASSIVELY
    assert consumer.message_model is MessageModel.CLUSTERING
    assert consumer.subscriptions[0].code_set == {2598919, 2598920}
    assert consumer.subscriptions[1].sub_string == "*"
    encoded = bodies.encode_heartbeat(heartbeat)
    assert encoded == orjson.dumps(orjson.loads(JAVA_HEARTBEAT), option=orjson.OPT_SORT_KEYS)
    assert bodies.decode_heartbeat(encoded) == heartbeat


def test_go_heartbeat_shape():
    go = (b'{"clientID":"10.0.0.9@7@0@x","producerDataSet":[],"consumerDataSet":[{"groupName":"G",'
          b'"consumeType":"CONSUME_PASSIVELY","messageModel":"BROADCASTING","consumeFromWhere":'
          b'"CONSUME_FROM_FIRST_OFFSET","unitMode":false,"subscriptionDataSet":[{"topic":"T",'
          b'"subString":"TagA","classFilterMode":false,"tagsSet":["TagA"],"codeSet":["2598919"],'
          b'"subVersion":1700000000123456789}]}]}')
    heartbeat = bodies.decode_heartbeat(go)
    assert heartbeat.heartbeat_fingerprint == 0 and heartbeat.without_sub is False
    consumer = heartbeat.consumer_datas[0]
    assert consumer.message_model is MessageModel.BROADCASTING
    assert consumer.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    subscription = consumer.subscriptions[0]
    assert subscription.code_set == {2598919} and subscription.expression_type == "TAG"
    assert subscription.sub_version == 1700000000123456789


def test_cpp_heartbeat_shape_with_ordinals():
    cpp = (b'{"clientID":"c","consumerDataSet":[{"groupName":"G","consumeType":1,"messageModel":0,'
           b'"consumeFromWhere":5,"subscriptionDataSet":[{"topic":"T","subString":"*",'
           b'"codeSet":[],"tagsSet":[],"subVersion":1,"expressionType":"TAG"}]}],'
           b'"producerDataSet":[{"groupName":"P"}]}\n')
    consumer = bodies.decode_heartbeat(bytearray(cpp)).consumer_datas[0]
    assert consumer.consume_type is ConsumeType.CONSUME_PASSIVELY
    assert consumer.message_model is MessageModel.BROADCASTING
    assert consumer.consume_from_where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP


@pytest.mark.parametrize("data, message", [
    (b"not json", "HeartbeatData"),
    (b"[1]", "expected a JSON object"),
    (b'{"producerDataSet":[]}', "clientID"),
    (b'{"clientID":7}', "clientID"),
    (b'{"clientID":"c","consumerDataSet":{}}', "consumerDataSet"),
    (b'{"clientID":"c","consumerDataSet":[{"consumeType":"PUSH","groupName":"G"}]}', "PUSH"),
    (b'{"clientID":"c","consumerDataSet":[{"messageModel":7,"groupName":"G"}]}', "out of range"),
    (b'{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":'
     b'[{"topic":"T","codeSet":["abc"]}]}]}', "codeSet"),
    (b'{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":'
     b'[{"topic":"T","subVersion":1.5}]}]}', "integer"),
    (b'{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":'
     b'[{"topic":"T","tagsSet":[1]}]}]}', "tagsSet"),
    (b'{"clientID":"c","producerDataSet":[{"group":"P"}]}', "groupName"),
])
def test_malformed_heartbeats_raise_value_error(data, message):
    with pytest.raises(ValueError, match=message):
        bodies.decode_heartbeat(data)


def test_heartbeat_round_trip_random(rand):
    heartbeat = HeartbeatData(
        client_id=f"10.0.0.{rand.randrange(256)}@{rand.randrange(1 << 16)}",
        producer_groups=[f"P{i}" for i in range(rand.randrange(3))],
        consumer_datas=[ConsumerData(
            f"G{i}", rand.choice(list(ConsumeType)), rand.choice(list(MessageModel)),
            rand.choice(list(ConsumeFromWhere)),
            [bodies.build_subscription(f"T{j}", " || ".join(f"Tag{rand.randrange(9)}"
                                                            for _ in range(rand.randrange(3))),
                                       sub_version=rand.randrange(1 << 62))
             for j in range(rand.randrange(1, 4))],
            rand.choice([True, False])) for i in range(rand.randrange(1, 4))],
        heartbeat_fingerprint=rand.randrange(-(1 << 31), 1 << 31), without_sub=True)
    assert bodies.decode_heartbeat(bodies.encode_heartbeat(heartbeat)) == heartbeat, rand


# --- register broker body ------------------------------------------------------------------------
def register_body() -> RegisterBrokerBody:
    return RegisterBrokerBody(DataVersion(timestamp=1700000000000, counter=3), {
        "TopicTest": {"topicName": "TopicTest", "readQueueNums": 4, "writeQueueNums": 4,
                      "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                      "order": False},
        "%RETRY%G": {"topicName": "%RETRY%G", "readQueueNums": 1, "writeQueueNums": 1,
                     "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                     "order": False}})


def test_register_body_json_golden_and_round_trip():
    data = bodies.encode_register_broker_body(register_body(), compressed=False)
    assert data.startswith(b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":'
                           b'{"counter":3,"timestamp":1700000000000},"topicConfigTable":{')
    assert (b'"TopicTest":{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":'
            b'"SINGLE_TAG","topicName":"TopicTest","topicSysFlag":0,"writeQueueNums":4}') in data
    decoded = bodies.decode_register_broker_body(data, False, bodies.body_crc32(data))
    assert decoded == register_body()


def independent_compressed_body(topic_lines, trailing=b"") -> bytes:
    """The compressed REGISTER_BROKER layout, built here without the package's encoder."""
    def sized(chunk: bytes) -> bytes:
        return struct.pack(">i", len(chunk)) + chunk
    payload = sized(b'{"counter":3,"stateVersion":0,"timestamp":1700000000000}')
    payload += struct.pack(">i", len(topic_lines)) + b"".join(sized(t) for t in topic_lines)
    payload += sized(b'["10.0.0.1:30000"]') + trailing
    return zlib.compress(payload, 9)


def test_compressed_register_body_from_5x_layout():
    data = independent_compressed_body(
        [b"TopicTest 4 4 6 SINGLE_TAG", b'Attr 2 2 7 MULTI_TAG {"+message.type":"NORMAL"}'],
        trailing=struct.pack(">i", 0))
    decoded = bodies.decode_register_broker_body(data, True, zlib.crc32(data) & 0x7FFFFFFF)
    assert decoded.data_version == DataVersion(1700000000000, 3, 0)
    assert decoded.filter_server_list == ["10.0.0.1:30000"]
    assert decoded.topic_config_table["TopicTest"]["readQueueNums"] == 4
    attr = decoded.topic_config_table["Attr"]
    assert attr["perm"] == 7 and attr["topicFilterType"] == "MULTI_TAG"
    assert attr["attributes"] == {"+message.type": "NORMAL"}


def test_compressed_register_body_round_trip_and_4x_text_form():
    data = bodies.encode_register_broker_body(register_body(), compressed=True)
    payload = zlib.decompress(data)
    assert b"%RETRY%G 1 1 6 SINGLE_TAG\x00" in payload    # exactly five parts, no trailing space
    assert bodies.decode_register_broker_body(data, True) == register_body()


def test_register_body_crc_and_errors():
    data = bodies.encode_register_broker_body(register_body(), compressed=True)
    with pytest.raises(ValueError, match="^crc32 not match$"):
        bodies.decode_register_broker_body(data, True, (bodies.body_crc32(data) + 1) & 0x7FFFFFFF)
    bodies.decode_register_broker_body(data, True, 0)     # 0 = not checked
    payload = zlib.decompress(data)
    for cut in (3, 10, len(payload) - 1):
        with pytest.raises(ValueError, match="truncated"):
            bodies.decode_register_broker_body(zlib.compress(payload[:cut]), True)
    with pytest.raises(ValueError, match="zlib"):
        bodies.decode_register_broker_body(b"\x00garbage", True)
    count_position = 4 + struct.unpack(">i", payload[:4])[0]
    huge_count = payload[:count_position] + struct.pack(">i", -1) + payload[count_position + 4:]
    with pytest.raises(ValueError, match="bad topic count -1"):
        bodies.decode_register_broker_body(zlib.compress(huge_count), True)
    with pytest.raises(ValueError, match="topic config"):
        bodies.decode_register_broker_body(independent_compressed_body([b"T 1 1"]), True)
    with pytest.raises(ValueError):
        bodies.decode_register_broker_body(independent_compressed_body([b"T x 1 6 SINGLE_TAG"]),
                                           True)


def test_subscription_data_defaults_match_java_beans():
    subscription = SubscriptionData("T")
    assert subscription.sub_string == "*" and subscription.expression_type == "TAG"


@pytest.mark.parametrize("value, expected", [
    (True, True), (False, False), ("true", True), ("TRUE", True), ("false", False),
    ("1", True), ("0", False), (1, True), (0, False), (2, False), ("Y", True), ("t", True),
    ("N", False), ("f", False), ("", False), ("null", False),
])
def test_boolean_fields_read_as_fastjson_reads_them(value, expected):
    # fastjson (TypeUtils.castToBoolean) takes "1"/"0", numbers and Y/T/F/N for a boolean.
    body = orjson.dumps({"clientID": "c", "producerDataSet": [], "consumerDataSet": [
        {"groupName": "G", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
         "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": value,
         "subscriptionDataSet": []}]})
    assert bodies.decode_heartbeat(body).consumer_datas[0].unit_mode is expected


@pytest.mark.parametrize("value", ["yes", "2", [True], {"a": 1}])
def test_other_boolean_values_are_refused(value):
    body = orjson.dumps({"clientID": "c", "producerDataSet": [], "consumerDataSet": [
        {"groupName": "G", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
         "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": value,
         "subscriptionDataSet": []}]})
    with pytest.raises(ValueError, match="unitMode"):
        bodies.decode_heartbeat(body)
