# pybroker._fast.send.held: the FIFOs of puts and the held acknowledgements (held.pxd).
"""A remoting worker's puts from their reservation to their answer (docs/architecture/
send-fast-path.md): the FIFO of puts waiting for their completion (both paths, request order),
and the held acknowledgements, THE rule for both paths' SYNC_FLUSH and SYNC_MASTER sends (the
contract and its invariants are in held.pxd)."""
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, int64_t


# --- FIFOs of puts (request order) ------------------------------------------------------------

cdef int fifo_init(Fifo *fifo, Py_ssize_t capacity) except -1:
    fifo.items = <FastSend *>PyMem_Malloc(capacity * sizeof(FastSend))
    if fifo.items == NULL:
        raise MemoryError()
    fifo.capacity = capacity
    fifo.head = fifo.tail = 0
    return 0


cdef int fifo_push(Fifo *fifo, const FastSend *item) except -1:
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


cdef FastSend *fifo_head(Fifo *fifo) noexcept nogil:
    if fifo.head == fifo.tail:
        return NULL
    return &fifo.items[fifo.head & (fifo.capacity - 1)]


cdef FastSend *fifo_at(Fifo *fifo, Py_ssize_t count) noexcept nogil:
    # The item of monotonic count ``count`` (head <= count < tail).
    return &fifo.items[count & (fifo.capacity - 1)]


cdef inline bint _live(const FastSend *item, int64_t after_id, bint fast_only) noexcept:
    # A put above after_id not withdrawn (answered busy already); fast_only: a fast send.
    return item.request_id > after_id and not item.withdrawn and not (fast_only and item.python)


cdef FastSend *fifo_first_live(Fifo *fifo, int64_t after_id, bint fast_only) noexcept:
    # The oldest (in request order) live put above after_id, or NULL.
    cdef Py_ssize_t at
    for at in range(fifo.head, fifo.tail):
        if _live(fifo_at(fifo, at), after_id, fast_only):
            return fifo_at(fifo, at)
    return NULL


# Fast failure (proc/fast_failure.py) looks at the puts of both paths waiting for their
# completion: a Python path put started waiting (for ring space) before it was queued, so the
# start times are not in request order and every walk below looks at the whole FIFO (at most
# the completion slots).

cdef int64_t fifo_aged(Fifo *fifo, int64_t limit_ns, int64_t after_id) noexcept:
    # Highest request id of a live put above after_id started at limit_ns or before; 0.
    cdef Py_ssize_t at
    cdef int64_t highest = 0
    for at in range(fifo.head, fifo.tail):
        if fifo_at(fifo, at).started_ns <= limit_ns and _live(fifo_at(fifo, at), after_id,
                                                                False):
            highest = fifo_at(fifo, at).request_id
    return highest


cdef int64_t fifo_oldest_ns(Fifo *fifo, int64_t after_id) noexcept:
    # When the longest-waiting live put above after_id started; -1 when none.
    cdef Py_ssize_t at
    cdef int64_t oldest = -1
    for at in range(fifo.head, fifo.tail):
        if _live(fifo_at(fifo, at), after_id, False) and (
                oldest < 0 or fifo_at(fifo, at).started_ns < oldest):
            oldest = fifo_at(fifo, at).started_ns
    return oldest


cdef void fifo_free(Fifo *fifo) noexcept:
    cdef FastSend *item
    if fifo.items == NULL:
        return
    item = fifo_head(fifo)
    while item != NULL:
        send_free(item)
        fifo.head += 1
        item = fifo_head(fifo)
    PyMem_Free(fifo.items)
    fifo.items = NULL


# --- held acknowledgements -----------------------------------------------------------------

cdef int held_push(Held *held, const FastSend *send) except -1:
    if send.wait_flush and held.sync_master and not send.wait_replica:
        held.flush_only += 1
    return fifo_push(&held.fifo, send)


cdef void held_advance(Held *held, int64_t flushed, int64_t replicated) noexcept:
    """Move the cursors to what the positions cover."""
    cdef Fifo *fifo = &held.fifo
    if held.flushed_cursor < fifo.head:
        held.flushed_cursor = fifo.head
    if held.replicated_cursor < fifo.head:
        held.replicated_cursor = fifo.head
    while held.flushed_cursor < fifo.tail and \
            fifo_at(fifo, held.flushed_cursor).end_position <= flushed:
        held.flushed_cursor += 1
    while held.replicated_cursor < fifo.tail and \
            fifo_at(fifo, held.replicated_cursor).end_position <= replicated:
        held.replicated_cursor += 1


