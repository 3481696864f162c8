# pybroker._fast.ring: SPSC rings in shared memory (send records, completions), 64-bit atomics.
"""Single-producer single-consumer rings over a caller's mapped region, and atomic word helpers.

The region layout (header lines, data area) is the table in ``ring.pxd``. Cursors are monotonic
64-bit counts (bytes or slots ever published / released); a data-area position is
``cursor & (capacity - 1)``. The producer publishes with one release store per commit, the
consumer frees with one release store per release; neither ever blocks the other.

Byte-ring record (data area, 8-byte aligned, never wraps)::

    +0  length u32 (native)  = payload bytes, or 0xFFFFFFFF: padding up to the data area's end
    +4  payload              length bytes
        fill                 up to the next multiple of 8

A record of ``size`` payload bytes takes ``align8(4 + size)`` bytes; the largest is half the
capacity so that an empty ring always accepts it, whatever the wrap position.

Sleep flags: a side that is about to block sets its flag, fences, re-checks the other side's
cursor and only then blocks on its eventfd (pybroker.proc.wake). The other side, after
publishing, fences and checks the flag; if set it clears it (exchange) and reports True: the
caller writes the eventfd. At most one signal per sleep, none while the peer is awake.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from libc.stdint cimport uint32_t, uint64_t, int32_t, int64_t, uintptr_t
from libc.string cimport memcpy, memset

from pybroker._fast.debug cimport PYBROKER_DEBUG, debug_check

from pybroker.errors import BrokerError

# True in the debug build (`make debug`): the fast paths check their own invariants.
DEBUG_CHECKS = bool(PYBROKER_DEBUG)


class RingCorruptError(BrokerError):
    """A ring's shared cursors or record lengths are impossible: the peer broke the protocol."""


cdef inline uint64_t _record_total(uint64_t size) noexcept nogil:
    return (size + RING_RECORD_LENGTH_BYTES + RING_RECORD_ALIGN_BYTES - 1) \
        & ~(<uint64_t>RING_RECORD_ALIGN_BYTES - 1)


cdef inline bint _is_power_of_two(uint64_t value) noexcept nogil:
    return value != 0 and (value & (value - 1)) == 0


cdef unsigned char *_acquire_region(Py_buffer *view, object buffer,
                                    Py_ssize_t need_bytes) except NULL:
    """Acquire a writable, 8-byte aligned buffer of at least need_bytes (released on error)."""
    PyObject_GetBuffer(buffer, view, PyBUF_WRITABLE)
    if view.len < need_bytes:
        length = view.len
        PyBuffer_Release(view)
        raise ValueError(f"ring region of {length} bytes is smaller than {need_bytes} bytes")
    if (<uintptr_t>view.buf) & (RING_RECORD_ALIGN_BYTES - 1):
        PyBuffer_Release(view)
        raise ValueError("ring region must start at an 8-byte aligned address")
    return <unsigned char *>view.buf


cdef uint64_t _attach_capacity(const unsigned char *base, uint64_t magic,
                               Py_ssize_t region_bytes, uint64_t unit_bytes) except 0:
    """Check an initialised header; return its capacity (bytes or slots)."""
    if pb_load_acquire_u64(<const uint64_t *>(base + RING_MAGIC_OFFSET)) != magic:
        raise ValueError("region does not hold an initialised ring of this kind (bad magic)")
    cdef uint64_t capacity = pb_load_relaxed_u64(<const uint64_t *>(base + RING_CAPACITY_OFFSET))
    if not _is_power_of_two(capacity):
        raise RingCorruptError(f"ring capacity {capacity} is not a power of two")
    if <uint64_t>region_bytes < RING_HEADER_BYTES + capacity * unit_bytes:
        raise ValueError(f"region of {region_bytes} bytes is smaller than its ring")
    return capacity


