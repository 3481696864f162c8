# C-level contract of pybroker._fast.wake: a worker's sleep-flag round, in C.


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
    cdef readonly object wake_fd    # the WakeFd (its wakeups count)
    cdef public list flags
    cdef public object on_wake
    cdef public Py_ssize_t rounds_max
    cdef readonly Py_ssize_t rounds
    cdef int _fd
    cdef bint _started
    cdef object _call_soon          # loop.call_soon
    cdef object _run_soon           # self.run, made once

    cdef int _consume(self) except -1
    cdef int _run(self) except -1
