# The allocator makes the next CommitLog file ready ahead of the writer (Java's allocate service).
"""Goal: with the writer in file N the allocator creates files N+1 and N+2 (sparse, or with
warmMapedFileEnable fallocated, faulted in whole and mlocked where permitted) and every further
file that bytes known to come soon reach, never a file after a missing one, never replaces a
file the writer created first, and unlocks a file once the writer moved past it; what it did
shows in the flusher's instruments.

Method: a real FileAllocator thread on a temp CommitLog directory of 1 MiB files, the writer
played by the test; residency by mincore (pybroker.prof.residency), allocation by st_blocks,
locking by VmLck of /proc/self/status.
"""
import os

import pytest

from pybroker.prof.residency import FileResidency
from pybroker._fast.stats import StatsCounter
from pybroker.stats.region import private_writer
from pybroker.store.control_block import FLUSHER
from pybroker.store import paths
from pybroker.errors import ServiceFailedError
from pybroker.store.allocate import FileAllocator
from pybroker.store.mapped_file import MappedFile

FILE_BYTES = 1 << 20


def _locked_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmLck:"):
                return int(line.split()[1]) * 1024
    return 0


@pytest.fixture
def commitlog_dir(tmp_path):
    directory = str(tmp_path / "commitlog")
    os.makedirs(directory)
    return directory


def _allocator(directory: str, warm: bool, stats=None) -> FileAllocator:
    return FileAllocator(directory, FILE_BYTES, warm=warm, sync_flush=warm,
                         flush_least_pages=64, stats=stats or private_writer(FLUSHER.stats_section))


def test_next_file_is_created_sparse_and_never_after_a_missing_one(commitlog_dir):
    stats = private_writer(FLUSHER.stats_section)
    allocator = _allocator(commitlog_dir, warm=False, stats=stats)
    try:
        allocator.advance(1000)                 # file 0 does not exist: nothing ahead of it
        assert not allocator.wait_prepared(FILE_BYTES, 0.5)
        assert os.listdir(commitlog_dir) == []
        writer_file = MappedFile(paths.offset_file_path(commitlog_dir, 0), FILE_BYTES)
        allocator.advance(2000)
        assert allocator.wait_prepared(2 * FILE_BYTES, 10)
        next_path = paths.offset_file_path(commitlog_dir, FILE_BYTES)
        assert os.path.getsize(next_path) == FILE_BYTES
        assert os.stat(next_path).st_blocks == 0          # sparse: no disk used yet
        assert not os.path.exists(paths.offset_file_path(commitlog_dir, 3 * FILE_BYTES))
        assert stats.get(StatsCounter.MAPPED_FILES_CREATED) == 2
        # The writer rolls: it maps the file the allocator made (same inode), and the
        # allocator prepares the one after the next.
        inode = os.stat(next_path).st_ino
        rolled = MappedFile(next_path, FILE_BYTES)
        assert os.stat(next_path).st_ino == inode
        allocator.advance(FILE_BYTES + 10)
        assert allocator.wait_prepared(3 * FILE_BYTES, 10)
        rolled.shutdown(0)
        writer_file.shutdown(0)
    finally:
        allocator.close()
    assert sorted(os.listdir(commitlog_dir)) == [
        os.path.basename(paths.offset_file_path(commitlog_dir, n * FILE_BYTES))
        for n in range(4)]


def test_the_files_bytes_known_to_come_reach_are_made_ready_too(commitlog_dir):
    """The timer's re-puts of slots due soon (the flusher passes the control block's timer
    ahead line): every file they reach is made ready, beyond the next two, sparse; none past
    them; and as the writer moves the files its coming bytes reach from there."""
    allocator = _allocator(commitlog_dir, warm=False)
    writer_file = MappedFile(paths.offset_file_path(commitlog_dir, 0), FILE_BYTES)
    try:
        allocator.advance(1000, coming_bytes=4 * FILE_BYTES)     # reaches into file 4
        assert allocator.wait_prepared(4 * FILE_BYTES, 10)
        assert not allocator.wait_prepared(5 * FILE_BYTES, 0.3)
        for n in range(1, 5):
            assert os.stat(paths.offset_file_path(commitlog_dir, n * FILE_BYTES)).st_blocks == 0
        allocator.advance(2 * FILE_BYTES, coming_bytes=4 * FILE_BYTES - 1)   # file 5's last byte
        assert allocator.wait_prepared(5 * FILE_BYTES, 10)
        assert not allocator.wait_prepared(6 * FILE_BYTES, 0.3)
    finally:
        allocator.close()
        writer_file.shutdown(0)
    assert len(os.listdir(commitlog_dir)) == 6


