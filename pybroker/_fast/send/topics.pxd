# Contract of pybroker._fast.send.topics: the send fast path's table of topics (open addressing,
# FNV-1a), rebuilt whole from the worker's metadata replica (broker/send_fast.py fast_topics).
from libc.stdint cimport int32_t, uint64_t

from pybroker._fast.send.stats cimport SendStats

cdef enum:
    TOPIC_BYTES_MAX = 127          # a topic of the fast table (a producer's send: 127 bytes)


cdef struct TopicEntry:
    uint64_t hash
    Py_ssize_t length               # 0: free bucket
    unsigned char name[TOPIC_BYTES_MAX]
    int32_t queue_nums              # max(read, write) queue counts: the queue id bound
    int32_t extra_sys_flag          # MULTI_TAGS for MULTI_TAG topics
    int32_t topic_id                # SendStats.topic_id (stable across tables)


cdef class TopicTable:
    cdef TopicEntry *_table
    cdef Py_ssize_t _capacity
    cdef list entries               # as last given to replace

    # Replace the table with ``[(topic UTF-8 bytes, queue_nums, extra_sys_flag)]``; topics
    # longer than TOPIC_BYTES_MAX are left out; each gets its id from ``counting``.
    cdef int replace(self, list entries, SendStats counting) except -1
    # The entry of the topic ``name`` (``length`` bytes), or NULL when it is not in the table.
    cdef TopicEntry *find(self, const unsigned char *name, Py_ssize_t length) noexcept nogil
