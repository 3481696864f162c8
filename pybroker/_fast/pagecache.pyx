# pybroker._fast.pagecache: page-cache residency (mincore) and page locking (mlock) of maps.
"""Which pages of a mapped store file are in the page cache, and pinning them there.

``mincore(2)`` answers per page of a mapping whether the page is resident in the page cache;
for a shared file mapping that is the file's page-cache state, whichever process brought the
page in (Linux reports it for files the caller may write, which the broker's own files are).
Callers pass buffers: an ``mmap`` of a file, or memoryview slices of one (the address is
rounded down to its page, which belongs to the same mapping).

* :func:`residency` fills a vector (one byte per page, bit 0 = resident) for a range of one
  mapping: the profiler's per-file and per-chunk figures.
* :func:`cold_pages` counts the distinct pages under a list of record views and how many of
  them were not resident: one ``mincore`` per run of nearby views, never one per record (the
  pull path calls it once per pull).
* :func:`lock` / :func:`unlock` are ``mlock`` / ``munlock`` of a range (warmMapedFileEnable
  pins the current CommitLog file as Java does); they return an errno instead of raising,
  since refusal (RLIMIT_MEMLOCK without CAP_IPC_LOCK) is an expected outcome.
* :func:`populate` and :func:`sync` are ``madvise(MADV_POPULATE_WRITE)`` and
  ``msync(MS_SYNC)`` of a range with the GIL released (the file allocator warms files in a
  thread while its process's main thread flushes).
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from libc.errno cimport errno

cdef size_t _PAGE = <size_t>sysconf(_SC_PAGESIZE)


def page_size() -> int:
    """Bytes per page (the unit of every vector here)."""
    return _PAGE


cdef inline uintptr_t _page_floor(uintptr_t address) noexcept nogil:
    return address - address % _PAGE


def residency(buffer, Py_ssize_t start, Py_ssize_t end, out) -> int:
    """Fill ``out`` (a writable buffer of at least as many bytes as pages) with the page
    vector of ``buffer[start:end]`` (bytes; the first page is the one holding ``start``);
    returns the number of resident pages. OSError when the range is not mapped."""
    cdef Py_buffer view, vector
    cdef uintptr_t first, last
    cdef size_t pages, index, resident = 0
    cdef int result
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        if not 0 <= start <= end <= view.len:
            raise ValueError(f"range [{start}, {end}) outside a buffer of {view.len} bytes")
        if start == end:
            return 0
        first = _page_floor(<uintptr_t>view.buf + start)
        last = <uintptr_t>view.buf + end
        pages = (last - first + _PAGE - 1) // _PAGE
        PyObject_GetBuffer(out, &vector, PyBUF_SIMPLE)
        try:
            if <size_t>vector.len < pages:
                raise ValueError(f"a vector of {vector.len} bytes for {pages} pages")
            if vector.readonly:
                raise ValueError("the vector must be writable")
            with nogil:
                result = mincore(<void *>first, last - first, <unsigned char *>vector.buf)
                if result == 0:
                    for index in range(pages):
                        resident += (<unsigned char *>vector.buf)[index] & 1
            if result != 0:
                raise OSError(errno, "mincore failed")
            return resident
        finally:
            PyBuffer_Release(&vector)
    finally:
        PyBuffer_Release(&view)


cdef int _count_span(uintptr_t first, uintptr_t last, const uintptr_t *starts,
                     const uintptr_t *ends, Py_ssize_t lo, Py_ssize_t hi, size_t *pages,
                     size_t *cold) noexcept nogil:
    """mincore over [first, last) (page-aligned first) and count the distinct pages of the
    ranges lo..hi-1 (ascending) in it; 0 or an errno."""
    cdef unsigned char vector[PB_VECTOR_PAGES]
    cdef uintptr_t piece, piece_end, page, view_start, view_end, counted_until
    cdef Py_ssize_t item
    piece = first
    while piece < last:
        piece_end = min(last, piece + PB_VECTOR_PAGES * _PAGE)
        if mincore(<void *>piece, piece_end - piece, vector) != 0:
            return errno
        # A page lies in one piece: de-duplicating within the piece counts it once.
        counted_until = piece
        for item in range(lo, hi):
            view_start, view_end = starts[item], ends[item]
            if view_start >= piece_end:
                break
            page = max(_page_floor(view_start), counted_until)
            while page < view_end and page < piece_end:
                pages[0] += 1
                cold[0] += (vector[(page - piece) // _PAGE] & 1) == 0
                page += _PAGE
            counted_until = max(counted_until, page)
        piece = piece_end
    return 0


cdef int count_cold_pages(const uintptr_t *starts, uintptr_t *ends, Py_ssize_t count,
                          size_t *pages, size_t *cold) noexcept nogil:
    cdef Py_ssize_t lo = 0, item
    cdef int failed
    for item in range(1, count + 1):
        if item < count and starts[item - 1] <= starts[item] < ends[item - 1] + PB_MERGE_GAP_BYTES:
            ends[item] = max(ends[item - 1], ends[item])
            continue
        failed = _count_span(_page_floor(starts[lo]), ends[item - 1], starts, ends, lo, item,
                             pages, cold)
        if failed:
            return failed
        lo = item
    return 0


def cold_pages(views) -> tuple[int, int]:
    """(pages, cold pages) under the buffers ``views`` (record views of mapped files): the
    distinct pages they cover and how many of those are not resident now. Views are taken
    in order; nearby ones share one mincore call."""
    cdef Py_buffer view
    cdef uintptr_t *starts
    cdef uintptr_t *ends
    cdef size_t pages = 0, cold = 0
    cdef Py_ssize_t count = 0
    cdef int failed
    starts = <uintptr_t *>PyMem_Malloc(max(len(views), 1) * 2 * sizeof(uintptr_t))
    if starts == NULL:
        raise MemoryError()
    ends = starts + max(len(views), 1)
    try:
        for buffer in views:
            PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
            if view.len > 0:
                starts[count] = <uintptr_t>view.buf
                ends[count] = <uintptr_t>view.buf + <uintptr_t>view.len
                count += 1
            PyBuffer_Release(&view)
        failed = count_cold_pages(starts, ends, count, &pages, &cold)
        if failed:
            raise OSError(failed, "mincore failed")
        return pages, cold
    finally:
        PyMem_Free(starts)


cdef enum RangeCall:
    CALL_LOCK = 0
    CALL_UNLOCK = 1
    CALL_POPULATE = 2
    CALL_SYNC = 3


cdef int _range(buffer, Py_ssize_t start, Py_ssize_t end, int call) except -1:
    cdef Py_buffer view
    cdef uintptr_t first
    cdef size_t length
    cdef int result
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        if not 0 <= start <= end <= view.len:
            raise ValueError(f"range [{start}, {end}) outside a buffer of {view.len} bytes")
        if start == end:
            return 0
        first = _page_floor(<uintptr_t>view.buf + start)
        length = <uintptr_t>view.buf + end - first
        with nogil:
            if call == CALL_LOCK:
                result = mlock(<void *>first, length)
            elif call == CALL_UNLOCK:
                result = munlock(<void *>first, length)
            elif call == CALL_POPULATE:
                result = madvise(<void *>first, length, MADV_POPULATE_WRITE)
            else:
                result = msync(<void *>first, length, MS_SYNC)
        return errno if result != 0 else 0
    finally:
        PyBuffer_Release(&view)


def lock(buffer, Py_ssize_t start, Py_ssize_t end) -> int:
    """mlock the pages of ``buffer[start:end]``; 0, or the errno of the refusal (EPERM,
    ENOMEM, EAGAIN: not permitted or over RLIMIT_MEMLOCK)."""
    return _range(buffer, start, end, CALL_LOCK)


def unlock(buffer, Py_ssize_t start, Py_ssize_t end) -> int:
    """munlock the pages of ``buffer[start:end]``; 0 or an errno."""
    return _range(buffer, start, end, CALL_UNLOCK)


def populate(buffer, Py_ssize_t start, Py_ssize_t end) -> int:
    """Fault the pages of ``buffer[start:end]`` in writable without storing a byte
    (MADV_POPULATE_WRITE, the GIL released): page-cache pages allocated and, in a sparse file,
    blocks reserved. 0, or the errno: EINVAL before Linux 5.14, EFAULT/ENOMEM when the
    pages cannot be had (no room on disk)."""
    return _range(buffer, start, end, CALL_POPULATE)


def sync(buffer, Py_ssize_t start, Py_ssize_t end) -> int:
    """msync(MS_SYNC) of the pages of ``buffer[start:end]`` with the GIL released; 0 or the
    errno (callers on a durability path must treat any errno as fatal)."""
    return _range(buffer, start, end, CALL_SYNC)
