# The instrument region: one file, one section per writer process, read from anywhere.
"""Create, attach and read the shared-memory instrument region (layout: ``_fast/stats.pxd``).

The supervisor creates the region once per broker start (not per generation): a worker of a
new generation attaches to the section its predecessor wrote and continues its counters, so
totals survive a worker restart. Which process writes which section is the worker table of
``pybroker/store/control_block.py`` (``Worker.stats_section``); the counter, histogram and key
enums are ``pybroker._fast.stats``'s.

Every word of a section has that section's process as its only writer. Readers take a
:func:`snapshot` and decode it here with numpy (no Python object per counter).
"""
import dataclasses
import mmap
import os

import numpy as np

from pybroker.store import disk_space
from pybroker._fast import stats as _stats
from pybroker._fast.stats import StatsCounter, StatsHistogram, StatsKeyKind, StatsWriter

__all__ = ["StatsRegion", "Snapshot", "KeyTotals", "PUT_DISTRIBUTE_BUCKETS", "private_writer"]

_WORDS_PER_SECTION = _stats.SECTION_BYTES // 8
_HIST_BLOCK = _stats.HISTOGRAMS_PER_WRITER * _stats.HIST_WORDS
assert _stats.SECTION_BYTES % 64 == 0
assert _stats.KEY_HEADER_BYTES + _stats.KEY_BYTES_MAX <= _stats.KEY_ENTRY_BYTES
assert 16 + 8 * _stats.KEY_WORDS <= _stats.KEY_HEADER_BYTES
assert _stats.HIST_MAX_WORD < _stats.HIST_WORDS
assert _stats.SECTION_HISTOGRAMS_OFFSET == 8 * _stats.COUNTERS_PER_WRITER
assert max(StatsCounter) < _stats.COUNTERS_PER_WRITER
assert max(StatsHistogram) < _stats.HISTOGRAMS_PER_WRITER
# Java's 13 put-latency buckets occupy PUT_DISTRIBUTE_0 .. PUT_DISTRIBUTE_0 + 12.
PUT_DISTRIBUTE_BUCKETS = 13
assert StatsCounter.PUT_DISTRIBUTE_0 + PUT_DISTRIBUTE_BUCKETS <= StatsCounter.KEYS_DROPPED


