# pybroker._fast.send_read: read a send request in place from its frame, without Python objects.
"""The send fast path's reader (docs/architecture/send-fast-path.md).

A SEND_MESSAGE (10, long header names), SEND_MESSAGE_V2 or SEND_BATCH_MESSAGE (310/320, names
"a".."n") frame is read where it lies in the connection's receive buffer: the custom header from
the ROCKETMQ binary header (frame.pyx has its table) or from the JSON header text, the body as a
span. The reader accepts only what the Python path (protocol/command.py decode,
protocol/headers.py parse, broker/send.py parse_properties) would accept with the very same
values, and only ASCII text; everything else - another code, a response frame, a missing or
malformed field, a duplicate key, JSON it does not handle (floats, literals, nesting), non-ASCII
bytes - makes it answer 0, and the frame goes to the Python path, which gives the answer or the
error it always gave. So the fast path never answers differently, it only answers sooner.

JSON subset read here (anything else: 0)::

    header  = ws "{" [member ("," member)*] "}" ws
    member  = ws string ws ":" ws value ws
    value   = string | integer (-?(0|[1-9][0-9]*), no fraction or exponent)
              | "null" (remark only) | object (extFields only, string values only)

Strings: no raw byte below 0x20 (JSON forbids them), no byte above 0x7F, escapes \\" \\\\ \\/
\\b \\f \\n \\r \\t \\uXXXX (XXXX below 0x80 when the value is used; no surrogates).
"""
from libc.stdint cimport INT64_MAX, INT64_MIN, int16_t, int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

from pybroker._fast.frame cimport (BINARY_CODE_AT, BINARY_EXT_KEY_LENGTH_MAX,
                                   BINARY_EXT_LENGTH_BYTES, BINARY_FLAG_AT,
                                   BINARY_HEADER_FIXED_BYTES, BINARY_OPAQUE_AT, BINARY_REMARK_AT,
                                   BINARY_REMARK_LENGTH_AT, FRAME_HEADER_LENGTH_MASK,
                                   FRAME_LENGTH_FIELD_BYTES, FRAME_PREFIX_BYTES,
                                   FRAME_SERIALIZE_TYPE_SHIFT, SERIALIZE_TYPE_JSON,
                                   SERIALIZE_TYPE_ROCKETMQ)
from pybroker._fast.hton cimport pb_unpack_int16, pb_unpack_int32
from pybroker._fast.record cimport record_encoded_size

from pybroker.protocol import headers as _headers
from pybroker.protocol.codes import RequestCode as _RequestCode
from pybroker.protocol.constants import PROPERTIES_MAX_BYTES as _PROPERTIES_MAX_BYTES

cdef enum:
    # Keys compared for duplicates by a pairwise scan; more ext entries go to the Python path.
    EXT_KEYS_SCANNED_MAX = 64
    # Longest decimal text the header parser accepts ([+-]?[0-9]+ of at most 24 characters).
    DECIMAL_CHARS_MAX = 24

cdef int64_t INT32_LOW = -2147483648
cdef int64_t INT32_HIGH = 2147483647
cdef int64_t INT64_LOW = INT64_MIN
cdef int64_t INT64_HIGH = INT64_MAX

cdef extern from *:
    """
    /* Wire names of the send header, long and one-letter, in SendField order. */
    static const char *pb_send_long_names[14] = {
        "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId",
        "sysFlag", "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode",
        "maxReconsumeTimes", "batch", "bname"};
    static const Py_ssize_t pb_send_long_lengths[14] = {13, 5, 12, 21, 7, 7, 13, 4, 10, 14, 8,
                                                        17, 5, 5};
    static const char *pb_send_short_names[14] = {
        "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n"};
    /* Top-level JSON header keys the reader looks at; key i is bit 1 << i. */
    static const char *pb_json_top_names[7] = {
        "code", "extFields", "opaque", "flag", "version", "language", "remark"};
    """
    const char **LONG_NAMES "pb_send_long_names"
    const Py_ssize_t *LONG_LENGTHS "pb_send_long_lengths"
    const char **SHORT_NAMES "pb_send_short_names"
    const char **TOP_NAMES "pb_json_top_names"

