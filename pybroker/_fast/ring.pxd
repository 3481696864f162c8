# Contract of pybroker._fast.ring: SPSC byte and completion rings in shared memory, 64-bit atomics.
from libc.stdint cimport uint32_t, uint64_t, int32_t, int64_t

cdef extern from "ring.h" nogil:
    uint64_t pb_load_acquire_u64(const uint64_t *p)
    uint64_t pb_load_relaxed_u64(const uint64_t *p)
    void pb_store_release_u64(uint64_t *p, uint64_t v)
    void pb_store_relaxed_u64(uint64_t *p, uint64_t v)
    uint64_t pb_exchange_u64(uint64_t *p, uint64_t v)
    uint64_t pb_fetch_or_u64(uint64_t *p, uint64_t bits)
    uint64_t pb_fetch_and_u64(uint64_t *p, uint64_t bits)
    uint64_t pb_fetch_add_u64(uint64_t *p, uint64_t v)
    uint64_t pb_compare_exchange_u64(uint64_t *p, uint64_t expected, uint64_t desired)
    void pb_fence()
    uint64_t pb_max_u64(uint64_t *p, uint64_t v)
    uint32_t pb_ring_load_u32(const unsigned char *p)
    void pb_ring_store_u32(unsigned char *p, uint32_t v)
    const uint64_t PB_RING_MAGIC_BYTES
    const uint64_t PB_RING_MAGIC_COMPLETION
    const uint32_t PB_RING_PADDING_MARKER
    ctypedef struct pb_completion_slot:
        int64_t request_id
        int32_t status
        int32_t count
        int64_t physical_offset
        int64_t queue_offset

# Region header shared by both ring kinds: one 64-byte cache line per word that changes, so the
# producer's and the consumer's stores never share a line (no false sharing across processes).
#   line 0  @0    magic u64 | capacity u64 (bytes or slots) | rest zero   (immutable)
#   line 1  @64   producer cursor u64 (monotonic; bytes or slots ever published)
#   line 2  @128  consumer cursor u64 (monotonic; bytes or slots ever released)
#   line 3  @192  consumer sleeping flag u64 (1 = the consumer is about to block on its eventfd)
#   line 4  @256  producer sleeping flag u64 (1 = the producer waits for space; byte ring only)
#   @320          data area: capacity bytes, or slot_count x 32-byte completion slots
cpdef enum:
    RING_CACHE_LINE_BYTES = 64
    RING_MAGIC_OFFSET = 0
    RING_CAPACITY_OFFSET = 8
    RING_PRODUCER_CURSOR_OFFSET = RING_CACHE_LINE_BYTES
    RING_CONSUMER_CURSOR_OFFSET = RING_PRODUCER_CURSOR_OFFSET + RING_CACHE_LINE_BYTES
    RING_CONSUMER_SLEEPING_OFFSET = RING_CONSUMER_CURSOR_OFFSET + RING_CACHE_LINE_BYTES
    RING_PRODUCER_SLEEPING_OFFSET = RING_CONSUMER_SLEEPING_OFFSET + RING_CACHE_LINE_BYTES
    RING_HEADER_BYTES = RING_PRODUCER_SLEEPING_OFFSET + RING_CACHE_LINE_BYTES
    # A byte-ring record: 4-byte native length, payload, unused fill to the next 8-byte boundary.
    RING_RECORD_LENGTH_BYTES = 4
    RING_RECORD_ALIGN_BYTES = 8
    RING_CAPACITY_MIN_BYTES = 64
    RING_CAPACITY_MAX_BYTES = 1 << 30
    COMPLETION_SLOT_BYTES = 32
    COMPLETION_SLOTS_MIN = 2
    COMPLETION_SLOTS_MAX = 1 << 24


# Status codes of the C-level calls (returned, never raised, so they run without the GIL).
cdef enum:
    RING_FULL = -1
    RING_TOO_LARGE = -2
    RING_CORRUPT = -3


cdef class ByteRing:
    cdef object _owner
    cdef Py_buffer _view
    cdef bint _has_view
    cdef unsigned char *_data
    cdef uint64_t _capacity
    cdef uint64_t _mask
    cdef uint64_t _record_max_bytes
    cdef uint64_t *_producer_cursor
    cdef uint64_t *_consumer_cursor
    cdef uint64_t *_consumer_sleeping
    cdef uint64_t *_producer_sleeping
    # producer-private: cursor after the last reservation, last consumer cursor seen
    cdef uint64_t _reserved_tail
    cdef uint64_t _cached_head
    # consumer-private: released cursor and the last peeked run (data offsets + cursor of start)
    cdef uint64_t _head
    cdef uint64_t _run_start
    cdef uint64_t _run_end
    cdef uint64_t _run_start_cursor
    cdef object _data_view

    cdef int _check_open(self) except -1

    # Data-area offset of the payload of a new record of size bytes, RING_FULL or RING_TOO_LARGE.
    cdef int64_t reserve_c(self, uint64_t size) noexcept nogil
    # Publish every reservation; returns True when the consumer had flagged itself asleep.
    cdef bint commit_c(self) noexcept nogil
    # Committed run from the consumer cursor; 0, or RING_CORRUPT when a length is impossible.
    cdef int peek_c(self, uint64_t max_records, uint64_t *count, uint64_t *start,
                    uint64_t *end) noexcept nogil
    # Free the peeked run up to data offset end (validated by the caller); True if the
    # producer had flagged itself asleep.
    cdef bint release_c(self, uint64_t end) noexcept nogil


cdef class CompletionRing:
    cdef Py_buffer _view
    cdef bint _has_view
    cdef pb_completion_slot *_slots
    cdef uint64_t _slot_count
    cdef uint64_t _mask
    cdef uint64_t *_producer_cursor
    cdef uint64_t *_consumer_cursor
    cdef uint64_t *_consumer_sleeping
    cdef uint64_t _pushed_tail
    cdef uint64_t _cached_head
    cdef bint _wake_pending
    cdef uint64_t _head

    cdef int _check_open(self) except -1
    # Producer: slots free for push_c now (neither pushed nor published-and-undrained).
    cdef uint64_t free_slots_c(self) noexcept nogil
    cdef bint push_c(self, int64_t request_id, int32_t status, int32_t count,
                     int64_t physical_offset, int64_t queue_offset) noexcept nogil
    cdef bint publish_c(self) noexcept nogil
    # Consumer: copy up to max_count published completions, oldest first, to out and free their
    # slots (one release store); *taken = how many. 0, or RING_CORRUPT for impossible cursors.
    cdef int drain_c(self, pb_completion_slot *out, uint64_t max_count,
                     uint64_t *taken) noexcept nogil
