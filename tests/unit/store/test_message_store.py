"""MessageStore serves every put back by pull, key and id, and recovers from crashes and deletions.

Method: real stores in tmp_path with 64 KiB CommitLog files and small consume-queue/index files,
records encoded with pybroker._fast.record; every protocol.md §2.3 pull status is provoked on a real
store and mapped through status.pull_response; crashes are real child processes that exit without
shutdown (abort file left behind) before the parent reopens the store.
"""
import dataclasses
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from pybroker._fast import record as record_codec
from pybroker._fast.jhash import tags_code
from pybroker.protocol.codes import ResponseCode
from pybroker.protocol.message_id import decode_offset_message_id
from pybroker.protocol.properties import encode_properties
from pybroker.store import lock_file, paths
from pybroker.store.message_store import MessageStore
from pybroker.store.settings import StoreConfig
from pybroker.store.status import GetStatus, PutStatus, pull_response

HOST = bytes([127, 0, 0, 1])
STORE_PORT = 10911
TOPIC = "TopicTest"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def encode(body: bytes, topic: str = TOPIC, queue_id: int = 0, sys_flag: int = 0,
           **properties) -> bytearray:
    encoded = encode_properties(properties).encode()
    size = record_codec.encoded_size(len(body), len(topic.encode()), len(encoded), sys_flag)
    buffer = bytearray(size)
    record_codec.encode_into(buffer, 0, topic.encode(), queue_id, 0, body, encoded, sys_flag,
                             1_700_000_000_000, HOST, 4242, HOST, STORE_PORT)
    return buffer


def make_settings(tmp_path, **overrides) -> StoreConfig:
    values = dict(store_path_root_dir=str(tmp_path / "store"),
                  mapped_file_size_commit_log=64 * 1024,
                  mapped_file_size_consume_queue=64 * 20, max_hash_slot_num=64,
                  max_index_num=512)
    values.update(overrides)
    return StoreConfig(**values)


def bodies(result) -> list[bytes]:
    return [bytes(record_codec.decode(buffer, 0).body) for buffer in result.buffers]


def body_of(index: int, rand_size: int = 0) -> bytes:
    return (b"%06d|" % index) * (1 + rand_size)


def put(store, index, topic=TOPIC, queue_id=0, **properties):
    result = store.put_messages(encode(body_of(index), topic, queue_id, **properties), topic,
                                queue_id, 1, 0)
    assert result.status is PutStatus.PUT_OK
    return result


def test_store_of_several_commitlog_files_reads_back_in_full(tmp_path, rand):
    sizes = [rand.randrange(0, 150) for _ in range(900)]
    with MessageStore(make_settings(tmp_path)) as store:
        offsets = []
        for index, size in enumerate(sizes):
            result = store.put_messages(encode(body_of(index, size)), TOPIC, 0, 1, 0)
            assert result.status is PutStatus.PUT_OK and result.queue_offset == index
            _, port, physical_offset = decode_offset_message_id(result.message_id)
            assert (port, physical_offset) == (STORE_PORT, result.physical_offset)
            offsets.append(physical_offset)
        assert len(store.commitlog.mapped_file_queue.mapped_files) >= 4
        read, queue_offset = [], 0
        while True:
            result = store.get_messages("g", TOPIC, 0, queue_offset, 32)
            if result.status is not GetStatus.FOUND:
                assert result.status is GetStatus.OFFSET_OVERFLOW_ONE
                break
            assert result.message_count <= 32
            read.extend(bodies(result))
            result.release()
            queue_offset = result.next_begin_offset
        assert read == [body_of(index, size) for index, size in enumerate(sizes)]
        selected = store.look_message_by_offset(offsets[500])
        assert bytes(record_codec.decode(selected.buffer, 0).body) == body_of(500, sizes[500])
        selected.release()


