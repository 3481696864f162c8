# pybroker._fast.timer_reput: a due slot's parked records rewritten into re-put runs in C.
"""The timer's first delivery of parked messages, many records per call (architecture/timer.md).

A message parked on rmq_sys_wheel_timer is delivered to its REAL_TOPIC / REAL_QID with its
stored properties string plus ``TIMER_ENQUEUE_MS`` and ``TIMER_DEQUEUE_MS``
(broker/timer.py ``TimerStore._convert_text``, the rule this is kept equal to by
tests/unit/_fast/test_timer_reput.py). :meth:`TimerReputs.convert` does that for a chunk of
a slot at once: it parses each record, finds the four values the rule reads, writes the new
records into one buffer grouped per (real topic, queue, sys flag) in the order each group first
appears (records in their order within it), and cuts each group into runs as
``broker/timer_runs.py runs_of`` does; a record the slot's cancel marks name (REAL_TOPIC+UNIQ_KEY,
the first one in order per mark) is dropped. A record it does not take whole is left to the
Python rule (its index is returned): a roll (``eligible`` 0), a message due at enqueue
(enqueue time Long.MAX) or rolled before, a value the rule calls ambiguous, a cancel mark, no
usable destination, properties that are not valid UTF-8 (Java and the Python rule replace those
bytes), a result over Java's 32767-byte properties limit, or an unreadable record. No Python
object is made per record taken; per group, per run and per record dropped one tuple.

For each record it plans (not a roll, not due at enqueue, not rolled before, valid UTF-8) it
also reads the record's own delivery time: the put rule's C twin (_fast/send/timer.pyx
``timer_deliver_ms``, Java's precedence TIMER_DELAY_SEC > TIMER_DELAY_MS > TIMER_DELIVER_MS)
at the record's store timestamp; the timer's running slot takes it for the rows its enqueue
did not see (broker/timer_own.py; a time outside the slot is the slot's end there).
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memcmp, memcpy, memset
from libc.stdint cimport int32_t, int64_t, uint8_t

from pybroker._fast.digits cimport write_decimal, DECIMAL_BYTES_MAX
from pybroker._fast.record cimport (RecordFields, RecordParts, RecordStatus, RECORD_STATUS_OK,
                                    SHORT_LENGTH_MAX, SYS_FLAG_POSITION, BORN_HOST_POSITION,
                                    IPV4_ADDRESS_BYTES, IPV6_ADDRESS_BYTES, PORT_BYTES,
                                    BORN_HOST_V6_FLAG, STORE_HOST_V6_FLAG, parse_record,
                                    record_encoded_size, write_record)
from pybroker._fast.send.timer cimport timer_deliver_ms

CANCEL_KEYS_MAX = CANCEL_KEYS_MAX_COUNT
OWN_MS_NONE_VALUE = OWN_MS_NONE


cdef bint utf8_valid(const unsigned char *p, Py_ssize_t length) noexcept nogil:
    """Whether the bytes are well-formed UTF-8 (Unicode table 3-7: no overlong forms, no
    surrogates, nothing above U+10FFFF), exactly what Python's decoder takes unchanged."""
    cdef Py_ssize_t i = 0
    cdef unsigned char c, low, high
    cdef int more, k
    while i < length:
        c = p[i]
        if c < 0x80:
            i += 1
            continue
        low, high = 0x80, 0xBF
        if 0xC2 <= c <= 0xDF:
            more = 1
        elif 0xE0 <= c <= 0xEF:
            more = 2
            if c == 0xE0:
                low = 0xA0
            elif c == 0xED:
                high = 0x9F
        elif 0xF0 <= c <= 0xF4:
            more = 3
            if c == 0xF0:
                low = 0x90
            elif c == 0xF4:
                high = 0x8F
        else:
            return False
        if i + more >= length:
            return False
        if not (low <= p[i + 1] <= high):
            return False
        for k in range(2, more + 1):
            if not (0x80 <= p[i + k] <= 0xBF):
                return False
        i += more + 1
    return True


cdef Py_ssize_t find_last(const unsigned char *text, Py_ssize_t length,
                          const unsigned char *marker, Py_ssize_t marker_length) noexcept nogil:
    """Position of the last occurrence of marker in text, -1 when none."""
    cdef Py_ssize_t at = length - marker_length
    while at >= 0:
        if text[at] == marker[0] and memcmp(text + at, marker, <size_t>marker_length) == 0:
            return at
        at -= 1
    return -1


cdef bint find_value(const unsigned char *text, Py_ssize_t length, const unsigned char *marker,
                     Py_ssize_t marker_length, Span *value) noexcept nogil:
    """The value of the last pair of marker's name (marker = separator, name, separator), as
    TimerStore's _value finds it: start -1 when absent; False when that value is empty (the
    rule calls it ambiguous)."""
    cdef Py_ssize_t at = find_last(text, length, marker, marker_length)
    cdef Py_ssize_t start, end
    if at >= 0:
        start = at + marker_length
    elif length >= marker_length - 1 and \
            memcmp(text, marker + 1, <size_t>(marker_length - 1)) == 0:
        start = marker_length - 1
    else:
        value.start, value.length = -1, 0
        return True
    end = start
    while end < length and text[end] != PROPERTY_SEPARATOR:
        end += 1
    value.start, value.length = start, end - start
    return end > start


