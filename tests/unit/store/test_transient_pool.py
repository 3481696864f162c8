"""The transient store pool's commit step writes exactly the appended bytes to the file, when
Java's rule says so, and counts every commit.

Method: real CommitLog files in tmp_path; the file's bytes are read back with ``os.pread`` on a
separate descriptor (what any other process would see), before and after each commit step.
Time is a clock the test moves; the instruments are a real stats region read back with
:class:`~pybroker.stats.region.Snapshot`.
"""
import mmap
import os

import pytest

from pybroker._fast import stats as fast_stats
from pybroker.errors import DurabilityError
from pybroker._fast.stats import StatsCounter, StatsHistogram, StatsWriter
from pybroker.stats.region import Snapshot
from pybroker.store.control_block import APPENDER
from pybroker.store import layout
from pybroker.store.commitlog import CommitLog
from pybroker.store.mapped_file import PAGE_SIZE_BYTES, MappedFile, offset_file_name
from pybroker.store.status import PutStatus
from pybroker.store.transient_pool import CommitStep, TransientStorePool
from tests.unit.store.test_commitlog import body_for_size, encode

FILE_SIZE = 64 * 1024
WRITERS = APPENDER.stats_section + 8


class Clock:
    def __init__(self):
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def stats_region():
    buffer = mmap.mmap(-1, fast_stats.region_size(WRITERS))
    fast_stats.initialise(buffer, WRITERS, 0)
    return buffer, StatsWriter(buffer, APPENDER.stats_section)


def file_bytes(path: str, start: int, end: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, end - start, start)
    finally:
        os.close(fd)


def make_step(tmp_path, clock, least_pages=4, thorough_ms=200, pool_size=2):
    commitlog = CommitLog(str(tmp_path / "commitlog"), FILE_SIZE)
    commitlog.load()
    buffer, writer = stats_region()
    pool = TransientStorePool(FILE_SIZE, pool_size, lock=False)
    step = CommitStep(commitlog, pool, 200, least_pages, thorough_ms, writer, clock)
    return commitlog, step, buffer


def append(commitlog, step, record: bytes):
    """Append as the appender does: a run that does not fit rolls the file, the roll is
    committed at once, and the next file takes a pool buffer."""
    mapped_file = commitlog.writable_file()
    if len(record) + layout.END_FILE_MIN_BLANK_BYTES > mapped_file.remaining():
        commitlog.roll(mapped_file)
        step.run(force=True)
        mapped_file = commitlog.writable_file()
    assert step.attach(mapped_file)
    return commitlog.append_encoded(record, "TopicTest", 0, 1, 0, 1)


def test_a_mapped_file_with_a_buffer_writes_the_file_only_on_commit(tmp_path):
    mapped_file = MappedFile(str(tmp_path / offset_file_name(0)), FILE_SIZE)
    try:
        buffer = mmap.mmap(-1, FILE_SIZE)
        mapped_file.attach_write_buffer(buffer)
        assert mapped_file.append(b"a" * 5000)
        assert file_bytes(mapped_file.path, 0, 5000) == bytes(5000)     # not in the file yet
        assert not mapped_file.able_to_commit(2)                        # 1 page, 2 wanted
        assert mapped_file.commit(2) == 0
        assert mapped_file.commit(1) == 5000
        assert file_bytes(mapped_file.path, 0, 5000) == b"a" * 5000
        assert mapped_file.append(b"b" * 100)
        assert mapped_file.commit(0) == 5100
        assert file_bytes(mapped_file.path, 4990, 5100) == b"a" * 10 + b"b" * 100
        with pytest.raises(ValueError):
            mapped_file.write_at(10, b"late")          # below the committed position
        assert mapped_file.detach_write_buffer() is buffer
        assert mapped_file.commit(0) == mapped_file.wrote_position   # no buffer: follows
    finally:
        mapped_file.close()


