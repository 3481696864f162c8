"""Pages behind a position leave this process's page tables, and no byte is lost.

Method: real store files in tmp_path mapped by this process; what the process maps is the
kernel's own count (``Rss`` of the file's mapping in ``/proc/self/smaps``), read after each step.
Bytes are checked three ways after a drop: through the mapping (mapped again from the page
cache), by reading the file, and after an msync through a fresh mapping in a child
process that is then killed with SIGKILL (the page cache, not this process, holds them).
Each role's reader (proc/dataplane.py Attachment over the supervisor's own DataPlane.create) reads
every record of a store as the timer reads its parked records when due, then sweeps.
"""
import os
import signal
import time

import pytest

from pybroker import config
from pybroker._fast import record as record_codec
from pybroker.proc.dataplane import DataPlane
from pybroker.store import paths as store_paths
from pybroker.store.consume_queue import ConsumeQueueStore
from pybroker.store.control_block import grpc_worker
from pybroker.store.drop_behind import LOGICS_KEEP_BYTES, DropBehind, LogicsDropBehind
from pybroker.store.index_file import IndexService
from pybroker.store.mapped_file import (PAGE_SIZE_BYTES, MappedFile, MappedFileQueue,
                                        offset_file_name)
from pybroker.store.message_store import MessageStore
from pybroker.store.read_only_store import (GRPC_READER_KEEP_BYTES, READER_KEEP_BYTES,
                                            READER_SWEEP_INTERVAL_S, TAIL_READER_KEEP_BYTES)
from pybroker.store.status import PutStatus

MIB = 1 << 20
# A read fault of a file page maps its neighbours in the page cache too (fault_around_bytes).
FAULT_AROUND_BYTES = 64 << 10


