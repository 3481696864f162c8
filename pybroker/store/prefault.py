# A bounded window of CommitLog pages faulted in ahead of the writer, from a helper process.
"""Keep the pages just beyond the CommitLog's written position faulted in, off the append path.

Store files are sparse (:mod:`pybroker.store.mapped_file`): the first store into each fresh page
costs the writer a page-cache allocation and a block reservation, 3.5 µs per 4 KiB on this box.
A process that maps the same files read-write (the flusher) calls :meth:`PrefaultWindow.advance`
with the written position; it populates ``[written, written + window)`` with
``MADV_POPULATE_WRITE`` (no byte changes, so it is safe while the appender writes there), and the
appender's own first store into those pages becomes a minor fault (1.5 µs per page).

The window follows the write rate: twice what was written since the previous call, at least
``WINDOW_MIN_BYTES`` and at most ``WINDOW_MAX_BYTES``, refilled only when less than half of it
is left, so an idle store reserves nothing more and a busy one gets one ``madvise`` per refill.
A write known to be coming widens it ahead of time: the 5.x timer's re-puts of the slots it
plans ahead, beginning within 3 s, and what its running slot has not put (``coming_bytes``,
the control block's timer ahead line), are appended at once when they fall due, faster than
the rate rule can follow (a 200,000-message burst had the appender spend about half of its CPU
in faults of fresh pages: zeroing and block reservation), so the window then covers them whole
before they fall due.
Only files that exist are populated: beyond the files this process follows, the ones the
allocator made ready (store/allocate.py) are mapped for the populate and unmapped after it
(never created here); past them the window catches up on a later call.

A refused populate means the disk has no room for the blocks (the appender would take SIGBUS on
those pages; the disk-ratio checks refuse puts well before): logged once per file. A kernel
without the call (before Linux 5.14) turns the window off with one log line.
"""
import errno
import logging
import mmap
import os

from pybroker._fast import pagecache
from pybroker.store.commitlog import CommitLog
from pybroker.store.mapped_file import offset_file_name

log = logging.getLogger("pybroker.store.prefault")

WINDOW_MIN_BYTES = 256 << 10
WINDOW_MAX_BYTES = 32 << 20
# The most of the bytes known to come (the timer's re-puts of slots due soon) faulted in and
# made ready ahead: page cache the appender fills within seconds (AHEAD_MS of the timer).
COMING_BYTES_MAX = 1 << 30
assert WINDOW_MIN_BYTES <= WINDOW_MAX_BYTES


class PrefaultWindow:
    """Pages of ``commitlog`` (mapped read-write in this process) kept faulted ahead of the
    written position. Offsets are global CommitLog offsets, bytes."""

    def __init__(self, commitlog: CommitLog, written_position: int):
        self.commitlog = commitlog
        self.seen_position = written_position
        self.prefaulted_position = written_position
        self._refused_files: set[int] = set()
        self.enabled = True

    def window_bytes(self, grown_bytes: int) -> int:
        """The window for a writer that wrote ``grown_bytes`` since the previous call."""
        return min(WINDOW_MAX_BYTES, max(2 * grown_bytes, WINDOW_MIN_BYTES))

    def advance(self, written_position: int, bytes_max: int | None = None,
                coming_bytes: int = 0) -> int:
        """Populate ahead of ``written_position``, at most ``bytes_max`` bytes in this call
        (None: the whole window); ``coming_bytes`` are known to be written soon (the window
        then covers them whole). Returns the bytes populated."""
        grown = written_position - self.seen_position
        if not self.enabled or (grown <= 0 and coming_bytes <= 0):
            return 0
        ahead = self.prefaulted_position - written_position
        window = coming_bytes if ahead < coming_bytes else 0
        if grown > 0:
            self.seen_position = written_position
            rate_window = self.window_bytes(grown)
            if ahead < rate_window // 2:
                window = max(window, rate_window)
        if window <= 0:
            return 0
        start = max(self.prefaulted_position, written_position)
        end = written_position + window
        if bytes_max is not None:
            end = min(end, start + bytes_max)
        populated = 0
        queue = self.commitlog.mapped_file_queue
        file_size = self.commitlog.file_size
        while start < end:
            mapped_file = queue.find_mapped_file_by_offset(start)
            base = start - start % file_size if mapped_file is None \
                else mapped_file.file_from_offset
            stop = min(end, base + file_size)
            refusal: int | None
            if mapped_file is not None:
                refusal = mapped_file.prefault(start - base, stop - base)
            else:
                refusal = self._populate_ready(
                    os.path.join(queue.store_path, offset_file_name(base)), file_size,
                    start - base, stop - base)
            if refusal is None:
                break          # the next file does not exist yet
            if refusal:
                self._refused(os.path.join(queue.store_path, offset_file_name(base)), base,
                              refusal)
                break
            populated += stop - start
            start = stop
        self.prefaulted_position = max(self.prefaulted_position, start)
        return populated

    @staticmethod
    def _populate_ready(path: str, file_size: int, start: int, end: int) -> int | None:
        """Populate ``[start, end)`` of a ready file this process does not follow yet,
        through a map of its own unmapped at once (the pages stay in the page cache); None
        when the file is not there whole (it is never created here)."""
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return None
        try:
            if os.fstat(fd).st_size != file_size:
                return None
            with mmap.mmap(fd, file_size, mmap.MAP_SHARED) as mapping:
                return pagecache.populate(mapping, start, end)
        finally:
            os.close(fd)

    def _refused(self, path: str, base: int, refusal: int) -> None:
        if refusal == errno.EINVAL:
            self.enabled = False
            log.warning("the kernel lacks MADV_POPULATE_WRITE: the appender faults CommitLog "
                        "pages in itself")
        elif base not in self._refused_files:
            self._refused_files.add(base)
            log.error("%s: cannot reserve pages ahead of the writer (disk full?); the appender "
                      "faults them itself", path)
