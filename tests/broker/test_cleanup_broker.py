"""Expired-file cleanup, disk-full refusal and topic deletion work in the multi-process broker.

Method: a real `pybroker standalone` broker with tiny CommitLog and ConsumeQueue files,
fileReservedTime=0 and every hour in deleteWhen (so every file but the last expires at once)
and cleanResourceInterval=300 ms; messages are sent and pulled over real sockets with the raw
remoting client, and the store directory is inspected on disk. A reader in the test process
holds a record of the first CommitLog file while the broker deletes it. A second broker gets a
diskSpaceWarningLevelRatio below the real usage of the disk, so its cleanup marks the disk
full and puts must be refused with SERVICE_NOT_AVAILABLE.
"""
import os
import time

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.protocol.message_id import decode_offset_message_id
from pybroker.remoting.client import SyncRemotingClient
from pybroker.store.cleanup import disk_partition_used_ratio
from pybroker.store.settings import StoreConfig
from pybroker.store.read_only_store import MessageStoreReader

pytestmark = [pytest.mark.slow]
TIMEOUT_MS = 10_000
COMMITLOG_FILE_BYTES = 64 * 1024
CQ_UNITS_PER_FILE = 40
BODY_BYTES = 3000
CLEANUP_OVERRIDES = {
    "mappedFileSizeCommitLog": str(COMMITLOG_FILE_BYTES),
    "mappedFileSizeConsumeQueue": str(CQ_UNITS_PER_FILE * 20),
    "maxMessageSize": "16384",
    "fileReservedTime": "0",
    "deleteWhen": ";".join(f"{hour:02d}" for hour in range(24)),
    "cleanResourceInterval": "300",
    "remotingWorkers": "1",
}


def _send(client, topic, body: bytes, queue_id=0):
    properties = props.encode_properties({"TAGS": "TagA", "WAIT": "true"})
    ext = {"a": "cleanup_producer_group", "b": topic, "c": "TBW102", "d": "1",
           "e": str(queue_id), "f": "0", "g": str(int(time.time() * 1000)), "h": "0",
           "i": properties, "j": "0", "k": "false", "m": "false"}
    return client.invoke(create_request(RequestCode.SEND_MESSAGE_V2, ext, body), TIMEOUT_MS)


def _pull(client, topic, queue_offset, queue_id=0):
    ext = {"consumerGroup": "cleanup_group", "topic": topic, "queueId": str(queue_id),
           "queueOffset": str(queue_offset), "maxMsgNums": "4", "sysFlag": "4",
           "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
           "subVersion": "0", "expressionType": "TAG"}
    return client.invoke(create_request(RequestCode.PULL_MESSAGE, ext), TIMEOUT_MS)


def _min_offset(client, topic, queue_id=0) -> int:
    response = client.invoke(create_request(RequestCode.GET_MIN_OFFSET,
                                            {"topic": topic, "queueId": str(queue_id)}),
                             TIMEOUT_MS)
    assert response.code == ResponseCode.SUCCESS, response.remark
    return int(response.ext_fields["offset"])


def _files(directory) -> list[str]:
    try:
        return sorted(name for name in os.listdir(directory) if name.isdigit())
    except FileNotFoundError:
        return []


