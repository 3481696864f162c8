"""Custom-header schemas parse what Java, Go and C++ clients send and reject bad input clearly.

Method: table-driven ext-field maps in each client's shape (long names, one-letter V2 names,
Go's empty strings), boundary numbers for Java int/long, every schema round-tripped through
encode_header with seeded random values, and the topic/group name rules at their length limits.
"""
import pytest

from pybroker.errors import HeaderError
from pybroker.protocol import headers
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.headers import (
    EMPTY_HEADER, encode_header, parse_request_header, parse_response_header,
    topic_not_allowed_to_send, topic_too_long_to_send, validate_group, validate_topic)

JAVA_V2_SEND = {
    "a": "ProducerGroupA", "b": "TopicTest", "c": "TBW102", "d": "4", "e": "3", "f": "0",
    "g": "1700000000000", "h": "0", "i": "UNIQ_KEY\x01AC1100\x02WAIT\x01true\x02", "j": "0",
    "k": "false", "l": "16", "m": "false", "n": "broker-a",
    "bname": "broker-a", "ns": "", "nsd": "false", "oway": "false", "lo": "false",
}
GO_LONG_SEND = {
    "producerGroup": "ProducerGroupA", "topic": "TopicTest", "defaultTopic": "TBW102",
    "defaultTopicQueueNums": "4", "queueId": "3", "sysFlag": "0", "bornTimestamp": "1700000000000",
    "flag": "0", "properties": "UNIQ_KEY\x01AC1100\x02WAIT\x01true\x02", "reconsumeTimes": "0",
    "unitMode": "false", "maxReconsumeTimes": "16", "batch": "false", "bname": "broker-a",
}


def test_v2_and_long_names_give_the_same_header():
    v2 = parse_request_header(RequestCode.SEND_MESSAGE_V2, JAVA_V2_SEND)
    long_form = parse_request_header(RequestCode.SEND_MESSAGE, GO_LONG_SEND)
    assert v2 == long_form
    assert type(v2) is headers.SEND_MESSAGE_REQUEST.header_class
    assert v2.producer_group == "ProducerGroupA" and v2.topic == "TopicTest"
    assert v2.queue_id == 3 and v2.born_timestamp == 1700000000000
    assert v2.max_reconsume_times == 16 and v2.broker_name == "broker-a"
    assert v2.batch is False and v2.unit_mode is False


def test_batch_comes_from_the_flag_not_the_code():
    cpp_batch = dict(JAVA_V2_SEND, m="true")
    for code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        assert parse_request_header(code, cpp_batch).batch is True
    assert parse_request_header(RequestCode.SEND_BATCH_MESSAGE, JAVA_V2_SEND).batch is False


def test_long_names_are_not_read_for_v2_codes():
    with pytest.raises(HeaderError) as caught:
        parse_request_header(RequestCode.SEND_MESSAGE_V2, GO_LONG_SEND)
    assert caught.value.remark == "the custom field <a> is null"


@pytest.mark.parametrize("missing", ["topic", "queueId", "bornTimestamp"])
def test_missing_required_field_names_it_like_java(missing):
    ext = dict(GO_LONG_SEND)
    del ext[missing]
    with pytest.raises(HeaderError) as caught:
        parse_request_header(RequestCode.SEND_MESSAGE, ext)
    assert caught.value.remark == f"the custom field <{missing}> is null"
    assert caught.value.code == ResponseCode.SYSTEM_ERROR


def test_go_empty_strings_are_absent():
    ext = dict(GO_LONG_SEND, properties="", reconsumeTimes="", maxReconsumeTimes="",
               unitMode="", batch="")
    header = parse_request_header(RequestCode.SEND_MESSAGE, ext)
    assert header.properties is None and header.reconsume_times is None
    assert header.max_reconsume_times is None
    assert header.unit_mode is False and header.batch is False
    with pytest.raises(HeaderError, match="<queueId> is null"):
        parse_request_header(RequestCode.SEND_MESSAGE, dict(GO_LONG_SEND, queueId=""))


def test_required_string_may_be_empty_like_java():
    header = parse_request_header(RequestCode.SEND_MESSAGE, dict(GO_LONG_SEND, defaultTopic=""))
    assert header.default_topic == ""


