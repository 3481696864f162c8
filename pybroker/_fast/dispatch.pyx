# pybroker._fast.dispatch: reput in C - CommitLog records -> consume-queue units + index keys.
"""The dispatcher's per-record work without Python objects (issue #9 item 3).

:class:`ReputScanner` walks whole records of one mapped CommitLog file and, per record, writes
its consume-queue unit (physical offset, size, tags code) into the queue's last file and its
index entries (``topic#UNIQ_KEY``, ``topic#k`` per KEYS entry) into the newest IndexFile, with
exactly the rules of :class:`pybroker.store.dispatch.Dispatcher` and
:meth:`pybroker.store.index_file.IndexFile.put_key`. Files are bound by the Python dispatcher
for the duration of one call (``bind_queue`` / ``bind_index``, released by ``release``), so
no map stays exported between calls.

A scan stops (the record left for the caller, nothing of it written) with:

* ``SCAN_NEED_QUEUE``: the record's queue is not bound; ``stopped_queue()`` names it;
* ``SCAN_NEED_INDEX``: the record has keys and no index file is bound;
* ``SCAN_PYTHON``: a case the Python dispatcher handles for this one record (schedule topic,
  a queue whose last file is full or would need fillers, a unit gap, a full index file);
* ``SCAN_BLANK`` (the file's BLANK marker), ``SCAN_END`` (end of data or a record not yet
  whole), ``SCAN_CORRUPT`` (a damaged record), or ``SCAN_DONE`` at ``end``.

With a queue offset table (pybroker/store/queue_offsets.py) each queue is bound with the
position of its word there, and ``publish_offsets`` stores, in one call a batch, the max offset
of every queue written since the last one: its bound file's end in units, as
``ConsumeQueue.max_offset_in_queue`` reads it (the bound file is the queue's last one: the
scanner never rolls a file).

Units go only where the Python rule puts them: a unit whose record ends at or below the
queue's last dispatched physical offset, or whose queue offset is below the file's write
position, is skipped as already written (re-dispatch after recovery).
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from cpython.mem cimport PyMem_Malloc, PyMem_Free, PyMem_Realloc
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memcmp, memset

from pybroker._fast.debug cimport PYBROKER_DEBUG, debug_bounds
from pybroker._fast.hton cimport pb_pack_int32, pb_pack_int64, pb_unpack_int32, pb_unpack_int64
from pybroker._fast.jhash cimport java_hash_continue_utf8
from pybroker._fast.ring cimport pb_store_release_u64
from pybroker._fast.record cimport (RecordFields, RecordStatus, RECORD_STATUS_OK,
                                    RECORD_STATUS_BLANK, RECORD_STATUS_END,
                                    RECORD_STATUS_TRUNCATED, parse_record)
from pybroker._fast.tqmap cimport (pb_tq_entry, pb_tq_init, pb_tq_free, pb_tq_find,
                                   pb_tq_upsert)

from pybroker.protocol import constants

cpdef enum:
    SCAN_DONE = 0
    SCAN_BLANK = 1
    SCAN_END = 2
    SCAN_CORRUPT = 3
    SCAN_NEED_QUEUE = 4
    SCAN_NEED_INDEX = 5
    SCAN_PYTHON = 6

cdef enum:
    # Consume-queue unit and IndexFile layout (protocol.md §4.4, §4.5; store/layout.py has the
    # same table, a unit test compares them through LAYOUT).
    CQ_UNIT_SIZE = 20
    CQ_UNIT_SIZE_POSITION = 8
    CQ_UNIT_TAGS_CODE_POSITION = 12
    INDEX_HEADER_SIZE = 40
    INDEX_BEGIN_TIMESTAMP_POSITION = 0
    INDEX_END_TIMESTAMP_POSITION = 8
    INDEX_BEGIN_PHY_OFFSET_POSITION = 16
    INDEX_END_PHY_OFFSET_POSITION = 24
    INDEX_HASH_SLOT_COUNT_POSITION = 32
    INDEX_INDEX_COUNT_POSITION = 36
    INDEX_HASH_SLOT_SIZE = 4
    INDEX_ENTRY_SIZE = 20
    INDEX_ENTRY_PHY_OFFSET_POSITION = 4
    INDEX_ENTRY_TIME_DIFF_POSITION = 12
    INDEX_ENTRY_PREV_POSITION = 16
    INDEX_FIRST_ENTRY = 1
    NAME_VALUE_SEPARATOR = 1      # \x01 between a property's name and value
    PROPERTY_SEPARATOR = 2        # \x02 after each property
    KEY_SEPARATOR = 32            # " " between KEYS entries
    INDEX_KEY_JOINER = 35         # "#" between topic and key
    INT32_MAX = 0x7FFFFFFF

LAYOUT = {"cq_unit_size": CQ_UNIT_SIZE, "cq_unit_size_position": CQ_UNIT_SIZE_POSITION,
          "cq_unit_tags_code_position": CQ_UNIT_TAGS_CODE_POSITION,
          "index_header_size": INDEX_HEADER_SIZE,
          "index_end_phy_offset_position": INDEX_END_PHY_OFFSET_POSITION,
          "index_count_position": INDEX_INDEX_COUNT_POSITION,
          "index_entry_size": INDEX_ENTRY_SIZE,
          "index_entry_prev_position": INDEX_ENTRY_PREV_POSITION}

# Names from the protocol's one table; the pointers stay valid with the module's bytes.
cdef bytes _TAGS = constants.Property.TAGS.encode()
cdef bytes _KEYS = constants.Property.KEYS.encode()
cdef bytes _UNIQ_KEY = constants.Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX.encode()
cdef bytes _SCHEDULE_TOPIC = constants.SystemTopic.SCHEDULE.encode()
cdef const unsigned char *TAGS_NAME = _TAGS
cdef const unsigned char *KEYS_NAME = _KEYS
cdef const unsigned char *UNIQ_KEY_NAME = _UNIQ_KEY
cdef const unsigned char *SCHEDULE_TOPIC = _SCHEDULE_TOPIC
cdef Py_ssize_t TAGS_LENGTH = len(_TAGS)
cdef Py_ssize_t KEYS_LENGTH = len(_KEYS)
cdef Py_ssize_t UNIQ_KEY_LENGTH = len(_UNIQ_KEY)
cdef Py_ssize_t SCHEDULE_TOPIC_LENGTH = len(_SCHEDULE_TOPIC)
cdef int32_t _TRANSACTION_MASK = constants.TRANSACTION_TYPE_MASK
cdef int32_t _PREPARED = constants.MessageSysFlag.TRANSACTION_PREPARED_TYPE
cdef int32_t _ROLLBACK = constants.MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
assert constants.NAME_VALUE_SEPARATOR == chr(NAME_VALUE_SEPARATOR)
assert constants.PROPERTY_SEPARATOR == chr(PROPERTY_SEPARATOR)
assert constants.KEY_SEPARATOR == chr(KEY_SEPARATOR)


cdef inline bint _same(const unsigned char *p, Py_ssize_t n, const unsigned char *name,
                       Py_ssize_t name_length) noexcept nogil:
    return n == name_length and memcmp(p, name, <size_t>n) == 0


cdef void _find_properties(const unsigned char *p, Py_ssize_t n,
                           WantedProperties *wanted) noexcept nogil:
    # name \x01 value \x02 ...; the last occurrence of a name wins, an empty value is absent
    # (pybroker.store.dispatch.property_value, which Java's decoder agrees with).
    cdef Py_ssize_t at = 0
    cdef Py_ssize_t item_end, name_end, value_length
    memset(wanted, 0, sizeof(WantedProperties))
    while at < n:
        item_end = at
        while item_end < n and p[item_end] != PROPERTY_SEPARATOR:
            item_end += 1
        name_end = at
        while name_end < item_end and p[name_end] != NAME_VALUE_SEPARATOR:
            name_end += 1
        if name_end < item_end:
            value_length = item_end - name_end - 1
            if _same(p + at, name_end - at, TAGS_NAME, TAGS_LENGTH):
                wanted.tags, wanted.tags_length = p + name_end + 1, value_length
            elif _same(p + at, name_end - at, KEYS_NAME, KEYS_LENGTH):
                wanted.keys, wanted.keys_length = p + name_end + 1, value_length
            elif _same(p + at, name_end - at, UNIQ_KEY_NAME, UNIQ_KEY_LENGTH):
                wanted.uniq_key, wanted.uniq_key_length = p + name_end + 1, value_length
        at = item_end + 1


cdef inline int32_t _index_key_hash(uint32_t topic_hash, const unsigned char *key,
                                    Py_ssize_t length) noexcept nogil:
    # abs(java_hash(topic + "#" + key)); 0 for Integer.MIN_VALUE (IndexFile.put_key).
    cdef uint32_t h = topic_hash * 31 + INDEX_KEY_JOINER
    cdef int32_t signed_hash = <int32_t>java_hash_continue_utf8(h, key, <size_t>length)
    if signed_hash == <int32_t>0x80000000:
        return 0
    return -signed_hash if signed_hash < 0 else signed_hash


cdef inline int64_t _index_count(const unsigned char *header) noexcept nogil:
    cdef int64_t count = pb_unpack_int32(header + INDEX_INDEX_COUNT_POSITION)
    return count if count > INDEX_FIRST_ENTRY else INDEX_FIRST_ENTRY


cdef inline bint _already_indexed(int64_t phy_offset, int64_t end_phy_offset,
                                  int64_t index_count) noexcept nogil:
    # store/index_file.py already_indexed: below the last indexed record's offset, or at it
    # once anything was indexed.
    if phy_offset != end_phy_offset:
        return phy_offset < end_phy_offset
    return end_phy_offset > 0 or index_count > INDEX_FIRST_ENTRY


cdef void _put_key(IndexTarget *index, int32_t key_hash, int64_t phy_offset,
                   int64_t store_timestamp) noexcept nogil:
    # IndexFile.put_key with room checked by the caller: entry, then slot, then the header.
    cdef unsigned char *base = <unsigned char *>index.view.buf
    cdef int64_t index_count = _index_count(base)
    cdef int64_t begin_timestamp = pb_unpack_int64(base + INDEX_BEGIN_TIMESTAMP_POSITION)
    cdef int64_t begin_phy_offset = pb_unpack_int64(base + INDEX_BEGIN_PHY_OFFSET_POSITION)
    cdef int32_t hash_slot_count = pb_unpack_int32(base + INDEX_HASH_SLOT_COUNT_POSITION)
    cdef unsigned char *slot = base + INDEX_HEADER_SIZE \
        + (key_hash % index.hash_slots) * INDEX_HASH_SLOT_SIZE
    cdef int64_t slot_value = pb_unpack_int32(slot)
    cdef int64_t time_diff = 0
    cdef unsigned char *entry
    if slot_value <= 0 or slot_value > index_count:
        slot_value = 0
    if index_count == INDEX_FIRST_ENTRY:
        begin_timestamp, begin_phy_offset = store_timestamp, phy_offset
    if begin_timestamp > 0:
        time_diff = store_timestamp - begin_timestamp
        time_diff = 0 if time_diff < 0 else time_diff // 1000
        if time_diff > INT32_MAX:
            time_diff = INT32_MAX
    entry = base + index.entries_position + index_count * INDEX_ENTRY_SIZE
    if PYBROKER_DEBUG:
        debug_bounds(index.entries_position + index_count * INDEX_ENTRY_SIZE, INDEX_ENTRY_SIZE,
                     index.view.len, "reput: index entry past the index file")
    pb_pack_int32(entry, key_hash)
    pb_pack_int64(entry + INDEX_ENTRY_PHY_OFFSET_POSITION, phy_offset)
    pb_pack_int32(entry + INDEX_ENTRY_TIME_DIFF_POSITION, <int32_t>time_diff)
    pb_pack_int32(entry + INDEX_ENTRY_PREV_POSITION, <int32_t>slot_value)
    pb_pack_int32(slot, <int32_t>index_count)
    if slot_value == 0:
        hash_slot_count += 1
    pb_pack_int64(base + INDEX_BEGIN_TIMESTAMP_POSITION, begin_timestamp)
    pb_pack_int64(base + INDEX_END_TIMESTAMP_POSITION, store_timestamp)
    pb_pack_int64(base + INDEX_BEGIN_PHY_OFFSET_POSITION, begin_phy_offset)
    pb_pack_int64(base + INDEX_END_PHY_OFFSET_POSITION, phy_offset)
    pb_pack_int32(base + INDEX_HASH_SLOT_COUNT_POSITION, hash_slot_count)
    pb_pack_int32(base + INDEX_INDEX_COUNT_POSITION, <int32_t>(index_count + 1))


cdef Py_ssize_t _count_keys(const unsigned char *keys, Py_ssize_t length) noexcept nogil:
    cdef Py_ssize_t count = 0
    cdef Py_ssize_t at = 0
    while at < length:
        if keys[at] != KEY_SEPARATOR and (at == 0 or keys[at - 1] == KEY_SEPARATOR):
            count += 1
        at += 1
    return count


cdef inline void _release(Py_buffer *view, bint *bound) noexcept:
    if bound[0]:
        bound[0] = False
        PyBuffer_Release(view)


cdef class ReputScanner:
    """Consume-queue and index writes of the reput in C (see the module docstring).

    ``index_enabled``: ``messageIndexEnable`` (records' keys are indexed only then)."""

    def __cinit__(self, bint index_enabled=True):
        if pb_tq_init(&self.queues, 64) != 0:
            raise MemoryError("reput queue map")
        self.slots = NULL
        self.slot_count = self.slot_capacity = 0
        self.index_enabled = index_enabled
        self.index.bound = False

    def __dealloc__(self):
        self._forget()

    cdef void _forget(self) noexcept:
        cdef Py_ssize_t i
        self._release_all()
        for i in range(self.slot_count):
            PyMem_Free(self.slots[i])
        PyMem_Free(self.slots)
        self.slots = NULL
        self.slot_count = self.slot_capacity = 0
        pb_tq_free(&self.queues)

    def forget(self):
        """Release every binding and forget every queue (their files were destroyed)."""
        self._forget()
        if pb_tq_init(&self.queues, 64) != 0:
            raise MemoryError("reput queue map")

    def release(self):
        """Release every bound map (call before any file may be closed; at the end of a
        dispatch call). Positions not yet taken with take_dirty() stay readable."""
        self._release_all()

    cdef void _release_all(self) noexcept:
        cdef Py_ssize_t i
        for i in range(self.slot_count):
            _release(&self.slots[i].view, &self.slots[i].bound)
        _release(&self.index.view, &self.index.bound)

    cdef QueueSlot *_slot_of(self, bytes topic, int32_t queue_id) except NULL:
        cdef pb_tq_entry *entry = pb_tq_upsert(&self.queues, <const unsigned char *>topic,
                                               len(topic), queue_id, self.slot_count)
        cdef QueueSlot **grown
        if entry == NULL:
            raise MemoryError("reput queue map")
        if entry.value < self.slot_count:
            return self.slots[entry.value]
        if self.slot_count == self.slot_capacity:
            grown = <QueueSlot **>PyMem_Realloc(
                self.slots, sizeof(QueueSlot *) * (self.slot_capacity * 2 + 16))
            if grown == NULL:
                raise MemoryError("reput queue slots")
            self.slots, self.slot_capacity = grown, self.slot_capacity * 2 + 16
        self.slots[self.slot_count] = <QueueSlot *>PyMem_Malloc(sizeof(QueueSlot))
        if self.slots[self.slot_count] == NULL:
            raise MemoryError("reput queue slot")
        memset(self.slots[self.slot_count], 0, sizeof(QueueSlot))
        self.slot_count += 1
        return self.slots[entry.value]

    def bind_queue(self, bytes topic, int32_t queue_id, file_buffer, int64_t file_from_offset,
                   int64_t wrote_position, int64_t last_dispatched_phy,
                   Py_ssize_t offset_word=-1):
        """Bind a queue's last file (its writable map, consume-queue offset of its first byte,
        file position of the next unit) and the queue's last dispatched physical offset;
        ``offset_word``: byte position of the queue's max-offset word in the table
        publish_offsets() stores into (-1: none). Returns the queue's slot number (stable
        until forget())."""
        cdef QueueSlot *slot = self._slot_of(topic, queue_id)
        cdef pb_tq_entry *entry = pb_tq_find(&self.queues, <const unsigned char *>topic,
                                             len(topic), queue_id)
        _release(&slot.view, &slot.bound)
        PyObject_GetBuffer(file_buffer, &slot.view, PyBUF_WRITABLE)
        if wrote_position < 0 or wrote_position > slot.view.len \
                or wrote_position % CQ_UNIT_SIZE or slot.view.len % CQ_UNIT_SIZE:
            PyBuffer_Release(&slot.view)
            raise ValueError(f"write position {wrote_position} in a consume-queue file of "
                             f"{slot.view.len} bytes")
        slot.bound = True
        slot.file_from_offset = file_from_offset
        slot.file_size = slot.view.len
        slot.wrote_position = wrote_position
        slot.last_dispatched_phy = last_dispatched_phy
        slot.offset_word = offset_word
        return entry.value

    def bind_index(self, file_buffer, int64_t hash_slots, int64_t index_max):
        """Bind the newest IndexFile's writable map with its slot and entry counts."""
        _release(&self.index.view, &self.index.bound)
        PyObject_GetBuffer(file_buffer, &self.index.view, PyBUF_WRITABLE)
        if hash_slots <= 0 or index_max <= INDEX_FIRST_ENTRY or self.index.view.len != \
                INDEX_HEADER_SIZE + hash_slots * INDEX_HASH_SLOT_SIZE \
                + index_max * INDEX_ENTRY_SIZE:
            PyBuffer_Release(&self.index.view)
            raise ValueError(f"index file of {self.index.view.len} bytes does not hold "
                             f"{hash_slots} slots and {index_max} entries")
        self.index.bound = True
        self.index.hash_slots = hash_slots
        self.index.index_max = index_max
        self.index.entries_position = INDEX_HEADER_SIZE + hash_slots * INDEX_HASH_SLOT_SIZE

    def take_dirty(self):
        """[(slot, file write position, last dispatched physical offset)] of the queues
        written since the last call."""
        cdef Py_ssize_t i
        written = []
        for i in range(self.slot_count):
            if self.slots[i].dirty:
                self.slots[i].dirty = False
                written.append((i, self.slots[i].wrote_position,
                                self.slots[i].last_dispatched_phy))
        return written

    def publish_offsets(self, table):
        """Release-store the max offset (units: the bound file's consume-queue offset and
        write position over the unit size) of each queue a unit was written to since the
        last call into its ``offset_word`` of ``table`` (a writable buffer of native 64-bit
        words), slot by slot, one store a queue; returns the number of stores. A queue bound
        without a word is passed over."""
        cdef Py_buffer view
        cdef Py_ssize_t i, stores = 0
        cdef QueueSlot *slot
        PyObject_GetBuffer(table, &view, PyBUF_WRITABLE)
        try:
            for i in range(self.slot_count):
                slot = self.slots[i]
                if not slot.unpublished:
                    continue
                slot.unpublished = False
                if slot.offset_word < 0:
                    continue
                if slot.offset_word > view.len - 8 or \
                        (<uintptr_t>view.buf + <uintptr_t>slot.offset_word) & 7:
                    raise ValueError(f"no 8-byte aligned word at offset {slot.offset_word} "
                                     f"of a {view.len}-byte table")
                pb_store_release_u64(
                    <uint64_t *>(<unsigned char *>view.buf + slot.offset_word),
                    <uint64_t>((slot.file_from_offset + slot.wrote_position) // CQ_UNIT_SIZE))
                stores += 1
            return stores
        finally:
            PyBuffer_Release(&view)

    def scan(self, buffer, Py_ssize_t position, Py_ssize_t end):
        """Dispatch whole records of ``buffer`` (one CommitLog file's map) from file position
        ``position`` up to ``end``. Returns (stop, position of the stopping record or end,
        records dispatched, store time of the last one (ms, 0 when none), and for
        SCAN_NEED_QUEUE the record's topic bytes and queue id, else None and 0)."""
        cdef Py_buffer view
        cdef int64_t count = 0
        cdef int stop
        PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
        try:
            if position < 0 or end < position or end > view.len:
                raise ValueError(f"range [{position}, {end}) outside a buffer of {view.len}")
            self.last_store_timestamp = 0
            with nogil:
                stop = self._scan(<const unsigned char *>view.buf, &position, end, &count)
            topic = None
            if stop == SCAN_NEED_QUEUE:
                topic = (<const unsigned char *>view.buf)[
                    self.stopped_topic_position:
                    self.stopped_topic_position + self.stopped_topic_length]
            return (stop, position, count, self.last_store_timestamp, topic,
                    self.stopped_queue_id if topic is not None else 0)
        finally:
            PyBuffer_Release(&view)

    cdef int _scan(self, const unsigned char *data, Py_ssize_t *position, Py_ssize_t end,
                   int64_t *count) noexcept nogil:
        cdef Py_ssize_t total_size = 0
        cdef int stop
        while position[0] < end:
            stop = self._dispatch_one(data, position[0], end, &total_size)
            if stop != SCAN_DONE:
                return stop
            position[0] += total_size
            count[0] += 1
        return SCAN_DONE

    cdef int _dispatch_one(self, const unsigned char *data, Py_ssize_t position,
                           Py_ssize_t end, Py_ssize_t *total_size) noexcept nogil:
        """One record: SCAN_DONE with its size when dispatched, else why it was left."""
        cdef RecordFields f
        cdef RecordStatus status = parse_record(data, position, end, 0, &f)
        cdef WantedProperties wanted
        cdef QueueSlot *slot = NULL
        cdef pb_tq_entry *entry
        cdef int32_t transaction_type
        cdef int64_t expect, keys_to_write = 0
        cdef bint write_unit = False
        cdef const unsigned char *header
        if status == RECORD_STATUS_BLANK:
            return SCAN_BLANK
        if status == RECORD_STATUS_END or status == RECORD_STATUS_TRUNCATED:
            return SCAN_END
        if status != RECORD_STATUS_OK:
            return SCAN_CORRUPT
        if _same(data + f.topic_position, f.topic_length, SCHEDULE_TOPIC,
                 SCHEDULE_TOPIC_LENGTH):
            return SCAN_PYTHON       # the tags code is a delivery time: the Python rule
        transaction_type = f.sys_flag & _TRANSACTION_MASK
        if transaction_type != _PREPARED and transaction_type != _ROLLBACK:
            entry = pb_tq_find(&self.queues, data + f.topic_position, <size_t>f.topic_length,
                               f.queue_id)
            if entry == NULL or not self.slots[entry.value].bound:
                self.stopped_topic_position = f.topic_position
                self.stopped_topic_length = f.topic_length
                self.stopped_queue_id = f.queue_id
                return SCAN_NEED_QUEUE
            slot = self.slots[entry.value]
            if f.physical_offset < 0 or f.queue_offset < 0:
                return SCAN_PYTHON
            if f.physical_offset + f.total_size > slot.last_dispatched_phy:
                expect = f.queue_offset * CQ_UNIT_SIZE
                if expect > slot.file_from_offset + slot.wrote_position \
                        or slot.wrote_position + CQ_UNIT_SIZE > slot.file_size:
                    return SCAN_PYTHON     # a gap, or the file is full: ConsumeQueue.put
                write_unit = expect == slot.file_from_offset + slot.wrote_position
        _find_properties(data + f.properties_position, f.properties_length, &wanted)
        if self.index_enabled and transaction_type != _ROLLBACK \
                and (wanted.keys_length > 0 or wanted.uniq_key_length > 0):
            if not self.index.bound:
                return SCAN_NEED_INDEX
            header = <const unsigned char *>self.index.view.buf
            if _index_count(header) >= self.index.index_max:
                return SCAN_PYTHON         # IndexService rolls to a new file
            if not _already_indexed(f.physical_offset,
                                    pb_unpack_int64(header + INDEX_END_PHY_OFFSET_POSITION),
                                    _index_count(header)):
                keys_to_write = (1 if wanted.uniq_key_length > 0 else 0) \
                    + _count_keys(wanted.keys, wanted.keys_length)
                if _index_count(header) + keys_to_write > self.index.index_max:
                    return SCAN_PYTHON
        if write_unit:
            _write_unit(slot, &f, &wanted)
        if keys_to_write:
            self._index_keys(data + f.topic_position, f.topic_length, &wanted,
                             f.physical_offset, f.store_timestamp)
        self.last_store_timestamp = f.store_timestamp
        total_size[0] = f.total_size
        return SCAN_DONE

    cdef void _index_keys(self, const unsigned char *topic, Py_ssize_t topic_length,
                          const WantedProperties *wanted, int64_t phy_offset,
                          int64_t store_timestamp) noexcept nogil:
        # topic#UNIQ_KEY, then topic#k for each non-empty space-separated KEYS entry.
        cdef uint32_t topic_hash = java_hash_continue_utf8(0, topic, <size_t>topic_length)
        cdef Py_ssize_t at = 0
        cdef Py_ssize_t start
        if wanted.uniq_key_length > 0:
            _put_key(&self.index, _index_key_hash(topic_hash, wanted.uniq_key,
                                                  wanted.uniq_key_length),
                     phy_offset, store_timestamp)
        while at < wanted.keys_length:
            while at < wanted.keys_length and wanted.keys[at] == KEY_SEPARATOR:
                at += 1
            start = at
            while at < wanted.keys_length and wanted.keys[at] != KEY_SEPARATOR:
                at += 1
            if at > start:
                _put_key(&self.index, _index_key_hash(topic_hash, wanted.keys + start,
                                                      at - start),
                         phy_offset, store_timestamp)


cdef void _write_unit(QueueSlot *slot, const RecordFields *f,
                      const WantedProperties *wanted) noexcept nogil:
    cdef unsigned char *unit = <unsigned char *>slot.view.buf + slot.wrote_position
    cdef int64_t tags_code = 0
    if wanted.tags_length > 0:
        tags_code = <int32_t>java_hash_continue_utf8(0, wanted.tags, <size_t>wanted.tags_length)
    if PYBROKER_DEBUG:
        debug_bounds(slot.wrote_position, CQ_UNIT_SIZE, slot.file_size,
                     "reput: consume-queue unit past its file")
    pb_pack_int64(unit, f.physical_offset)
    pb_pack_int32(unit + CQ_UNIT_SIZE_POSITION, f.total_size)
    pb_pack_int64(unit + CQ_UNIT_TAGS_CODE_POSITION, tags_code)
    slot.wrote_position += CQ_UNIT_SIZE
    slot.last_dispatched_phy = f.physical_offset + f.total_size
    slot.dirty = True
    slot.unpublished = True
