# pybroker._fast.pop.ack: an ACK_MESSAGE read, its handle parsed, its ack record written, in C.
"""The C pieces of ACK_MESSAGE (docs/architecture/pop.md, "What the C path for ACK_MESSAGE
needs"), each the twin of one step of the Python handler (broker/pop/ack.py), which stays the
reference:

* :c:func:`read_ack_request` reads the header where the frame lies (code 200051; consumerGroup,
  topic, queueId, extraInfo, offset in any order, ROCKETMQ binary or JSON) through
  ``request_read.read_request``, and takes it only as protocol/headers.py parses it;
* :c:func:`parse_receipt_handle` parses extraInfo as protocol/pop.py ``parse_extra_info(text,
  ACK_READS)`` does (Java's split, Long.valueOf / Integer.valueOf rules) and takes only a
  non-order handle;
* :c:func:`write_ack_record` writes revive_log.ack_message's record: the AckMsg body as orjson
  writes it, TAGS ``ack``, TIMER_DELIVER_MS (pop time + invisible time) and Java's UNIQ_KEY,
  then the 5.x timer's put-time rule by ``send/timer.pyx``'s ``timer_redirect`` (parked on
  rmq_sys_wheel_timer queue 0, or stored on its revive queue when already due), born and store
  host the broker's, born time now.

Anything else - another shape, a refusal, a name with a byte orjson or the properties string
would escape - is answered 0: the Python handler decides. tests/unit/_fast/test_pop_ack.py runs
both over the same seeded inputs (header fields, handles, records byte for byte).
"""
from libc.stdint cimport INT64_MAX, INT64_MIN, int32_t, int64_t, uint64_t
from libc.string cimport memcpy

from pybroker._fast.digits cimport read_java_long, write_decimal
from pybroker._fast.record cimport RecordFields, RecordParts, record_encoded_size, write_record
from pybroker._fast.request_read cimport FieldNames, FieldSpan, read_decimal, read_request
from pybroker._fast.send.timer cimport (TIMER_HANDLER, TIMER_PARKED, TimerPark, set_wheel,
                                        timer_redirect)

from pybroker.protocol import headers as _headers
from pybroker.protocol.codes import RequestCode as _RequestCode
from pybroker.protocol.constants import KEY_SEPARATOR as _KEY_SEPARATOR
from pybroker.protocol.constants import PopConstants as _PopConstants
from pybroker.protocol.constants import Property as _Property

cdef int64_t INT32_LOW = -2147483648
cdef int64_t INT32_HIGH = 2147483647
cdef int64_t INT64_LOW = INT64_MIN
cdef int64_t INT64_HIGH = INT64_MAX

cdef enum:
    SYS_FLAG_BORN_V6 = 0x10         # protocol/constants.py MessageSysFlag (record.pxd's too)
    SYS_FLAG_STORE_V6 = 0x20
    HANDLE_FIELDS_NEEDED = 6        # ack.py's parse_extra_info(..., ACK_READS): getBrokerName
    HANDLE_FIELDS_READ = 6          # fields past the sixth are never looked at

cdef extern from *:
    """
    static const char *pb_ack_names[5] = {
        "consumerGroup", "topic", "queueId", "extraInfo", "offset"};
    static const Py_ssize_t pb_ack_lengths[5] = {13, 5, 7, 9, 6};
    """
    const char **ACK_NAMES "pb_ack_names"
    const Py_ssize_t *ACK_LENGTHS "pb_ack_lengths"

# The tables above restate the Python schema, codes and constants; they must agree.
assert [f.wire_name for f in _headers.ACK_MESSAGE_REQUEST.fields] == [
    ACK_NAMES[i].decode() for i in range(ACK_FIELDS_COUNT)]
assert [len(ACK_NAMES[i]) for i in range(ACK_FIELDS_COUNT)] == [
    ACK_LENGTHS[i] for i in range(ACK_FIELDS_COUNT)]