@pytest.mark.parametrize("field, text, expected", [
    ("queueId", "2147483647", 2147483647),
    ("queueId", "-2147483648", -2147483648),
    ("queueId", "+7", 7),
    ("queueId", "-1", -1),
    ("queueId", "007", 7),
    ("bornTimestamp", "9223372036854775807", 9223372036854775807),
    ("bornTimestamp", "-9223372036854775808", -9223372036854775808),
])
def test_numbers_at_java_limits(field, text, expected):
    header = parse_request_header(RequestCode.SEND_MESSAGE, dict(GO_LONG_SEND, **{field: text}))
    attribute = headers.SEND_MESSAGE_REQUEST.fields[
        [f.wire_name for f in headers.SEND_MESSAGE_REQUEST.fields].index(field)].attribute
    assert getattr(header, attribute) == expected


@pytest.mark.parametrize("field, text", [
    ("queueId", "2147483648"), ("queueId", "-2147483649"), ("queueId", "1.0"),
    ("queueId", " 5"), ("queueId", "5 "), ("queueId", "1_0"), ("queueId", "\u0663"),
    ("queueId", "0x10"), ("queueId", "abc"), ("queueId", "-"), ("queueId", "9" * 5000),
    ("bornTimestamp", "9223372036854775808"), ("bornTimestamp", "1e3"),
])
def test_bad_values_raise_header_error_naming_field_and_value(field, text):
    with pytest.raises(HeaderError) as caught:
        parse_request_header(RequestCode.SEND_MESSAGE, dict(GO_LONG_SEND, **{field: text}))
    assert f"<{field}>" in caught.value.remark
    assert repr(text)[:20] in caught.value.remark
    assert len(caught.value.remark) < 200
    assert caught.value.code == ResponseCode.SYSTEM_ERROR


@pytest.mark.parametrize("text, expected", [
    ("true", True), ("TRUE", True), ("True", True), ("false", False), ("FaLsE", False),
    # Java's Boolean.parseBoolean: anything but "true" (any case) is false, never an error.
    # The C++ client core sends "0"/"1".
    ("1", False), ("0", False), ("yes", False), ("", False), (" true", False), ("truee", False),
])
def test_booleans_read_as_java_parse_boolean(text, expected):
    for code, key in ((RequestCode.SEND_MESSAGE, "batch"), (RequestCode.SEND_MESSAGE, "unitMode")):
        header = parse_request_header(code, dict(GO_LONG_SEND, **{key: text}))
        assert getattr(header, headers._snake_case(key)) is expected
    v2 = {"a": "g", "b": "T", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1", "h": "0",
          "k": text, "m": text}
    header = parse_request_header(RequestCode.SEND_MESSAGE_V2, v2)
    assert header.unit_mode is expected and header.batch is expected


def test_every_boolean_field_of_every_schema_is_lenient():
    schemas = {id(s): s for s, _ in headers.REQUEST_SCHEMAS.values()}
    for schema in schemas.values():
        for f in schema.fields:
            if f.type != headers.BOOL:
                continue
            for text, expected in (("1", False), ("TrUe", True), ("0", False)):
                values = {g.wire_name: {headers.STR: "x", headers.INT: "1", headers.LONG: "1",
                                        headers.BOOL: "false", headers.FLOAT: "1"}[g.type]
                          for g in schema.fields if g.required}
                values[f.wire_name] = text
                parsed = schema.parse(values)
                assert getattr(parsed, f.attribute) is expected, (schema.name, f.wire_name)


def test_non_string_values_raise_header_error():
    for value in (5, 1.5, ["1"], {"x": 1}):
        with pytest.raises(HeaderError, match="<queueId>"):
            parse_request_header(RequestCode.SEND_MESSAGE, dict(GO_LONG_SEND, queueId=value))
    with pytest.raises(HeaderError, match="<batch>"):
        parse_request_header(RequestCode.SEND_MESSAGE, dict(GO_LONG_SEND, batch=True))


def test_codes_without_schema_give_the_empty_header():
    for code in (RequestCode.HEART_BEAT, RequestCode.LOCK_BATCH_MQ, RequestCode.GET_BROKER_CONFIG,
                 9999):
        assert parse_request_header(code, {"AccessKey": "", "Signature": ""}) is EMPTY_HEADER
        assert parse_request_header(code, None) is EMPTY_HEADER


def test_none_ext_fields_with_required_fields_fails_cleanly():
    with pytest.raises(HeaderError, match="<consumerGroup> is null"):
        parse_request_header(RequestCode.PULL_MESSAGE, None)


