"""The 5.x admin codes answer as the Java 5.3.3 broker does: topic attributes through
UPDATE_AND_CREATE_TOPIC, GET_TOPIC_CONFIG (351), GET_SUBSCRIPTIONGROUP_CONFIG (352) and the
message request modes (401, 402).

Method: the handlers called with built requests against a real MetadataState on tmp_path (the
test_admin.Broker harness); bodies compared byte for byte with what the Java 5.3.3 broker
answered to the same requests (recorded; tests/compat/test_5x_basics.py compares live), files
read back from config/ and through a MetadataState made again on the same directory.
"""
import asyncio
import json

import orjson

from pybroker.broker import request_mode
from pybroker.broker.metadata import MetadataState
from pybroker.proc.metadata_service import HANDLERS
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.store import config_docs, paths
from tests.unit.broker import test_admin
from tests.unit.broker.test_admin import create_topic

C = RequestCode
JAVA_FIFO_TOPIC = (b'{"attributes":{"message.type":"FIFO"},"order":false,"perm":6,"readQueueNums"'
                   b':4,"topicFilterType":"SINGLE_TAG","topicName":"TFifo","topicSysFlag":0,'
                   b'"writeQueueNums":4}')
JAVA_NEW_GROUP = (b'{"attributes":{},"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable"'
                  b':true,"consumeFromMinEnable":true,"consumeMessageOrderly":false,'
                  b'"consumeTimeoutMinute":15,"groupName":"G1","groupRetryPolicy":{"type":'
                  b'"CUSTOMIZED"},"groupSysFlag":0,"notifyConsumerIdsChangedEnable":true,'
                  b'"retryMaxTimes":16,"retryQueueNums":1,"whichBrokerWhenConsumeSlowly":1}')


class Broker(test_admin.Broker):
    """test_admin's harness, calling every handler of the metadata service."""

    def call(self, code, ext_fields=None, body=None):
        request = create_request(code, ext_fields, body)
        return asyncio.run(HANDLERS[code](self.ctx, self.channel, request))


def answer(response):
    return response.code, response.remark


def test_topic_attributes_are_applied_persisted_and_answered(tmp_path):
    broker = Broker(tmp_path)
    try:
        assert create_topic(broker, "TFifo", attributes="+message.type=FIFO").code == 0
        found = broker.call(C.GET_TOPIC_CONFIG, {"topic": "TFifo", "lo": "true"})
        assert found.code == ResponseCode.SUCCESS and found.body == JAVA_FIFO_TOPIC
        # An update without attributes keeps them (Java applies an empty modification).
        assert create_topic(broker, "TFifo", read=8, write=8).code == 0
        assert broker.metadata.topic_config("TFifo").attributes == {"message.type": "FIFO"}
        assert answer(create_topic(broker, "TFifo", attributes="+queue.type=BatchCQ")) == (
            ResponseCode.SYSTEM_ERROR,
            "attempt to update an unchangeable attribute. key: queue.type")
        assert answer(create_topic(broker, "TNew", attributes="-message.type")) == (
            ResponseCode.SYSTEM_ERROR,
            "only add attribute is supported while creating topic. key: message.type")
        assert broker.metadata.topic_config("TNew") is None
        assert answer(create_topic(broker, "TMixed", attributes="+message.type=MIXED")) == (
            ResponseCode.INVALID_PARAMETER, "MIXED message type is not supported.")
        assert answer(broker.call(C.GET_TOPIC_CONFIG, {"topic": "Nope"})) == (
            ResponseCode.TOPIC_NOT_EXIST, "No topic in this broker. topic: Nope")
        stored = json.loads((tmp_path / "config" / "topics.json").read_text())
        assert stored["topicConfigTable"]["TFifo"]["attributes"] == {"message.type": "FIFO"}
        assert stored["topicConfigTable"]["TFifo"]["readQueueNums"] == 8
    finally:
        broker.store.shutdown()
    reloaded = MetadataState(broker.metadata.config)
    assert reloaded.topic_config("TFifo").attributes == {"message.type": "FIFO"}


def test_mixed_topics_when_enabled(tmp_path):
    broker = Broker(tmp_path, enableMixedMessageType="true")
    try:
        assert create_topic(broker, "TMixed", attributes="+message.type=MIXED").code == 0
        assert broker.metadata.topic_config("TMixed").attributes == {"message.type": "MIXED"}
    finally:
        broker.store.shutdown()


