# Contract of pybroker._fast.pull_path: a remoting worker's pull fast path (frames ->
# records -> writev), its queue and subscription tables.
from libc.stdint cimport int32_t, int64_t, uint64_t, uintptr_t

from pybroker._fast.pull_maps cimport FileMaps, MapSlot
from pybroker._fast.pull_scan cimport PullLimits, TakenUnit
from pybroker._fast.request_read cimport FieldSpan
from pybroker._fast.stats cimport StatsWriter
from pybroker._fast.taker cimport Scratch

cdef extern from "sys/uio.h" nogil:
    cdef struct iovec:
        void *iov_base
        size_t iov_len
    ssize_t writev(int fd, const iovec *iov, int iovcnt)

cdef enum:
    # PULL_MESSAGE_REQUEST fields, in protocol/headers.py's order (checked at import).
    F_GROUP = 0
    F_TOPIC = 1
    F_QUEUE_ID = 2
    F_QUEUE_OFFSET = 3
    F_MAX_MSG_NUMS = 4
    F_SYS_FLAG = 5
    F_COMMIT_OFFSET = 6
    F_SUSPEND_TIMEOUT = 7
    F_SUBSCRIPTION = 8
    F_SUB_VERSION = 9
    F_EXPRESSION_TYPE = 10
    F_MAX_MSG_BYTES = 11
    F_REQUEST_SOURCE = 12
    F_PROXY_CLIENT = 13
    PULL_FIELDS = 14
    CODE_PULL_MESSAGE = 11
    CODE_LITE_PULL_MESSAGE = 361
    RESPONSE_SUCCESS = 0
    FLAG_COMMIT_OFFSET = 1
    FLAG_SUBSCRIPTION = 4
    # Java scans at most max(16000 bytes of units, maxMsgNums) units per pull (read_api.py).
    SCAN_UNITS_MIN = 800
    CQ_UNIT_SIZE = 20
    IOV_MAX_PARTS = 1024
    # The response header around suggestWhichBrokerId, nextBeginOffset, minOffset, maxOffset
    # and opaque (broker/pull_fast.py).
    TEMPLATE_PIECES = 6
    KEY_UNKNOWN = -2
    # Distinct SUBSCRIPTION-flag expressions remembered (PullPath._request_tags) before the
    # memory is cleared.
    EXPRESSIONS_MAX = 256
    # (group, topic) pairs without a heartbeat subscription remembered (PullPath._find).
    OWN_ENTRIES_MAX = 4096


cdef struct Answer:
    # One pull's answer while it is being built.
    int64_t next_offset
    int64_t min_offset
    int64_t max_offset
    int64_t suggest
    int32_t opaque
    int32_t count
    int64_t body_bytes
    size_t pages
    size_t cold_pages
    bint in_disk


cdef class _PullQueue:
    cdef readonly int64_t position
    cdef readonly int64_t generation
    cdef readonly bint exists
    cdef readonly int64_t min_offset
    cdef readonly int64_t max_offset
    cdef readonly FileMaps maps


cdef class _Template:
    # The 6 pieces of a FOUND answer's header (broker/pull_fast.py response_template).
    cdef tuple pieces
    cdef const unsigned char *pointers[TEMPLATE_PIECES]
    cdef Py_ssize_t lengths[TEMPLATE_PIECES]
    cdef Py_ssize_t frame_bytes_max   # the head's bytes at most, numbers included


cdef class _TagFilter:
    # Which tag codes a pull takes (all_tags: every record).
    cdef bint all_tags
    cdef int32_t *codes
    cdef Py_ssize_t code_count


cdef class _PullSubscription:
    cdef bytes topic
    cdef str topic_text
    cdef str group_text
    cdef str stats_key
    cdef int32_t read_queue_nums
    cdef int64_t sub_version
    cdef _TagFilter tags               # the heartbeat's
    cdef _Template lite_template       # LITE_PULL_MESSAGE's answer; None: the handler's
    cdef int64_t broker_id
    cdef int64_t slowly_broker_id
    cdef int group_get_entry
    cdef list pull_offset_entries


cdef class PullPath:
    cdef object _positions
    cdef object _queue_source
    cdef object _commitlog_source
    cdef object _pull_offset_entry
    cdef StatsWriter _stats
    cdef Py_ssize_t _ext_fields_max
    cdef Py_ssize_t _frame_max_bytes
    cdef bint _check_crc
    cdef int64_t _memory_bytes
    cdef PullLimits _caps
    cdef bint _slave_read_enable
    cdef _Template _template
    cdef object _request_tag_codes
    cdef dict _expressions
    cdef object _own_expression_entry
    cdef dict _own_entries
    cdef dict _rpc_keys                # send/stats.pyx count_rpc's cache
    cdef dict _subscriptions
    cdef dict _topics
    cdef FileMaps _commitlog
    cdef int64_t _commitlog_file_size
    cdef int64_t _dispatched
    cdef int64_t _written
    cdef int64_t _generation
    cdef bint _usable
    cdef list _commits
    # one pull's scratch
    cdef Scratch _scratch
    cdef TakenUnit *_taken
    cdef Py_ssize_t _taken_capacity
    cdef MapSlot **_record_files
    cdef uintptr_t *_starts
    cdef uintptr_t *_ends
    # answers of one take
    cdef iovec *_iov
    cdef Py_ssize_t _iov_count
    cdef Py_ssize_t _iov_capacity
    cdef Py_ssize_t *_head_parts       # (iov index, arena offset) pairs
    cdef Py_ssize_t _head_count
    cdef Py_ssize_t _head_capacity
    cdef Scratch _arena                # the answers' heads
    cdef Py_ssize_t _arena_used
    cdef Py_ssize_t _pending_bytes
    cdef readonly uint64_t fast_pulls_total
    cdef readonly uint64_t other_frames_total

    cdef _PullSubscription _find(self, const FieldSpan *fields, int64_t sys_flag)
    cdef _TagFilter _tags(self, _PullSubscription subscription, const FieldSpan *fields,
                          int64_t sys_flag, int64_t sub_version)
    cdef _TagFilter _request_tags(self, const FieldSpan *expression,
                                  const FieldSpan *expression_type)
    cdef int _begin(self) except -1
    cdef int _grow_taken(self, Py_ssize_t need) except -1
    cdef _PullQueue _queue(self, _PullSubscription subscription, int32_t queue_id)
    cdef MapSlot *_commitlog_file(self, int64_t physical_offset) except? NULL
    cdef int _pull(self, const unsigned char *frame, Py_ssize_t frame_bytes) except -1
    cdef int _read(self, _PullSubscription subscription, _TagFilter tags, _Template template,
                   int32_t request_code, _PullQueue queue, int32_t queue_id, int64_t queue_offset,
                   int64_t max_count, bint has_max_bytes, int64_t max_bytes, int32_t opaque,
                   int64_t started) except -1
    cdef int _locate(self, Py_ssize_t taken_count) except -1
    cdef int64_t _checked_bytes(self, _PullSubscription subscription, int32_t queue_id,
                                int64_t queue_offset, Py_ssize_t taken_count) except? -2
    cdef int _answer(self, _Template template, Answer *answer,
                     Py_ssize_t taken_count) except -1
    cdef int _grow_iov(self, Py_ssize_t need) except -1
    cdef int _grow_heads(self) except -1
    cdef object _write(self, int fd)
    cdef int _count(self, _PullSubscription subscription, int32_t request_code, int32_t queue_id,
                    const Answer *answer, int64_t started) except -1