cdef void _init_header(unsigned char *base, uint64_t magic, uint64_t capacity,
                       uint64_t data_bytes) noexcept nogil:
    # Zeroes the header and ``data_bytes`` of the data area (a completion ring's slots, which
    # it also pre-faults here, not on the first hot-path write).
    memset(base, 0, RING_HEADER_BYTES + data_bytes)
    pb_store_relaxed_u64(<uint64_t *>(base + RING_CAPACITY_OFFSET), capacity)
    pb_store_release_u64(<uint64_t *>(base + RING_MAGIC_OFFSET), magic)


cdef inline bint _take_flag(uint64_t *flag) noexcept nogil:
    # Called after the caller's publish + full fence: clear the peer's flag, report if it was set.
    if pb_load_relaxed_u64(flag) == 0:
        return False
    return pb_exchange_u64(flag, 0) != 0


cdef class ByteRing:
    """Single-producer single-consumer ring of variable-size records in a shared buffer.

    ``buffer`` is the mapped region (any writable buffer of ``region_size(capacity_bytes)``
    bytes, 8-byte aligned). ``create=True`` initialises it (capacity a power of two, 64 B to
    1 GiB); ``create=False`` attaches to an initialised one. Offsets are data-area byte
    positions; ``data()`` is the data area. Each process uses one side only.
    """

    @staticmethod
    def region_size(capacity_bytes):
        """Bytes of a region holding a ring with capacity_bytes of data area."""
        if not (RING_CAPACITY_MIN_BYTES <= capacity_bytes <= RING_CAPACITY_MAX_BYTES) \
                or not _is_power_of_two(capacity_bytes):
            raise ValueError(f"capacity_bytes must be a power of two in "
                             f"[{RING_CAPACITY_MIN_BYTES}, {RING_CAPACITY_MAX_BYTES}], "
                             f"got {capacity_bytes}")
        return RING_HEADER_BYTES + capacity_bytes

    def __init__(self, buffer, bint create, capacity_bytes=0):
        cdef unsigned char *base
        if create:
            ByteRing.region_size(capacity_bytes)
            base = _acquire_region(&self._view, buffer, RING_HEADER_BYTES + capacity_bytes)
            self._has_view = True
            # Only the header is zeroed: records are read between the cursors only, and
            # touching the data area would make an idle ring resident (PSS).
            _init_header(base, PB_RING_MAGIC_BYTES, capacity_bytes, 0)
        else:
            base = _acquire_region(&self._view, buffer, RING_HEADER_BYTES)
            self._has_view = True
            _attach_capacity(base, PB_RING_MAGIC_BYTES, self._view.len, 1)
        self._owner = buffer
        self._capacity = pb_load_relaxed_u64(<uint64_t *>(base + RING_CAPACITY_OFFSET))
        if capacity_bytes and <uint64_t>capacity_bytes != self._capacity:
            raise ValueError(f"ring capacity is {self._capacity} bytes, not {capacity_bytes}")
        self._mask = self._capacity - 1
        self._record_max_bytes = self._capacity // 2 - RING_RECORD_LENGTH_BYTES
        self._producer_cursor = <uint64_t *>(base + RING_PRODUCER_CURSOR_OFFSET)
        self._consumer_cursor = <uint64_t *>(base + RING_CONSUMER_CURSOR_OFFSET)
        self._consumer_sleeping = <uint64_t *>(base + RING_CONSUMER_SLEEPING_OFFSET)
        self._producer_sleeping = <uint64_t *>(base + RING_PRODUCER_SLEEPING_OFFSET)
        self._data = base + RING_HEADER_BYTES
        self._reserved_tail = pb_load_acquire_u64(self._producer_cursor)
        self._head = pb_load_acquire_u64(self._consumer_cursor)
        if self._reserved_tail - self._head > self._capacity:
            raise RingCorruptError(f"ring cursors {self._head}..{self._reserved_tail} exceed "
                                   f"the capacity {self._capacity}")
        self._cached_head = self._head
        self._run_start = self._run_end = self._head & self._mask
        self._run_start_cursor = self._head

    def __dealloc__(self):
        if self._has_view:
            PyBuffer_Release(&self._view)

    def close(self):
        """Drop this ring's hold on the buffer (idempotent). Raises BufferError while views
        derived from data() are still exported to others."""
        if self._data_view is not None:
            self._data_view.release()
            self._data_view = None
        if self._has_view:
            self._has_view = False
            PyBuffer_Release(&self._view)
        self._data = NULL
        self._owner = None

    cdef int _check_open(self) except -1:
        if self._data == NULL:
            raise ValueError("ring is closed")
        return 0

    @property
    def capacity_bytes(self):
        """Bytes in the data area (a power of two)."""
        return self._capacity

    @property
    def record_max_bytes(self):
        """Largest payload one record may carry: capacity/2 - 4 bytes."""
        return self._record_max_bytes

    # ---- producer side -------------------------------------------------------------------

    cdef int64_t reserve_c(self, uint64_t size) noexcept nogil:
        cdef uint64_t total, position, room, need
        if size > self._record_max_bytes:
            return RING_TOO_LARGE
        total = _record_total(size)
        position = self._reserved_tail & self._mask
        room = self._capacity - position
        need = total if total <= room else room + total
        if self._reserved_tail + need - self._cached_head > self._capacity:
            self._cached_head = pb_load_acquire_u64(self._consumer_cursor)
            if self._reserved_tail + need - self._cached_head > self._capacity:
                return RING_FULL
        if total > room:
            pb_ring_store_u32(self._data + position, PB_RING_PADDING_MARKER)
            self._reserved_tail += room
            position = 0
        pb_ring_store_u32(self._data + position, <uint32_t>size)
        self._reserved_tail += total
        if PYBROKER_DEBUG:
            debug_check(position + total <= self._capacity, "byte ring: record past the data area",
                        <long long>(position + total), <long long>self._capacity)
            debug_check(self._reserved_tail - self._cached_head <= self._capacity,
                        "byte ring: reserved over unreleased records",
                        <long long>self._reserved_tail, <long long>self._cached_head)
        return <int64_t>(position + RING_RECORD_LENGTH_BYTES)

    cdef bint commit_c(self) noexcept nogil:
        cdef uint64_t published = pb_load_relaxed_u64(self._producer_cursor)
        if self._reserved_tail == published:
            return False
        if PYBROKER_DEBUG:
            # One producer per ring: the published tail only ever moves forward.
            debug_check(self._reserved_tail > published,
                        "byte ring: the producer cursor would move back (a second producer?)",
                        <long long>self._reserved_tail, <long long>published)
        pb_store_release_u64(self._producer_cursor, self._reserved_tail)
        pb_fence()
        return _take_flag(self._consumer_sleeping)

    def reserve(self, Py_ssize_t size):
        """Reserve a record of size payload bytes; return the data-area offset to write the
        payload at, or -1 when the ring is full now (back-pressure: nothing is overwritten).
        Several reservations may precede one commit(). ValueError if size is negative or above
        record_max_bytes."""
        self._check_open()
        if size < 0:
            raise ValueError(f"record size must be >= 0, got {size}")
        cdef int64_t offset = self.reserve_c(<uint64_t>size)
        if offset == RING_TOO_LARGE:
            raise ValueError(f"record of {size} bytes exceeds the ring's record_max_bytes "
                             f"{self._record_max_bytes}")
        return offset

    def put(self, payload):
        """reserve(len(payload)) and copy payload in (any buffer); offset or -1 when full."""
        self._check_open()
        cdef Py_buffer source
        cdef int64_t offset
        PyObject_GetBuffer(payload, &source, PyBUF_SIMPLE)
        try:
            offset = self.reserve_c(<uint64_t>source.len)
            if offset == RING_TOO_LARGE:
                raise ValueError(f"record of {source.len} bytes exceeds the ring's "
                                 f"record_max_bytes {self._record_max_bytes}")
            if offset >= 0:
                memcpy(self._data + offset, source.buf, <size_t>source.len)
            return offset
        finally:
            PyBuffer_Release(&source)

    def data(self):
        """Writable memoryview of the data area (cached; released by close())."""
        self._check_open()
        if self._data_view is None:
            self._data_view = memoryview(self._owner)[
                RING_HEADER_BYTES:RING_HEADER_BYTES + self._capacity]
        return self._data_view

    def commit(self):
        """Publish every reserved record (one release store). True when the consumer had
        flagged itself asleep: the caller then signals the consumer's eventfd."""
        self._check_open()
        return self.commit_c()

    def set_producer_sleeping(self):
        """Flag the producer asleep (waiting for space), fence, and return True when the
        consumer released space since the last failed reserve (then clear and retry)."""
        self._check_open()
        pb_exchange_u64(self._producer_sleeping, 1)
        return pb_load_acquire_u64(self._consumer_cursor) != self._cached_head

    def clear_producer_sleeping(self):
        """Clear the producer's sleeping flag (after waking or when retrying)."""
        self._check_open()
        pb_store_release_u64(self._producer_sleeping, 0)

    # ---- consumer side -------------------------------------------------------------------

    cdef int peek_c(self, uint64_t max_records, uint64_t *count, uint64_t *start,
                    uint64_t *end) noexcept nogil:
        cdef uint64_t tail = pb_load_acquire_u64(self._producer_cursor)
        cdef uint64_t cursor = self._head
        cdef uint64_t position = cursor & self._mask
        cdef uint64_t limit, offset, length, total
        cdef uint64_t records = 0
        if tail - cursor > self._capacity:
            return RING_CORRUPT
        if tail != cursor and \
                pb_ring_load_u32(self._data + position) == PB_RING_PADDING_MARKER:
            cursor += self._capacity - position
            position = 0
            if tail - cursor > self._capacity:
                return RING_CORRUPT
        limit = tail - cursor
        if limit > self._capacity - position:
            limit = self._capacity - position
        limit += position
        offset = position
        while offset < limit and records < max_records:
            length = pb_ring_load_u32(self._data + offset)
            if length == PB_RING_PADDING_MARKER:
                break
            total = _record_total(length)
            if total > limit - offset:
                return RING_CORRUPT
            offset += total
            records += 1
        self._run_start = position
        self._run_end = offset
        self._run_start_cursor = cursor
        count[0] = records
        start[0] = position
        end[0] = offset
        return 0

    cdef bint release_c(self, uint64_t end) noexcept nogil:
        cdef uint64_t new_head = self._run_start_cursor + (end - self._run_start)
        if PYBROKER_DEBUG:
            # The Python release() refuses these; C callers (the appender) must not pass them.
            debug_check(end >= self._run_start and end <= self._run_end
                        and (end & (RING_RECORD_ALIGN_BYTES - 1)) == 0,
                        "byte ring: release outside the peeked run", <long long>end,
                        <long long>self._run_end)
            debug_check(new_head >= self._head, "byte ring: the consumer cursor would move back",
                        <long long>new_head, <long long>self._head)
        pb_store_release_u64(self._consumer_cursor, new_head)
        self._head = new_head
        self._run_start = end
        self._run_start_cursor = new_head
        pb_fence()
        return _take_flag(self._producer_sleeping)

    def peek_batch(self, Py_ssize_t max_records=1 << 30):
        """(count, start, end): up to max_records committed records available now as one
        contiguous run [start, end) of the data area (a run stops at the wrap; peek again after
        release). Records are [length u32][payload] at 8-byte alignment. Raises
        RingCorruptError if the shared cursors or lengths are impossible."""
        self._check_open()
        if max_records < 0:
            raise ValueError(f"max_records must be >= 0, got {max_records}")
        cdef uint64_t count, start, end
        if self.peek_c(<uint64_t>max_records, &count, &start, &end) != 0:
            raise RingCorruptError("byte ring holds an impossible cursor or record length")
        return count, start, end

    def iter_records(self, Py_ssize_t start, Py_ssize_t end):
        """[(payload offset, payload length)] of the records in the run [start, end)."""
        self._check_open()
        if start < 0 or end < start or <uint64_t>end > self._capacity \
                or (start | end) & (RING_RECORD_ALIGN_BYTES - 1):
            raise ValueError(f"record run [{start}, {end}) is not 8-aligned inside the "
                             f"data area of {self._capacity} bytes")
        cdef uint64_t offset = <uint64_t>start
        cdef uint64_t length
        records = []
        while offset < <uint64_t>end:
            length = pb_ring_load_u32(self._data + offset)
            if length == PB_RING_PADDING_MARKER or _record_total(length) > <uint64_t>end - offset:
                raise ValueError(f"no whole record at data offset {offset} before {end}")
            records.append((offset + RING_RECORD_LENGTH_BYTES, length))
            offset += _record_total(length)
        return records

    def release(self, Py_ssize_t end):
        """Free the peeked run up to data offset end (a record boundary, e.g. the end returned
        by peek_batch). True when the producer had flagged itself asleep waiting for space:
        the caller then signals the producer's eventfd."""
        self._check_open()
        if end < <Py_ssize_t>self._run_start or end > <Py_ssize_t>self._run_end \
                or end & (RING_RECORD_ALIGN_BYTES - 1):
            raise ValueError(f"release end {end} is outside the peeked run "
                             f"[{self._run_start}, {self._run_end}]")
        return self.release_c(<uint64_t>end)

    def set_consumer_sleeping(self):
        """Flag the consumer asleep, fence, and return True when records were committed beyond
        the last peeked run meanwhile (then clear the flag and drain instead of blocking)."""
        self._check_open()
        pb_exchange_u64(self._consumer_sleeping, 1)
        cdef uint64_t peeked = self._run_start_cursor + (self._run_end - self._run_start)
        return pb_load_acquire_u64(self._producer_cursor) != peeked

    def clear_consumer_sleeping(self):
        """Clear the consumer's sleeping flag (after waking or when work was found)."""
        self._check_open()
        pb_store_release_u64(self._consumer_sleeping, 0)

    def used_bytes(self):
        """Data-area bytes reserved or committed and not yet released (padding included)."""
        self._check_open()
        cdef uint64_t tail = pb_load_acquire_u64(self._producer_cursor)
        if self._reserved_tail > tail:
            tail = self._reserved_tail
        return tail - pb_load_acquire_u64(self._consumer_cursor)

    def free_bytes(self):
        """capacity_bytes - used_bytes()."""
        return self._capacity - self.used_bytes()


