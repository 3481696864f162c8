# pybroker._fast.pop.ack_take: ACK_MESSAGE frames taken into the send ring without the handler.
"""The taking side of the ACK_MESSAGE fast path (docs/architecture/pop.md, "ACK_MESSAGE on the
frame-taker path").

:meth:`AckTaker.take` walks the whole frames of a connection's receive buffer. A frame that
``pop/ack.pyx`` reads as an ACK_MESSAGE (not oneway) whose queue ``lookup(topic, group,
queue_id, queue_offset)`` answers with its POP slot (the Python side's table: the topic, the
queue id in its readQueueNums, the offset in the queue's bounds, the slot known; -1 otherwise),
whose receipt handle is a non-order one and whose ack record C writes (``write_ack_record``)
becomes one put request in the worker's send ring, as the handler's revive put is: a put of the
Python path of ``SendPath`` (``send/take.pyx``), one record, wait_store, so its completion,
held acknowledgement and fast failure are those of every Python put and its outcome comes back
through ``SendPath.drain`` to proc/ring_putter.py. The first frame that is anything else stops
the walk and goes to the connection (the handler), so requests keep their order.

``take`` answers ``(position, outcome, frame_length, taken, appender_asleep)``, ``taken`` the
acks put: ``(request_id, opaque, topic, group, queue_id, queue_offset, pop_slot, pop_time)``
each, for the completion: a :class:`FastAck` each, ended by the worker's :class:`AckEnd` (the
handler's end of an ack, what of it runs in C: see that class).
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdio cimport snprintf
from libc.string cimport memcpy, memset

from pybroker._fast.frame cimport TAKE_END, TAKE_FULL, TAKE_OTHER
from pybroker._fast.pop.ack cimport (ACK_FIELD_CONSUMER_GROUP, ACK_FIELD_EXTRA_INFO,
                                     ACK_FIELD_TOPIC, ACK_RECORD_BYTES_MAX,
                                     ACK_REVIVE_TOPIC_MAX_BYTES, AckRecord, AckRecordSettings,
                                     AckRequest, ReceiptHandle, parse_receipt_handle,
                                     read_ack_request, write_ack_record)
from pybroker._fast.put_request cimport PUT_REQUEST_ALIGN_BYTES, PUT_TOPIC_POSITION
from pybroker._fast.request_read cimport REQUEST_FLAG_ONEWAY
from pybroker._fast.send.held cimport FastSend
from pybroker._fast.send.stats cimport count_rpc, monotonic_ns, realtime_ms
from pybroker._fast.stats cimport (BROKER_ACK_NUMS, KEY_BYTES, KEY_GROUP_ACK, KEY_MESSAGES,
                                    KEY_REQUESTS, KEYS_DROPPED, StatsWriter, pb_stats_add)
from pybroker._fast.send.take cimport SendPath
from pybroker._fast.send.timer cimport set_wheel
from pybroker._fast.taker cimport SCRATCH_MIN_BYTES, Scratch, scratch_fit, taker_next, taker_open
from cpython.buffer cimport PyBuffer_Release


cdef inline Py_ssize_t _put_bytes(Py_ssize_t topic_length, Py_ssize_t records_bytes) noexcept:
    # A put request's bytes in the ring (put_request.pxd: the header padded, then the records).
    cdef Py_ssize_t align = PUT_REQUEST_ALIGN_BYTES
    return ((PUT_TOPIC_POSITION + topic_length + align - 1) & ~(align - 1)) + records_bytes


cdef class AckTaker:
    """The ACK_MESSAGE taker of one remoting worker over its ``SendPath`` (see the module
    docstring). ``revive_topic``, ``revive_queue_num``, ``timer_topic``: the revive log and the
    wheel; ``timer``: send_fast.TimerSettings' (enabled, congestion_possible, congest_limit,
    max_delay_ms, precision_ms); ``lookup`` as above; ``clock_ms()`` (None: the wall clock,
    as the handler's ctx.now_ms) gives the records' born time and the timer rule's now, read
    once per :meth:`take`."""

    def __cinit__(self):
        self._scratch.data = NULL
        self._scratch.bytes = 0
        self._record = NULL

    def __init__(self, SendPath core not None, bytes store_ip not None, int32_t store_port,
                 bytes revive_topic not None, int32_t revive_queue_num,
                 bytes timer_topic not None, bint enabled, bint congestion_possible,
                 int64_t congest_limit, int64_t max_delay_ms, int64_t precision_ms,
                 object lookup not None, Py_ssize_t frame_max_bytes,
                 Py_ssize_t ext_fields_max, object clock_ms=None):
        if len(store_ip) not in (4, 16) or precision_ms <= 0 \
                or not 0 < len(revive_topic) <= ACK_REVIVE_TOPIC_MAX_BYTES \
                or not 0 < len(timer_topic) <= ACK_REVIVE_TOPIC_MAX_BYTES:
            raise ValueError("a store ip of 4 or 16 bytes, a positive precision, topics within "
                             "their bounds")
        self._core = core
        self._revive_topic, self._timer_topic, self._store_ip = \
            revive_topic, timer_topic, store_ip
        s = &self._settings
        s.revive_topic, s.revive_topic_length = self._revive_topic, len(revive_topic)
        s.revive_queue_num = revive_queue_num
        s.timer_topic, s.timer_topic_length = self._timer_topic, len(timer_topic)
        s.store_ip, s.store_ip_length = self._store_ip, len(store_ip)
        s.store_port = store_port
        s.timer.enabled = enabled
        s.timer.congestion_possible = congestion_possible
        s.timer.congest_limit = congest_limit
        s.timer.max_delay_ms = max_delay_ms
        s.timer.precision_ms = precision_ms
        s.timer.wheel = NULL
        s.timer.wheel_slots = 0
        self._wheel = None
        self._lookup = lookup
        self._clock_ms = clock_ms
        self._frame_max_bytes = frame_max_bytes
        self._ext_fields_max = ext_fields_max
        scratch_fit(&self._scratch, SCRATCH_MIN_BYTES)
        self._record = <unsigned char *>PyMem_Malloc(ACK_RECORD_BYTES_MAX)
        if self._record == NULL:
            raise MemoryError()

    def __dealloc__(self):
        PyMem_Free(self._scratch.data)
        PyMem_Free(self._record)

    def set_timer_wheel(self, wheel):
        """The timerwheel mapped read-only (None: forget it), for the congestion rule."""
        set_wheel(&self._settings.timer, wheel)
        self._wheel = wheel

    def take(self, object buffer, Py_ssize_t start, Py_ssize_t end):
        """Put every leading ACK_MESSAGE frame of ``buffer[start:end]`` it may into the ring;
        see the module docstring for the answer."""
        cdef Py_buffer view
        cdef Py_ssize_t at = start, frame_bytes = 0
        cdef const unsigned char *data
        cdef int outcome = TAKE_END, put
        cdef list taken = []
        cdef bint asleep = False
        self._take_ms = realtime_ms() if self._clock_ms is None else self._clock_ms()
        data = taker_open(buffer, &view, start, end)
        try:
            while taker_next(data, at, end, self._frame_max_bytes, &self._scratch,
                             &frame_bytes, &outcome):
                put = 0 if self.divert else self._take_one(data + at, frame_bytes, taken)
                if put == 0:
                    outcome = TAKE_OTHER
                    self.other_frames_total += 1
                    break
                if put < 0:
                    outcome = TAKE_FULL
                    break
                at += frame_bytes
        finally:
            PyBuffer_Release(&view)
        if taken:
            self.acks_total += len(taken)
            asleep = self._core._ring.commit_c()
        return at, outcome, frame_bytes, taken, asleep

    cdef int _take_one(self, const unsigned char *frame, Py_ssize_t frame_bytes,
                       list taken) except -2:
        """1: put (an entry appended to ``taken``); 0: the handler's; -1: no room now."""
        cdef AckRequest request
        cdef ReceiptHandle handle
        cdef AckRecord record
        cdef int64_t pop_slot
        cdef int64_t request_id
        if not read_ack_request(frame, frame_bytes, self._ext_fields_max, self._scratch.data,
                                self._scratch.bytes, &request):
            return 0
        if request.head.flag & REQUEST_FLAG_ONEWAY:
            return 0
        if not parse_receipt_handle(request.fields[ACK_FIELD_EXTRA_INFO].data,
                                    request.fields[ACK_FIELD_EXTRA_INFO].length, &handle):
            return 0
        cdef const unsigned char *topic = request.fields[ACK_FIELD_TOPIC].data
        cdef Py_ssize_t topic_length = request.fields[ACK_FIELD_TOPIC].length
        cdef const unsigned char *group = request.fields[ACK_FIELD_CONSUMER_GROUP].data
        cdef Py_ssize_t group_length = request.fields[ACK_FIELD_CONSUMER_GROUP].length
        if not write_ack_record(self._record, &self._settings, topic, topic_length, group,
                                group_length, request.queue_id, request.queue_offset, &handle,
                                self._take_ms, &record):
            return 0
        if _put_bytes(record.topic_length, record.record_bytes) \
                > <Py_ssize_t>self._core._ring._record_max_bytes:
            return 0
        if not self._core._room():
            return -1
        topic_text = (<const char *>topic)[:topic_length].decode("ascii")
        group_text = (<const char *>group)[:group_length].decode("ascii")
        pop_slot = self._lookup(topic_text, group_text, request.queue_id, request.queue_offset)
        if pop_slot < 0:
            return 0
        request_id = self._put(&record)
        if request_id < 0:
            return -1
        taken.append((request_id, request.head.opaque, topic_text, group_text,
                      request.queue_id, request.queue_offset, pop_slot, handle.pop_time))
        return 1

    cdef int64_t _put(self, const AckRecord *record) except -2:
        """The record as a Python path put of one record (SendPath.put_python's steps);
        its request id, or -1 when the ring has no room now."""
        cdef SendPath core = self._core
        cdef FastSend send
        cdef int64_t offset = core._reserve(record.topic, record.topic_length,
                                            record.record_bytes, record.queue_id, 1, 0, True)
        if offset < 0:
            return -1
        memcpy(core._ring._data + offset, self._record, <size_t>record.record_bytes)
        memset(&send, 0, sizeof(send))
        send.python = True
        send.slot = -1
        send.queue_id = record.queue_id
        send.topic_id = -1
        send.started_ns = monotonic_ns()
        return core._queue(&send, 1, record.record_bytes, NULL, True)


# The answer frame's header: 4-byte frame length, 4-byte header length (JSON: serialize type 0).
cdef enum:
    _FRAME_HEAD_BYTES = 8
    _OPAQUE_DIGITS_MAX = 12


cdef class AckEnd:
    """The end of a worker's fast acks (docs/architecture/pop.md): what the handler does
    after an ack record's put, in its order, for a :class:`FastAck`'s outcome.

    ``ctx``: the handlers' BrokerContext (``stats``, ``pop.table``, ``config``); ``answers``:
    where answers go (``answer(connection, frame)``); ``pieces``: the handler's SUCCESS answer
    header around its opaque (broker/pop/ack_fast.py answer_pieces); ``ack_put``: the
    handler's ``ack.ack_put``; ``stored``: the PutStatus values whose ``stored`` is true;
    ``request_code`` / ``response_code``: the rpc series' codes (ACK_MESSAGE, SUCCESS).

    A stored put without enablePopLog is counted here as ``Recorder.pop_ack`` counts it
    (GROUP_ACK_NUMS, BROKER_ACK_NUMS); any other outcome goes to ``ack_put`` (counted and
    logged there). Then ``PopTable.take_acked``, the answer made here, and the request
    finished as proc/remoting.py finishes a handled one: ``Recorder.request_finished`` for
    the family's figures, its rpc series counted here as ``Recorder.rpc`` counts it.
    tests/unit/broker/test_pop_ack_fast.py compares both paths' answers, records, counters,
    keys and in-flight counts."""

    def __init__(self, object ctx not None, object answers not None, tuple pieces not None,
                 object ack_put not None, tuple stored not None, int32_t request_code,
                 int32_t response_code):
        self._ctx = ctx
        self._answers = answers
        self._before, self._after = pieces
        self._ack_put = ack_put
        self._stored = stored
        self._request_code = request_code
        self._response_code = response_code
        self._ack_keys = {}
        self._rpc_keys = {}

    cdef bytes _frame(self, int32_t opaque):
        """The answer frame (JSON header, no body) to the request of ``opaque``."""
        cdef char digits[_OPAQUE_DIGITS_MAX]
        cdef int digit_count = snprintf(digits, _OPAQUE_DIGITS_MAX, "%d", <int>opaque)
        cdef Py_ssize_t before = len(self._before), after = len(self._after)
        cdef Py_ssize_t header = before + digit_count + after
        cdef bytes frame = PyBytes_FromStringAndSize(NULL, _FRAME_HEAD_BYTES + header)
        cdef unsigned char *out = <unsigned char *>PyBytes_AS_STRING(frame)
        cdef uint64_t length = <uint64_t>(header + 4)
        cdef int index
        for index in range(4):
            out[index] = <unsigned char>((length >> (24 - 8 * index)) & 0xFF)
            out[4 + index] = <unsigned char>((<uint64_t>header >> (24 - 8 * index)) & 0xFF)
        memcpy(out + _FRAME_HEAD_BYTES, PyBytes_AS_STRING(self._before), <size_t>before)
        memcpy(out + _FRAME_HEAD_BYTES + before, digits, <size_t>digit_count)
        memcpy(out + _FRAME_HEAD_BYTES + before + digit_count, PyBytes_AS_STRING(self._after),
               <size_t>after)
        return frame

    cdef int _count_ack(self, StatsWriter writer, str topic, str group) except -1:
        """Recorder.pop_ack of one stored ack."""
        cdef uint64_t *words
        cdef object entry = self._ack_keys.get((topic, group))
        if entry is None:
            entry = self._ack_keys[(topic, group)] = writer.key(KEY_GROUP_ACK, 0,
                                                                f"{topic}@{group}")
        if <int>entry < 0:
            pb_stats_add(writer.counters + KEYS_DROPPED, 1)
        else:
            words = writer.key_words(<int>entry)
            pb_stats_add(words + KEY_MESSAGES, 1)
            pb_stats_add(words + KEY_BYTES, 1)
            pb_stats_add(words + KEY_REQUESTS, 1)
        pb_stats_add(writer.counters + BROKER_ACK_NUMS, 1)
        return 0

    cdef int settle(self, FastAck ack, object status) except -1:
        cdef object ctx = self._ctx
        cdef tuple entry = ack.entry
        cdef object stats = ctx.stats
        cdef StatsWriter writer = None
        cdef int64_t elapsed_us
        if stats is not None and stats.enabled:
            writer = stats.writer
        topic, group = entry[2], entry[3]
        if writer is not None and status in self._stored \
                and not ctx.config.broker.enable_pop_log:
            self._count_ack(writer, topic, group)
        else:
            self._ack_put(ctx, topic, group, 1, status, ack)
        ctx.pop.table.take_acked(entry[6], entry[7], 1)
        self._answers.answer(ack.connection, self._frame(<int32_t>entry[1]))
        if stats is not None:
            elapsed_us = (stats.now_ns() - ack.started_ns) // 1000
            stats.request_finished("ack", ack.token, elapsed_us, None)
            if writer is not None:
                count_rpc(writer, self._rpc_keys, self._request_code, self._response_code,
                          False, elapsed_us)
        return 0


cdef class FastAck:
    """One ack the taker put (its ``take`` entry) until its outcome: the putter's pending put
    (proc/ring_putter.py FastPut calls :meth:`settled`); ``token`` and ``started_ns`` as
    the Recorder's request_started and now_ns gave them."""

    def __init__(self, AckEnd end not None, object connection, tuple entry not None,
                 object token, int64_t started_ns):
        self.end = end
        self.connection = connection
        self.entry = entry
        self.token = token
        self.started_ns = started_ns

    def settled(self, status):
        """The put's outcome (a PutStatus): the end of the ack (:class:`AckEnd`)."""
        self.end.settle(self, status)

    def __str__(self):
        """What the handler's log lines say of the ack."""
        _, _, topic, group, queue_id, queue_offset, _, pop_time = self.entry
        return (f"AckMsg(topic={topic!r}, consumer_group={group!r}, queue_id={queue_id}, "
                f"pop_time={pop_time}, ack_offset={queue_offset})")
