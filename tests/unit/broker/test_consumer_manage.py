"""Consumer offset and lock handlers answer as the Java broker does (protocol.md §2.6, §2.9).

Method: handlers called directly with decoded commands (the Java 4.9.8 client's own
UPDATE/QUERY_CONSUMER_OFFSET frames from tests/golden, hand-built lock bodies) against a real
MetadataState and a real MessageStore in tmp_path; the queue's min offset is moved past 0 the
way CommitLog deletion moves it (ConsumeQueue.correct_min_offset); lock leases use an
injected clock.
"""
import asyncio
import json
import os

from pybroker._fast import record as record_codec
from pybroker.broker.channel import Channel
from pybroker.broker.consumer_manage import HANDLERS
from pybroker.broker.context import MetadataContext, StoreTopicDeleter
from pybroker.broker.metadata import MetadataState
from pybroker.config import load_broker_config
from pybroker.protocol import bodies
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request, decode
from pybroker.store.message_store import MessageStore
from pybroker.store.settings import StoreConfig
from pybroker.store.status import PutStatus

GOLDEN = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "golden", "java-4.9.8")
HOST = bytes([127, 0, 0, 1])


def golden_frames(name: str):
    frames = []
    with open(os.path.join(GOLDEN, name + ".jsonl")) as file:
        for line in file:
            data = bytes.fromhex(json.loads(line)["hex"])
            frames.append(decode(data, 0, len(data), copy_body=True))
    return frames


class Broker:
    """A context over a real store and metadata in one directory; close() shuts both."""

    def __init__(self, tmp_path):
        self.clock = [1_700_000_000_000]
        config = load_broker_config(overrides={
            "brokerName": "broker-a", "brokerIP1": "127.0.0.1", "brokerIP2": "127.0.0.1",
            "storePathRootDir": str(tmp_path), "namesrvAddr": "127.0.0.1:9876"})
        self.store = MessageStore(StoreConfig(
            store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=64 * 1024,
            mapped_file_size_consume_queue=64 * 20, max_hash_slot_num=64, max_index_num=512))
        self.store.start()
        metadata = MetadataState(config, now_ms=lambda: self.clock[0])
        self.ctx = MetadataContext(config, self.store, None, metadata, (HOST, 10911),
                                   now_ms=lambda: self.clock[0],
                                   topic_deleter=StoreTopicDeleter(self.store))
        self.channel = Channel("0:1", "192.0.2.2:40000", 0, 409, lambda command: None)

    def call(self, request):
        return asyncio.run(HANDLERS[request.code](self.ctx, self.channel, request))

    def put(self, topic: str, queue_id: int, count: int) -> list[int]:
        physical_offsets = []
        for index in range(count):
            body = b"message %d" % index
            size = record_codec.encoded_size(len(body), len(topic), 0, 0)
            buffer = bytearray(size)
            record_codec.encode_into(buffer, 0, topic.encode(), queue_id, 0, body, b"", 0,
                                     1_700_000_000_000, HOST, 4242, HOST, 10911)
            result = self.store.put_messages(buffer, topic, queue_id, 1, 0)
            assert result.status is PutStatus.PUT_OK
            physical_offsets.append(result.physical_offset)
        return physical_offsets

    def close(self):
        self.store.shutdown()


def query(group: str, topic: str, queue_id: int, **extra):
    fields = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), **extra}
    return create_request(RequestCode.QUERY_CONSUMER_OFFSET, fields)


def test_java_update_then_query_frames_answer_like_java(tmp_path):
    broker = Broker(tmp_path)
    try:
        update, java_update_response = golden_frames("update_consumer_offset")
        query_request, java_query_response = golden_frames("query_consumer_offset")
        response = broker.call(update)
        assert (response.code, response.ext_fields) == (java_update_response.code, {})
        response = broker.call(query_request)
        assert response.code == java_query_response.code == ResponseCode.SUCCESS
        assert response.ext_fields == java_query_response.ext_fields == {"offset": "8"}
    finally:
        broker.close()


