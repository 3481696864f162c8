"""Checkpoint, abort/lock files and the status tables hold RocketMQ's on-disk and wire facts.

Method: write the checkpoint through StoreCheckpoint and read the raw page back with struct at the
protocol.md §4.6 offsets; lock the store from this process and from a child process; check every
status maps to the reference's response code.
"""
import multiprocessing
import os
import struct
import zlib

import pytest

from pybroker.protocol.codes import ResponseCode
from pybroker.store import layout, paths
from pybroker.store.checkpoint import StoreCheckpoint
from pybroker.store.lock_file import (StoreLock, StoreLockedError, abort_file_exists,
                                      create_abort_file, delete_abort_file)
from pybroker.store.status import GetStatus, PutStatus, pull_response, send_response


def test_checkpoint_layout_on_disk_and_reload(tmp_path):
    path = paths.checkpoint_path(str(tmp_path))
    checkpoint = StoreCheckpoint(path)
    values = (1_700_000_001_000, 1_700_000_002_000, 1_699_999_990_000, 123_456, 654_321)
    (checkpoint.physic_msg_timestamp, checkpoint.logics_msg_timestamp,
     checkpoint.index_msg_timestamp, checkpoint.master_flushed_offset,
     checkpoint.confirm_phy_offset) = values
    checkpoint.flush()
    with open(path, "rb") as handle:
        page = handle.read()
    assert len(page) == layout.CHECKPOINT_FILE_SIZE
    assert struct.unpack_from(">qqqqq", page, 0) == values
    # pybroker's two words after Java's five (store/checkpoint.py), then zeros.
    assert page[48:52] == b"PBCK"
    assert int.from_bytes(page[52:56], "big") == zlib.crc32(page[:48])
    assert not any(page[56:])
    checkpoint.shutdown()
    reloaded = StoreCheckpoint(path, read_only=True)
    assert reloaded.physic_msg_timestamp == values[0]
    assert reloaded.confirm_phy_offset == values[4]
    assert reloaded.min_timestamp() == values[0] - 3000
    assert reloaded.min_timestamp_index() == values[2]
    assert reloaded.recovery_point_ms(message_index_safe=False) == values[0] - 3000
    assert reloaded.recovery_point_ms(message_index_safe=True) == values[2]
    reloaded.shutdown()


def test_flushed_end_counts_only_with_a_matching_stamp(tmp_path):
    """Recovery's proof of the end: the flushed CommitLog offset counts only on a page
    pybroker stored. A page with both words zero (Java 4.9.8 / 5.3.3, older pybroker) and one
    whose fields changed after the stamp (damage, or a Java broker storing its own times over
    pybroker's page) vouch for nothing."""
    path = paths.checkpoint_path(str(tmp_path))
    checkpoint = StoreCheckpoint(path)
    assert checkpoint.stamp_state == "unstamped" and checkpoint.flushed_end() is None
    checkpoint.physic_msg_timestamp = 1_700_000_000_000
    checkpoint.commitlog_flushed_offset = 98_304
    checkpoint.shutdown()
    assert StoreCheckpoint(path, read_only=True).flushed_end() == 98_304
    with open(path, "r+b") as handle:          # Java stores its five words, leaves the rest
        handle.write(struct.pack(">qqqqq", 1_700_000_009_000, 1_700_000_009_000, 0, 0, 0))
    reread = StoreCheckpoint(path, read_only=True)
    assert reread.stamp_state == "mismatch" and reread.flushed_end() is None
    with open(path, "r+b") as handle:          # Java's own page: pybroker's words are zero
        handle.write(bytes(layout.CHECKPOINT_FILE_SIZE))
    assert StoreCheckpoint(path, read_only=True).stamp_state == "unstamped"


def test_save_stores_every_time_and_msyncs_once_per_interval(tmp_path):
    """The flusher saves after every CommitLog flush; the page must carry each save at once
    (a kill -9 keeps the page cache, and readers map the same page) while msync runs only
    once per interval (Java forces it with the consume queues' thorough flush)."""
    path = paths.checkpoint_path(str(tmp_path))
    checkpoint = StoreCheckpoint(path, sync_interval_ms=60_000, now_ms=1_000)
    msyncs = []
    real_flush = checkpoint._file.flush
    checkpoint._file.flush = lambda *args: msyncs.append(args) or real_flush(*args)

    def on_disk() -> int:
        with open(path, "rb") as handle:
            return struct.unpack_from(">q", handle.read(8))[0]

    synced = []
    for now_ms in (1_000, 30_000, 60_999, 61_000, 62_000, 121_000):
        checkpoint.physic_msg_timestamp = now_ms
        synced.append(checkpoint.save(now_ms))
        assert on_disk() == now_ms
    assert synced == [False, False, False, True, False, True]
    assert len(msyncs) == 2
    checkpoint.physic_msg_timestamp = 130_000
    checkpoint.shutdown()                                   # a stop always msyncs
    assert len(msyncs) == 3 and on_disk() == 130_000
    # Without an interval (tools, recovery) every save msyncs, as flush() does.
    eager = StoreCheckpoint(path)
    assert eager.save(0) and eager.save(1)
    eager.shutdown()


