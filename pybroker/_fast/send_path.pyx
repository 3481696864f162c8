# pybroker._fast.send_path: a remoting worker's send fast path, frames -> ring -> response bytes.
"""The send fast path of a remoting worker (docs/architecture/send-fast-path.md).

Receive: :meth:`SendPath.take` walks the whole frames of a connection's receive buffer. Each
frame that :mod:`pybroker._fast.send_read` reads as a send to a topic of the fast table (see
:meth:`SendPath.set_topics`) becomes one put request in the worker's send ring: the space is
reserved, the put header and the CommitLog record(s) are written straight into it (the body is
copied once, from the receive buffer into the ring, and its CRC computed on the way), and one
commit per call publishes them all. The first frame that is anything else stops the walk and is
handed back to the Python path with its position, so requests keep their order.

Answer: :meth:`SendPath.drain` takes the completions the appender published. A completion of a
fast put becomes its response frame, written into the connection's output buffer from a
template made by the Python path's own encoder (broker/send_fast.py) with msgId, queueId,
queueOffset and opaque filled in; the outcome of a Python path put (:meth:`put_python`) is
returned to the caller (proc/ring_putter.py), which answers it.
Held acknowledgements, THE rule for both paths (a put of either waits in the same FIFO): under
SYNC_FLUSH an acknowledgement waits until ``flushed_position`` covers the put's last byte (its
physical offset + the records_bytes it reserved); under SYNC_MASTER until
``replicated_position`` (a slave's acknowledged offset) covers it, or it is answered
SLAVE_NOT_AVAILABLE at once when no slave is connected or the slave is ``haMaxGapNotInSync``
behind; with both, both. They wait in ONE FIFO in completion order (so in CommitLog order) with
a cursor per position: :meth:`release` answers what the positions cover, :meth:`expire` what
is past syncFlushTimeout (FLUSH_SLAVE_TIMEOUT while the slave lacks it, else
FLUSH_DISK_TIMEOUT), both through :meth:`_settle`.
:meth:`take_outputs` hands each connection's frames over as one bytes object per drain.

Put request in the ring (pybroker/_fast/put_request.pxd, the appender's C view of
proc/ring_format.py's layout; proc/ring_putter.py checks the Python-visible facts)::

    0  request_id int64 | 8 queue_id int32 | 12 count int32 | 16 sys_flag int32
    20 flags int32 (1 = wait store) | 24 topic_length int16 | 26 topic | pad to 8 | records

Completions come back in request order (the appender drains a ring in order), so the puts of
both paths waiting for their completion form a FIFO and every completion is for its head.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

from pybroker._fast.frame cimport (FRAME_READY, TAKE_END, TAKE_FAULT, TAKE_FULL, TAKE_OTHER,
                                   taker_buffer, taker_frame)
from pybroker._fast.hton cimport pb_pack_int32, pb_unpack_int16, pb_unpack_int32
from pybroker._fast.put_request cimport (PUT_COUNT_POSITION, PUT_FLAG_WAIT_STORE_BIT,
                                         PUT_FLAGS_POSITION, PUT_QUEUE_ID_POSITION,
                                         PUT_REQUEST_ALIGN_BYTES, PUT_REQUEST_ID_POSITION,
                                         PUT_SYS_FLAG_POSITION, PUT_TOPIC_LENGTH_POSITION,
                                         PUT_TOPIC_MAX_BYTES, PUT_TOPIC_POSITION)
from pybroker._fast.record cimport (RecordFields, RecordParts, record_encoded_size,
                                    write_record)
from pybroker._fast.ring cimport RING_FULL, ByteRing, CompletionRing, pb_completion_slot
from pybroker._fast.request_read cimport REQUEST_FLAG_ONEWAY
from pybroker._fast.send_fifo cimport (_fifo_aged, _fifo_at, _fifo_first_live, _fifo_free,
                                       _fifo_head, _fifo_init, _fifo_oldest_ns, _fifo_push)
from pybroker._fast.send_held cimport (_held_advance, _held_done, _held_expiry, _held_first,
                                       _held_next, _held_push, _held_target, _held_unanswered)
from pybroker._fast.send_answer cimport (AnswerValues, Template, answer_bytes_max,
                                         set_templates, write_answer)
from pybroker._fast.send_read cimport (BATCH_BODY_LENGTH_AT, BATCH_FLAG_AT, FIELD_PROPERTIES,
                                       FIELD_TOPIC, PROPERTIES_MAX_BYTES,
                                       PROPERTY_HANDLER_ONLY, PropertyScan, SendRequest,
                                       batch_entry, batch_records_bytes, combine_properties,
                                       combined_properties_length, read_send_request,
                                       scan_properties)
from pybroker._fast.send_stats cimport SendStats, monotonic_ns, realtime_ms
from pybroker._fast.send_topics cimport TOPIC_BYTES_MAX, TopicEntry, topic_bucket, topic_hash
from pybroker._fast.stats cimport StatsWriter

cdef enum:
    # sysFlag bits (protocol/constants.py MessageSysFlag; checked by ring_putter.py).
    SYS_FLAG_TRANSACTION_MASK = 0x0C
    SYS_FLAG_BORN_V6 = 0x10
    SYS_FLAG_STORE_V6 = 0x20
    SCRATCH_INITIAL_BYTES = 4096
    SLOTS_INITIAL = 16

# Python-visible facts for the checks in proc/ring_putter.py.
PUT_HEADER_FIXED_BYTES = PUT_TOPIC_POSITION
PUT_FLAG_WAIT_STORE = PUT_FLAG_WAIT_STORE_BIT


cdef inline Py_ssize_t _put_header_bytes(Py_ssize_t topic_length) noexcept nogil:
    cdef Py_ssize_t align = PUT_REQUEST_ALIGN_BYTES
    return (PUT_TOPIC_POSITION + topic_length + align - 1) & ~(align - 1)


cdef inline int32_t _host_sys_flag(int32_t sys_flag, Py_ssize_t born_ip_length,
                                   Py_ssize_t store_ip_length) noexcept nogil:
    # send.py host_sys_flag: the IPv6 bits follow the actual address sizes.
    sys_flag &= ~(SYS_FLAG_BORN_V6 | SYS_FLAG_STORE_V6)
    if born_ip_length == 16:
        sys_flag |= SYS_FLAG_BORN_V6
    if store_ip_length == 16:
        sys_flag |= SYS_FLAG_STORE_V6
    return sys_flag


cdef class SendPath:
    """The fast path of one remoting worker over its send ring and completion ring.

    ``ring``/``completions``: the worker's producer side of its send ring and consumer side of
    its completion ring (the Python path puts through :meth:`put_python`, so ids, space and
    completion slots are counted in one place). ``store_ip``/``store_port``: the broker's
    address (STOREHOSTADDRESS, message ids). ``cluster_pair``: ``b"CLUSTER\\x01<name>\\x02"``.
    ``flush_timeout_s`` / ``slave_timeout_s``: syncFlushTimeout / slaveTimeout, how long a held
    acknowledgement waits for the flush / a slave.
    ``templates[i]``: ``(stored, pieces, response code)`` of the response to a send whose
    PutStatus has completion code i (broker/send_fast.py builds them).
    """

    def __cinit__(self):
        self._topics = NULL
        self._slots = NULL
        self._free_slots = NULL
        self._dirty_slots = NULL
        self._pending.items = NULL
        self._held.fifo.items = NULL
        self._drained = NULL
        self._scratch = NULL
        self._properties = NULL
        self._counting = SendStats()
        self._topic_entries = []
        self._python_outcomes = []

    def __init__(self, ByteRing ring not None, CompletionRing completions not None,
                 bytes store_ip not None, int32_t store_port, bytes cluster_pair not None,
                 Py_ssize_t max_message_size, Py_ssize_t frame_max_bytes,
                 Py_ssize_t ext_fields_max, bint sync_flush, double flush_timeout_s,
                 list templates not None, int32_t put_ok, int32_t flush_timeout_status,
                 bint sync_master=False, int64_t ha_max_gap_bytes=0,
                 int32_t slave_timeout_status=-1, int32_t slave_not_available_status=-1,
                 double slave_timeout_s=3.0):
        cdef Py_ssize_t index
        if len(store_ip) not in (4, 16):
            raise ValueError(f"store_ip has {len(store_ip)} bytes, not 4 or 16")
        if not 0 < len(templates) <= STATUSES_MAX:
            raise ValueError(f"{len(templates)} templates: 1..{STATUSES_MAX}")
        self._ring, self._completions = ring, completions
        self._store_ip_length = len(store_ip)
        memcpy(self._store_ip, <const char *>store_ip, self._store_ip_length)
        self._store_port = store_port
        host = (store_ip + store_port.to_bytes(4, "big", signed=True)).hex().upper().encode()
        self._host_hex_length = len(host)
        memcpy(self._host_hex, <const char *>host, self._host_hex_length)
        self._cluster_pair = cluster_pair
        self._max_message_size = max_message_size
        self._frame_max_bytes = frame_max_bytes
        self._ext_fields_max = ext_fields_max
        self._sync_flush = sync_flush
        self._flush_timeout_s = flush_timeout_s
        self._slave_timeout_s = slave_timeout_s
        self._set_templates(templates)
        self._put_ok, self._flush_timeout_status = put_ok, flush_timeout_status
        self._sync_master = sync_master
        if sync_master and not (0 <= slave_timeout_status < self._statuses_count
                                and 0 <= slave_not_available_status < self._statuses_count):
            raise ValueError("a SYNC_MASTER needs the slave timeout / not-available statuses")
        self._ha_max_gap_bytes = ha_max_gap_bytes
        self._slave_timeout_status = slave_timeout_status
        self._slave_not_available_status = slave_not_available_status
        self._inflight_max = completions.slot_count
        self._next_request_id = 1
        _fifo_init(&self._pending, 64)
        _fifo_init(&self._held.fifo, 64)
        self._held.sync_flush, self._held.sync_master = sync_flush, sync_master
        self._drained = <pb_completion_slot *>PyMem_Malloc(
            self._inflight_max * sizeof(pb_completion_slot))
        self._scratch = <unsigned char *>PyMem_Malloc(SCRATCH_INITIAL_BYTES)
        self._properties = <unsigned char *>PyMem_Malloc(2 * PROPERTIES_MAX_BYTES + 8)
        self._slots = <ConnectionSlot *>PyMem_Malloc(SLOTS_INITIAL * sizeof(ConnectionSlot))
        self._free_slots = <Py_ssize_t *>PyMem_Malloc(SLOTS_INITIAL * sizeof(Py_ssize_t))
        self._dirty_slots = <Py_ssize_t *>PyMem_Malloc(SLOTS_INITIAL * sizeof(Py_ssize_t))
        if self._drained == NULL or self._scratch == NULL or self._properties == NULL \
                or self._slots == NULL or self._free_slots == NULL or self._dirty_slots == NULL:
            raise MemoryError()
        self._scratch_bytes = SCRATCH_INITIAL_BYTES
        self._slots_count = SLOTS_INITIAL
        memset(self._slots, 0, SLOTS_INITIAL * sizeof(ConnectionSlot))
        for index in range(SLOTS_INITIAL):
            self._free_slots[index] = SLOTS_INITIAL - 1 - index
        self._free_slots_count = SLOTS_INITIAL
        self.set_topics([])

    def __dealloc__(self):
        cdef Py_ssize_t index
        _fifo_free(&self._pending)
        _fifo_free(&self._held.fifo)
        if self._slots != NULL:
            for index in range(self._slots_count):
                PyMem_Free(self._slots[index].output)
        PyMem_Free(self._topics)
        PyMem_Free(self._slots)
        PyMem_Free(self._free_slots)
        PyMem_Free(self._dirty_slots)
        PyMem_Free(self._drained)
        PyMem_Free(self._scratch)
        PyMem_Free(self._properties)

    def _set_templates(self, list templates):
        self._statuses_count = len(templates)
        # Kept: the templates point into these bytes.
        self._template_bytes = set_templates(self._templates, STATUSES_MAX, templates)

    # --- topics -----------------------------------------------------------------------------

    def set_topics(self, list entries not None):
        """Replace the fast table: ``[(topic UTF-8 bytes, queue_nums, extra_sys_flag)]`` of the
        topics a send may go to without the Python path's checks (broker/send_fast.py decides
        which). Topics longer than 127 bytes are left out."""
        cdef Py_ssize_t capacity = 16
        cdef TopicEntry *table
        cdef TopicEntry *entry
        cdef bytes name
        cdef uint64_t hash_value
        self._topic_entries = entries
        while capacity < 2 * len(entries) + 2:
            capacity *= 2
        table = <TopicEntry *>PyMem_Malloc(capacity * sizeof(TopicEntry))
        if table == NULL:
            raise MemoryError()
        memset(table, 0, capacity * sizeof(TopicEntry))
        for name, queue_nums, extra_sys_flag in entries:
            if not 0 < len(name) <= TOPIC_BYTES_MAX:
                continue
            hash_value = topic_hash(<const unsigned char *>name, len(name))
            entry = topic_bucket(table, capacity, hash_value, <const unsigned char *>name,
                                 len(name))
            entry.hash = hash_value
            entry.length = len(name)
            memcpy(entry.name, <const char *>name, len(name))
            entry.queue_nums = queue_nums
            entry.extra_sys_flag = extra_sys_flag
            entry.topic_id = self._counting.topic_id(name)
        PyMem_Free(self._topics)
        self._topics, self._topics_capacity = table, capacity

    cdef TopicEntry *_find(self, const unsigned char *name, Py_ssize_t length) noexcept nogil:
        cdef TopicEntry *entry
        if length <= 0 or length > TOPIC_BYTES_MAX:
            return NULL
        entry = topic_bucket(self._topics, self._topics_capacity, topic_hash(name, length),
                             name, length)
        return entry if entry.length else NULL

    # --- connections ------------------------------------------------------------------------

    def open_slot(self, bytes born_ip not None, int32_t born_port):
        """A slot for a new connection whose peer is ``born_ip`` (4 or 16 bytes):``born_port``."""
        cdef Py_ssize_t slot, index, grown_count
        cdef ConnectionSlot *grown
        if len(born_ip) not in (4, 16):
            raise ValueError(f"born_ip has {len(born_ip)} bytes, not 4 or 16")
        if self._free_slots_count == 0:
            grown_count = 2 * self._slots_count
            grown = <ConnectionSlot *>PyMem_Realloc(self._slots,
                                                    grown_count * sizeof(ConnectionSlot))
            if grown == NULL:
                raise MemoryError()
            self._slots = grown
            memset(&self._slots[self._slots_count], 0,
                   (grown_count - self._slots_count) * sizeof(ConnectionSlot))
            for pointer_name in ("free", "dirty"):
                self._grow_index_array(pointer_name == "free", grown_count)
            for index in range(grown_count - 1, self._slots_count - 1, -1):
                self._free_slots[self._free_slots_count] = index
                self._free_slots_count += 1
            self._slots_count = grown_count
        self._free_slots_count -= 1
        slot = self._free_slots[self._free_slots_count]
        memcpy(self._slots[slot].born_ip, <const char *>born_ip, len(born_ip))
        self._slots[slot].born_ip_length = len(born_ip)
        self._slots[slot].born_port = born_port
        self._slots[slot].output_length = 0
        self._slots[slot].dirty = False
        return slot

    cdef int _grow_index_array(self, bint free_list, Py_ssize_t count) except -1:
        cdef Py_ssize_t *grown = <Py_ssize_t *>PyMem_Realloc(
            self._free_slots if free_list else self._dirty_slots, count * sizeof(Py_ssize_t))
        if grown == NULL:
            raise MemoryError()
        if free_list:
            self._free_slots = grown
        else:
            self._dirty_slots = grown
        return 0

    def close_slot(self, Py_ssize_t slot):
        """The connection of ``slot`` closed: answers still due to it are dropped."""
        cdef ConnectionSlot *entry
        if not 0 <= slot < self._slots_count or self._slots[slot].born_ip_length == 0:
            raise ValueError(f"slot {slot} is not open")
        entry = &self._slots[slot]
        entry.born_ip_length = 0
        entry.generation += 1
        entry.output_length = 0
        self._free_slots[self._free_slots_count] = slot
        self._free_slots_count += 1

    # --- receive ----------------------------------------------------------------------------

    def take(self, object buffer, Py_ssize_t start, Py_ssize_t end, Py_ssize_t slot):
        """Put every leading fast-path frame of ``buffer[start:end]`` into the ring.

        Returns ``(position, outcome, frame_length, puts, appender_asleep)``: ``position`` is
        the first frame not taken; ``outcome`` a frame taker's (frame.pxd: TAKE_END,
        TAKE_OTHER with ``frame_length`` that frame's, TAKE_FULL when the ring or its completion
        slots have no room now, TAKE_FAULT); ``puts`` the requests committed;
        ``appender_asleep`` is True when the commit found the appender asleep (the caller
        signals its eventfd).
        """
        cdef Py_buffer view
        cdef Py_ssize_t at = start, frame_bytes = 0, header_length
        cdef const unsigned char *data
        cdef SendRequest request
        cdef TopicEntry *topic
        cdef int outcome = TAKE_END, put
        cdef uint64_t puts = 0
        cdef bint asleep = False
        if not 0 <= slot < self._slots_count or self._slots[slot].born_ip_length == 0:
            raise ValueError(f"slot {slot} is not open")
        self._take_ns = monotonic_ns()
        self._take_ms = realtime_ms()
        taker_buffer(buffer, &view, start, end)
        try:
            data = <const unsigned char *>view.buf
            while True:
                outcome = taker_frame(data, at, end, self._frame_max_bytes, &frame_bytes,
                                      &header_length)
                if outcome != FRAME_READY:
                    break
                if header_length > self._scratch_bytes:
                    self._grow_scratch(header_length)
                put = 0
                if not self.divert and read_send_request(
                        data + at, frame_bytes, self._ext_fields_max, self._scratch,
                        self._scratch_bytes, &request):
                    topic = self._find(request.fields[FIELD_TOPIC].data,
                                       request.fields[FIELD_TOPIC].length)
                    if topic != NULL:
                        if request.batch:
                            put = self._put_batch(&request, topic, slot)
                        else:
                            put = self._put_single(&request, topic, slot)
                if put == 0:
                    outcome = TAKE_OTHER
                    self.other_frames_total += 1
                    break
                if put < 0:
                    outcome = TAKE_FULL
                    break
                puts += 1
                at += frame_bytes
        finally:
            PyBuffer_Release(&view)
        if puts:
            self.fast_frames_total += puts
            asleep = self._ring.commit_c()
            self._counting.started(puts)     # proc/remoting.py: request_started("send")
            self._update_oldest()
        return at, outcome, frame_bytes, puts, asleep

    cdef int _grow_scratch(self, Py_ssize_t need) except -1:
        cdef Py_ssize_t size = self._scratch_bytes
        cdef unsigned char *grown
        while size < need:
            size *= 2
        grown = <unsigned char *>PyMem_Realloc(self._scratch, size)
        if grown == NULL:
            raise MemoryError()
        self._scratch, self._scratch_bytes = grown, size
        return 0

    cdef bint _room(self) noexcept:
        return not self.python_waiting and self._inflight < self._inflight_max

    cdef int64_t _reserve(self, const unsigned char *topic, Py_ssize_t length,
                          Py_ssize_t records_bytes, int32_t queue_id, int32_t count,
                          int32_t sys_flag, bint wait_store) noexcept:
        """Reserve a put request, write its header (``topic``: ``length`` UTF-8 bytes, at
        most PUT_TOPIC_MAX_BYTES); data-area offset of the records or -1."""
        cdef Py_ssize_t header = _put_header_bytes(length)
        cdef int64_t offset = self._ring.reserve_c(<uint64_t>(header + records_bytes))
        cdef unsigned char *p
        cdef int32_t word
        cdef int16_t topic_length = <int16_t>length
        if offset < 0:
            return -1
        p = self._ring._data + offset
        memcpy(p + PUT_REQUEST_ID_POSITION, &self._next_request_id, 8)
        memcpy(p + PUT_QUEUE_ID_POSITION, &queue_id, 4)
        memcpy(p + PUT_COUNT_POSITION, &count, 4)
        memcpy(p + PUT_SYS_FLAG_POSITION, &sys_flag, 4)
        word = PUT_FLAG_WAIT_STORE_BIT if wait_store else 0
        memcpy(p + PUT_FLAGS_POSITION, &word, 4)
        memcpy(p + PUT_TOPIC_LENGTH_POSITION, &topic_length, 2)
        memcpy(p + PUT_TOPIC_POSITION, topic, <size_t>length)
        memset(p + PUT_TOPIC_POSITION + length, 0, <size_t>(header - PUT_TOPIC_POSITION - length))
        return offset + header

    cdef int64_t _queue(self, FastSend *send, int32_t count, int64_t records_bytes,
                        int32_t *sizes, bint wait_store) except -1:
        """Queue a put of either path just reserved for ``records_bytes`` of records (the
        size given to _reserve: the one figure its end position and counted bytes come
        from); its request id. What it waits for is decided here, for both paths."""
        cdef int64_t request_id = self._next_request_id
        send.request_id = request_id
        send.count = count
        send.records_bytes = records_bytes
        send.sizes = sizes
        send.wait_flush = self._sync_flush and wait_store
        send.wait_replica = self._sync_master and wait_store     # decided at completion
        send.withdrawn = False
        send.answered = False
        _fifo_push(&self._pending, send)
        self._next_request_id += 1
        self._inflight += 1
        return request_id

    cdef int _pend(self, Py_ssize_t slot, const SendRequest *request, TopicEntry *topic,
                   int32_t count, int64_t records_bytes, int32_t *sizes,
                   bint wait_store) except -1:
        """Queue a fast send (see _queue)."""
        cdef FastSend send
        send.python = False
        send.slot = <int32_t>slot
        send.generation = self._slots[slot].generation
        send.opaque = request.head.opaque
        send.queue_id = request.queue_id
        send.oneway = (request.head.flag & REQUEST_FLAG_ONEWAY) != 0
        send.topic_id = topic.topic_id
        send.request_code = request.head.code
        send.started_ns = self._take_ns
        send.started_ms = self._take_ms
        self._queue(&send, count, records_bytes, sizes, wait_store)
        self.fast_puts_total += 1
        return 0

    cdef Py_ssize_t _stored_properties(self, const SendRequest *request,
                                       PropertyScan *scan) noexcept:
        """The stored properties (pairs + CLUSTER) in self._properties; -1 for Python."""
        cdef Py_ssize_t length = 0
        scan.wait_store = True
        scan.flags = 0
        if request.fields[FIELD_PROPERTIES].present:
            if scan_properties(request.fields[FIELD_PROPERTIES].data,
                               request.fields[FIELD_PROPERTIES].length, self._properties,
                               scan) < 0:
                return -1
            length = scan.stored_length
        if scan.flags & PROPERTY_HANDLER_ONLY:
            return -1
        memcpy(self._properties + length, <const char *>self._cluster_pair,
               len(self._cluster_pair))
        length += len(self._cluster_pair)
        return length if length <= PROPERTIES_MAX_BYTES else -1

    cdef void _fields(self, RecordFields *f, const SendRequest *request, int32_t sys_flag,
                             int32_t flag, const ConnectionSlot *connection) noexcept:
        f.queue_id = request.queue_id
        f.flag = flag
        f.queue_offset = f.physical_offset = f.store_timestamp = 0
        f.sys_flag = sys_flag
        f.born_timestamp = request.born_timestamp
        f.born_port = connection.born_port
        f.store_port = self._store_port
        f.reconsume_times = request.reconsume_times
        f.prepared_transaction_offset = 0

    cdef int _put_single(self, const SendRequest *request, TopicEntry *topic,
                         Py_ssize_t slot) except -2:
        """1: put; 0: the Python path decides; -1: no room now."""
        cdef ConnectionSlot *connection = &self._slots[slot]
        cdef PropertyScan scan
        cdef Py_ssize_t properties_length
        cdef int32_t sys_flag, record_sys_flag
        cdef int64_t size, offset
        cdef RecordFields f
        cdef RecordParts parts
        if request.queue_id < 0 or request.queue_id >= topic.queue_nums \
                or request.sys_flag & SYS_FLAG_TRANSACTION_MASK \
                or request.body_length <= 0 or request.body_length > self._max_message_size:
            return 0
        properties_length = self._stored_properties(request, &scan)
        if properties_length < 0:
            return 0
        sys_flag = request.sys_flag | topic.extra_sys_flag
        record_sys_flag = _host_sys_flag(sys_flag, connection.born_ip_length,
                                         self._store_ip_length)
        size = record_encoded_size(request.body_length, topic.length, properties_length,
                                   record_sys_flag)
        if size < 0 or \
                _put_header_bytes(topic.length) + size > <int64_t>self._ring._record_max_bytes:
            return 0
        if not self._room():
            return -1
        offset = self._reserve(topic.name, topic.length, size, request.queue_id, 1, sys_flag,
                               scan.wait_store)
        if offset < 0:
            return -1
        self._fields(&f, request, record_sys_flag, request.message_flag, connection)
        parts.topic, parts.topic_length = <const unsigned char *>topic.name, topic.length
        parts.body, parts.body_length = request.body, request.body_length
        parts.properties, parts.properties_length = self._properties, properties_length
        parts.born_address, parts.store_address = connection.born_ip, self._store_ip
        write_record(self._ring._data + offset, &f, &parts)
        self._pend(slot, request, topic, 1, size, NULL, scan.wait_store)
        return 1

    cdef int _put_batch(self, const SendRequest *request, TopicEntry *topic,
                        Py_ssize_t slot) except -2:
        """SEND_BATCH_MESSAGE (send.py _send_batch); 1, 0 or -1 as _put_single."""
        cdef ConnectionSlot *connection = &self._slots[slot]
        cdef PropertyScan scan
        cdef Py_ssize_t batch_length, at, entry_bytes, body_length, inner_length
        cdef Py_ssize_t count = 0, index
        cdef const unsigned char *body = request.body
        cdef const unsigned char *inner
        cdef int32_t sys_flag
        cdef int64_t total, offset, records_at
        cdef int32_t *sizes
        cdef RecordFields f
        cdef RecordParts parts
        if request.queue_id < 0 or request.queue_id >= topic.queue_nums \
                or request.sys_flag & SYS_FLAG_TRANSACTION_MASK or request.body_length <= 0:
            return 0
        batch_length = self._stored_properties(request, &scan)
        if batch_length < 0:
            return 0
        sys_flag = _host_sys_flag(request.sys_flag | topic.extra_sys_flag,
                                  connection.born_ip_length, self._store_ip_length)
        total = batch_records_bytes(body, request.body_length, batch_length, topic.length, sys_flag,
                             self._max_message_size, &count)
        if total < 0:
            return 0
        if _put_header_bytes(topic.length) + total > <int64_t>self._ring._record_max_bytes:
            return 0
        if not self._room():
            return -1
        sizes = <int32_t *>PyMem_Malloc(count * sizeof(int32_t))
        if sizes == NULL:
            raise MemoryError()
        offset = self._reserve(topic.name, topic.length, total, request.queue_id,
                               <int32_t>count, sys_flag, scan.wait_store)
        if offset < 0:
            PyMem_Free(sizes)
            return -1
        records_at = offset
        parts.topic, parts.topic_length = <const unsigned char *>topic.name, topic.length
        parts.born_address, parts.store_address = connection.born_ip, self._store_ip
        at = 0
        for index in range(count):
            batch_entry(body, at, request.body_length, &entry_bytes, &body_length,
                        &inner_length)
            inner = body + at + entry_bytes - inner_length
            self._fields(&f, request, sys_flag, pb_unpack_int32(body + at + BATCH_FLAG_AT),
                         connection)
            parts.body, parts.body_length = body + at + BATCH_BODY_LENGTH_AT + 4, body_length
            parts.properties = combine_properties(inner, inner_length, self._properties,
                                                  batch_length,
                                                  self._properties + PROPERTIES_MAX_BYTES + 4)
            parts.properties_length = combined_properties_length(inner, inner_length,
                                                                 batch_length)
            sizes[index] = <int32_t>write_record(self._ring._data + offset, &f, &parts)
            offset += sizes[index]
            at += entry_bytes
        if offset != records_at + total:
            PyMem_Free(sizes)
            raise RuntimeError(f"batch records of {offset - records_at} bytes in a reservation "
                               f"of {total}")
        self._pend(slot, request, topic, <int32_t>count, total, sizes, scan.wait_store)
        return 1

    # --- Python path puts -------------------------------------------------------------------

    def put_python(self, object records, bytes topic not None, int32_t queue_id, int32_t count,
                   int32_t sys_flag, bint wait_store, double started=-1.0):
        """Reserve and write a put request of the Python path (``records``: the encoded
        records, any buffer; ``started``: the loop time it began to wait, now if negative);
        its request id, or -1 when there is no room now (the caller waits and retries), then
        commits (ByteRing.commit). Its outcome comes back from :meth:`drain`,
        :meth:`release` or :meth:`expire`, held by the same rule as a fast send's."""
        cdef Py_buffer view
        cdef FastSend send
        cdef int64_t offset, records_bytes
        cdef Py_ssize_t length = len(topic)
        if not 0 < length <= PUT_TOPIC_MAX_BYTES:
            raise ValueError(f"topic of {length} bytes")
        if self._inflight >= self._inflight_max:
            return -1
        PyObject_GetBuffer(records, &view, PyBUF_SIMPLE)
        try:
            if _put_header_bytes(length) + view.len > <int64_t>self._ring._record_max_bytes:
                raise ValueError(f"put request of {view.len} bytes exceeds the ring's record "
                                 f"size")
            offset = self._reserve(<const unsigned char *>topic, length, view.len, queue_id,
                                   count, sys_flag, wait_store)
            if offset < 0:
                return -1
            memcpy(self._ring._data + offset, view.buf, <size_t>view.len)
            records_bytes = view.len
        finally:
            PyBuffer_Release(&view)
        memset(&send, 0, sizeof(send))
        send.python = True
        send.slot = -1
        send.queue_id = queue_id
        send.topic_id = -1
        send.started_ns = monotonic_ns() if started < 0 else <int64_t>(started * 1e9)
        return self._queue(&send, count, records_bytes, NULL, wait_store)

    @property
    def has_room(self):
        """True when a put may start now: a completion slot is free for it."""
        return self._inflight < self._inflight_max

    @property
    def inflight(self):
        """Put requests (both paths) sent to the appender and not yet completed."""
        return self._inflight

    # --- answers ----------------------------------------------------------------------------

    def drain(self, double now, int64_t replicated_position=0, int64_t slaves_connected=0):
        """Take every published completion. Puts are answered or held (SYNC_FLUSH /
        SYNC_MASTER; ``now`` is the loop time their deadline counts from,
        ``replicated_position`` and ``slaves_connected`` the control block's now: whether a
        slave is in sync); returns the outcomes of the Python path's puts answered now, in
        order (:meth:`_python_outcome`). :attr:`completed_up_to` is the last id completed."""
        cdef uint64_t taken, index
        cdef pb_completion_slot *done
        cdef FastSend *head
        cdef FastSend send
        cdef int64_t now_ns = monotonic_ns()
        while True:
            if self._completions.drain_c(self._drained, <uint64_t>self._inflight_max,
                                         &taken) != 0:
                raise RuntimeError("completion ring holds impossible cursors")
            for index in range(taken):
                done = &self._drained[index]
                self._inflight -= 1
                head = _fifo_head(&self._pending)
                if head == NULL or head.request_id != done.request_id:
                    raise RuntimeError(f"completion for request {done.request_id}, not for "
                                       f"the oldest in flight")
                send = head[0]
                self._pending.head += 1
                self.completed_up_to = done.request_id
                if send.withdrawn:          # answered busy already; never stored
                    if send.sizes != NULL:
                        PyMem_Free(send.sizes)
                    continue
                self._complete(&send, done, now, now_ns, replicated_position, slaves_connected)
            if taken < <uint64_t>self._inflight_max:
                self._update_oldest()
                return self._take_python()

    cdef int _complete(self, FastSend *send, const pb_completion_slot *done, double now,
                       int64_t now_ns, int64_t replicated, int64_t slaves) except -1:
        if done.status != self._put_ok:
            return self._answer(send, done.status, False, now_ns)
        send.physical_offset = done.physical_offset
        send.queue_offset = done.queue_offset
        send.end_position = done.physical_offset + send.records_bytes
        send.status = self._put_ok
        if send.wait_replica and not (
                slaves > 0 and send.end_position - replicated < self._ha_max_gap_bytes):
            # Java's isSlaveOK: answered at once unless the flush holds it too.
            send.wait_replica = False
            send.status = self._slave_not_available_status
            if send.status != self._put_ok:      # controller mode answers SEND_OK alone
                self.slave_not_available_total += 1
        if not (send.wait_flush or send.wait_replica):
            return self._answer(send, send.status, True, now_ns)
        send.deadline = now + self._flush_timeout_s
        send.replica_deadline = now + self._slave_timeout_s
        send.held_ns = now_ns
        return _held_push(&self._held, send)

    def release(self, int64_t flushed_position, int64_t replicated_position):
        """Answer the held acknowledgements that the positions cover; the Python path's
        outcomes among them (as :meth:`drain`)."""
        self._settle(flushed_position, replicated_position, 0.0, False)
        return self._take_python()

    def expire(self, int64_t flushed_position, int64_t replicated_position, double now):
        """:meth:`release`, then answer the held acknowledgements whose deadline has passed:
        FLUSH_SLAVE_TIMEOUT while the slave lacks the record (the replica's outcome wins, as in
        Java), else FLUSH_DISK_TIMEOUT (or SLAVE_NOT_AVAILABLE, decided at completion)."""
        self._settle(flushed_position, replicated_position, now, True)
        return self._take_python()

    cdef list _take_python(self):
        cdef list outcomes = self._python_outcomes
        self._python_outcomes = []
        return outcomes

    cdef int _settle(self, int64_t flushed, int64_t replicated, double now,
                     bint expire) except -1:
        """The one drain of the held acknowledgements (pybroker/_fast/send_held.pxd): what
        the positions cover, then (``expire``) what is past its deadline."""
        cdef FastSend *send
        cdef int64_t now_ns
        cdef int32_t status
        if self._held.fifo.head == self._held.fifo.tail:
            return 0
        now_ns = monotonic_ns()     # once per drain: the held time of every send answered
        _held_advance(&self._held, flushed, replicated)
        while True:
            send = _held_next(&self._held, now, expire, self._put_ok,
                              self._flush_timeout_status, self._slave_timeout_status, &status)
            if send == NULL:
                break
            if not _held_done(&self._held, send):
                continue
            if send.wait_flush:
                self._counting.flush_waited(now_ns - send.held_ns)
            self._answer(send, status, True, now_ns)
        self._update_oldest()
        return 0

    # --- fast failure (proc/fast_failure.py): the puts of both paths in the ring -------------

    def aged(self, double limit, int64_t after_id):
        """Highest request id above ``after_id`` of a put (either path, not withdrawn)
        waiting since monotonic time ``limit`` (s) or before; 0 when none."""
        return _fifo_aged(&self._pending, <int64_t>(limit * 1e9), after_id)

    def oldest(self, int64_t after_id):
        """Monotonic s the longest-waiting put above ``after_id`` (live) began to, or None."""
        cdef int64_t started_ns = _fifo_oldest_ns(&self._pending, after_id)
        return None if started_ns < 0 else started_ns / 1e9

    @property
    def waiting(self):
        """Puts (both paths) waiting for their completion."""
        return self._pending.tail - self._pending.head

    def withdraw(self, int64_t taken, int64_t up_to, int32_t busy_status):
        """Fast failure withdrew the request ids in (``taken``, ``up_to``]: the appender
        completes them unstored, their completions are dropped here; each fast send counts
        as answered ``busy_status``. ``(withdrawn, fast, python)``: how many puts, the fast
        sends to answer (not oneway, connection open) as ``(slot, opaque, started)`` (the
        caller writes the answers: the remark has figures), the Python path's puts as
        ``(request_id, started)``; started: monotonic s."""
        cdef Py_ssize_t index, withdrawn = 0
        cdef FastSend *send
        cdef list fast = [], python = []
        cdef int64_t now_ns = monotonic_ns()
        cdef ConnectionSlot *connection
        for index in range(self._pending.head, self._pending.tail):
            send = &self._pending.items[index & (self._pending.capacity - 1)]
            if send.request_id > up_to:
                break
            if send.request_id <= taken or send.withdrawn:
                continue
            send.withdrawn = True
            withdrawn += 1
            if send.python:
                python.append((send.request_id, send.started_ns / 1e9))
                continue
            self._count(send, &self._templates[busy_status], False, now_ns)
            connection = &self._slots[send.slot]
            if not send.oneway and connection.generation == send.generation \
                    and connection.born_ip_length != 0:
                fast.append((send.slot, send.opaque, send.started_ns / 1e9))
        self._update_oldest()
        return withdrawn, fast, python

    @property
    def flush_target(self):
        """End position the flush must reach to release more held acknowledgements (as of the
        last release), or None."""
        cdef FastSend *send = _held_target(&self._held, False)
        return None if send == NULL else send.end_position

    @property
    def replica_target(self):
        """The same for the slaves' acknowledged offset (``replicated_position``), or None."""
        cdef FastSend *send = _held_target(&self._held, True)
        return None if send == NULL else send.end_position

    @property
    def held_deadline(self):
        """When (loop time) the oldest held acknowledgement may time out, as the positions
        stood at the last release, or None (it may move earlier when a position covers it)."""
        cdef Py_ssize_t at = _held_first(&self._held, False)
        return None if at < 0 else _held_expiry(&self._held, at)

    @property
    def held_count(self):
        """Held acknowledgements not answered yet."""
        return _held_unanswered(&self._held)

    cdef int _answer(self, FastSend *send, int32_t status, bint real_ids,
                     int64_t now_ns) except -1:
        cdef ConnectionSlot *connection
        cdef Template *template
        cdef AnswerValues values
        cdef unsigned char *out
        if send.python:
            self._python_outcomes.append(self._python_outcome(send, status, real_ids))
            return 0
        connection = &self._slots[send.slot]
        try:
            if not 0 <= status < self._statuses_count:
                status = self._statuses_count - 1     # the caller's UNKNOWN_ERROR, last
            template = &self._templates[status]
            self._count(send, template, real_ids, now_ns)
            if send.oneway or connection.generation != send.generation \
                    or connection.born_ip_length == 0:
                return 0
            values.real_ids = real_ids
            values.host_hex, values.host_hex_length = self._host_hex, self._host_hex_length
            values.physical_offset = send.physical_offset
            values.count, values.records_bytes, values.sizes = send.count, \
                send.records_bytes, send.sizes
            values.queue_id, values.queue_offset = send.queue_id, send.queue_offset
            values.opaque = send.opaque
            out = _output(connection, answer_bytes_max(template, &values), self._dirty_slots,
                          &self._dirty_count, send.slot)
            connection.output_length += write_answer(out, template, &values)
            return 0
        finally:
            if send.sizes != NULL:
                PyMem_Free(send.sizes)
                send.sizes = NULL

    cdef tuple _python_outcome(self, const FastSend *send, int32_t status, bint real_ids):
        """A Python path put's (request_id, status code, stored, count, physical_offset,
        queue_offset, records_bytes); not ``stored``: the appender refused it."""
        return (send.request_id, status, real_ids, send.count,
                send.physical_offset if real_ids else 0, send.queue_offset if real_ids else 0,
                send.records_bytes)

    cdef int _count(self, const FastSend *send, const Template *template, bint real_ids,
                    int64_t now_ns) except -1:
        """What the Python path counts for this send when its handler returns."""
        cdef int64_t messages = 0, size_bytes = 0
        if template.stored and real_ids:
            messages = send.count
            size_bytes = send.records_bytes
        return self._counting.answered(now_ns - send.started_ns, template.stored, messages,
                                       size_bytes, send.topic_id, send.request_code,
                                       template.code, send.oneway)

    cdef int _update_oldest(self) except -1:
        return self._counting.set_oldest(self._fast_oldest_ms())

    cdef int64_t _fast_oldest_ms(self) noexcept:
        """Epoch ms of the oldest fast send not answered yet (waiting for its completion, or
        held for the flush or a slave), 0 when none."""
        cdef FastSend *pending = _fifo_first_live(&self._pending, 0, True)
        cdef Py_ssize_t held_at = _held_first(&self._held, True)
        cdef FastSend *held = NULL if held_at < 0 else _fifo_at(&self._held.fifo, held_at)
        if pending == NULL:
            return 0 if held == NULL else held.started_ms
        if held == NULL or pending.started_ms < held.started_ms:
            return pending.started_ms
        return held.started_ms

    def fast_oldest_ms(self):
        """:meth:`_fast_oldest_ms` for the handlers' Recorder (the shared gauge)."""
        return self._fast_oldest_ms()

    def set_stats(self, StatsWriter stats, python_oldest=None):
        """Count fast sends in this process's instrument section (None: not counted);
        ``python_oldest()`` gives the handlers' oldest unanswered send (epoch ms, 0: none)."""
        self._counting = SendStats(stats, python_oldest)
        self.set_topics(self._topic_entries)

    def take_outputs(self):
        """``[(slot, frames)]``: each connection's response frames since the last call, as one
        bytes object per connection (write it with one system call)."""
        cdef list outputs = []
        cdef Py_ssize_t index, slot
        cdef ConnectionSlot *connection
        for index in range(self._dirty_count):
            slot = self._dirty_slots[index]
            connection = &self._slots[slot]
            connection.dirty = False
            if connection.output_length and connection.born_ip_length:
                outputs.append((slot, PyBytes_FromStringAndSize(
                    <const char *>connection.output, connection.output_length)))
            connection.output_length = 0
        self._dirty_count = 0
        return outputs
