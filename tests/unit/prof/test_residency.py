# Residency figures against fincore and an independent mincore, on files the test warms and evicts.
"""Goal: the profiler's page-cache residency (``_fast.pagecache``, ``prof.residency``) is the
kernel's: per file it equals what util-linux ``fincore`` and a mincore called through ctypes
(no pybroker code) report at the same moment, and the per-chunk strip and the pull path's
cold-page count follow the pages the test brought in.

Method: a real file on disk, made durable (fsync) and evicted with posix_fadvise(DONTNEED), then
chosen page ranges read back with readahead off (POSIX_FADV_RANDOM, one pread per page); each
measure is taken with nothing else touching the file in between.
"""
import ctypes
import ctypes.util
import mmap
import os
import shutil
import subprocess

import numpy as np
import pytest

from pybroker._fast import pagecache
from pybroker._testbase.page_cache import evict_file
from pybroker.prof.residency import PAGE_SIZE_BYTES, FileResidency

PAGE = PAGE_SIZE_BYTES
FILE_PAGES = 1024          # 4 MiB
READ_RANGES = ((0, 16), (100, 101), (512, 768), (1000, 1024))   # page ranges brought in


def _libc_mincore(path: str) -> int:
    """Resident pages of ``path`` by mmap + mincore through ctypes (independent of pybroker)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert address not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        vector = ctypes.create_string_buffer((size + PAGE - 1) // PAGE)
        try:
            assert libc.mincore(address, size, vector) == 0, ctypes.get_errno()
        finally:
            libc.munmap(address, size)
    finally:
        os.close(fd)
    return sum(byte & 1 for byte in vector.raw)


def _fincore(path: str) -> int | None:
    """Resident pages by util-linux fincore, or None without the tool."""
    if shutil.which("fincore") is None:
        return None
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", path],
                         check=True, capture_output=True, text=True).stdout
    return int(out.split()[0]) // PAGE


def _read_pages(path: str, ranges) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)     # no readahead
        for first, end in ranges:
            for page in range(first, end):
                assert len(os.pread(fd, 1, page * PAGE)) == 1
    finally:
        os.close(fd)


@pytest.fixture
def data_file(tmp_path):
    path = str(tmp_path / "00000000000000000000")
    with open(path, "wb") as out:
        out.write(os.urandom(FILE_PAGES * PAGE))
    evict_file(path)
    return path


def test_residency_matches_fincore_and_an_independent_mincore(data_file):
    residency = FileResidency()
    try:
        assert residency.resident_pages(data_file) == (0, FILE_PAGES)
        assert _libc_mincore(data_file) == 0
        _read_pages(data_file, READ_RANGES)
        expected = sum(end - first for first, end in READ_RANGES)
        resident, pages = residency.resident_pages(data_file)
        assert pages == FILE_PAGES
        assert resident == _libc_mincore(data_file)
        fincore = _fincore(data_file)
        if fincore is not None:
            assert resident == fincore
        # Readahead is off: exactly the pages read (the kernel may keep a few more).
        assert expected <= resident <= expected + 8
        vector = residency.vector(data_file)
        assert vector is not None
        for first, end in READ_RANGES:
            assert vector[first:end].all()
        evict_file(data_file)
        assert residency.resident_pages(data_file) == (0, FILE_PAGES)
        assert _libc_mincore(data_file) == 0
    finally:
        residency.close()


def test_chunks_follow_the_pages_brought_in(data_file):
    residency = FileResidency()
    try:
        _read_pages(data_file, [(0, 256), (512, 640)])
        chunks = residency.chunks(data_file, 256 * PAGE)     # four chunks of 1 MiB
        assert chunks is not None
        assert chunks[0] >= 990 and chunks[1] <= 40
        assert 480 <= chunks[2] <= 540 and chunks[3] <= 40
    finally:
        residency.close()


def test_cold_pages_of_record_views(data_file):
    fd = os.open(data_file, os.O_RDONLY)
    mapping = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ)
    os.close(fd)
    view = memoryview(mapping)
    # Records as a pull returns them: ascending, some sharing a page, one far away.
    records = [view[10:200], view[200:5000], view[5000:9000], view[600 * PAGE:600 * PAGE + 50]]
    try:
        assert pagecache.cold_pages(records) == (4, 4)      # pages 0, 1, 2 and 600
        _read_pages(data_file, [(0, 2)])
        assert pagecache.cold_pages(records) == (4, 2)
        assert pagecache.cold_pages([]) == (0, 0)
        vector = np.zeros(FILE_PAGES, np.uint8)
        assert pagecache.residency(mapping, 0, len(mapping), vector) == \
            _libc_mincore(data_file)
    finally:
        for record in records:
            record.release()
        view.release()
        mapping.close()


def test_lock_and_unlock_a_range(data_file):
    fd = os.open(data_file, os.O_RDONLY)
    mapping = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ)
    os.close(fd)
    try:
        refusal = pagecache.lock(mapping, 0, 64 * PAGE)
        if refusal == 0:
            # mlock faults the range in: every page is resident while locked.
            vector = np.zeros(64, np.uint8)
            assert pagecache.residency(mapping, 0, 64 * PAGE, vector) == 64
            assert pagecache.unlock(mapping, 0, 64 * PAGE) == 0
        else:
            assert refusal in (1, 11, 12)    # EPERM, EAGAIN, ENOMEM: not permitted here
        with pytest.raises(ValueError):
            pagecache.lock(mapping, 0, len(mapping) + 1)
    finally:
        mapping.close()