cdef bint contains(const unsigned char *text, Py_ssize_t length, const unsigned char *marker,
                   Py_ssize_t marker_length) noexcept nogil:
    return find_last(text, length, marker, marker_length) >= 0


cdef int64_t ascii_number(const unsigned char *text, Py_ssize_t length) noexcept nogil:
    """The value of a run of ASCII digits up to INT32_MAX, -1 otherwise."""
    cdef int64_t value = 0
    cdef Py_ssize_t i
    if length <= 0:
        return -1
    for i in range(length):
        if text[i] < 48 or text[i] > 57:
            return -1
        value = value * 10 + (text[i] - 48)
        if value > INT32_MAX_VALUE:
            return -1
    return value


cdef Py_ssize_t _set_keys(tuple cancel_keys, CancelKey *keys) except -1:
    # The cancel keys as C spans (the tuple keeps the bytes alive for the call).
    cdef Py_ssize_t count = len(cancel_keys), index
    cdef bytes key
    if count > CANCEL_KEYS_MAX_COUNT:
        raise ValueError(f"{count} cancel keys > {CANCEL_KEYS_MAX_COUNT}")
    for index in range(count):
        key = cancel_keys[index]
        keys[index].text = <const unsigned char *>key
        keys[index].length = len(key)
        keys[index].used = False
    return count


cdef bint _record_at(const Py_buffer *files, Py_ssize_t files_count, Py_ssize_t which,
                     int64_t start, int64_t size, Py_buffer *record) noexcept nogil:
    # Record ``which``/``start``/``size`` (convert's and assemble's spans) as buf and len of
    # ``record``; False when it does not lie within its file (-1: not readable).
    if which < 0 or which >= files_count or start < 0 or size < 0 or \
            start + size > files[which].len:
        return False
    record.buf = <char *>files[which].buf + start
    record.len = size
    return True


cdef int _check_lengths(Py_ssize_t count, const int64_t[::1] starts,
                        const int64_t[::1] sizes, const int64_t[::1] enqueue_ms,
                        const uint8_t[::1] eligible, int64_t[::1] positions,
                        int64_t[::1] own_ms) except -1:
    # convert's per-record arrays (positions and own_ms optional) all hold count items.
    if starts.shape[0] != count or sizes.shape[0] != count or \
            enqueue_ms.shape[0] != count or eligible.shape[0] != count or \
            (positions is not None and positions.shape[0] != count) or \
            (own_ms is not None and own_ms.shape[0] != count):
        raise ValueError("which, starts, sizes, enqueue_ms, eligible, positions and "
                         "own_ms differ in length")
    return 0


cdef void _per_record(const Item *items, Py_ssize_t count, int64_t[::1] positions,
                      int64_t[::1] own_ms) noexcept:
    # convert's optional answers per record: where its new record begins (-1: not written),
    # its own time.
    cdef Py_ssize_t index
    if positions is not None:
        for index in range(count):
            positions[index] = items[index].position \
                if items[index].group >= 0 and items[index].cancel_key < 0 else -1
    if own_ms is not None:
        for index in range(count):
            own_ms[index] = items[index].own_ms