def mapped_rss_bytes(path: str) -> int:
    """Rss of this process's mappings of ``path`` (kernel's count), bytes."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and fields[0][0] in "0123456789abcdef":
                inside = fields[-1] == path
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


def filled_queue(tmp_path, file_size: int, files: int) -> MappedFileQueue:
    queue = MappedFileQueue(str(tmp_path), file_size)
    for index in range(files):
        mapped_file = queue.last_mapped_file(index * file_size)
        assert mapped_file is not None and mapped_file.file_from_offset == index * file_size
        payload = bytes([index + 1]) * 4096
        while mapped_file.append(payload):
            pass
    return queue


def test_advance_drops_behind_the_position_and_keeps_the_bytes(tmp_path):
    queue = filled_queue(tmp_path, 16 * MIB, 2)
    paths = [mapped_file.path for mapped_file in queue.mapped_files]
    try:
        assert [mapped_rss_bytes(path) for path in paths] == [16 * MIB, 16 * MIB]
        drop = DropBehind(queue, keep_bytes=1 * MIB, step_bytes=8 * MIB)
        assert drop.advance(8 * MIB) == 0                 # 7 MiB due: below the step
        assert drop.advance(20 * MIB) == 19 * MIB         # first file whole, 3 MiB of the next
        assert mapped_rss_bytes(paths[0]) == 0
        assert mapped_rss_bytes(paths[1]) == 13 * MIB
        assert drop.dropped_position == 19 * MIB
        assert drop.advance(25 * MIB) == 0                # 5 MiB since: not due
        assert drop.advance(32 * MIB) == 12 * MIB
        assert mapped_rss_bytes(paths[1]) == 1 * MIB
        for index, mapped_file in enumerate(queue.mapped_files):
            expected = bytes([index + 1]) * (16 * MIB)
            with open(mapped_file.path, "rb") as raw:
                assert raw.read() == expected              # the page cache kept every byte
            assert bytes(mapped_file.buffer()[:16 * MIB]) == expected   # mapped again
        assert mapped_rss_bytes(paths[0]) == 16 * MIB
    finally:
        queue.shutdown(0)


@pytest.mark.dataplane
def test_dirty_pages_dropped_before_msync_are_still_written(tmp_path):
    path = str(tmp_path / offset_file_name(0))
    mapped_file = MappedFile(path, 8 * MIB)
    try:
        mapped_file.append(b"\x5a" * (6 * MIB))
        mapped_file.drop_pages(0, 6 * MIB)                 # dirty, not yet flushed
        assert mapped_rss_bytes(path) == 0
        mapped_file.flush()                                # msync of the range still works
        assert mapped_file.flushed_position == 6 * MIB
        child = os.fork()
        if child == 0:       # a process that maps the file afresh, checks, and dies by SIGKILL
            check = MappedFile(path, 8 * MIB, read_only=True)
            if bytes(check.buffer()[:6 * MIB]) != b"\x5a" * (6 * MIB):
                os._exit(1)
            os.kill(os.getpid(), signal.SIGKILL)
        _, status = os.waitpid(child, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        with open(path, "rb") as raw:
            assert raw.read(6 * MIB) == b"\x5a" * (6 * MIB)
    finally:
        mapped_file.close()


def test_sweep_drops_from_the_first_file_again(tmp_path):
    queue = filled_queue(tmp_path, 16 * MIB, 2)
    paths = [mapped_file.path for mapped_file in queue.mapped_files]
    try:
        drop = DropBehind(queue, keep_bytes=4 * MIB, step_bytes=8 * MIB)
        assert drop.advance(32 * MIB) == 28 * MIB
        bytes(queue.mapped_files[0].buffer()[:2 * MIB])    # a reader going back maps them again
        assert mapped_rss_bytes(paths[0]) == 2 * MIB
        assert drop.advance(32 * MIB) == 0                 # a cursor does not go back...
        assert mapped_rss_bytes(paths[0]) == 2 * MIB
        assert drop.sweep(32 * MIB) == 28 * MIB            # ...a sweep does
        assert mapped_rss_bytes(paths[0]) == 0
        assert mapped_rss_bytes(paths[1]) == 4 * MIB       # the newest keep_bytes stay
    finally:
        queue.shutdown(0)


def test_due_position_is_never_above_a_position_that_drops(tmp_path, rand):
    # The appender calls advance() only from due_position on: below it nothing may drop.
    queue = filled_queue(tmp_path, 16 * MIB, 2)
    try:
        drop, position, drops = DropBehind(queue, keep_bytes=1 * MIB, step_bytes=3 * MIB), 0, 0
        while position < 32 * MIB:
            position += rand.randrange(1, 2 * MIB)
            due = drop.due_position
            if drop.advance(position):
                assert position >= due
                drops += 1
            else:
                assert drop.due_position == due
        assert drops >= 5
    finally:
        queue.shutdown(0)


def test_a_refusal_turns_dropping_off_with_one_log_line(tmp_path, caplog):
    queue = filled_queue(tmp_path, 16 * MIB, 1)
    mapped_file = queue.mapped_files[0]
    try:
        if mapped_file.lock_pages() != 0:
            pytest.skip("mlock refused here (RLIMIT_MEMLOCK without CAP_IPC_LOCK)")
        drop = DropBehind(queue, keep_bytes=1 * MIB, step_bytes=1 * MIB)
        assert drop.advance(16 * MIB) == 0          # the kernel refuses locked pages
        assert not drop.enabled and drop.due_position > 1 << 62
        assert caplog.text.count("stay mapped") == 1
        assert drop.advance(16 * MIB) == 0 and drop.sweep(16 * MIB) == 0
        assert caplog.text.count("stay mapped") == 1
        assert mapped_rss_bytes(mapped_file.path) == 16 * MIB
    finally:
        mapped_file.unlock_pages()
        queue.shutdown(0)


def test_logics_drop_behind_the_flushed_units_and_the_index_entries(tmp_path):
    units_per_file = 120_000                                   # 2.4 MB consume-queue files
    queues = ConsumeQueueStore(str(tmp_path), units_per_file * 20)
    index = IndexService(str(tmp_path / "index"), max_hash_slot_num=1000,
                         max_index_num=400_000)
    drop = LogicsDropBehind()
    try:
        queue = queues.find_or_create("T", 0)
        for offset in range(300_000):                          # 6 MB of units, three files
            assert queue.put(offset * 100, 100, 7, offset)
        for number in range(200_000):                          # 4 MB of index entries
            index.build_index("T", None, "%032d" % number, number * 100, 1_700_000_000_000)
        unit_paths = [mapped_file.path for mapped_file in queue.mapped_file_queue.mapped_files]
        index_path = index.index_files[0].path
        assert sum(map(mapped_rss_bytes, unit_paths)) >= 5 * MIB
        first_entry, entries_end = index.index_files[0].entries_range()
        assert mapped_rss_bytes(index_path) >= entries_end - first_entry
        queues.flush()
        index.flush()
        dropped = drop.advance(queues, index)
        assert sum(map(mapped_rss_bytes, unit_paths)) <= LOGICS_KEEP_BYTES + 4 * 4096
        # The hash slots and the header stay; the entries but the kept ones go.
        assert mapped_rss_bytes(index_path) <= first_entry + LOGICS_KEEP_BYTES + 2 * 4096
        assert dropped >= 6_000_000 - LOGICS_KEEP_BYTES + 3 * MIB
        assert drop.advance(queues, index) == 0                # nothing new since
        assert queue.get(12_345) == (1_234_500, 100, 7)       # mapped again from the page cache
        assert queue.get(299_999) == (29_999_900, 100, 7)
        found, _, _ = index.query("T", "%032d" % 54_321, 4, 0, 2_000_000_000_000)
        assert found == [5_432_100]
    finally:
        queues.close()
        index.close()


def _stored_offsets(store_config, count: int) -> tuple[list[int], int]:
    """Physical offsets of ``count`` records of ~4 KiB written by a MessageStore, and the
    CommitLog's end."""
    topic, host, offsets = b"KeepTopic", bytes([127, 0, 0, 1]), []
    with MessageStore(store_config) as store:
        for index in range(count):
            body = b"%07d|" % index * 500
            record = bytearray(record_codec.encoded_size(len(body), len(topic), 0, 0))
            record_codec.encode_into(record, 0, topic, 0, 0, body, b"", 0, 1_700_000_000_000,
                                     host, 4242, host, 10911)
            result = store.put_messages(record, topic.decode(), 0, 1, 0)
            assert result.status is PutStatus.PUT_OK
            offsets.append(result.physical_offset)
        return offsets, store.max_physical_offset


