# Page-cache residency of store files, read with mincore through the profiler's own maps.
"""Which pages of each store file are in the page cache, now.

The profiler maps every file it looks at read-only (no populate: mapping costs no I/O and
brings nothing in) and asks ``mincore`` (``pybroker._fast.pagecache.residency``); a shared file
mapping reports the file's page-cache state, whichever process read or wrote the pages. Maps
are kept between samples and dropped when their file is gone or replaced.
"""
import mmap
import os

import numpy as np

from pybroker._fast import pagecache

__all__ = ["FileResidency", "PAGE_SIZE_BYTES"]

PAGE_SIZE_BYTES = pagecache.page_size()


class FileResidency:
    """Residency vectors of files by path (one byte per page, 1 = resident)."""

    def __init__(self) -> None:
        self._maps: dict[str, tuple[int, mmap.mmap]] = {}
        self._vector = bytearray()

    def _map(self, path: str) -> mmap.mmap | None:
        try:
            status = os.stat(path)
        except FileNotFoundError:
            self.forget(path)
            return None
        known = self._maps.get(path)
        if known is not None and known[0] == status.st_ino and len(known[1]) == status.st_size:
            return known[1]
        self.forget(path)
        if status.st_size == 0:
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            mapping = mmap.mmap(fd, status.st_size, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        self._maps[path] = (status.st_ino, mapping)
        return mapping

    def vector(self, path: str) -> np.ndarray | None:
        """Resident flags of every page of ``path`` (a view valid until the next call), or
        None when the file is gone or empty."""
        mapping = self._map(path)
        if mapping is None:
            return None
        pages = (len(mapping) + PAGE_SIZE_BYTES - 1) // PAGE_SIZE_BYTES
        if len(self._vector) < pages:
            self._vector = bytearray(pages)
        pagecache.residency(mapping, 0, len(mapping), self._vector)
        vector = np.frombuffer(self._vector, np.uint8, pages)
        return vector & 1

    def resident_pages(self, path: str) -> tuple[int, int]:
        """(resident pages, pages) of ``path``; (0, 0) when it is gone."""
        vector = self.vector(path)
        if vector is None:
            return 0, 0
        return int(vector.sum()), len(vector)

    def chunks(self, path: str, chunk_bytes: int) -> np.ndarray | None:
        """Resident share of each ``chunk_bytes`` chunk of ``path``, in per mille (0..1000)."""
        vector = self.vector(path)
        if vector is None:
            return None
        per_chunk = max(chunk_bytes // PAGE_SIZE_BYTES, 1)
        count = (len(vector) + per_chunk - 1) // per_chunk
        padded = np.zeros(count * per_chunk, np.uint16)
        padded[:len(vector)] = vector
        sums = padded.reshape(count, per_chunk).sum(axis=1, dtype=np.int64)
        sizes = np.full(count, per_chunk, np.int64)
        sizes[-1] = len(vector) - per_chunk * (count - 1)
        return (sums * 1000 // sizes).astype(np.int64)

    def forget(self, path: str) -> None:
        known = self._maps.pop(path, None)
        if known is not None:
            known[1].close()

    def retain(self, paths: set[str]) -> None:
        """Drop the maps of every file not in ``paths`` (deleted or no longer looked at)."""
        for path in [p for p in self._maps if p not in paths]:
            self.forget(path)

    def close(self) -> None:
        for path in list(self._maps):
            self.forget(path)