cdef enum:
    TOP_NAMES_COUNT = 7

# The tables above restate the Python schema and codes; they must agree.
assert [f.wire_name for f in _headers.SEND_MESSAGE_REQUEST.fields] == [
    LONG_NAMES[i].decode() for i in range(SEND_FIELDS_COUNT)]
assert [f.short_name for f in _headers.SEND_MESSAGE_REQUEST.fields] == [
    SHORT_NAMES[i].decode() for i in range(SEND_FIELDS_COUNT)] == [
    chr(ord("a") + i) for i in range(SEND_FIELDS_COUNT)]
assert [len(LONG_NAMES[i]) for i in range(SEND_FIELDS_COUNT)] == [
    LONG_LENGTHS[i] for i in range(SEND_FIELDS_COUNT)]
assert (CODE_SEND_MESSAGE, CODE_SEND_MESSAGE_V2, CODE_SEND_BATCH_MESSAGE) == (
    _RequestCode.SEND_MESSAGE, _RequestCode.SEND_MESSAGE_V2, _RequestCode.SEND_BATCH_MESSAGE)
assert PROPERTIES_MAX_BYTES == _PROPERTIES_MAX_BYTES


# --- header values ---------------------------------------------------------------------------

cdef int _field_of(const unsigned char *key, Py_ssize_t length, bint short_names) noexcept nogil:
    """SendField of a wire key, or -1 for a key the send header does not have."""
    cdef int index
    if short_names:
        # "a".."n" in SendField order (checked at import).
        if length == 1 and key[0] >= c'a' and key[0] < c'a' + SEND_FIELDS_COUNT:
            return key[0] - c'a'
        return -1
    for index in range(SEND_FIELDS_COUNT):
        if LONG_LENGTHS[index] == length and \
                memcmp(LONG_NAMES[index], key, <size_t>length) == 0:
            return index
    return -1


cdef int _decimal(const TextSpan *span, int64_t low, int64_t high,
                  int64_t *value) noexcept nogil:
    """headers.py's int/long conversion of a present, non-empty value: [+-]?[0-9]+, at most 24
    characters, within [low, high]. 0 with *value set, or -1."""
    cdef const unsigned char *p = span.data
    cdef Py_ssize_t n = span.length
    cdef Py_ssize_t at = 0
    cdef bint negative = False
    cdef uint64_t magnitude = 0
    cdef uint64_t limit
    if n <= 0 or n > DECIMAL_CHARS_MAX:
        return -1
    if p[0] == c'+' or p[0] == c'-':
        negative = p[0] == c'-'
        at = 1
        if n == 1:
            return -1
    limit = <uint64_t>(-(low + 1)) + 1 if negative else <uint64_t>high
    while at < n:
        if p[at] < c'0' or p[at] > c'9':
            return -1
        if magnitude > (limit - (p[at] - c'0')) // 10:
            return -1
        magnitude = magnitude * 10 + (p[at] - c'0')
        at += 1
    if negative:
        value[0] = -<int64_t>(magnitude - 1) - 1 if magnitude else 0
    else:
        value[0] = <int64_t>magnitude
    return 0


cdef inline bint _lower_equals(const TextSpan *span, const char *word,
                               Py_ssize_t length) noexcept nogil:
    cdef Py_ssize_t i
    if span.length != length:
        return False
    for i in range(length):
        if (span.data[i] | 0x20) != <unsigned char>word[i]:
            return False
    return True