cdef class TimerReputs:
    """The first-delivery rule over runs of records. ``names`` are the property names as
    UTF-8 bytes, in this order: REAL_TOPIC, REAL_QID, UNIQ_KEY, TIMER_DEL_UNIQKEY,
    TIMER_ENQUEUE_MS, TIMER_DEQUEUE_MS (protocol/constants.py is their one place)."""

    def __init__(self, bytes real_topic, bytes real_queue_id, bytes uniq_key, bytes delete_key,
                 bytes enqueue_name, bytes dequeue_name):
        cdef bytes marker
        cdef Py_ssize_t index
        markers = tuple(b"\x02" + name + b"\x01"
                        for name in (real_topic, real_queue_id, uniq_key, delete_key))
        rolled_mark = enqueue_name + b"\x01"
        self.names = (markers, rolled_mark, enqueue_name, dequeue_name)
        for index in range(VALUES_COUNT):
            marker = markers[index]
            self.markers[index] = <const unsigned char *>marker
            self.marker_lengths[index] = len(marker)
        self.rolled_mark, self.rolled_mark_length = rolled_mark, len(rolled_mark)
        self.enqueue_name, self.enqueue_name_length = enqueue_name, len(enqueue_name)
        self.dequeue_name, self.dequeue_name_length = dequeue_name, len(dequeue_name)

    def convert(self, list files, const int32_t[::1] which, const int64_t[::1] starts,
                const int64_t[::1] sizes, const int64_t[::1] enqueue_ms,
                const uint8_t[::1] eligible, int64_t dequeue_ms, Py_ssize_t run_records_max,
                Py_ssize_t run_bytes_max, tuple cancel_keys=(), int64_t[::1] positions=None,
                int64_t[::1] own_ms=None):
        """``(out, groups, runs, rest, cancelled)`` for the records (``i``: ``sizes[i]`` bytes
        at ``starts[i]`` of ``files[which[i]]``, -1 not readable) parked at ``enqueue_ms``,
        delivered at ``dequeue_ms``; one not readable or not ``eligible`` is left to Python.

        ``out`` holds the new records; ``groups`` is ``[(topic, queue_id, sys_flag, count)]``;
        ``runs`` is ``[(start, end, count, group index)]`` (bytes of ``out``, at most
        ``run_records_max`` records, a new run once one holds ``run_bytes_max`` bytes);
        ``rest`` the indexes left to the Python rule, in order. ``cancel_keys`` are the
        TIMER_DEL_UNIQKEY values (UTF-8, at most CANCEL_KEYS_MAX) of the slot's cancel marks
        not used yet: the first record (in order) a key names is dropped, and
        ``cancelled`` lists ``(record index, key index)`` of those. ``positions`` (optional,
        one per record) is filled with where each record's new record begins in ``out``, -1
        for a record not written there (what :func:`strip` and :func:`assemble` take).
        ``own_ms`` (optional) gets each record's own delivery time, the put rule's at its store
        timestamp (OWN_MS_NONE: not read; see the module docstring)."""
        cdef Py_ssize_t count = which.shape[0], files_count = len(files), opened = 0
        cdef Py_buffer *buffers = NULL
        cdef Py_buffer *views = NULL
        cdef Item *items = NULL
        cdef Group *groups = NULL
        cdef Py_ssize_t groups_count = 0, index, keys_count
        cdef CancelKey keys[CANCEL_KEYS_MAX_COUNT]
        _check_lengths(count, starts, sizes, enqueue_ms, eligible, positions, own_ms)
        keys_count = _set_keys(cancel_keys, keys)
        buffers = <Py_buffer *>PyMem_Malloc(sizeof(Py_buffer) * max(count, 1))
        views = <Py_buffer *>PyMem_Malloc(sizeof(Py_buffer) * max(files_count, 1))
        items = <Item *>PyMem_Malloc(sizeof(Item) * max(count, 1))
        groups = <Group *>PyMem_Malloc(sizeof(Group) * max(count, 1))
        if buffers == NULL or views == NULL or items == NULL or groups == NULL:
            PyMem_Free(buffers)
            PyMem_Free(views)
            PyMem_Free(items)
            PyMem_Free(groups)
            raise MemoryError()
        memset(items, 0, sizeof(Item) * max(count, 1))
        try:
            while opened < files_count:
                PyObject_GetBuffer(files[opened], &views[opened], PyBUF_SIMPLE)
                opened += 1
            for index in range(count):
                items[index].group = -1
                items[index].cancel_key = -1
                items[index].own_ms = OWN_MS_NONE
                # Only buf and len are read of a record's buffer (_plan, _write_one).
                if not eligible[index] or not _record_at(views, files_count, which[index],
                                                         starts[index], sizes[index],
                                                         &buffers[index]):
                    continue
                self._plan(&buffers[index], enqueue_ms[index], dequeue_ms, &items[index],
                           groups, &groups_count, keys, keys_count, own_ms is not None)
            result = self._write(buffers, items, count, groups, groups_count, enqueue_ms,
                                 dequeue_ms, run_records_max, run_bytes_max)
            _per_record(items, count, positions, own_ms)
            return result
        finally:
            while opened > 0:
                opened -= 1
                PyBuffer_Release(&views[opened])
            PyMem_Free(buffers)
            PyMem_Free(views)
            PyMem_Free(items)
            PyMem_Free(groups)

    cdef void _plan(self, const Py_buffer *source, int64_t enqueue_ms, int64_t dequeue_ms,
                    Item *item, Group *groups, Py_ssize_t *groups_count, CancelKey *keys,
                    Py_ssize_t keys_count, bint read_own) noexcept:
        # Decide whether the record is taken; when it is, its size, group and queue (and,
        # with read_own, its own delivery time).
        cdef RecordFields f
        cdef const unsigned char *data = <const unsigned char *>source.buf
        cdef const unsigned char *text
        cdef Span[VALUES_COUNT] values
        cdef Py_ssize_t length, index, added, properties_length
        cdef int64_t queue_id, size
        if enqueue_ms == INT64_MAX_VALUE:            # due at enqueue: the map path
            return
        if parse_record(data, 0, source.len, False, &f) != RECORD_STATUS_OK:
            return
        text, length = data + f.properties_position, f.properties_length
        if not utf8_valid(text, length) or contains(text, length, self.rolled_mark,
                                                     self.rolled_mark_length):
            return
        if read_own and timer_deliver_ms(text, length, f.store_timestamp, &item.own_ms) < 0:
            item.own_ms = OWN_MS_NONE
        for index in range(VALUES_COUNT):
            if not find_value(text, length, self.markers[index], self.marker_lengths[index],
                              &values[index]):
                return                      # ambiguous: the map decides
        if keys_count and values[VALUE_REAL_TOPIC].start >= 0 and \
                values[VALUE_UNIQ_KEY].start >= 0:
            item.cancel_key = _cancel_key_of(keys, keys_count, text,
                                             &values[VALUE_REAL_TOPIC], &values[VALUE_UNIQ_KEY])
            if item.cancel_key >= 0:        # dropped, before the metric (the rule's order)
                keys[item.cancel_key].used = True
                return
        if values[VALUE_DELETE_KEY].start >= 0 or values[VALUE_REAL_TOPIC].start < 0:
            return
        queue_id = ascii_number(text + values[VALUE_REAL_QUEUE_ID].start,
                                values[VALUE_REAL_QUEUE_ID].length) \
            if values[VALUE_REAL_QUEUE_ID].start >= 0 else -1
        if queue_id < 0:
            return
        item.separator = length > 0 and text[length - 1] != PROPERTY_SEPARATOR
        added = (item.separator + self.enqueue_name_length + 2 + _decimal_length(enqueue_ms)
                 + self.dequeue_name_length + 2 + _decimal_length(dequeue_ms))
        properties_length = length + added
        if properties_length > SHORT_LENGTH_MAX:
            return
        size = record_encoded_size(f.body_length, values[VALUE_REAL_TOPIC].length,
                                   properties_length, f.sys_flag)
        if size < 0:
            return
        item.size = size
        item.queue_id = <int32_t>queue_id
        item.topic = values[VALUE_REAL_TOPIC]
        item.topic.start += f.properties_position
        item.group = _group_of(groups, groups_count, data + item.topic.start,
                               item.topic.length, item.queue_id, f.sys_flag)
        groups[item.group].count += 1
        groups[item.group].bytes += size

    cdef tuple _write(self, Py_buffer *buffers, Item *items, Py_ssize_t count, Group *groups,
                      Py_ssize_t groups_count, const int64_t[::1] enqueue_ms,
                      int64_t dequeue_ms, Py_ssize_t run_records_max,
                      Py_ssize_t run_bytes_max):
        # Lay the groups out one after the other, write every record taken, cut the runs.
        cdef Py_ssize_t total = 0, index, group
        cdef unsigned char *out_data
        cdef unsigned char *scratch
        cdef list rest = [], group_list = [], runs = [], cancelled = []
        for group in range(groups_count):
            groups[group].position = total
            total += groups[group].bytes
        out = bytearray(total)
        out_data = <unsigned char *>PyByteArray_AS_STRING(out)
        scratch = <unsigned char *>PyMem_Malloc(SHORT_LENGTH_MAX + 1)
        if scratch == NULL:
            raise MemoryError()
        try:
            for index in range(count):
                group = items[index].group
                if items[index].cancel_key >= 0:
                    cancelled.append((index, items[index].cancel_key))
                    continue
                if group < 0:
                    rest.append(index)
                    continue
                items[index].position = groups[group].position
                groups[group].position += items[index].size
                self._write_one(&buffers[index], &items[index], out_data, scratch,
                                enqueue_ms[index], dequeue_ms)
        finally:
            PyMem_Free(scratch)
        for group in range(groups_count):
            group_list.append((PyUnicode_DecodeUTF8(<const char *>groups[group].topic,
                                                    groups[group].topic_length, "strict"),
                               groups[group].queue_id, groups[group].sys_flag,
                               groups[group].count))
            _cut_runs(items, count, group, run_records_max, run_bytes_max, runs)
        return out, group_list, runs, rest, cancelled

    cdef void _write_one(self, const Py_buffer *source, Item *item, unsigned char *out,
                         unsigned char *scratch, int64_t enqueue_ms,
                         int64_t dequeue_ms) noexcept:
        # The new record: the source's fields and body, the real topic and queue, the
        # properties string with the two pairs appended; offsets and store time zero.
        cdef RecordFields f
        cdef RecordParts parts
        cdef const unsigned char *data = <const unsigned char *>source.buf
        cdef Py_ssize_t at
        parse_record(data, 0, source.len, False, &f)
        at = f.properties_length
        memcpy(scratch, data + f.properties_position, <size_t>at)
        if item.separator:
            scratch[at] = PROPERTY_SEPARATOR
            at += 1
        at = _write_pair(scratch, at, self.enqueue_name, self.enqueue_name_length, enqueue_ms)
        at = _write_pair(scratch, at, self.dequeue_name, self.dequeue_name_length, dequeue_ms)
        parts.topic = data + item.topic.start
        parts.topic_length = item.topic.length
        parts.body = data + f.body_position
        parts.body_length = f.body_length
        parts.properties = scratch
        parts.properties_length = at
        parts.born_address = data + f.born_host_position
        parts.store_address = data + f.store_host_position
        f.queue_id = item.queue_id
        f.queue_offset = 0
        f.physical_offset = 0
        f.store_timestamp = 0
        f.prepared_transaction_offset = 0
        write_record(out + item.position, &f, &parts)