assert [f.type for f in _headers.ACK_MESSAGE_REQUEST.fields] == [
    _headers.STR, _headers.STR, _headers.INT, _headers.STR, _headers.LONG]
assert all(f.required for f in _headers.ACK_MESSAGE_REQUEST.fields)
assert CODE_ACK_MESSAGE == _RequestCode.ACK_MESSAGE
assert ORDER_REVIVE_QUEUE == _PopConstants.ORDER_REVIVE_QUEUE
assert (_KEY_SEPARATOR, _PopConstants.SPLIT, _PopConstants.ACK_TAG) == (" ", "@", "ack")
assert (_Property.TAGS, _Property.TIMER_DELIVER_MS, _Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) \
    == ("TAGS", "TIMER_DELIVER_MS", "UNIQ_KEY")

cdef FieldNames _ACK_NAMES
_ACK_NAMES.names = ACK_NAMES
_ACK_NAMES.lengths = ACK_LENGTHS
_ACK_NAMES.count = ACK_FIELDS_COUNT
_ACK_NAMES.short_names = False
_ACK_NAMES.long_names_code = CODE_ACK_MESSAGE


# --- the request ------------------------------------------------------------------------------

cdef int read_ack_request(const unsigned char *data, Py_ssize_t frame_bytes,
                          Py_ssize_t ext_fields_max, unsigned char *scratch,
                          Py_ssize_t scratch_bytes, AckRequest *request) noexcept nogil:
    cdef const unsigned char *body
    cdef Py_ssize_t body_length
    cdef int64_t number
    cdef FieldSpan *f = request.fields
    if not read_request(data, frame_bytes, ext_fields_max, &_ACK_NAMES, scratch, scratch_bytes,
                        &request.head, f, &body, &body_length):
        return 0
    if request.head.code != CODE_ACK_MESSAGE:
        return 0
    # Required strings may be empty; required numbers may not (headers.py: "" is absent).
    if not (f[ACK_FIELD_CONSUMER_GROUP].present and f[ACK_FIELD_TOPIC].present
            and f[ACK_FIELD_EXTRA_INFO].present):
        return 0
    if read_decimal(&f[ACK_FIELD_QUEUE_ID], INT32_LOW, INT32_HIGH, &number) < 0:
        return 0
    request.queue_id = <int32_t>number
    if read_decimal(&f[ACK_FIELD_OFFSET], INT64_LOW, INT64_HIGH, &request.queue_offset) < 0:
        return 0
    return 1


# --- the receipt handle -----------------------------------------------------------------------

cdef int parse_receipt_handle(const unsigned char *text, Py_ssize_t length,
                              ReceiptHandle *handle) noexcept nogil:
    cdef const unsigned char *starts[HANDLE_FIELDS_READ]
    cdef Py_ssize_t lengths[HANDLE_FIELDS_READ]
    cdef Py_ssize_t at = 0, end, count = 0, kept = 0
    cdef int64_t value
    # Split on the separator as Java's String.split(" "): count every field up to the last
    # non-empty one (trailing empty fields are dropped), keep the first six.
    while True:
        end = at
        while end < length and text[end] != c' ':
            end += 1
        if count < HANDLE_FIELDS_READ:
            starts[count], lengths[count] = text + at, end - at
        count += 1
        if end > at:
            kept = count
        if end == length:
            break
        at = end + 1
    if kept < HANDLE_FIELDS_NEEDED:
        return 0
    # ack.py's reads (pop.ACK_READS): reviveQid, ckQueueOffset, popTime, invisibleTime as Java
    # parses them; the queue id and queue offset fields are not read.
    if read_java_long(starts[3], lengths[3], True, &value) < 0 \
            or read_java_long(starts[0], lengths[0], False, &handle.ck_queue_offset) < 0 \
            or read_java_long(starts[1], lengths[1], False, &handle.pop_time) < 0 \
            or read_java_long(starts[2], lengths[2], False, &handle.invisible_time) < 0:
        return 0
    handle.revive_qid = <int32_t>value
    handle.broker_name, handle.broker_name_length = starts[5], lengths[5]
    return 0 if handle.revive_qid == ORDER_REVIVE_QUEUE else 1


