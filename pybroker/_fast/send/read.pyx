# pybroker._fast.send.read: read a send request in place from its frame, without Python objects.
"""The send fast path's reader (docs/architecture/send-fast-path.md).

A SEND_MESSAGE (10, long header names), SEND_MESSAGE_V2 or SEND_BATCH_MESSAGE (310/320, names
"a".."n") frame is read where it lies in the connection's receive buffer: code, opaque, flag and
the custom-header fields by :func:`pybroker._fast.request_read.read_request` (ROCKETMQ binary or
JSON header, the rules in its docstring) with the send field table below, the body as a span;
then the send header's own checks (required fields, numbers, booleans; broker/send.py's
properties rules in :c:func:`scan_properties`). The reader accepts only what the Python path
(protocol/command.py decode, protocol/headers.py parse, broker/send.py parse_properties) would
accept with the very same values, and only ASCII text; everything else - another code, a
response frame, a missing or malformed field, a duplicate key, JSON the header reader does not
handle, non-ASCII bytes - makes it answer 0, and the frame goes to the Python path, which gives
the answer or the error it always gave. So the fast path never answers differently, it only
answers sooner.
"""
from libc.stdint cimport INT64_MAX, INT64_MIN, int16_t, int32_t, int64_t
from libc.string cimport memcmp, memcpy

from pybroker._fast.frame cimport FRAME_PREFIX_BYTES
from pybroker._fast.hton cimport pb_unpack_int16, pb_unpack_int32
from pybroker._fast.record cimport record_encoded_size
from pybroker._fast.request_read cimport (REQUEST_FIELDS_MAX, FieldNames, FieldSpan,
                                          read_decimal, read_request)

from pybroker.protocol import headers as _headers
from pybroker.protocol.codes import RequestCode as _RequestCode
from pybroker.protocol.constants import PROPERTIES_MAX_BYTES as _PROPERTIES_MAX_BYTES

cdef int64_t INT32_LOW = -2147483648
cdef int64_t INT32_HIGH = 2147483647
cdef int64_t INT64_LOW = INT64_MIN
cdef int64_t INT64_HIGH = INT64_MAX

cdef extern from *:
    """
    /* Wire long names of the send header in SendField order (the one-letter names of
       SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE are "a".."n" in the same order). */
    static const char *pb_send_long_names[14] = {
        "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId",
        "sysFlag", "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode",
        "maxReconsumeTimes", "batch", "bname"};
    static const Py_ssize_t pb_send_long_lengths[14] = {13, 5, 12, 21, 7, 7, 13, 4, 10, 14, 8,
                                                        17, 5, 5};
    """
    const char **LONG_NAMES "pb_send_long_names"
    const Py_ssize_t *LONG_LENGTHS "pb_send_long_lengths"

# The tables above restate the Python schema and codes; they must agree.
assert [f.wire_name for f in _headers.SEND_MESSAGE_REQUEST.fields] == [
    LONG_NAMES[i].decode() for i in range(SEND_FIELDS_COUNT)]
assert [f.short_name for f in _headers.SEND_MESSAGE_REQUEST.fields] == [
    chr(ord("a") + i) for i in range(SEND_FIELDS_COUNT)]
assert [len(LONG_NAMES[i]) for i in range(SEND_FIELDS_COUNT)] == [
    LONG_LENGTHS[i] for i in range(SEND_FIELDS_COUNT)]
assert (CODE_SEND_MESSAGE, CODE_SEND_MESSAGE_V2, CODE_SEND_BATCH_MESSAGE) == (
    _RequestCode.SEND_MESSAGE, _RequestCode.SEND_MESSAGE_V2, _RequestCode.SEND_BATCH_MESSAGE)
assert PROPERTIES_MAX_BYTES == _PROPERTIES_MAX_BYTES
assert <int>SEND_FIELDS_COUNT <= <int>REQUEST_FIELDS_MAX

# The send header's field table for request_read: long names under SEND_MESSAGE, one-letter
# names under the other codes.
cdef FieldNames _SEND_NAMES
_SEND_NAMES.names = LONG_NAMES
_SEND_NAMES.lengths = LONG_LENGTHS
_SEND_NAMES.count = SEND_FIELDS_COUNT
_SEND_NAMES.short_names = True
_SEND_NAMES.long_names_code = CODE_SEND_MESSAGE


# --- header values ---------------------------------------------------------------------------

