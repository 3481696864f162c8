# C-level contract of pybroker._fast.dispatch: the reput loop (CommitLog records -> consume
# queue units + index entries) over buffers bound by the Python dispatcher for one call.
from libc.stdint cimport int32_t, int64_t

from pybroker._fast.tqmap cimport pb_tq_map


# One consume queue's last file while bound (positions and offsets in bytes).
cdef struct QueueSlot:
    Py_buffer view                # the file's writable map (held while bound)
    bint bound
    bint dirty                    # written since the last take_dirty()
    bint unpublished              # written since the last publish_offsets()
    Py_ssize_t offset_word        # byte position of the queue's max-offset word (-1: none)
    int64_t file_from_offset      # consume-queue offset of the file's first byte
    int64_t file_size
    int64_t wrote_position        # file position of the next unit
    int64_t last_dispatched_phy   # CommitLog end (physical offset + size) of the last unit


# The newest IndexFile while bound.
cdef struct IndexTarget:
    Py_buffer view
    bint bound
    int64_t hash_slots            # maxHashSlotNum
    int64_t index_max             # maxIndexNum
    int64_t entries_position      # 40 + 4 * hash_slots


# The properties of one record the reput needs (pointers into the record; length 0 = absent).
cdef struct WantedProperties:
    const unsigned char *tags
    Py_ssize_t tags_length
    const unsigned char *keys
    Py_ssize_t keys_length
    const unsigned char *uniq_key
    Py_ssize_t uniq_key_length


cdef class ReputScanner:
    cdef pb_tq_map queues
    cdef QueueSlot **slots
    cdef Py_ssize_t slot_count
    cdef Py_ssize_t slot_capacity
    cdef IndexTarget index
    cdef bint index_enabled
    cdef int64_t last_store_timestamp
    # The record that stopped the last scan with NEED_QUEUE: where its topic is, its queue.
    cdef Py_ssize_t stopped_topic_position
    cdef Py_ssize_t stopped_topic_length
    cdef int32_t stopped_queue_id

    cdef void _forget(self) noexcept
    cdef void _release_all(self) noexcept
    cdef QueueSlot *_slot_of(self, bytes topic, int32_t queue_id) except NULL
    cdef int _scan(self, const unsigned char *data, Py_ssize_t *position, Py_ssize_t end,
                   int64_t *count) noexcept nogil
    cdef int _dispatch_one(self, const unsigned char *data, Py_ssize_t position,
                           Py_ssize_t end, Py_ssize_t *total_size) noexcept nogil
    cdef void _index_keys(self, const unsigned char *topic, Py_ssize_t topic_length,
                          const WantedProperties *wanted, int64_t phy_offset,
                          int64_t store_timestamp) noexcept nogil
