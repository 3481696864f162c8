/* A map from (topic bytes, queue id) to a 64-bit value, for the appender's next queue offsets
 * and the dispatcher's consume-queue states, reachable from C without Python objects.
 *
 * Open addressing with linear probing over a power-of-two table, grown at 1/2 load; removal by
 * backward shift (no tombstones). Topics are copied into one growing arena; an entry keeps
 * the topic's offset there (an arena reallocation moves no entry). Hash: FNV-1a over the topic
 * bytes, then the queue id mixed in; 0 marks an empty slot. Single-threaded (one process, one
 * writer); every function is allocation-failure safe (returns NULL / -1, map unchanged). */
#ifndef PYBROKER_TQMAP_H
#define PYBROKER_TQMAP_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t hash;            /* 0 = empty */
    int64_t value;
    int32_t queue_id;
    uint32_t topic_length;
    size_t topic_offset;      /* in the arena */
} pb_tq_entry;

typedef struct {
    pb_tq_entry *entries;
    size_t capacity;          /* power of two */
    size_t count;
    unsigned char *arena;
    size_t arena_used;
    size_t arena_capacity;
} pb_tq_map;

static inline uint64_t pb_tq_hash(const unsigned char *topic, size_t length, int32_t queue_id) {
    uint64_t h = 14695981039346656037ULL;
    size_t i;
    for (i = 0; i < length; i++) {
        h = (h ^ topic[i]) * 1099511628211ULL;
    }
    h ^= (uint64_t)(uint32_t)queue_id + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    return h ? h : 1;
}

static inline int pb_tq_init(pb_tq_map *map, size_t capacity) {
    size_t size = 16;
    while (size < capacity) {
        size <<= 1;
    }
    memset(map, 0, sizeof(*map));
    map->entries = (pb_tq_entry *)calloc(size, sizeof(pb_tq_entry));
    if (map->entries == NULL) {
        return -1;
    }
    map->capacity = size;
    return 0;
}

static inline void pb_tq_free(pb_tq_map *map) {
    free(map->entries);
    free(map->arena);
    memset(map, 0, sizeof(*map));
}

static inline const unsigned char *pb_tq_topic(const pb_tq_map *map, const pb_tq_entry *entry) {
    return map->arena + entry->topic_offset;
}

static inline int pb_tq_matches(const pb_tq_map *map, const pb_tq_entry *entry, uint64_t hash,
                                const unsigned char *topic, size_t length, int32_t queue_id) {
    return entry->hash == hash && entry->queue_id == queue_id
        && entry->topic_length == length
        && memcmp(map->arena + entry->topic_offset, topic, length) == 0;
}

static inline pb_tq_entry *pb_tq_find_hashed(pb_tq_map *map, uint64_t hash,
                                             const unsigned char *topic, size_t length,
                                             int32_t queue_id) {
    size_t mask = map->capacity - 1;
    size_t slot = (size_t)hash & mask;
    while (map->entries[slot].hash != 0) {
        if (pb_tq_matches(map, &map->entries[slot], hash, topic, length, queue_id)) {
            return &map->entries[slot];
        }
        slot = (slot + 1) & mask;
    }
    return NULL;
}

static inline pb_tq_entry *pb_tq_find(pb_tq_map *map, const unsigned char *topic, size_t length,
                                      int32_t queue_id) {
    return pb_tq_find_hashed(map, pb_tq_hash(topic, length, queue_id), topic, length, queue_id);
}

static inline int pb_tq_grow(pb_tq_map *map) {
    size_t old_capacity = map->capacity, i, slot, mask;
    pb_tq_entry *old = map->entries;
    pb_tq_entry *entries = (pb_tq_entry *)calloc(old_capacity * 2, sizeof(pb_tq_entry));
    if (entries == NULL) {
        return -1;
    }
    mask = old_capacity * 2 - 1;
    for (i = 0; i < old_capacity; i++) {
        if (old[i].hash == 0) {
            continue;
        }
        slot = (size_t)old[i].hash & mask;
        while (entries[slot].hash != 0) {
            slot = (slot + 1) & mask;
        }
        entries[slot] = old[i];
    }
    free(old);
    map->entries = entries;
    map->capacity = old_capacity * 2;
    return 0;
}

static inline int pb_tq_arena_reserve(pb_tq_map *map, size_t length) {
    size_t want = map->arena_capacity ? map->arena_capacity : 4096;
    unsigned char *arena;
    if (map->arena_used + length <= map->arena_capacity) {
        return 0;
    }
    while (want < map->arena_used + length) {
        want <<= 1;
    }
    arena = (unsigned char *)realloc(map->arena, want);
    if (arena == NULL) {
        return -1;
    }
    map->arena = arena;
    map->arena_capacity = want;
    return 0;
}

/* The entry of (topic, queue_id), inserted with value when absent; NULL when out of memory. */
static inline pb_tq_entry *pb_tq_upsert(pb_tq_map *map, const unsigned char *topic,
                                        size_t length, int32_t queue_id, int64_t value) {
    uint64_t hash = pb_tq_hash(topic, length, queue_id);
    pb_tq_entry *entry = pb_tq_find_hashed(map, hash, topic, length, queue_id);
    size_t slot, mask;
    if (entry != NULL) {
        return entry;
    }
    if ((map->count + 1) * 2 > map->capacity && pb_tq_grow(map) != 0) {
        return NULL;
    }
    if (pb_tq_arena_reserve(map, length) != 0) {
        return NULL;
    }
    mask = map->capacity - 1;
    slot = (size_t)hash & mask;
    while (map->entries[slot].hash != 0) {
        slot = (slot + 1) & mask;
    }
    memcpy(map->arena + map->arena_used, topic, length);
    entry = &map->entries[slot];
    entry->hash = hash;
    entry->value = value;
    entry->queue_id = queue_id;
    entry->topic_length = (uint32_t)length;
    entry->topic_offset = map->arena_used;
    map->arena_used += length;
    map->count += 1;
    return entry;
}

/* Remove (topic, queue_id); 1 when it was there. Its arena bytes stay until pb_tq_free. */
static inline int pb_tq_remove(pb_tq_map *map, const unsigned char *topic, size_t length,
                               int32_t queue_id) {
    pb_tq_entry *entry = pb_tq_find(map, topic, length, queue_id);
    size_t mask = map->capacity - 1, hole, next, home;
    if (entry == NULL) {
        return 0;
    }
    hole = (size_t)(entry - map->entries);
    next = (hole + 1) & mask;
    /* Backward shift: move later entries of the probe run into the hole when their home slot
     * does not lie cyclically in (hole, next]. */
    while (map->entries[next].hash != 0) {
        home = (size_t)map->entries[next].hash & mask;
        if (((next - home) & mask) >= ((next - hole) & mask)) {
            map->entries[hole] = map->entries[next];
            hole = next;
        }
        next = (next + 1) & mask;
    }
    memset(&map->entries[hole], 0, sizeof(pb_tq_entry));
    map->count -= 1;
    return 1;
}

#endif