cdef inline bint _lower_equals(const FieldSpan *span, const char *word,
                               Py_ssize_t length) noexcept nogil:
    cdef Py_ssize_t i
    if span.length != length:
        return False
    for i in range(length):
        if (span.data[i] | 0x20) != <unsigned char>word[i]:
            return False
    return True


cdef int _boolean(const FieldSpan *span, bint *value) noexcept nogil:
    """headers.py's bool: "true"/"false" in any case; absent or "" is false. 0 or -1."""
    value[0] = False
    if not span.present or span.length == 0:
        return 0
    if _lower_equals(span, "true", 4):
        value[0] = True
        return 0
    return 0 if _lower_equals(span, "false", 5) else -1


cdef int _header_values(SendRequest *r) noexcept nogil:
    """Required fields present, numbers and booleans well-formed; 0 or -1 (Python decides)."""
    cdef int64_t number
    cdef int index
    cdef FieldSpan *f = r.fields
    # Required fields (strings may be empty; numbers may not, headers.py counts "" as absent).
    if not (f[FIELD_PRODUCER_GROUP].present and f[FIELD_TOPIC].present
            and f[FIELD_DEFAULT_TOPIC].present):
        return -1
    if read_decimal(&f[FIELD_DEFAULT_TOPIC_QUEUE_NUMS], INT32_LOW, INT32_HIGH, &number) < 0:
        return -1
    if read_decimal(&f[FIELD_QUEUE_ID], INT32_LOW, INT32_HIGH, &number) < 0:
        return -1
    r.queue_id = <int32_t>number
    if read_decimal(&f[FIELD_SYS_FLAG], INT32_LOW, INT32_HIGH, &number) < 0:
        return -1
    r.sys_flag = <int32_t>number
    if read_decimal(&f[FIELD_BORN_TIMESTAMP], INT64_LOW, INT64_HIGH, &r.born_timestamp) < 0:
        return -1
    if read_decimal(&f[FIELD_FLAG], INT32_LOW, INT32_HIGH, &number) < 0:
        return -1
    r.message_flag = <int32_t>number
    # Optional ones: absent or "" means absent.
    r.reconsume_times = 0
    if f[FIELD_RECONSUME_TIMES].present and f[FIELD_RECONSUME_TIMES].length:
        if read_decimal(&f[FIELD_RECONSUME_TIMES], INT32_LOW, INT32_HIGH, &number) < 0:
            return -1
        r.reconsume_times = <int32_t>number
    if f[FIELD_MAX_RECONSUME_TIMES].present and f[FIELD_MAX_RECONSUME_TIMES].length:
        if read_decimal(&f[FIELD_MAX_RECONSUME_TIMES], INT32_LOW, INT32_HIGH, &number) < 0:
            return -1
    cdef bint unit_mode
    if _boolean(&f[FIELD_UNIT_MODE], &unit_mode) < 0 or _boolean(&f[FIELD_BATCH], &r.batch) < 0:
        return -1
    if f[FIELD_PROPERTIES].present and f[FIELD_PROPERTIES].length == 0:
        f[FIELD_PROPERTIES].present = False     # "" is an absent optional string
    return 0


# --- the whole request ------------------------------------------------------------------------

cdef int read_send_request(const unsigned char *data, Py_ssize_t frame_bytes,
                           Py_ssize_t ext_fields_max, unsigned char *scratch,
                           Py_ssize_t scratch_bytes, SendRequest *request) noexcept nogil:
    if not read_request(data, frame_bytes, ext_fields_max, &_SEND_NAMES, scratch,
                        scratch_bytes, &request.head, request.fields, &request.body,
                        &request.body_length):
        return 0
    if request.head.code != CODE_SEND_MESSAGE and request.head.code != CODE_SEND_MESSAGE_V2 \
            and request.head.code != CODE_SEND_BATCH_MESSAGE:
        return 0
    if _header_values(request) < 0:
        return 0
    return 1


# --- properties --------------------------------------------------------------------------------


cdef int _check_tags(const unsigned char *value, Py_ssize_t length) noexcept nogil:
    """send.py refuses a TAGS value that is blank or contains '|' (controls are refused before)."""
    cdef Py_ssize_t i
    cdef bint blank = True
    for i in range(length):
        if value[i] == c'|':
            return -1
        if value[i] != c' ':
            blank = False
    return -1 if blank else 0


