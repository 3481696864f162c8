# Contract of pybroker._fast.send.complete: the puts of both send paths from queueing to answer
# (completions, held acknowledgements, fast failure's walk, response frames).
from libc.stdint cimport int32_t, int64_t, uint64_t

from pybroker._fast.ring cimport CompletionRing, pb_completion_slot
from pybroker._fast.send.answer cimport Template
from pybroker._fast.send.held cimport FastSend, Fifo, Held
from pybroker._fast.send.slots cimport ConnectionSlots
from pybroker._fast.send.stats cimport SendStats

cdef enum:
    STATUSES_MAX = 24              # PutStatus values a completion may carry


cdef class SendCompletions:
    cdef CompletionRing _completions
    cdef ConnectionSlots _slots
    cdef Fifo _pending              # puts of both paths waiting for their completion
    cdef Held _held                 # acknowledgements waiting for the flush and/or a slave
    cdef pb_completion_slot *_drained
    cdef Template _templates[STATUSES_MAX]
    cdef list _template_bytes
    cdef Template _recall_templates[STATUSES_MAX]   # a parked timer message's answers
    cdef list _recall_template_bytes
    cdef int32_t _statuses_count
    cdef int32_t _put_ok
    cdef int32_t _flush_timeout_status
    cdef int32_t _slave_timeout_status
    cdef int32_t _slave_not_available_status
    cdef unsigned char _host_hex[40]
    cdef Py_ssize_t _host_hex_length
    cdef bint _sync_flush
    cdef bint _sync_master
    cdef int64_t _ha_max_gap_bytes
    cdef double _flush_timeout_s
    cdef double _slave_timeout_s
    cdef int64_t _next_request_id
    cdef Py_ssize_t _inflight
    cdef Py_ssize_t _inflight_max
    cdef SendStats _counting
    cdef list _python_outcomes      # outcomes of Python path puts answered since taken
    cdef readonly uint64_t slave_not_available_total
    cdef readonly int64_t completed_up_to   # the last request id completed (either path)

    cdef int _init_completions(self, CompletionRing completions, bytes store_ip,
                               int32_t store_port, list templates, int32_t put_ok,
                               int32_t flush_timeout_status, bint sync_flush,
                               double flush_timeout_s, bint sync_master,
                               int64_t ha_max_gap_bytes, int32_t slave_timeout_status,
                               int32_t slave_not_available_status,
                               double slave_timeout_s) except -1
    # Queue a put of either path just reserved (send/take.pyx); its request id.
    cdef int64_t _queue(self, FastSend *send, int32_t count, int64_t records_bytes,
                        int32_t *sizes, bint wait_store) except -1
    cdef int _complete(self, FastSend *send, const pb_completion_slot *done, double now,
                       int64_t now_ns, int64_t replicated, int64_t slaves) except -1
    cdef int _settle(self, int64_t flushed, int64_t replicated, double now,
                     bint expire) except -1
    cdef list _take_python(self)
    cdef int _answer(self, FastSend *send, int32_t status, bint real_ids,
                     int64_t now_ns) except -1
    cdef tuple _python_outcome(self, const FastSend *send, int32_t status, bint real_ids)
    cdef int _update_oldest(self) except -1
    cdef int64_t _fast_oldest_ms(self) noexcept
    cdef int _count(self, const FastSend *send, const Template *template, bint real_ids,
                    int64_t now_ns) except -1