def test_subscription_group_config(tmp_path):
    broker = Broker(tmp_path)
    try:
        created = broker.call(C.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "G1"})
        assert created.code == ResponseCode.SUCCESS and created.body == JAVA_NEW_GROUP
        assert broker.metadata.groups.find("G1") is not None     # auto-created, as Java
        assert answer(broker.call(C.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "a b"})) == (
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "No group in this broker")
        policy = {"exponentialRetryPolicy": {"initial": 1000, "max": 10000, "multiplier": 2},
                  "type": "EXPONENTIAL"}
        body = orjson.dumps({"groupName": "GA", "consumeMessageOrderly": True,
                             "groupRetryPolicy": policy})
        assert broker.call(C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body).code == 0
        group = json.loads(broker.call(C.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "GA"}).body)
        assert (group["consumeMessageOrderly"], group["groupRetryPolicy"]) == (True, policy)
        refused = broker.call(C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps(
            {"groupName": "GB", "attributes": {"+foo": "1"}}))
        assert answer(refused) == (ResponseCode.SYSTEM_ERROR,
                                   "java.lang.RuntimeException: unsupported key: foo")
        assert broker.metadata.groups.find("GB") is None
    finally:
        broker.store.shutdown()
    broker = Broker(tmp_path, autoCreateSubscriptionGroup="false")
    try:
        assert answer(broker.call(C.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "G9"})) == (
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "No group in this broker")
    finally:
        broker.store.shutdown()


def set_mode(broker, **body):
    request_body = orjson.dumps(body) if body else b""
    return broker.call(C.SET_MESSAGE_REQUEST_MODE, body=request_body)


def test_message_request_modes(tmp_path):
    broker = Broker(tmp_path)
    try:
        assert create_topic(broker, "T").code == 0
        assert broker.call(C.GET_ALL_MESSAGE_REQUEST_MODE).body == b'{"messageRequestModeMap":{}}'
        assert set_mode(broker, topic="T", consumerGroup="GA", mode="POP",
                        popShareQueueNum=2).code == 0
        assert set_mode(broker, topic="T", consumerGroup="GB").code == 0   # Java's default PULL
        for body, expected in (
                ({"topic": "Nope", "consumerGroup": "GA", "mode": "POP"},
                 (ResponseCode.TOPIC_NOT_EXIST, "topic[Nope] not exist")),
                ({"topic": "%RETRY%GA", "consumerGroup": "GA", "mode": "POP"},
                 (ResponseCode.NO_PERMISSION, "retry topic is not allowed to set mode")),
                ({"topic": "T", "consumerGroup": "GA", "mode": "BOGUS"},
                 (ResponseCode.INVALID_PARAMETER, "mode 'BOGUS' is not PULL or POP")),
                ({"topic": "T"},
                 (ResponseCode.SYSTEM_ERROR, "SetMessageRequestModeRequestBody has no "
                                             "consumerGroup")),
                ({}, (ResponseCode.SYSTEM_ERROR, "SetMessageRequestModeRequestBody body is "
                                                 "empty"))):
            assert answer(set_mode(broker, **body)) == expected, body
        table = (b'{"messageRequestModeMap":{"T":{"GA":{"consumerGroup":"GA","mode":"POP",'
                 b'"popShareQueueNum":2,"topic":"T"},"GB":{"consumerGroup":"GB","mode":"PULL",'
                 b'"popShareQueueNum":0,"topic":"T"}}}}')
        assert broker.call(C.GET_ALL_MESSAGE_REQUEST_MODE).body == table
    finally:
        broker.store.shutdown()
    path = paths.config_path(str(tmp_path), paths.MESSAGE_REQUEST_MODE_CONFIG)
    reloaded = MetadataState(broker.metadata.config)
    assert orjson.dumps(reloaded.request_modes.to_json(), option=orjson.OPT_SORT_KEYS) == table
    # A slave takes its master's table: topics the master lacks go, the master's replace ours.
    master = config_docs.MessageRequestModeDocument.from_json(
        {"messageRequestModeMap": {"U": {"GC": {"topic": "U", "consumerGroup": "GC",
                                                "mode": "POP"}}}})
    assert reloaded.request_modes.replace_from_master(master)
    assert not reloaded.request_modes.replace_from_master(master)
    assert config_docs.load_message_request_modes(path).mode_table == master.mode_table
    assert set(request_mode.HANDLERS) == {C.SET_MESSAGE_REQUEST_MODE,
                                          C.GET_ALL_MESSAGE_REQUEST_MODE}
