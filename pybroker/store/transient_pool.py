# The transient store pool and the commit step (transientStorePoolEnable, as in Java RocketMQ).
"""Appends into off-file buffers; a commit step writes them to the CommitLog file.

With ``transientStorePoolEnable`` on an ASYNC_FLUSH master (Java 4.9's rule,
``StoreConfig.transient_store_pool_active``) the appender copies records into a buffer of
:class:`TransientStorePool` (anonymous memory, mlocked where permitted, one file long) attached
to the CommitLog file being filled, instead of into the file's mapping. :class:`CommitStep`
writes the buffer's new bytes to the file with ``pwrite`` (Java: ``FileChannel.write``):

* after a drain (Java: every put wakes CommitRealTimeService) and every
  ``commitIntervalCommitLog`` ms, when at least ``commitCommitLogLeastPages`` pages are
  pending, or any byte once ``commitCommitLogThoroughInterval`` ms passed since the last commit;
* at once, whatever is pending, when the file is rolled (its buffer then goes back to the
  pool), on a topic deletion and when the appender stops.

What the other processes read (dispatch, pulls, HA) is only what is committed: the appender
publishes the committed offset as ``written_position`` (Java serves reads up to
``MappedFile.getReadPosition()`` = the committed position). The flusher then msyncs up to it
(``vfs_fsync_range`` on Linux, the same durability as Java's ``FileChannel.force``).

Durability, as Java: a send is acknowledged once it is in the buffer (ASYNC_FLUSH), so on a
crash of the broker process (kill -9) the acknowledged messages not yet committed are lost -
at most about ``commitCommitLogThoroughInterval`` ms of sends, or ``commitCommitLogLeastPages``
pages. Committed ones are in the page cache and survive a process crash; flushed ones survive
a machine crash. Java documents the same trade (the pool memory is process memory).

One buffer is in use at a time: a rolled file is committed whole before its successor takes a
buffer, so the pool never runs dry and puts are never refused for it (Java's
``isTransientStorePoolDeficient`` busy answer cannot happen); ``transientStorePoolSize`` caps
the buffers created (on demand, not all at start as Java does).
"""
import errno
import logging
import mmap
import time

from pybroker._fast import pagecache
from pybroker._fast.stats import StatsCounter, StatsHistogram
from pybroker.store.commitlog import CommitLog
from pybroker.store.mapped_file import MappedFile

__all__ = ["CommitStep", "TransientStorePool"]

log = logging.getLogger("pybroker.store.transient_pool")


class TransientStorePool:
    """At most ``size`` buffers of ``file_size`` bytes; ``lock`` mlocks each (Java does)."""

    def __init__(self, file_size: int, size: int, lock: bool = True):
        if size < 1:
            raise ValueError(f"transientStorePoolSize must be >= 1, got {size}")
        self.file_size = file_size
        self.size = size
        self.lock = lock
        self.created = 0
        self._free: list[mmap.mmap] = []

    @property
    def available(self) -> int:
        """Buffers a file could take now (free ones plus those not created yet)."""
        return len(self._free) + self.size - self.created

    def borrow(self) -> mmap.mmap | None:
        """A buffer for the next file; None when all ``size`` are in use."""
        if self._free:
            return self._free.pop()
        if self.created >= self.size:
            return None
        buffer = mmap.mmap(-1, self.file_size, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.created += 1
        if self.lock:
            refused = pagecache.lock(buffer, 0, self.file_size)
            if refused:
                log.warning("transient store pool: mlock of a %d-byte buffer refused (%s); "
                            "the buffer stays pageable", self.file_size,
                            errno.errorcode.get(refused, refused))
        return buffer

    def give_back(self, buffer: mmap.mmap) -> None:
        self._free.append(buffer)


class CommitStep:
    """When and how the pool's bytes reach the CommitLog file (module docstring); counts
    every commit in ``stats`` (COMMITS, COMMITTED_BYTES, COMMIT_US)."""

    def __init__(self, commitlog: CommitLog, pool: TransientStorePool, interval_ms: int,
                 least_pages: int, thorough_interval_ms: int, stats, clock_ms):
        self.commitlog = commitlog
        self.pool = pool
        self.interval_ms = interval_ms
        self.least_pages = least_pages
        self.thorough_interval_ms = thorough_interval_ms
        self.stats = stats
        self.clock_ms = clock_ms
        self.last_commit_ms = 0

    @property
    def committed_where(self) -> int:
        return self.commitlog.mapped_file_queue.committed_where

    def pending(self) -> int:
        """Bytes appended and not committed."""
        return self.commitlog.max_offset() - self.committed_where

    def attach(self, mapped_file: MappedFile) -> bool:
        """Give the file being filled a pool buffer (no-op when it has one); False when the
        pool has none left."""
        if mapped_file.write_buffer is not None or mapped_file.is_full():
            return True
        buffer = self.pool.borrow()
        if buffer is None:
            return False
        mapped_file.attach_write_buffer(buffer)
        return True

    def wait_ms(self, now_ms: int) -> int | None:
        """How long the appender may sleep before the next commit is due; None when nothing
        is pending."""
        if self.pending() <= 0:
            return None
        due = min(self.last_commit_ms + self.thorough_interval_ms, now_ms + self.interval_ms)
        return max(1, due - now_ms)

    def run(self, force: bool = False) -> int:
        """One commit turn; ``force`` commits whatever is pending. Returns bytes committed."""
        if self.pending() <= 0:
            return 0
        now = self.clock_ms()
        least_pages = self.least_pages
        if force or now >= self.last_commit_ms + self.thorough_interval_ms:
            least_pages = 0
            self.last_commit_ms = now
        queue = self.commitlog.mapped_file_queue
        before = queue.committed_where
        started_ns = time.monotonic_ns()
        if not queue.commit(least_pages):
            return 0
        elapsed_us = (time.monotonic_ns() - started_ns) // 1000
        self.last_commit_ms = self.clock_ms()
        committed = queue.committed_where - before
        self._return_buffers(before)
        stats = self.stats
        stats.add(StatsCounter.COMMITS)
        stats.add(StatsCounter.COMMITTED_BYTES, committed)
        stats.record(StatsHistogram.COMMIT_US, elapsed_us)
        return committed

    def _return_buffers(self, from_offset: int) -> None:
        """Files committed to their end give their buffer back (Java: MappedFile.commit)."""
        queue = self.commitlog.mapped_file_queue
        mapped_file = queue.find_mapped_file_by_offset(from_offset, from_offset == 0)
        while mapped_file is not None and mapped_file.committed_position >= \
                mapped_file.file_size:
            buffer = mapped_file.detach_write_buffer()
            if buffer is not None:
                self.pool.give_back(buffer)
            mapped_file = queue.find_mapped_file_by_offset(
                mapped_file.file_from_offset + queue.mapped_file_size)
