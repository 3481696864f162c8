# Contract of pybroker._fast.send.port: a client connection's take of the send fast path, in C.
from pybroker._fast.send.take cimport SendPath
from pybroker._fast.socket_reader cimport CTaker
from pybroker._fast.taker cimport TakeAnswer
from pybroker._fast.wake cimport DeferredSignal


cdef class PortTake(CTaker):
    cdef readonly SendPath core
    cdef Py_ssize_t _slot
    cdef object _putter             # the RingPutter (puts_total)
    cdef DeferredSignal _appender_signal    # its appender_signal (after_commit in C)
    cdef object _fast_failure       # its FastFailure, or None
    cdef object _busy_since         # fast_failure.busy_since (the appender's busy_since_ms)
    cdef object _loop

    cdef int take_c(self, object buffer, Py_ssize_t start, Py_ssize_t end,
                    TakeAnswer *answer) except -1


# The nothing-to-do test of FastFailure.committed (a twin).
cdef bint arms_queue_timeout(object fast_failure) except -1