cdef inline Py_ssize_t _decimal_length(int64_t value) noexcept nogil:
    cdef unsigned char digits[DECIMAL_BYTES_MAX]
    return write_decimal(digits, value)


cdef Py_ssize_t _write_pair(unsigned char *out, Py_ssize_t at, const unsigned char *name,
                            Py_ssize_t length, int64_t value) noexcept nogil:
    # name, NAME_VALUE_SEPARATOR, decimal value, PROPERTY_SEPARATOR at out[at:]
    memcpy(out + at, name, <size_t>length)
    at += length
    out[at] = NAME_VALUE_SEPARATOR
    at += 1
    at += write_decimal(out + at, value)
    out[at] = PROPERTY_SEPARATOR
    return at + 1


cdef Py_ssize_t _cancel_key_of(const CancelKey *keys, Py_ssize_t keys_count,
                              const unsigned char *text, const Span *topic,
                              const Span *uniq_key) noexcept nogil:
    # The first unused key that is topic + '+' + uniq key, -1 when none.
    cdef Py_ssize_t index
    cdef const CancelKey *key
    for index in range(keys_count):
        key = &keys[index]
        if key.used or key.length != topic.length + 1 + uniq_key.length:
            continue
        if memcmp(key.text, text + topic.start, <size_t>topic.length) == 0 and \
                key.text[topic.length] == DELETE_KEY_SEPARATOR and \
                memcmp(key.text + topic.length + 1, text + uniq_key.start,
                       <size_t>uniq_key.length) == 0:
            return index
    return -1


