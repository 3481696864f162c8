# pybroker._fast.send_fifo: a remoting worker's FIFOs of puts (waiting for their completion, or
# held for the flush and/or a slave), inline helpers for send_path.pyx. Both paths' puts are in
# them (``python``): one order, one hold rule.
from cpython.mem cimport PyMem_Free, PyMem_Malloc
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
    bint oneway
    bint wait_flush                 # SYNC_FLUSH: held until flushed_position covers it
    bint wait_replica               # SYNC_MASTER, a slave in sync at completion: held until
                                    # replicated_position covers it
    bint withdrawn                  # answered busy by fast failure; its completion is dropped
    bint answered                   # held, answered out of FIFO order (send_path _sweep)
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


# --- FIFOs of fast puts (request order) ----------------------------------------------------------

cdef inline int _fifo_init(Fifo *fifo, Py_ssize_t capacity) except -1:
    fifo.items = <FastSend *>PyMem_Malloc(capacity * sizeof(FastSend))
    if fifo.items == NULL:
        raise MemoryError()
    fifo.capacity = capacity
    fifo.head = fifo.tail = 0
    return 0


cdef inline int _fifo_push(Fifo *fifo, const FastSend *item) except -1:
    cdef FastSend *grown
    cdef Py_ssize_t index
    if fifo.tail - fifo.head == fifo.capacity:
        grown = <FastSend *>PyMem_Malloc(2 * fifo.capacity * sizeof(FastSend))
        if grown == NULL:
            raise MemoryError()
        for index in range(fifo.head, fifo.tail):
            grown[index & (2 * fifo.capacity - 1)] = fifo.items[index & (fifo.capacity - 1)]
        PyMem_Free(fifo.items)
        fifo.items = grown
        fifo.capacity *= 2
    fifo.items[fifo.tail & (fifo.capacity - 1)] = item[0]
    fifo.tail += 1
    return 0


cdef inline FastSend *_fifo_head(Fifo *fifo) noexcept nogil:
    if fifo.head == fifo.tail:
        return NULL
    return &fifo.items[fifo.head & (fifo.capacity - 1)]


cdef inline FastSend *_fifo_at(Fifo *fifo, Py_ssize_t count) noexcept nogil:
    # The item of monotonic count ``count`` (head <= count < tail).
    return &fifo.items[count & (fifo.capacity - 1)]


cdef inline bint _live(const FastSend *item, int64_t after_id, bint fast_only) noexcept:
    # A put above after_id not withdrawn (answered busy already); fast_only: a fast send.
    return item.request_id > after_id and not item.withdrawn and not (fast_only and item.python)


cdef inline FastSend *_fifo_first_live(Fifo *fifo, int64_t after_id, bint fast_only) noexcept:
    # The oldest (in request order) live put above after_id, or NULL.
    cdef Py_ssize_t at
    for at in range(fifo.head, fifo.tail):
        if _live(_fifo_at(fifo, at), after_id, fast_only):
            return _fifo_at(fifo, at)
    return NULL


# Fast failure (proc/fast_failure.py) looks at the puts of both paths waiting for their
# completion: a Python path put started waiting (for ring space) before it was queued, so the
# start times are not in request order and every walk below looks at the whole FIFO (at most
# the completion slots).

cdef inline int64_t _fifo_aged(Fifo *fifo, int64_t limit_ns, int64_t after_id) noexcept:
    # Highest request id of a live put above after_id started at limit_ns or before; 0.
    cdef Py_ssize_t at
    cdef int64_t highest = 0
    for at in range(fifo.head, fifo.tail):
        if _fifo_at(fifo, at).started_ns <= limit_ns and _live(_fifo_at(fifo, at), after_id,
                                                                False):
            highest = _fifo_at(fifo, at).request_id
    return highest


cdef inline int64_t _fifo_oldest_ns(Fifo *fifo, int64_t after_id) noexcept:
    # When the longest-waiting live put above after_id started; -1 when none.
    cdef Py_ssize_t at
    cdef int64_t oldest = -1
    for at in range(fifo.head, fifo.tail):
        if _live(_fifo_at(fifo, at), after_id, False) and (
                oldest < 0 or _fifo_at(fifo, at).started_ns < oldest):
            oldest = _fifo_at(fifo, at).started_ns
    return oldest


cdef inline void _fifo_free(Fifo *fifo) noexcept:
    cdef FastSend *item
    if fifo.items == NULL:
        return
    item = _fifo_head(fifo)
    while item != NULL:
        if item.sizes != NULL:
            PyMem_Free(item.sizes)
        fifo.head += 1
        item = _fifo_head(fifo)
    PyMem_Free(fifo.items)
    fifo.items = NULL
