# CommitLog ranges an operator chose to skip: recorded by recovery, avoided by dispatch and reads.
"""Damaged CommitLog records that recovery skipped (``skipDamagedRecordsOnRecover=true``).

A record that fails its check with valid records after it stops recovery (fail-stop, see
:mod:`pybroker.store.recovery`), unless the operator asked to skip such records. A skipped
record's bytes stay where they are - every later record keeps its physical offset - and its
range ``[start, end)`` (global CommitLog offsets, ``end`` = the next valid record) is kept in
``<store>/damagedRecords.json``::

    {"spans": [[start, end], ...]}

Dispatch jumps over a span (and then fills any queue-offset gap it leaves with filler units),
reads never serve a consume-queue unit that points into a span, and a later start treats a
recorded span as known instead of stopping again. Spans below the CommitLog's min offset are
dropped when their file expires. Only recovery (in the supervisor, before any worker starts)
writes the file: temp file + rename, then the directory is synced.
"""
import bisect
import logging
import os

import numpy as np
import orjson

from pybroker.store import paths

__all__ = ["DamagedRecords"]

log = logging.getLogger(__name__)


class DamagedRecords:
    """The skipped spans of one store, sorted and disjoint; see the module docstring."""

    def __init__(self, store_root: str, spans=()):
        self.store_root = store_root
        self.spans: list[tuple[int, int]] = sorted((int(a), int(b)) for a, b in spans)
        self._starts = [start for start, _ in self.spans]

    @classmethod
    def load(cls, store_root: str) -> "DamagedRecords":
        """The recorded spans (none when the file is absent; a damaged file is logged and
        read as none, since recovery will find the spans again and stop)."""
        path = paths.damaged_records_path(store_root)
        try:
            with open(path, "rb") as file:
                document = orjson.loads(file.read())
            spans = [(int(start), int(end)) for start, end in document["spans"]
                     if 0 <= int(start) < int(end)]
        except FileNotFoundError:
            return cls(store_root)
        except (OSError, ValueError, KeyError, TypeError) as error:
            log.error("%s cannot be read (%s): no damaged record is known", path, error)
            return cls(store_root)
        return cls(store_root, spans)

    def __bool__(self) -> bool:
        return bool(self.spans)

    def __len__(self) -> int:
        return len(self.spans)

    def covers(self, start: int, end: int) -> bool:
        """True when ``[start, end)`` lies inside one recorded span."""
        span = self.span_at(start)
        return span is not None and end <= span[1]

    def span_at(self, offset: int) -> tuple[int, int] | None:
        """The span containing ``offset``, or None."""
        index = bisect.bisect_right(self._starts, offset) - 1
        if index >= 0 and offset < self.spans[index][1]:
            return self.spans[index]
        return None

    def next_start(self, offset: int) -> int | None:
        """Start of the first span beginning after ``offset``, or None."""
        index = bisect.bisect_right(self._starts, offset)
        return self.spans[index][0] if index < len(self.spans) else None

    def mask(self, physical_offsets: np.ndarray) -> np.ndarray:
        """Boolean array: which of ``physical_offsets`` fall inside a span."""
        if not self.spans:
            return np.zeros(len(physical_offsets), bool)
        starts = np.fromiter((a for a, _ in self.spans), np.int64, len(self.spans))
        ends = np.fromiter((b for _, b in self.spans), np.int64, len(self.spans))
        index = np.searchsorted(starts, physical_offsets, side="right") - 1
        inside = index >= 0
        clipped = np.maximum(index, 0)
        return inside & (physical_offsets < ends[clipped])

    def add(self, start: int, end: int) -> bool:
        """Record ``[start, end)``; False when it was known already."""
        if self.covers(start, end):
            return False
        self.spans = _merged(self.spans + [(start, end)])
        self._starts = [a for a, _ in self.spans]
        return True

    def forget_below(self, commitlog_min_offset: int) -> bool:
        """Drop spans wholly below the CommitLog's min offset; True when any went."""
        kept = [(a, b) for a, b in self.spans if b > commitlog_min_offset]
        if len(kept) == len(self.spans):
            return False
        self.spans = kept
        self._starts = [a for a, _ in kept]
        return True

    def save(self) -> None:
        """Write the file (temp + rename + directory sync); remove it when empty."""
        path = paths.damaged_records_path(self.store_root)
        if not self.spans:
            try:
                os.unlink(path)
            except FileNotFoundError:
                return
        else:
            temporary = path + ".tmp"
            with open(temporary, "wb") as file:
                file.write(orjson.dumps({"spans": [list(span) for span in self.spans]}))
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        directory = os.open(self.store_root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
