# Contract of pybroker._fast.send.stats: fast sends counted as the send handler counts its own.
from libc.stdint cimport int32_t, int64_t

from pybroker._fast.stats cimport StatsWriter

# CLOCK_MONOTONIC in ns (Python's time.monotonic_ns, the Recorder's clock).
cdef int64_t monotonic_ns() noexcept nogil

# CLOCK_REALTIME in ms (time.time_ns() // 1_000_000, the Recorder's request start).
cdef int64_t realtime_ms() noexcept nogil

# stats/service.py put_distribute_bucket: Java's putMessageDistributeTime bucket of a put.
cdef int put_distribute_bucket(int64_t elapsed_ms) noexcept nogil

# Recorder.rpc: one rocketmq_rpc_latency value of a request answered after elapsed_us, its
# KEY_RPC entry looked up once per (request, response, oneway, bucket) through ``cache``.
cdef int count_rpc(StatsWriter writer, dict cache, int32_t request_code, int32_t response_code,
                   bint oneway, int64_t elapsed_us) except -1


cdef class SendStats:
    cdef StatsWriter writer            # None: nothing is counted (also: instruments off)
    cdef dict _topic_ids
    cdef list _topic_names
    cdef list _topic_types             # by topic id: send.py's message type label
    cdef int32_t *_keys                # by topic id: TOPIC_PUT entry, -2 not looked up yet
    cdef int32_t *_size_keys           # by topic id * SIZE_BUCKETS + bucket: KEY_MESSAGE_SIZE
    cdef Py_ssize_t _keys_capacity
    cdef dict _rpc_keys                # (request, response, oneway, bucket) -> KEY_RPC entry
    # The handlers' oldest unanswered send (epoch ms, 0: none), pushed by their Recorder when
    # it changes (SendPath.set_python_oldest): no Python call per take or drain.
    cdef public int64_t python_oldest_ms

    # A stable small id of a topic (UTF-8 name) counted under a message type (send.py
    # _message_type_label: 0 normal, 1 a parked timer message), for answered().
    cdef int32_t topic_id(self, bytes name, int message_type=*) except -1
    cdef int32_t _key(self, int32_t topic_id) except -3
    # Requests read: REQUESTS_TOTAL and SEND_STARTED (proc/remoting.py request_started).
    cdef void started(self, int64_t requests) noexcept
    # A send answered after elapsed_ns: put latency (send.py timed_put), and when stored
    # TOPIC_PUT / BROKER_PUT_NUMS / message size, then RPC latency and SEND_FINISHED.
    # SEND_OLDEST_MS: the older of fast_oldest_ms (0: none) and the handlers' oldest.
    cdef int set_oldest(self, int64_t fast_oldest_ms) except -1
    cdef int32_t _size_key(self, int32_t topic_id, int64_t size_bytes) except -3
    cdef int answered(self, int64_t elapsed_ns, bint stored, int64_t messages,
                      int64_t size_bytes, int32_t topic_id, int32_t request_code,
                      int32_t response_code, bint oneway) except -1
    # A SYNC_FLUSH acknowledgement answered after waiting waited_ns for the flush (and, on a
    # SYNC_MASTER, the slave): the SYNC_FLUSH_WAIT_US histogram.
    cdef void flush_waited(self, int64_t waited_ns) noexcept