def test_batch_gets_consecutive_queue_offsets_and_joined_ids(tmp_path):
    with MessageStore(make_settings(tmp_path)) as store:
        put(store, 0)
        run = b"".join(encode(body_of(index)) for index in range(1, 6))
        result = store.put_messages(run, TOPIC, 0, 5, 0)
        assert (result.status, result.queue_offset, result.count) == (PutStatus.PUT_OK, 1, 5)
        ids = result.message_id.split(",")
        assert len(ids) == 5
        for index, message_id in enumerate(ids, start=1):
            with store.view_message_by_id(message_id) as selected:
                decoded = record_codec.decode(selected.buffer, 0)
                assert decoded.queue_offset == index
                assert bytes(decoded.body) == body_of(index)
        assert store.get_max_offset_in_queue(TOPIC, 0) == 6


def code_of(result, request_offset):
    return pull_response(result.status, request_offset)[0]


def test_status_empty_unknown_overflow_cases(tmp_path):
    with MessageStore(make_settings(tmp_path)) as store:
        for offset, code in ((0, ResponseCode.PULL_NOT_FOUND),
                             (7, ResponseCode.PULL_OFFSET_MOVED)):
            result = store.get_messages("g", "Unknown", 0, offset, 32)
            assert result.next_begin_offset == 0 and code_of(result, offset) == code
        for index in range(10):
            put(store, index)
        at_max = store.get_messages("g", TOPIC, 0, 10, 32)
        assert (at_max.status, at_max.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 10)
        assert code_of(at_max, 10) == ResponseCode.PULL_NOT_FOUND
        beyond = store.get_messages("g", TOPIC, 0, 25, 32)
        assert (beyond.status, beyond.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 10)
        assert code_of(beyond, 25) == ResponseCode.PULL_OFFSET_MOVED
        assert (beyond.min_offset, beyond.max_offset) == (0, 10)
        found = store.get_messages("g", TOPIC, 0, 3, 4)
        assert (found.status, found.next_begin_offset, found.message_count) == \
            (GetStatus.FOUND, 7, 4)
        assert code_of(found, 3) == ResponseCode.SUCCESS
        assert bodies(found) == [body_of(index) for index in range(3, 7)]
        found.release()


def fill_files(store, count_files: int) -> int:
    """Put 100-byte-ish records until the CommitLog has ``count_files`` files; returns count."""
    index = 0
    while len(store.commitlog.mapped_file_queue.mapped_files) < count_files:
        put(store, index)
        index += 1
    return index