cdef int scan_properties(const unsigned char *text, Py_ssize_t length, unsigned char *out,
                         PropertyScan *scan) noexcept nogil:
    cdef Py_ssize_t at = 0, segment_end, separator, i, n = 0, j
    cdef Py_ssize_t segments = 1, pairs = 0
    cdef const unsigned char *names[PROPERTIES_COUNT_MAX + 1]
    cdef Py_ssize_t name_lengths[PROPERTIES_COUNT_MAX + 1]
    cdef unsigned char c
    scan.wait_store = True
    scan.flags = 0
    scan.stored_length = 0
    if length > PROPERTIES_MAX_BYTES:
        return -1
    for i in range(length):
        c = text[i]
        if c == 2:
            segments += 1
        elif c != 1 and (c < 0x20 or c >= 0x80):
            return -1           # control characters (send.py) or non-ASCII (Python decides)
    if segments > PROPERTIES_COUNT_MAX + 1:
        return -1
    while at < length:
        segment_end = at
        while segment_end < length and text[segment_end] != 2:
            segment_end += 1
        if segment_end > at:
            separator = at
            while separator < segment_end and text[separator] != 1:
                separator += 1
            if separator == at or separator == segment_end:
                return -1       # no name, or no separator
            for i in range(separator + 1, segment_end):
                if text[i] == 1:
                    return -1   # a second separator inside the value
            for j in range(pairs):
                if name_lengths[j] == separator - at and \
                        memcmp(names[j], text + at, <size_t>(separator - at)) == 0:
                    return -1   # repeated name: send.py decides with its empty-value rule
            names[pairs] = text + at
            name_lengths[pairs] = separator - at
            pairs += 1
            if _pair(text + at, separator - at, text + separator + 1,
                     segment_end - separator - 1, out, &n, scan) < 0:
                return -1
        at = segment_end + 1
    scan.stored_length = n
    return 0


cdef int _pair(const unsigned char *name, Py_ssize_t name_length, const unsigned char *value,
               Py_ssize_t value_length, unsigned char *out, Py_ssize_t *n,
               PropertyScan *scan) noexcept nogil:
    """One name/value pair: note the names the fast path cares about, copy the stored pair."""
    if value_length == 0:
        return 0                # send.py drops pairs without a value
    if name_is(name, name_length, "WAIT"):
        scan.wait_store = _lower_word(value, value_length, "true")
        return 0                # never stored
    if name_is(name, name_length, "TAGS") and _check_tags(value, value_length) < 0:
        return -1
    if name_is(name, name_length, "DELAY"):
        scan.flags |= PROPERTY_HAS_DELAY
    elif name_is(name, name_length, "TRAN_MSG"):
        scan.flags |= PROPERTY_HAS_TRANSACTION
    elif name_is(name, name_length, "CLUSTER"):
        scan.flags |= PROPERTY_HAS_CLUSTER
    elif name_length >= 14 and name[0] == c'T' and name[5] == c'_' and (
            name_is(name, name_length, "TIMER_DELIVER_MS")
            or name_is(name, name_length, "TIMER_DELAY_SEC")
            or name_is(name, name_length, "TIMER_DELAY_MS")):
        # A 5.x timer message: broker/timer_message.py decides (a batch stores them as is).
        scan.flags |= PROPERTY_HAS_TIMER
    if out != NULL:
        memcpy(out + n[0], name, <size_t>name_length)
        n[0] += name_length
        out[n[0]] = 1
        memcpy(out + n[0] + 1, value, <size_t>value_length)
        n[0] += 1 + value_length
        out[n[0]] = 2
        n[0] += 1
    return 0


cdef bint _lower_word(const unsigned char *value, Py_ssize_t length,
                      const char *word) noexcept nogil:
    cdef FieldSpan span
    span.data = value
    span.length = length
    cdef Py_ssize_t n = 0
    while word[n] != 0:
        n += 1
    return _lower_equals(&span, word, n)


# --- batch body -------------------------------------------------------------------------------

cdef int batch_entry(const unsigned char *body, Py_ssize_t at, Py_ssize_t body_bytes,
                     Py_ssize_t *entry_bytes, Py_ssize_t *body_length,
                     Py_ssize_t *properties_length) noexcept nogil:
    cdef Py_ssize_t remaining = body_bytes - at
    cdef int32_t total, length
    cdef int16_t properties
    if remaining < BATCH_FIXED_BYTES:
        return -1
    total = pb_unpack_int32(body + at)
    if total < BATCH_FIXED_BYTES or total > remaining:
        return -1
    length = pb_unpack_int32(body + at + BATCH_BODY_LENGTH_AT)
    if length < 0 or length > total - BATCH_FIXED_BYTES:
        return -1
    properties = pb_unpack_int16(body + at + BATCH_BODY_LENGTH_AT + 4 + length)
    if properties < 0 or BATCH_FIXED_BYTES + length + properties != total:
        return -1
    entry_bytes[0], body_length[0], properties_length[0] = total, length, properties
    return 0


