# pybroker._fast.crc: Java/zlib CRC-32 over any buffer, plain and masked (RocketMQ's body CRC).
"""CRC-32 as Java's ``java.util.zip.CRC32`` computes it (zlib's polynomial).

RocketMQ stores ``crc32(body) & 0x7FFFFFFF`` in every CommitLog record (protocol.md §0, §4.2).
Spans of 64 bytes and more are folded with PCLMULQDQ where the CPU has it (``crc_fold.h``).
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE

from pybroker._fast.crc cimport crc32_of, pb_crc_fold_usable, CRC_NOGIL_MIN_BYTES, CRC_MASK


cdef uint32_t _crc32_buffer(object buf, Py_ssize_t start, Py_ssize_t end) except? 0xFFFFFFFF:
    cdef Py_buffer view
    cdef uint32_t crc
    cdef const unsigned char *data
    cdef size_t length
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if end == -1:
            end = view.len
        if start < 0 or end < start or end > view.len:
            raise ValueError(f"crc32 range [{start}, {end}) outside a buffer of {view.len} bytes")
        data = <const unsigned char *>view.buf + start
        length = <size_t>(end - start)
        if length >= CRC_NOGIL_MIN_BYTES:
            with nogil:
                crc = crc32_of(data, length)
        else:
            crc = crc32_of(data, length)
        return crc
    finally:
        PyBuffer_Release(&view)


def crc32(buf, Py_ssize_t start=0, Py_ssize_t end=-1):
    """Unsigned 32-bit CRC-32 of ``buf[start:end]`` (byte positions; ``end=-1`` = ``len(buf)``).

    ``buf`` is any contiguous buffer (bytes, bytearray, memoryview, mmap). Raises ValueError when
    the range is outside the buffer. The GIL is released for spans of 64 KiB and more.
    """
    return _crc32_buffer(buf, start, end)


def crc32_masked(buf, Py_ssize_t start=0, Py_ssize_t end=-1):
    """``crc32(buf, start, end) & 0x7FFFFFFF``: the body CRC stored in CommitLog records."""
    return _crc32_buffer(buf, start, end) & CRC_MASK


def folds():
    """Whether spans of 64 bytes and more are folded here (x86-64 with PCLMULQDQ)."""
    return bool(pb_crc_fold_usable())