cdef int _boolean(const TextSpan *span, bint *value) noexcept nogil:
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
    cdef TextSpan *f = r.fields
    # Required fields (strings may be empty; numbers may not, headers.py counts "" as absent).
    if not (f[FIELD_PRODUCER_GROUP].present and f[FIELD_TOPIC].present
            and f[FIELD_DEFAULT_TOPIC].present):
        return -1
    if _decimal(&f[FIELD_DEFAULT_TOPIC_QUEUE_NUMS], INT32_LOW, INT32_HIGH, &number) < 0:
        return -1
    if _decimal(&f[FIELD_QUEUE_ID], INT32_LOW, INT32_HIGH, &number) < 0:
        return -1
    r.queue_id = <int32_t>number
    if _decimal(&f[FIELD_SYS_FLAG], INT32_LOW, INT32_HIGH, &number) < 0:
        return -1
    r.sys_flag = <int32_t>number
    if _decimal(&f[FIELD_BORN_TIMESTAMP], INT64_LOW, INT64_HIGH, &r.born_timestamp) < 0:
        return -1
    if _decimal(&f[FIELD_FLAG], INT32_LOW, INT32_HIGH, &number) < 0:
        return -1
    r.message_flag = <int32_t>number
    # Optional ones: absent or "" means absent.
    r.reconsume_times = 0
    if f[FIELD_RECONSUME_TIMES].present and f[FIELD_RECONSUME_TIMES].length:
        if _decimal(&f[FIELD_RECONSUME_TIMES], INT32_LOW, INT32_HIGH, &number) < 0:
            return -1
        r.reconsume_times = <int32_t>number
    if f[FIELD_MAX_RECONSUME_TIMES].present and f[FIELD_MAX_RECONSUME_TIMES].length:
        if _decimal(&f[FIELD_MAX_RECONSUME_TIMES], INT32_LOW, INT32_HIGH, &number) < 0:
            return -1
    cdef bint unit_mode
    if _boolean(&f[FIELD_UNIT_MODE], &unit_mode) < 0 or _boolean(&f[FIELD_BATCH], &r.batch) < 0:
        return -1
    if f[FIELD_PROPERTIES].present and f[FIELD_PROPERTIES].length == 0:
        f[FIELD_PROPERTIES].present = False     # "" is an absent optional string
    return 0


# --- ROCKETMQ binary header --------------------------------------------------------------------