# --- the ack record ---------------------------------------------------------------------------

cdef bint _plain(const unsigned char *text, Py_ssize_t length) noexcept nogil:
    """No byte orjson escapes (controls, quote, backslash) or the properties separators use;
    ASCII (the request reader takes nothing else)."""
    cdef Py_ssize_t i
    for i in range(length):
        if text[i] < 0x20 or text[i] == c'"' or text[i] == c'\\' or text[i] >= 0x80:
            return False
    return True


cdef inline Py_ssize_t _put(unsigned char *out, const char *text) noexcept nogil:
    cdef Py_ssize_t n = 0
    while text[n] != 0:
        out[n] = <unsigned char>text[n]
        n += 1
    return n


cdef inline Py_ssize_t _copy(unsigned char *out, const unsigned char *text,
                             Py_ssize_t length) noexcept nogil:
    memcpy(out, text, <size_t>length)
    return length


cdef Py_ssize_t _ack_body(unsigned char *out, const unsigned char *topic,
                          Py_ssize_t topic_length, const unsigned char *group,
                          Py_ssize_t group_length, int32_t queue_id, int64_t queue_offset,
                          const ReceiptHandle *handle) noexcept nogil:
    """store/pop_checkpoint.py AckMsg.encode: fastjson's alphabetical keys, bn always there (a
    single ack's handle has one)."""
    cdef Py_ssize_t n = _put(out, '{"ao":')
    n += write_decimal(out + n, queue_offset)
    n += _put(out + n, ',"bn":"')
    n += _copy(out + n, handle.broker_name, handle.broker_name_length)
    n += _put(out + n, '","c":"')
    n += _copy(out + n, group, group_length)
    n += _put(out + n, '","pt":')
    n += write_decimal(out + n, handle.pop_time)
    n += _put(out + n, ',"q":')
    n += write_decimal(out + n, queue_id)
    n += _put(out + n, ',"so":')
    n += write_decimal(out + n, handle.ck_queue_offset)
    n += _put(out + n, ',"t":"')
    n += _copy(out + n, topic, topic_length)
    n += _put(out + n, '"}')
    return n


cdef Py_ssize_t _ack_properties(unsigned char *out, const unsigned char *topic,
                                Py_ssize_t topic_length, const unsigned char *group,
                                Py_ssize_t group_length, int32_t queue_id,
                                int64_t queue_offset, const ReceiptHandle *handle,
                                int64_t deliver_ms) noexcept nogil:
    """revive_log._record's properties before the timer rule: TAGS, TIMER_DELIVER_MS and the
    UNIQ_KEY topic@queueId@ackOffset@group@popTime@brokerName@ack."""
    cdef Py_ssize_t n = _put(out, "TAGS\x01ack\x02TIMER_DELIVER_MS\x01")
    n += write_decimal(out + n, deliver_ms)
    n += _put(out + n, "\x02UNIQ_KEY\x01")
    n += _copy(out + n, topic, topic_length)
    out[n] = c'@'
    n += 1 + write_decimal(out + n + 1, queue_id)
    out[n] = c'@'
    n += 1 + write_decimal(out + n + 1, queue_offset)
    out[n] = c'@'
    n += 1 + _copy(out + n + 1, group, group_length)
    out[n] = c'@'
    n += 1 + write_decimal(out + n + 1, handle.pop_time)
    out[n] = c'@'
    n += 1 + _copy(out + n + 1, handle.broker_name, handle.broker_name_length)
    n += _put(out + n, "@ack\x02")
    return n


