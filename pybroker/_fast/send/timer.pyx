# pybroker._fast.send.timer: the put-time rule of 5.x timer messages for the send fast path.
"""5.x timer messages on the send fast path (docs/architecture/send-fast-path.md).

The twin of :func:`pybroker.broker.timer_message.redirect_timer` (and of send.py's
``recall_handle_of``) for the one shape a timer producer sends: a single NOT-type message to a
topic of the fast table whose properties carry TIMER_DELIVER_MS, TIMER_DELAY_SEC or
TIMER_DELAY_MS with a UNIQ_KEY, and no DELAY, TRAN_MSG, CLUSTER, TIMER_OUT_MS, REAL_TOPIC or
REAL_QID. Those the handler would park are rewritten here exactly as it rewrites them; every
refusal (wheel disabled, a value that is not a long, beyond timerMaxDelaySec, a cancel mark due
now, a slot holding more than timerCongestNumEachSlot or a wheel not mapped yet) and every other
shape is left to the handler, which answers it with Java's code and remark.
tests/unit/broker/test_send_timer.py runs both over the same seeded inputs;
tests/unit/broker/test_send_fast.py compares stored records and answers.
"""
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.string cimport memchr, memcmp, memcpy

from pybroker._fast.digits cimport read_java_long, write_decimal
from pybroker._fast.hton cimport pb_unpack_int32, pb_unpack_int64
from pybroker._fast.send.read cimport name_is

from pybroker.protocol.constants import Property as _Property
from pybroker.store import layout as _layout

