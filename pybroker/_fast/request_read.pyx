# pybroker._fast.request_read: a request's custom header read in place from its frame.
"""A request's header fields read where the frame lies in the receive buffer (no objects).

Both fast paths read their requests this way (``pull_path.pyx`` a PULL_MESSAGE,
``send/read.pyx`` the send headers): code, opaque and flag, and the custom-header fields a
:c:type:`FieldNames` table names, from the ROCKETMQ binary header (frame.pyx has its table) or
from the JSON header text. The reader accepts only what the Python path (protocol/command.py
decode, protocol/headers.py parse) would accept with the very same values, and only ASCII
text; anything else - a response frame, a malformed field, a duplicate key, JSON it does not
handle (floats, literals, nesting), non-ASCII bytes - makes it answer 0, and the frame goes to
the Python path, which gives the answer or the error it always gave
(``tests/unit/_fast/test_request_read.py`` checks what it takes against the decoder).

JSON subset read here (anything else: 0)::

    header  = ws "{" [member ("," member)*] "}" ws
    member  = ws string ws ":" ws value ws
    value   = string | integer (-?(0|[1-9][0-9]*), no fraction or exponent)
              | "null" (remark only) | object (extFields only, string values only)

Strings: no raw byte below 0x20 (JSON forbids them), no byte above 0x7F, escapes \\" \\\\ \\/
\\b \\f \\n \\r \\t \\uXXXX (XXXX below 0x80 when the value is used; no surrogates).

The extFields object's names depend on the code (long names under ``long_names_code``): it is
read where it stands when the code came before it, so the header is walked once (every client
writes the code first: fastjson's alphabetical keys, the Go client's struct order); otherwise
it is stepped over and read once the rest is known.
"""
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcmp

from pybroker._fast.frame cimport (BINARY_CODE_AT, BINARY_EXT_LENGTH_BYTES, BINARY_FLAG_AT,
                                   BINARY_HEADER_FIXED_BYTES, BINARY_OPAQUE_AT, BINARY_REMARK_AT,
                                   BINARY_REMARK_LENGTH_AT, FRAME_HEADER_LENGTH_MASK,
                                   FRAME_LENGTH_FIELD_BYTES, FRAME_PREFIX_BYTES,
                                   FRAME_SERIALIZE_TYPE_SHIFT, SERIALIZE_TYPE_JSON,
                                   SERIALIZE_TYPE_ROCKETMQ)
from pybroker._fast.hton cimport pb_unpack_int16, pb_unpack_int32

cdef enum:
    # Keys compared for duplicates by a pairwise scan; more ext entries go to the Python path.
    EXT_KEYS_SCANNED_MAX = 64
    # Longest decimal text the header parser accepts ([+-]?[0-9]+ of at most 24 characters).
    DECIMAL_CHARS_MAX = 24
    TOP_NAMES_COUNT = 7

cdef int64_t INT32_LOW = -2147483648
cdef int64_t INT32_HIGH = 2147483647

cdef extern from *:
    """
    /* Top-level JSON header keys the reader looks at; key i is bit 1 << i. */
    static const char *pb_request_top_names[7] = {
        "code", "extFields", "opaque", "flag", "version", "language", "remark"};
    """
    const char **TOP_NAMES "pb_request_top_names"


cdef int _remember_key(const unsigned char **keys, Py_ssize_t *key_lengths, Py_ssize_t *count,
                       const unsigned char *key, Py_ssize_t length) noexcept nogil:
    """Add ``key`` to the keys seen (at most EXT_KEYS_SCANNED_MAX, compared pairwise); -1 when
    it was seen before or there is no room: any duplicate key is a ProtocolError on the Python
    path, and more keys than that go there too."""
    cdef Py_ssize_t i
    if count[0] >= EXT_KEYS_SCANNED_MAX:
        return -1
    for i in range(count[0]):
        if key_lengths[i] == length and memcmp(keys[i], key, <size_t>length) == 0:
            return -1
    keys[count[0]] = key
    key_lengths[count[0]] = length
    count[0] += 1
    return 0


cdef int _field_of(const FieldNames *names, const unsigned char *key, Py_ssize_t length,
                   bint short_names) noexcept nogil:
    """Index of a wire key in names, or -1 for a key the header does not have."""
    cdef int index
    if short_names:
        if length == 1 and key[0] >= c'a' and key[0] < c'a' + names.count:
            return key[0] - c'a'
        return -1
    for index in range(names.count):
        if names.lengths[index] == length and memcmp(names.names[index], key, <size_t>length) == 0:
            return index
    return -1


# --- header values ---------------------------------------------------------------------------

