# Decimal text of an integer written in place: the fast paths' answer headers (send/answer.pyx,
# pull_path.pyx) fill their templates' numbers with it.
from libc.stdint cimport int64_t, uint64_t

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
