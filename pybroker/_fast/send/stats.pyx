# pybroker._fast.send.stats: fast sends counted as broker/send.py and proc/remoting.py count.
"""Statistics of the send fast path (docs/statistics.md, "Who counts what").

A send the fast path answers must move the same instruments as one the handler answers, in the
same remoting worker's section: REQUESTS_TOTAL and SEND_STARTED when it is read; when it is
answered, the put latency (histogram, Java's 13 buckets, the maximum), TOPIC_PUT /
BROKER_PUT_NUMS / the message-size histogram when stored, the RPC latency and SEND_FINISHED;
under SYNC_FLUSH, how long an acknowledgement was held (SYNC_FLUSH_WAIT_US).
tests/unit/broker/test_send_fast.py compares both paths' figures.
"""
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.stdint cimport int32_t, int64_t, uint64_t

from pybroker._fast.stats cimport (BROKER_PUT_NUMS, KEY_BYTES, KEY_MESSAGE_SIZE,
                                    KEY_MESSAGES, KEY_REQUESTS, KEY_RPC, KEY_TOPIC_PUT,
                                    KEYS_DROPPED, MESSAGE_SIZE_BYTES,
                                    PUT_DISTRIBUTE_0, PUT_ENTIRE_TIME_MAX_MS, PUT_LATENCY_US,
                                    REQUESTS_TOTAL, RPC_LATENCY_US, SEND_FINISHED,
                                    SEND_OLDEST_MS, SEND_STARTED, SYNC_FLUSH_WAIT_US,
                                    StatsWriter, pb_stats_add, pb_stats_raise, pb_stats_record,
                                    pb_stats_record_n, pb_stats_set)

cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    cdef struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clock_id, timespec *tp)
    int CLOCK_MONOTONIC
    int CLOCK_REALTIME

cdef extern from *:
    """
    /* Java's putMessageDistributeTime limits (ms), stats/service.py's table. */
    static const long long pb_put_distribute_limits_ms[12] = {
        0, 10, 50, 100, 200, 500, 1000, 2000, 3000, 4000, 5000, 10000};
    """
    const long long *PUT_DISTRIBUTE_LIMITS_MS "pb_put_distribute_limits_ms"

cdef enum:
    PUT_DISTRIBUTE_LIMITS = 12
    KEY_UNKNOWN = -2
    SIZE_BUCKETS = 7              # Java's message-size view: 6 bounds and +Inf

# The metrics endpoint's keyed histograms: the one table of bounds and key spellings.
from pybroker.stats import metric_names as _names

assert len(_names.MESSAGE_SIZE_BUCKETS_BYTES) + 1 == SIZE_BUCKETS
# metric_names.message_size_label's stride between message types.
cdef int SIZE_BUCKETS_PER_TYPE = (_names.message_size_label(1, 0)
                                  - _names.message_size_label(0, 0))
cdef int64_t SIZE_BOUNDS[SIZE_BUCKETS - 1]
cdef int64_t RPC_BOUNDS[9]
assert len(_names.RPC_BUCKETS_MS) == 9
for _index, _bound in enumerate(_names.MESSAGE_SIZE_BUCKETS_BYTES):
    SIZE_BOUNDS[_index] = _bound
for _index, _bound in enumerate(_names.RPC_BUCKETS_MS):
    RPC_BOUNDS[_index] = _bound


cdef inline int explicit_bucket(int64_t value, const int64_t *bounds, int count) noexcept:
    """metric_names.bucket_of in C: the first bound >= value, count for +Inf."""
    cdef int index
    for index in range(count):
        if value <= bounds[index]:
            return index
    return count


def size_bucket(int64_t size_bytes):
    """The message-size bucket the fast path counts (tests compare it with bucket_of)."""
    return explicit_bucket(size_bytes, SIZE_BOUNDS, SIZE_BUCKETS - 1)


cdef int64_t monotonic_ns() noexcept nogil:
    cdef timespec now
    clock_gettime(CLOCK_MONOTONIC, &now)
    return <int64_t>now.tv_sec * 1000000000 + now.tv_nsec


cdef int64_t realtime_ms() noexcept nogil:
    cdef timespec now
    clock_gettime(CLOCK_REALTIME, &now)
    return <int64_t>now.tv_sec * 1000 + now.tv_nsec // 1000000