cdef double held_expiry(Held *held, Py_ssize_t at) noexcept:
    """When the held send of count ``at`` may be answered by a timeout, as the cursors stand:
    the latest deadline of the conditions it still waits for (Java answers when the flush and
    the replica futures have both completed), 0 when it waits for none."""
    cdef FastSend *send = fifo_at(&held.fifo, at)
    cdef double expiry = 0
    if send.wait_flush and at >= held.flushed_cursor:
        expiry = send.deadline
    if send.wait_replica and at >= held.replicated_cursor and send.replica_deadline > expiry:
        expiry = send.replica_deadline
    return expiry


cdef FastSend *held_next(Held *held, double now, bint expire, int32_t put_ok,
                         int32_t flush_timeout, int32_t slave_timeout,
                         int32_t *status) noexcept:
    """The next held send to answer after held_advance, with its ``status``, or NULL: the
    covered prefix (popped), then the flushed sends waiting for the flush alone (in place),
    then with ``expire`` the sends past their deadlines (popped; held_expiry):
    FLUSH_SLAVE_TIMEOUT while the slave lacks the record (slaveTimeout), else
    FLUSH_DISK_TIMEOUT while the disk does (syncFlushTimeout; a SLAVE_NOT_AVAILABLE decided at
    completion stays). A send may come back answered already (swept): skip it (held_done)."""
    cdef Fifo *fifo = &held.fifo
    cdef Py_ssize_t covered = fifo.tail
    cdef FastSend *send
    if held.sync_flush:
        covered = held.flushed_cursor
    if held.sync_master and held.replicated_cursor < covered:
        covered = held.replicated_cursor
    if fifo.head < covered:
        send = fifo_at(fifo, fifo.head)
        fifo.head += 1
        status[0] = send.status
        return send
    if held.swept_cursor < fifo.head:
        held.swept_cursor = fifo.head
    while held.flush_only and held.swept_cursor < held.flushed_cursor:
        send = fifo_at(fifo, held.swept_cursor)
        held.swept_cursor += 1
        if not send.wait_replica and not send.answered:
            status[0] = send.status
            return send
    if not expire or fifo.head == fifo.tail or held_expiry(held, fifo.head) > now:
        return NULL
    send = fifo_at(fifo, fifo.head)
    status[0] = send.status
    if send.wait_replica and fifo.head >= held.replicated_cursor:
        status[0] = slave_timeout
    elif send.wait_flush and fifo.head >= held.flushed_cursor and send.status == put_ok:
        status[0] = flush_timeout
    fifo.head += 1
    return send


cdef bint held_done(Held *held, FastSend *send) noexcept:
    """Mark ``send`` answered; False when it was already (swept before it was popped)."""
    if send.answered:
        return False
    send.answered = True
    if send.wait_flush and held.sync_master and not send.wait_replica:
        held.flush_only -= 1
    return True


cdef Py_ssize_t held_unanswered(Held *held) noexcept:
    cdef Py_ssize_t at, count = 0
    for at in range(held.fifo.head, held.fifo.tail):
        count += not fifo_at(&held.fifo, at).answered
    return count


cdef Py_ssize_t held_first(Held *held, bint fast_only) noexcept:
    """The count of the oldest held send not answered yet (``fast_only``: of the fast path),
    or -1."""
    cdef Fifo *fifo = &held.fifo
    cdef Py_ssize_t at
    for at in range(fifo.head, fifo.tail):
        if not fifo_at(fifo, at).answered and not (fast_only and fifo_at(fifo, at).python):
            return at
    return -1


cdef FastSend *held_target(Held *held, bint replica) noexcept:
    """The oldest held send the flushed (``replica``: replicated) position does not cover
    yet and that waits for it, or NULL: what the position must reach to release more."""
    cdef Fifo *fifo = &held.fifo
    cdef Py_ssize_t at = held.replicated_cursor if replica else held.flushed_cursor
    if at < fifo.head:
        at = fifo.head
    if not replica:
        return fifo_at(fifo, at) if held.sync_flush and at < fifo.tail else NULL
    while at < fifo.tail:
        if fifo_at(fifo, at).wait_replica:
            return fifo_at(fifo, at)
        at += 1
    return NULL
