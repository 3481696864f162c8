"""Sparse store files cost no disk until written, and the pre-fault window stays bounded.

Method: real files in tmp_path on the test machine's file system; disk use is the kernel's
count of allocated blocks (``st_blocks``), read after each step. The window is driven with
written positions as the flusher would, and the populated byte counts and block counts are
compared with the rule in pybroker/store/prefault.py. A second process writes records into the
same file while this one populates ahead of it, and every record must read back intact.
"""
import os

import pytest

from pybroker.store.commitlog import CommitLog
from pybroker.store.mapped_file import MappedFile, MappedFileQueue, offset_file_name
from pybroker.store.prefault import WINDOW_MAX_BYTES, WINDOW_MIN_BYTES, PrefaultWindow

GIB = 1 << 30
MIB = 1 << 20


def disk_bytes(path) -> int:
    return os.stat(path).st_blocks * 512


def test_new_files_are_sparse_by_default(tmp_path):
    mapped_file = MappedFile(str(tmp_path / offset_file_name(0)), GIB)
    try:
        assert os.path.getsize(mapped_file.path) == GIB
        assert disk_bytes(mapped_file.path) == 0
        mapped_file.append(b"x" * 100)
        assert disk_bytes(mapped_file.path) <= 64 * 1024   # one page (plus fs granularity)
    finally:
        mapped_file.close()


def test_fallocate_still_reserves_when_asked(tmp_path):
    mapped_file = MappedFile(str(tmp_path / "f"), 4 * MIB, allocation="fallocate")
    try:
        assert disk_bytes(mapped_file.path) >= 4 * MIB
    finally:
        mapped_file.close()


def test_prefault_reserves_the_range_and_keeps_every_byte(tmp_path):
    mapped_file = MappedFile(str(tmp_path / offset_file_name(0)), 64 * MIB)
    try:
        mapped_file.append(b"keep me" * 1000)
        assert mapped_file.prefault(0, 4 * MIB) == 0
        assert 4 * MIB <= disk_bytes(mapped_file.path) < 5 * MIB
        assert bytes(mapped_file.buffer()[:7000]) == b"keep me" * 1000
        assert not any(mapped_file.buffer()[7000:4 * MIB])
        assert mapped_file.prefault(63 * MIB, 80 * MIB) == 0   # clipped to the file
        assert disk_bytes(mapped_file.path) < 6 * MIB
    finally:
        mapped_file.close()


def test_read_only_maps_are_not_populated(tmp_path):
    path = str(tmp_path / offset_file_name(0))
    MappedFile(path, 8 * MIB).close()
    reader = MappedFile(path, 8 * MIB, read_only=True)
    try:
        assert reader.prefault(0, 8 * MIB) == 0
        assert disk_bytes(path) == 0
    finally:
        reader.close()


def test_window_follows_the_write_rate_within_its_bounds(tmp_path):
    file_size = 64 * MIB
    commitlog = CommitLog(str(tmp_path / "commitlog"), file_size)
    path = commitlog.mapped_file_queue.last_mapped_file(0).path
    window = PrefaultWindow(commitlog, 0)
    try:
        assert window.advance(0) == 0 and disk_bytes(path) == 0        # idle: nothing
        # A trickle gets the minimum window.
        assert window.advance(1000) == WINDOW_MIN_BYTES
        assert window.prefaulted_position == 1000 + WINDOW_MIN_BYTES
        assert window.advance(2000) == 0      # more than half a window still ahead
        # A burst: twice the growth, capped at the maximum.
        assert window.advance(20 * MIB) == WINDOW_MAX_BYTES
        assert window.prefaulted_position == 20 * MIB + WINDOW_MAX_BYTES
        assert disk_bytes(path) <= window.prefaulted_position + MIB
        # The window stops at the end of the last existing file.
        assert window.advance(file_size - MIB) == MIB
        assert window.prefaulted_position == file_size
    finally:
        commitlog.shutdown(0)



