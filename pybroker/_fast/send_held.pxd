# pybroker._fast.send_held: a remoting worker's held acknowledgements (SYNC_FLUSH, SYNC_MASTER),
# both paths' (the Python path's puts are held here too), inline helpers for send_path.pyx.
#
# ONE FIFO in completion order, which is CommitLog order (a worker's ring is appended in order),
# so end positions grow along it and a published position covers a prefix: a cursor per
# position (flushed, replicated) marks the first count it does not cover. A send is released
# when every position it waits for covers it; the sends that wait for the flush alone (a slave
# was not available at their completion) behind one waiting for a slave are swept in place
# (marked answered), as the Python path answers them at the flush too.
from libc.stdint cimport int32_t, int64_t

from pybroker._fast.send_fifo cimport FastSend, Fifo, _fifo_at, _fifo_push


cdef struct Held:
    Fifo fifo
    bint sync_flush                 # every held send waits for the flush
    bint sync_master                # a held send waits for a slave when wait_replica
    Py_ssize_t flushed_cursor       # first count whose end flushed_position does not cover
    Py_ssize_t replicated_cursor    # the same for replicated_position
    Py_ssize_t swept_cursor         # counts below it were looked at by the sweep
    Py_ssize_t flush_only           # unanswered sends waiting for the flush alone (SYNC_MASTER)


cdef inline int _held_push(Held *held, const FastSend *send) except -1:
    if send.wait_flush and held.sync_master and not send.wait_replica:
        held.flush_only += 1
    return _fifo_push(&held.fifo, send)


cdef inline void _held_advance(Held *held, int64_t flushed, int64_t replicated) noexcept:
    """Move the cursors to what the positions cover."""
    cdef Fifo *fifo = &held.fifo
    if held.flushed_cursor < fifo.head:
        held.flushed_cursor = fifo.head
    if held.replicated_cursor < fifo.head:
        held.replicated_cursor = fifo.head
    while held.flushed_cursor < fifo.tail and \
            _fifo_at(fifo, held.flushed_cursor).end_position <= flushed:
        held.flushed_cursor += 1
    while held.replicated_cursor < fifo.tail and \
            _fifo_at(fifo, held.replicated_cursor).end_position <= replicated:
        held.replicated_cursor += 1


cdef inline double _held_expiry(Held *held, Py_ssize_t at) noexcept:
    """When the held send of count ``at`` may be answered by a timeout, as the cursors stand:
    the latest deadline of the conditions it still waits for (Java answers when the flush and
    the replica futures have both completed), 0 when it waits for none."""
    cdef FastSend *send = _fifo_at(&held.fifo, at)
    cdef double expiry = 0
    if send.wait_flush and at >= held.flushed_cursor:
        expiry = send.deadline
    if send.wait_replica and at >= held.replicated_cursor and send.replica_deadline > expiry:
        expiry = send.replica_deadline
    return expiry


cdef inline FastSend *_held_next(Held *held, double now, bint expire, int32_t put_ok,
                                 int32_t flush_timeout, int32_t slave_timeout,
                                 int32_t *status) noexcept:
    """The next held send to answer after _held_advance, with its ``status``, or NULL: the
    covered prefix (popped), then the flushed sends waiting for the flush alone (in place),
    then with ``expire`` the sends past their deadlines (popped; _held_expiry):
    FLUSH_SLAVE_TIMEOUT while the slave lacks the record (slaveTimeout), else
    FLUSH_DISK_TIMEOUT while the disk does (syncFlushTimeout; a SLAVE_NOT_AVAILABLE decided at
    completion stays). A send may come back answered already (swept): skip it (_held_done)."""
    cdef Fifo *fifo = &held.fifo
    cdef Py_ssize_t covered = fifo.tail
    cdef FastSend *send
    if held.sync_flush:
        covered = held.flushed_cursor
    if held.sync_master and held.replicated_cursor < covered:
        covered = held.replicated_cursor
    if fifo.head < covered:
        send = _fifo_at(fifo, fifo.head)
        fifo.head += 1
        status[0] = send.status
        return send
    if held.swept_cursor < fifo.head:
        held.swept_cursor = fifo.head
    while held.flush_only and held.swept_cursor < held.flushed_cursor:
        send = _fifo_at(fifo, held.swept_cursor)
        held.swept_cursor += 1
        if not send.wait_replica and not send.answered:
            status[0] = send.status
            return send
    if not expire or fifo.head == fifo.tail or _held_expiry(held, fifo.head) > now:
        return NULL
    send = _fifo_at(fifo, fifo.head)
    status[0] = send.status
    if send.wait_replica and fifo.head >= held.replicated_cursor:
        status[0] = slave_timeout
    elif send.wait_flush and fifo.head >= held.flushed_cursor and send.status == put_ok:
        status[0] = flush_timeout
    fifo.head += 1
    return send


cdef inline bint _held_done(Held *held, FastSend *send) noexcept:
    """Mark ``send`` answered; False when it was already (swept before it was popped)."""
    if send.answered:
        return False
    send.answered = True
    if send.wait_flush and held.sync_master and not send.wait_replica:
        held.flush_only -= 1
    return True


cdef inline Py_ssize_t _held_unanswered(Held *held) noexcept:
    cdef Py_ssize_t at, count = 0
    for at in range(held.fifo.head, held.fifo.tail):
        count += not _fifo_at(&held.fifo, at).answered
    return count


cdef inline Py_ssize_t _held_first(Held *held, bint fast_only) noexcept:
    """The count of the oldest held send not answered yet (``fast_only``: of the fast path),
    or -1."""
    cdef Fifo *fifo = &held.fifo
    cdef Py_ssize_t at
    for at in range(fifo.head, fifo.tail):
        if not _fifo_at(fifo, at).answered and not (fast_only and _fifo_at(fifo, at).python):
            return at
    return -1


cdef inline FastSend *_held_target(Held *held, bint replica) noexcept:
    """The oldest held send the flushed (``replica``: replicated) position does not cover
    yet and that waits for it, or NULL: what the position must reach to release more."""
    cdef Fifo *fifo = &held.fifo
    cdef Py_ssize_t at = held.replicated_cursor if replica else held.flushed_cursor
    if at < fifo.head:
        at = fifo.head
    if not replica:
        return _fifo_at(fifo, at) if held.sync_flush and at < fifo.tail else NULL
    while at < fifo.tail:
        if _fifo_at(fifo, at).wait_replica:
            return _fifo_at(fifo, at)
        at += 1
    return NULL