def test_a_file_the_writer_created_first_is_kept(commitlog_dir):
    MappedFile(paths.offset_file_path(commitlog_dir, 0), FILE_BYTES).shutdown(0)
    next_path = paths.offset_file_path(commitlog_dir, FILE_BYTES)
    writer_next = MappedFile(next_path, FILE_BYTES)
    writer_next.append(b"written by the writer")
    inode = os.stat(next_path).st_ino
    allocator = _allocator(commitlog_dir, warm=True)
    try:
        allocator.advance(FILE_BYTES - 100)
        assert allocator.wait_prepared(FILE_BYTES, 20)
    finally:
        allocator.close()
    assert os.stat(next_path).st_ino == inode
    with open(next_path, "rb") as data:
        assert data.read(21) == b"written by the writer"   # warming stored nothing
    writer_next.shutdown(0)


def test_warm_files_are_allocated_resident_and_locked_while_current(commitlog_dir):
    stats = private_writer(FLUSHER.stats_section)
    baseline = _locked_bytes()
    allocator = _allocator(commitlog_dir, warm=True, stats=stats)
    residency = FileResidency()
    try:
        allocator.advance(0)
        assert allocator.wait_prepared(2 * FILE_BYTES, 20)
        for base in (0, FILE_BYTES, 2 * FILE_BYTES):
            path = paths.offset_file_path(commitlog_dir, base)
            assert os.stat(path).st_blocks * 512 >= FILE_BYTES     # fallocated
            assert residency.resident_pages(path) == (FILE_BYTES // 4096, FILE_BYTES // 4096)
        locked = stats.get(StatsCounter.LOCKED_BYTES)
        assert locked in (0, 3 * FILE_BYTES)
        if locked:                              # mlock permitted here
            assert _locked_bytes() - baseline == 3 * FILE_BYTES
        allocator.advance(FILE_BYTES + 1)       # the writer rolled: file 0 is let go
        assert allocator.wait_prepared(3 * FILE_BYTES, 20)
        if locked:
            assert stats.get(StatsCounter.LOCKED_BYTES) == 3 * FILE_BYTES
            assert _locked_bytes() - baseline == 3 * FILE_BYTES
        assert stats.get(StatsCounter.MAPPED_FILES_CREATED) == 4
        assert stats.get(StatsCounter.ALLOCATE_FAULTS) >= 4 * FILE_BYTES // 4096
    finally:
        residency.close()
        allocator.close()
    assert _locked_bytes() == baseline


def test_a_clean_stop_deletes_the_files_made_ready_beyond_the_end(commitlog_dir):
    writer_file = MappedFile(paths.offset_file_path(commitlog_dir, 0), FILE_BYTES)
    allocator = _allocator(commitlog_dir, warm=False)
    allocator.advance(5000)
    assert allocator.wait_prepared(2 * FILE_BYTES, 10)
    allocator.close(discard_from=5000)
    writer_file.shutdown(0)
    assert os.listdir(commitlog_dir) == [os.path.basename(writer_file.path)]


def test_a_failing_round_is_logged_and_retried_and_endless_failures_reach_the_owner(
        commitlog_dir, monkeypatch, caplog):
    """An unexpected error in the allocator thread is logged with its cause and the round
    tried again (pybroker/tasks.py's Rounds); an invariant violation ends the thread, which is
    logged with its traceback and raised to the owner by the next advance (the flusher then
    fail-stops). The failures are injected into the thread's round."""
    allocator = _allocator(commitlog_dir, warm=False)
    real = allocator._prepare_for
    failures = []

    def failing_once(written: int, coming: int) -> None:
        if not failures:
            failures.append(written)
            raise OSError("injected failure")
        real(written, coming)
    monkeypatch.setattr(allocator, "_prepare_for", failing_once)
    monkeypatch.setattr("pybroker.store.allocate._IDLE_WAIT_S", 0.05)
    try:
        MappedFile(paths.offset_file_path(commitlog_dir, 0), FILE_BYTES).shutdown(0)
        with caplog.at_level("ERROR", logger="pybroker.store.allocate"):
            allocator.advance(1000)
            assert allocator.wait_prepared(FILE_BYTES, 10), "the round was not tried again"
        assert failures == [1000]
        assert "a round failed (1 in a row" in caplog.text and "injected failure" in caplog.text

        def broken(written: int, coming: int) -> None:
            raise AssertionError("injected invariant violation")
        monkeypatch.setattr(allocator, "_prepare_for", broken)
        caplog.clear()
        with caplog.at_level("ERROR", logger="pybroker.store.allocate"):
            allocator.advance(FILE_BYTES + 10)
            allocator._thread.join(10)
        assert not allocator._thread.is_alive()
        assert "allocate ended by an error: injected invariant violation" in caplog.text
        with pytest.raises(ServiceFailedError, match="injected invariant violation"):
            allocator.advance(FILE_BYTES + 20)
    finally:
        allocator.close()
