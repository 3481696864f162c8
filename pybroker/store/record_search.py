# Looking past an apparent end of CommitLog data: data extents, valid records, non-zero bytes.
"""Searches recovery and the scrubber make when records stop where they should not.

A CommitLog file is sparse (``store/mapped_file.py``): the part never written is a hole, and
reading a hole through the map would fill the page cache with zero pages. Every search here
therefore walks only the file's *data extents* (``lseek`` ``SEEK_DATA`` / ``SEEK_HOLE``; a
file system without them reports the whole file as data, which is slower but right).

A *valid record* is a whole record with a valid body CRC that names its own physical offset
(:func:`is_record_at`): stale bytes of another file (a reused transient-pool buffer) or random
bytes that happen to hold a magic code do not qualify.
"""
import mmap
import os

import numpy as np

from pybroker._fast import pagecache
from pybroker._fast import record as record_codec
from pybroker.store import layout
from pybroker.store.mapped_file import PAGE_SIZE_BYTES, MappedFile

__all__ = ["data_ranges", "is_record_at", "first_record_from", "next_valid_record",
           "nonzero_end", "read_record_lightly"]

# Both magic codes share their first three bytes (big-endian): one search finds either.
_MAGIC_CODES = tuple((code & 0xFFFFFFFF).to_bytes(4, "big") for code in (
    layout.MESSAGE_MAGIC_CODE_V1, layout.MESSAGE_MAGIC_CODE_V2))
_MAGIC_PREFIX = _MAGIC_CODES[0][:3]
assert all(code[:3] == _MAGIC_PREFIX for code in _MAGIC_CODES)
_MAGIC_POSITION = layout.RECORD_MAGIC_POSITION
_CHUNK_BYTES = 1 << 20
# Pages looked at past a record read lightly (the kernel may read a little around it).
_LIGHT_READ_MARGIN_BYTES = 256 << 10


def data_ranges(path: str, start: int, end: int) -> list[tuple[int, int]]:
    """The ``[a, b)`` ranges of ``[start, end)`` that hold data (not holes) in file ``path``."""
    ranges: list[tuple[int, int]] = []
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return ranges
    try:
        position = start
        while position < end:
            try:
                data_start = os.lseek(fd, position, os.SEEK_DATA)
            except OSError:          # ENXIO: only a hole from here on
                break
            if data_start >= end:
                break
            data_end = min(os.lseek(fd, data_start, os.SEEK_HOLE), end)
            ranges.append((data_start, data_end))
            position = data_end
    finally:
        os.close(fd)
    return ranges


def is_record_at(buffer, position: int, file_from_offset: int, file_size: int) -> bool:
    """A whole record with a valid body CRC at ``position`` that names its own physical
    offset (``file_from_offset + position``) and a topic a broker accepts."""
    status, total_size = record_codec.check(buffer, position, file_size, False)
    return status == record_codec.RECORD_OK and record_codec.check_records(
        buffer, [position], [total_size], file_from_offset, True) < 0


