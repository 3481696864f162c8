# Contract of pybroker._fast.pop.ack_take: a remoting worker's ACK_MESSAGE taker (its fields
# and C methods; what Python sees is ack_take.pyi).
from libc.stdint cimport int32_t, int64_t, uint64_t

from pybroker._fast.pop.ack cimport AckRecord, AckRecordSettings
from pybroker._fast.send.take cimport SendPath
from pybroker._fast.stats cimport StatsWriter
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


# The end of a worker's fast acks (the handler's end of an ack after its put; ack_take.pyx).
cdef class AckEnd:
    cdef object _ctx
    cdef object _answers
    cdef bytes _before
    cdef bytes _after
    cdef object _ack_put
    cdef tuple _stored
    cdef int32_t _request_code
    cdef int32_t _response_code
    cdef dict _ack_keys               # (topic, group) -> the writer's GROUP_ACK entry
    cdef dict _rpc_keys               # send/stats.pxd count_rpc's cache

    cdef bytes _frame(self, int32_t opaque)
    cdef int _count_ack(self, StatsWriter writer, str topic, str group) except -1
    cdef int settle(self, FastAck ack, object status) except -1


# One ack put, until its outcome (the putter's pending put).
cdef class FastAck:
    cdef AckEnd end
    cdef readonly object connection
    cdef readonly tuple entry
    cdef object token
    cdef int64_t started_ns
