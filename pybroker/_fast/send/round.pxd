# C-level contract of pybroker._fast.send.round: a worker's completion wake-up, in C.
from libc.stdint cimport int64_t, uint64_t

from pybroker._fast.send.take cimport SendPath


cdef class HeldRequests:
    cdef public list holders        # objects with a held_count (the worker's long polls)

    cdef bint held_c(self) except -1


cdef class CompletionRound:
    cdef public SendPath core       # None: every wake-up is Python's
    cdef object load_dispatched     # the control block's dispatched position (a C call)
    cdef public int64_t dispatched_seen
    cdef public HeldRequests held   # or None
    cdef public list answers        # containers of answers queued for the next flush
    cdef public object python       # python(outcomes, outputs, moved)
    cdef readonly uint64_t c_rounds         # wake-ups that needed no Python
    cdef readonly uint64_t python_rounds    # wake-ups handed to python()

    cdef bint python_first(self) except -1
    cdef bint moved_c(self) except -1
