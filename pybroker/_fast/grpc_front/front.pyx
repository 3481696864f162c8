# distutils: language = c++
# pybroker._fast.grpc_front.front: start and stop the libgrpc++ relay of the gRPC worker.
"""The Python face of the gRPC front (relay.h): :class:`Front` binds the public listeners and
relays every call to ``backend`` (the worker's grpcio service) on its own thread, but the
unary ``handoff_methods``, which wait for the worker: ``take`` them when ``handoff_eventfd``
is readable (after reading it) and ``answer`` each once. With ``fast_sends`` and
``set_send_rules``, the SendMessage calls the front can put itself wait as remoting frames
(``take_sends``, on the same eventfd) for the worker's send fast path, whose answers
``answer_sends`` turns into the calls' answers (send.h). The server-streaming
``stream_methods`` wait for the worker too (``take_streams``, with the call's id and deadline):
``answer_stream`` gives all of a stream's responses, which the front writes one by one, then
``take_reports`` says how many it wrote; ``take_cancelled`` names the streamed calls their
clients cancelled before their answer. ``stop`` blocks without the GIL: it
stops accepting, lets the calls in flight end for ``grace_s`` (so the worker must go on
answering meanwhile), then ends the others.
"""
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport INT64_MAX, INT64_MIN
from libcpp.memory cimport make_shared

from pybroker._fast.frame cimport FRAME_LENGTH_FIELD_BYTES, FRAME_PREFIX_BYTES
from pybroker._fast.hton cimport pb_unpack_int32
from pybroker._fast.request_read cimport (FieldNames, FieldSpan, RequestHead, read_decimal,
                                          read_response)

PEER_KEY = kPeerKey.decode()

cdef extern from *:
    """
    /* Ext fields of a send answer the front reads (send_fast.response_template's names). */
    static const char *pb_front_answer_names[2] = {"queueOffset", "recallHandle"};
    static const Py_ssize_t pb_front_answer_lengths[2] = {11, 12};
    """
    const char **ANSWER_NAMES "pb_front_answer_names"
    const Py_ssize_t *ANSWER_LENGTHS "pb_front_answer_lengths"

cdef enum:
    ANSWER_QUEUE_OFFSET = 0
    ANSWER_RECALL_HANDLE = 1
    ANSWER_FIELDS = 2
    ANSWER_SCRATCH_BYTES = 4096     # an answer header longer than this goes to the worker
    ANSWER_EXT_FIELDS_MAX = 64

cdef FieldNames _ANSWER_NAMES
_ANSWER_NAMES.names = ANSWER_NAMES
_ANSWER_NAMES.lengths = ANSWER_LENGTHS
_ANSWER_NAMES.count = ANSWER_FIELDS
_ANSWER_NAMES.short_names = False
_ANSWER_NAMES.long_names_code = -1


cdef tuple _handoff_tuple(Handoff& call):
    metadata = []
    for entry in call.metadata:
        key = entry.first.decode()
        value = entry.second if key.endswith("-bin") else entry.second.decode()
        metadata.append((key, value))
    return (call.handle, call.method.decode(), call.request, tuple(metadata),
            call.peer.decode())


