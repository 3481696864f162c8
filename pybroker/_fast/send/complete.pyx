# pybroker._fast.send.complete: a put's way from its queueing to its answer (both send paths).
"""The completion side of a remoting worker's send ring (docs/architecture/send-fast-path.md).

:class:`SendCompletions` holds every put request of both paths from the moment it is queued
(:meth:`SendCompletions._queue`, called by ``send/take.pyx`` for a fast send and for a Python
path put) to its answer. Completions come back in request order (the appender drains a ring in
order), so the puts waiting for their completion form a FIFO (``send/held.pyx``) and every
completion is for its head.

:meth:`SendCompletions.drain` takes the completions the appender published. A completion of a
fast put becomes its response frame, written into the connection's output (``send/slots.pyx``)
from a template made by the Python path's own encoder (broker/send_fast.py; ``send/answer.pyx``)
with msgId, queueId, queueOffset and opaque filled in; the outcome of a Python path put is
returned to the caller (proc/ring_putter.py), which answers it.
Held acknowledgements, THE rule for both paths (a put of either waits in the same FIFO): under
SYNC_FLUSH an acknowledgement waits until ``flushed_position`` covers the put's last byte (its
physical offset + the records_bytes it reserved); under SYNC_MASTER until
``replicated_position`` (a slave's acknowledged offset) covers it, or it is answered
SLAVE_NOT_AVAILABLE at once when no slave is connected or the slave is ``haMaxGapNotInSync``
behind; with both, both. They wait in ONE FIFO in completion order (so in CommitLog order) with
a cursor per position (``send/held.pyx``): :meth:`release` answers what the positions cover,
:meth:`expire` what is past syncFlushTimeout (FLUSH_SLAVE_TIMEOUT while the slave lacks it,
else FLUSH_DISK_TIMEOUT), both through :meth:`_settle` (proc/ack_holds.py decides when).
Fast failure (proc/fast_failure.py) walks the same FIFO: :meth:`aged`, :meth:`withdraw`.
:meth:`send_outputs` writes each connection's frames of a drain with one ``send`` to its socket
(or hands them over as one bytes object where it cannot).
"""
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.string cimport memcpy

from pybroker._fast.ring cimport CompletionRing, pb_completion_slot
from pybroker._fast.send.answer cimport (AnswerValues, Template, answer_bytes_max,
                                         set_templates, write_answer)
from pybroker._fast.send.held cimport (fifo_aged, fifo_at, fifo_first_live, fifo_free,
                                       fifo_head, fifo_init, fifo_oldest_ns, fifo_push,
                                       held_advance, held_done, held_expiry, held_first,
                                       held_next, held_push, held_target, held_unanswered,
                                       send_free)
from pybroker._fast.send.slots cimport ConnectionSlots
from pybroker._fast.send.stats cimport SendStats, monotonic_ns