def test_update_answers_unless_flagged_oneway(tmp_path):
    broker = Broker(tmp_path)
    try:
        fields = {"consumerGroup": "G", "topic": "T", "queueId": "1", "commitOffset": "5"}
        oneway = create_request(RequestCode.UPDATE_CONSUMER_OFFSET, dict(fields), oneway=True)
        assert broker.call(oneway) is None
        assert broker.ctx.metadata.offsets.query("G", "T", 1) == 5
        fields["commitOffset"] = "6"   # Go: "oneway" without the flag, answered
        go_style = create_request(RequestCode.UPDATE_CONSUMER_OFFSET, fields)
        assert broker.call(go_style).code == ResponseCode.SUCCESS
        assert broker.ctx.metadata.offsets.query("G", "T", 1) == 6
        assert broker.ctx.metadata.offsets.dirty
    finally:
        broker.close()


def test_query_without_committed_offset(tmp_path):
    broker = Broker(tmp_path)
    try:
        response = broker.call(query("G", "Unknown", 0))
        assert (response.code, response.ext_fields) == (ResponseCode.SUCCESS, {"offset": "0"})
        physical_offsets = broker.put("Kept", 0, 3)
        response = broker.call(query("G", "Kept", 0))
        assert (response.code, response.ext_fields) == (ResponseCode.SUCCESS, {"offset": "0"})
        refused = broker.call(query("G", "Kept", 0, setZeroIfNotFound="false"))
        assert refused.code == ResponseCode.QUERY_NOT_FOUND
        # The first two records are gone (as after CommitLog deletion): min offset 2.
        queue = broker.store.consume_queue_store.find("Kept", 0)
        queue.correct_min_offset(physical_offsets[2])
        assert broker.store.get_min_offset_in_queue("Kept", 0) == 2
        response = broker.call(query("G", "Kept", 0))
        assert response.code == ResponseCode.QUERY_NOT_FOUND
        assert response.remark == "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot " \
                                  "first"
        broker.ctx.metadata.offsets.commit("G", "Kept", 0, 2)
        assert broker.call(query("G", "Kept", 0)).ext_fields == {"offset": "2"}
    finally:
        broker.close()


def lock_request(code, client_id, queue_ids, oneway=False, group="G", **extra):
    body = bodies.encode_lock_batch_request(bodies.LockBatchRequest(
        group, client_id, [bodies.MessageQueue("T", "broker-a", q) for q in queue_ids],
        **extra))
    return create_request(code, body=body, oneway=oneway)


def locked_ids(response) -> list[int]:
    assert response.code == ResponseCode.SUCCESS
    return sorted(q.queue_id for q in bodies.decode_lock_batch_response(response.body))


def test_lock_and_unlock_batches(tmp_path):
    broker = Broker(tmp_path)
    try:
        lock, unlock = RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ
        assert locked_ids(broker.call(lock_request(lock, "c1", [0, 1]))) == [0, 1]
        assert locked_ids(broker.call(lock_request(lock, "c2", [0, 1, 2],
                                                   only_this_broker=True))) == [2]
        assert broker.call(lock_request(unlock, "c1", [0], oneway=True)) is None
        assert locked_ids(broker.call(lock_request(lock, "c2", [0]))) == [0]
        assert broker.call(lock_request(unlock, "c2", [0])).code == ResponseCode.SUCCESS
        broker.clock[0] += 60_001
        assert locked_ids(broker.call(lock_request(lock, "c2", [1]))) == [1]   # c1 expired
    finally:
        broker.close()


def test_bad_lock_bodies_are_answered_with_system_error(tmp_path):
    broker = Broker(tmp_path)
    try:
        for body in (None, b"", b"{", b'{"consumerGroup":"G"}', b'{"consumerGroup":"G",'
                     b'"clientId":"c","mqSet":[{"topic":"T"}]}'):
            for code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
                response = broker.call(create_request(code, body=body))
                assert response.code == ResponseCode.SYSTEM_ERROR and response.remark
            oneway = create_request(RequestCode.UNLOCK_BATCH_MQ, body=body, oneway=True)
            assert broker.call(oneway) is None
    finally:
        broker.close()
