# pybroker._fast.stats: writers and readers of the shared-memory instrument region.
"""The instrument region (layout table in ``stats.pxd``; Python side in ``pybroker.stats``).

A :class:`StatsWriter` is one process's section: it increments its own counters, histograms
and keyed entries with plain release stores (single writer per word: no locked instruction, no
system call, no allocation). Keyed entries are appended by their writer and published by a
release store of the section's key count; the writer keeps a process-local index of its keys,
rebuilt from the section on attach, so a restarted worker continues its predecessor's entries.
Readers copy the region with :func:`snapshot` (acquire loads, then a memcpy of what is in use)
and decode it with numpy.

A region created with the instruments off (``statsInstrumentsEnable=false``: the header's
instruments-off word) makes every writer's recording a no-op: each method below returns after
one check of ``enabled``, and Cython users test ``enabled`` once where they record (send/stats.pyx
treats a disabled writer as none). Readers see the flag (:func:`instruments_enabled`) and must
not present the untouched zeros as measured figures.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from cpython.bytes cimport PyBytes_AS_STRING
from libc.stdint cimport uint32_t, uint64_t, uintptr_t
from libc.string cimport memcpy

MAGIC = int.from_bytes(b"PBSTATS1", "little")


def sections_offset() -> int:
    """Byte offset of writer 0's section (after the header page and the window area)."""
    end = WINDOW_AREA_OFFSET + WINDOW_AREA_BYTES
    return (end + STATS_PAGE_BYTES - 1) // STATS_PAGE_BYTES * STATS_PAGE_BYTES


def region_size(int writers) -> int:
    """Bytes of a region with ``writers`` sections."""
    if writers <= 0:
        raise ValueError(f"a stats region needs at least one writer, got {writers}")
    return sections_offset() + writers * SECTION_BYTES


cdef inline uint64_t *_word(unsigned char *base, Py_ssize_t offset) noexcept nogil:
    return <uint64_t *>(base + offset)


def initialise(buffer, int writers, uint64_t boot_ms, bint enabled=True) -> None:
    """Write the header of a fresh (zeroed) region of ``region_size(writers)`` bytes;
    ``enabled`` False: a region whose writers record nothing."""
    cdef Py_buffer view
    PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE)
    try:
        if view.len < region_size(writers):
            raise ValueError(f"stats region of {view.len} bytes is too small for {writers} "
                             f"writers")
        base = <unsigned char *>view.buf
        pb_stats_set(_word(base, STATS_VERSION_OFFSET), STATS_LAYOUT_VERSION)
        pb_stats_set(_word(base, STATS_SIZE_OFFSET), <uint64_t>view.len)
        pb_stats_set(_word(base, STATS_WRITERS_OFFSET), <uint64_t>writers)
        pb_stats_set(_word(base, STATS_BOOT_MS_OFFSET), boot_ms)
        pb_stats_set(_word(base, STATS_SECTIONS_OFFSET_OFFSET), <uint64_t>sections_offset())
        pb_stats_set(_word(base, STATS_INSTRUMENTS_OFF_OFFSET), 0 if enabled else 1)
        pb_stats_set(_word(base, STATS_MAGIC_OFFSET), <uint64_t>MAGIC)
    finally:
        PyBuffer_Release(&view)


def check_header(buffer) -> int:
    """Validate a region's header; returns its writer count."""
    cdef Py_buffer view
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        if view.len < STATS_PAGE_BYTES:
            raise ValueError("stats region is smaller than its header")
        base = <unsigned char *>view.buf
        if pb_stats_load(_word(base, STATS_MAGIC_OFFSET)) != <uint64_t>MAGIC or \
                pb_stats_load(_word(base, STATS_VERSION_OFFSET)) != STATS_LAYOUT_VERSION:
            raise ValueError(f"not a version {STATS_LAYOUT_VERSION} stats region")
        writers = pb_stats_load(_word(base, STATS_WRITERS_OFFSET))
        if view.len < region_size(writers):
            raise ValueError(f"stats region of {view.len} bytes is too small for its "
                             f"{writers} writers")
        return writers
    finally:
        PyBuffer_Release(&view)


def instruments_enabled(buffer) -> bool:
    """False when the region was created with the instruments off (nothing is recorded)."""
    cdef Py_buffer view
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        if view.len < STATS_PAGE_BYTES:
            raise ValueError("stats region is smaller than its header")
        return pb_stats_load(_word(<unsigned char *>view.buf, STATS_INSTRUMENTS_OFF_OFFSET)) == 0
    finally:
        PyBuffer_Release(&view)


