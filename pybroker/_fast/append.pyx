# pybroker._fast.append: the appender's drain loop (send ring -> CommitLog map) without Python.
"""The appender's per-message work in C (design.md §2 rule 3, issue #9 item 3).

:class:`TopicQueueOffsets` is the next queue offset per (topic, queue id), a C hash map
(``tqmap.h``) the drain loop reads and advances directly; Python sees it through a small API.

:func:`RingDrainer.drain` takes put requests (layout: ``put_request.pxd``) from one send ring
and, per request, without touching a Python object: validates the header, takes the queue
offset (0 for PREPARED/ROLLBACK transaction records, which do not advance the queue), patches
queue offset, physical offset and store time of every record in the ring slot, copies the run
into the mapped CommitLog file in one ``memcpy``, advances the queue offset and pushes the
completion (not yet published: the caller publishes once per drain). It stops when the ring
is empty, when the completion ring has no free slot, or when the next run does not fit in the
current file (the caller writes the BLANK marker, rolls to the next file and calls again).
A request that cannot be appended completes with its status (MESSAGE_ILLEGAL for a bad header
or records that do not parse, MESSAGE_SIZE_EXCEEDED for a run no file can hold, or the
``refuse_status`` the caller passes while the disk is full or no file can be created).

Fast failure (pybroker/proc/fast_failure.py, handshake in pybroker/store/control_block.py):
given the control block's words, every peeked batch is claimed before it is touched - the last
request id of the batch is stored as ``taken_request_id``, a full fence, then the producer's
``cancel_request_id`` is loaded - and the requests up to that id complete with the cancelled
status (TIMEOUT_CLEAN_QUEUE: the producer answered them busy already), never stored.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_WRITABLE
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcpy

from pybroker._fast.debug cimport PYBROKER_DEBUG, debug_bounds, debug_check
from pybroker._fast.put_request cimport (PUT_REQUEST_ID_POSITION, PUT_QUEUE_ID_POSITION,
                                         PUT_COUNT_POSITION, PUT_SYS_FLAG_POSITION,
                                         PUT_FLAGS_POSITION, PUT_TOPIC_LENGTH_POSITION,
                                         PUT_TOPIC_POSITION, PUT_REQUEST_ALIGN_BYTES,
                                         PUT_TOPIC_MAX_BYTES)
from pybroker._fast.record cimport (RecordFields, RecordStatus, RECORD_STATUS_OK,
                                    BLANK_RECORD_BYTES, parse_record,
                                    patch_fields, patch_run_c)
from pybroker._fast.ring cimport (ByteRing, CompletionRing, RING_CORRUPT,
                                  RING_RECORD_LENGTH_BYTES, RING_RECORD_ALIGN_BYTES,
                                  pb_ring_load_u32, pb_load_acquire_u64, pb_store_release_u64,
                                  pb_fence)
from pybroker._fast.tqmap cimport (pb_tq_entry, pb_tq_init, pb_tq_free, pb_tq_topic,
                                   pb_tq_find, pb_tq_upsert, pb_tq_remove)

from pybroker._fast.ring import RingCorruptError
from pybroker.protocol import constants

# Why a drain call stopped.
cpdef enum:
    DRAIN_DONE = 0            # the ring had no more committed requests (after at most 2 runs)
    DRAIN_BLOCKED = 1         # the completion ring is full
    DRAIN_ROLL = 2            # the next run does not fit: roll the file, call again
    DRAIN_NO_MEMORY = 3       # the queue-offset map could not grow

# The layout positions as Python sees them (pybroker/proc/ring_format.py checks its struct).
PUT_REQUEST_LAYOUT = {
    "request_id": PUT_REQUEST_ID_POSITION, "queue_id": PUT_QUEUE_ID_POSITION,
    "count": PUT_COUNT_POSITION, "sys_flag": PUT_SYS_FLAG_POSITION,
    "flags": PUT_FLAGS_POSITION, "topic_length": PUT_TOPIC_LENGTH_POSITION,
    "topic": PUT_TOPIC_POSITION, "align": PUT_REQUEST_ALIGN_BYTES,
    "topic_max_bytes": PUT_TOPIC_MAX_BYTES,
}

# Transaction types of the protocol's one table (sysFlag bits).
cdef int32_t _TRANSACTION_MASK = constants.TRANSACTION_TYPE_MASK
cdef int32_t _PREPARED = constants.MessageSysFlag.TRANSACTION_PREPARED_TYPE
cdef int32_t _ROLLBACK = constants.MessageSysFlag.TRANSACTION_ROLLBACK_TYPE


cdef inline bint _valid_utf8(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    # Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF), as Python decodes.
    cdef Py_ssize_t i = 0
    cdef Py_ssize_t k
    cdef unsigned char c
    cdef int need
    while i < n:
        c = p[i]
        if c < 0x80:
            i += 1
            continue
        if 0xC2 <= c <= 0xDF:
            need = 1
        elif 0xE0 <= c <= 0xEF:
            need = 2
        elif 0xF0 <= c <= 0xF4:
            need = 3
        else:
            return False
        if i + need >= n:
            return False
        if (c == 0xE0 and p[i + 1] < 0xA0) or (c == 0xED and p[i + 1] > 0x9F) \
                or (c == 0xF0 and p[i + 1] < 0x90) or (c == 0xF4 and p[i + 1] > 0x8F):
            return False
        for k in range(1, need + 1):
            if p[i + k] & 0xC0 != 0x80:
                return False
        i += need + 1
    return True


cdef class TopicQueueOffsets:
    """Next queue offset per (topic, queue id) in a C map (0 for a queue never seen).

    Topics are UTF-8 bytes inside; Python passes and gets ``str``."""

    def __cinit__(self):
        if pb_tq_init(&self.map, 64) != 0:
            raise MemoryError("topic-queue offset map")

    def __dealloc__(self):
        pb_tq_free(&self.map)

    def __len__(self):
        return self.map.count

    def get(self, str topic, int32_t queue_id):
        """The next queue offset of the queue; 0 when unknown."""
        cdef bytes name = topic.encode()
        cdef pb_tq_entry *entry = pb_tq_find(&self.map, <const unsigned char *>name,
                                             len(name), queue_id)
        return entry.value if entry != NULL else 0

    def set(self, str topic, int32_t queue_id, int64_t value):
        """Set the next queue offset of the queue."""
        cdef bytes name = topic.encode()
        cdef pb_tq_entry *entry = pb_tq_upsert(&self.map, <const unsigned char *>name,
                                               len(name), queue_id, value)
        if entry == NULL:
            raise MemoryError("topic-queue offset map")
        entry.value = value

    def remove(self, str topic, int32_t queue_id):
        """Forget the queue; True when it was known."""
        cdef bytes name = topic.encode()
        return pb_tq_remove(&self.map, <const unsigned char *>name, len(name), queue_id) == 1

    def clear(self):
        """Forget every queue."""
        pb_tq_free(&self.map)
        if pb_tq_init(&self.map, 64) != 0:
            raise MemoryError("topic-queue offset map")

    def items(self):
        """[(topic, queue_id, next queue offset)] in no particular order."""
        cdef size_t i
        cdef pb_tq_entry *entry
        found = []
        for i in range(self.map.capacity):
            entry = &self.map.entries[i]
            if entry.hash != 0:
                found.append((pb_tq_topic(&self.map, entry)[:entry.topic_length].decode(),
                              entry.queue_id, entry.value))
        return found


cdef class RingDrainer:
    """Drains send rings into the CommitLog for one appender.

    ``offsets`` is the CommitLog's :class:`TopicQueueOffsets`; the status codes are the
    completion codes (``pybroker.proc.ring_format.status_code``) of PUT_OK, MESSAGE_ILLEGAL,
    MESSAGE_SIZE_EXCEEDED and of the status a withdrawn request completes with."""

    def __init__(self, TopicQueueOffsets offsets, int32_t ok_code, int32_t illegal_code,
                 int32_t size_exceeded_code, int32_t cancelled_code=-1):
        self.offsets = offsets
        self.ok_code = ok_code
        self.illegal_code = illegal_code
        self.size_exceeded_code = size_exceeded_code
        self.cancelled_code = cancelled_code
        self.has_control = False

    def __dealloc__(self):
        if self.has_control:
            PyBuffer_Release(&self.control)

    def bind_control(self, words):
        """Claim batches through ``words`` (the control block's writable map) from now on."""
        if self.cancelled_code < 0:
            raise ValueError("a drainer that claims batches needs a cancelled status code")
        if self.has_control:
            PyBuffer_Release(&self.control)
            self.has_control = False
        PyObject_GetBuffer(words, &self.control, PyBUF_WRITABLE)
        self.has_control = True

    def release_control(self):
        """Drop the control block's buffer (before it is unmapped)."""
        if self.has_control:
            PyBuffer_Release(&self.control)
            self.has_control = False

    def drain(self, ByteRing ring, CompletionRing completions, file_buffer,
              int64_t position, int64_t file_from_offset, int64_t store_timestamp,
              int32_t refuse_status=-1, Py_ssize_t taken_offset=-1,
              Py_ssize_t cancel_offset=-1):
        """Append what ``ring`` holds into ``file_buffer`` (the writable map of the current
        CommitLog file, starting at file position ``position``; None while refusing) and push
        the completions. ``taken_offset`` / ``cancel_offset``: byte offsets, in the bound
        control block, of this ring's taken_request_id and its producer's cancel_request_id
        (-1: no claim). Returns (stop, requests taken, records appended, requests failed,
        new file position, producer was asleep: signal it)."""
        cdef Py_buffer view
        cdef DrainTarget target
        cdef bint has_view = False
        cdef bint wake_producer = False
        cdef int stop
        ring._check_open()
        completions._check_open()
        target.taken_word = target.cancel_word = NULL
        if taken_offset >= 0 or cancel_offset >= 0:
            if not self.has_control:
                raise ValueError("claiming needs bind_control() first")
            for offset in (taken_offset, cancel_offset):
                if offset < 0 or offset % 8 or offset + 8 > self.control.len:
                    raise ValueError(f"control word offset {offset} outside the block")
            target.taken_word = <uint64_t *>(<unsigned char *>self.control.buf + taken_offset)
            target.cancel_word = <uint64_t *>(<unsigned char *>self.control.buf + cancel_offset)
        target.cancelled_up_to = 0
        target.file_data = NULL
        target.file_size = 0
        if file_buffer is not None:
            PyObject_GetBuffer(file_buffer, &view, PyBUF_WRITABLE)
            has_view = True
            target.file_data = <unsigned char *>view.buf
            target.file_size = view.len
        elif refuse_status < 0:
            raise ValueError("no CommitLog file to append to and no status to refuse with")
        if position < 0 or position > target.file_size:
            if has_view:
                PyBuffer_Release(&view)
            raise ValueError(f"file position {position} outside the file")
        target.position = position
        target.file_from_offset = file_from_offset
        target.store_timestamp = store_timestamp
        target.refuse_status = refuse_status
        target.taken = target.appended = target.failed = 0
        try:
            with nogil:
                stop = self._drain(ring, completions, &target, &wake_producer)
        finally:
            if has_view:
                PyBuffer_Release(&view)
        if stop == RING_CORRUPT:
            raise RingCorruptError("send ring holds an impossible cursor or record length")
        return (stop, target.taken, target.appended, target.failed, target.position,
                wake_producer)

    cdef int _drain(self, ByteRing ring, CompletionRing completions, DrainTarget *target,
                    bint *wake_producer) noexcept nogil:
        cdef uint64_t free, count, start, end, offset, length, index
        cdef int run, stop
        for run in range(2):     # a run stops at the ring's wrap: a second peek takes the rest
            free = completions.free_slots_c()
            if free == 0:
                return DRAIN_BLOCKED
            if ring.peek_c(free, &count, &start, &end) != 0:
                return RING_CORRUPT
            if count == 0:
                return DRAIN_DONE
            if target.taken_word != NULL:
                _claim(ring._data, start, count, target)
            offset = start
            stop = DRAIN_DONE
            for index in range(count):
                length = pb_ring_load_u32(ring._data + offset)
                stop = self._append_one(ring._data + offset + RING_RECORD_LENGTH_BYTES,
                                        <int64_t>length, completions, target)
                if stop != DRAIN_DONE:
                    break
                offset += (length + RING_RECORD_LENGTH_BYTES + RING_RECORD_ALIGN_BYTES - 1) \
                    & ~(<uint64_t>RING_RECORD_ALIGN_BYTES - 1)
                target.taken += 1
            if offset != start and ring.release_c(offset):
                wake_producer[0] = True
            if stop != DRAIN_DONE:
                return stop
        return DRAIN_DONE

    cdef int _append_one(self, unsigned char *request, int64_t length,
                         CompletionRing completions, DrainTarget *target) noexcept nogil:
        """One request: DRAIN_DONE when completed (either way), or why it was left."""
        cdef int64_t request_id, size, header, queue_offset, physical_offset, patched
        cdef int32_t queue_id, count, sys_flag, transaction_type
        cdef int16_t topic_length
        cdef unsigned char *records
        cdef pb_tq_entry *entry = NULL
        if length < PUT_TOPIC_POSITION:
            return RING_CORRUPT     # our own producer always writes a whole header
        memcpy(&request_id, request + PUT_REQUEST_ID_POSITION, 8)
        memcpy(&queue_id, request + PUT_QUEUE_ID_POSITION, 4)
        memcpy(&count, request + PUT_COUNT_POSITION, 4)
        memcpy(&sys_flag, request + PUT_SYS_FLAG_POSITION, 4)
        memcpy(&topic_length, request + PUT_TOPIC_LENGTH_POSITION, 2)
        header = (PUT_TOPIC_POSITION + topic_length + PUT_REQUEST_ALIGN_BYTES - 1) \
            & ~(<int64_t>PUT_REQUEST_ALIGN_BYTES - 1)
        size = length - header
        if 0 < request_id <= target.cancelled_up_to:
            # Answered busy by its producer already (fast failure): never stored.
            return self._complete(completions, target, request_id, self.cancelled_code)
        if target.refuse_status >= 0:
            return self._complete(completions, target, request_id, target.refuse_status)
        if topic_length <= 0 or topic_length > PUT_TOPIC_MAX_BYTES or size <= 0 or count <= 0 \
                or not _valid_utf8(request + PUT_TOPIC_POSITION, topic_length):
            return self._complete(completions, target, request_id, self.illegal_code)
        if size + BLANK_RECORD_BYTES > target.file_size:
            return self._complete(completions, target, request_id, self.size_exceeded_code)
        if size + BLANK_RECORD_BYTES > target.file_size - target.position:
            return DRAIN_ROLL
        records = request + header
        physical_offset = target.file_from_offset + target.position
        transaction_type = sys_flag & _TRANSACTION_MASK
        if transaction_type == _PREPARED or transaction_type == _ROLLBACK:
            queue_offset = 0
            patched = _patch_each(records, size, physical_offset, target.store_timestamp)
        else:
            entry = pb_tq_upsert(&self.offsets.map, request + PUT_TOPIC_POSITION,
                                 <size_t>topic_length, queue_id, 0)
            if entry == NULL:
                return DRAIN_NO_MEMORY
            queue_offset = entry.value
            patched = patch_run_c(records, 0, size, physical_offset, queue_offset,
                                  target.store_timestamp)
        if patched != count:
            return self._complete(completions, target, request_id, self.illegal_code)
        if PYBROKER_DEBUG:
            debug_bounds(target.position, size + BLANK_RECORD_BYTES, target.file_size,
                         "appender: records and the file's end mark past the mapped file")
            debug_bounds(header, size, length, "appender: records past their put request")
            debug_check(queue_offset >= 0, "appender: negative queue offset", queue_offset, 0)
        # Patched in the ring slot first and copied once: a crash mid-copy never leaves
        # whole-looking but unpatched records in the map.
        memcpy(target.file_data + target.position, records, <size_t>size)
        target.position += size
        if entry != NULL:
            entry.value = queue_offset + count
        completions.push_c(request_id, self.ok_code, count, physical_offset, queue_offset)
        target.appended += count
        return DRAIN_DONE

    cdef int _complete(self, CompletionRing completions, DrainTarget *target,
                       int64_t request_id, int32_t status) noexcept nogil:
        completions.push_c(request_id, status, 0, 0, 0)
        target.failed += 1
        return DRAIN_DONE


cdef void _claim(const unsigned char *data, uint64_t start, uint64_t count,
                 DrainTarget *target) noexcept nogil:
    """Publish the last request id of the peeked batch as taken, fence, then load how far the
    producer withdrew requests (the handshake of pybroker/store/control_block.py)."""
    cdef uint64_t offset = start
    cdef uint64_t last = start
    cdef uint64_t index, length
    cdef int64_t request_id = 0
    for index in range(count):
        last = offset
        length = pb_ring_load_u32(data + offset)
        offset += (length + RING_RECORD_LENGTH_BYTES + RING_RECORD_ALIGN_BYTES - 1) \
            & ~(<uint64_t>RING_RECORD_ALIGN_BYTES - 1)
    if pb_ring_load_u32(data + last) >= 8:
        memcpy(&request_id, data + last + RING_RECORD_LENGTH_BYTES + PUT_REQUEST_ID_POSITION, 8)
    if request_id > 0:
        pb_store_release_u64(target.taken_word, <uint64_t>request_id)
    pb_fence()
    target.cancelled_up_to = <int64_t>pb_load_acquire_u64(target.cancel_word)


cdef int64_t _patch_each(unsigned char *records, int64_t size, int64_t physical_offset,
                         int64_t store_timestamp) noexcept nogil:
    """Transaction halves and rollbacks: every record gets queue offset 0; the record count,
    or -1 (nothing patched) unless the run is whole records."""
    cdef RecordFields f
    cdef int64_t at = 0
    cdef int64_t count = 0
    while at < size:
        if parse_record(records, at, size, 0, &f) != RECORD_STATUS_OK:
            return -1
        at += f.total_size
        count += 1
    at = 0
    while at < size:
        parse_record(records, at, size, 0, &f)
        patch_fields(records, &f, 0, physical_offset + at, store_timestamp)
        at += f.total_size
    return count
