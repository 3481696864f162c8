# pybroker._fast.pull_maps: the mapped store files the pull fast path reads, held between reads.
"""Mapped files the pull fast path reads, as C pointers (docs/architecture/reads.md).

A :class:`FileMaps` is an ordered set of fixed-size store files of one kind (the CommitLog,
or one consume queue), each given by the reader as ``(base, mapped_file, readable_bytes)``.
A file is bound when first read: it is held (``MappedFile.hold``, so its map outlives a
deletion until released) and its mapping pinned by a buffer. :meth:`FileMaps.reset` gives
every hold and buffer back; the owner calls it whenever the reader forgot files (cleanup,
topic deletion) and at close, so a deleted file is unmapped once the fast path let go of it.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.stdint cimport int64_t


cdef class FileMaps:

    def __cinit__(self):
        self.slots = NULL
        self.count = 0
        self.capacity = 0
        self.files = []
        self.views = []

    def __init__(self, int64_t file_size):
        self.file_size = file_size

    def __dealloc__(self):
        cdef Py_ssize_t index
        for index in range(self.count):
            if self.slots[index].bound:
                PyBuffer_Release(&self.slots[index].view)
        PyMem_Free(self.slots)

    def update(self, list entries):
        """Follow the reader's files ``[(base, mapped_file, readable_bytes)]`` (ascending):
        known files keep their binding and take the new readable size, new ones are added
        unbound. When the list does not extend the known one, everything is reset first."""
        cdef Py_ssize_t index
        cdef MapSlot *grown
        if len(entries) < self.count or any(
                entries[index][1] is not self.files[index] for index in range(self.count)):
            self.reset()
        if len(entries) > self.capacity:
            grown = <MapSlot *>PyMem_Realloc(self.slots, len(entries) * sizeof(MapSlot))
            if grown == NULL:
                raise MemoryError()
            self.slots, self.capacity = grown, len(entries)
        for index in range(len(entries)):
            base, mapped_file, readable = entries[index]
            if index >= self.count:
                self.slots[index].base = base
                self.slots[index].data = NULL
                self.slots[index].length = 0
                self.slots[index].bound = False
                self.files.append(mapped_file)
                self.views.append(None)
            self.slots[index].readable = readable
        self.count = len(entries)

    def reset(self):
        """Give back every hold and buffer; forget the files."""
        cdef Py_ssize_t index
        files, views = self.files, self.views
        self.files, self.views = [], []
        count, self.count = self.count, 0
        for index in range(count):
            if self.slots[index].bound:
                self.slots[index].bound = False
                PyBuffer_Release(&self.slots[index].view)
                views[index].release()
                files[index].release()

    @property
    def bound_files(self) -> int:
        """Files held now (tests)."""
        cdef Py_ssize_t index
        return sum(1 for index in range(self.count) if self.slots[index].bound)

    cdef MapSlot *find(self, int64_t offset) except? NULL:
        """The bound slot of the file holding ``offset`` (bytes), NULL when no known file
        holds it or it cannot be held (shutting down)."""
        cdef Py_ssize_t index
        cdef MapSlot *slot
        if self.count == 0 or offset < self.slots[0].base:
            return NULL
        index = (offset - self.slots[0].base) // self.file_size
        if index >= self.count or self.slots[index].base > offset \
                or offset >= self.slots[index].base + self.file_size:
            index = self.count - 1           # holes in the sequence: search
            while index >= 0 and self.slots[index].base > offset:
                index -= 1
            if index < 0 or offset >= self.slots[index].base + self.file_size:
                return NULL
        slot = &self.slots[index]
        if not slot.bound and self._bind(index) == 0:
            return NULL
        return slot

    cdef int _bind(self, Py_ssize_t index) except -1:
        cdef object mapped_file = self.files[index]
        cdef object view
        cdef MapSlot *slot = &self.slots[index]
        if not mapped_file.hold():
            return 0
        try:
            view = mapped_file.buffer()
            PyObject_GetBuffer(view, &slot.view, PyBUF_SIMPLE)
        except BaseException:
            mapped_file.release()
            raise
        self.views[index] = view
        slot.data = <const unsigned char *>slot.view.buf
        slot.length = slot.view.len
        slot.bound = True
        return 1
