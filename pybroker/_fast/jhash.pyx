# pybroker._fast.jhash: Java String.hashCode (UTF-16 code units) for tags codes and index keys.
"""Java's ``String.hashCode``: ``h = 31*h + unit`` over UTF-16 code units, wrapping at 32 bits.

Used for ConsumeQueue tags codes (protocol.md §4.4) and IndexFile key hashes (§4.5). A Python str
holds code points, so characters above U+FFFF are split into their two surrogate units first.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.unicode cimport (PyUnicode_KIND, PyUnicode_DATA, PyUnicode_READ,
                              PyUnicode_GET_LENGTH, PyUnicode_1BYTE_KIND)
from libc.stdint cimport int32_t, uint32_t

cdef enum:
    JAVA_HASH_MULTIPLIER = 31
    REPLACEMENT_CHARACTER = 0xFFFD
    SUPPLEMENTARY_BASE = 0x10000
    HIGH_SURROGATE_BASE = 0xD800
    LOW_SURROGATE_BASE = 0xDC00
    INT32_MIN = -2147483648


cdef inline uint32_t _add_code_point(uint32_t h, uint32_t code_point) noexcept nogil:
    # A supplementary code point is two UTF-16 units in Java: high then low surrogate.
    if code_point >= SUPPLEMENTARY_BASE:
        code_point -= SUPPLEMENTARY_BASE
        h = h * JAVA_HASH_MULTIPLIER + (HIGH_SURROGATE_BASE + (code_point >> 10))
        return h * JAVA_HASH_MULTIPLIER + (LOW_SURROGATE_BASE + (code_point & 0x3FF))
    return h * JAVA_HASH_MULTIPLIER + code_point


cdef int32_t java_hash_of_str(str s) noexcept:
    cdef Py_ssize_t i
    cdef Py_ssize_t length = PyUnicode_GET_LENGTH(s)
    cdef int kind = PyUnicode_KIND(s)
    cdef void *data = PyUnicode_DATA(s)
    cdef const unsigned char *latin1
    cdef uint32_t h = 0
    if kind == PyUnicode_1BYTE_KIND:
        # The common case (ASCII keys and tags): one unit per byte, no branches in the loop.
        latin1 = <const unsigned char *>data
        for i in range(length):
            h = h * JAVA_HASH_MULTIPLIER + latin1[i]
    else:
        for i in range(length):
            h = _add_code_point(h, <uint32_t>PyUnicode_READ(kind, data, i))
    return <int32_t>h


cdef inline bint _continuation_ok(unsigned char lead, Py_ssize_t index,
                                  unsigned char byte) noexcept nogil:
    # Second-byte ranges exclude overlongs, surrogates and code points above U+10FFFF.
    if index == 1:
        if lead == 0xE0:
            return 0xA0 <= byte <= 0xBF
        if lead == 0xED:
            return 0x80 <= byte <= 0x9F
        if lead == 0xF0:
            return 0x90 <= byte <= 0xBF
        if lead == 0xF4:
            return 0x80 <= byte <= 0x8F
    return 0x80 <= byte <= 0xBF


cdef int32_t java_hash_of_utf8(const unsigned char *data, size_t length) noexcept nogil:
    return <int32_t>java_hash_continue_utf8(0, data, length)


cdef uint32_t java_hash_continue_utf8(uint32_t h, const unsigned char *data,
                                      size_t length) noexcept nogil:
    # Malformed input becomes one U+FFFD per maximal invalid subpart (what Java's and Python's
    # replacing UTF-8 decoders produce), so the hash equals java_hash(bytes.decode("replace")).
    cdef size_t position = 0
    cdef size_t needed, taken
    cdef unsigned char lead
    cdef uint32_t code_point
    while position < length:
        lead = data[position]
        if lead < 0x80:
            h = h * JAVA_HASH_MULTIPLIER + lead
            position += 1
            continue
        if 0xC2 <= lead <= 0xDF:
            needed, code_point = 1, lead & 0x1F
        elif 0xE0 <= lead <= 0xEF:
            needed, code_point = 2, lead & 0x0F
        elif 0xF0 <= lead <= 0xF4:
            needed, code_point = 3, lead & 0x07
        else:
            h = h * JAVA_HASH_MULTIPLIER + REPLACEMENT_CHARACTER
            position += 1
            continue
        taken = 0
        while taken < needed and position + 1 + taken < length \
                and _continuation_ok(lead, taken + 1, data[position + 1 + taken]):
            code_point = (code_point << 6) | (data[position + 1 + taken] & 0x3F)
            taken += 1
        if taken < needed:
            code_point = REPLACEMENT_CHARACTER
        h = _add_code_point(h, code_point)
        position += 1 + taken
    return h


cdef inline str _as_str(object s):
    # Accept str subclasses too (Cython's `str` argument type would insist on exact str).
    if not isinstance(s, str):
        raise TypeError(f"expected str, got {type(s).__name__}")
    return <str>s


def java_hash(s):
    """Java ``String.hashCode`` of ``s`` as a signed 32-bit int ("hello" -> 99162322)."""
    return java_hash_of_str(_as_str(s))


def java_hash_utf8(buf, Py_ssize_t start=0, Py_ssize_t end=-1):
    """Java hash of the UTF-8 text in ``buf[start:end]`` (byte positions; ``end=-1`` = len).

    Equals ``java_hash(bytes(buf[start:end]).decode("utf-8", "replace"))`` without building a str.
    """
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if end == -1:
            end = view.len
        if start < 0 or end < start or end > view.len:
            raise ValueError(f"range [{start}, {end}) outside a buffer of {view.len} bytes")
        return java_hash_of_utf8(<const unsigned char *>view.buf + start, <size_t>(end - start))
    finally:
        PyBuffer_Release(&view)


def tags_code(tags):
    """ConsumeQueue tags code: ``java_hash(tags)`` (sign-extended to long); 0 for None or ""."""
    if tags is None:
        return 0
    return java_hash_of_str(_as_str(tags))


def index_key_hash(key):
    """IndexFile key hash: ``abs(java_hash(key))``, or 0 when that is still negative (MIN_VALUE)."""
    cdef int32_t h = java_hash_of_str(_as_str(key))
    if h == INT32_MIN:
        return 0
    return -h if h < 0 else h
