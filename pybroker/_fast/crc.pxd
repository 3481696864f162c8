# C-level contract of pybroker._fast.crc: zlib CRC-32 (Java's java.util.zip.CRC32) over raw memory.
from libc.stdint cimport uint32_t, int32_t

cdef extern from "zlib.h" nogil:
    unsigned long zlib_crc32 "crc32"(unsigned long crc, const unsigned char *data,
                                     unsigned int length)

cdef enum:
    # zlib takes an unsigned int length: feed longer spans in pieces of at most 1 GiB.
    CRC_CHUNK_BYTES = 1 << 30
    # Above this many bytes the Python-level functions release the GIL while hashing.
    CRC_NOGIL_MIN_BYTES = 64 * 1024
    CRC_MASK = 0x7FFFFFFF


cdef inline uint32_t crc32_of(const unsigned char *data, size_t length) noexcept nogil:
    """Unsigned CRC-32 of length bytes at data (no GIL needed; data must be valid memory)."""
    cdef unsigned long crc = zlib_crc32(0, NULL, 0)
    while length > CRC_CHUNK_BYTES:
        crc = zlib_crc32(crc, data, CRC_CHUNK_BYTES)
        data += CRC_CHUNK_BYTES
        length -= CRC_CHUNK_BYTES
    crc = zlib_crc32(crc, data, <unsigned int>length)
    return <uint32_t>crc


cdef inline int32_t crc32_masked_of(const unsigned char *data, size_t length) noexcept nogil:
    """crc32_of(...) & 0x7FFFFFFF: the body CRC RocketMQ stores in a CommitLog record."""
    return <int32_t>(crc32_of(data, length) & CRC_MASK)