cdef class CompletionRing:
    """SPSC ring of fixed 32-byte slots: (request_id int64, status int32, count int32,
    physical_offset int64, queue_offset int64), native byte order. The producer pushes a
    drain's worth of slots and publishes them with one release store.

    ``buffer`` is the mapped region of ``region_size(slot_count)`` bytes; ``create=True``
    initialises it (slot_count a power of two, 2 to 2**24), ``create=False`` attaches.
    """

    @staticmethod
    def region_size(slot_count):
        """Bytes of a region holding a ring of slot_count 32-byte completion slots."""
        if not (COMPLETION_SLOTS_MIN <= slot_count <= COMPLETION_SLOTS_MAX) \
                or not _is_power_of_two(slot_count):
            raise ValueError(f"slot_count must be a power of two in [{COMPLETION_SLOTS_MIN}, "
                             f"{COMPLETION_SLOTS_MAX}], got {slot_count}")
        return RING_HEADER_BYTES + slot_count * COMPLETION_SLOT_BYTES

    def __init__(self, buffer, bint create, slot_count=0):
        cdef unsigned char *base
        if create:
            region_bytes = CompletionRing.region_size(slot_count)
            base = _acquire_region(&self._view, buffer, region_bytes)
            self._has_view = True
            _init_header(base, PB_RING_MAGIC_COMPLETION, slot_count,
                         slot_count * COMPLETION_SLOT_BYTES)
        else:
            base = _acquire_region(&self._view, buffer, RING_HEADER_BYTES)
            self._has_view = True
            _attach_capacity(base, PB_RING_MAGIC_COMPLETION, self._view.len,
                             COMPLETION_SLOT_BYTES)
        self._slot_count = pb_load_relaxed_u64(<uint64_t *>(base + RING_CAPACITY_OFFSET))
        if slot_count and <uint64_t>slot_count != self._slot_count:
            raise ValueError(f"ring has {self._slot_count} slots, not {slot_count}")
        self._mask = self._slot_count - 1
        self._producer_cursor = <uint64_t *>(base + RING_PRODUCER_CURSOR_OFFSET)
        self._consumer_cursor = <uint64_t *>(base + RING_CONSUMER_CURSOR_OFFSET)
        self._consumer_sleeping = <uint64_t *>(base + RING_CONSUMER_SLEEPING_OFFSET)
        self._slots = <pb_completion_slot *>(base + RING_HEADER_BYTES)
        self._pushed_tail = pb_load_acquire_u64(self._producer_cursor)
        self._head = pb_load_acquire_u64(self._consumer_cursor)
        if self._pushed_tail - self._head > self._slot_count:
            raise RingCorruptError(f"completion cursors {self._head}..{self._pushed_tail} "
                                   f"exceed {self._slot_count} slots")
        self._cached_head = self._head

    def __dealloc__(self):
        if self._has_view:
            PyBuffer_Release(&self._view)

    def close(self):
        """Drop this ring's hold on the buffer (idempotent)."""
        if self._has_view:
            self._has_view = False
            PyBuffer_Release(&self._view)
        self._slots = NULL

    cdef int _check_open(self) except -1:
        if self._slots == NULL:
            raise ValueError("ring is closed")
        return 0

    @property
    def slot_count(self):
        """Number of 32-byte slots (a power of two)."""
        return self._slot_count

    cdef bint push_c(self, int64_t request_id, int32_t status, int32_t count,
                     int64_t physical_offset, int64_t queue_offset) noexcept nogil:
        cdef pb_completion_slot *slot
        if self._pushed_tail - self._cached_head >= self._slot_count:
            self._cached_head = pb_load_acquire_u64(self._consumer_cursor)
            if self._pushed_tail - self._cached_head >= self._slot_count:
                return False
        slot = &self._slots[self._pushed_tail & self._mask]
        slot.request_id = request_id
        slot.status = status
        slot.count = count
        slot.physical_offset = physical_offset
        slot.queue_offset = queue_offset
        self._pushed_tail += 1
        if PYBROKER_DEBUG:
            debug_check(self._pushed_tail - self._cached_head <= self._slot_count,
                        "completion ring: pushed over undrained slots",
                        <long long>self._pushed_tail, <long long>self._cached_head)
        return True

    cdef bint publish_c(self) noexcept nogil:
        cdef uint64_t published = pb_load_relaxed_u64(self._producer_cursor)
        if self._pushed_tail == published:
            return False
        if PYBROKER_DEBUG:
            debug_check(self._pushed_tail > published,
                        "completion ring: the producer cursor would move back (a second producer?)",
                        <long long>self._pushed_tail, <long long>published)
        pb_store_release_u64(self._producer_cursor, self._pushed_tail)
        pb_fence()
        return _take_flag(self._consumer_sleeping)

    def push(self, int64_t request_id, int32_t status, int32_t count, int64_t physical_offset,
             int64_t queue_offset):
        """Write one slot (not yet visible: commit() publishes); False when the ring is full."""
        self._check_open()
        return self.push_c(request_id, status, count, physical_offset, queue_offset)

    def push_many(self, entries):
        """Write 5-tuples from entries until the ring is full and publish them with one release
        store; returns how many were taken. Call commit() afterwards: it reports whether the
        consumer was asleep and must be signalled."""
        self._check_open()
        cdef Py_ssize_t taken = 0
        for request_id, status, count, physical_offset, queue_offset in entries:
            if not self.push_c(request_id, status, count, physical_offset, queue_offset):
                break
            taken += 1
        if self.publish_c():
            self._wake_pending = True
        return taken

    def commit(self):
        """Publish pushed slots (one release store). True when the consumer had flagged itself
        asleep since the last commit(): the caller then signals the consumer's eventfd."""
        self._check_open()
        cdef bint wake = self.publish_c() or self._wake_pending
        self._wake_pending = False
        return wake

    def drain(self, Py_ssize_t max_count=1 << 30):
        """Take up to max_count published completions, oldest first, as 5-tuples, and free
        their slots (one release store)."""
        self._check_open()
        if max_count < 0:
            raise ValueError(f"max_count must be >= 0, got {max_count}")
        cdef uint64_t tail = pb_load_acquire_u64(self._producer_cursor)
        cdef uint64_t available = tail - self._head
        cdef pb_completion_slot *slot
        if available > self._slot_count:
            raise RingCorruptError(f"completion cursors {self._head}..{tail} exceed "
                                   f"{self._slot_count} slots")
        if available > <uint64_t>max_count:
            available = <uint64_t>max_count
        completions = []
        cdef uint64_t cursor = self._head
        while cursor != self._head + available:
            slot = &self._slots[cursor & self._mask]
            completions.append((slot.request_id, slot.status, slot.count,
                                slot.physical_offset, slot.queue_offset))
            cursor += 1
        if available:
            self._head = cursor
            pb_store_release_u64(self._consumer_cursor, cursor)
        return completions

    cdef int drain_c(self, pb_completion_slot *out, uint64_t max_count,
                     uint64_t *taken) noexcept nogil:
        cdef uint64_t tail = pb_load_acquire_u64(self._producer_cursor)
        cdef uint64_t available = tail - self._head
        cdef uint64_t index
        taken[0] = 0
        if available > self._slot_count:
            return RING_CORRUPT
        if available > max_count:
            available = max_count
        for index in range(available):
            out[index] = self._slots[(self._head + index) & self._mask]
        if available:
            self._head += available
            pb_store_release_u64(self._consumer_cursor, self._head)
        taken[0] = available
        return 0

    def set_consumer_sleeping(self):
        """Flag the consumer asleep, fence, and return True when completions are waiting
        (then clear the flag and drain instead of blocking)."""
        self._check_open()
        pb_exchange_u64(self._consumer_sleeping, 1)
        return pb_load_acquire_u64(self._producer_cursor) != self._head

    def clear_consumer_sleeping(self):
        """Clear the consumer's sleeping flag."""
        self._check_open()
        pb_store_release_u64(self._consumer_sleeping, 0)

    cdef uint64_t free_slots_c(self) noexcept nogil:
        cdef uint64_t tail = pb_load_acquire_u64(self._producer_cursor)
        if self._pushed_tail > tail:
            tail = self._pushed_tail
        return self._slot_count - (tail - pb_load_acquire_u64(self._consumer_cursor))

    def free_slots(self):
        """Slots neither pushed nor published-and-undrained."""
        self._check_open()
        return self.free_slots_c()


