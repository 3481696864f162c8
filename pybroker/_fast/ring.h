/* Atomics for pybroker's shared-memory rings and control block (GCC/Clang __atomic builtins).
 *
 * Every cursor, flag and published position is a naturally aligned 64-bit word in a MAP_SHARED
 * region; the builtins below are lock-free on x86-64 and aarch64, so they work across processes.
 * Ordering: a writer fills bytes, then publishes a cursor with a release store; a reader loads
 * the cursor with acquire and may then read the bytes. The sleep-flag handshake (store own word,
 * full fence, load the other side's word) needs sequential consistency, hence pb_fence(). */
#ifndef PYBROKER_RING_H
#define PYBROKER_RING_H

#include <stdint.h>

static inline uint64_t pb_load_acquire_u64(const uint64_t *p) {
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline uint64_t pb_load_relaxed_u64(const uint64_t *p) {
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}
static inline void pb_store_release_u64(uint64_t *p, uint64_t v) {
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
static inline void pb_store_relaxed_u64(uint64_t *p, uint64_t v) {
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
}
static inline uint64_t pb_exchange_u64(uint64_t *p, uint64_t v) {
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}
static inline uint64_t pb_fetch_or_u64(uint64_t *p, uint64_t bits) {
    return __atomic_fetch_or(p, bits, __ATOMIC_SEQ_CST);
}
static inline uint64_t pb_fetch_and_u64(uint64_t *p, uint64_t bits) {
    return __atomic_fetch_and(p, bits, __ATOMIC_SEQ_CST);
}
static inline uint64_t pb_fetch_add_u64(uint64_t *p, uint64_t v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
/* Store desired into *p if it holds expected; returns the value *p held (== expected: done). */
static inline uint64_t pb_compare_exchange_u64(uint64_t *p, uint64_t expected, uint64_t desired) {
    __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return expected;
}
static inline void pb_fence(void) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* Raise *p to v if v is larger; never lowers it. Returns the value left in *p. */
static inline uint64_t pb_max_u64(uint64_t *p, uint64_t v) {
    uint64_t seen = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (seen < v) {
        if (__atomic_compare_exchange_n(p, &seen, v, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
            return v;
        }
    }
    return seen;
}

/* Region magics: the bytes "PBRING-B" / "PBRING-C" read as a native (little-endian) u64. */
#define PB_RING_MAGIC_BYTES 0x422d474e49524250ULL
#define PB_RING_MAGIC_COMPLETION 0x432d474e49524250ULL
/* Length word of the padding marker that fills the data area's tail before a wrap. */
#define PB_RING_PADDING_MARKER 0xFFFFFFFFU

/* A record length in the byte ring is a native 32-bit word (the ring never leaves the host). */
static inline uint32_t pb_ring_load_u32(const unsigned char *p) {
    return *(const uint32_t *)(const void *)p;
}
static inline void pb_ring_store_u32(unsigned char *p, uint32_t v) {
    *(uint32_t *)(void *)p = v;
}

/* One completion: what the appender tells a remoting worker about one put request. */
typedef struct {
    int64_t request_id;
    int32_t status;
    int32_t count;
    int64_t physical_offset;
    int64_t queue_offset;
} pb_completion_slot;

_Static_assert(sizeof(pb_completion_slot) == 32, "completion slot is 32 bytes");
_Static_assert(sizeof(uint64_t) == 8 && __atomic_always_lock_free(8, 0),
               "64-bit atomics must be lock-free to work across processes");

#endif
