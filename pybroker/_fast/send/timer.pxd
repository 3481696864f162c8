# Contract of pybroker._fast.send.timer: 5.x timer messages on the send fast path, in C.
# The twin of broker/timer_message.py redirect_timer (and send.py recall_handle_of) for a single
# send the fast path takes; tests/unit/broker/test_send_timer.py keeps the two equal.
from libc.stdint cimport int32_t, int64_t

cdef enum:
    # timer_redirect's answers
    TIMER_STORED_AS_IS = 0     # not a timer message after all: delivery time not after now
    TIMER_PARKED = 1           # rewritten for rmq_sys_wheel_timer queue 0
    TIMER_HANDLER = -1         # the handler decides: every refusal, and the unusual shapes
    # A recall handle is only built in C for a UNIQ_KEY up to this long (Java's are 32).
    TIMER_UNIQ_KEY_MAX_BYTES = 128


cdef struct TimerSettings:
    bint enabled                    # timerWheelEnable
    bint congestion_possible        # timerCongestNumEachSlot < Integer.MAX_VALUE
    int64_t congest_limit           # timerCongestNumEachSlot
    int64_t max_delay_ms            # timerMaxDelaySec x 1000
    int64_t precision_ms            # the effective timerPrecisionMs
    # The timer worker's timerwheel mapped read-only (broker/timer_slots.py), read when a
    # congestion is possible: a slot holding more than congest_limit messages, or no map yet,
    # leaves the send to the handler (its rule refuses at random between the limit and twice
    # it). NULL: not mapped.
    const unsigned char *wheel
    int64_t wheel_slots


cdef struct TimerPark:
    # What a parked message's answer needs (its recall handle).
    int64_t slot_ms                 # TIMER_OUT_MS
    const unsigned char *uniq_key   # its UNIQ_KEY, a span of the request's properties
    Py_ssize_t uniq_key_length


# The put-time rule for the properties text[0:length] (already accepted by read.pxd's
# scan_properties with only PROPERTY_HAS_TIMER among the handler-only flags) of a single send to
# topic/queue_id at now_ms. TIMER_PARKED: out[0:*out_length] holds the stored properties
# without CLUSTER (every pair with a value in order, WAIT kept, then TIMER_OUT_MS, REAL_TOPIC,
# REAL_QID) and *park what the answer needs; out needs room for length + 64 + topic_length
# bytes. TIMER_STORED_AS_IS: store it as a plain send. TIMER_HANDLER: leave it to the handler.
cdef int timer_redirect(const unsigned char *text, Py_ssize_t length,
                        const unsigned char *topic, Py_ssize_t topic_length, int32_t queue_id,
                        const TimerSettings *settings, int64_t now_ms, unsigned char *out,
                        Py_ssize_t *out_length, TimerPark *park) noexcept nogil

# The put rule's delivery time (TIMER_DELAY_SEC, else TIMER_DELAY_MS, else TIMER_DELIVER_MS;
# broker/timer_message.py deliver_ms) for a stored record's properties text[0:length] at
# now_ms: 0 with *deliver set, -1 when none of the three is there or its value is not a long.
# Any bytes: each pair is read as protocol/properties.py decode_properties reads it (the last
# of a repeated name, a pair without a name or a value skipped). The timer's conversion ahead
# reads a parked record's own time with it (_fast/timer_reput.pyx).
cdef int timer_deliver_ms(const unsigned char *text, Py_ssize_t length, int64_t now_ms,
                          int64_t *deliver) noexcept nogil

# Point settings at the timerwheel's bytes (None: no map); ValueError for a size that is not
# whole slots. The caller keeps the buffer alive while settings may be read.
cdef int set_wheel(TimerSettings *settings, const unsigned char[:] wheel) except -1

# Bytes of the recall handle of a message parked as *park (recall_handle writes exactly these).
cdef Py_ssize_t recall_handle_bytes(Py_ssize_t topic_length, Py_ssize_t broker_name_length,
                                    const TimerPark *park) noexcept nogil
# The recall handle (URL-safe Base64 with padding of "v1 <topic> <broker> <slot+1> <uniq>") at
# out; its length.
cdef Py_ssize_t recall_handle(unsigned char *out, const unsigned char *topic,
                              Py_ssize_t topic_length, const unsigned char *broker_name,
                              Py_ssize_t broker_name_length,
                              const TimerPark *park) noexcept nogil
