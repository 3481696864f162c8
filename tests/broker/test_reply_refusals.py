"""SEND_REPLY_MESSAGE_V2 without a live requester answers as Java's ReplyMessageProcessor.

Method: a real `pybroker standalone`; raw SEND_REPLY_MESSAGE_V2 frames over 127.0.0.1
(SyncRemotingClient) to the cluster's reply topic: without REPLY_TO_CLIENT, and naming a client
id no producer heartbeats with. Both get SYSTEM_ERROR with Java's remark, and the reply is
stored all the same (Java stores before it answers; storeReplyMessageEnable's default), which
a pull of the reply topic shows. The successful push is covered with the Java client in
tests/compat/test_java_features.py.
"""
import time

import pytest

from pybroker._fast import record
from pybroker._testbase.cluster import StandaloneBroker
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.remoting.client import SyncRemotingClient

pytestmark = [pytest.mark.slow]
TIMEOUT_MS = 10_000
REPLY_TOPIC = "DefaultCluster_REPLY_TOPIC"


def _reply(client, properties: dict[str, str], body: bytes):
    ext = {"a": "replier_group", "b": REPLY_TOPIC, "c": "TBW102", "d": "4", "e": "0",
           "f": "0", "g": "1700000000000", "h": "0", "i": props.encode_properties(properties),
           "j": "0", "k": "false", "m": "false"}
    return client.invoke(create_request(RequestCode.SEND_REPLY_MESSAGE_V2, ext, body),
                         TIMEOUT_MS)


def _stored_bodies(client) -> set[bytes]:
    ext = {"consumerGroup": "reply_reader", "topic": REPLY_TOPIC, "queueId": "0",
           "queueOffset": "0", "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
           "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0",
           "expressionType": "TAG"}
    response = client.invoke(create_request(RequestCode.PULL_MESSAGE, ext), TIMEOUT_MS)
    if response.code != ResponseCode.SUCCESS:
        return set()
    data, position, found = bytes(response.body), 0, set()
    while position < len(data):
        message = record.decode(data, position)
        found.add(bytes(message.body))
        position += message.total_size
    return found


def test_replies_without_a_live_requester(tmp_path):
    with StandaloneBroker(tmp_path) as broker, SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        answer = _reply(client, {"CORRELATION_ID": "c1"}, b"no-reply-to")
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark == "reply message properties[REPLY_TO_CLIENT] is null"
        answer = _reply(client, {"CORRELATION_ID": "c2", "REPLY_TO_CLIENT": "10.0.0.9@1#2"},
                        b"nobody-listens")
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark == "push reply message fail, channel of <10.0.0.9@1#2> not found."
        deadline = time.monotonic() + 20
        while _stored_bodies(client) != {b"no-reply-to", b"nobody-listens"}:
            assert time.monotonic() < deadline, _stored_bodies(client)
            time.sleep(0.05)