def test_pull_header_go_and_cpp_shapes():
    go = {"consumerGroup": "G", "topic": "T", "queueId": "1", "queueOffset": "10",
          "maxMsgNums": "32", "sysFlag": "3", "commitOffset": "9", "suspendTimeoutMillis": "20000",
          "subscription": "", "subVersion": "0", "expressionType": "TAG", "bname": "broker-a"}
    header = parse_request_header(RequestCode.PULL_MESSAGE, go)
    assert header.subscription is None and header.expression_type == "TAG"
    assert header.queue_offset == 10 and header.suspend_timeout_millis == 20000
    cpp = dict(go)
    del cpp["expressionType"], cpp["bname"]
    cpp.update(AccessKey="", Signature="", OnsChannel="ALIYUN", subscription="TagA")
    header = parse_request_header(RequestCode.LITE_PULL_MESSAGE, cpp)
    assert header.expression_type == "TAG" and header.subscription == "TagA"


def test_response_headers():
    ext = {"msgId": "AC110001", "queueId": "2", "queueOffset": "77", "MSG_REGION": "DefaultRegion",
           "TRACE_ON": "true"}
    header = parse_response_header(RequestCode.SEND_MESSAGE_V2, ext)
    assert header.queue_offset == 77 and header.msg_region == "DefaultRegion"
    assert header.trace_on is True
    with pytest.raises(HeaderError, match="<maxOffset> is null"):
        parse_response_header(RequestCode.PULL_MESSAGE, {"suggestWhichBrokerId": "0",
                                                         "nextBeginOffset": "1", "minOffset": "0"})
    assert parse_response_header(RequestCode.UNREGISTER_CLIENT, {}) is EMPTY_HEADER


def test_encode_header_from_values_and_from_object():
    ext = encode_header(headers.PULL_MESSAGE_RESPONSE, {
        "suggest_which_broker_id": 0, "next_begin_offset": 12, "min_offset": 0, "max_offset": 12,
        "topic_sys_flag": None})
    assert ext == {"suggestWhichBrokerId": "0", "nextBeginOffset": "12", "minOffset": "0",
                   "maxOffset": "12"}
    assert all(type(v) is str for v in ext.values())
    header = parse_request_header(RequestCode.SEND_MESSAGE, GO_LONG_SEND)
    short = encode_header(header, short_names=True)
    assert short["k"] == "false" and short["d"] == "4" and short["n"] == "broker-a"
    assert parse_request_header(RequestCode.SEND_BATCH_MESSAGE, short) == header
    assert encode_header(header)["bname"] == "broker-a"


@pytest.mark.parametrize("values, message", [
    ({"offset_delta": 1}, "required field <suggestWhichBrokerId>"),
    ({"suggest_which_broker_id": "0", "next_begin_offset": 1, "min_offset": 0, "max_offset": 1},
     "needs a Java long"),
    ({"suggest_which_broker_id": 1 << 63, "next_begin_offset": 1, "min_offset": 0,
      "max_offset": 1}, "needs a Java long"),
    ({"no_such_field": 1}, "no field"),
])
def test_encode_header_rejects_programming_errors(values, message):
    with pytest.raises(ValueError, match=message):
        encode_header(headers.PULL_MESSAGE_RESPONSE, values)


def _random_value(rand, f):
    if f.type == headers.STR:
        return rand.choice(["", "x", "TopicTest", "a b,c:d", "\u00e9\u4e2d"])
    if f.type == headers.BOOL:
        return rand.choice([True, False])
    if f.type == headers.INT:
        return rand.choice([0, -1, (1 << 31) - 1, -(1 << 31), rand.randrange(-(1 << 31), 1 << 31)])
    if f.type == headers.LONG:
        return rand.choice([0, (1 << 63) - 1, -(1 << 63), rand.randrange(-(1 << 63), 1 << 63)])
    return rand.random()


