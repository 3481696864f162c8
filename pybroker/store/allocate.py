# The next CommitLog file made ready ahead of the writer, off the append path (Java's allocator).
"""Java's AllocateMappedFileService for the CommitLog, as a thread of the flusher process.

The appender would otherwise create each new CommitLog file itself when it rolls: create,
size, map, and with ``warmMapedFileEnable`` fallocate and fault in a whole file (seconds per
GiB) while every put waits. The allocator keeps the file after the one being written ready
instead: :meth:`FileAllocator.advance` (the flusher, once per turn, with the written
position) names the files wanted, the next two as Java's (next and next-next: a flusher turn
is up to flushIntervalCommitLog apart), and beyond them every file that bytes known to be
written soon reach (the timer's re-puts of slots due soon, the control block's timer ahead
line: a burst of them is appended at once, and the pre-fault of store/prefault.py covers only
files that exist), and the thread prepares them:

* creates it (sparse, or fallocated with ``warmMapedFileEnable``) under its store name; the
  creation links a finished temporary file into place and never replaces one, so when the
  appender gets there first both use the same file (:mod:`pybroker.store.mapped_file`);
* with ``warmMapedFileEnable``: faults every page in writable with MADV_POPULATE_WRITE (Java
  stores a zero byte per page; populating stores nothing, so it is safe even if the appender
  already writes into the file), under SYNC_FLUSH msyncing every
  ``flushLeastPagesWhenWarmMapedFile`` pages as Java does, so the zero pages do not pile up
  into one long writeback ahead of the acknowledged data; then mlocks the file where the
  process may (RLIMIT_MEMLOCK or CAP_IPC_LOCK) and keeps it locked while it is the next or
  the current file, as Java's warmMappedFile/munlock do. The current file is warmed from the
  written position at start.

The GIL is released during populate, msync and mlock (``pybroker._fast.pagecache``), so the
flusher's main thread keeps flushing meanwhile. A failure (disk full) is logged once per file
and the file left to the appender, which then creates or faults it itself.
"""
import logging
import os
import threading
import time

from pybroker._fast.stats import StatsCounter, StatsHistogram, StatsWriter
from pybroker.errors import ServiceFailedError
from pybroker.store import paths
from pybroker.store.mapped_file import MappedFile, thread_faults
from pybroker.tasks import Rounds, start_thread

__all__ = ["FileAllocator"]

log = logging.getLogger("pybroker.store.allocate")

_IDLE_WAIT_S = 1.0
_WARM_CHUNK_PAGES_ASYNC = 4096      # ASYNC_FLUSH: populate 16 MiB per call (stop checks)


