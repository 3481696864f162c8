# pybroker._fast.send.topics: the topics a send may go to without the Python path's checks.
"""The send fast path's topic table (topics.pxd): a whole table is built per replacement and
swapped in (docs/architecture/send-fast-path.md: it follows the worker's metadata replica)."""
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport uint64_t
from libc.string cimport memcmp, memcpy, memset


cdef inline uint64_t _topic_hash(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    cdef uint64_t h = 14695981039346656037ULL      # FNV-1a
    cdef Py_ssize_t i
    for i in range(n):
        h = (h ^ p[i]) * 1099511628211ULL
    return h


cdef inline TopicEntry *_bucket(TopicEntry *table, Py_ssize_t capacity, uint64_t hash_value,
                                const unsigned char *name, Py_ssize_t length) noexcept nogil:
    """The bucket holding ``name`` or, when absent, the free bucket it would take
    (``capacity``: a power of two, with a free bucket)."""
    cdef Py_ssize_t index = <Py_ssize_t>(hash_value & <uint64_t>(capacity - 1))
    while table[index].length and not (
            table[index].hash == hash_value and table[index].length == length
            and memcmp(table[index].name, name, <size_t>length) == 0):
        index = (index + 1) & (capacity - 1)
    return &table[index]


cdef class TopicTable:
    """The fast table of one SendPath (empty until :meth:`replace`)."""

    def __cinit__(self):
        self._table = NULL
        self._capacity = 0
        self.entries = []

    def __dealloc__(self):
        PyMem_Free(self._table)

    cdef int replace(self, list entries, SendStats counting) except -1:
        cdef Py_ssize_t capacity = 16
        cdef TopicEntry *table
        cdef TopicEntry *entry
        cdef bytes name
        cdef uint64_t hash_value
        self.entries = entries
        while capacity < 2 * len(entries) + 2:
            capacity *= 2
        table = <TopicEntry *>PyMem_Malloc(capacity * sizeof(TopicEntry))
        if table == NULL:
            raise MemoryError()
        memset(table, 0, capacity * sizeof(TopicEntry))
        for name, queue_nums, extra_sys_flag in entries:
            if not 0 < len(name) <= TOPIC_BYTES_MAX:
                continue
            hash_value = _topic_hash(<const unsigned char *>name, len(name))
            entry = _bucket(table, capacity, hash_value, <const unsigned char *>name, len(name))
            entry.hash = hash_value
            entry.length = len(name)
            memcpy(entry.name, <const char *>name, len(name))
            entry.queue_nums = queue_nums
            entry.extra_sys_flag = extra_sys_flag
            entry.topic_id = counting.topic_id(name)
        PyMem_Free(self._table)
        self._table, self._capacity = table, capacity
        return 0

    cdef TopicEntry *find(self, const unsigned char *name, Py_ssize_t length) noexcept nogil:
        cdef TopicEntry *entry
        if length <= 0 or length > TOPIC_BYTES_MAX or self._capacity == 0:
            return NULL
        entry = _bucket(self._table, self._capacity, _topic_hash(name, length), name, length)
        return entry if entry.length else NULL
