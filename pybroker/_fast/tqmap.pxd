# C map (topic bytes, queue id) -> int64 (tqmap.h): the appender's next queue offsets and the
# dispatcher's consume-queue states, without Python objects.
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

cdef extern from "tqmap.h" nogil:
    ctypedef struct pb_tq_entry:
        uint64_t hash
        int64_t value
        int32_t queue_id
        uint32_t topic_length
        size_t topic_offset
    ctypedef struct pb_tq_map:
        pb_tq_entry *entries
        size_t capacity
        size_t count
    int pb_tq_init(pb_tq_map *map, size_t capacity)
    void pb_tq_free(pb_tq_map *map)
    const unsigned char *pb_tq_topic(const pb_tq_map *map, const pb_tq_entry *entry)
    pb_tq_entry *pb_tq_find(pb_tq_map *map, const unsigned char *topic, size_t length,
                            int32_t queue_id)
    pb_tq_entry *pb_tq_upsert(pb_tq_map *map, const unsigned char *topic, size_t length,
                              int32_t queue_id, int64_t value)
    int pb_tq_remove(pb_tq_map *map, const unsigned char *topic, size_t length,
                     int32_t queue_id)
