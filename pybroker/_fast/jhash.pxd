# C-level contract of pybroker._fast.jhash: Java String.hashCode over UTF-16 code units.
from libc.stdint cimport int32_t, uint32_t

# Java String.hashCode of a Python str, computed over its UTF-16 code units (supplementary
# characters count as two surrogate units, as in Java). Never fails; str must be exact str.
cdef int32_t java_hash_of_str(str s) noexcept

# The same hash of UTF-8 bytes, decoded to UTF-16 units on the fly (index keys are UTF-8 inside a
# record). Malformed sequences hash as U+FFFD, like Java's replacing decoder does for simple cases.
cdef int32_t java_hash_of_utf8(const unsigned char *data, size_t length) noexcept nogil

# The hash h of a prefix continued over more UTF-8 bytes: java_hash(a + b) is
# java_hash_continue_utf8(hash of a, b) (as uint32), for keys built as topic + "#" + key.
cdef uint32_t java_hash_continue_utf8(uint32_t h, const unsigned char *data,
                                      size_t length) noexcept nogil