cdef const char *BASE64_URL = (
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")

# The names below restate protocol/constants.py; they must agree.
assert (_Property.TIMER_DELIVER_MS, _Property.TIMER_DELAY_SEC, _Property.TIMER_DELAY_MS,
        _Property.TIMER_OUT_MS, _Property.TIMER_DEL_UNIQKEY, _Property.REAL_TOPIC,
        _Property.REAL_QUEUE_ID, _Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == (
    "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_OUT_MS",
    "TIMER_DEL_UNIQKEY", "REAL_TOPIC", "REAL_QID", "UNIQ_KEY")
# The recall handle's version ("v1", broker/timer_message.py RECALL_HANDLE_VERSION): the
# handles are compared byte for byte with the handler's by tests/unit/broker/test_send_timer.py.

cdef enum:
    # A timerwheel slot (store/layout.py): the big-endian time in precision units, the count.
    SLOT_BYTES = 32
    SLOT_TIME_AT = 0
    SLOT_NUM_AT = 24
assert (SLOT_BYTES, SLOT_TIME_AT, SLOT_NUM_AT) == (
    _layout.TIMER_SLOT_SIZE, _layout.TIMER_SLOT_TIME_POSITION, _layout.TIMER_SLOT_NUM_POSITION)

cdef enum:
    # The properties timer_redirect looks at (an index into _Spans)
    NAME_DELIVER_MS = 0
    NAME_DELAY_SEC = 1
    NAME_DELAY_MS = 2
    NAME_UNIQ_KEY = 3
    NAME_OUT_MS = 4
    NAME_DEL_UNIQKEY = 5
    NAME_REAL_TOPIC = 6
    NAME_REAL_QID = 7
    NAMES_COUNT = 8

cdef const char *NAMES[NAMES_COUNT]
NAMES[:] = [b"TIMER_DELIVER_MS", b"TIMER_DELAY_SEC", b"TIMER_DELAY_MS", b"UNIQ_KEY",
            b"TIMER_OUT_MS", b"TIMER_DEL_UNIQKEY", b"REAL_TOPIC", b"REAL_QID"]


cdef enum:
    # The three timer names' lengths (TIMER_DELAY_MS .. TIMER_DELIVER_MS), and where the
    # 'L' of their common "TIMER_DEL" is (a quick test before the names are compared).
    TIMER_NAME_MIN = 14
    TIMER_NAME_MAX = 16
    TIMER_NAME_L_AT = 8
assert all(TIMER_NAME_MIN <= len(name) <= TIMER_NAME_MAX and name[:TIMER_NAME_L_AT + 1] ==
           "TIMER_DEL" for name in (_Property.TIMER_DELIVER_MS, _Property.TIMER_DELAY_SEC,
                                    _Property.TIMER_DELAY_MS))


cdef struct _Spans:
    const unsigned char *values[NAMES_COUNT]     # NULL: absent (or an empty value: dropped)
    Py_ssize_t lengths[NAMES_COUNT]



cdef Py_ssize_t _copy_pairs(const unsigned char *text, Py_ssize_t length, unsigned char *out,
                            _Spans *spans) noexcept nogil:
    """Every pair with a value, in order, WAIT included (Java rebuilds a redirected message's
    properties from its whole map); note the values of the names above. The text is one
    scan_properties accepted: well-formed pairs, unique names."""
    cdef Py_ssize_t at = 0, end, separator, n = 0, index
    for index in range(NAMES_COUNT):
        spans.values[index] = NULL
        spans.lengths[index] = 0
    while at < length:
        end = at
        while end < length and text[end] != 2:
            end += 1
        if end > at:
            separator = at
            while text[separator] != 1:
                separator += 1
            if end > separator + 1:                 # an empty value is dropped
                for index in range(NAMES_COUNT):
                    if name_is(text + at, separator - at, NAMES[index]):
                        spans.values[index] = text + separator + 1
                        spans.lengths[index] = end - separator - 1
                        break
                memcpy(out + n, text + at, <size_t>(end - at))
                n += end - at
                out[n] = 2
                n += 1
        at = end + 1
    return n


cdef inline int64_t _plus(int64_t a, int64_t b) noexcept nogil:
    # A Java long's wrapping sum.
    return <int64_t>(<uint64_t>a + <uint64_t>b)


cdef int _deliver_ms(const _Spans *spans, int64_t now_ms, int64_t *deliver) noexcept nogil:
    """The delivery time the properties ask for (TIMER_DELAY_SEC, else TIMER_DELAY_MS, else
    TIMER_DELIVER_MS, wrapping as Java's longs); -1 when the value is not a long."""
    cdef int64_t value
    cdef int index, turn
    cdef int order[3]
    order[0], order[1], order[2] = NAME_DELAY_SEC, NAME_DELAY_MS, NAME_DELIVER_MS
    for turn in range(3):
        index = order[turn]
        if spans.values[index] != NULL:
            if read_java_long(spans.values[index], spans.lengths[index], False, &value) < 0:
                return -1
            if index == NAME_DELAY_SEC:
                deliver[0] = _plus(now_ms, <int64_t>(<uint64_t>value * 1000))
            elif index == NAME_DELAY_MS:
                deliver[0] = _plus(now_ms, value)
            else:
                deliver[0] = value
            return 0
    return -1


cdef int timer_deliver_ms(const unsigned char *text, Py_ssize_t length, int64_t now_ms,
                          int64_t *deliver) noexcept nogil:
    cdef _Spans spans
    cdef Py_ssize_t at = 0, end, separator, index
    cdef const unsigned char *found
    for index in range(NAMES_COUNT):
        spans.values[index] = NULL
        spans.lengths[index] = 0
    while at < length:
        found = <const unsigned char *>memchr(text + at, 2, <size_t>(length - at))
        end = length if found == NULL else found - text
        found = <const unsigned char *>memchr(text + at, 1, <size_t>(end - at))
        separator = end if found == NULL else found - text
        # A name and a value (decode_properties' rule), the name one of the three (14-16
        # bytes, "TIMER_DEL..."; most pairs are not) that _deliver_ms reads.
        if at < separator < end - 1 and TIMER_NAME_MIN <= separator - at <= TIMER_NAME_MAX \
                and text[at + TIMER_NAME_L_AT] == c'L':
            for index in range(NAME_DELAY_MS + 1):
                if name_is(text + at, separator - at, NAMES[index]):
                    spans.values[index] = text + separator + 1
                    spans.lengths[index] = end - separator - 1
                    break
        at = end + 1
    return _deliver_ms(&spans, now_ms, deliver)


cdef inline Py_ssize_t _pair(unsigned char *out, const char *name, const unsigned char *value,
                             Py_ssize_t value_length) noexcept nogil:
    cdef Py_ssize_t n = 0
    while name[n] != 0:
        out[n] = <unsigned char>name[n]
        n += 1
    out[n] = 1
    memcpy(out + n + 1, value, <size_t>value_length)
    out[n + 1 + value_length] = 2
    return n + 2 + value_length


cdef int64_t _slot_num(const TimerSettings *settings, int64_t slot_ms) noexcept nogil:
    """Messages parked in the wheel slot of slot_ms (0 for a slot of another lap), as
    store/timer_wheel.py's slot(...).num."""
    cdef int64_t units = slot_ms // settings.precision_ms
    cdef const unsigned char *slot = settings.wheel \
        + (units % settings.wheel_slots) * SLOT_BYTES
    if pb_unpack_int64(slot + SLOT_TIME_AT) != units:
        return 0
    return pb_unpack_int32(slot + SLOT_NUM_AT)


cdef int timer_redirect(const unsigned char *text, Py_ssize_t length,
                        const unsigned char *topic, Py_ssize_t topic_length, int32_t queue_id,
                        const TimerSettings *settings, int64_t now_ms, unsigned char *out,
                        Py_ssize_t *out_length, TimerPark *park) noexcept nogil:
    cdef _Spans spans
    cdef int64_t deliver, slot_ms
    cdef unsigned char number[24]
    cdef Py_ssize_t n = _copy_pairs(text, length, out, &spans)
    if spans.values[NAME_OUT_MS] != NULL:
        return TIMER_HANDLER        # delivered by the timer once: not a timer message again
    if not settings.enabled:
        return TIMER_HANDLER        # WHEEL_TIMER_NOT_ENABLE
    if _deliver_ms(&spans, now_ms, &deliver) < 0:
        return TIMER_HANDLER        # WHEEL_TIMER_MSG_ILLEGAL
    if deliver <= now_ms:
        if spans.values[NAME_DEL_UNIQKEY] != NULL:
            return TIMER_HANDLER    # a cancel mark due now: WHEEL_TIMER_MSG_ILLEGAL
        return TIMER_STORED_AS_IS
    if deliver - now_ms > settings.max_delay_ms:
        return TIMER_HANDLER        # WHEEL_TIMER_MSG_ILLEGAL
    if spans.values[NAME_UNIQ_KEY] == NULL \
            or spans.lengths[NAME_UNIQ_KEY] > TIMER_UNIQ_KEY_MAX_BYTES \
            or spans.values[NAME_REAL_TOPIC] != NULL or spans.values[NAME_REAL_QID] != NULL:
        return TIMER_HANDLER        # the handler gives it a UNIQ_KEY / overwrites in place
    if deliver % settings.precision_ms == 0:
        slot_ms = deliver - settings.precision_ms
    else:
        slot_ms = deliver // settings.precision_ms * settings.precision_ms
    if settings.congestion_possible and (
            settings.wheel == NULL or _slot_num(settings, slot_ms) > settings.congest_limit):
        return TIMER_HANDLER        # WHEEL_TIMER_FLOW_CONTROL is the handler's to decide
    n += _pair(out + n, "TIMER_OUT_MS", number, write_decimal(number, slot_ms))
    n += _pair(out + n, "REAL_TOPIC", topic, topic_length)
    n += _pair(out + n, "REAL_QID", number, write_decimal(number, queue_id))
    out_length[0] = n
    park.slot_ms = slot_ms
    park.uniq_key = spans.values[NAME_UNIQ_KEY]
    park.uniq_key_length = spans.lengths[NAME_UNIQ_KEY]
    return TIMER_PARKED


# --- recall handles ----------------------------------------------------------------------------

cdef Py_ssize_t _handle_text_bytes(Py_ssize_t topic_length, Py_ssize_t broker_name_length,
                                   const TimerPark *park) noexcept nogil:
    # "v1 " topic " " broker " " decimal " " uniq (a decimal is at most 20 bytes)
    return 3 + topic_length + 1 + broker_name_length + 1 + 20 + 1 + park.uniq_key_length


cdef Py_ssize_t recall_handle_bytes(Py_ssize_t topic_length, Py_ssize_t broker_name_length,
                                    const TimerPark *park) noexcept nogil:
    cdef unsigned char number[24]
    cdef Py_ssize_t text = _handle_text_bytes(topic_length, broker_name_length, park) - 20 \
        + write_decimal(number, _plus(park.slot_ms, 1))
    return (text + 2) // 3 * 4


cdef Py_ssize_t recall_handle(unsigned char *out, const unsigned char *topic,
                              Py_ssize_t topic_length, const unsigned char *broker_name,
                              Py_ssize_t broker_name_length,
                              const TimerPark *park) noexcept nogil:
    # The text is built at the end of out's room, then encoded from the front: Base64's
    # output never overtakes its input (4 bytes out for 3 read, from 1/3 of the way in).
    cdef Py_ssize_t total = recall_handle_bytes(topic_length, broker_name_length, park)
    cdef Py_ssize_t size = total // 4 * 3, n, at = 0, i
    cdef unsigned char *text = out + total - size
    cdef unsigned char *word = text
    cdef uint64_t chunk
    memcpy(word, b"v1 ", 3)
    word += 3
    memcpy(word, topic, <size_t>topic_length)
    word += topic_length
    word[0] = c' '
    memcpy(word + 1, broker_name, <size_t>broker_name_length)
    word += 1 + broker_name_length
    word[0] = c' '
    word += 1 + write_decimal(word + 1, _plus(park.slot_ms, 1))
    word[0] = c' '
    memcpy(word + 1, park.uniq_key, <size_t>park.uniq_key_length)
    word += 1 + park.uniq_key_length
    n = word - text                 # the text's bytes (size - n is the padding's share)
    i = 0
    while i + 3 <= n:
        chunk = (<uint64_t>text[i] << 16) | (<uint64_t>text[i + 1] << 8) | text[i + 2]
        out[at] = BASE64_URL[(chunk >> 18) & 63]
        out[at + 1] = BASE64_URL[(chunk >> 12) & 63]
        out[at + 2] = BASE64_URL[(chunk >> 6) & 63]
        out[at + 3] = BASE64_URL[chunk & 63]
        at += 4
        i += 3
    if i < n:
        chunk = <uint64_t>text[i] << 16
        if i + 1 < n:
            chunk |= <uint64_t>text[i + 1] << 8
        out[at] = BASE64_URL[(chunk >> 18) & 63]
        out[at + 1] = BASE64_URL[(chunk >> 12) & 63]
        out[at + 2] = BASE64_URL[(chunk >> 6) & 63] if i + 1 < n else c'='
        out[at + 3] = c'='
        at += 4
    return at


# --- Python face (tests) -------------------------------------------------------------------------

cdef int set_wheel(TimerSettings *settings, const unsigned char[:] wheel) except -1:
    if wheel is None:
        settings.wheel = NULL
        settings.wheel_slots = 0
        return 0
    if len(wheel) < SLOT_BYTES or len(wheel) % SLOT_BYTES:
        raise ValueError(f"a timerwheel of {len(wheel)} bytes")
    settings.wheel = &wheel[0]
    settings.wheel_slots = len(wheel) // SLOT_BYTES
    return 0


def redirect(bytes text not None, bytes topic not None, int32_t queue_id, bint enabled,
             int64_t max_delay_ms, int64_t precision_ms, bint congestion_possible,
             int64_t now_ms, bytes broker_name=b"", int64_t congest_limit=0, wheel=None):
    """``(outcome, stored properties without CLUSTER, recall handle)`` as the fast path decides
    for these properties (outcome: 1 parked, 0 stored as is, -1 the handler's; the other two
    None unless parked); ``wheel``: the timerwheel's bytes (a buffer) the congestion rule
    reads."""
    cdef TimerSettings settings
    cdef TimerPark park
    cdef Py_ssize_t out_length = 0, handle_length
    cdef bytearray out = bytearray(len(text) + 64 + len(topic) + 1)
    cdef bytearray handle
    cdef int outcome
    settings.enabled = enabled
    settings.congestion_possible = congestion_possible
    settings.congest_limit = congest_limit
    set_wheel(&settings, wheel)
    settings.max_delay_ms = max_delay_ms
    settings.precision_ms = precision_ms
    outcome = timer_redirect(<const unsigned char *>text, len(text),
                             <const unsigned char *>topic, len(topic), queue_id, &settings,
                             now_ms, <unsigned char *>out, &out_length, &park)
    if outcome != TIMER_PARKED:
        return outcome, None, None
    handle = bytearray(recall_handle_bytes(len(topic), len(broker_name), &park))
    handle_length = recall_handle(<unsigned char *>handle, <const unsigned char *>topic,
                                  len(topic), <const unsigned char *>broker_name,
                                  len(broker_name), &park)
    if handle_length != len(handle):
        raise AssertionError(f"recall handle of {handle_length} bytes, {len(handle)} reserved")
    return outcome, bytes(out[:out_length]), bytes(handle)