cdef class Front:
    """A started front; ``stop`` it once (the worker does at its stop)."""

    def __cinit__(self, plain_addresses, tls_addresses, str backend, *,
                  bytes certificate_chain=b"", bytes private_key=b"", bytes trusted=b"",
                  bint require_client_auth=False, int max_message_bytes=4 << 20,
                  handoff_methods=(), int handoff_eventfd=-1, bint fast_sends=False,
                  stream_methods=()):
        cdef Config config
        cdef string error
        for address in plain_addresses:
            config.plain_addresses.push_back(address.encode())
        for address in tls_addresses:
            config.tls_addresses.push_back(address.encode())
        config.backend = backend.encode()
        config.certificate_chain = certificate_chain
        config.private_key = private_key
        config.trusted = trusted
        config.require_client_auth = require_client_auth
        config.max_message_bytes = max_message_bytes
        for method in handoff_methods:
            config.handoff_methods.push_back(method.encode())
        config.handoff_eventfd = handoff_eventfd
        config.fast_sends = fast_sends
        for method in stream_methods:
            config.stream_methods.push_back(method.encode())
        with nogil:
            self._front = Start(config, &error)
        if self._front == NULL:
            raise OSError(error.decode())

    @property
    def calls_accepted(self) -> int:
        if self._front == NULL:
            return 0
        return CallsAccepted(self._front)

    @property
    def calls_handed_off(self) -> int:
        if self._front == NULL:
            return 0
        return CallsHandedOff(self._front)

    def take(self) -> list:
        """The handed-off calls waiting: (handle, method, request, metadata, peer) each,
        metadata as (key, value) pairs (bytes values for ``-bin`` keys, as grpcio gives)."""
        cdef vector[Handoff] calls
        if self._front == NULL:
            return []
        TakeHandoffs(self._front, &calls)
        return [_handoff_tuple(call) for call in calls]

    def take_streams(self) -> list:
        """The streamed calls waiting: (handle, id, method, request, metadata, peer, deadline)
        each, ``deadline`` in seconds of the wall clock or None."""
        cdef vector[Handoff] calls
        if self._front == NULL:
            return []
        TakeStreams(self._front, &calls)
        return [(call.handle, call.id, *_handoff_tuple(call)[1:],
                 call.deadline if call.deadline >= 0 else None) for call in calls]

    def take_cancelled(self) -> list:
        """The ids of the streamed calls cancelled before their answer."""
        cdef vector[uint64_t] ids
        if self._front == NULL:
            return []
        TakeCancelled(self._front, &ids)
        return list(ids)

    def take_reports(self) -> list:
        """(id, responses written) of the streams answered with ``report``."""
        cdef vector[StreamReport] reports
        if self._front == NULL:
            return []
        TakeReports(self._front, &reports)
        return [(report.id, report.written) for report in reports]

    def answer_stream(self, uintptr_t handle, list responses, bint report=False) -> None:
        """Answer a taken streamed call once: its ``responses`` (at least one) are written in
        order, the last with status OK; with ``report``, ``take_reports`` gives how many were
        written. Dropped after ``stop``'s grace, as ``answer``."""
        cdef vector[string] encoded
        if not responses:
            raise ValueError("a stream's answer needs a response")
        for response in responses:
            encoded.push_back(<bytes>response)
        if self._front != NULL:
            AnswerStream(self._front, handle, encoded, report)

    @property
    def calls_sent_fast(self) -> int:
        if self._front == NULL:
            return 0
        return CallsSentFast(self._front)

    def set_send_rules(self, dict topics, system_property_names, property_names,
                       str client_id_key, int64_t max_message_size, bint body_empty_check,
                       int user_property_max_num, int max_user_property_size,
                       int max_message_group_size, int64_t max_delay_ms,
                       int compressed_flag, int send_message_code, dict entry_codes,
                       int success_code) -> None:
        """The rules of the sends the front puts itself (send.h SendRules); ``topics`` maps a
        topic to (writable queues, takes NORMAL, FIFO, DELAY messages)."""
        cdef shared_ptr[SendRules] rules = make_shared[SendRules]()
        cdef SendRules* r = rules.get()
        cdef SendTopic entry
        for topic, (queues, normal, fifo, delay) in topics.items():
            entry.queues, entry.normal, entry.fifo, entry.delay = queues, normal, fifo, delay
            r.topics[topic.encode()] = entry
        for name in system_property_names:
            r.system_property_names.insert(name.encode())
        for name in property_names:
            r.property_names.push_back(name.encode())
        r.client_id_key = client_id_key.encode()
        r.max_message_size = max_message_size
        r.body_empty_check = body_empty_check
        r.user_property_max_num = user_property_max_num
        r.max_user_property_size = max_user_property_size
        r.max_message_group_size = max_message_group_size
        r.max_delay_ms = max_delay_ms
        r.compressed_flag = compressed_flag
        r.send_message_code = send_message_code
        for remoting_code, (grpc_code, message) in entry_codes.items():
            r.entry_codes[remoting_code] = pair[int, string](grpc_code, message.encode())
        r.success_code = success_code
        if self._front != NULL:
            SetSendRules(self._front, rules)

    def take_sends(self) -> list:
        """The fast sends waiting: (peer, frames, count) per caller, the frames in a bytearray
        (the send fast path may write over a frame it takes)."""
        cdef vector[PeerSends] sends
        if self._front == NULL:
            return []
        TakeSends(self._front, &sends)
        return [(batch.peer.decode(),
                 bytearray(PyBytes_FromStringAndSize(batch.frames.data(), batch.frames.size())),
                 batch.count) for batch in sends]

    def take_fallback(self, int32_t opaque):
        """The hand-off of fast send ``opaque`` (as ``take`` gives one), or None."""
        cdef Handoff call
        if self._front == NULL or not TakeFallback(self._front, opaque, &call):
            return None
        return _handoff_tuple(call)

    def answer_send(self, int32_t opaque, int code, int64_t queue_offset=0,
                    str recall_handle="") -> int:
        """Answer fast send ``opaque`` from the send path's answer: 0 when the front answered
        it (or no such send waits), else the handle of the call the worker answers."""
        if self._front == NULL:
            return 0
        return AnswerSend(self._front, opaque, code, queue_offset, recall_handle.encode())

    def answer_sends(self, const unsigned char[::1] frames not None) -> tuple:
        """Answer the fast sends the send path's answer frames (one after the other) are for:
        (frames seen, [(handle, frame)] of those left to the worker - handle 0 for a frame not
        read here (decode it and use ``answer_send``), else the call to ``answer``)."""
        cdef Py_ssize_t position = 0, end = frames.shape[0], length
        cdef const unsigned char *frame
        cdef unsigned char scratch[ANSWER_SCRATCH_BYTES]
        cdef RequestHead head
        cdef FieldSpan fields[ANSWER_FIELDS]
        cdef int64_t queue_offset
        cdef string recall_handle
        cdef uintptr_t handle
        cdef list left = []
        cdef Py_ssize_t count = 0
        if self._front == NULL:
            return 0, left
        while end - position >= FRAME_PREFIX_BYTES:
            frame = &frames[position]
            length = <Py_ssize_t>pb_unpack_int32(frame) + FRAME_LENGTH_FIELD_BYTES
            if length < FRAME_PREFIX_BYTES or length > end - position:
                break
            queue_offset = 0
            if read_response(frame, ANSWER_EXT_FIELDS_MAX, &_ANSWER_NAMES, scratch,
                             ANSWER_SCRATCH_BYTES, &head, fields) and \
                    (not fields[ANSWER_QUEUE_OFFSET].present or
                     read_decimal(&fields[ANSWER_QUEUE_OFFSET], INT64_MIN, INT64_MAX,
                                  &queue_offset) == 0):
                recall_handle.clear()
                if fields[ANSWER_RECALL_HANDLE].present:
                    recall_handle.assign(<const char *>fields[ANSWER_RECALL_HANDLE].data,
                                         fields[ANSWER_RECALL_HANDLE].length)
                handle = AnswerSend(self._front, head.opaque, head.code, queue_offset,
                                    recall_handle)
                if handle != 0:
                    left.append((handle, bytes(frames[position:position + length])))
            else:
                left.append((0, bytes(frames[position:position + length])))
            position += length
            count += 1
        return count, left

    def answer(self, uintptr_t handle, bytes response, int code=0, str details="") -> None:
        """Answer a taken call once: ``code`` 0 with ``response``, else that status. While
        ``stop`` runs the answer still reaches its caller until the grace is over; after that
        it is dropped: the stop ended the call (its relay object stays allocated until the
        process ends)."""
        if self._front != NULL:
            Answer(self._front, handle, response, code, details.encode())

    def stop(self, double grace_s) -> None:
        """Stop accepting; the calls in flight get their answers for up to ``grace_s``
        seconds (answer, answer_sends: call them from another thread meanwhile), then those
        left are ended; join. The front is freed only back under the GIL, so no answer runs
        on it while it is."""
        cdef CFront* front = self._front
        if front == NULL:
            return
        with nogil:
            Stop(front, grace_s)
        self._front = NULL
        Destroy(front)

    def __dealloc__(self):
        cdef CFront* front = self._front
        if front != NULL:
            self._front = NULL
            with nogil:
                Stop(front, 0.0)
            Destroy(front)