def test_commit_step_follows_least_pages_and_the_thorough_interval(tmp_path):
    clock = Clock()
    commitlog, step, region = make_step(tmp_path, clock)
    try:
        small = encode(b"x" * 100)
        append(commitlog, step, small)
        clock.now += 1000
        assert step.run() == len(small)        # thorough interval passed: any byte commits
        mapped_file = commitlog.mapped_file_queue.mapped_files[0]
        path, pool_buffer = mapped_file.path, mapped_file.write_buffer
        assert file_bytes(path, 0, len(small)) == pool_buffer[:len(small)] != bytes(len(small))
        clock.now += 50
        append(commitlog, step, small)
        assert step.run() == 0                 # < 4 pages pending, 50 ms since the last one
        assert file_bytes(path, len(small), 2 * len(small)) == bytes(len(small))
        assert step.wait_ms(clock.now) == 150  # due when the thorough interval ends
        big = encode(b"y" * (4 * PAGE_SIZE_BYTES))
        append(commitlog, step, big)
        assert step.run() == len(small) + len(big)   # 4 pages pending
        assert step.pending() == 0 and step.wait_ms(clock.now) is None
        end = 2 * len(small) + len(big)
        assert file_bytes(path, 0, end) == pool_buffer[:end]
        assert [r.body.tobytes() for r in commitlog.record_iterator(0, end)] == \
            [b"x" * 100, b"x" * 100, b"y" * (4 * PAGE_SIZE_BYTES)]
        snapshot = Snapshot(bytes(region), WRITERS)
        assert snapshot.counter(StatsCounter.COMMITS) == 2
        assert snapshot.counter(StatsCounter.COMMITTED_BYTES) == end
        assert int(snapshot.histogram(StatsHistogram.COMMIT_US)[fast_stats.HIST_COUNT_WORD]) == 2
    finally:
        commitlog.shutdown(0)


def test_a_roll_commits_the_file_whole_and_gives_its_buffer_back(tmp_path):
    clock = Clock()
    commitlog, step, region = make_step(tmp_path, clock, pool_size=1)
    try:
        record = encode(body_for_size(20_000)[:20_000 - 200])
        appended = 0
        while len(commitlog.mapped_file_queue.mapped_files) < 3:
            result = append(commitlog, step, record)
            assert result.status == PutStatus.PUT_OK
            appended += 1
        # One buffer only, yet three files: each went back to the pool at its roll.
        assert step.pool.created == 1
        first, second, third = commitlog.mapped_file_queue.mapped_files
        assert first.write_buffer is None and second.write_buffer is None
        assert third.write_buffer is not None
        assert step.committed_where == third.file_from_offset
        # The BLANK marker reached the file through the commit.
        tail = first.wrote_position
        files_records = list(commitlog.record_iterator(0, step.committed_where))
        assert len(files_records) == appended - 1
        for message_record in files_records:
            message_record.body.release()
        assert tail == FILE_SIZE
        step.run(force=True)
        assert step.committed_where == commitlog.max_offset()
    finally:
        commitlog.shutdown(0)


def test_a_failed_write_raises_and_commits_nothing(tmp_path):
    clock = Clock()
    commitlog, step, _ = make_step(tmp_path, clock)
    try:
        append(commitlog, step, encode(b"z" * 10))
        mapped_file = commitlog.mapped_file_queue.mapped_files[0]
        os.close(mapped_file._commit_fd)
        mapped_file._commit_fd = os.open(mapped_file.path, os.O_RDONLY)   # write -> EBADF
        with pytest.raises(DurabilityError):
            step.run(force=True)
        assert step.committed_where == 0
    finally:
        commitlog.shutdown(0)


def test_pool_size_caps_the_buffers():
    pool = TransientStorePool(FILE_SIZE, 2, lock=False)
    first, second = pool.borrow(), pool.borrow()
    assert first is not None and second is not None and pool.borrow() is None
    assert pool.available == 0
    pool.give_back(first)
    assert pool.available == 1 and pool.borrow() is first
    with pytest.raises(ValueError):
        TransientStorePool(FILE_SIZE, 0)


def test_files_made_ready_beyond_the_end_are_not_the_append_target(tmp_path):
    """After a kill -9 the allocator's ready files stay; the writer must go on at the end."""
    directory = tmp_path / "commitlog"
    commitlog = CommitLog(str(directory), FILE_SIZE)
    commitlog.load()
    commitlog.append_encoded(encode(b"a" * 100), "TopicTest", 0, 1, 0, 1)
    end = commitlog.max_offset()
    commitlog.shutdown(0)
    for base in (FILE_SIZE, 2 * FILE_SIZE):           # what the allocator makes ready
        MappedFile(str(directory / offset_file_name(base)), FILE_SIZE).close()
    reopened = CommitLog(str(directory), FILE_SIZE)
    try:
        assert reopened.load() and len(reopened.mapped_file_queue.mapped_files) == 3
        assert reopened.mapped_file_queue.forget_files_beyond(end) == 2
        reopened.set_wrote_and_flushed(end)
        assert reopened.writable_file().file_from_offset == 0
        result = reopened.append_encoded(encode(b"b" * 100), "TopicTest", 0, 1, 0, 1)
        assert result.physical_offset == end
    finally:
        reopened.shutdown(0)