# ---- 64-bit words of the control block --------------------------------------------------------

cdef enum WordOp:
    WORD_LOAD, WORD_STORE, WORD_MAX, WORD_EXCHANGE, WORD_OR, WORD_AND, WORD_ADD, WORD_CAS


cdef uint64_t _word_op(object buffer, Py_ssize_t offset, WordOp op, uint64_t value,
                       uint64_t expected=0) except? 0:
    """Apply op to the aligned native 64-bit word at byte offset of buffer; returns the value
    loaded (load), the previous value (exchange/or/and/add/compare-exchange) or 0."""
    cdef Py_buffer view
    cdef uint64_t result = 0
    cdef uint64_t *word
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE if op == WORD_LOAD else PyBUF_WRITABLE)
    try:
        if offset < 0 or offset > view.len - 8 or \
                (<uintptr_t>view.buf + <uintptr_t>offset) & 7:
            raise ValueError(f"no 8-byte aligned word at offset {offset} of a "
                             f"{view.len}-byte buffer")
        word = <uint64_t *>(<unsigned char *>view.buf + offset)
        if op == WORD_LOAD:
            result = pb_load_acquire_u64(word)
        elif op == WORD_STORE:
            pb_store_release_u64(word, value)
        elif op == WORD_MAX:
            pb_max_u64(word, value)
        elif op == WORD_EXCHANGE:
            result = pb_exchange_u64(word, value)
        elif op == WORD_OR:
            result = pb_fetch_or_u64(word, value)
        elif op == WORD_ADD:
            result = pb_fetch_add_u64(word, value)
        elif op == WORD_CAS:
            result = pb_compare_exchange_u64(word, expected, value)
        else:
            result = pb_fetch_and_u64(word, value)
        return result
    finally:
        PyBuffer_Release(&view)