cdef int64_t batch_records_bytes(const unsigned char *body, Py_ssize_t body_bytes,
                                 Py_ssize_t batch_length, Py_ssize_t topic_length,
                                 int32_t sys_flag, Py_ssize_t max_message_size,
                                 Py_ssize_t *count) noexcept nogil:
    cdef Py_ssize_t at = 0, entry_bytes, body_length, inner_length, combined
    cdef int64_t size, total = 0
    cdef PropertyScan inner
    count[0] = 0
    while at < body_bytes:
        if batch_entry(body, at, body_bytes, &entry_bytes, &body_length, &inner_length) < 0:
            return -1
        if scan_properties(body + at + entry_bytes - inner_length, inner_length, NULL,
                           &inner) < 0 \
                or inner.flags & (PROPERTY_HAS_DELAY | PROPERTY_HAS_TRANSACTION):
            return -1
        combined = combined_properties_length(body + at + entry_bytes - inner_length,
                                              inner_length, batch_length)
        if body_length > max_message_size or combined > PROPERTIES_MAX_BYTES:
            return -1
        size = record_encoded_size(body_length, topic_length, combined, sys_flag)
        if size < 0:
            return -1
        total += size
        count[0] += 1
        at += entry_bytes
    return total


cdef Py_ssize_t combined_properties_length(const unsigned char *inner, Py_ssize_t inner_length,
                                           Py_ssize_t batch_length) noexcept nogil:
    if inner_length and inner[inner_length - 1] != 2:
        return inner_length + 1 + batch_length
    return inner_length + batch_length


cdef const unsigned char *combine_properties(const unsigned char *inner,
                                             Py_ssize_t inner_length,
                                             const unsigned char *batch,
                                             Py_ssize_t batch_length,
                                             unsigned char *out) noexcept nogil:
    cdef Py_ssize_t at = inner_length
    memcpy(out, inner, <size_t>inner_length)
    if inner_length and inner[inner_length - 1] != 2:
        out[at] = 2
        at += 1
    memcpy(out + at, batch, <size_t>batch_length)
    return out


# --- Python face (tests and micro benchmarks) -----------------------------------------------

def read_send(object frame, Py_ssize_t ext_fields_max=1024):
    """The send request the fast path reads from ``frame`` (one whole frame, any buffer), as a
    dict (``fields`` by wire long name, numbers, ``body``), or None when the frame is left to
    the Python path."""
    cdef const unsigned char[:] view = frame
    cdef SendRequest request
    cdef bytearray scratch = bytearray(max(len(view), 1))
    cdef unsigned char *scratch_data = scratch
    cdef int index
    if len(view) < FRAME_PREFIX_BYTES:
        return None
    if not read_send_request(&view[0], len(view), ext_fields_max, scratch_data, len(scratch),
                             &request):
        return None
    fields = {}
    for index in range(SEND_FIELDS_COUNT):
        if request.fields[index].present:
            fields[LONG_NAMES[index].decode()] = (<const char *>request.fields[index].data)[
                :request.fields[index].length].decode("ascii")
    return {"code": request.head.code, "opaque": request.head.opaque,
            "rpc_flag": request.head.flag, "fields": fields, "queue_id": request.queue_id,
            "sys_flag": request.sys_flag,
            "born_timestamp": request.born_timestamp, "flag": request.message_flag,
            "reconsume_times": request.reconsume_times, "batch": bool(request.batch),
            "body": bytes((<const char *>request.body)[:request.body_length])}


def scan(object text):
    """``(wait_store, flags, stored)`` of a properties string (bytes) as the fast path reads
    it, or None when the Python path must decide."""
    cdef bytes data = bytes(text) + b"\0"     # never empty, so data[0] exists
    cdef PropertyScan result
    cdef bytearray out = bytearray(len(data))
    cdef unsigned char *out_data = out
    if scan_properties(<const unsigned char *>data, len(data) - 1, out_data, &result) < 0:
        return None
    return bool(result.wait_store), result.flags, bytes(out[:result.stored_length])
