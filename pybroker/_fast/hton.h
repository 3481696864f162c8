/* Big-endian loads and stores for pybroker._fast (RocketMQ is big-endian on the wire and on disk).
 * Unaligned-safe: every access goes through memcpy, which compilers turn into one load/store. */
#ifndef PYBROKER_HTON_H
#define PYBROKER_HTON_H

#include <stdint.h>
#include <string.h>

static inline void pb_pack_int16(unsigned char *p, int16_t v) {
    uint16_t u = __builtin_bswap16((uint16_t)v); memcpy(p, &u, 2);
}
static inline void pb_pack_int32(unsigned char *p, int32_t v) {
    uint32_t u = __builtin_bswap32((uint32_t)v); memcpy(p, &u, 4);
}
static inline void pb_pack_int64(unsigned char *p, int64_t v) {
    uint64_t u = __builtin_bswap64((uint64_t)v); memcpy(p, &u, 8);
}
static inline int16_t pb_unpack_int16(const unsigned char *p) {
    uint16_t u; memcpy(&u, p, 2); return (int16_t)__builtin_bswap16(u);
}
static inline int32_t pb_unpack_int32(const unsigned char *p) {
    uint32_t u; memcpy(&u, p, 4); return (int32_t)__builtin_bswap32(u);
}
static inline int64_t pb_unpack_int64(const unsigned char *p) {
    uint64_t u; memcpy(&u, p, 8); return (int64_t)__builtin_bswap64(u);
}

#endif
