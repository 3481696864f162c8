# pybroker._fast.send.take: a remoting worker's send fast path, frames -> put requests in the ring.
"""The send fast path of a remoting worker (docs/architecture/send-fast-path.md): the taking
side. :class:`SendPath` is the class the worker uses; it adds this side to
:class:`pybroker._fast.send.complete.SendCompletions` (completions, held acknowledgements,
answers), and uses the package's other concerns: ``read`` a send request, ``topics`` the fast
table, ``slots`` the connections.

Receive: :meth:`SendPath.take` walks the whole frames of a connection's receive buffer. Each
frame that :mod:`pybroker._fast.send.read` reads as a send to a topic of the fast table (see
:meth:`SendPath.set_topics`) becomes one put request in the worker's send ring: the space is
reserved, the put header and the CommitLog record(s) are written straight into it (the body is
copied once, from the receive buffer into the ring, and its CRC computed on the way), and one
commit per call publishes them all. The first frame that is anything else stops the walk and is
handed back to the Python path with its position, so requests keep their order. A Python path
put is written by :meth:`SendPath.put_python`; a put of either path is then queued in the one
FIFO of puts in flight (``SendCompletions._queue``).

Put requests in the ring: the layout of pybroker/_fast/put_request.pxd (its table there and
in proc/ring_format.py, which checks the two agree; proc/ring_putter.py checks the
Python-visible facts of this module), written by :meth:`_reserve` for both paths.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int16_t, int32_t, int64_t, uint64_t
from libc.string cimport memcpy, memset

from pybroker._fast.frame cimport TAKE_END, TAKE_FAULT, TAKE_FULL, TAKE_OTHER
from pybroker._fast.hton cimport pb_unpack_int32
from pybroker._fast.put_request cimport (PUT_COUNT_POSITION, PUT_FLAG_WAIT_STORE_BIT,
                                         PUT_FLAGS_POSITION, PUT_QUEUE_ID_POSITION,
                                         PUT_REQUEST_ALIGN_BYTES, PUT_REQUEST_ID_POSITION,
                                         PUT_SYS_FLAG_POSITION, PUT_TOPIC_LENGTH_POSITION,
                                         PUT_TOPIC_MAX_BYTES, PUT_TOPIC_POSITION)
from pybroker._fast.record cimport (RecordFields, RecordParts, record_encoded_size,
                                    write_record)
from pybroker._fast.ring cimport ByteRing, CompletionRing
from pybroker._fast.request_read cimport REQUEST_FLAG_ONEWAY
from pybroker._fast.send.held cimport FastSend
from pybroker._fast.send.read cimport (BATCH_BODY_LENGTH_AT, BATCH_FLAG_AT, FIELD_PROPERTIES,
                                       FIELD_TOPIC, PROPERTIES_MAX_BYTES,
                                       PROPERTY_HANDLER_ONLY, PROPERTY_HAS_TIMER, PropertyScan,
                                       SendRequest,
                                       batch_entry, batch_records_bytes, combine_properties,
                                       combined_properties_length, read_send_request,
                                       scan_properties)
from pybroker._fast.send.slots cimport ConnectionSlot
from pybroker._fast.send.stats cimport SendStats, monotonic_ns, realtime_ms
from pybroker._fast.send.timer cimport (TIMER_HANDLER, TIMER_PARKED, TimerPark,
                                        recall_handle, recall_handle_bytes, set_wheel,
                                        timer_redirect)
from pybroker._fast.send.topics cimport TopicEntry, TopicTable
from pybroker._fast.stats cimport StatsWriter
from pybroker._fast.taker cimport SCRATCH_MIN_BYTES, scratch_fit, taker_next, taker_open
from pybroker._fast.timer_reput cimport Assembly

cdef enum:
    # sysFlag bits (protocol/constants.py MessageSysFlag; checked by ring_putter.py).
    SYS_FLAG_TRANSACTION_MASK = 0x0C
    SYS_FLAG_BORN_V6 = 0x10
    SYS_FLAG_STORE_V6 = 0x20
    # _stored_properties: a timer message (_timer_properties decides)
    TIMER_PROPERTIES = -2

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


cdef class SendPath(SendCompletions):
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
        self._topics = TopicTable()
        self._scratch.data = NULL
        self._scratch.bytes = 0
        self._properties = NULL
        self._timer.enabled = False
        self._timer.wheel = NULL
        self._timer_wheel = None
        self._timer_on = False
        self._timer_topic = b""
        self._broker_name = b""
        self._timer_topic_id = -1

    def __init__(self, ByteRing ring not None, CompletionRing completions not None,
                 bytes store_ip not None, int32_t store_port, bytes cluster_pair not None,
                 Py_ssize_t max_message_size, Py_ssize_t frame_max_bytes,
                 Py_ssize_t ext_fields_max, bint sync_flush, double flush_timeout_s,
                 list templates not None, int32_t put_ok, int32_t flush_timeout_status,
                 bint sync_master=False, int64_t ha_max_gap_bytes=0,
                 int32_t slave_timeout_status=-1, int32_t slave_not_available_status=-1,
                 double slave_timeout_s=3.0):
        if len(store_ip) not in (4, 16):
            raise ValueError(f"store_ip has {len(store_ip)} bytes, not 4 or 16")
        self._init_completions(completions, store_ip, store_port, templates, put_ok,
                               flush_timeout_status, sync_flush, flush_timeout_s, sync_master,
                               ha_max_gap_bytes, slave_timeout_status,
                               slave_not_available_status, slave_timeout_s)
        self._ring = ring
        self._store_ip_length = len(store_ip)
        memcpy(self._store_ip, <const char *>store_ip, self._store_ip_length)
        self._store_port = store_port
        self._cluster_pair = cluster_pair
        self._max_message_size = max_message_size
        self._frame_max_bytes = frame_max_bytes
        self._ext_fields_max = ext_fields_max
        scratch_fit(&self._scratch, SCRATCH_MIN_BYTES)
        self._properties = <unsigned char *>PyMem_Malloc(2 * PROPERTIES_MAX_BYTES + 8)
        if self._properties == NULL:
            raise MemoryError()

    def __dealloc__(self):
        PyMem_Free(self._scratch.data)
        PyMem_Free(self._properties)

    # --- topics -----------------------------------------------------------------------------

    def set_topics(self, list entries not None):
        """Replace the fast table: ``[(topic UTF-8 bytes, queue_nums, extra_sys_flag)]`` of the
        topics a send may go to without the Python path's checks (broker/send_fast.py decides
        which). Topics longer than 127 bytes are left out (send/topics.pyx)."""
        self._topics.replace(entries, self._counting)
        if self._timer_on:
            self._timer_topic_id = self._counting.topic_id(self._timer_topic,
                                                           self._timer_message_type)

    def set_timer(self, list recall_templates not None, bytes timer_topic not None,
                  int message_type, bint enabled, bint congestion_possible,
                  int64_t congest_limit, int64_t max_delay_ms, int64_t precision_ms,
                  bytes broker_name not None):
        """Park 5.x timer messages on the fast path (send/timer.pyx; without this call every
        send with a timer property goes to the handler). ``recall_templates``: the answers of
        a parked send, as ``templates``; ``timer_topic``: rmq_sys_wheel_timer, counted under
        ``message_type`` (send.py's label); the rest are the broker's timer settings
        (timerWheelEnable, timerCongestNumEachSlot below Integer.MAX_VALUE and its value,
        timerMaxDelaySec in ms, the effective timerPrecisionMs) and its brokerName (recall
        handles). While a congestion is possible, timer sends go to the handler until
        set_timer_wheel gives the wheel to read."""
        if not 0 < len(timer_topic) <= PUT_TOPIC_MAX_BYTES or precision_ms <= 0:
            raise ValueError("a timer topic of 1..PUT_TOPIC_MAX_BYTES bytes and a positive "
                             "precision")
        self._set_recall_templates(recall_templates)
        self._timer.enabled = enabled
        self._timer.congestion_possible = congestion_possible
        self._timer.congest_limit = congest_limit
        self._timer.max_delay_ms = max_delay_ms
        self._timer.precision_ms = precision_ms
        self._timer_topic = timer_topic
        self._timer_message_type = message_type
        self._broker_name = broker_name
        self._timer_on = True
        self._timer_topic_id = self._counting.topic_id(timer_topic, message_type)

    def set_timer_wheel(self, wheel):
        """The timer worker's timerwheel mapped read-only (a buffer; None: forget it), read by
        the congestion rule (broker/timer_slots.py maps it)."""
        set_wheel(&self._timer, wheel)
        self._timer_wheel = wheel

    def set_stats(self, StatsWriter stats):
        """Count fast sends in this process's instrument section (None: not counted)."""
        self._counting = SendStats(stats, self._counting.python_oldest_ms)
        self.set_topics(self._topics.entries)

    def set_python_oldest(self, int64_t started_ms):
        """The handlers' oldest unanswered send is now ``started_ms`` (epoch ms, 0: none):
        the SEND_OLDEST_MS gauge this path writes is the older of it and its own oldest."""
        self._counting.python_oldest_ms = started_ms

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
        cdef SendTaken taken
        self.take_c(buffer, start, end, slot, &taken)
        return (taken.answer.position, taken.answer.outcome, taken.answer.frame_bytes,
                taken.puts, taken.asleep)

    cdef int take_c(self, object buffer, Py_ssize_t start, Py_ssize_t end, Py_ssize_t slot,
                    SendTaken *taken) except -1:
        """:meth:`take` for a caller in C (send/port.pyx): its answer in ``*taken``."""
        cdef Py_buffer view
        cdef Py_ssize_t at = start, frame_bytes = 0
        cdef const unsigned char *data
        cdef SendRequest request
        cdef TopicEntry *topic
        cdef int outcome = TAKE_END, put
        cdef uint64_t puts = 0
        cdef bint asleep = False
        self._slots.check_open(slot)
        self._take_ns = monotonic_ns()
        self._take_ms = realtime_ms()
        data = taker_open(buffer, &view, start, end)
        try:
            while taker_next(data, at, end, self._frame_max_bytes, &self._scratch, &frame_bytes,
                             &outcome):
                put = 0
                if not self.divert and read_send_request(
                        data + at, frame_bytes, self._ext_fields_max, self._scratch.data,
                        self._scratch.bytes, &request):
                    topic = self._topics.find(request.fields[FIELD_TOPIC].data,
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
        taken.answer.position = at
        taken.answer.outcome = outcome
        taken.answer.frame_bytes = frame_bytes
        taken.puts = puts
        taken.asleep = asleep
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

    cdef int _pend(self, Py_ssize_t slot, const SendRequest *request, int32_t topic_id,
                   int32_t count, int64_t records_bytes, int32_t *sizes,
                   bint wait_store, unsigned char *recall=NULL,
                   int32_t recall_length=0) except -1:
        """Queue a fast send (see _queue); it owns ``sizes`` and ``recall`` from here."""
        cdef FastSend send
        send.python = False
        send.recall, send.recall_length = recall, recall_length
        send.slot = <int32_t>slot
        send.generation = self._slots.at(slot).generation
        send.opaque = request.head.opaque
        send.queue_id = request.queue_id
        send.oneway = (request.head.flag & REQUEST_FLAG_ONEWAY) != 0
        send.topic_id = topic_id
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
            return TIMER_PROPERTIES \
                if (scan.flags & PROPERTY_HANDLER_ONLY) == PROPERTY_HAS_TIMER else -1
        return self._with_cluster(length)

    cdef Py_ssize_t _with_cluster(self, Py_ssize_t length) noexcept:
        """Append the CLUSTER pair to the stored properties; their length, or -1 when too long
        (the handler refuses them)."""
        memcpy(self._properties + length, <const char *>self._cluster_pair,
               len(self._cluster_pair))
        length += len(self._cluster_pair)
        return length if length <= PROPERTIES_MAX_BYTES else -1

    cdef Py_ssize_t _timer_properties(self, const SendRequest *request,
                                      const TopicEntry *topic, PropertyScan *scan,
                                      TimerPark *park) noexcept:
        """A single send's properties with a timer property: the stored properties in
        self._properties as the handler writes them (send/timer.pyx), with park.uniq_key NULL
        when it is stored as it is; -1 for the handler (refusals and rarer shapes)."""
        cdef Py_ssize_t length = 0
        cdef int outcome
        park.uniq_key = NULL
        if not self._timer_on:      # (rmq_sys_wheel_timer itself is never a fast topic)
            return -1
        outcome = timer_redirect(request.fields[FIELD_PROPERTIES].data,
                                 request.fields[FIELD_PROPERTIES].length, topic.name,
                                 topic.length, request.queue_id, &self._timer, self._take_ms,
                                 self._properties, &length, park)
        if outcome == TIMER_HANDLER:
            return -1
        if outcome != TIMER_PARKED:     # due now: a plain send (timer_redirect wrote over it)
            park.uniq_key = NULL
            scan_properties(request.fields[FIELD_PROPERTIES].data,
                            request.fields[FIELD_PROPERTIES].length, self._properties, scan)
            length = scan.stored_length
        return self._with_cluster(length)

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
        cdef ConnectionSlot *connection = self._slots.at(slot)
        cdef PropertyScan scan
        cdef Py_ssize_t properties_length
        cdef int32_t sys_flag, record_sys_flag
        cdef int64_t size, offset
        cdef RecordFields f
        cdef RecordParts parts
        cdef TimerPark park
        cdef const unsigned char *stored_topic = topic.name
        cdef Py_ssize_t stored_topic_length = topic.length
        cdef int32_t stored_queue_id = request.queue_id
        cdef int32_t topic_id = topic.topic_id
        cdef unsigned char *recall = NULL
        cdef Py_ssize_t recall_length = 0
        if request.queue_id < 0 or request.queue_id >= topic.queue_nums \
                or request.sys_flag & SYS_FLAG_TRANSACTION_MASK \
                or request.body_length <= 0 or request.body_length > self._max_message_size:
            return 0
        park.uniq_key = NULL
        properties_length = self._stored_properties(request, &scan)
        if properties_length == TIMER_PROPERTIES:
            properties_length = self._timer_properties(request, topic, &scan, &park)
            if park.uniq_key != NULL:       # parked: rmq_sys_wheel_timer queue 0
                stored_topic = <const unsigned char *>self._timer_topic
                stored_topic_length = len(self._timer_topic)
                stored_queue_id = 0
                topic_id = self._timer_topic_id
        if properties_length < 0:
            return 0
        sys_flag = request.sys_flag | topic.extra_sys_flag
        record_sys_flag = _host_sys_flag(sys_flag, connection.born_ip_length,
                                         self._store_ip_length)
        size = record_encoded_size(request.body_length, stored_topic_length, properties_length,
                                   record_sys_flag)
        if size < 0 or _put_header_bytes(stored_topic_length) + size \
                > <int64_t>self._ring._record_max_bytes:
            return 0
        if not self._room():
            return -1
        if park.uniq_key != NULL:
            recall_length = recall_handle_bytes(topic.length, len(self._broker_name), &park)
            recall = <unsigned char *>PyMem_Malloc(recall_length)
            if recall == NULL:
                raise MemoryError()
        offset = self._reserve(stored_topic, stored_topic_length, size, stored_queue_id, 1,
                               sys_flag, scan.wait_store)
        if offset < 0:
            PyMem_Free(recall)
            return -1
        self._fields(&f, request, record_sys_flag, request.message_flag, connection)
        f.queue_id = stored_queue_id
        parts.topic, parts.topic_length = stored_topic, stored_topic_length
        parts.body, parts.body_length = request.body, request.body_length
        parts.properties, parts.properties_length = self._properties, properties_length
        parts.born_address, parts.store_address = connection.born_ip, self._store_ip
        write_record(self._ring._data + offset, &f, &parts)
        if recall != NULL:
            recall_handle(recall, topic.name, topic.length,
                          <const unsigned char *>self._broker_name, len(self._broker_name),
                          &park)
            self.timer_puts_total += 1
        self._pend(slot, request, topic_id, 1, size, NULL, scan.wait_store, recall,
                   <int32_t>recall_length)
        return 1

    cdef int _put_batch(self, const SendRequest *request, TopicEntry *topic,
                        Py_ssize_t slot) except -2:
        """SEND_BATCH_MESSAGE (send.py _send_batch); 1, 0 or -1 as _put_single."""
        cdef ConnectionSlot *connection = self._slots.at(slot)
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
        if batch_length < 0:        # TIMER_PROPERTIES too: a batch's stay as they are
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
        self._pend(slot, request, topic.topic_id, <int32_t>count, total, sizes,
                   scan.wait_store)
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
        cdef int64_t offset, records_bytes
        cdef Py_ssize_t length = self._python_topic(topic)
        if self._inflight >= self._inflight_max:
            return -1
        PyObject_GetBuffer(records, &view, PyBUF_SIMPLE)
        try:
            self._python_fits(length, view.len)
            offset = self._reserve(<const unsigned char *>topic, length, view.len, queue_id,
                                   count, sys_flag, wait_store)
            if offset < 0:
                return -1
            memcpy(self._ring._data + offset, view.buf, <size_t>view.len)
            records_bytes = view.len
        finally:
            PyBuffer_Release(&view)
        return self._queue_python(queue_id, count, records_bytes, wait_store, started)

    def put_assembled(self, Assembly assembly not None, Py_ssize_t run, bytes topic not None,
                      int32_t queue_id, int32_t sys_flag, bint wait_store,
                      double started=-1.0):
        """:meth:`put_python` of the timer's run ``run`` of ``assembly``
        (``_fast/timer_reput.pyx``): its records are written straight into the reserved
        space from their recipes and the parked records, with no buffer of the run made
        first. Its request id, or -1 when there is no room now."""
        cdef int64_t offset, records_bytes = assembly.run_bytes(run)
        cdef int32_t count = assembly.run_records(run)
        cdef Py_ssize_t length = self._python_topic(topic)
        if self._inflight >= self._inflight_max:
            return -1
        self._python_fits(length, records_bytes)
        offset = self._reserve(<const unsigned char *>topic, length, records_bytes, queue_id,
                               count, sys_flag, wait_store)
        if offset < 0:
            return -1
        assembly.fill(run, self._ring._data + offset)
        return self._queue_python(queue_id, count, records_bytes, wait_store, started)

    cdef Py_ssize_t _python_topic(self, bytes topic) except -1:
        cdef Py_ssize_t length = len(topic)
        if not 0 < length <= PUT_TOPIC_MAX_BYTES:
            raise ValueError(f"topic of {length} bytes")
        return length

    cdef int _python_fits(self, Py_ssize_t topic_length, int64_t records_bytes) except -1:
        if _put_header_bytes(topic_length) + records_bytes > \
                <int64_t>self._ring._record_max_bytes:
            raise ValueError(f"put request of {records_bytes} bytes exceeds the ring's record "
                             f"size")
        return 0

    cdef int64_t _queue_python(self, int32_t queue_id, int32_t count, int64_t records_bytes,
                               bint wait_store, double started) except -1:
        # A Python path put just reserved and written: queued, its request id.
        cdef FastSend send
        memset(&send, 0, sizeof(send))
        send.python = True
        send.slot = -1
        send.queue_id = queue_id
        send.topic_id = -1
        send.started_ns = monotonic_ns() if started < 0 else <int64_t>(started * 1e9)
        return self._queue(&send, count, records_bytes, NULL, wait_store)