def test_offset_too_small_after_cleanup_and_cq_file_missing(tmp_path):
    settings = make_settings(tmp_path, delete_when="99", file_reserved_time=1)
    store = MessageStore(settings, disk_used_ratio=lambda path: 0.86)
    with store:
        total = fill_files(store, 2)
        for index in range(total, total + 300):
            put(store, index)
        total += 300
        report = store.clean_expired_files()     # disk above 85 %: delete regardless of age
        assert report.clean_immediately and report.commitlog_files_deleted == 1
        min_offset = store.get_min_offset_in_queue(TOPIC, 0)
        assert 0 < min_offset < total
        small = store.get_messages("g", TOPIC, 0, 0, 32)
        assert (small.status, small.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, min_offset)
        assert code_of(small, 0) == ResponseCode.PULL_OFFSET_MOVED
        # A consume-queue file vanishing under a valid offset: continue in the next file.
        queue = store.consume_queue_store.find(TOPIC, 0)
        units_per_file = 64
        files = queue.mapped_file_queue.mapped_files
        victim = next(f for f in files if f.file_from_offset // 20 >= min_offset + 1)
        files.remove(victim)
        victim.destroy(0)
        offset = victim.file_from_offset // 20 + 5
        missing = store.get_messages("g", TOPIC, 0, offset, 32)
        assert missing.status is GetStatus.OFFSET_FOUND_NULL
        assert missing.next_begin_offset == victim.file_from_offset // 20 + units_per_file
        assert code_of(missing, offset) == ResponseCode.PULL_NOT_FOUND


def test_commitlog_being_deleted_answers_retry_immediately(tmp_path):
    with MessageStore(make_settings(tmp_path)) as store:
        fill_files(store, 2)
        first = store.commitlog.mapped_file_queue.mapped_files.pop(0)
        assert first.destroy(0)
        result = store.get_messages("g", TOPIC, 0, 0, 32)
        # Units 0..63 (one consume-queue file) all point into the deleted file.
        assert (result.status, result.next_begin_offset) == (GetStatus.MESSAGE_WAS_REMOVING, 64)
        assert code_of(result, 0) == ResponseCode.PULL_RETRY_IMMEDIATELY


def test_tag_filter_found_and_all_filtered(tmp_path):
    with MessageStore(make_settings(tmp_path)) as store:
        for index in range(40):
            put(store, index, TAGS="TagA" if index % 10 == 9 else "TagB")
        put(store, 40)    # no tag: tags code 0
        wanted = {tags_code("TagA")}
        found = store.get_messages("g", TOPIC, 0, 0, 32, tag_codes=wanted)
        assert found.status is GetStatus.FOUND
        assert bodies(found) == [body_of(index) for index in (9, 19, 29, 39)]
        assert found.next_begin_offset == 41
        found.release()
        none = store.get_messages("g", TOPIC, 0, 0, 32, tag_codes={tags_code("TagC")})
        assert (none.status, none.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 41)
        assert code_of(none, 0) == ResponseCode.PULL_RETRY_IMMEDIATELY
        two = store.get_messages("g", TOPIC, 0, 0, 2, tag_codes=wanted)
        # Java checks "batch full" before the filter: the unit after the second match stops it.
        assert bodies(two) == [body_of(9), body_of(19)] and two.next_begin_offset == 20
        two.release()


def test_transfer_limits_in_memory_and_in_disk(tmp_path):
    record_size = len(encode(body_of(0)))
    settings = make_settings(tmp_path, max_transfer_bytes_on_message_in_memory=record_size * 5)
    with MessageStore(settings) as store:
        for index in range(100):
            put(store, index)
        by_bytes = store.get_messages("g", TOPIC, 0, 0, 32)
        assert (by_bytes.message_count, by_bytes.next_begin_offset) == (5, 5)
        by_bytes.release()
        store.settings = dataclasses.replace(store.settings,
                                             max_transfer_bytes_on_message_in_memory=1 << 20)
        by_count = store.get_messages("g", TOPIC, 0, 0, 100)
        assert by_count.message_count == 32 and not by_count.suggest_pull_from_slave
        by_count.release()
        by_max_bytes = store.get_messages("g", TOPIC, 0, 0, 100, max_bytes=record_size * 3)
        assert by_max_bytes.message_count == 3
        by_max_bytes.release()
        store._memory_bytes = 0     # everything behind the end counts as "in disk"
        in_disk = store.get_messages("g", TOPIC, 0, 0, 100)
        assert in_disk.message_count == 8 and in_disk.suggest_pull_from_slave
        in_disk.release()


CHILD = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, sys.argv[1])
    from pybroker._fast import record
    from pybroker.store.message_store import MessageStore
    from pybroker.store.settings import StoreConfig
    host = bytes([127, 0, 0, 1])
    settings = StoreConfig(store_path_root_dir=sys.argv[2],
                           mapped_file_size_commit_log=64 * 1024,
                           mapped_file_size_consume_queue=64 * 20, max_hash_slot_num=64,
                           max_index_num=512, flush_disk_type="SYNC_FLUSH")
    store = MessageStore(settings)
    store.start()
    for index in range(int(sys.argv[3])):
        body, properties = b"%06d|" % index, b"KEYS\x01key%d\x02" % index
        buffer = bytearray(record.encoded_size(len(body), 9, len(properties), 0))
        record.encode_into(buffer, 0, b"TopicTest", index % 2, 0, body, properties, 0, 1,
                           host, 4242, host, 10911)
        store.put_messages(buffer, "TopicTest", index % 2, 1, 0)
    os._exit(0)   # no shutdown: the abort file stays, as after a crash