def snapshot(buffer, out) -> None:
    """Copy the region into ``out``, a writable buffer of the same size holding zeros (a fresh
    anonymous map): the header, the window area, every section's counters, histograms and key
    count, and of its key entries only those the count publishes (loaded with acquire first,
    so each copied entry is complete; the count copied is the one loaded). The entries a
    section has room for and does not use are left alone: most of the region (1,024 entries
    a writer), whose pages a fresh map then never backs."""
    cdef Py_buffer view, target
    cdef const unsigned char *base
    cdef unsigned char *copy
    cdef Py_ssize_t offset, section
    cdef uint64_t writers, writer, count
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        PyObject_GetBuffer(out, &target, PyBUF_WRITABLE)
        try:
            if target.len != view.len:
                raise ValueError(f"snapshot target of {target.len} bytes for a region of "
                                 f"{view.len}")
            base = <const unsigned char *>view.buf
            copy = <unsigned char *>target.buf
            writers = pb_stats_load(<const uint64_t *>(base + STATS_WRITERS_OFFSET))
            offset = sections_offset()
            if <uint64_t>offset + writers * SECTION_BYTES > <uint64_t>view.len:
                raise ValueError(f"stats region of {view.len} bytes cannot hold {writers} "
                                 f"writers")
            __atomic_thread_fence_acquire()
            memcpy(copy, base, offset)
            for writer in range(writers):
                section = offset + <Py_ssize_t>writer * SECTION_BYTES
                count = pb_stats_load(
                    <const uint64_t *>(base + section + SECTION_KEY_COUNT_OFFSET))
                memcpy(copy + section, base + section, SECTION_KEYS_OFFSET)
                (<uint64_t *>(copy + section + SECTION_KEY_COUNT_OFFSET))[0] = count
                if count > KEYS_PER_WRITER:
                    count = KEYS_PER_WRITER
                memcpy(copy + section + SECTION_KEYS_OFFSET, base + section + SECTION_KEYS_OFFSET,
                       <size_t>count * KEY_ENTRY_BYTES)
        finally:
            PyBuffer_Release(&target)
    finally:
        PyBuffer_Release(&view)


cdef extern from *:
    """
    static inline void __atomic_thread_fence_acquire(void) {
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
    }
    """
    void __atomic_thread_fence_acquire() nogil


def window_append(buffer, values) -> None:
    """Append one sample row (timestamp ms first, up to WINDOW_COLUMNS values) to the window
    ring. Only the sampler (one process) calls this."""
    cdef Py_buffer view
    cdef Py_ssize_t column
    PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE)
    try:
        if len(values) > WINDOW_COLUMNS:
            raise ValueError(f"a window row has at most {WINDOW_COLUMNS} values")
        base = <unsigned char *>view.buf
        cursor = pb_stats_load(_word(base, WINDOW_CURSOR_OFFSET))
        row = WINDOW_ROWS_OFFSET + (cursor % WINDOW_ROWS) * WINDOW_COLUMNS * 8
        for column in range(WINDOW_COLUMNS):
            pb_stats_set(_word(base, row + column * 8),
                         <uint64_t>values[column] if column < len(values) else 0)
        pb_stats_set(_word(base, WINDOW_CURSOR_OFFSET), cursor + 1)
    finally:
        PyBuffer_Release(&view)