cdef int read_decimal(const FieldSpan *span, int64_t low, int64_t high,
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


# --- ROCKETMQ binary header --------------------------------------------------------------------

cdef inline bint _ascii(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if p[i] >= 0x80:
            return False
    return True


cdef int _binary_header(const unsigned char *h, Py_ssize_t header_length,
                        Py_ssize_t ext_fields_max, const FieldNames *names,
                        RequestHead *r, FieldSpan *fields) noexcept nogil:
    cdef int32_t remark_length, ext_length, value_length
    cdef Py_ssize_t at, key_length, entries = 0
    cdef const unsigned char *keys[EXT_KEYS_SCANNED_MAX]
    cdef Py_ssize_t key_lengths[EXT_KEYS_SCANNED_MAX]
    cdef int field
    cdef bint short_names
    if header_length < BINARY_HEADER_FIXED_BYTES:
        return -1
    r.code = pb_unpack_int16(h + BINARY_CODE_AT)
    r.opaque = pb_unpack_int32(h + BINARY_OPAQUE_AT)
    r.flag = pb_unpack_int32(h + BINARY_FLAG_AT)
    short_names = names.short_names and r.code != names.long_names_code
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
        if _remember_key(keys, key_lengths, &entries, h + at, key_length) < 0:
            return -1
        field = _field_of(names, h + at, key_length, short_names)
        at += key_length
        value_length = pb_unpack_int32(h + at)
        at += 4
        if value_length < 0 or value_length > header_length - at:
            return -1
        if not _ascii(h + at, value_length):
            return -1
        if field >= 0 and value_length > 0:    # a zero-length value is no field (Java: null)
            fields[field].data = h + at
            fields[field].length = value_length
            fields[field].present = True
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
                          Py_ssize_t scratch_bytes, FieldSpan *span) noexcept nogil:
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
                                 Py_ssize_t scratch_bytes, const FieldNames *names,
                                 const RequestHead *r, FieldSpan *fields) noexcept nogil:
    """The extFields object at p[at] == '{' (string values only); position after, or -1."""
    cdef Py_ssize_t key_start, key_length, value_start, value_length, entries = 0, used = 0
    cdef bint key_escaped, value_escaped
    cdef int field
    cdef bint short_names = names.short_names and r.code != names.long_names_code
    # Keys the table does not name (its own are refused twice by ``present``).
    cdef Py_ssize_t others = 0
    cdef const unsigned char *other_keys[EXT_KEYS_SCANNED_MAX]
    cdef Py_ssize_t other_lengths[EXT_KEYS_SCANNED_MAX]
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
        field = _field_of(names, p + key_start, key_length, short_names)
        if field >= 0:
            if fields[field].present:
                return -1           # the Python decoder refuses a duplicate key
            if _json_value_span(p, value_start, value_length, value_escaped, scratch, &used,
                                scratch_bytes, &fields[field]) < 0:
                return -1
        elif _remember_key(other_keys, other_lengths, &others, p + key_start, key_length) < 0:
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
                      const FieldNames *names, RequestHead *r,
                      FieldSpan *fields) noexcept nogil:
    cdef Py_ssize_t at = _skip_ws(p, 0, end)
    cdef Py_ssize_t key_start, key_length, ext_at = -1
    cdef bint escaped
    cdef int64_t number
    cdef int seen = 0, bit
    if at >= end or p[at] != c'{':
        return -1
    at = _skip_ws(p, at + 1, end)
    if at < end and p[at] == c'}':
        return -1               # no code: not a request
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
                r.flag = <int32_t>number
        elif bit == 2:          # extFields: its names depend on the code
            if at >= end or p[at] != c'{':
                return -1
            if seen & 1:        # the code came first (as clients write it): read it now
                at = _json_ext_fields(p, at, end, ext_fields_max, scratch, scratch_bytes,
                                      names, r, fields)
            else:               # read once the code is known, at the end
                ext_at = at
                at = _skip_object(p, at, end)
        else:
            at = _json_skipped_value(p, at, end, bit)
        if at < 0:
            return -1
        at = _skip_ws(p, at, end)
        if at < end and p[at] == c',':
            at = _skip_ws(p, at + 1, end)
            continue
        if at < end and p[at] == c'}':
            break
        return -1
    if _skip_ws(p, at + 1, end) != end or not (seen & 1) or not (seen & 2):
        return -1
    if ext_at >= 0 and _json_ext_fields(p, ext_at, end, ext_fields_max, scratch,
                                        scratch_bytes, names, r, fields) < 0:
        return -1
    return 0


cdef Py_ssize_t _json_skipped_value(const unsigned char *p, Py_ssize_t at, Py_ssize_t end,
                                    int bit) noexcept nogil:
    """Step over the value of a top-level key whose value is not kept: language (a name or
    an ordinal), remark (a string or null), any other key's (a scalar); position after or -1."""
    cdef Py_ssize_t start, length
    cdef bint escaped
    cdef int64_t number
    if bit == 32:
        if at < end and p[at] == c'"':
            return _json_string(p, at, end, &start, &length, &escaped)
        return _json_integer(p, at, end, &number)
    if bit == 64:
        if at < end and p[at] == c'"':
            return _json_string(p, at, end, &start, &length, &escaped)
        if end - at >= 4 and memcmp(p + at, b"null", 4) == 0:
            return at + 4
        return -1
    return _json_scalar(p, at, end)


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

