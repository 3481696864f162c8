# C-level contract of pybroker._fast.timer_reput: the first-delivery rule's records, groups and
# cancel marks, and the TimerReputs class (its body and the rule: timer_reput.pyx).
from libc.stdint cimport int32_t, int64_t

from pybroker._fast.digits cimport DECIMAL_BYTES_MAX

cdef enum:
    NAME_VALUE_SEPARATOR = 1
    PROPERTY_SEPARATOR = 2
    # The four values the rule reads, in this order.
    VALUE_REAL_TOPIC = 0
    VALUE_REAL_QUEUE_ID = 1
    VALUE_UNIQ_KEY = 2
    VALUE_DELETE_KEY = 3
    VALUES_COUNT = 4
    # Cancel marks of a slot C matches (a linear search per record); more go to Python.
    CANCEL_KEYS_MAX_COUNT = 64
    DELETE_KEY_SEPARATOR = 43      # '+': REAL_TOPIC + '+' + UNIQ_KEY (Java buildDeleteKey)

cdef extern from *:
    """
    #define PB_INT32_MAX_VALUE ((int64_t)2147483647)
    #define PB_INT64_MAX_VALUE ((int64_t)9223372036854775807LL)
    #define PB_OWN_MS_NONE ((int64_t)(-9223372036854775807LL - 1))
    """
    const int64_t INT32_MAX_VALUE "PB_INT32_MAX_VALUE"
    const int64_t INT64_MAX_VALUE "PB_INT64_MAX_VALUE"
    # convert's own_ms of a record whose own time is not read (Long.MIN)
    const int64_t OWN_MS_NONE "PB_OWN_MS_NONE"



cdef struct Span:
    Py_ssize_t start       # -1: absent
    Py_ssize_t length


cdef struct Item:
    Py_ssize_t group       # -1: left to the Python rule
    Py_ssize_t size        # bytes of the new record
    Py_ssize_t position    # where it is written in the output
    int32_t queue_id
    Span topic             # REAL_TOPIC's value in the source properties
    bint separator         # a separator is added before the new pairs
    Py_ssize_t cancel_key  # >= 0: dropped, the cancel mark at this index named it
    int64_t own_ms         # the put rule's time at the store timestamp; OWN_MS_NONE: not read


cdef struct CancelKey:
    const unsigned char *text
    Py_ssize_t length
    bint used              # a record of this call matched it already


cdef struct Group:
    const unsigned char *topic
    Py_ssize_t topic_length
    int32_t queue_id
    int32_t sys_flag
    Py_ssize_t count
    Py_ssize_t bytes
    Py_ssize_t position


cdef struct Piece:
    # A record of an Assembly: its recipe, the parked record its body comes from.
    const unsigned char *recipe
    const unsigned char *parked
    Py_ssize_t body_start
    Py_ssize_t body_length
    Py_ssize_t rest           # recipe bytes after the body


cdef class Assembly:
    cdef object _recipes                # the bytes the pieces' recipes point into
    cdef object _owner                  # the read the views come from (released with them)
    cdef Py_buffer *_views
    cdef Py_ssize_t _views_count
    cdef Piece *_pieces                 # the records in the output's order
    cdef Py_ssize_t *_run_first         # runs + 1: each run's first piece
    cdef Py_ssize_t *_run_bytes
    cdef unsigned char _digits[DECIMAL_BYTES_MAX]   # TIMER_DEQUEUE_MS's new digits
    cdef Py_ssize_t _digits_length
    cdef readonly Py_ssize_t runs

    cdef void _free(self) noexcept
    # Write run ``run``'s records at ``target`` (run_bytes(run) bytes); cannot fail.
    cdef void fill(self, Py_ssize_t run, unsigned char *target) noexcept nogil
    cdef int _check(self, Py_ssize_t run) except -1
    cdef bint _set_pieces(self, const unsigned char[::1] recipes,
                          const int64_t[::1] positions, const int64_t[::1] order,
                          const int32_t[::1] which, const int64_t[::1] starts,
                          const int64_t[::1] sizes, const unsigned char **recipe_of,
                          Py_ssize_t out_length) noexcept
    cdef bint _set_runs(self, list cuts, Py_ssize_t pieces) except -1


cdef class TimerReputs:
    cdef tuple names                     # the bytes the pointers below point into
    cdef const unsigned char *markers[VALUES_COUNT]   # separator + name + separator
    cdef Py_ssize_t marker_lengths[VALUES_COUNT]
    cdef const unsigned char *enqueue_name
    cdef Py_ssize_t enqueue_name_length
    cdef const unsigned char *dequeue_name
    cdef Py_ssize_t dequeue_name_length
    cdef const unsigned char *rolled_mark          # TIMER_ENQUEUE_MS + separator
    cdef Py_ssize_t rolled_mark_length

    cdef void _plan(self, const Py_buffer *source, int64_t enqueue_ms, int64_t dequeue_ms,
                    Item *item, Group *groups, Py_ssize_t *groups_count, CancelKey *keys,
                    Py_ssize_t keys_count, bint read_own) noexcept
    cdef tuple _write(self, Py_buffer *buffers, Item *items, Py_ssize_t count, Group *groups,
                      Py_ssize_t groups_count, const int64_t[::1] enqueue_ms,
                      int64_t dequeue_ms, Py_ssize_t run_records_max,
                      Py_ssize_t run_bytes_max)
    cdef void _write_one(self, const Py_buffer *source, Item *item, unsigned char *out,
                         unsigned char *scratch, int64_t enqueue_ms,
                         int64_t dequeue_ms) noexcept
