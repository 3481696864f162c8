# C-level contract of pybroker._fast.pagecache: mincore / mlock of mapped memory.
cdef extern from "sys/mman.h" nogil:
    int mincore(void *addr, size_t length, unsigned char *vec)
    int mlock(const void *addr, size_t length)
    int munlock(const void *addr, size_t length)
    int madvise(void *addr, size_t length, int advice)
    int msync(void *addr, size_t length, int flags)
    enum: MS_SYNC

cdef extern from "unistd.h" nogil:
    long sysconf(int name)
    enum: _SC_PAGESIZE

cdef extern from *:
    """
    /* mincore's vector for at most this many pages is kept on the stack (16 MiB of 4 KiB
       pages); longer spans are asked for in pieces. */
    enum { PB_VECTOR_PAGES = 4096 };
    /* Views closer than this are asked for in one mincore call (pages between them are
       looked at but not counted). */
    enum { PB_MERGE_GAP_BYTES = 256 * 1024 };
    """
    enum: PB_VECTOR_PAGES
    enum: PB_MERGE_GAP_BYTES

cdef extern from *:
    """
    /* Linux 5.14+: fault pages in writable without writing them (older headers lack it). */
    #ifndef MADV_POPULATE_WRITE
    #define MADV_POPULATE_WRITE 23
    #endif
    """
    enum: MADV_POPULATE_WRITE

from libc.stdint cimport uintptr_t

# Distinct pages under the address ranges [starts[i], ends[i]) (taken in order; nearby ones
# share one mincore call) into *pages, and how many are not resident now into *cold. The
# ranges must lie in mappings. 0, or the errno of a failed mincore (counts then partial).
# ends is overwritten (runs are merged in place).
cdef int count_cold_pages(const uintptr_t *starts, uintptr_t *ends, Py_ssize_t count,
                          size_t *pages, size_t *cold) noexcept nogil