def test_each_roles_reader_keeps_its_newest_bytes_after_reading_far_behind(tmp_path):
    loaded = config.load_broker_config(overrides={
        "storePathRootDir": str(tmp_path / "store"), "remotingWorkers": "1",
        "grpcWorkers": "1", "mappedFileSizeCommitLog": str(4 * MIB),
        "sendRingSizeBytes": str(MIB), "maxMessageSize": str(64 << 10)})
    offsets, end = _stored_offsets(loaded.store, 3000)      # 12 MB: three files and a part
    assert TAIL_READER_KEEP_BYTES < GRPC_READER_KEEP_BYTES < end - 2 * MIB < READER_KEEP_BYTES
    plane = DataPlane.create(loaded, store_paths.run_dir(loaded.store.store_path_root_dir), 2,
                             end)
    roles = {"remoting": (lambda: plane.remoting_attachment(0), READER_KEEP_BYTES),
             "grpc": (lambda: plane.grpc_attachment(grpc_worker(0, 1).slot),
                      GRPC_READER_KEEP_BYTES),
             "timer": (plane.timer_attachment, TAIL_READER_KEEP_BYTES),
             "supervisor": (plane.supervisor_attachment, TAIL_READER_KEEP_BYTES)}
    try:
        for role, (attach, keep_bytes) in roles.items():
            attachment = attach()
            reader = attachment.reader
            try:
                for offset in offsets:                       # every page, as due-time reads
                    with reader.look_message_by_offset(offset):
                        pass
                files = [mapped.path for mapped in reader.commitlog.mapped_file_queue.mapped_files]
                touched = sum(map(mapped_rss_bytes, files))
                assert touched >= offsets[-1] - PAGE_SIZE_BYTES, role   # nothing swept yet
                time.sleep(READER_SWEEP_INTERVAL_S + 0.05)
                with reader.look_message_by_offset(offsets[-1]):   # the next read sweeps
                    kept = sum(map(mapped_rss_bytes, files))
                assert kept <= min(keep_bytes, touched) + FAULT_AROUND_BYTES, (role, kept)
                assert kept >= min(keep_bytes, touched) - 2 * PAGE_SIZE_BYTES, (role, kept)
                with reader.look_message_by_offset(offsets[0]) as selected:   # mapped again
                    assert bytes(record_codec.decode(selected.buffer, 0).body) == \
                        b"%07d|" % 0 * 500
            finally:
                attachment.close()
    finally:
        plane.close()