cdef Py_ssize_t _group_of(Group *groups, Py_ssize_t *groups_count, const unsigned char *topic,
                          Py_ssize_t topic_length, int32_t queue_id,
                          int32_t sys_flag) noexcept nogil:
    # The group of (topic, queue_id, sys_flag), added at the end when new.
    cdef Py_ssize_t group
    cdef Group *found
    for group in range(groups_count[0] - 1, -1, -1):     # the last one is the likeliest
        found = &groups[group]
        if found.queue_id == queue_id and found.sys_flag == sys_flag and \
                found.topic_length == topic_length and \
                memcmp(found.topic, topic, <size_t>topic_length) == 0:
            return group
    group = groups_count[0]
    groups_count[0] += 1
    found = &groups[group]
    found.topic, found.topic_length = topic, topic_length
    found.queue_id, found.sys_flag = queue_id, sys_flag
    found.count, found.bytes, found.position = 0, 0, 0
    return group


cdef int _cut_runs(const Item *items, Py_ssize_t count, Py_ssize_t group,
                   Py_ssize_t run_records_max, Py_ssize_t run_bytes_max, list runs) except -1:
    # The group's records in runs: a new run once the last holds run_records_max records or
    # run_bytes_max bytes (TimerStore._put_all's rule).
    cdef Py_ssize_t index, start = -1, end = 0, records = 0
    for index in range(count):
        if items[index].group != group:
            continue
        if start >= 0 and (records >= run_records_max or end - start >= run_bytes_max):
            runs.append((start, end, records, group))
            start = -1
        if start < 0:
            start, end, records = items[index].position, items[index].position, 0
        end += items[index].size
        records += 1
    if start >= 0:
        runs.append((start, end, records, group))
    return 0


def restamp(bytearray out, int64_t converted_ms, int64_t dequeue_ms):
    """Rewrite TIMER_DEQUEUE_MS in every record of ``out`` (a :meth:`TimerReputs.convert`
    output made with ``dequeue_ms=converted_ms``, records back to back) to ``dequeue_ms``, in
    place: a run converted ahead of its slot's due time carries the time it is put, as one
    converted at due time does. The value is the last pair of each record's properties, the
    last field of a record: its digits are overwritten, nothing moves (the body CRC does not
    cover properties). False, ``out`` then partly rewritten and to be dropped, when the two
    values differ in length or a record does not end with the pair as convert writes it."""
    cdef unsigned char *data = <unsigned char *>PyByteArray_AS_STRING(out)
    cdef Py_ssize_t length = len(out), position = 0, size, end, digits
    cdef unsigned char text[DECIMAL_BYTES_MAX]
    digits = write_decimal(text, dequeue_ms)
    if _decimal_length(converted_ms) != digits:
        return False
    while position < length:
        if length - position < 4:
            return False
        size = (<Py_ssize_t>data[position] << 24) | (<Py_ssize_t>data[position + 1] << 16) | \
            (<Py_ssize_t>data[position + 2] << 8) | <Py_ssize_t>data[position + 3]
        end = position + size
        if size <= digits + 2 or end > length:
            return False
        if data[end - 1] != PROPERTY_SEPARATOR or \
                data[end - 2 - digits] != NAME_VALUE_SEPARATOR:
            return False
        memcpy(data + end - 1 - digits, text, <size_t>digits)
        position = end
    return True


cdef inline Py_ssize_t _be32(const unsigned char *p) noexcept nogil:
    return (<Py_ssize_t>p[0] << 24) | (<Py_ssize_t>p[1] << 16) | (<Py_ssize_t>p[2] << 8) | \
        <Py_ssize_t>p[3]


cdef inline Py_ssize_t _body_length_position(const unsigned char *record) noexcept nogil:
    # Where BODYLENGTH lies in a record (the hosts' sizes follow its sys flag); the body
    # follows it.
    cdef Py_ssize_t sys_flag = _be32(record + SYS_FLAG_POSITION)
    cdef Py_ssize_t born = IPV6_ADDRESS_BYTES if sys_flag & BORN_HOST_V6_FLAG \
        else IPV4_ADDRESS_BYTES
    cdef Py_ssize_t store = IPV6_ADDRESS_BYTES if sys_flag & STORE_HOST_V6_FLAG \
        else IPV4_ADDRESS_BYTES
    # born host + port, store timestamp, store host + port, reconsume times, prepared offset
    return BORN_HOST_POSITION + born + PORT_BYTES + 8 + store + PORT_BYTES + 4 + 8


