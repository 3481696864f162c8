# Contract of pybroker._fast.send_path: the send fast path of a remoting worker (frames -> ring
# records; completions -> response frames), sharing one send ring with the Python path.
from cpython.mem cimport PyMem_Realloc
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

from pybroker._fast.ring cimport ByteRing, CompletionRing, pb_completion_slot
from pybroker._fast.send_answer cimport Template
from pybroker._fast.send_fifo cimport FastSend, Fifo
from pybroker._fast.send_held cimport Held
from pybroker._fast.send_stats cimport SendStats
from pybroker._fast.send_topics cimport TOPIC_BYTES_MAX, TopicEntry
from pybroker._fast.record cimport RecordFields
from pybroker._fast.send_read cimport PropertyScan, SendRequest

cdef enum:
    STATUSES_MAX = 24              # PutStatus values a completion may carry


cdef struct ConnectionSlot:
    unsigned char born_ip[16]
    Py_ssize_t born_ip_length       # 4 or 16; 0 while the slot is free
    int32_t born_port
    uint32_t generation             # bumped at close: late completions for it are dropped
    unsigned char *output           # response frames written since the last take_outputs
    Py_ssize_t output_length
    Py_ssize_t output_capacity
    bint dirty


cdef inline unsigned char *_output(ConnectionSlot *connection, Py_ssize_t need, Py_ssize_t *dirty,
                            Py_ssize_t *dirty_count, Py_ssize_t slot) except NULL:
    """Room for need more bytes at the end of the connection's output; marks it dirty."""
    cdef Py_ssize_t capacity = connection.output_capacity or 256
    cdef unsigned char *grown
    while capacity < connection.output_length + need:
        capacity *= 2
    if capacity != connection.output_capacity:
        grown = <unsigned char *>PyMem_Realloc(connection.output, capacity)
        if grown == NULL:
            raise MemoryError()
        connection.output, connection.output_capacity = grown, capacity
    if not connection.dirty:
        connection.dirty = True
        dirty[dirty_count[0]] = slot
        dirty_count[0] += 1
    return connection.output + connection.output_length


cdef class SendPath:
    cdef ByteRing _ring
    cdef CompletionRing _completions
    cdef TopicEntry *_topics
    cdef Py_ssize_t _topics_capacity
    cdef ConnectionSlot *_slots
    cdef Py_ssize_t _slots_count
    cdef Py_ssize_t *_free_slots
    cdef Py_ssize_t _free_slots_count
    cdef Py_ssize_t *_dirty_slots
    cdef Py_ssize_t _dirty_count
    cdef Fifo _pending
    cdef Held _held                 # acknowledgements waiting for the flush and/or a slave
    cdef pb_completion_slot *_drained
    cdef Template _templates[STATUSES_MAX]
    cdef list _template_bytes
    cdef int32_t _statuses_count
    cdef int32_t _put_ok
    cdef int32_t _flush_timeout_status
    cdef int32_t _slave_timeout_status
    cdef int32_t _slave_not_available_status
    cdef unsigned char _store_ip[16]
    cdef Py_ssize_t _store_ip_length
    cdef int32_t _store_port
    cdef unsigned char _host_hex[40]
    cdef Py_ssize_t _host_hex_length
    cdef bytes _cluster_pair
    cdef Py_ssize_t _max_message_size
    cdef Py_ssize_t _frame_max_bytes
    cdef Py_ssize_t _ext_fields_max
    cdef bint _sync_flush
    cdef bint _sync_master
    cdef int64_t _ha_max_gap_bytes
    cdef double _flush_timeout_s
    cdef double _slave_timeout_s
    cdef int64_t _next_request_id
    cdef Py_ssize_t _inflight
    cdef Py_ssize_t _inflight_max
    cdef unsigned char *_scratch
    cdef Py_ssize_t _scratch_bytes
    cdef unsigned char *_properties
    cdef SendStats _counting
    cdef list _topic_entries
    cdef list _python_outcomes      # outcomes of Python path puts answered since taken
    cdef int64_t _take_ns
    cdef int64_t _take_ms
    cdef public bint python_waiting
    cdef public bint divert         # every frame goes to the Python path (page cache busy)
    cdef readonly uint64_t fast_puts_total
    cdef readonly uint64_t fast_frames_total
    cdef readonly uint64_t other_frames_total
    cdef readonly uint64_t slave_not_available_total
    cdef readonly int64_t completed_up_to   # the last request id completed (either path)

    cdef TopicEntry *_find(self, const unsigned char *name, Py_ssize_t length) noexcept nogil
    cdef int _grow_index_array(self, bint free_list, Py_ssize_t count) except -1
    cdef int _grow_scratch(self, Py_ssize_t need) except -1
    cdef bint _room(self) noexcept
    cdef int64_t _reserve(self, const unsigned char *topic, Py_ssize_t length,
                          Py_ssize_t records_bytes, int32_t queue_id, int32_t count,
                          int32_t sys_flag, bint wait_store) noexcept
    cdef int64_t _queue(self, FastSend *send, int32_t count, int64_t records_bytes,
                        int32_t *sizes, bint wait_store) except -1
    cdef int _pend(self, Py_ssize_t slot, const SendRequest *request, TopicEntry *topic,
                   int32_t count, int64_t records_bytes, int32_t *sizes,
                   bint wait_store) except -1
    cdef Py_ssize_t _stored_properties(self, const SendRequest *request,
                                       PropertyScan *scan) noexcept
    cdef void _fields(self, RecordFields *f, const SendRequest *request, int32_t sys_flag,
                      int32_t flag, const ConnectionSlot *connection) noexcept
    cdef int _put_single(self, const SendRequest *request, TopicEntry *topic,
                         Py_ssize_t slot) except -2
    cdef int _put_batch(self, const SendRequest *request, TopicEntry *topic,
                        Py_ssize_t slot) except -2
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