def read_record_lightly(path: str, position: int, size_max: int) -> bytes:
    """The bytes of the record at ``position`` of file ``path`` (at most ``size_max``), read
    without read-ahead, and every page the read brought into the page cache dropped again:
    start-up checks the first record of every older file, which must not fill the page cache
    with pages nobody reads (a consumer far behind finds them cold, as before)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        window = min(os.fstat(fd).st_size - position, size_max + _LIGHT_READ_MARGIN_BYTES)
        if window <= 0:
            return b""
        before = _resident_pages(fd, position, window)
        head = os.pread(fd, 4, position)
        size = int.from_bytes(head, "big", signed=True) if len(head) == 4 else 0
        data = os.pread(fd, min(max(size, 4), size_max), position) if size > 0 else head
        after = _resident_pages(fd, position, window)
        for page in np.flatnonzero(after & ~before).tolist():
            os.posix_fadvise(fd, position - position % PAGE_SIZE_BYTES + page * PAGE_SIZE_BYTES,
                             PAGE_SIZE_BYTES, os.POSIX_FADV_DONTNEED)
        return data
    finally:
        os.close(fd)


def _resident_pages(fd: int, position: int, length: int) -> np.ndarray:
    """Which pages of ``[position, position + length)`` are in the page cache (mincore of a
    map that is never touched, so looking costs no page)."""
    start = position - position % PAGE_SIZE_BYTES
    with mmap.mmap(fd, position + length - start, access=mmap.ACCESS_READ,
                   offset=start) as mapping:
        out = bytearray((len(mapping) + PAGE_SIZE_BYTES - 1) // PAGE_SIZE_BYTES)
        pagecache.residency(mapping, 0, len(mapping), out)
    return np.frombuffer(bytes(out), np.uint8) & 1 == 1


def first_record_from(mapped_file: MappedFile, start: int) -> int | None:
    """File position of the first valid record at or after ``start``, or None."""
    if not mapped_file.hold():
        raise RuntimeError(f"{mapped_file.path} was shut down")
    buffer = mapped_file.buffer()
    try:
        file_size = mapped_file.file_size
        for range_start, range_end in data_ranges(mapped_file.path, start, file_size):
            found = _first_in_range(buffer, max(range_start, start), range_end,
                                    mapped_file.file_from_offset, file_size)
            if found is not None:
                return found
        return None
    finally:
        buffer.release()
        mapped_file.release()


def _first_in_range(buffer, start: int, end: int, file_from_offset: int,
                    file_size: int) -> int | None:
    """First valid record whose start lies in ``[start, end)`` (its bytes may run on)."""
    chunk_start = start + _MAGIC_POSITION
    stop = end + _MAGIC_POSITION
    while chunk_start < stop:
        chunk_end = min(chunk_start + _CHUNK_BYTES, stop, file_size)
        if chunk_end - chunk_start < 4:
            return None
        chunk = bytes(buffer[chunk_start:min(chunk_end + 3, file_size)])
        at = chunk.find(_MAGIC_PREFIX)
        while 0 <= at < chunk_end - chunk_start:
            if chunk[at:at + 4] in _MAGIC_CODES:
                position = chunk_start + at - _MAGIC_POSITION
                if is_record_at(buffer, position, file_from_offset, file_size):
                    return position
            at = chunk.find(_MAGIC_PREFIX, at + 1)
        chunk_start = chunk_end
    return None


def next_valid_record(files: list[MappedFile], index: int, position: int) -> int | None:
    """Global offset of the first valid record at or after file ``index``, file position
    ``position`` (this file first, then the later ones), or None: nothing valid follows."""
    for later in range(index, len(files)):
        found = first_record_from(files[later], position if later == index else 0)
        if found is not None:
            return files[later].file_from_offset + found
    return None


def nonzero_end(mapped_file: MappedFile, start: int) -> int:
    """File position just past the last non-zero byte at or after ``start`` (``start`` when
    there is none): how far garbage or a torn record reaches."""
    if not mapped_file.hold():
        raise RuntimeError(f"{mapped_file.path} was shut down")
    buffer = mapped_file.buffer()
    try:
        for range_start, range_end in reversed(
                data_ranges(mapped_file.path, start, mapped_file.file_size)):
            low, high = max(range_start, start), range_end
            while high > low:
                chunk_low = max(low, high - _CHUNK_BYTES)
                last = _last_nonzero(buffer, chunk_low, high)
                if last is not None:
                    return last + 1
                high = chunk_low
        return start
    finally:
        buffer.release()
        mapped_file.release()


def _last_nonzero(buffer, low: int, high: int) -> int | None:
    # The array over the map dies with this frame, before the caller releases the buffer.
    nonzero = np.flatnonzero(np.frombuffer(buffer, np.uint8, high - low, low))
    return low + int(nonzero[-1]) if len(nonzero) else None