cdef bint _body_of(const unsigned char *record, Py_ssize_t available, Py_ssize_t *start,
                   Py_ssize_t *length) noexcept nogil:
    # The body span of a convert output record within its first ``available`` bytes.
    cdef Py_ssize_t at, size
    if available < BORN_HOST_POSITION:
        return False
    size = _be32(record)
    at = _body_length_position(record)
    if size > available or at + 4 > size:
        return False
    start[0], length[0] = at + 4, _be32(record + at)
    return start[0] + length[0] <= size


def strip(const unsigned char[::1] out, const int64_t[::1] positions):
    """The recipes of a :meth:`TimerReputs.convert` output: each new record without its body
    (the parked record's body, which stays in the CommitLog), one after the other in the
    records' order (``positions``: convert's, -1 for a record not written). None when ``out``
    is not what convert wrote at those positions."""
    cdef Py_ssize_t count = positions.shape[0], length = out.shape[0], total = 0, index
    cdef Py_ssize_t position, size, body_start, body_length, at = 0
    cdef const unsigned char *data = &out[0] if length else NULL
    cdef unsigned char *target
    for index in range(count):
        position = positions[index]
        if position < 0:
            continue
        if position >= length or not _body_of(data + position, length - position,
                                              &body_start, &body_length):
            return None
        total += _be32(data + position) - body_length
    recipes = bytearray(total)
    target = <unsigned char *>PyByteArray_AS_STRING(recipes)
    for index in range(count):
        position = positions[index]
        if position < 0:
            continue
        _body_of(data + position, length - position, &body_start, &body_length)
        size = _be32(data + position)
        memcpy(target + at, data + position, <size_t>body_start)
        memcpy(target + at + body_start, data + position + body_start + body_length,
               <size_t>(size - body_start - body_length))
        at += size - body_length
    return recipes


cdef bint _recipe_parts(const unsigned char *recipe, Py_ssize_t available,
                       Py_ssize_t *body_start, Py_ssize_t *body_length,
                       Py_ssize_t *rest) noexcept nogil:
    # A recipe (a new record without its body) within its first ``available`` bytes: where
    # the body would begin, its length, and the bytes after it; False when cut short.
    cdef Py_ssize_t size
    if available < BORN_HOST_POSITION:
        return False
    size = _be32(recipe)
    body_start[0] = _body_length_position(recipe) + 4
    if body_start[0] > size or body_start[0] > available:
        return False
    body_length[0] = _be32(recipe + body_start[0] - 4)
    rest[0] = size - body_start[0] - body_length[0]
    return rest[0] >= 0 and body_start[0] + rest[0] <= available


cdef bint _parked_fits(const Py_buffer *record, Py_ssize_t body_start,
                       Py_ssize_t body_length) noexcept nogil:
    # The parked record reads whole, with its body where and as long as the recipe says.
    cdef RecordFields f
    return parse_record(<const unsigned char *>record.buf, 0, record.len, False, &f) == \
        RECORD_STATUS_OK and f.body_position == body_start and f.body_length == body_length


cdef inline void _write_assembled(unsigned char *target, const unsigned char *recipe,
                                  const unsigned char *parked, Py_ssize_t body_start,
                                  Py_ssize_t body_length, Py_ssize_t rest) noexcept nogil:
    # The new record: the recipe's head, the parked record's body, the recipe's tail.
    memcpy(target, recipe, <size_t>body_start)
    memcpy(target + body_start, parked + body_start, <size_t>body_length)
    memcpy(target + body_start + body_length, recipe + body_start, <size_t>rest)


cdef int _open_views(list buffers, Py_buffer *views, Py_ssize_t *opened) except -1:
    while opened[0] < len(buffers):
        PyObject_GetBuffer(buffers[opened[0]], &views[opened[0]], PyBUF_SIMPLE)
        opened[0] += 1
    return 0


cdef void _close_views(Py_buffer *views, Py_ssize_t *opened) noexcept:
    while opened[0] > 0:
        opened[0] -= 1
        PyBuffer_Release(&views[opened[0]])