def load_u64(buffer, Py_ssize_t offset):
    """Acquire-load the native unsigned 64-bit word at byte offset (8-byte aligned)."""
    return _word_op(buffer, offset, WORD_LOAD, 0)


def load_two_u64(buffer, Py_ssize_t first, Py_ssize_t second):
    """Acquire-load the words at byte offsets ``first`` then ``second``: ``(first's value,
    second's value)`` (a reader's two positions in one call)."""
    return _word_op(buffer, first, WORD_LOAD, 0), _word_op(buffer, second, WORD_LOAD, 0)


def store_u64(buffer, Py_ssize_t offset, uint64_t value):
    """Release-store value into the native unsigned 64-bit word at byte offset."""
    _word_op(buffer, offset, WORD_STORE, value)


def publish_u64(buffer, Py_ssize_t offset, uint64_t value, Py_ssize_t waiters_offset,
                bint monotonic=False):
    """Release-store value at ``offset`` (with ``monotonic`` only when larger), fence, and
    take the waiters word at ``waiters_offset`` (swapped to 0 when not 0): the bits the caller
    must signal (ControlBlock.publish's protocol, one call)."""
    _word_op(buffer, offset, WORD_MAX if monotonic else WORD_STORE, value)
    pb_fence()
    if _word_op(buffer, waiters_offset, WORD_LOAD, 0) == 0:
        return 0
    return _word_op(buffer, waiters_offset, WORD_EXCHANGE, 0)