def test_bytes_known_to_come_are_covered_whole_before_they_are_written(tmp_path):
    """The timer's re-puts held for slots due soon (the control block's timer ahead line):
    the window covers them before the appender writes a byte of them, beyond the rate rule's
    maximum, into the file the allocator made ready (not followed yet, and left unmapped),
    and never creates a file."""
    file_size = 256 * MIB
    commitlog = CommitLog(str(tmp_path / "commitlog"), file_size)
    path = commitlog.mapped_file_queue.last_mapped_file(0).path
    window = PrefaultWindow(commitlog, 0)
    coming = 3 * WINDOW_MAX_BYTES
    try:
        assert window.advance(0, coming_bytes=0) == 0 and disk_bytes(path) == 0
        # Nothing written yet: the coming bytes alone open the window.
        assert window.advance(0, coming_bytes=coming) == coming
        assert window.prefaulted_position == coming
        assert coming <= disk_bytes(path) <= coming + MIB
        assert window.advance(0, coming_bytes=coming) == 0       # covered already
        # The writer moves: the rate rule applies again beside what is still coming.
        assert window.advance(coming - MIB, coming_bytes=coming) == coming - MIB
        assert window.prefaulted_position == 2 * coming - MIB
        # Under SYNC_FLUSH a turn populates at most bytes_max of it.
        assert window.advance(coming, MIB, coming_bytes=2 * coming) == MIB
        assert window.prefaulted_position == 2 * coming
        # Up to the end of the last existing file: here the one being written.
        assert window.advance(coming, coming_bytes=file_size) == file_size - 2 * coming
        assert window.prefaulted_position == file_size
        # The allocator makes the next file ready: the window goes on into it.
        ready = MappedFile(str(tmp_path / "commitlog" / offset_file_name(file_size)),
                           file_size)
        ready.close()
        assert window.advance(coming, coming_bytes=file_size) == coming
        assert window.prefaulted_position == file_size + coming
        assert coming <= disk_bytes(ready.path) <= coming + MIB
        assert len(commitlog.mapped_file_queue.mapped_files) == 1
        # Beyond it nothing: no third file appears.
        assert window.advance(coming, coming_bytes=4 * file_size) == file_size - coming
        assert window.prefaulted_position == 2 * file_size
        assert sorted(os.listdir(tmp_path / "commitlog")) == \
            [offset_file_name(0), offset_file_name(file_size)]
    finally:
        commitlog.shutdown(0)


@pytest.mark.dataplane
def test_writer_and_prefaulting_process_share_the_file_safely(tmp_path):
    file_size = 16 * MIB
    queue_dir = str(tmp_path / "commitlog")
    writer_queue = MappedFileQueue(queue_dir, file_size)
    writer = writer_queue.last_mapped_file(0)
    helper = CommitLog(queue_dir, file_size)
    assert helper.load()
    helper_file = helper.mapped_file_queue.mapped_files[0]
    records = [(b"%06d|" % index) * 20 for index in range(100_000)]
    pid = os.fork()
    if pid == 0:      # the writer: appends through its own (shared) mapping
        status = 1
        try:
            for record in records:
                writer.append(record)
            status = 0
        finally:
            os._exit(status)
    populates, done, status = 0, 0, 0
    try:
        while not done:
            assert helper_file.prefault(0, file_size) == 0
            populates += 1
            done, status = os.waitpid(pid, os.WNOHANG)
    except BaseException:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise
    assert os.waitstatus_to_exitcode(status) == 0
    expected = b"".join(records)
    assert bytes(writer.buffer()[:len(expected)]) == expected
    assert not any(writer.buffer()[len(expected):])
    assert populates >= 1
    writer_queue.shutdown(0)
    helper.shutdown(0)


@pytest.mark.parametrize("warm", [False, True])
def test_warm_option_faults_new_commitlog_files_in_whole(tmp_path, warm):
    commitlog = CommitLog(str(tmp_path / "commitlog"), 4 * MIB, warm=warm)
    try:
        mapped_file = commitlog.mapped_file_queue.last_mapped_file(0)
        allocated = disk_bytes(mapped_file.path)
        assert allocated >= 4 * MIB if warm else allocated == 0
    finally:
        commitlog.shutdown(0)


def test_a_call_can_be_capped_and_the_window_catches_up(tmp_path):
    commitlog = CommitLog(str(tmp_path / "commitlog"), 64 * MIB)
    commitlog.mapped_file_queue.last_mapped_file(0)
    window = PrefaultWindow(commitlog, 0)
    try:
        assert window.advance(8 * MIB, bytes_max=MIB) == MIB
        assert window.prefaulted_position == 9 * MIB
        # Still growing fast: less than half the (16 MiB) window is ahead, the next MiB goes.
        assert window.advance(12 * MIB, bytes_max=MIB) == MIB
        assert window.prefaulted_position == 13 * MIB
        # A trickle: the minimum window, and more than half of it is ahead already.
        assert window.advance(12 * MIB + 100, bytes_max=MIB) == 0
    finally:
        commitlog.shutdown(0)