def assemble(const unsigned char[::1] recipes, const int64_t[::1] positions, list buffers,
             const int32_t[::1] which, const int64_t[::1] starts, const int64_t[::1] sizes,
             Py_ssize_t out_length):
    """The convert output :func:`strip` made ``recipes`` of, rebuilt with each body copied
    from its parked record: record ``i`` is ``sizes[i]`` bytes at ``starts[i]`` of
    ``buffers[which[i]]`` (-1: not readable), so a whole mapped file is one buffer and no
    object is made per record. Byte for byte what convert wrote. None when a parked record
    cannot be read or its body is not where and as long as the recipe says (convert the
    records again then). :func:`prepare` is the same rule written straight into the ring."""
    cdef Py_ssize_t count = positions.shape[0], length = recipes.shape[0], index, at = 0
    cdef Py_ssize_t position, body_start, body_length, rest, buffers_count = len(buffers)
    cdef Py_ssize_t opened = 0
    cdef Py_buffer record
    cdef const unsigned char *source = &recipes[0] if length else NULL
    cdef unsigned char *target
    cdef Py_buffer *views
    if which.shape[0] != count or starts.shape[0] != count or sizes.shape[0] != count:
        raise ValueError("which, starts, sizes and positions differ in length")
    out = bytearray(out_length)
    target = <unsigned char *>PyByteArray_AS_STRING(out)
    views = <Py_buffer *>PyMem_Malloc(max(buffers_count, 1) * sizeof(Py_buffer))
    if views == NULL:
        raise MemoryError()
    try:
        _open_views(buffers, views, &opened)
        for index in range(count):
            position = positions[index]
            if position < 0:
                continue
            if not _record_at(views, buffers_count, which[index], starts[index], sizes[index],
                              &record) or \
                    not _recipe_parts(source + at, length - at, &body_start, &body_length,
                                      &rest) or \
                    position + body_start + body_length + rest > out_length or \
                    not _parked_fits(&record, body_start, body_length):
                return None
            _write_assembled(target + position, source + at,
                             <const unsigned char *>record.buf, body_start, body_length, rest)
            at += body_start + rest
    finally:
        _close_views(views, &opened)
        PyMem_Free(views)
    return out if at == length else None


cdef class Assembly:
    """A held chunk's runs ready to be written where they are put (the send ring's reserved
    space: ``_fast/send/take.pyx`` ``SendPath.put_assembled``), made by :func:`prepare`: every
    parked record checked against its recipe and TIMER_DEQUEUE_MS's new digits known, so
    :meth:`fill` cannot fail. Holds views of the parked records' files (and ``owner``, the
    read that found them) until :meth:`release`."""

    def __dealloc__(self):     # (C fields start zeroed: nothing held before prepare)
        self._free()

    cdef void _free(self) noexcept:
        _close_views(self._views, &self._views_count)
        PyMem_Free(self._views)
        PyMem_Free(self._pieces)
        PyMem_Free(self._run_first)
        PyMem_Free(self._run_bytes)
        self._views = NULL
        self._pieces = NULL
        self._run_first = NULL
        self._run_bytes = NULL
        self.runs = 0

    def release(self):
        """Drop the views and the read they came from (the runs cannot be written after)."""
        self._free()
        owner, self._owner = self._owner, None
        if owner is not None:
            owner.release()

    cdef void fill(self, Py_ssize_t run, unsigned char *target) noexcept nogil:
        cdef Py_ssize_t index, at = 0, end
        cdef const Piece *piece
        for index in range(self._run_first[run], self._run_first[run + 1]):
            piece = &self._pieces[index]
            _write_assembled(target + at, piece.recipe, piece.parked, piece.body_start,
                             piece.body_length, piece.rest)
            end = at + piece.body_start + piece.body_length + piece.rest
            memcpy(target + end - 1 - self._digits_length, self._digits,
                   <size_t>self._digits_length)
            at = end

    def run_bytes(self, Py_ssize_t run):
        """Bytes of run ``run``'s records."""
        self._check(run)
        return self._run_bytes[run]

    def run_records(self, Py_ssize_t run):
        """Records of run ``run``."""
        self._check(run)
        return self._run_first[run + 1] - self._run_first[run]

    def fill_into(self, Py_ssize_t run, unsigned char[::1] target not None):
        """Write run ``run``'s records at the start of ``target`` (what the ring's reserve
        does in place)."""
        self._check(run)
        if target.shape[0] < self._run_bytes[run]:
            raise ValueError(f"{target.shape[0]} bytes for a run of {self._run_bytes[run]}")
        self.fill(run, &target[0])

    cdef int _check(self, Py_ssize_t run) except -1:
        if not 0 <= run < self.runs:
            raise IndexError(f"run {run} of {self.runs}")
        return 0

    cdef bint _set_pieces(self, const unsigned char[::1] recipes,
                          const int64_t[::1] positions, const int64_t[::1] order,
                          const int32_t[::1] which, const int64_t[::1] starts,
                          const int64_t[::1] sizes, const unsigned char **recipe_of,
                          Py_ssize_t out_length) noexcept:
        # The pieces in the output's order, back to back from 0, each parked record checked
        # against its recipe, each recipe ending with TIMER_DEQUEUE_MS's pair (restamp's
        # rule: digits as long as the new ones).
        cdef Py_ssize_t index, record_index, position = 0, digits = self._digits_length
        cdef const unsigned char *end = &recipes[0] + recipes.shape[0] if recipes.shape[0] \
            else NULL
        cdef Py_buffer record
        cdef Piece *piece
        for index in range(order.shape[0]):
            record_index = order[index]
            if not 0 <= record_index < positions.shape[0] or \
                    recipe_of[record_index] == NULL or positions[record_index] != position:
                return False
            piece = &self._pieces[index]
            piece.recipe = recipe_of[record_index]
            _recipe_parts(piece.recipe, end - piece.recipe, &piece.body_start,
                          &piece.body_length, &piece.rest)
            if not _record_at(self._views, self._views_count, which[record_index],
                              starts[record_index], sizes[record_index], &record) or \
                    not _parked_fits(&record, piece.body_start, piece.body_length):
                return False
            if piece.rest < digits + 2 or \
                    piece.recipe[piece.body_start + piece.rest - 1] != PROPERTY_SEPARATOR or \
                    piece.recipe[piece.body_start + piece.rest - 2 - digits] != \
                    NAME_VALUE_SEPARATOR:
                return False
            piece.parked = <const unsigned char *>record.buf
            position += piece.body_start + piece.body_length + piece.rest
        return position == out_length

    cdef bint _set_runs(self, list cuts, Py_ssize_t pieces) except -1:
        # The runs: consecutive pieces of the output, as convert cut them.
        cdef Py_ssize_t run, index, first = 0, position = 0, start, end, records, size
        cdef const Piece *piece
        for run in range(len(cuts)):
            start, end, records = cuts[run][0], cuts[run][1], cuts[run][2]
            if start != position or records <= 0 or first + records > pieces:
                return False
            size = 0
            for index in range(first, first + records):
                piece = &self._pieces[index]
                size += piece.body_start + piece.body_length + piece.rest
            if start + size != end:
                return False
            self._run_first[run] = first
            self._run_bytes[run] = size
            first += records
            position = end
        if first != pieces:
            return False
        self._run_first[len(cuts)] = first
        self.runs = len(cuts)
        return True