cdef int write_ack_record(unsigned char *out, const AckRecordSettings *settings,
                          const unsigned char *topic, Py_ssize_t topic_length,
                          const unsigned char *group, Py_ssize_t group_length,
                          int32_t queue_id, int64_t queue_offset,
                          const ReceiptHandle *handle, int64_t now_ms,
                          AckRecord *record) noexcept nogil:
    cdef unsigned char body[ACK_TEXT_MAX_BYTES]
    cdef unsigned char text[ACK_TEXT_MAX_BYTES]
    cdef unsigned char redirected[ACK_TEXT_MAX_BYTES]
    cdef Py_ssize_t body_length, text_length, properties_length = 0
    cdef const unsigned char *properties
    cdef int64_t deliver_ms, size
    cdef int32_t sys_flag = 0
    cdef int outcome
    cdef TimerPark park
    cdef RecordFields f
    cdef RecordParts parts
    if topic_length > ACK_TOPIC_MAX_BYTES or group_length > ACK_GROUP_MAX_BYTES \
            or handle.broker_name_length > ACK_BROKER_NAME_MAX_BYTES \
            or not (_plain(topic, topic_length) and _plain(group, group_length)
                    and _plain(handle.broker_name, handle.broker_name_length)):
        return 0
    if not 0 <= handle.revive_qid < settings.revive_queue_num:
        return 0
    if (handle.invisible_time > 0 and handle.pop_time > INT64_MAX - handle.invisible_time) \
            or (handle.invisible_time < 0 and handle.pop_time < INT64_MIN - handle.invisible_time):
        return 0        # Python's sum is no Java long: the timer rule refuses it (the handler)
    deliver_ms = handle.pop_time + handle.invisible_time
    body_length = _ack_body(body, topic, topic_length, group, group_length, queue_id,
                            queue_offset, handle)
    text_length = _ack_properties(text, topic, topic_length, group, group_length, queue_id,
                                  queue_offset, handle, deliver_ms)
    outcome = timer_redirect(text, text_length, settings.revive_topic,
                             settings.revive_topic_length, handle.revive_qid, &settings.timer,
                             now_ms, redirected, &properties_length, &park)
    if outcome == TIMER_HANDLER:
        return 0
    if outcome == TIMER_PARKED:
        properties = redirected
        record.topic, record.topic_length = settings.timer_topic, settings.timer_topic_length
        record.queue_id = 0
    else:               # already due: stored on its revive queue as it is
        properties, properties_length = text, text_length
        record.topic = settings.revive_topic
        record.topic_length = settings.revive_topic_length
        record.queue_id = handle.revive_qid
    if settings.store_ip_length == 16:
        sys_flag = SYS_FLAG_BORN_V6 | SYS_FLAG_STORE_V6
    size = record_encoded_size(body_length, record.topic_length, properties_length, sys_flag)
    if size < 0 or size > ACK_RECORD_BYTES_MAX:
        return 0
    f.queue_id = record.queue_id
    f.flag = 0
    f.queue_offset = f.physical_offset = f.store_timestamp = 0
    f.sys_flag = sys_flag
    f.born_timestamp = now_ms
    f.born_port = f.store_port = settings.store_port
    f.reconsume_times = 0
    f.prepared_transaction_offset = 0
    parts.topic, parts.topic_length = record.topic, record.topic_length
    parts.body, parts.body_length = body, body_length
    parts.properties, parts.properties_length = properties, properties_length
    parts.born_address = parts.store_address = settings.store_ip
    record.record_bytes = write_record(out, &f, &parts)
    return 1


# --- Python face (tests) ----------------------------------------------------------------------

def read_ack(object frame, Py_ssize_t ext_fields_max=1024):
    """What :c:func:`read_ack_request` reads from ``frame`` (one whole frame, any buffer):
    ``{"code", "opaque", "flag", "fields": {wire name: str}, "queueId", "offset"}``, or None
    when the frame is the handler's."""
    cdef const unsigned char[:] view = frame
    cdef bytearray scratch = bytearray(max(len(view), 1))
    cdef AckRequest request
    cdef int index
    if len(view) < 8 or not read_ack_request(&view[0], len(view), ext_fields_max, scratch,
                                             len(scratch), &request):
        return None
    fields = {}
    for index in range(ACK_FIELDS_COUNT):
        if request.fields[index].present:
            fields[ACK_NAMES[index].decode()] = (<const char *>request.fields[index].data)[
                :request.fields[index].length].decode("ascii")
    return {"code": request.head.code, "opaque": request.head.opaque,
            "flag": request.head.flag, "fields": fields, "queueId": request.queue_id,
            "offset": request.queue_offset}


