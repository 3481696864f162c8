"""Expired-file cleanup deletes by age at deleteWhen and by disk ratio, never under a reader.

Method: a real MessageStore in tmp_path with 64 KiB CommitLog files, an injected clock (to age
files and pick the hour) and an injected disk-usage function (to cross the 75/85/90 % lines);
each pass's CleanupReport and the files on disk are checked, with pull results holding views of
the oldest file while cleanup runs.
"""
import dataclasses
import os
import time

from pybroker._fast import record as record_codec
from pybroker.store.cleanup import StoreCleaner, is_time_to_delete
from pybroker.store.cleanup_requests import (CLEAN_EXPIRED_CONSUME_QUEUE,
                                             DELETE_EXPIRED_COMMITLOG, MANUAL_DELETE_PASSES,
                                             CleanupRequestReader, request_cleanup)
from pybroker.store.mapped_file import DELETE_FILES_BATCH_MAX
from pybroker.store.message_store import MessageStore
from pybroker.store.settings import StoreConfig
from pybroker.store.status import GetStatus, PutStatus

HOST = bytes([127, 0, 0, 1])
HOUR_MS = 3_600_000
FORCIBLY_MS = 100


def encode(index: int) -> bytearray:
    body, properties = b"%06d" % index * 20, b"KEYS\x01key%d\x02" % index
    buffer = bytearray(record_codec.encoded_size(len(body), 1, len(properties), 0))
    record_codec.encode_into(buffer, 0, b"T", 0, 0, body, properties, 0, 1, HOST, 1, HOST, 2)
    return buffer


class World:
    """The injected clock (ms) and disk usage (fraction) a store sees."""

    def __init__(self):
        self.now_ms = time.time_ns() // 1_000_000
        self.disk_ratio = 0.5

    def clock_ms(self) -> int:
        return self.now_ms

    def used(self, path: str) -> float:
        return self.disk_ratio


def open_store(tmp_path, world, **overrides) -> MessageStore:
    values = dict(store_path_root_dir=str(tmp_path / "store"),
                  mapped_file_size_commit_log=64 * 1024,
                  mapped_file_size_consume_queue=64 * 20, max_hash_slot_num=64,
                  max_index_num=128, delete_when="04", file_reserved_time=72,
                  delete_commit_log_files_interval=0, delete_consume_queue_files_interval=0)
    values.update(overrides)
    store = MessageStore(StoreConfig(**values), clock_ms=world.clock_ms,
                         disk_used_ratio=world.used)
    store.start()
    return store


def fill(store, files: int) -> int:
    index = 0
    while len(store.commitlog.mapped_file_queue.mapped_files) < files:
        assert store.put_messages(encode(index), "T", 0, 1, 0).status is PutStatus.PUT_OK
        index += 1
    return index


def commitlog_names(store) -> list[str]:
    return sorted(os.listdir(store.commitlog_dir))


def test_is_time_to_delete_hours():
    four_am = time.mktime((2024, 5, 1, 4, 30, 0, 0, 0, -1)) * 1000
    assert is_time_to_delete("04", four_am) and is_time_to_delete("03;04", four_am)
    assert not is_time_to_delete("05", four_am) and not is_time_to_delete("", four_am)