cdef Py_ssize_t _read_header(const unsigned char *data, Py_ssize_t ext_fields_max,
                             const FieldNames *names, unsigned char *scratch,
                             Py_ssize_t scratch_bytes, RequestHead *head,
                             FieldSpan *fields) noexcept nogil:
    """The header's length when it was read (a request's or a response's), else -1."""
    cdef uint32_t header_word = <uint32_t>pb_unpack_int32(data + FRAME_LENGTH_FIELD_BYTES)
    cdef Py_ssize_t header_length = header_word & FRAME_HEADER_LENGTH_MASK
    cdef uint32_t serialize_type = header_word >> FRAME_SERIALIZE_TYPE_SHIFT
    cdef const unsigned char *header = data + FRAME_PREFIX_BYTES
    cdef int index, status
    for index in range(names.count):
        fields[index].present = False
        fields[index].length = 0
    head.code = head.opaque = head.flag = 0
    if header_length == 0:
        return -1
    if serialize_type == SERIALIZE_TYPE_ROCKETMQ:
        status = _binary_header(header, header_length, ext_fields_max, names, head, fields)
    elif serialize_type == SERIALIZE_TYPE_JSON:
        if header_length > scratch_bytes:
            return -1
        status = _json_header(header, header_length, ext_fields_max, scratch, scratch_bytes,
                              names, head, fields)
    else:
        return -1
    return -1 if status < 0 else header_length


cdef int read_request(const unsigned char *data, Py_ssize_t frame_bytes,
                      Py_ssize_t ext_fields_max, const FieldNames *names,
                      unsigned char *scratch, Py_ssize_t scratch_bytes, RequestHead *head,
                      FieldSpan *fields, const unsigned char **body,
                      Py_ssize_t *body_length) noexcept nogil:
    cdef Py_ssize_t header_length = _read_header(data, ext_fields_max, names, scratch,
                                                 scratch_bytes, head, fields)
    if header_length < 0 or head.flag & REQUEST_FLAG_RESPONSE:
        return 0
    body[0] = data + FRAME_PREFIX_BYTES + header_length
    body_length[0] = frame_bytes - FRAME_PREFIX_BYTES - header_length
    return 1


cdef int read_response(const unsigned char *data, Py_ssize_t ext_fields_max,
                       const FieldNames *names, unsigned char *scratch,
                       Py_ssize_t scratch_bytes, RequestHead *head,
                       FieldSpan *fields) noexcept nogil:
    if _read_header(data, ext_fields_max, names, scratch, scratch_bytes, head, fields) < 0:
        return 0
    return 1 if head.flag & REQUEST_FLAG_RESPONSE else 0


# --- Python face (tests) ---------------------------------------------------------------------

def read_fields(object frame, list names, bint short_names=False, int32_t long_names_code=-1,
                Py_ssize_t ext_fields_max=1024, bint response=False):
    """What :c:func:`read_request` reads from ``frame`` (one whole frame, any buffer) with the
    field table ``names`` (wire names), as ``{"code", "opaque", "flag", "fields": {name: str},
    "body"}``, or None when the frame is left to the Python path. ``response``: what
    :c:func:`read_response` reads (``body`` is then empty)."""
    cdef const unsigned char[:] view = frame
    cdef bytearray scratch = bytearray(max(len(view), 1))
    cdef unsigned char *scratch_data = scratch
    cdef list encoded = [name.encode("ascii") for name in names]
    cdef const char *name_pointers[REQUEST_FIELDS_MAX]
    cdef Py_ssize_t name_lengths[REQUEST_FIELDS_MAX]
    cdef FieldSpan spans[REQUEST_FIELDS_MAX]
    cdef FieldNames table
    cdef RequestHead head
    cdef const unsigned char *body
    cdef Py_ssize_t body_length
    cdef int index
    if len(encoded) > REQUEST_FIELDS_MAX:
        raise ValueError(f"at most {REQUEST_FIELDS_MAX} fields")
    if len(view) < FRAME_PREFIX_BYTES:
        return None
    for index in range(len(encoded)):
        name_pointers[index] = <const char *>(<bytes>encoded[index])
        name_lengths[index] = len(encoded[index])
    table.names, table.lengths, table.count = name_pointers, name_lengths, len(encoded)
    table.short_names, table.long_names_code = short_names, long_names_code
    if response:
        body, body_length = NULL, 0
        if not read_response(&view[0], ext_fields_max, &table, scratch_data, len(scratch),
                             &head, spans):
            return None
    elif not read_request(&view[0], len(view), ext_fields_max, &table, scratch_data,
                          len(scratch), &head, spans, &body, &body_length):
        return None
    fields = {}
    for index in range(table.count):
        if spans[index].present:
            fields[names[index]] = (<const char *>spans[index].data)[
                :spans[index].length].decode("ascii")
    return {"code": head.code, "opaque": head.opaque, "flag": head.flag, "fields": fields,
            "body": bytes((<const char *>body)[:body_length]) if body_length else b""}
