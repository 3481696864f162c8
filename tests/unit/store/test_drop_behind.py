"""Pages behind a position leave this process's page tables, and no byte is lost.

Method: real store files in tmp_path mapped by this process; what the process maps is the
kernel's own count (``Rss`` of the file's mapping in ``/proc/self/smaps``), read after each step.
Bytes are checked three ways after a drop: through the mapping (mapped again from the page
cache), by reading the file, and after an msync through a fresh mapping in a child
process that is then killed with SIGKILL (the page cache, not this process, holds them).
"""
import os
import signal

import pytest

from pybroker.store.consume_queue import ConsumeQueueStore
from pybroker.store.drop_behind import LOGICS_KEEP_BYTES, DropBehind, LogicsDropBehind
from pybroker.store.index_file import IndexService
from pybroker.store.mapped_file import MappedFile, MappedFileQueue, offset_file_name

MIB = 1 << 20


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


def test_a_refusal_turns_dropping_off_with_one_log_line(tmp_path, caplog):
    queue = filled_queue(tmp_path, 16 * MIB, 1)
    mapped_file = queue.mapped_files[0]
    try:
        if mapped_file.lock_pages() != 0:
            pytest.skip("mlock refused here (RLIMIT_MEMLOCK without CAP_IPC_LOCK)")
        drop = DropBehind(queue, keep_bytes=1 * MIB, step_bytes=1 * MIB)
        assert drop.advance(16 * MIB) == 0          # the kernel refuses locked pages
        assert not drop.enabled
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