def _wait_for(predicate, timeout_s=15.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with StandaloneBroker(tmp_path_factory.mktemp("cleanup"), CLEANUP_OVERRIDES) as running:
        yield running


@pytest.fixture
def client(broker):
    with SyncRemotingClient() as connected:
        connected.connect(broker.broker_addr)
        yield connected


def test_expired_files_deleted_while_serving(broker, client):
    topic = "CleanupTopic"
    commitlog_dir = os.path.join(broker.store_dir, "commitlog")
    queue_dir = os.path.join(broker.store_dir, "consumequeue", topic, "0")
    first = _send(client, topic, b"first-" + bytes(BODY_BYTES))
    assert first.code == ResponseCode.SUCCESS, first.remark
    # A reader in another process maps the first CommitLog file and holds a record of it.
    reader = MessageStoreReader(_reader_settings(broker), 1 << 40)
    physical_offset = decode_offset_message_id(first.ext_fields["msgId"])[2]
    reader.commitlog.refresh()
    held = reader.commitlog.read_record(physical_offset)
    assert held is not None and bytes(held.body).startswith(b"first-")
    try:
        sent = [first]
        for index in range(1, 3 * CQ_UNITS_PER_FILE):
            response = _send(client, topic, b"m%05d-" % index + bytes(BODY_BYTES))
            assert response.code == ResponseCode.SUCCESS, response.remark
            sent.append(response)
        assert _wait_for(lambda: "0" * 20 not in _files(commitlog_dir)), _files(commitlog_dir)
        assert _wait_for(lambda: "0" * 20 not in _files(queue_dir)), _files(queue_dir)
        # The unlinked file's bytes stay readable through the held map (no SIGBUS).
        assert bytes(held.body).startswith(b"first-")
    finally:
        reader.commitlog.release_record(held)
        reader.close()
    assert broker.process.poll() is None
    minimum = _min_offset(client, topic)
    assert 0 < minimum < len(sent)
    moved = _pull(client, topic, 0)
    assert moved.code == ResponseCode.PULL_OFFSET_MOVED, moved.remark
    assert int(moved.ext_fields["nextBeginOffset"]) == minimum
    found = _pull(client, topic, minimum)
    assert found.code == ResponseCode.SUCCESS, found.remark
    assert found.body.find(b"m%05d-" % minimum) >= 0


def _reader_settings(broker):
    return StoreConfig(store_path_root_dir=broker.store_dir,
                       mapped_file_size_commit_log=COMMITLOG_FILE_BYTES,
                       mapped_file_size_consume_queue=CQ_UNITS_PER_FILE * 20,
                       message_index_enable=False)


def test_delete_topic_removes_queue_files_and_restarts_offsets(broker, client):
    topic = "DeletedTopic"
    topic_dir = os.path.join(broker.store_dir, "consumequeue", topic)
    for index in range(5):
        response = _send(client, topic, b"old-%d" % index)
        assert response.code == ResponseCode.SUCCESS, response.remark
        assert int(response.ext_fields["queueOffset"]) == index
    broker.wait_max_offset(topic, 0, 5)     # all five dispatched before the deletion
    assert _files(os.path.join(topic_dir, "0"))
    deleted = client.invoke(create_request(RequestCode.DELETE_TOPIC_IN_BROKER,
                                           {"topic": topic}), TIMEOUT_MS)
    assert deleted.code == ResponseCode.SUCCESS, deleted.remark
    assert not os.path.exists(topic_dir)
    again = _send(client, topic, b"new-0")
    assert again.code == ResponseCode.SUCCESS, again.remark
    assert int(again.ext_fields["queueOffset"]) == 0
    broker.wait_max_offset(topic, 0, 1)
    assert _min_offset(client, topic) == 0
    # A send is answered once appended; a pull serves what the dispatcher has dispatched since.
    pulls = []

    def pulled() -> bool:
        pulls.append(_pull(client, topic, 0))
        return pulls[-1].code == ResponseCode.SUCCESS
    assert _wait_for(pulled), pulls[-1].remark
    assert b"new-0" in pulls[-1].body and b"old-" not in pulls[-1].body


def test_disk_full_refuses_puts(tmp_path):
    used_percent = int(disk_partition_used_ratio(str(tmp_path)) * 100)
    if used_percent < 3:
        pytest.skip(f"disk only {used_percent}% used: cannot go above a warning ratio")
    overrides = dict(CLEANUP_OVERRIDES, diskSpaceWarningLevelRatio=str(used_percent - 2),
                     deleteWhen="04", fileReservedTime="72")
    with StandaloneBroker(tmp_path, overrides) as full_broker, SyncRemotingClient() as sender:
        sender.connect(full_broker.broker_addr)
        codes = []

        def refused() -> bool:
            codes.append(_send(sender, "FullTopic", b"x").code)
            return codes[-1] == ResponseCode.SERVICE_NOT_AVAILABLE
        assert _wait_for(refused), codes
        assert "disk" in full_broker._log_text()
