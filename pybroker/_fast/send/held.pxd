# Contract of pybroker._fast.send.held: a remoting worker's FIFOs of puts, waiting for their
# completion or held for the flush and/or a slave (SYNC_FLUSH, SYNC_MASTER). Both paths' puts are
# in them (``python``): one order, one hold rule, one implementation of acknowledgement holds.
#
# The held FIFO is in completion order, which is CommitLog order (a worker's ring is appended in
# order), so end positions grow along it and a published position covers a prefix: a cursor per
# position (flushed, replicated) marks the first count it does not cover. A send is released
# when every position it waits for covers it; the sends that wait for the flush alone (a slave
# was not available at their completion) behind one waiting for a slave are swept in place
# (marked answered), as the Python path answers them at the flush too.
from cpython.mem cimport PyMem_Free
from libc.stdint cimport int32_t, int64_t, uint32_t


cdef struct FastSend:
    # One put request, from its reservation to its answer: a fast send, or a put of the Python
    # path (``python``: its outcome goes back to proc/ring_putter.py, which answers it).
    int64_t request_id
    bint python
    int32_t slot
    uint32_t generation
    int32_t opaque
    int32_t queue_id                # answered as queueId
    int32_t count
    int64_t records_bytes           # the put's records, the bytes the appender copies as one
                                    # run: it ends at physical_offset + records_bytes (what
                                    # the acknowledgement waits for) and is what is counted
    int32_t *sizes                  # each record's size (owned, freed at answer); NULL: one
                                    # record of records_bytes
    unsigned char *recall           # a parked timer message's recall handle (owned, freed
    int32_t recall_length           # with sizes: send_free); NULL: the answer has none
    bint oneway
    bint wait_flush                 # SYNC_FLUSH: held until flushed_position covers it
    bint wait_replica               # SYNC_MASTER, a slave in sync at completion: held until
                                    # replicated_position covers it
    bint withdrawn                  # answered busy by fast failure; its completion is dropped
    bint answered                   # held, answered out of FIFO order (held_next's sweep)
    int32_t topic_id
    int32_t request_code            # SEND_MESSAGE, _V2 or SEND_BATCH_MESSAGE (rpc_latency label)
    int64_t started_ns              # when the request was read, a Python path put when it
                                    # started waiting for ring space (CLOCK_MONOTONIC)
    int64_t started_ms              # the same, epoch ms (the oldest-request gauge)
    # Filled at completion
    int32_t status                  # the answer once released: PUT_OK or SLAVE_NOT_AVAILABLE
    int64_t held_ns                 # when it began to wait for the flush / slave (monotonic)
    int64_t physical_offset
    int64_t queue_offset
    int64_t end_position
    double deadline                 # loop time: FLUSH_DISK_TIMEOUT (syncFlushTimeout)
    double replica_deadline         # loop time: FLUSH_SLAVE_TIMEOUT (slaveTimeout)


cdef struct Fifo:
    FastSend *items
    Py_ssize_t capacity             # a power of two
    Py_ssize_t head                 # monotonic counts (kept when the FIFO grows: cursors into
    Py_ssize_t tail                 # it stay valid); index = count & (capacity - 1)


cdef struct Held:
    Fifo fifo
    bint sync_flush                 # every held send waits for the flush
    bint sync_master                # a held send waits for a slave when wait_replica
    Py_ssize_t flushed_cursor       # first count whose end flushed_position does not cover
    Py_ssize_t replicated_cursor    # the same for replicated_position
    Py_ssize_t swept_cursor         # counts below it were looked at by the sweep
    Py_ssize_t flush_only           # unanswered sends waiting for the flush alone (SYNC_MASTER)


# Free what a put owns (its size table and recall handle), once.
cdef inline void send_free(FastSend *send) noexcept:
    if send.sizes != NULL:
        PyMem_Free(send.sizes)
        send.sizes = NULL
    if send.recall != NULL:
        PyMem_Free(send.recall)
        send.recall = NULL


# --- FIFOs of puts (request order) -------------------------------------------------------------
cdef int fifo_init(Fifo *fifo, Py_ssize_t capacity) except -1
cdef int fifo_push(Fifo *fifo, const FastSend *item) except -1
# The oldest item, or NULL when empty.
cdef FastSend *fifo_head(Fifo *fifo) noexcept nogil
# The item of monotonic count ``count`` (head <= count < tail).
cdef FastSend *fifo_at(Fifo *fifo, Py_ssize_t count) noexcept nogil
# The oldest (in request order) live put above after_id (not withdrawn; fast_only: a fast
# send), or NULL.
cdef FastSend *fifo_first_live(Fifo *fifo, int64_t after_id, bint fast_only) noexcept
# Fast failure: highest request id of a live put above after_id started at limit_ns or before
# (0: none); when the longest-waiting live put above after_id started (-1: none).
cdef int64_t fifo_aged(Fifo *fifo, int64_t limit_ns, int64_t after_id) noexcept
cdef int64_t fifo_oldest_ns(Fifo *fifo, int64_t after_id) noexcept
# Free the items' size tables and the FIFO (idempotent).
cdef void fifo_free(Fifo *fifo) noexcept

# --- held acknowledgements (held.pyx has each rule in its docstring) ---------------------------
cdef int held_push(Held *held, const FastSend *send) except -1
# Move the cursors to what the positions cover.
cdef void held_advance(Held *held, int64_t flushed, int64_t replicated) noexcept
# When the held send of count ``at`` may be answered by a timeout (0: waits for nothing).
cdef double held_expiry(Held *held, Py_ssize_t at) noexcept
# The next held send to answer after held_advance, with its status, or NULL.
cdef FastSend *held_next(Held *held, double now, bint expire, int32_t put_ok,
                         int32_t flush_timeout, int32_t slave_timeout,
                         int32_t *status) noexcept
# Mark ``send`` answered; False when it was already (swept before it was popped).
cdef bint held_done(Held *held, FastSend *send) noexcept
cdef Py_ssize_t held_unanswered(Held *held) noexcept
# The count of the oldest held send not answered yet (fast_only: of the fast path), or -1.
cdef Py_ssize_t held_first(Held *held, bint fast_only) noexcept
# What the flushed (replica: replicated) position must reach to release more, or NULL.
cdef FastSend *held_target(Held *held, bint replica) noexcept