cdef class SendCompletions:
    """The puts of one worker's send ring from queueing to answer; ``SendPath``
    (send/take.pyx) adds the taking side and is the class the worker uses."""

    def __cinit__(self):
        self._slots = ConnectionSlots()
        self._pending.items = NULL
        self._held.fifo.items = NULL
        self._drained = NULL
        self._counting = SendStats()
        self._python_outcomes = []

    cdef int _init_completions(self, CompletionRing completions, bytes store_ip,
                               int32_t store_port, list templates, int32_t put_ok,
                               int32_t flush_timeout_status, bint sync_flush,
                               double flush_timeout_s, bint sync_master,
                               int64_t ha_max_gap_bytes, int32_t slave_timeout_status,
                               int32_t slave_not_available_status,
                               double slave_timeout_s) except -1:
        """SendPath.__init__'s part for the completion side (its docstring says what each
        argument is)."""
        if not 0 < len(templates) <= STATUSES_MAX:
            raise ValueError(f"{len(templates)} templates: 1..{STATUSES_MAX}")
        self._completions = completions
        host = (store_ip + store_port.to_bytes(4, "big", signed=True)).hex().upper().encode()
        self._host_hex_length = len(host)
        memcpy(self._host_hex, <const char *>host, self._host_hex_length)
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
        fifo_init(&self._pending, 64)
        fifo_init(&self._held.fifo, 64)
        self._held.sync_flush, self._held.sync_master = sync_flush, sync_master
        self._drained = <pb_completion_slot *>PyMem_Malloc(
            self._inflight_max * sizeof(pb_completion_slot))
        if self._drained == NULL:
            raise MemoryError()
        return 0

    def __dealloc__(self):
        fifo_free(&self._pending)
        fifo_free(&self._held.fifo)
        PyMem_Free(self._drained)

    def _set_templates(self, list templates):
        self._statuses_count = len(templates)
        # Kept: the templates point into these bytes.
        self._template_bytes = set_templates(self._templates, STATUSES_MAX, templates)
        self._set_recall_templates(templates)

    def _set_recall_templates(self, list templates):
        """The answers of parked timer messages (a recallHandle after queueOffset when stored;
        broker/send_fast.py ``response_templates(recall=True)``), one per status as
        :meth:`_set_templates`'s."""
        if len(templates) != self._statuses_count:
            raise ValueError(f"{len(templates)} recall templates for {self._statuses_count} "
                             f"statuses")
        self._recall_template_bytes = set_templates(self._recall_templates, STATUSES_MAX,
                                                    templates)

    # --- connections (send/slots.pyx) -------------------------------------------------------

    def open_slot(self, bytes born_ip not None, int32_t born_port):
        """A slot for a new connection whose peer is ``born_ip`` (4 or 16 bytes):``born_port``."""
        return self._slots.open(born_ip, born_port)

    def close_slot(self, Py_ssize_t slot):
        """The connection of ``slot`` closed: answers still due to it are dropped."""
        self._slots.close(slot)

    def set_slot_fd(self, Py_ssize_t slot, int fd):
        """The socket :meth:`send_outputs` may write the answers of ``slot`` to itself: the
        connection has nothing queued or buffered before them (-1: no longer so)."""
        self._slots.set_fd(slot, fd)

    def send_outputs(self):
        """Each connection's response frames since the last call, one ``send`` each to the
        socket of :meth:`set_slot_fd`; ``[(slot, frames)]``: the frames of the connections
        without one, and the rest of a socket that did not take them all, one bytes object
        per connection (for its transport: one write)."""
        return self._slots.send_outputs()

    # --- queued puts (both paths) -------------------------------------------------------------

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
        fifo_push(&self._pending, send)
        self._next_request_id += 1
        self._inflight += 1
        return request_id

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
                head = fifo_head(&self._pending)
                if head == NULL or head.request_id != done.request_id:
                    raise RuntimeError(f"completion for request {done.request_id}, not for "
                                       f"the oldest in flight")
                send = head[0]
                self._pending.head += 1
                self.completed_up_to = done.request_id
                if send.withdrawn:          # answered busy already; never stored
                    send_free(&send)
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
        return held_push(&self._held, send)

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
        """The one drain of the held acknowledgements (pybroker/_fast/send/held.pyx): what
        the positions cover, then (``expire``) what is past its deadline."""
        cdef FastSend *send
        cdef int64_t now_ns
        cdef int32_t status
        if self._held.fifo.head == self._held.fifo.tail:
            return 0
        now_ns = monotonic_ns()     # once per drain: the held time of every send answered
        held_advance(&self._held, flushed, replicated)
        while True:
            send = held_next(&self._held, now, expire, self._put_ok,
                              self._flush_timeout_status, self._slave_timeout_status, &status)
            if send == NULL:
                break
            if not held_done(&self._held, send):
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
        return fifo_aged(&self._pending, <int64_t>(limit * 1e9), after_id)

    def oldest(self, int64_t after_id):
        """Monotonic s the longest-waiting put above ``after_id`` (live) began to, or None."""
        cdef int64_t started_ns = fifo_oldest_ns(&self._pending, after_id)
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
        for index in range(self._pending.head, self._pending.tail):
            send = fifo_at(&self._pending, index)
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
            if not send.oneway and self._slots.answers_due(send.slot, send.generation):
                fast.append((send.slot, send.opaque, send.started_ns / 1e9))
        self._update_oldest()
        return withdrawn, fast, python

    # --- held acknowledgements ----------------------------------------------------------------

    @property
    def flush_target(self):
        """End position the flush must reach to release more held acknowledgements (as of the
        last release), or None."""
        cdef FastSend *send = held_target(&self._held, False)
        return None if send == NULL else send.end_position

    @property
    def replica_target(self):
        """The same for the slaves' acknowledged offset (``replicated_position``), or None."""
        cdef FastSend *send = held_target(&self._held, True)
        return None if send == NULL else send.end_position

    @property
    def held_deadline(self):
        """When (loop time) the oldest held acknowledgement may time out, as the positions
        stood at the last release, or None (it may move earlier when a position covers it)."""
        cdef Py_ssize_t at = held_first(&self._held, False)
        return None if at < 0 else held_expiry(&self._held, at)

    @property
    def held_count(self):
        """Held acknowledgements not answered yet."""
        return held_unanswered(&self._held)

    # --- answers and counting -----------------------------------------------------------------

    cdef int _answer(self, FastSend *send, int32_t status, bint real_ids,
                     int64_t now_ns) except -1:
        cdef Template *template
        cdef AnswerValues values
        cdef unsigned char *out
        if send.python:
            self._python_outcomes.append(self._python_outcome(send, status, real_ids))
            return 0
        try:
            if not 0 <= status < self._statuses_count:
                status = self._statuses_count - 1     # the caller's UNKNOWN_ERROR, last
            template = &self._templates[status] if send.recall == NULL \
                else &self._recall_templates[status]
            self._count(send, template, real_ids, now_ns)
            if send.oneway or not self._slots.answers_due(send.slot, send.generation):
                return 0
            values.real_ids = real_ids
            values.host_hex, values.host_hex_length = self._host_hex, self._host_hex_length
            values.physical_offset = send.physical_offset
            values.count, values.records_bytes, values.sizes = send.count, \
                send.records_bytes, send.sizes
            values.queue_id, values.queue_offset = send.queue_id, send.queue_offset
            values.opaque = send.opaque
            values.recall, values.recall_length = send.recall, send.recall_length
            out = self._slots.output(send.slot, answer_bytes_max(template, &values))
            self._slots.at(send.slot).output_length += write_answer(out, template, &values)
            return 0
        finally:
            send_free(send)

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
        cdef FastSend *pending = fifo_first_live(&self._pending, 0, True)
        cdef Py_ssize_t held_at = held_first(&self._held, True)
        cdef FastSend *held = NULL if held_at < 0 else fifo_at(&self._held.fifo, held_at)
        if pending == NULL:
            return 0 if held == NULL else held.started_ms
        if held == NULL or pending.started_ms < held.started_ms:
            return pending.started_ms
        return held.started_ms

    def fast_oldest_ms(self):
        """:meth:`_fast_oldest_ms` for the handlers' Recorder (the shared gauge)."""
        return self._fast_oldest_ms()
