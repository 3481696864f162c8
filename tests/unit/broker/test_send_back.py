# Tests of the CONSUMER_SEND_MSG_BACK handler over a real store.
"""Goal: a returned message is re-put to the retry topic (via the schedule topic, delay level
3 + reconsumeTimes or the requested one) or to the DLQ exactly by the protocol.md §5.2 rules, and
refusals carry Java's codes and remarks and store nothing. Method: messages sent through the real
send handler, then CONSUMER_SEND_MSG_BACK requests built like the Java client's (long names, version
401) against a real MessageStore on tmp_path; stored records are decoded and compared.
"""
import importlib.util
import pathlib

import pytest

from pybroker.broker import send, send_back
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand
from pybroker.protocol.constants import SystemTopic
from pybroker.protocol.message_id import offset_message_id
from pybroker.store.config_docs import SubscriptionGroupConfig

_spec = importlib.util.spec_from_file_location(
    "send_harness", pathlib.Path(__file__).with_name("send_harness.py"))
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)
handle = send_back.handle_consumer_send_msg_back


@pytest.fixture
def broker(tmp_path):
    created = harness.Broker(tmp_path, {"autoCreateSubscriptionGroup": "false"})
    created.metadata.groups.update_subscription_group(
        SubscriptionGroupConfig("CG", retry_max_times=3))
    yield created
    created.close()


def sent_offset(broker, reconsume_times: str = "0") -> int:
    request = harness.send_request("go", b"payload", queue_id=1, reconsumeTimes=reconsume_times,
                                   properties=harness.properties_text(TAGS="tg", UNIQ_KEY="U"))
    response = broker.call(send.handle_send_message, request)
    assert response.code == ResponseCode.SUCCESS
    return broker.records(harness.TOPIC, 1)[-1][0].physical_offset


def back_request(offset: int, delay_level: int = 0, group: str = "CG", **extra):
    fields = {"offset": str(offset), "group": group, "delayLevel": str(delay_level),
              "originMsgId": "U", "originTopic": harness.TOPIC, "unitMode": "false"}
    fields.update(extra)
    return RemotingCommand(RequestCode.CONSUMER_SEND_MSG_BACK, 0, 401, 5, 0, None, fields)


def test_first_failure_goes_to_retry_via_level_three(broker):
    offset = sent_offset(broker)
    response = broker.call(handle, back_request(offset))
    assert response.code == ResponseCode.SUCCESS and response.remark is None
    [(decoded, properties)] = broker.records(SystemTopic.SCHEDULE, 2)
    assert properties["REAL_TOPIC"] == "%RETRY%CG" and properties["DELAY"] == "3"
    assert properties["RETRY_TOPIC"] == harness.TOPIC and properties["WAIT"] == "false"
    assert properties["ORIGIN_MESSAGE_ID"] == offset_message_id(harness.HOST, 10911, offset)
    assert decoded.reconsume_times == 1 and bytes(decoded.body) == b"payload"
    assert broker.metadata.topic_config("%RETRY%CG") is not None


def test_requested_level_is_used(broker):
    broker.call(handle, back_request(sent_offset(broker), delay_level=5))
    assert len(broker.records(SystemTopic.SCHEDULE, 4)) == 1


@pytest.mark.parametrize("reconsume_times,delay_level", [("3", 0), ("0", -1)])
def test_dead_letter(broker, reconsume_times, delay_level):
    offset = sent_offset(broker, reconsume_times)
    response = broker.call(handle, back_request(offset, delay_level))
    assert response.code == ResponseCode.SUCCESS
    [(decoded, properties)] = broker.records("%DLQ%CG", 0)
    # Java's setDelayTimeLevel(0) writes DELAY=0; WAIT=false is written, not removed.
    assert properties["DELAY"] == "0" and properties["WAIT"] == "false"
    assert "REAL_TOPIC" not in properties
    assert decoded.reconsume_times == int(reconsume_times) + 1


def test_header_max_reconsume_times_overrides_the_group(broker):
    offset = sent_offset(broker, "3")
    broker.call(handle, back_request(offset, maxReconsumeTimes="16"))
    assert broker.records("%DLQ%CG", 0) == []
    assert len(broker.records(SystemTopic.SCHEDULE, 5)) == 1


def test_no_retry_queues_drops_with_success(broker):
    broker.metadata.groups.update_subscription_group(
        SubscriptionGroupConfig("CG", retry_queue_nums=0))
    offset = sent_offset(broker)
    end = broker.commitlog_end()
    assert broker.call(handle, back_request(offset)).code == ResponseCode.SUCCESS
    assert broker.commitlog_end() == end


@pytest.mark.parametrize("case,code,remark", [
    # Java's remark, FAQ suffix and all (FAQUrl.suggestTodo).
    ("group", ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "subscription group not exist, Nope \n"
     "See http://rocketmq.apache.org/docs/faq/ for further details."),
    ("bad-group", ResponseCode.SYSTEM_ERROR, "illegal characters"),
    ("offset", ResponseCode.SYSTEM_ERROR, "look message by offset failed"),
    ("misaligned", ResponseCode.SYSTEM_ERROR, "look message by offset failed"),
])
def test_refusals_store_nothing(broker, case, code, remark):
    offset = sent_offset(broker)
    end = broker.commitlog_end()
    request = {"group": back_request(offset, group="Nope"),
               "bad-group": back_request(offset, group="a b"),
               "offset": back_request(end + 1000),
               "misaligned": back_request(offset + 7)}[case]
    response = broker.call(handle, request)
    assert response.code == code and remark in response.remark
    assert broker.commitlog_end() == end


def test_read_only_broker_refuses(tmp_path):
    broker = harness.Broker(tmp_path, {"brokerPermission": "4"})
    try:
        response = broker.call(handle, back_request(0, group="CG"))
        assert response.code == ResponseCode.NO_PERMISSION
        assert "sending message is forbidden" in response.remark
    finally:
        broker.close()
