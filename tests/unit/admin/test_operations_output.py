"""What the operations commands of `pybroker admin` print, from documents alone (no broker):
trace records decoded as Java's TraceDataEncoder reads them, ConsumerRunningInfo formatted as
Java's formatString, TopicConfig and SendResult lines as Java's toString.

Method: trace bodies built with Java's separators and field layouts (Pub of 13, 14 and 15
fields, SubBefore, SubAfter of 6 and 9 fields, EndTransaction, a damaged record, another
message's records), and a ConsumerRunningInfo document shaped like a Java client's answer;
tests/compat/test_admin_operations.py compares the same commands with the real mqadmin.
"""
from pybroker.admin.consumer_commands import format_running_info
from pybroker.admin.message_commands import CONTENT_SPLITOR, FIELD_SPLITOR, decode_trace_views
from pybroker.admin.probe_commands import send_result_text
from pybroker.admin.topic_commands import perm_text, topic_config_text
from pybroker.client.message import SendResult, SendStatus
from pybroker.protocol.bodies import MessageQueue

MSG = "7F00000100002A9F0000000000000000"


def record(*fields) -> str:
    return CONTENT_SPLITOR.join(map(str, fields)) + FIELD_SPLITOR


def pub(*tail) -> str:
    return record("Pub", 1_700_000_000_000, "DefaultRegion", "pg", "T", MSG, "TagA", "k1",
                  "127.0.0.1:10911", 12, 3, 0, *tail)


def test_trace_records_as_java_reads_them():
    body = (pub("true")                                   # 13 fields: success last
            + pub("OFFSETID", "false")                    # 14: offsetMsgId, success
            + pub("OFFSETID", "true", "10.0.0.1")         # 15: and the client host
            + record("SubBefore", 1_700_000_000_100, "DefaultRegion", "cg", "req1", MSG, 0,
                     "k1")
            + record("SubAfter", "req1", MSG, 7, "true", "k1")             # old: no group
            + record("SubAfter", "req1", MSG, 9, "false", "k1", 0, 1_700_000_000_200, "cg")
            + record("Pub", "not-a-number")                               # damaged: skipped
            + record("SubAfter", "req2", "OTHER", 1, "true", "k", 0, 1, "cg"))
    views = decode_trace_views(MSG, body, "10.1.1.1")
    assert [(v.msg_type, v.group, v.cost_ms, v.status) for v in views] == [
        ("Pub", "pg", 3, "success"), ("Pub", "pg", 3, "failed"), ("Pub", "pg", 3, "success"),
        ("SubBefore", "cg", 0, "failed"), ("SubAfter", "", 7, "success"),
        ("SubAfter", "cg", 9, "failed")]
    assert {v.client_host for v in views} == {"10.1.1.1"}    # the trace message's born host
    assert views[5].timestamp_ms == 1_700_000_000_200 and views[4].timestamp_ms == 0


def test_consumer_running_info_formatted_as_java():
    document = {
        "properties": {"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY", "consumerGroup": "g"},
        "subscriptionSet": [{"topic": "%RETRY%g", "subString": "*", "classFilterMode": False},
                            {"topic": "T", "subString": "TagA || TagB"}],
        "mqTable": {'{"brokerName":"b","queueId":1,"topic":"T"}': {"commitOffset": 5,
                                                                  "locked": True},
                    '{"brokerName":"b","queueId":0,"topic":"T"}': {"commitOffset": 3}},
        "statusTable": {"T": {"pullRT": 1.5, "pullTPS": 2, "consumeRT": 0.25,
                              "consumeOKTPS": 10, "consumeFailedTPS": 0,
                              "consumeFailedMsgs": 4}}}
    text = format_running_info(document).splitlines()
    assert text[0] == "#Consumer Properties#"
    assert text[1] == "PROP_CONSUME_TYPE".ljust(40) + ": CONSUME_PASSIVELY"
    subscriptions = text[text.index("#Consumer Subscription#") + 1:][:2]
    assert subscriptions == [
        "001 Topic: " + "%RETRY%g".ljust(40) + " ClassFilter: false    SubExpression: *",
        "002 Topic: " + "T".ljust(40) + " ClassFilter: false    SubExpression: TagA || TagB"]
    offsets = text[text.index("#Consumer Offset#") + 2:][:2]
    assert [row.split() for row in offsets] == [["T", "b", "0", "3"], ["T", "b", "1", "5"]]
    detail = text[text.index("#Consumer MQ Detail#") + 3]
    assert detail.split()[:3] == ["T", "b", "1"] and "locked=true" in detail
    assert "lastPullTimestamp=" in detail and "droped=false" in detail
    assert "cachedMsgCount=0," in detail
    (rates,) = [row for row in text if row.startswith("T ")][-1:]
    assert rates.split() == ["T", "1.50", "2.00", "0.25", "10.00", "0.00", "4"]


def test_topic_config_and_send_result_lines():
    assert [perm_text(perm) for perm in (2, 4, 6, 7, 0)] == ["-W-", "R--", "RW-", "RWX", "---"]
    assert topic_config_text("T", 4, 8, 6) == (
        "TopicConfig [topicName=T, readQueueNums=4, writeQueueNums=8, perm=RW-, "
        "topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false]")
    result = SendResult(SendStatus.SEND_OK, "ID1", "OFF1", MessageQueue("broker-a", "broker-a", 2),
                        17)
    assert send_result_text(result) == (
        "SendResult [sendStatus=SEND_OK, msgId=ID1, offsetMsgId=OFF1, messageQueue="
        "MessageQueue [topic=broker-a, brokerName=broker-a, queueId=2], queueOffset=17]")
