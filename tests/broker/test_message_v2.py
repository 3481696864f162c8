"""Message format V2 records (a retry topic longer than 127 bytes, which Java 5.x stores with
magic V2 and a 2-byte topic length) go through every path that reads records.

Method: a pybroker master and slave (pybroker/_testbase/ha_cluster.py, real processes, 1 MiB
CommitLog files) and raw remoting requests (tests/ha_support.py). A consumer group of 150
characters sends a message back (CONSUMER_SEND_MSG_BACK, delay level 1): the schedule service
re-puts it after 1 s to ``%RETRY%<group>`` (157 bytes), which must be written as V2. The record
is then read by the master's dispatcher (consume queue, index), a pull and a query by key,
replicated byte for byte to the slave and served there, and found again after kill -9 of the
master (abnormal recovery). What Java refuses is refused alike: a producer's send to that
topic, and the group's dead-letter topic past 127 bytes.
"""
import pytest

from pybroker._testbase.ha_cluster import HACluster
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.store import layout
from tests.ha_support import (assert_commitlogs_identical, client_for, position, pull,
                              records_of, send, wait_for, wait_topic_synced)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "V2Topic"
GROUP = "g" * 150
RETRY_TOPIC = "%RETRY%" + GROUP
FILE_SIZE = 1024 * 1024
TIMEOUT_MS = 5000


def _send_back(client, physical_offset: int, message_id: str, delay_level: int):
    ext = {"offset": str(physical_offset), "group": GROUP, "delayLevel": str(delay_level),
           "originMsgId": message_id, "originTopic": TOPIC, "unitMode": "false",
           "maxReconsumeTimes": "16"}
    return client.invoke(create_request(RequestCode.CONSUMER_SEND_MSG_BACK, ext), TIMEOUT_MS)


def _retry_record(client):
    answer = pull(client, RETRY_TOPIC, 0, 0, group=GROUP)
    if answer.code != ResponseCode.SUCCESS:
        return None
    (found,) = records_of(answer.body)
    return found


def _check(found) -> None:
    assert found is not None
    assert found.magic == layout.MESSAGE_MAGIC_CODE_V2
    assert (found.topic, bytes(found.body)) == (RETRY_TOPIC, b"long group")
    assert "RETRY_TOPIC\x01" + TOPIC in found.properties


def _found_by_key(client) -> bool:
    """The index finds the record by its key (KEYS and UNIQ_KEY are the same: two entries)."""
    ext = {"topic": RETRY_TOPIC, "key": "v2-key", "maxNum": "32", "beginTimestamp": "0",
           "endTimestamp": str(1 << 62)}
    answer = client.invoke(create_request(RequestCode.QUERY_MESSAGE, ext), TIMEOUT_MS)
    found = records_of(answer.body) if answer.code == ResponseCode.SUCCESS else []
    return bool(found) and all(message.topic == RETRY_TOPIC for message in found)


def test_retry_topic_past_127_bytes_is_a_v2_record_everywhere(tmp_path):
    with HACluster(tmp_path) as cluster:
        master, slave = cluster.masters[0], cluster.slaves[0][0]
        with client_for(master.address) as client:
            sent = send(client, TOPIC, b"long group", 0, "v2-key")
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            wait_for(lambda: pull(client, TOPIC, 0, 0).code == ResponseCode.SUCCESS, 10,
                     "the message dispatched")
            (original,) = records_of(pull(client, TOPIC, 0, 0).body)
            back = _send_back(client, original.physical_offset, sent.ext_fields["msgId"], 1)
            assert back.code == ResponseCode.SUCCESS, back.remark
            wait_for(lambda: _retry_record(client) is not None, 20, "the retry re-put")
            _check(_retry_record(client))
            assert _found_by_key(client)
            # Java's msgCheck allows 127 bytes to a producer, retry topics included ...
            direct = send(client, RETRY_TOPIC, b"direct", 0, "direct")
            assert direct.code == ResponseCode.SYSTEM_ERROR
            assert direct.remark.endswith("is longer than topic max length: 127")
            # ... and its store refuses any other topic past 127 bytes (here the DLQ).
            dead = _send_back(client, original.physical_offset, sent.ext_fields["msgId"], -1)
            assert (dead.code, dead.remark) == (ResponseCode.SYSTEM_ERROR, "MESSAGE_ILLEGAL")
        end = position(master.store_dir, "written_position")
        wait_for(lambda: position(slave.store_dir, "written_position") == end, 30,
                 "the slave's copy")
        assert_commitlogs_identical(master.commitlog_dir, slave.commitlog_dir, end, FILE_SIZE)
        with client_for(slave.address) as client:
            wait_topic_synced(client, RETRY_TOPIC)
            _check(_retry_record(client))
        master.kill()
        master.start()
        with client_for(master.address) as client:
            _check(_retry_record(client))
            assert _found_by_key(client)
