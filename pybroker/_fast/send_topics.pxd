# pybroker._fast.send_topics: the send fast path's table of topics (open addressing, FNV-1a),
# inline helpers for send_path.pyx.
from libc.stdint cimport int32_t, uint64_t
from libc.string cimport memcmp

cdef enum:
    TOPIC_BYTES_MAX = 127          # a topic of the fast table (a producer's send: 127 bytes)


cdef struct TopicEntry:
    uint64_t hash
    Py_ssize_t length               # 0: free bucket
    unsigned char name[TOPIC_BYTES_MAX]
    int32_t queue_nums              # max(read, write) queue counts: the queue id bound
    int32_t extra_sys_flag          # MULTI_TAGS for MULTI_TAG topics
    int32_t topic_id                # index in SendPath._topic_names (stable across tables)


cdef inline uint64_t topic_hash(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    cdef uint64_t h = 14695981039346656037ULL      # FNV-1a
    cdef Py_ssize_t i
    for i in range(n):
        h = (h ^ p[i]) * 1099511628211ULL
    return h


cdef inline TopicEntry *topic_bucket(TopicEntry *table, Py_ssize_t capacity, uint64_t hash_value,
                                     const unsigned char *name, Py_ssize_t length) noexcept nogil:
    """The bucket holding ``name`` or, when absent, the free bucket it would take
    (``capacity``: a power of two, with a free bucket)."""
    cdef Py_ssize_t index = <Py_ssize_t>(hash_value & <uint64_t>(capacity - 1))
    while table[index].length and not (
            table[index].hash == hash_value and table[index].length == length
            and memcmp(table[index].name, name, <size_t>length) == 0):
        index = (index + 1) & (capacity - 1)
    return &table[index]
