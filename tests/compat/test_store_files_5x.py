"""A store with 5.x content moves between Java RocketMQ 5.3.3 and pybroker, both ways: message
format V2 records (a retry topic longer than 127 bytes), topic attributes in topics.json and
message request modes in messageRequestMode.json.

Method: a Java 5.3.3 broker gets a topic created with +message.type=FIFO, a request mode
(401), and a message sent back (CONSUMER_SEND_MSG_BACK, delay level 1) by a consumer group of
150 characters, which its schedule service re-puts to ``%RETRY%<group>`` as a V2 record; it is
stopped cleanly. pybroker opens a copy of that store (same file sizes) and serves the V2
record, the attributes and the mode; it then writes a V2 record of its own the same way and
stops. Java 5.3.3 opens a copy of that store and serves both records, the attributes and the
mode. Raw remoting requests throughout (tests/ha_support.py); records are decoded with
pybroker's codec and their magic checked.
"""
import json
import pathlib

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.store import layout
from tests import peers
from tests.compat.test_store_files import FILE_SIZES, _copy_store, _start_java
from tests.ha_support import client_for, pull, records_of, send, wait_for

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(600)]

TOPIC = "Store5xSource"
FIFO_TOPIC = "Store5xFifo"
GROUP = "g" * 150
RETRY_TOPIC = "%RETRY%" + GROUP
TIMEOUT_MS = 5000


def _call(client, code: int, ext: dict | None = None, body: bytes | None = None):
    return client.invoke(create_request(code, dict(ext or {}), body), TIMEOUT_MS)


def _retried(client, body: bytes, key: str) -> None:
    """Send ``body`` to TOPIC and send it back for GROUP (delay level 1)."""
    sent = send(client, TOPIC, body, 0, key)
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    offset = int(sent.ext_fields["queueOffset"])
    wait_for(lambda: len(records_of(pull(client, TOPIC, 0, offset).body)) > 0, 20,
             "the message dispatched")
    (original,) = records_of(pull(client, TOPIC, 0, offset, max_nums=1).body)
    back = _call(client, RequestCode.CONSUMER_SEND_MSG_BACK, {
        "offset": str(original.physical_offset), "group": GROUP, "delayLevel": "1",
        "originMsgId": sent.ext_fields["msgId"], "originTopic": TOPIC, "unitMode": "false",
        "maxReconsumeTimes": "16"})
    assert back.code == ResponseCode.SUCCESS, back.remark


def _retry_bodies(client) -> list[bytes]:
    """The bodies of the retry queue; every record must be V2 with the long topic."""
    answer = pull(client, RETRY_TOPIC, 0, 0, group=GROUP)
    if answer.code != ResponseCode.SUCCESS:
        return []
    found = records_of(answer.body)
    assert {(record.magic, record.topic) for record in found} == \
        {(layout.MESSAGE_MAGIC_CODE_V2, RETRY_TOPIC)}
    return [bytes(record.body) for record in found]


def _check_metadata(client) -> None:
    config = _call(client, RequestCode.GET_TOPIC_CONFIG, {"topic": FIFO_TOPIC})
    assert config.code == ResponseCode.SUCCESS, config.remark
    assert json.loads(config.body)["attributes"] == {"message.type": "FIFO"}
    modes = json.loads(_call(client, RequestCode.GET_ALL_MESSAGE_REQUEST_MODE).body)
    assert modes["messageRequestModeMap"][FIFO_TOPIC][GROUP]["mode"] == "POP"


def test_5x_content_moves_between_java_and_pybroker(tmp_path):
    install = peers.java_install("5.3.3")
    java = _start_java(install, tmp_path / "java")
    try:
        with client_for(java.broker_addr) as client:
            created = _call(client, RequestCode.UPDATE_AND_CREATE_TOPIC, {
                "topic": FIFO_TOPIC, "defaultTopic": "TBW102", "readQueueNums": "2",
                "writeQueueNums": "2", "perm": "6", "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": "0", "order": "false", "attributes": "+message.type=FIFO"})
            assert created.code == ResponseCode.SUCCESS, created.remark
            mode = _call(client, RequestCode.SET_MESSAGE_REQUEST_MODE, None, json.dumps(
                {"topic": FIFO_TOPIC, "consumerGroup": GROUP, "mode": "POP"}).encode())
            assert mode.code == ResponseCode.SUCCESS, mode.remark
            _retried(client, b"written by java", "java-key")
            wait_for(lambda: _retry_bodies(client) == [b"written by java"], 30,
                     "Java's re-put to the retry topic")
    finally:
        java.stop()
    _copy_store(java.store_dir, tmp_path / "py" / "store")
    broker = StandaloneBroker(tmp_path / "py", FILE_SIZES)
    with broker, client_for(broker.broker_addr) as client:
        assert _retry_bodies(client) == [b"written by java"]
        _check_metadata(client)
        _retried(client, b"written by pybroker", "py-key")
        wait_for(lambda: len(_retry_bodies(client)) == 2, 30, "pybroker's re-put")
    assert broker.process.returncode == 0
    again = _start_java(install, tmp_path / "java_again", pathlib.Path(broker.store_dir))
    try:
        with client_for(again.broker_addr) as client:
            assert _retry_bodies(client) == [b"written by java", b"written by pybroker"]
            _check_metadata(client)
    finally:
        again.stop()