class StatsRegion:
    """The mapped region file at ``path``. :meth:`create` (the supervisor; it unlinks at
    :meth:`close`) or :meth:`attach` (any reader, e.g. ``pybroker prof``)."""

    def __init__(self, path: str, buffer: mmap.mmap, owner_pid: int | None):
        self.path = path
        self.buffer = buffer
        self.closed = False
        self.owner_pid = owner_pid
        self.writers = _stats.check_header(buffer)

    @classmethod
    def create(cls, path: str, writers: int, boot_ms: int,
               enabled: bool = True) -> "StatsRegion":
        size = _stats.region_size(writers)
        if os.path.lexists(path):
            os.unlink(path)     # never truncate a map another process may still hold
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            # Allocated (a few MiB): a sparse region would SIGBUS its writers on a full disk.
            disk_space.allocate(fd, size, path)
            # No MAP_POPULATE: key tables are large and mostly untouched.
            buffer = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        _stats.initialise(buffer, writers, boot_ms, enabled)
        return cls(path, buffer, os.getpid())

    @classmethod
    def attach(cls, path: str) -> "StatsRegion":
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            buffer = mmap.mmap(fd, os.fstat(fd).st_size, mmap.MAP_SHARED,
                               mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        return cls(path, buffer, None)

    @property
    def enabled(self) -> bool:
        """False: created with statsInstrumentsEnable=false, every section stays zero (a
        reader must not present those zeros as measured)."""
        return _stats.instruments_enabled(self.buffer)

    @property
    def boot_ms(self) -> int:
        return int(np.frombuffer(self.buffer, np.uint64, 1, _stats.STATS_BOOT_MS_OFFSET)[0])

    def writer(self, slot: int) -> StatsWriter:
        """The section of writer ``slot`` (call in the writing process; it records its pid
        there, so a profiler attached to the region knows which process is which)."""
        writer = StatsWriter(self.buffer, slot)
        writer.set(StatsCounter.PROCESS_ID, os.getpid())
        return writer

    def window_append(self, values: list[int]) -> None:
        """Append a sample row (the sampler only)."""
        _stats.window_append(self.buffer, values)

    def snapshot(self) -> "Snapshot":
        # A fresh anonymous map, not a bytes object: the copy writes only the entries in use,
        # so most of its pages are never backed, and the whole map goes back to the kernel
        # with the snapshot (a 4 MiB bytes copy a second stayed in the supervisor's heap).
        copy = mmap.mmap(-1, len(self.buffer))
        _stats.snapshot(self.buffer, copy)
        return Snapshot(copy, self.writers)

    def close(self) -> None:
        """Unmap; the creating process also unlinks the file. Writers must be closed first."""
        if self.closed:
            return
        try:
            self.buffer.close()
        except BufferError:
            return          # a writer still holds it; the map goes with the process
        self.closed = True
        if self.owner_pid == os.getpid():
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


@dataclasses.dataclass
class KeyTotals:
    """One keyed item summed over writers and labels: messages, bytes, requests, and for
    GROUP_GET the pulls that read pages not in the page cache."""
    messages: int = 0
    size_bytes: int = 0
    requests: int = 0
    cold_requests: int = 0


class Snapshot:
    """A copy of the region decoded with numpy: ``counters`` [writers, counters],
    ``histograms`` [writers, histograms, HIST_WORDS], keyed entries via :meth:`keys`."""

    def __init__(self, data: bytes | mmap.mmap, writers: int):
        self.data = data
        self.writers = writers
        words = np.frombuffer(data, np.uint64)
        start = _stats.sections_offset() // 8
        sections = words[start:start + writers * _WORDS_PER_SECTION].reshape(
            writers, _WORDS_PER_SECTION)
        self.counters = sections[:, :_stats.COUNTERS_PER_WRITER]
        first = _stats.COUNTERS_PER_WRITER
        self.histograms = sections[:, first:first + _HIST_BLOCK].reshape(
            writers, _stats.HISTOGRAMS_PER_WRITER, _stats.HIST_WORDS)
        self._key_counts = sections[:, _stats.SECTION_KEY_COUNT_OFFSET // 8]

    @property
    def key_entries(self) -> int:
        """Keyed entries appended over every writer (grows when a new topic, group or queue
        is first recorded; a reader compares it to skip decoding unchanged keys)."""
        return int(self._key_counts.sum())

    def counter(self, index: int, writer: int | None = None) -> int:
        """A counter summed over every writer (or of one writer)."""
        if writer is not None:
            return int(self.counters[writer, index])
        return int(self.counters[:, index].sum())

    def histogram(self, index: int) -> np.ndarray:
        """A histogram (HIST_WORDS words) summed over every writer."""
        return self.histograms[:, index, :].sum(axis=0)

    def window_rows(self) -> np.ndarray:
        """The sampler's rows, oldest first: [rows, WINDOW_COLUMNS] (column 0: time ms)."""
        words = np.frombuffer(self.data, np.uint64)
        cursor = int(words[_stats.WINDOW_CURSOR_OFFSET // 8])
        start = _stats.WINDOW_ROWS_OFFSET // 8
        table = words[start:start + _stats.WINDOW_ROWS * _stats.WINDOW_COLUMNS].reshape(
            _stats.WINDOW_ROWS, _stats.WINDOW_COLUMNS)
        count = min(cursor, _stats.WINDOW_ROWS)
        order = [(cursor - count + i) % _stats.WINDOW_ROWS for i in range(count)]
        return table[order]

    def keys(self) -> dict[tuple[int, str], KeyTotals]:
        """{(kind, key): totals over writers and labels}."""
        totals: dict[tuple[int, str], KeyTotals] = {}
        for (kind, _label, key), words in self.labelled_keys().items():
            item = totals.setdefault((kind, key), KeyTotals())
            item.messages += words[0]
            item.size_bytes += words[1]
            item.requests += words[2]
            item.cold_requests += words[3]
        return totals

    def labelled_keys(self) -> dict[tuple[int, int, str], list[int]]:
        """{(kind, label, key): [messages, bytes, requests, word 3]} summed over writers
        (gauge entries, KEY_PULL_OFFSET, are left out: see :meth:`pull_offsets`)."""
        result: dict[tuple[int, int, str], list[int]] = {}
        for _writer, kind, label, key, words in self.entries():
            if kind == StatsKeyKind.KEY_PULL_OFFSET:
                continue
            item = result.setdefault((kind, label, key), [0] * _stats.KEY_WORDS)
            for index in range(_stats.KEY_WORDS):
                item[index] += int(words[index])
        return result

    def pull_offsets(self) -> dict[tuple[str, int], int]:
        """{("topic@group", queue id): next offset of the newest pull of that queue} over
        every writer (Java's pullOffsetTable)."""
        newest: dict[tuple[str, int], tuple[int, int]] = {}
        for _writer, kind, label, key, words in self.entries():
            if kind != StatsKeyKind.KEY_PULL_OFFSET:
                continue
            stamp, offset = int(words[1]), int(words[0])
            known = newest.get((key, label))
            if known is None or stamp > known[0]:
                newest[(key, label)] = (stamp, offset)
        return {item: offset for item, (_stamp, offset) in newest.items()}

    def entries(self):
        """Every published keyed entry: (writer, kind, label, key, words as numpy u64)."""
        data = self.data
        base = _stats.sections_offset() + _stats.SECTION_KEYS_OFFSET
        for writer in range(self.writers):
            start = base + writer * _stats.SECTION_BYTES
            for entry in range(min(int(self._key_counts[writer]), _stats.KEYS_PER_WRITER)):
                at = start + entry * _stats.KEY_ENTRY_BYTES
                length = int.from_bytes(data[at:at + 8], "little") - 1
                if length < 0:
                    continue
                kind = int.from_bytes(data[at + 8:at + 12], "little")
                label = int.from_bytes(data[at + 12:at + 16], "little")
                words = np.frombuffer(data, np.uint64, _stats.KEY_WORDS, at + 16)
                key_at = at + _stats.KEY_HEADER_BYTES
                yield (writer, kind, label,
                       data[key_at:key_at + length].decode("utf-8", "replace"), words)


def private_writer(section: int = 0) -> StatsWriter:
    """A writer of ``section`` over an anonymous region of its own (a process or test running a
    worker loop without a broker's region: the figures go nowhere, the code path stays the
    same)."""
    buffer = mmap.mmap(-1, _stats.region_size(section + 1))
    _stats.initialise(buffer, section + 1, 0)
    return StatsWriter(buffer, section)