def test_every_schema_round_trips(rand):
    schemas = {id(s): s for s, _ in headers.REQUEST_SCHEMAS.values()}
    schemas.update({id(s): s for s in headers.RESPONSE_SCHEMAS.values()})
    assert len(schemas) >= 40
    for schema in schemas.values():
        for _ in range(20):
            values = {}
            for f in schema.fields:
                value = _random_value(rand, f)
                if f.required and f.type == headers.STR and value == "":
                    value = "x"
                if not f.required and rand.random() < 0.3:
                    value = None
                values[f.attribute] = value
            parsed = schema.parse(encode_header(schema, values))
            for f in schema.fields:
                expected = values[f.attribute]
                if expected is None or (expected == "" and not f.required):
                    expected = f.default
                assert getattr(parsed, f.attribute) == expected, (schema, f, rand)


def test_every_request_code_in_the_reference_tables_has_a_schema_or_none_by_design():
    without_header = {RequestCode.HEART_BEAT, RequestCode.LOCK_BATCH_MQ,
                      RequestCode.UNLOCK_BATCH_MQ, RequestCode.GET_BROKER_CONFIG,
                      RequestCode.UPDATE_BROKER_CONFIG,
                      RequestCode.GET_BROKER_RUNTIME_INFO, RequestCode.GET_ALL_CONSUMER_OFFSET,
                      RequestCode.GET_ALL_DELAY_OFFSET, RequestCode.GET_BROKER_CLUSTER_INFO,
                      RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
                      RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                      RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, RequestCode.CHECK_CLIENT_CONFIG,
                      RequestCode.CONTROLLER_GET_METADATA_INFO,
                      RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
                      RequestCode.GET_BROKER_EPOCH_CACHE,
                      # RocketMQ 5.x protocol basics (bodies only)
                      RequestCode.SET_MESSAGE_REQUEST_MODE,
                      RequestCode.GET_ALL_MESSAGE_REQUEST_MODE,
                      RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER,
                      RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE, RequestCode.DELETE_EXPIRED_COMMITLOG,
                      RequestCode.GET_NAMESRV_CONFIG, RequestCode.UPDATE_NAMESRV_CONFIG,
                      RequestCode.GET_BROKER_HA_STATUS,
                      # 5.x: their question is the body
                      RequestCode.QUERY_ASSIGNMENT, RequestCode.BATCH_ACK_MESSAGE,
                      # 5.x timer (bodies only)
                      RequestCode.GET_TIMER_CHECK_POINT, RequestCode.GET_TIMER_METRICS}
    for code in RequestCode:
        assert (code in headers.REQUEST_SCHEMAS) != (code in without_header), code


@pytest.mark.parametrize("name, ok", [
    ("TopicTest", True), ("a", True), ("%RETRY%GroupA", True), ("T|x-y_z%", True),
    ("x" * 127, True), ("x" * 128, False), ("%RETRY%" + "g" * 248, True),
    ("%RETRY%" + "g" * 249, False), ("%DLQ%" + "g" * 250, True), ("%DLQ%" + "g" * 251, False),
    ("", False), ("   ", False), (None, False), ("Topic Test", False), ("Topic.Test", False),
    ("Topic/Test", False), ("caf\u00e9", False), ("\u4e2d", False),
])
def test_validate_topic(name, ok):
    remark = validate_topic(name)
    assert (remark is None) == ok, remark
    if not ok:
        assert remark.startswith("The specified topic")


def test_validate_topic_remarks():
    assert validate_topic("") == "The specified topic is blank."
    assert "contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$" in validate_topic("a b")
    assert validate_topic("x" * 128).endswith("is longer than topic max length: 127")
    assert validate_topic("%RETRY%" + "g" * 249).endswith("longer than topic max length: 255")


@pytest.mark.parametrize("name, ok", [
    ("GroupA", True), ("g" * 255, True), ("g" * 256, False), ("", False), ("a@b", False),
    ("CID_RMQ_SYS_TRANS", True),
])
def test_validate_group(name, ok):
    assert (validate_group(name) is None) == ok


def test_topic_too_long_to_send():
    # A producer's send allows 127 bytes, retry topics included (Java msgCheck).
    assert topic_too_long_to_send("x" * 127) is None
    assert topic_too_long_to_send("%RETRY%" + "g" * 121).endswith("max length: 127")


def test_topic_not_allowed_to_send():
    for topic in ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                  "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"):
        remark = topic_not_allowed_to_send(topic)
        assert remark == f"Sending message to topic[{topic}] is forbidden."
    for topic in ("TopicTest", "TBW102", "RMQ_SYS_TRACE_TOPIC", "%RETRY%G"):
        assert topic_not_allowed_to_send(topic) is None