def parse_handle(bytes text not None):
    """:c:func:`parse_receipt_handle` of ``text`` (ASCII): ``(ck_queue_offset, pop_time,
    invisible_time, revive_qid, broker_name)``, or None when the handler decides."""
    cdef ReceiptHandle handle
    if not parse_receipt_handle(text, len(text), &handle):
        return None
    return (handle.ck_queue_offset, handle.pop_time, handle.invisible_time, handle.revive_qid,
            (<const char *>handle.broker_name)[:handle.broker_name_length].decode("ascii"))


cdef class AckRecords:
    """:c:func:`write_ack_record` over settings given once (tests; the fast path holds an
    :c:type:`AckRecordSettings` of its own). ``timer``: send_fast.TimerSettings' values
    (enabled, congestion_possible, congest_limit, max_delay_ms, precision_ms)."""

    cdef AckRecordSettings _settings
    cdef bytes _revive_topic
    cdef bytes _timer_topic
    cdef bytes _store_ip
    cdef object _wheel

    def __init__(self, bytes revive_topic not None, int32_t revive_queue_num,
                 bytes timer_topic not None, bytes store_ip not None, int32_t store_port,
                 bint enabled, bint congestion_possible, int64_t congest_limit,
                 int64_t max_delay_ms, int64_t precision_ms):
        if len(store_ip) not in (4, 16) or precision_ms <= 0 \
                or not 0 < len(revive_topic) <= ACK_REVIVE_TOPIC_MAX_BYTES \
                or not 0 < len(timer_topic) <= ACK_TOPIC_MAX_BYTES:
            raise ValueError("a store ip of 4 or 16 bytes, a positive precision, topics within "
                             "their bounds")
        self._revive_topic, self._timer_topic, self._store_ip = \
            revive_topic, timer_topic, store_ip
        self._settings.revive_topic = self._revive_topic
        self._settings.revive_topic_length = len(revive_topic)
        self._settings.revive_queue_num = revive_queue_num
        self._settings.timer_topic = self._timer_topic
        self._settings.timer_topic_length = len(timer_topic)
        self._settings.store_ip = self._store_ip
        self._settings.store_ip_length = len(store_ip)
        self._settings.store_port = store_port
        self._settings.timer.enabled = enabled
        self._settings.timer.congestion_possible = congestion_possible
        self._settings.timer.congest_limit = congest_limit
        self._settings.timer.max_delay_ms = max_delay_ms
        self._settings.timer.precision_ms = precision_ms
        self._settings.timer.wheel = NULL
        self._settings.timer.wheel_slots = 0
        self._wheel = None

    def set_wheel(self, wheel):
        """The timerwheel mapped read-only (None: forget it), read by the congestion rule."""
        set_wheel(&self._settings.timer, wheel)
        self._wheel = wheel

    def build(self, bytes topic not None, bytes group not None, int32_t queue_id,
              int64_t queue_offset, bytes handle_text not None, int64_t now_ms):
        """``(stored topic, queue id, record bytes)`` of the ack, or None (the handler's)."""
        cdef ReceiptHandle handle
        cdef AckRecord record
        cdef bytearray out
        if not parse_receipt_handle(handle_text, len(handle_text), &handle):
            return None
        out = bytearray(ACK_RECORD_BYTES_MAX)
        if not write_ack_record(out, &self._settings, topic, len(topic), group, len(group),
                                queue_id, queue_offset, &handle, now_ms, &record):
            return None
        return ((<const char *>record.topic)[:record.topic_length], record.queue_id,
                bytes(out[:record.record_bytes]))