def test_checkpoint_min_timestamp_never_negative(tmp_path):
    checkpoint = StoreCheckpoint(str(tmp_path / "checkpoint"))
    checkpoint.physic_msg_timestamp = 1000
    checkpoint.logics_msg_timestamp = 500_000
    assert checkpoint.min_timestamp() == 0
    checkpoint.shutdown()


def test_abort_file_lifecycle(tmp_path):
    root = str(tmp_path / "store")
    assert not abort_file_exists(root)
    create_abort_file(root)
    assert abort_file_exists(root) and os.path.getsize(paths.abort_path(root)) == 0
    delete_abort_file(root)
    delete_abort_file(root)
    assert not abort_file_exists(root)


def _try_lock(root: str, queue) -> None:
    try:
        StoreLock(root).acquire()
        queue.put("locked")
    except StoreLockedError as exc:
        queue.put(str(exc))


@pytest.mark.dataplane
def test_lock_is_exclusive_in_process_and_across_processes(tmp_path):
    root = str(tmp_path)
    with StoreLock(root) as lock:
        assert lock.locked
        with open(paths.lock_path(root), "rb") as handle:
            assert handle.read(4) == b"lock"
        with pytest.raises(StoreLockedError, match="held by another broker"):
            StoreLock(root).acquire()
        context = multiprocessing.get_context("spawn")
        queue = context.Queue()
        child = context.Process(target=_try_lock, args=(root, queue))
        child.start()
        answer = queue.get(timeout=60)
        child.join(60)
        assert "held by another broker" in answer
    second = StoreLock(root)
    second.acquire()
    second.release()


@pytest.mark.parametrize("status, code", [
    (PutStatus.PUT_OK, ResponseCode.SUCCESS),
    (PutStatus.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_DISK_TIMEOUT),
    (PutStatus.FLUSH_SLAVE_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT),
    (PutStatus.SLAVE_NOT_AVAILABLE, ResponseCode.SLAVE_NOT_AVAILABLE),
    (PutStatus.MESSAGE_ILLEGAL, ResponseCode.MESSAGE_ILLEGAL),
    (PutStatus.PROPERTIES_SIZE_EXCEEDED, ResponseCode.MESSAGE_ILLEGAL),
    (PutStatus.SERVICE_NOT_AVAILABLE, ResponseCode.SERVICE_NOT_AVAILABLE),
    (PutStatus.OS_PAGE_CACHE_BUSY, ResponseCode.SYSTEM_ERROR),
    (PutStatus.CREATE_MAPPED_FILE_FAILED, ResponseCode.SYSTEM_ERROR),
    (PutStatus.UNKNOWN_ERROR, ResponseCode.SYSTEM_ERROR),
])
def test_send_table(status, code):
    response_code, remark = send_response(status, max_message_size=4_194_304)
    assert response_code == code
    assert (remark is None) == status.stored
    if status is PutStatus.OS_PAGE_CACHE_BUSY:
        assert remark.startswith("[PC_SYNCHRONIZED]")
    if status is PutStatus.MESSAGE_ILLEGAL:
        assert "4194304" in remark


@pytest.mark.parametrize("status, at_zero, elsewhere", [
    (GetStatus.FOUND, ResponseCode.SUCCESS, ResponseCode.SUCCESS),
    (GetStatus.NO_MATCHED_MESSAGE, ResponseCode.PULL_RETRY_IMMEDIATELY,
     ResponseCode.PULL_RETRY_IMMEDIATELY),
    (GetStatus.OFFSET_OVERFLOW_ONE, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_NOT_FOUND),
    (GetStatus.OFFSET_OVERFLOW_BADLY, ResponseCode.PULL_OFFSET_MOVED,
     ResponseCode.PULL_OFFSET_MOVED),
    (GetStatus.OFFSET_TOO_SMALL, ResponseCode.PULL_OFFSET_MOVED, ResponseCode.PULL_OFFSET_MOVED),
    (GetStatus.NO_MESSAGE_IN_QUEUE, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED),
    (GetStatus.NO_MATCHED_LOGIC_QUEUE, ResponseCode.PULL_NOT_FOUND,
     ResponseCode.PULL_OFFSET_MOVED),
])
def test_pull_table(status, at_zero, elsewhere):
    assert pull_response(status, 0)[0] == at_zero
    assert pull_response(status, 17)[0] == elsewhere


def test_paths_follow_the_store_layout(tmp_path):
    root = str(tmp_path)
    assert paths.consume_queue_dir(root, "TopicA", 3) == os.path.join(root, "consumequeue",
                                                                      "TopicA", "3")
    assert paths.offset_file_path(paths.commitlog_dir(root), 1 << 30).endswith(
        os.path.join("commitlog", "00000000001073741824"))
    assert paths.config_path(root, paths.TOPICS_CONFIG).endswith(
        os.path.join("config", "topics.json"))
    with pytest.raises(ValueError):
        paths.consume_queue_dir(root, "../x", 0)
