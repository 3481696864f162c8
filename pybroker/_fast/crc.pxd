# C-level contract of pybroker._fast.crc: zlib CRC-32 (Java's java.util.zip.CRC32) over raw memory.
from libc.stdint cimport uint32_t, int32_t

cdef extern from "crc_fold.h" nogil:
    # zlib's crc32(crc, data, length) for any length: folded with PCLMULQDQ where the CPU has
    # it and the span is long enough, zlib's table loop otherwise (crc_fold.h says why and how).
    uint32_t pb_crc32_update(uint32_t crc, const unsigned char *data, size_t length)
    uint32_t pb_crc32_zlib(uint32_t crc, const unsigned char *data, size_t length)
    bint pb_crc_fold_usable()

cdef enum:
    # Above this many bytes the Python-level functions release the GIL while hashing.
    CRC_NOGIL_MIN_BYTES = 64 * 1024
    CRC_MASK = 0x7FFFFFFF


cdef inline uint32_t crc32_of(const unsigned char *data, size_t length) noexcept nogil:
    """Unsigned CRC-32 of length bytes at data (no GIL needed; data must be valid memory)."""
    return pb_crc32_update(0, data, length)


cdef inline int32_t crc32_masked_of(const unsigned char *data, size_t length) noexcept nogil:
    """crc32_of(...) & 0x7FFFFFFF: the body CRC RocketMQ stores in a CommitLog record."""
    return <int32_t>(crc32_of(data, length) & CRC_MASK)
