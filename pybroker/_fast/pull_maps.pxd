# Contract of pybroker._fast.pull_maps: mapped store files as C pointers, held between reads.
from libc.stdint cimport int64_t


cdef struct MapSlot:
    int64_t base                   # global offset of the file's first byte
    const unsigned char *data      # the mapping (valid while bound)
    Py_ssize_t length              # bytes mapped
    int64_t readable               # bytes of the file that may be read now
    bint bound
    Py_buffer view


cdef class FileMaps:
    cdef MapSlot *slots
    cdef Py_ssize_t count
    cdef Py_ssize_t capacity
    cdef readonly int64_t file_size
    cdef list files                # the MappedFile of each slot
    cdef list views                # the memoryview each bound slot's buffer comes from

    cdef MapSlot *find(self, int64_t offset) except? NULL
    cdef int _bind(self, Py_ssize_t index) except -1