cdef class StatsWriter:
    """Writer ``writer``'s section of the region in ``buffer`` (held until :meth:`close`).

    Python paths call the methods below (one C call each); Cython hot loops use the pointers
    declared in ``stats.pxd`` with the ``pb_stats_*`` inlines.
    """

    def __cinit__(self, buffer, int writer):
        cdef Py_ssize_t start
        cdef unsigned char *section
        cdef uint64_t entry
        cdef unsigned char *item
        self._held = False
        PyObject_GetBuffer(buffer, &self._view, PyBUF_WRITABLE)
        self._held = True
        writers = check_header(buffer)
        if not 0 <= writer < writers:
            raise ValueError(f"writer {writer} out of range [0, {writers})")
        if (<uintptr_t>self._view.buf) & 63:
            raise ValueError("stats region must be 64-byte aligned")
        self.writer = writer
        self.enabled = pb_stats_load(
            _word(<unsigned char *>self._view.buf, STATS_INSTRUMENTS_OFF_OFFSET)) == 0
        start = sections_offset() + writer * SECTION_BYTES
        section = <unsigned char *>self._view.buf + start
        self.counters = <uint64_t *>(section + SECTION_COUNTERS_OFFSET)
        self.histograms = <uint64_t *>(section + SECTION_HISTOGRAMS_OFFSET)
        self.key_count = <uint64_t *>(section + SECTION_KEY_COUNT_OFFSET)
        self.keys = section + SECTION_KEYS_OFFSET
        self._key_index = {}
        for entry in range(pb_stats_load(self.key_count)):
            item = self.keys + entry * KEY_ENTRY_BYTES
            length = pb_stats_load(<uint64_t *>item) - 1
            kind_label = (<uint32_t *>(item + 8))[0], (<uint32_t *>(item + 8))[1]
            key = (<char *>(item + KEY_HEADER_BYTES))[:length].decode("utf-8")
            self._key_index[(kind_label[0], kind_label[1], key)] = entry

    def __dealloc__(self):
        if self._held:
            PyBuffer_Release(&self._view)
            self._held = False

    def close(self) -> None:
        """Release the region's buffer (the pointers become invalid)."""
        if self._held:
            PyBuffer_Release(&self._view)
            self._held = False

    cdef int _check(self, int index, int limit) except -1:
        if not self._held:
            raise ValueError("stats writer is closed")
        if not 0 <= index < limit:
            raise IndexError(f"index {index} out of range [0, {limit})")
        return 0

    def add(self, int counter, uint64_t delta=1) -> None:
        """counter += delta."""
        if not self.enabled:
            return
        self._check(counter, COUNTERS_PER_WRITER)
        pb_stats_add(self.counters + counter, delta)

    def set(self, int counter, uint64_t value) -> None:
        """counter = value (a gauge)."""
        if not self.enabled:
            return
        self._check(counter, COUNTERS_PER_WRITER)
        pb_stats_set(self.counters + counter, value)

    def raise_to(self, int counter, uint64_t value) -> None:
        """counter = max(counter, value)."""
        if not self.enabled:
            return
        self._check(counter, COUNTERS_PER_WRITER)
        pb_stats_raise(self.counters + counter, value)

    def get(self, int counter) -> int:
        """The counter's current value."""
        self._check(counter, COUNTERS_PER_WRITER)
        return pb_stats_load(self.counters + counter)

    def record(self, int histogram, uint64_t value, uint64_t times=1) -> None:
        """Record ``times`` occurrences of ``value`` in a histogram."""
        if not self.enabled:
            return
        self._check(histogram, HISTOGRAMS_PER_WRITER)
        if times == 1:
            pb_stats_record(self.histogram(histogram), value)
        elif times:
            pb_stats_record_n(self.histogram(histogram), value, times)

    def key(self, uint32_t kind, uint32_t label, str key) -> int:
        """The entry index of (kind, label, key), appended on first use; -1 when the table
        is full or the key too long (the update is then counted in KEYS_DROPPED), or when
        the instruments are off."""
        if not self.enabled:
            return -1
        cached = self._key_index.get((kind, label, key))
        if cached is not None:
            return cached
        self._check(0, 1)
        encoded = key.encode("utf-8")
        cdef uint64_t count = pb_stats_load(self.key_count)
        if count >= KEYS_PER_WRITER or len(encoded) > KEY_BYTES_MAX:
            return -1
        cdef unsigned char *item = self.keys + count * KEY_ENTRY_BYTES
        memcpy(item + KEY_HEADER_BYTES, PyBytes_AS_STRING(encoded), len(encoded))
        (<uint32_t *>(item + 8))[0] = kind
        (<uint32_t *>(item + 8))[1] = label
        pb_stats_set(<uint64_t *>item, len(encoded) + 1)
        pb_stats_set(self.key_count, count + 1)
        self._key_index[(kind, label, key)] = count
        return count

    cdef int _dropped(self, int entry) except -1:
        """1 when ``entry`` is -1 (no room for its key): counted in KEYS_DROPPED; else checks
        the entry index and returns 0."""
        if entry < 0:
            self._check(0, 1)
            pb_stats_add(self.counters + KEYS_DROPPED, 1)
            return 1
        self._check(entry, KEYS_PER_WRITER)
        return 0

    def key_add(self, int entry, uint64_t messages, uint64_t size_bytes=0,
                uint64_t requests=1) -> None:
        """Add to entry's words (messages, bytes, requests); entry -1 counts KEYS_DROPPED."""
        if not self.enabled or self._dropped(entry):
            return
        cdef uint64_t *words = self.key_words(entry)
        pb_stats_add(words + KEY_MESSAGES, messages)
        pb_stats_add(words + KEY_BYTES, size_bytes)
        pb_stats_add(words + KEY_REQUESTS, requests)

    def key_add_word(self, int entry, int word, uint64_t delta) -> None:
        """Add ``delta`` to one word (KeyWord) of an entry; entry -1 counts KEYS_DROPPED."""
        if not self.enabled or self._dropped(entry):
            return
        self._check(word, KEY_WORDS)
        pb_stats_add(self.key_words(entry) + word, delta)

    def key_set_words(self, int entry, uint64_t first, uint64_t second) -> None:
        """Set an entry's first two words (a gauge entry such as KEY_PULL_OFFSET); entry -1
        counts KEYS_DROPPED."""
        if not self.enabled or self._dropped(entry):
            return
        cdef uint64_t *words = self.key_words(entry)
        pb_stats_set(words, first)
        pb_stats_set(words + 1, second)
