# Decimal text of an integer written in place (the fast paths' answer headers, send/answer.pyx
# and pull_path.pyx, fill their templates' numbers with it) and read as Java reads a property
# or a receipt handle's field (send/timer.pyx, pop/ack.pyx).
from libc.stdint cimport INT32_MAX, INT64_MAX, int64_t, uint64_t

cdef enum:
    # Decimal digits of an int64 with its sign.
    DECIMAL_BYTES_MAX = 20


# Write value as decimal text ("-" then digits, no leading zeros) to out (room for
# DECIMAL_BYTES_MAX bytes); returns the bytes written.
cdef inline Py_ssize_t write_decimal(unsigned char *out, int64_t value) noexcept nogil:
    cdef unsigned char digits[DECIMAL_BYTES_MAX]
    cdef Py_ssize_t n = 0, at = 0
    cdef uint64_t magnitude = <uint64_t>value
    if value < 0:
        magnitude = (~magnitude) + 1
        out[0] = 45            # '-'
        at = 1
    while True:
        digits[n] = <unsigned char>(48 + magnitude % 10)
        n += 1
        magnitude //= 10
        if magnitude == 0:
            break
    while n > 0:
        n -= 1
        out[at] = digits[n]
        at += 1
    return at


# Long.parseLong (Integer.parseInt when int32) as protocol/pop.py parse_java_long reads it: an
# optional sign, then one or more ASCII digits, the value in a Java long's (int's) range;
# 0 with value[0] set, or -1.
cdef inline int read_java_long(const unsigned char *text, Py_ssize_t length, bint int32,
                               int64_t *value) noexcept nogil:
    cdef Py_ssize_t at = 0
    cdef bint negative = False
    cdef uint64_t magnitude = 0, limit
    if length > 0 and (text[0] == 43 or text[0] == 45):      # '+', '-'
        negative = text[0] == 45
        at = 1
    if at == length:
        return -1
    limit = (<uint64_t>INT32_MAX if int32 else <uint64_t>INT64_MAX) + (1 if negative else 0)
    while at < length:
        if not 48 <= text[at] <= 57:                         # '0'..'9'
            return -1
        if magnitude > (limit - (text[at] - 48)) // 10:
            return -1
        magnitude = magnitude * 10 + (text[at] - 48)
        at += 1
    value[0] = <int64_t>((~magnitude) + 1) if negative else <int64_t>magnitude
    return 0
