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
Only files that exist are populated: the next CommitLog file is created by the appender when
it rolls, and the window catches up on the next call.

A refused populate means the disk has no room for the blocks (the appender would take SIGBUS on
those pages; the disk-ratio checks refuse puts well before): logged once per file. A kernel
without the call (before Linux 5.14) turns the window off with one log line.
"""
import errno
import logging

from pybroker.store.commitlog import CommitLog

log = logging.getLogger("pybroker.store.prefault")

WINDOW_MIN_BYTES = 256 << 10
WINDOW_MAX_BYTES = 32 << 20
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

    def advance(self, written_position: int, bytes_max: int | None = None) -> int:
        """Populate ahead of ``written_position``, at most ``bytes_max`` bytes in this call
        (None: the whole window); returns the bytes populated."""
        grown = written_position - self.seen_position
        if grown <= 0 or not self.enabled:
            return 0
        self.seen_position = written_position
        window = self.window_bytes(grown)
        if self.prefaulted_position - written_position >= window // 2:
            return 0
        start = max(self.prefaulted_position, written_position)
        end = written_position + window
        if bytes_max is not None:
            end = min(end, start + bytes_max)
        populated = 0
        queue = self.commitlog.mapped_file_queue
        while start < end:
            mapped_file = queue.find_mapped_file_by_offset(start)
            if mapped_file is None:
                break      # the next file does not exist yet
            base = mapped_file.file_from_offset
            stop = min(end, base + mapped_file.file_size)
            refusal = mapped_file.prefault(start - base, stop - base)
            if refusal:
                self._refused(mapped_file.path, base, refusal)
                break
            populated += stop - start
            start = stop
        self.prefaulted_position = max(self.prefaulted_position, start)
        return populated

    def _refused(self, path: str, base: int, refusal: int) -> None:
        if refusal == errno.EINVAL:
            self.enabled = False
            log.warning("the kernel lacks MADV_POPULATE_WRITE: the appender faults CommitLog "
                        "pages in itself")
        elif base not in self._refused_files:
            self._refused_files.add(base)
            log.error("%s: cannot reserve pages ahead of the writer (disk full?); the appender "
                      "faults them itself", path)
