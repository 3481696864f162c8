# Contract of pybroker._fast.send.take: the send fast path of a remoting worker (frames -> put
# requests in the send ring it shares with the Python path), on top of send/complete.pxd.
from libc.stdint cimport int32_t, int64_t, uint64_t

from pybroker._fast.record cimport RecordFields
from pybroker._fast.ring cimport ByteRing
from pybroker._fast.send.complete cimport SendCompletions
from pybroker._fast.send.read cimport PropertyScan, SendRequest
from pybroker._fast.send.slots cimport ConnectionSlot
from pybroker._fast.send.timer cimport TimerPark, TimerSettings
from pybroker._fast.send.topics cimport TopicEntry, TopicTable
from pybroker._fast.taker cimport Scratch, TakeAnswer


# What one SendPath.take_c did: the frame taker's answer, the requests it committed and whether
# the commit found the appender asleep.
cdef struct SendTaken:
    TakeAnswer answer
    uint64_t puts
    bint asleep


cdef class SendPath(SendCompletions):
    cdef ByteRing _ring
    cdef TopicTable _topics
    cdef unsigned char _store_ip[16]
    cdef Py_ssize_t _store_ip_length
    cdef int32_t _store_port
    cdef bytes _cluster_pair
    cdef Py_ssize_t _max_message_size
    cdef Py_ssize_t _frame_max_bytes
    cdef Py_ssize_t _ext_fields_max
    cdef Scratch _scratch
    cdef unsigned char *_properties
    cdef int64_t _take_ns
    cdef int64_t _take_ms
    cdef TimerSettings _timer       # 5.x timer messages (set_timer)
    cdef object _timer_wheel        # the buffer _timer.wheel points into (set_timer_wheel)
    cdef bint _timer_on
    cdef bytes _timer_topic
    cdef int _timer_message_type
    cdef int32_t _timer_topic_id
    cdef bytes _broker_name
    cdef public bint python_waiting
    cdef public bint divert         # every frame goes to the Python path (page cache busy)
    cdef readonly uint64_t fast_puts_total
    cdef readonly uint64_t fast_frames_total
    cdef readonly uint64_t other_frames_total
    cdef readonly uint64_t timer_puts_total     # timer messages parked by the fast path

    cdef int take_c(self, object buffer, Py_ssize_t start, Py_ssize_t end, Py_ssize_t slot,
                    SendTaken *taken) except -1
    cdef bint _room(self) noexcept
    cdef Py_ssize_t _python_topic(self, bytes topic) except -1
    cdef int _python_fits(self, Py_ssize_t topic_length, int64_t records_bytes) except -1
    cdef int64_t _queue_python(self, int32_t queue_id, int32_t count, int64_t records_bytes,
                               bint wait_store, double started) except -1
    cdef int64_t _reserve(self, const unsigned char *topic, Py_ssize_t length,
                          Py_ssize_t records_bytes, int32_t queue_id, int32_t count,
                          int32_t sys_flag, bint wait_store) noexcept
    cdef int _pend(self, Py_ssize_t slot, const SendRequest *request, int32_t topic_id,
                   int32_t count, int64_t records_bytes, int32_t *sizes,
                   bint wait_store, unsigned char *recall=*,
                   int32_t recall_length=*) except -1
    cdef Py_ssize_t _stored_properties(self, const SendRequest *request,
                                       PropertyScan *scan) noexcept
    cdef Py_ssize_t _with_cluster(self, Py_ssize_t length) noexcept
    cdef Py_ssize_t _timer_properties(self, const SendRequest *request,
                                      const TopicEntry *topic, PropertyScan *scan,
                                      TimerPark *park) noexcept
    cdef void _fields(self, RecordFields *f, const SendRequest *request, int32_t sys_flag,
                      int32_t flag, const ConnectionSlot *connection) noexcept
    cdef int _put_single(self, const SendRequest *request, TopicEntry *topic,
                         Py_ssize_t slot) except -2
    cdef int _put_batch(self, const SendRequest *request, TopicEntry *topic,
                        Py_ssize_t slot) except -2
