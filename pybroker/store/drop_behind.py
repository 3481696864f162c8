# Page-table entries of store pages a process is done with, given back (MADV_DONTNEED).
"""Drop this process's mappings of CommitLog pages behind a moving position.

Every data-plane process maps the CommitLog whole: the appender writes it, the dispatcher reads
each record once behind it, the flusher faults pages in ahead of the appender (store/prefault.py).
Left alone, each of them keeps a page-table entry for every page it ever touched, so each
process's resident set grows with the bytes written until the file is unmapped (1 GiB per
CommitLog file), and every page is counted once per mapping process in RSS (split between them
in PSS). The data itself lives in the page cache, which the kernel manages with or without
those entries.

:class:`DropBehind` follows one position (the appender's written end, the dispatcher's reput
offset, the flusher's followed end) and, once that has moved ``step_bytes`` past what it last
dropped, calls ``madvise(MADV_DONTNEED)`` on the whole pages from there up to ``keep_bytes``
below the position. The files are mapped shared, so the call loses nothing: a dirty page stays
dirty in the page cache (msync and writeback still write it,
docs/architecture/store-files.md), and a later access maps the page again from the page cache
(a minor fault). Java keeps its whole CommitLog mapping resident in its one process; see
docs/benchmarks.md for what this changes in the measured PSS, and what it does not (the page
cache is the same).

Locked mappings (warmMapedFileEnable with the pages locked) refuse the call: the first refusal
turns the dropping off for the process with one log line.
"""
import logging

from pybroker.store.consume_queue import ConsumeQueueStore
from pybroker.store.index_file import IndexService
from pybroker.store.mapped_file import PAGE_SIZE_BYTES, MappedFileQueue

log = logging.getLogger("pybroker.store.drop_behind")

KEEP_BYTES = 1 << 20    # the last MiB below the position stays mapped (the page in use)
STEP_BYTES = 8 << 20    # one madvise per 8 MiB passed: ~4 per second at 30 MB/s
# Consume queues (6 MB files of 20-byte units) and IndexFile entries grow slower: finer steps.
LOGICS_KEEP_BYTES = 16 * PAGE_SIZE_BYTES
LOGICS_STEP_BYTES = 1 << 20
assert KEEP_BYTES % PAGE_SIZE_BYTES == 0 and STEP_BYTES > 0
_NEVER = 1 << 63        # due_position once dropping is off


class DropBehind:
    """Drops this process's page-table entries of ``queue``'s pages below a position.
    Offsets are global (file base + file position), bytes."""

    def __init__(self, queue: MappedFileQueue, keep_bytes: int = KEEP_BYTES,
                 step_bytes: int = STEP_BYTES):
        self.queue = queue
        self.keep_bytes = keep_bytes
        self.step_bytes = step_bytes
        # Everything below the first position given may have been read at start-up
        # (recovery, a table rebuilt): the first call drops from the first file on.
        self.dropped_position = max(queue.min_offset(), 0)
        self.enabled = True
        # Below this position advance() has nothing to do: a caller on a hot path may skip
        # the call (the appender, once per drain).
        self.due_position = self.dropped_position + keep_bytes + step_bytes

    def advance(self, position: int) -> int:
        """Drop the pages up to ``keep_bytes`` below ``position`` once that is ``step_bytes``
        beyond the last drop; returns the bytes of range given back (0 when not due)."""
        end = position - self.keep_bytes
        end -= end % PAGE_SIZE_BYTES
        if not self.enabled or end - self.dropped_position < self.step_bytes:
            return 0
        return self._drop(self.dropped_position, end)

    def sweep(self, position: int) -> int:
        """Drop every page from the first file up to ``keep_bytes`` below ``position``, for a
        process whose reads go back (a remoting worker serving consumers at any offset)."""
        end = position - self.keep_bytes
        end -= end % PAGE_SIZE_BYTES
        if not self.enabled:
            return 0
        return self._drop(max(self.queue.min_offset(), 0), end)

    def _drop(self, start: int, end: int) -> int:
        dropped = 0
        for mapped_file in list(self.queue.mapped_files):
            base = mapped_file.file_from_offset
            low, high = max(start, base), min(end, base + mapped_file.file_size)
            if low >= high:
                continue
            try:
                mapped_file.drop_pages(low - base, high - base)
            except OSError as error:
                self.enabled = False
                self.due_position = _NEVER
                log.warning("%s: pages behind the position stay mapped (%s)", mapped_file.path,
                            error.strerror)
                return dropped
            dropped += high - low
        self.dropped_position = max(self.dropped_position, end)
        self.due_position = self.dropped_position + self.keep_bytes + self.step_bytes
        return dropped


class LogicsDropBehind:
    """The dispatcher's consume queues and IndexFile entries: after each flush of the logics,
    the pages below what is flushed (consume queues) or written (index entries, in order)
    leave this process's page tables. The index's hash slots take random writes: they stay."""

    def __init__(self):
        self._queues: dict[int, tuple[object, DropBehind]] = {}
        self._index_dropped: dict[str, int] = {}

    def advance(self, queues: ConsumeQueueStore, index_service: IndexService | None) -> int:
        """Returns the bytes of range given back."""
        dropped = 0
        known, self._queues = self._queues, {}
        for queue in queues.queues():
            entry = known.get(id(queue))
            if entry is None or entry[0] is not queue:      # new (or re-created) queue
                entry = (queue, DropBehind(queue.mapped_file_queue, LOGICS_KEEP_BYTES,
                                           LOGICS_STEP_BYTES))
            self._queues[id(queue)] = entry
            dropped += entry[1].advance(queue.mapped_file_queue.flushed_where)
        if index_service is not None:
            dropped += self._advance_index(index_service)
        return dropped

    def _advance_index(self, index_service: IndexService) -> int:
        dropped, seen = 0, {}
        for index_file in index_service.index_files:
            first, written_end = index_file.entries_range()
            done = self._index_dropped.get(index_file.path, first)
            end = written_end - LOGICS_KEEP_BYTES
            end -= end % PAGE_SIZE_BYTES
            if end - done >= LOGICS_STEP_BYTES:
                try:
                    index_file.mapped_file.drop_pages(done, end)
                except OSError:
                    end = done         # locked: stays mapped
                dropped += max(end - done, 0)
                done = max(done, end)
            seen[index_file.path] = done
        self._index_dropped = seen
        return dropped