cdef int put_distribute_bucket(int64_t elapsed_ms) noexcept nogil:
    cdef int index
    if elapsed_ms <= 0:
        return 0
    for index in range(1, PUT_DISTRIBUTE_LIMITS):
        if elapsed_ms < PUT_DISTRIBUTE_LIMITS_MS[index]:
            return index
    return PUT_DISTRIBUTE_LIMITS


def distribute_bucket(int64_t elapsed_ms):
    """The put-latency bucket the fast path counts (tests compare it with the Python one)."""
    return put_distribute_bucket(elapsed_ms)


cdef inline void _count(StatsWriter writer, int32_t entry, uint64_t value) noexcept:
    """One value into a keyed histogram entry (count, sum), as StatsWriter.key_add."""
    cdef uint64_t *words
    if entry < 0:
        pb_stats_add(writer.counters + KEYS_DROPPED, 1)
        return
    words = writer.key_words(entry)
    pb_stats_add(words + KEY_MESSAGES, 1)
    pb_stats_add(words + KEY_BYTES, value)
    pb_stats_add(words + KEY_REQUESTS, 1)


cdef int count_rpc(StatsWriter writer, dict cache, int32_t request_code, int32_t response_code,
                   bint oneway, int64_t elapsed_us) except -1:
    cdef int bucket = explicit_bucket(elapsed_us // 1000, RPC_BOUNDS, 9)
    # One small int per (request code, response code, oneway, bucket): a dict probe.
    cdef int64_t cache_key = (((<int64_t>request_code << 16) | (response_code & 0xFFFF))
                              << 8) | (oneway << 4) | bucket
    cached = cache.get(cache_key)
    if cached is None:
        cached = cache[cache_key] = writer.key(KEY_RPC, bucket, _names.rpc_key(
            request_code, response_code, False, "oneway" if oneway else "success"))
    _count(writer, <int32_t>cached, <uint64_t>elapsed_us)
    return 0


cdef class SendStats:
    """The counting of one worker's fast sends into ``writer`` (a StatsWriter, or None; a
    writer whose region has the instruments off counts as None)."""

    def __cinit__(self):
        self._keys = NULL
        self._size_keys = NULL
        self._keys_capacity = 0
        self._topic_ids = {}
        self._topic_names = []
        self._topic_types = []
        self._rpc_keys = {}

    def __init__(self, StatsWriter writer=None, int64_t python_oldest_ms=0):
        # Instruments off (statsInstrumentsEnable=false): the one check, here; every record
        # below is skipped by its `writer is None` test.
        self.writer = writer if writer is not None and writer.enabled else None
        self.python_oldest_ms = python_oldest_ms

    def __dealloc__(self):
        PyMem_Free(self._keys)
        PyMem_Free(self._size_keys)

    cdef int32_t topic_id(self, bytes name, int message_type=0) except -1:
        cdef object known = self._topic_ids.get((name, message_type))
        cdef int32_t *grown
        cdef Py_ssize_t topic_id, capacity, index
        if known is not None:
            return known
        topic_id = len(self._topic_names)
        if topic_id >= self._keys_capacity:
            capacity = max(64, 2 * self._keys_capacity)
            grown = <int32_t *>PyMem_Realloc(self._keys, capacity * sizeof(int32_t))
            if grown == NULL:
                raise MemoryError()
            self._keys = grown
            grown = <int32_t *>PyMem_Realloc(self._size_keys,
                                             capacity * SIZE_BUCKETS * sizeof(int32_t))
            if grown == NULL:
                raise MemoryError()
            self._size_keys, self._keys_capacity = grown, capacity
        self._keys[topic_id] = KEY_UNKNOWN
        for index in range(SIZE_BUCKETS):
            self._size_keys[topic_id * SIZE_BUCKETS + index] = KEY_UNKNOWN
        self._topic_names.append(name)
        self._topic_types.append(message_type)
        self._topic_ids[(name, message_type)] = topic_id
        return <int32_t>topic_id

    cdef int32_t _key(self, int32_t topic_id) except -3:
        # The label is the topic id's message type (0, or 1 for rmq_sys_wheel_timer). Looked
        # up at the topic's first stored put, as the handler's Recorder does.
        if self._keys[topic_id] == KEY_UNKNOWN:
            self._keys[topic_id] = self.writer.key(
                KEY_TOPIC_PUT, <int>self._topic_types[topic_id],
                (<bytes>self._topic_names[topic_id]).decode("utf-8"))
        return self._keys[topic_id]

    cdef int32_t _size_key(self, int32_t topic_id, int64_t size_bytes) except -3:
        # Java's message_size: one value per put, its bytes per message, under the topic and
        # its message type (metric_names.message_size_label).
        cdef int bucket = explicit_bucket(size_bytes, SIZE_BOUNDS, SIZE_BUCKETS - 1)
        cdef int32_t *slot = &self._size_keys[topic_id * SIZE_BUCKETS + bucket]
        if slot[0] == KEY_UNKNOWN:
            slot[0] = self.writer.key(
                KEY_MESSAGE_SIZE,
                <int>self._topic_types[topic_id] * SIZE_BUCKETS_PER_TYPE + bucket,
                (<bytes>self._topic_names[topic_id]).decode("utf-8"))
        return slot[0]

    cdef void started(self, int64_t requests) noexcept:
        if self.writer is not None:
            pb_stats_add(self.writer.counters + REQUESTS_TOTAL, <uint64_t>requests)
            pb_stats_add(self.writer.counters + SEND_STARTED, <uint64_t>requests)

    cdef int set_oldest(self, int64_t fast_oldest_ms) except -1:
        cdef int64_t oldest = fast_oldest_ms, python_oldest = self.python_oldest_ms
        if self.writer is None:
            return 0
        if python_oldest and (not oldest or python_oldest < oldest):
            oldest = python_oldest
        pb_stats_set(self.writer.counters + SEND_OLDEST_MS, <uint64_t>oldest)
        return 0

    cdef int answered(self, int64_t elapsed_ns, bint stored, int64_t messages,
                      int64_t size_bytes, int32_t topic_id, int32_t request_code,
                      int32_t response_code, bint oneway) except -1:
        cdef StatsWriter writer = self.writer
        cdef uint64_t *words
        cdef int32_t key
        if writer is None:
            return 0
        if elapsed_ns < 0:
            elapsed_ns = 0
        pb_stats_record(writer.histogram(PUT_LATENCY_US), <uint64_t>(elapsed_ns // 1000))
        pb_stats_add(writer.counters + PUT_DISTRIBUTE_0
                     + put_distribute_bucket(elapsed_ns // 1000000), 1)
        pb_stats_raise(writer.counters + PUT_ENTIRE_TIME_MAX_MS,
                       <uint64_t>(elapsed_ns // 1000000))
        if stored:
            key = self._key(topic_id)
            if key >= 0:
                words = writer.key_words(key)
                pb_stats_add(words + KEY_MESSAGES, <uint64_t>messages)
                pb_stats_add(words + KEY_BYTES, <uint64_t>size_bytes)
                pb_stats_add(words + KEY_REQUESTS, 1)
            else:
                pb_stats_add(writer.counters + KEYS_DROPPED, 1)
            pb_stats_add(writer.counters + BROKER_PUT_NUMS, <uint64_t>messages)
            if messages:
                pb_stats_record_n(writer.histogram(MESSAGE_SIZE_BYTES),
                                  <uint64_t>(size_bytes // messages), <uint64_t>messages)
                _count(writer, self._size_key(topic_id, size_bytes // messages),
                       <uint64_t>(size_bytes // messages))
        pb_stats_record(writer.histogram(RPC_LATENCY_US), <uint64_t>(elapsed_ns // 1000))
        count_rpc(writer, self._rpc_keys, request_code, response_code, oneway,
                  elapsed_ns // 1000)
        pb_stats_add(writer.counters + SEND_FINISHED, 1)
        return 0

    cdef void flush_waited(self, int64_t waited_ns) noexcept:
        if self.writer is not None:
            pb_stats_record(self.writer.histogram(SYNC_FLUSH_WAIT_US),
                            <uint64_t>(waited_ns // 1000 if waited_ns > 0 else 0))