def test_expired_files_deleted_at_delete_when_then_queues_corrected(tmp_path):
    world = World()
    store = open_store(tmp_path, world)
    try:
        count = fill(store, 4)
        index_files = len(store.index_service.index_files)
        young = store.clean_expired_files()
        assert young.commitlog_files_deleted == 0 and len(commitlog_names(store)) == 4
        world.now_ms += 73 * HOUR_MS          # old enough, but not the hour yet
        next_hour = (time.localtime(world.now_ms / 1000).tm_hour + 1) % 24
        store.settings = dataclasses.replace(store.settings, delete_when="%02d" % next_hour)
        assert store.clean_expired_files().commitlog_files_deleted == 0
        this_hour = time.localtime(world.now_ms / 1000).tm_hour
        store.settings = dataclasses.replace(store.settings, delete_when="%02d" % this_hour)
        report = store.clean_expired_files()
        assert report.time_up and report.commitlog_files_deleted == 3
        assert len(commitlog_names(store)) == 1
        min_physical_offset = store.min_physical_offset
        assert min_physical_offset == 3 * 64 * 1024
        assert report.consume_queue_files_deleted > 0
        assert report.index_files_deleted == index_files - len(store.index_service.index_files)
        assert report.index_files_deleted > 0
        min_queue_offset = store.get_min_offset_in_queue("T", 0)
        assert 0 < min_queue_offset < count
        result = store.get_messages("g", "T", 0, min_queue_offset, 1)
        assert result.status is GetStatus.FOUND
        assert record_codec.decode(result.buffers[0], 0).physical_offset >= min_physical_offset
        result.release()
        before = store.get_messages("g", "T", 0, min_queue_offset - 1, 1)
        assert before.status is GetStatus.OFFSET_TOO_SMALL
    finally:
        store.shutdown()


def test_disk_ratios_expired_forced_and_full(tmp_path):
    world = World()
    store = open_store(tmp_path, world, delete_when="99")
    try:
        fill(store, 4)
        world.disk_ratio = 0.80               # above 75 %: expired files only (none are)
        report = store.clean_expired_files()
        assert report.space_full and not report.clean_immediately
        assert report.commitlog_files_deleted == 0
        world.disk_ratio = 0.86               # above 85 %: regardless of age
        report = store.clean_expired_files()
        assert report.clean_immediately and not report.disk_full
        assert report.commitlog_files_deleted == 3
        world.disk_ratio = 0.91               # above 90 %: puts refused
        assert store.clean_expired_files().disk_full
        assert store.put_messages(encode(0), "T", 0, 1, 0).status is \
            PutStatus.SERVICE_NOT_AVAILABLE
        world.disk_ratio = 0.5
        assert not store.clean_expired_files().disk_full
        assert store.put_messages(encode(0), "T", 0, 1, 0).status is PutStatus.PUT_OK
    finally:
        store.shutdown()


def test_forced_clean_disabled_keeps_young_files(tmp_path):
    world = World()
    world.disk_ratio = 0.95
    store = open_store(tmp_path, world, delete_when="99", clean_file_forcibly_enable=False)
    try:
        fill(store, 3)
        assert store.clean_expired_files().commitlog_files_deleted == 0
    finally:
        store.shutdown()


def test_held_file_survives_until_released(tmp_path):
    world = World()
    world.disk_ratio = 0.86
    store = open_store(tmp_path, world, delete_when="99")
    try:
        fill(store, 3)
        first_name = commitlog_names(store)[0]
        held = store.get_messages("g", "T", 0, 0, 4)
        assert held.status is GetStatus.FOUND
        expected = [bytes(buffer) for buffer in held.buffers]
        report = store.clean_expired_files()
        assert report.commitlog_files_deleted == 0      # stops at the held file
        assert first_name in commitlog_names(store)
        assert store.put_messages(encode(0), "T", 0, 1, 0).status is PutStatus.PUT_OK
        assert [bytes(buffer) for buffer in held.buffers] == expected
        held.release()
        assert first_name not in commitlog_names(store)  # unlinked on the last release
        assert store.clean_expired_files().commitlog_files_deleted == 2
        assert len(commitlog_names(store)) == 1
    finally:
        store.shutdown()


def test_held_file_forced_after_interval_reader_keeps_stale_bytes(tmp_path):
    world = World()
    world.disk_ratio = 0.86
    store = open_store(tmp_path, world, delete_when="99",
                       destroy_maped_file_interval_forcibly=FORCIBLY_MS)
    try:
        fill(store, 2)
        first_name = commitlog_names(store)[0]
        held = store.get_messages("g", "T", 0, 0, 4)
        expected = [bytes(buffer) for buffer in held.buffers]
        assert store.clean_expired_files().commitlog_files_deleted == 0
        time.sleep(FORCIBLY_MS / 1000 * 1.5)   # MappedFile measures this interval in real time
        # The interval has passed by the next attempt: deleted although still held.
        assert store.clean_expired_files().commitlog_files_deleted == 1
        assert first_name not in commitlog_names(store)
        assert [bytes(buffer) for buffer in held.buffers] == expected
        held.release()
    finally:
        store.shutdown()


