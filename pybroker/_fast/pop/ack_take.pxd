# Contract of pybroker._fast.pop.ack_take: a remoting worker's ACK_MESSAGE taker (its fields
# and C methods; what Python sees is ack_take.pyi).
from libc.stdint cimport int64_t, uint64_t

from pybroker._fast.pop.ack cimport AckRecord, AckRecordSettings
from pybroker._fast.send.take cimport SendPath
from pybroker._fast.taker cimport Scratch


cdef class AckTaker:
    cdef SendPath _core
    cdef AckRecordSettings _settings
    cdef bytes _revive_topic
    cdef bytes _timer_topic
    cdef bytes _store_ip
    cdef object _wheel
    cdef object _lookup
    cdef object _clock_ms
    cdef int64_t _take_ms
    cdef Scratch _scratch
    cdef unsigned char *_record
    cdef Py_ssize_t _frame_max_bytes
    cdef Py_ssize_t _ext_fields_max
    cdef public bint divert         # every frame goes to the handler (fast failure, settings)
    cdef readonly uint64_t acks_total
    cdef readonly uint64_t other_frames_total

    cdef int _take_one(self, const unsigned char *frame, Py_ssize_t frame_bytes,
                       list taken) except -2
    cdef int64_t _put(self, const AckRecord *record) except -2
