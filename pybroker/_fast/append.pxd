# C-level contract of pybroker._fast.append: the queue-offset map and the ring drain loop.
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

from pybroker._fast.ring cimport ByteRing, CompletionRing
from pybroker._fast.tqmap cimport pb_tq_map

# Where one drain call appends, and what it did (file positions and offsets in bytes).
cdef struct DrainTarget:
    unsigned char *file_data     # the mapped CommitLog file (NULL while refusing)
    int64_t position             # wrote position in the file
    int64_t file_size
    int64_t file_from_offset     # global offset of the file's first byte
    int64_t store_timestamp      # ms, one per drain
    int32_t refuse_status        # >= 0: every request completes with this status
    int64_t taken                # requests taken from the ring
    int64_t appended             # records appended
    int64_t failed               # requests completed with another status than PUT_OK
    uint64_t *taken_word         # this ring's taken_request_id (NULL: no fast-failure claim)
    uint64_t *cancel_word        # its producer's cancel_request_id
    int64_t cancelled_up_to      # loaded after the batch's claim


cdef class TopicQueueOffsets:
    cdef pb_tq_map map


cdef class RingDrainer:
    cdef TopicQueueOffsets offsets
    cdef int32_t ok_code
    cdef int32_t illegal_code
    cdef int32_t size_exceeded_code
    cdef int32_t cancelled_code
    cdef Py_buffer control       # the control block's words (bind_control)
    cdef bint has_control

    # Drain up to two contiguous runs of ring into target; a DRAIN_* stop or RING_CORRUPT.
    cdef int _drain(self, ByteRing ring, CompletionRing completions, DrainTarget *target,
                    bint *wake_producer) noexcept nogil
    cdef int _append_one(self, unsigned char *request, int64_t length,
                         CompletionRing completions, DrainTarget *target) noexcept nogil
    cdef int _complete(self, CompletionRing completions, DrainTarget *target,
                       int64_t request_id, int32_t status) noexcept nogil
