# C-level contract of pybroker._fast.wake: a worker's sleep-flag round, in C.
from libc.stdint cimport int64_t


cdef class WakeFd:
    cdef public int fd
    cdef public Py_ssize_t signals_sent     # signals written by this process
    cdef public Py_ssize_t wakeups          # reads that found a signal

    # One write of 1 (a full counter: nothing to do).
    cdef int signal_c(self) except -1
    # The counter read and reset (at most INT64_MAX), 0 when it was 0.
    cdef int64_t consume_c(self) except -1
    # poll() for timeout_ms (-1: no limit), then consume_c(); True when signalled.
    cdef bint wait_c(self, int timeout_ms) except -1


cdef class DeferredSignal:
    cdef readonly WakeFd wake_fd
    cdef readonly Py_ssize_t deferred_max   # puts committed before it goes out anyway
    cdef readonly bint pending              # a wake-up waits for the end of the turn
    cdef readonly Py_ssize_t deferred       # puts committed since it was deferred
    cdef object _loop                       # the loop it defers in
    cdef object _ready_append               # that loop's ready queue's append
    cdef object _handle                     # the reusable handle (callback: this object)

    # After a commit of puts (RingPutter.after_commit; the send port's take).
    cdef int after_commit_c(self, object loop, bint appender_asleep,
                            Py_ssize_t puts) except -1
    cdef int _bind(self, object loop) except -1
    cdef int _fire(self) except -1


cdef class ProducerSide:
    cdef object _set                # the ring's set_producer_sleeping
    cdef object _clear              # the ring's clear_producer_sleeping
    cdef object _wanted             # "something waits for space", or None
    cdef object _ready              # "freed space counts as work", or None


cdef class WhileWanted:
    cdef public list flags
    cdef public object wanted
    cdef public bint armed


# Set every flag; True (all cleared again) as soon as one reports work.
cdef bint arm_c(list flags) except -1
# Clear every flag.
cdef int disarm_c(list flags) except -1


cdef class AsyncWakeReader:
    cdef readonly object loop
    cdef readonly WakeFd wake_fd    # its wakeups count
    cdef public list flags
    cdef public object on_wake
    cdef public Py_ssize_t rounds_max
    cdef readonly Py_ssize_t rounds
    cdef int _fd
    cdef bint _started
    cdef object _call_soon          # loop.call_soon
    cdef object _run_soon           # self.run, made once

    cdef int _run(self) except -1