def max_u64(buffer, Py_ssize_t offset, uint64_t value):
    """Raise the word at byte offset to value if larger (monotonic publish; never lowers)."""
    _word_op(buffer, offset, WORD_MAX, value)


def exchange_u64(buffer, Py_ssize_t offset, uint64_t value):
    """Swap value into the word (sequentially consistent); returns the previous value."""
    return _word_op(buffer, offset, WORD_EXCHANGE, value)


def fetch_or_u64(buffer, Py_ssize_t offset, uint64_t bits):
    """OR bits into the word (sequentially consistent; registers a waiter bit); previous."""
    return _word_op(buffer, offset, WORD_OR, bits)


def fetch_and_u64(buffer, Py_ssize_t offset, uint64_t bits):
    """AND bits into the word (sequentially consistent); returns the previous value."""
    return _word_op(buffer, offset, WORD_AND, bits)


def fetch_add_u64(buffer, Py_ssize_t offset, int64_t delta):
    """Add delta (may be negative: the word wraps as two's complement) to the word
    (sequentially consistent); returns the previous value."""
    return _word_op(buffer, offset, WORD_ADD, <uint64_t>delta)


def compare_exchange_u64(buffer, Py_ssize_t offset, uint64_t expected, uint64_t desired):
    """Store desired into the word if it holds expected (sequentially consistent); returns
    the value it held: equal to expected when the store happened."""
    return _word_op(buffer, offset, WORD_CAS, desired, expected)


def fence():
    """Full (sequentially consistent) memory fence: between publishing a word and checking a
    peer's sleeping flag."""
    pb_fence()
