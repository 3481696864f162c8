# Big-endian loads/stores shared by the _fast extensions (static inline C, see hton.h).
from libc.stdint cimport int16_t, int32_t, int64_t

cdef extern from "hton.h" nogil:
    void pb_pack_int16(unsigned char *p, int16_t v)
    void pb_pack_int32(unsigned char *p, int32_t v)
    void pb_pack_int64(unsigned char *p, int64_t v)
    int16_t pb_unpack_int16(const unsigned char *p)
    int32_t pb_unpack_int32(const unsigned char *p)
    int64_t pb_unpack_int64(const unsigned char *p)