class FileAllocator:
    """Prepares the CommitLog files after the written one (see the module docstring).

    ``stats``: the flusher's section (MAPPED_FILES_CREATED, LOCKED_BYTES, ALLOCATE_US,
    ALLOCATE_FAULTS).
    """

    def __init__(self, commitlog_dir: str, file_size: int, *, warm: bool, sync_flush: bool,
                 flush_least_pages: int, stats: StatsWriter):
        self.commitlog_dir = commitlog_dir
        self.file_size = file_size
        self.warm = warm
        self.sync_flush = sync_flush
        pages = flush_least_pages if sync_flush else _WARM_CHUNK_PAGES_ASYNC
        self.chunk_bytes = max(pages, 1) * os.sysconf("SC_PAGE_SIZE")
        self.stats = stats
        self._condition = threading.Condition()
        self._wanted = (-1, 0)          # the writer's position, the bytes coming after it
        self._stopped = False
        self._prepared: dict[int, MappedFile] = {}     # base -> file mapped (and locked)
        self._locked: set[int] = set()
        self._refused: set[int] = set()       # warming refused (no room): left to the writer
        self._logged: set[int] = set()
        self._lock_refused = False
        self.prepared_total = 0
        # The thread's end by an error (pybroker/tasks.py): raised to the owner by advance.
        self.failure: BaseException | None = None
        self._thread = start_thread(self._run, "allocate", self._failed, log)

    def _failed(self, error: BaseException) -> None:
        with self._condition:
            self.failure = error

    def advance(self, written_position: int, coming_bytes: int = 0) -> None:
        """The writer reached ``written_position`` (bytes) and ``coming_bytes`` more are
        known to come soon: prepare what follows. ServiceFailedError once the thread has
        ended by an error (an invariant violation, or ROUND_FAILURES_MAX failing rounds in a
        row): its owner stops, as after any service's failure
        (docs/architecture/services.md)."""
        if self.failure is not None:
            raise ServiceFailedError(f"the CommitLog file allocator ended: "
                                     f"{type(self.failure).__name__}: {self.failure}") \
                from self.failure
        wanted = (written_position, max(coming_bytes, 0))
        with self._condition:
            if wanted != self._wanted:
                self._wanted = wanted
                self._condition.notify()

    def close(self, discard_from: int | None = None) -> None:
        """Stop the thread, unlock and unmap what it prepared. ``discard_from``: on a clean
        stop (the writer has exited), the final written position: files prepared at or
        beyond it hold nothing and are deleted, as Java's allocator does at shutdown (the
        next start's normal recovery scans the last three files, which must be real ones)."""
        with self._condition:
            self._stopped = True
            self._condition.notify()
        self._thread.join()
        for base in list(self._prepared):
            mapped_file = self._release(base)
            if discard_from is not None and base >= discard_from:
                log.info("allocator: %s unused, deleted", mapped_file.path)
                mapped_file.destroy(0)

    def wait_prepared(self, base: int, timeout_s: float) -> bool:
        """True once the file starting at ``base`` is prepared (tests, tools)."""
        deadline = time.monotonic() + timeout_s
        with self._condition:
            while base not in self._prepared and time.monotonic() < deadline:
                self._condition.wait(0.05)
            return base in self._prepared

    def _run(self) -> None:
        handled = (-1, 0)
        # A failing round is logged and tried again a while later (pybroker/tasks.py).
        rounds = Rounds("CommitLog file allocator", logger=log)
        while True:
            with self._condition:
                while not self._stopped and self._wanted == handled:
                    self._condition.wait(_IDLE_WAIT_S)
                if self._stopped:
                    return
                wanted = self._wanted
            with rounds:
                self._prepare_for(*wanted)
                handled = wanted
            if rounds.failures:
                with self._condition:
                    self._condition.wait_for(lambda: self._stopped, _IDLE_WAIT_S)

    def _prepare_for(self, written: int, coming: int) -> None:
        """The files the writer at ``written`` needs next (``coming`` bytes more known to
        come soon), prepared; those behind released."""
        current = written - written % self.file_size
        for base in [b for b in self._prepared if b < current]:
            self._release(base)      # the writer moved on: Java's munlock after a roll
        if self.warm and current not in self._prepared:
            self._prepare(current, written - current)
        # The next two files, as Java's allocator (next and next-next), and every file the
        # coming bytes reach. Never a file after one that does not exist: a writer starting
        # now would take the later file for its current one.
        reached = written + coming
        last = max(current + 2 * self.file_size, reached - reached % self.file_size)
        for base in range(current + self.file_size, last + 1, self.file_size):
            previous = paths.offset_file_path(self.commitlog_dir, base - self.file_size)
            if base in self._prepared:
                continue
            if not os.path.exists(previous):
                break
            self._prepare(base, 0)

    def _prepare(self, base: int, from_position: int) -> None:
        if base in self._refused:
            return
        path = paths.offset_file_path(self.commitlog_dir, base)
        started, faults = time.monotonic_ns(), thread_faults()
        created = not os.path.exists(path)
        try:
            os.makedirs(self.commitlog_dir, exist_ok=True)      # a fresh store
            mapped_file = MappedFile(path, self.file_size,
                                     allocation="fallocate" if self.warm else "sparse")
        except OSError as error:           # tried again when the writer moves
            if base not in self._logged:
                self._logged.add(base)
                log.error("allocator: cannot create %s ahead of the writer: %s", path, error)
            return
        if self.warm and not self._warm(mapped_file, from_position):
            mapped_file.shutdown(0)
            return
        if self.warm:
            self._lock(base, mapped_file)
        stats = self.stats
        if created:
            stats.add(StatsCounter.MAPPED_FILES_CREATED)
        stats.record(StatsHistogram.ALLOCATE_US, (time.monotonic_ns() - started) // 1000)
        stats.add(StatsCounter.ALLOCATE_FAULTS, thread_faults() - faults)
        self.prepared_total += 1
        with self._condition:
            self._prepared[base] = mapped_file
            self._condition.notify_all()

    def _warm(self, mapped_file: MappedFile, from_position: int) -> bool:
        """Fault the file in from ``from_position``; False when stopped or refused."""
        position = from_position - from_position % self.chunk_bytes
        while position < self.file_size:
            if self._stopped:
                return False
            end = min(position + self.chunk_bytes, self.file_size)
            refusal = mapped_file.prefault(position, end)
            if refusal:
                self._refused.add(mapped_file.file_from_offset)
                log.error("allocator: cannot fault in %s (%s); the writer faults it itself",
                          mapped_file.path, os.strerror(refusal))
                return False
            if self.sync_flush:
                mapped_file.sync_range(position, end)   # Java's force every N pages
            position = end
        return True

    def _lock(self, base: int, mapped_file: MappedFile) -> None:
        refusal = mapped_file.lock_pages()
        if refusal == 0:
            self._locked.add(base)
            self.stats.add(StatsCounter.LOCKED_BYTES, self.file_size)
        elif not self._lock_refused:
            self._lock_refused = True
            log.warning("allocator: mlock of CommitLog files refused (%s): they stay "
                        "evictable (raise RLIMIT_MEMLOCK or grant CAP_IPC_LOCK)",
                        os.strerror(refusal))

    def _release(self, base: int) -> MappedFile:
        with self._condition:
            mapped_file = self._prepared.pop(base)
        if base in self._locked:
            self._locked.discard(base)
            mapped_file.unlock_pages()
            stats = self.stats
            stats.set(StatsCounter.LOCKED_BYTES,
                      max(stats.get(StatsCounter.LOCKED_BYTES) - self.file_size, 0))
        mapped_file.shutdown(0)
        return mapped_file