""")


def crash_after_puts(root: str, count: int) -> None:
    subprocess.run([sys.executable, "-c", CHILD, ROOT, root, str(count)], check=True,
                   timeout=60, cwd=ROOT)
    assert lock_file.abort_file_exists(root)


def assert_all_readable(store, count: int) -> None:
    for queue_id in (0, 1):
        expected = [index for index in range(count) if index % 2 == queue_id]
        result = store.get_messages("g", TOPIC, queue_id, 0, 1000)
        got = bodies(result)
        result.release()
        offset = len(got)
        while offset < len(expected):
            more = store.get_messages("g", TOPIC, queue_id, offset, 1000)
            got.extend(bodies(more))
            more.release()
            offset = more.next_begin_offset
        assert got == [body_of(index) for index in expected]


@pytest.mark.dataplane
@pytest.mark.parametrize("deleted", [(), ("consumequeue", "index")])
def test_abnormal_restart_rebuilds_queues_and_index(tmp_path, deleted):
    root = str(tmp_path / "store")
    crash_after_puts(root, 700)
    for directory in deleted:
        shutil.rmtree(os.path.join(root, directory))
    with MessageStore(make_settings(tmp_path)) as store:
        assert store.last_recovery_abnormal
        assert store.get_max_offset_in_queue(TOPIC, 0) == 350
        assert_all_readable(store, 700)
        for index in (0, 351, 699):
            with store.query_messages(TOPIC, f"key{index}", 32, 0, 1 << 62) as found:
                assert body_of(index) in bodies(found)
        put(store, 700, queue_id=0)
        assert store.get_max_offset_in_queue(TOPIC, 0) == 351
    assert not lock_file.abort_file_exists(root)


def test_normal_restart_takes_normal_path_and_rebuilds_deleted_queues(tmp_path):
    settings = make_settings(tmp_path)
    with MessageStore(settings) as store:
        for index in range(300):
            put(store, index, queue_id=index % 2, KEYS=f"key{index}")
    assert not lock_file.abort_file_exists(settings.store_path_root_dir)
    shutil.rmtree(paths.consume_queue_root(settings.store_path_root_dir))
    with MessageStore(settings) as store:
        assert not store.last_recovery_abnormal
        assert store.recovery_result.dispatched_count == 300
        assert_all_readable(store, 300)


def test_second_store_on_same_root_is_refused(tmp_path):
    settings = make_settings(tmp_path)
    with MessageStore(settings):
        with pytest.raises(lock_file.StoreLockedError):
            MessageStore(settings).load()


def test_sync_flush_flushes_before_returning(tmp_path):
    with MessageStore(make_settings(tmp_path, flush_disk_type="SYNC_FLUSH")) as store:
        for index in range(20):
            put(store, index)
            assert store.commitlog.flushed_where == store.max_physical_offset
    with MessageStore(make_settings(tmp_path / "async")) as store:
        put(store, 0)
        assert store.commitlog.flushed_where < store.max_physical_offset


def test_times_and_offsets_by_time(tmp_path):
    now = [1_800_000_000_000]
    with MessageStore(make_settings(tmp_path), clock_ms=lambda: now[0]) as store:
        for index in range(10):
            now[0] += 1000
            put(store, index)
        first = 1_800_000_001_000
        assert store.get_earliest_message_time(TOPIC, 0) == first
        assert store.get_earliest_message_time() == first
        assert store.get_message_store_timestamp(TOPIC, 0, 4) == first + 4000
        assert store.get_message_store_timestamp(TOPIC, 0, 10) == -1
        assert store.get_offset_in_queue_by_time(TOPIC, 0, first + 4500) == 5
        assert store.get_offset_in_queue_by_time(TOPIC, 0, first + 4500, "UPPER") == 4
        assert store.get_offset_in_queue_by_time("Unknown", 0, first) == 0
        assert store.get_min_offset_in_queue("Unknown", 0) == -1
        info = store.runtime_info()
        assert info["putMessageTimesTotal"] == "10"
        assert info["earliestMessageTimeStamp"] == str(first)
        assert info["commitLogDirCapacity"].startswith("Total : ")


def test_delete_topics_and_clean_expired_consume_queue(tmp_path):
    with MessageStore(make_settings(tmp_path), disk_used_ratio=lambda path: 0.86) as store:
        put(store, 0, topic="Gone")
        fill_files(store, 3)
        assert store.delete_topics(["Gone"]) == 1
        assert store.get_max_offset_in_queue("Gone", 0) == 0
        put(store, 1, topic="Old")
        fill_files(store, 5)
        store.clean_expired_files()
        store.clean_expired_files()
        assert store.min_physical_offset > 0
        assert store.clean_expired_consume_queue() == 1
        assert store.consume_queue_store.find("Old", 0) is None
        assert store.consume_queue_store.find(TOPIC, 0) is not None
        put(store, 2, topic="Old")
        assert store.get_max_offset_in_queue("Old", 0) == 1


def test_slave_appends_replicated_chunks_and_dispatches_whole_records(tmp_path, rand):
    master_settings = make_settings(tmp_path / "master")
    slave_settings = make_settings(tmp_path / "slave", broker_role="SLAVE")
    with MessageStore(master_settings) as master, MessageStore(slave_settings) as slave:
        for index in range(400):
            put(master, index, queue_id=index % 3, KEYS=f"key{index}")
        assert put_refused(slave)
        offset = 0
        while offset < master.max_physical_offset:
            with master.get_commit_log_data(offset) as data:
                chunk = data.buffer[:rand.randrange(1, 3000)]
                assert slave.append_to_commit_log(offset, chunk)
                offset += len(chunk)
                chunk.release()
            assert slave.dispatch_behind_bytes < 3000 + 64 * 1024
        assert slave.dispatch_behind_bytes == 0
        for queue_id in range(3):
            assert slave.get_max_offset_in_queue(TOPIC, queue_id) == \
                master.get_max_offset_in_queue(TOPIC, queue_id)
        with slave.query_messages(TOPIC, "key399", 32, 0, 1 << 62) as found:
            assert bodies(found) == [body_of(399)]


def put_refused(store) -> bool:
    result = store.put_messages(encode(b"x"), TOPIC, 0, 1, 0)
    return result.status is PutStatus.SERVICE_NOT_AVAILABLE


RETRY_V2 = "%RETRY%" + "g" * 150     # past 127 bytes: message format V2


@pytest.mark.parametrize("topic, stored", [
    (RETRY_V2, True), ("%RETRY%" + "g" * 248, True),     # 255 bytes: the longest
    ("%RETRY%" + "g" * 249, False), ("%DLQ%" + "g" * 150, False), ("T" * 128, False),
    ("T" * 127, True)])
def test_topics_a_record_may_carry(tmp_path, topic, stored):
    # Java 5.x's store: 127 bytes, or a retry topic up to 255 bytes as a V2 record.
    with MessageStore(make_settings(tmp_path)) as store:
        result = store.put_messages(encode(b"x", topic), topic, 0, 1, 0)
        assert result.status is (PutStatus.PUT_OK if stored else PutStatus.MESSAGE_ILLEGAL)


def test_v2_records_are_dispatched_read_indexed_and_recovered(tmp_path):
    settings = make_settings(tmp_path)
    with MessageStore(settings) as store:
        for index in range(40):
            put(store, index, RETRY_V2 if index % 2 else TOPIC, KEYS=f"key{index}")
        found = store.get_messages("g", RETRY_V2, 0, 0, 32)
        decoded = [record_codec.decode(buffer, 0) for buffer in found.buffers]
        found.release()
        assert {record.magic for record in decoded} == {-626843477}          # V2
        assert [bytes(record.body) for record in decoded] == \
            [body_of(index) for index in range(1, 40, 2)]
    shutil.rmtree(paths.consume_queue_root(settings.store_path_root_dir))
    shutil.rmtree(os.path.join(settings.store_path_root_dir, "index"))
    with MessageStore(settings) as store:      # rebuilt from the CommitLog
        assert store.get_max_offset_in_queue(RETRY_V2, 0) == 20
        with store.query_messages(RETRY_V2, "key39", 32, 0, 1 << 62) as found:
            assert bodies(found) == [body_of(39)]
    with MessageStore(dataclasses.replace(settings,
                                          auto_message_version_on_topic_len=False)) as store:
        refused = store.put_messages(encode(b"x", RETRY_V2), RETRY_V2, 0, 1, 0)
        assert refused.status is PutStatus.MESSAGE_ILLEGAL
