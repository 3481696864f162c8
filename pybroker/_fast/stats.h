/* Instruments in shared memory (pybroker/stats): counters, gauges and log-scale histograms.
 *
 * Every word has ONE writer process, so an increment is a relaxed load plus a release store
 * (no locked instruction, no system call); readers in other processes load with acquire.
 * Histogram bucket b counts values whose bit length is b (bucket 0: value 0; bucket 63: every
 * value >= 2^62), i.e. bucket b covers [2^(b-1), 2^b). */
#ifndef PYBROKER_STATS_H
#define PYBROKER_STATS_H

#include <stdint.h>

#define PB_STATS_HIST_BUCKETS 64
/* Words after the buckets of one histogram: count, sum, max. */
#define PB_STATS_HIST_COUNT_WORD 64
#define PB_STATS_HIST_SUM_WORD 65
#define PB_STATS_HIST_MAX_WORD 66

static inline void pb_stats_add(uint64_t *word, uint64_t delta) {
    __atomic_store_n(word, __atomic_load_n(word, __ATOMIC_RELAXED) + delta, __ATOMIC_RELEASE);
}
static inline void pb_stats_set(uint64_t *word, uint64_t value) {
    __atomic_store_n(word, value, __ATOMIC_RELEASE);
}
static inline void pb_stats_raise(uint64_t *word, uint64_t value) {
    if (value > __atomic_load_n(word, __ATOMIC_RELAXED)) {
        __atomic_store_n(word, value, __ATOMIC_RELEASE);
    }
}
static inline uint64_t pb_stats_load(const uint64_t *word) {
    return __atomic_load_n(word, __ATOMIC_ACQUIRE);
}
static inline unsigned pb_stats_bucket(uint64_t value) {
    unsigned bits = value ? 64u - (unsigned)__builtin_clzll(value) : 0u;
    return bits < PB_STATS_HIST_BUCKETS ? bits : PB_STATS_HIST_BUCKETS - 1;
}
/* Record one value (single writer of this histogram). */
static inline void pb_stats_record(uint64_t *histogram, uint64_t value) {
    pb_stats_add(histogram + pb_stats_bucket(value), 1);
    pb_stats_add(histogram + PB_STATS_HIST_COUNT_WORD, 1);
    pb_stats_add(histogram + PB_STATS_HIST_SUM_WORD, value);
    pb_stats_raise(histogram + PB_STATS_HIST_MAX_WORD, value);
}
/* Record `times` equal values at once (a batch of same-sized records, for example). */
static inline void pb_stats_record_n(uint64_t *histogram, uint64_t value, uint64_t times) {
    pb_stats_add(histogram + pb_stats_bucket(value), times);
    pb_stats_add(histogram + PB_STATS_HIST_COUNT_WORD, times);
    pb_stats_add(histogram + PB_STATS_HIST_SUM_WORD, value * times);
    pb_stats_raise(histogram + PB_STATS_HIST_MAX_WORD, value);
}

_Static_assert(PB_STATS_HIST_MAX_WORD < 72, "a histogram is 72 words");
#endif