cdef inline bint _ascii(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if p[i] >= 0x80:
            return False
    return True


cdef int _binary_header(const unsigned char *h, Py_ssize_t header_length,
                        Py_ssize_t ext_fields_max, SendRequest *r) noexcept nogil:
    cdef int32_t remark_length, ext_length, value_length
    cdef Py_ssize_t at, key_length, entries = 0, i
    cdef const unsigned char *keys[EXT_KEYS_SCANNED_MAX]
    cdef Py_ssize_t key_lengths[EXT_KEYS_SCANNED_MAX]
    cdef int field
    cdef bint short_names
    if header_length < BINARY_HEADER_FIXED_BYTES:
        return -1
    r.code = pb_unpack_int16(h + BINARY_CODE_AT)
    r.opaque = pb_unpack_int32(h + BINARY_OPAQUE_AT)
    r.rpc_flag = pb_unpack_int32(h + BINARY_FLAG_AT)
    short_names = r.code != CODE_SEND_MESSAGE
    remark_length = pb_unpack_int32(h + BINARY_REMARK_LENGTH_AT)
    if remark_length < 0 or remark_length > header_length - BINARY_HEADER_FIXED_BYTES:
        return -1
    at = BINARY_REMARK_AT
    if not _ascii(h + at, remark_length):
        return -1
    at += remark_length
    ext_length = pb_unpack_int32(h + at)
    at += BINARY_EXT_LENGTH_BYTES
    if ext_length != header_length - at:
        return -1
    while at < header_length:
        if entries >= EXT_KEYS_SCANNED_MAX or entries >= ext_fields_max:
            return -1
        if header_length - at < 2:
            return -1
        key_length = pb_unpack_int16(h + at)
        at += 2
        if key_length <= 0 or key_length > header_length - at - 4:
            return -1
        if not _ascii(h + at, key_length):
            return -1
        for i in range(entries):   # any duplicate key is a ProtocolError on the Python path
            if key_lengths[i] == key_length and memcmp(keys[i], h + at, <size_t>key_length) == 0:
                return -1
        keys[entries] = h + at
        key_lengths[entries] = key_length
        entries += 1
        field = _field_of(h + at, key_length, short_names)
        at += key_length
        value_length = pb_unpack_int32(h + at)
        at += 4
        if value_length < 0 or value_length > header_length - at:
            return -1
        if not _ascii(h + at, value_length):
            return -1
        if field >= 0 and value_length > 0:    # a zero-length value is no field (Java: null)
            r.fields[field].data = h + at
            r.fields[field].length = value_length
            r.fields[field].present = True
        at += value_length
    return 0


# --- JSON header -------------------------------------------------------------------------------

cdef inline Py_ssize_t _skip_ws(const unsigned char *p, Py_ssize_t at,
                                Py_ssize_t end) noexcept nogil:
    while at < end and (p[at] == c' ' or p[at] == b'\t' or p[at] == b'\n' or p[at] == b'\r'):
        at += 1
    return at


cdef inline int _hex_digit(unsigned char c) noexcept nogil:
    if c'0' <= c <= c'9':
        return c - c'0'
    c |= 0x20
    if c'a' <= c <= c'f':
        return c - c'a' + 10
    return -1


cdef inline bint _simple_escape(unsigned char c) noexcept nogil:
    return (c == c'"' or c == c'\\' or c == c'/' or c == c'b' or c == c'f' or c == c'n'
            or c == c'r' or c == c't')


cdef Py_ssize_t _json_string(const unsigned char *p, Py_ssize_t at, Py_ssize_t end,
                             Py_ssize_t *start, Py_ssize_t *length,
                             bint *escaped) noexcept nogil:
    """A string at p[at] == '"': its raw content span; returns the position after the closing
    quote, or -1 for anything outside the subset (raw control byte, non-ASCII, bad escape)."""
    cdef int digit, i
    cdef uint32_t code
    at += 1
    start[0] = at
    escaped[0] = False
    while at < end:
        if p[at] == c'"':
            length[0] = at - start[0]
            return at + 1
        if p[at] < 0x20 or p[at] >= 0x80:
            return -1
        if p[at] == c'\\':
            escaped[0] = True
            at += 1
            if at >= end:
                return -1
            if p[at] == c'u':
                if end - at < 5:
                    return -1
                code = 0
                for i in range(1, 5):
                    digit = _hex_digit(p[at + i])
                    if digit < 0:
                        return -1
                    code = code * 16 + <uint32_t>digit
                if 0xD800 <= code <= 0xDFFF:
                    return -1
                at += 4
            elif not _simple_escape(p[at]):
                return -1
        at += 1
    return -1


cdef Py_ssize_t _json_unescape(const unsigned char *p, Py_ssize_t length,
                               unsigned char *out) noexcept nogil:
    """Undo the escapes of a string _json_string accepted; -1 when a \\u escape is not ASCII.
    Writes at most length bytes."""
    cdef Py_ssize_t at = 0, n = 0
    cdef uint32_t code
    cdef unsigned char c
    while at < length:
        c = p[at]
        if c != c'\\':
            out[n] = c
        else:
            at += 1
            c = p[at]
            if c == c'u':
                code = ((<uint32_t>_hex_digit(p[at + 1]) << 12)
                        | (<uint32_t>_hex_digit(p[at + 2]) << 8)
                        | (<uint32_t>_hex_digit(p[at + 3]) << 4) | <uint32_t>_hex_digit(p[at + 4]))
                if code >= 0x80:
                    return -1
                out[n] = <unsigned char>code
                at += 4
            elif c == c'b':
                out[n] = 8
            elif c == c'f':
                out[n] = 12
            elif c == c'n':
                out[n] = 10
            elif c == c'r':
                out[n] = 13
            elif c == c't':
                out[n] = 9
            else:
                out[n] = c          # " \ /
        n += 1
        at += 1
    return n


cdef Py_ssize_t _json_integer(const unsigned char *p, Py_ssize_t at, Py_ssize_t end,
                              int64_t *value) noexcept nogil:
    """A JSON integer within int32 (what json_header_values accepts); position after, or -1."""
    cdef bint negative = False
    cdef int64_t magnitude = 0
    cdef Py_ssize_t digits = 0
    if at < end and p[at] == c'-':
        negative = True
        at += 1
    if at < end and p[at] == c'0':
        at += 1
        digits = 1
    else:
        while at < end and c'0' <= p[at] <= c'9':
            magnitude = magnitude * 10 + (p[at] - c'0')
            digits += 1
            at += 1
            if digits > 10:
                return -1
    if digits == 0 or (at < end and (p[at] == c'.' or p[at] == c'e' or p[at] == c'E')):
        return -1
    value[0] = -magnitude if negative else magnitude
    if value[0] < INT32_LOW or value[0] > INT32_HIGH:
        return -1
    return at


cdef Py_ssize_t _json_scalar(const unsigned char *p, Py_ssize_t at, Py_ssize_t end) noexcept nogil:
    """Skip a string, an integer or a literal (a key the header does not use)."""
    cdef Py_ssize_t start, length
    cdef bint escaped
    cdef int64_t number
    if at >= end:
        return -1
    if p[at] == c'"':
        return _json_string(p, at, end, &start, &length, &escaped)
    if end - at >= 4 and (memcmp(p + at, b"null", 4) == 0 or memcmp(p + at, b"true", 4) == 0):
        return at + 4
    if end - at >= 5 and memcmp(p + at, b"false", 5) == 0:
        return at + 5
    return _json_integer(p, at, end, &number)


cdef int _json_value_span(const unsigned char *p, Py_ssize_t start, Py_ssize_t length,
                          bint escaped, unsigned char *scratch, Py_ssize_t *used,
                          Py_ssize_t scratch_bytes, TextSpan *span) noexcept nogil:
    """Point span at a string's content, unescaped into scratch when needed; 0 or -1."""
    cdef Py_ssize_t n
    span.present = True
    if not escaped:
        span.data = p + start
        span.length = length
        return 0
    if scratch_bytes - used[0] < length:
        return -1
    n = _json_unescape(p + start, length, scratch + used[0])
    if n < 0:
        return -1
    span.data = scratch + used[0]
    span.length = n
    used[0] += n
    return 0


cdef Py_ssize_t _json_ext_fields(const unsigned char *p, Py_ssize_t at, Py_ssize_t end,
                                 Py_ssize_t ext_fields_max, unsigned char *scratch,
                                 Py_ssize_t scratch_bytes, SendRequest *r) noexcept nogil:
    """The extFields object at p[at] == '{' (string values only); position after, or -1."""
    cdef Py_ssize_t key_start, key_length, value_start, value_length, entries = 0, used = 0
    cdef bint key_escaped, value_escaped
    cdef int field
    cdef bint short_names = r.code != CODE_SEND_MESSAGE
    at = _skip_ws(p, at + 1, end)
    if at < end and p[at] == c'}':
        return at + 1
    while True:
        entries += 1
        if entries > ext_fields_max or at >= end or p[at] != c'"':
            return -1
        at = _json_string(p, at, end, &key_start, &key_length, &key_escaped)
        if at < 0 or key_escaped:
            return -1
        at = _skip_ws(p, at, end)
        if at >= end or p[at] != c':':
            return -1
        at = _skip_ws(p, at + 1, end)
        if at >= end or p[at] != c'"':
            return -1       # numbers, booleans and null: json_header_values converts them
        at = _json_string(p, at, end, &value_start, &value_length, &value_escaped)
        if at < 0:
            return -1
        field = _field_of(p + key_start, key_length, short_names)
        if field >= 0:
            if r.fields[field].present:
                return -1           # orjson keeps the last duplicate; let Python do that
            if _json_value_span(p, value_start, value_length, value_escaped, scratch, &used,
                                scratch_bytes, &r.fields[field]) < 0:
                return -1
        at = _skip_ws(p, at, end)
        if at < end and p[at] == c',':
            at = _skip_ws(p, at + 1, end)
            continue
        if at < end and p[at] == c'}':
            return at + 1
        return -1


cdef int _json_header(const unsigned char *p, Py_ssize_t end, Py_ssize_t ext_fields_max,
                      unsigned char *scratch, Py_ssize_t scratch_bytes,
                      SendRequest *r) noexcept nogil:
    cdef Py_ssize_t at = _skip_ws(p, 0, end)
    cdef Py_ssize_t key_start, key_length, ext_at = -1, value_start, value_length
    cdef bint escaped
    cdef int64_t number
    cdef int seen = 0, bit
    if at >= end or p[at] != c'{':
        return -1
    at = _skip_ws(p, at + 1, end)
    if at < end and p[at] == c'}':
        return -1               # no code: not a send
    while True:
        if at >= end or p[at] != c'"':
            return -1
        at = _json_string(p, at, end, &key_start, &key_length, &escaped)
        if at < 0 or escaped:
            return -1
        at = _skip_ws(p, at, end)
        if at >= end or p[at] != c':':
            return -1
        at = _skip_ws(p, at + 1, end)
        bit = _top_level_bit(p + key_start, key_length)
        if bit & seen:
            return -1           # a repeated known key: orjson's last-wins is Python's business
        seen |= bit
        if bit == 1 or bit == 4 or bit == 8 or bit == 16:      # code, opaque, flag, version
            at = _json_integer(p, at, end, &number)
            if bit == 1:
                r.code = <int32_t>number
            elif bit == 4:
                r.opaque = <int32_t>number
            elif bit == 8:
                r.rpc_flag = <int32_t>number
        elif bit == 2:          # extFields: read after the code is known
            if at >= end or p[at] != c'{':
                return -1
            ext_at = at
            at = _skip_object(p, at, end)
        elif bit == 32:         # language: a name or an ordinal
            if at < end and p[at] == c'"':
                at = _json_string(p, at, end, &value_start, &value_length, &escaped)
            else:
                at = _json_integer(p, at, end, &number)
        elif bit == 64:         # remark: a string or null
            if at < end and p[at] == c'"':
                at = _json_string(p, at, end, &value_start, &value_length, &escaped)
            elif end - at >= 4 and memcmp(p + at, b"null", 4) == 0:
                at += 4
            else:
                return -1
        else:
            at = _json_scalar(p, at, end)
        if at < 0:
            return -1
        at = _skip_ws(p, at, end)
        if at < end and p[at] == c',':
            at = _skip_ws(p, at + 1, end)
            continue
        if at < end and p[at] == c'}':
            break
        return -1
    if _skip_ws(p, at + 1, end) != end or not (seen & 1) or ext_at < 0:
        return -1
    if _json_ext_fields(p, ext_at, end, ext_fields_max, scratch, scratch_bytes, r) < 0:
        return -1
    return 0


cdef int _top_level_bit(const unsigned char *key, Py_ssize_t length) noexcept nogil:
    """A bit per top-level key the reader looks at; 0 for the others."""
    cdef int index
    cdef Py_ssize_t n
    for index in range(TOP_NAMES_COUNT):
        n = 0
        while TOP_NAMES[index][n] != 0:
            n += 1
        if n == length and memcmp(TOP_NAMES[index], key, <size_t>length) == 0:
            return 1 << index
    return 0


cdef Py_ssize_t _skip_object(const unsigned char *p, Py_ssize_t at,
                             Py_ssize_t end) noexcept nogil:
    """Skip the flat object at p[at] == '{' (strings and scalars only); position after or -1."""
    cdef Py_ssize_t start, length
    cdef bint escaped
    at = _skip_ws(p, at + 1, end)
    if at < end and p[at] == c'}':
        return at + 1
    while True:
        if at >= end or p[at] != c'"':
            return -1
        at = _json_string(p, at, end, &start, &length, &escaped)
        if at < 0:
            return -1
        at = _skip_ws(p, at, end)
        if at >= end or p[at] != c':':
            return -1
        at = _json_scalar(p, _skip_ws(p, at + 1, end), end)
        if at < 0:
            return -1
        at = _skip_ws(p, at, end)
        if at < end and p[at] == c',':
            at = _skip_ws(p, at + 1, end)
            continue
        if at < end and p[at] == c'}':
            return at + 1
        return -1


# --- the whole request ------------------------------------------------------------------------

cdef int read_send_request(const unsigned char *data, Py_ssize_t frame_bytes,
                           Py_ssize_t ext_fields_max, unsigned char *scratch,
                           Py_ssize_t scratch_bytes, SendRequest *request) noexcept nogil:
    cdef uint32_t header_word = <uint32_t>pb_unpack_int32(data + FRAME_LENGTH_FIELD_BYTES)
    cdef Py_ssize_t header_length = header_word & FRAME_HEADER_LENGTH_MASK
    cdef uint32_t serialize_type = header_word >> FRAME_SERIALIZE_TYPE_SHIFT
    cdef const unsigned char *header = data + FRAME_PREFIX_BYTES
    cdef int index, status
    for index in range(SEND_FIELDS_COUNT):
        request.fields[index].present = False
        request.fields[index].length = 0
    request.code = request.opaque = request.rpc_flag = 0
    if header_length == 0:
        return 0
    if serialize_type == SERIALIZE_TYPE_ROCKETMQ:
        status = _binary_header(header, header_length, ext_fields_max, request)
    elif serialize_type == SERIALIZE_TYPE_JSON:
        if header_length > scratch_bytes:
            return 0
        status = _json_header(header, header_length, ext_fields_max, scratch, scratch_bytes,
                              request)
    else:
        return 0
    if status < 0 or request.rpc_flag & RPC_FLAG_RESPONSE:
        return 0
    if request.code != CODE_SEND_MESSAGE and request.code != CODE_SEND_MESSAGE_V2 \
            and request.code != CODE_SEND_BATCH_MESSAGE:
        return 0
    if _header_values(request) < 0:
        return 0
    request.body = header + header_length
    request.body_length = frame_bytes - FRAME_PREFIX_BYTES - header_length
    return 1


# --- properties --------------------------------------------------------------------------------

cdef inline bint _name_is(const unsigned char *name, Py_ssize_t length,
                          const char *word) noexcept nogil:
    cdef Py_ssize_t n = 0
    while word[n] != 0:
        n += 1
    return n == length and memcmp(name, word, <size_t>n) == 0


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
    if _name_is(name, name_length, "WAIT"):
        scan.wait_store = _lower_word(value, value_length, "true")
        return 0                # never stored
    if _name_is(name, name_length, "TAGS") and _check_tags(value, value_length) < 0:
        return -1
    if _name_is(name, name_length, "DELAY"):
        scan.flags |= PROPERTY_HAS_DELAY
    elif _name_is(name, name_length, "TRAN_MSG"):
        scan.flags |= PROPERTY_HAS_TRANSACTION
    elif _name_is(name, name_length, "CLUSTER"):
        scan.flags |= PROPERTY_HAS_CLUSTER
    elif name_length >= 14 and name[0] == c'T' and name[5] == c'_' and (
            _name_is(name, name_length, "TIMER_DELIVER_MS")
            or _name_is(name, name_length, "TIMER_DELAY_SEC")
            or _name_is(name, name_length, "TIMER_DELAY_MS")):
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
    cdef TextSpan span
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
    return {"code": request.code, "opaque": request.opaque, "rpc_flag": request.rpc_flag,
            "fields": fields, "queue_id": request.queue_id, "sys_flag": request.sys_flag,
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