def test_hanged_file_retried_without_delete_hour(tmp_path):
    world = World()
    store = open_store(tmp_path, world, delete_when="99",
                       destroy_maped_file_interval_forcibly=FORCIBLY_MS,
                       redelete_hanged_file_interval=10)
    try:
        fill(store, 2)
        held = store.get_messages("g", "T", 0, 0, 1)
        world.disk_ratio = 0.86
        assert store.clean_expired_files().commitlog_files_deleted == 0
        world.disk_ratio = 0.5                # no reason to clean any more, but the file hangs
        cleaner: StoreCleaner = store.cleaner
        assert not cleaner.redelete_hanged_file()    # the retry interval has not passed
        world.now_ms += 1000
        time.sleep(FORCIBLY_MS / 1000 * 1.5)
        assert cleaner.redelete_hanged_file()
        assert len(store.commitlog.mapped_file_queue.mapped_files) == 1
        held.release()
    finally:
        store.shutdown()


def test_admin_requests_delete_expired_files_outside_delete_when(tmp_path):
    """mqadmin deleteExpiredCommitLog: the next MANUAL_DELETE_PASSES passes delete files older
    than fileReservedTime at any hour (Java's executeDeleteFilesManually), never young ones;
    cleanExpiredCQ: a pass deletes queue files below the CommitLog min offset even when that
    offset did not move since the last pass. The requests reach the cleaner through the run
    directory's request file, read from where it stood when the reader was made."""
    world = World()
    store = open_store(tmp_path, world)
    root = str(tmp_path / "store")
    request_cleanup(root, DELETE_EXPIRED_COMMITLOG)      # before the reader: not taken
    reader = CleanupRequestReader(root)
    try:
        fill(store, 4)
        assert reader.take() == set()
        request_cleanup(root, DELETE_EXPIRED_COMMITLOG)
        store.cleaner.take_requests(reader.take())
        assert store.cleaner.manual_delete_passes == MANUAL_DELETE_PASSES
        assert store.clean_expired_files().commitlog_files_deleted == 0     # young files stay
        world.now_ms += 73 * HOUR_MS
        other_hour = (time.localtime(world.now_ms / 1000).tm_hour + 2) % 24
        store.settings = dataclasses.replace(store.settings, delete_when="%02d" % other_hour)
        report = store.clean_expired_files()
        assert not report.time_up and report.commitlog_files_deleted == 3
        assert store.cleaner.manual_delete_passes == MANUAL_DELETE_PASSES - 2
        # At most DELETE_FILES_BATCH_MAX queue files go in a pass; the rest would wait for
        # the CommitLog min offset to move again.
        assert report.consume_queue_files_deleted == DELETE_FILES_BATCH_MAX
        assert store.clean_expired_files().consume_queue_files_deleted == 0
        request_cleanup(root, CLEAN_EXPIRED_CONSUME_QUEUE)
        assert reader.take() == {CLEAN_EXPIRED_CONSUME_QUEUE} and reader.take() == set()
        store.cleaner.take_requests({CLEAN_EXPIRED_CONSUME_QUEUE})
        left = store.clean_expired_files().consume_queue_files_deleted
        assert left > 0
        store.cleaner.take_requests({CLEAN_EXPIRED_CONSUME_QUEUE})
        assert store.clean_expired_files().consume_queue_files_deleted == 0
        first_file = 64 * (DELETE_FILES_BATCH_MAX + left)      # 64 units a queue file
        assert first_file <= store.get_min_offset_in_queue("T", 0) < first_file + 64
        store.cleaner.manual_delete_passes = 0
        world.now_ms += 73 * HOUR_MS
        assert store.clean_expired_files().commitlog_files_deleted == 0   # the hour is not up
    finally:
        store.shutdown()