def prepare(object recipes not None, const int64_t[::1] positions, const int64_t[::1] order,
            object spans not None, const int64_t[::1] sizes, Py_ssize_t out_length,
            list cuts, int64_t converted_ms, int64_t dequeue_ms):
    """The :class:`Assembly` of the convert output :func:`strip` made ``recipes`` of (the
    same records :func:`assemble` then :func:`restamp` give, run by run as ``cuts``: (start,
    end, count, group) of that output), the parked records where ``spans`` found them
    (``spans.buffers``, ``spans.which``, ``spans.starts``; record ``i`` ``sizes[i]`` bytes;
    released with the Assembly); ``order`` the records written, by position. None (nothing
    held: release ``spans``) when a parked record cannot be read or does not match its
    recipe, the output would not be convert's, or TIMER_DEQUEUE_MS cannot be rewritten in
    place (convert the records again then)."""
    cdef Assembly assembly = Assembly()
    cdef const unsigned char[::1] recipe_bytes = recipes
    cdef list buffers = spans.buffers
    cdef Py_ssize_t count = positions.shape[0], run_count = len(cuts)
    cdef const unsigned char **recipe_of
    if spans.which.shape[0] != count or spans.starts.shape[0] != count or \
            sizes.shape[0] != count:
        raise ValueError("which, starts, sizes and positions differ in length")
    if _decimal_length(converted_ms) != write_decimal(assembly._digits, dequeue_ms):
        return None
    assembly._digits_length = _decimal_length(dequeue_ms)
    assembly._recipes = recipes
    assembly._views = <Py_buffer *>PyMem_Malloc(max(len(buffers), 1) * sizeof(Py_buffer))
    assembly._pieces = <Piece *>PyMem_Malloc(max(order.shape[0], 1) * sizeof(Piece))
    assembly._run_first = <Py_ssize_t *>PyMem_Malloc((run_count + 1) * sizeof(Py_ssize_t))
    assembly._run_bytes = <Py_ssize_t *>PyMem_Malloc(max(run_count, 1) * sizeof(Py_ssize_t))
    recipe_of = <const unsigned char **>PyMem_Malloc(max(count, 1) * sizeof(void *))
    try:
        if assembly._views == NULL or assembly._pieces == NULL or \
                assembly._run_first == NULL or assembly._run_bytes == NULL or recipe_of == NULL:
            raise MemoryError()
        _open_views(buffers, assembly._views, &assembly._views_count)
        if not _recipes_of(recipe_bytes, positions, order.shape[0], recipe_of) or \
                not assembly._set_pieces(recipe_bytes, positions, order, spans.which,
                                         spans.starts, sizes, recipe_of, out_length) or \
                not assembly._set_runs(cuts, order.shape[0]):
            return None         # the Assembly goes, its views with it
    finally:
        PyMem_Free(recipe_of)
    assembly._owner = spans
    return assembly


cdef bint _recipes_of(const unsigned char[::1] recipes, const int64_t[::1] positions,
                      Py_ssize_t written, const unsigned char **recipe_of) noexcept:
    # Each written record's recipe (held one after the other in the records' order), NULL
    # for the others; False when the recipes are not ``written`` whole ones.
    cdef Py_ssize_t index, at = 0, body_start, body_length, rest, found = 0
    cdef Py_ssize_t length = recipes.shape[0]
    cdef const unsigned char *source = &recipes[0] if length else NULL
    for index in range(positions.shape[0]):
        recipe_of[index] = NULL
        if positions[index] < 0:
            continue
        if not _recipe_parts(source + at, length - at, &body_start, &body_length, &rest):
            return False
        recipe_of[index] = source + at
        at += body_start + rest
        found += 1
    return at == length and found == written
