# pybroker._fast.send.slots: the send fast path's connections and their response bytes.
"""The client connections of one SendPath (slots.pxd): a slot per open connection, its peer
address (BORNHOST of its records) and its response frames, sent once per drain
(docs/architecture/send-fast-path.md: one ``send`` per connection and drain, straight to the
socket while the connection has nothing queued or buffered before them, else one
``transport.write`` of the frames handed over)."""
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.errno cimport EINTR, errno
from libc.string cimport memcpy, memset


cdef extern from "<sys/socket.h>" nogil:
    ssize_t send(int fd, const void *buffer, size_t length, int flags)
    enum:
        MSG_DONTWAIT
        MSG_NOSIGNAL

cdef enum:
    SLOTS_INITIAL = 16
    OUTPUT_INITIAL_BYTES = 256


cdef Py_ssize_t *_grown_index_array(Py_ssize_t *array, Py_ssize_t count) except NULL:
    cdef Py_ssize_t *grown = <Py_ssize_t *>PyMem_Realloc(array, count * sizeof(Py_ssize_t))
    if grown == NULL:
        raise MemoryError()
    return grown


cdef class ConnectionSlots:
    """Slots of one SendPath's connections (SLOTS_INITIAL, doubled when all are taken)."""

    def __cinit__(self):
        cdef Py_ssize_t index
        self._slots = <ConnectionSlot *>PyMem_Malloc(SLOTS_INITIAL * sizeof(ConnectionSlot))
        self._free = <Py_ssize_t *>PyMem_Malloc(SLOTS_INITIAL * sizeof(Py_ssize_t))
        self._dirty = <Py_ssize_t *>PyMem_Malloc(SLOTS_INITIAL * sizeof(Py_ssize_t))
        if self._slots == NULL or self._free == NULL or self._dirty == NULL:
            raise MemoryError()
        self._count = SLOTS_INITIAL
        memset(self._slots, 0, SLOTS_INITIAL * sizeof(ConnectionSlot))
        for index in range(SLOTS_INITIAL):
            self._slots[index].fd = -1
            self._free[index] = SLOTS_INITIAL - 1 - index
        self._free_count = SLOTS_INITIAL
        self._dirty_count = 0

    def __dealloc__(self):
        cdef Py_ssize_t index
        if self._slots != NULL:
            for index in range(self._count):
                PyMem_Free(self._slots[index].output)
        PyMem_Free(self._slots)
        PyMem_Free(self._free)
        PyMem_Free(self._dirty)

    cdef Py_ssize_t open(self, bytes born_ip, int32_t born_port) except -1:
        cdef Py_ssize_t slot
        if len(born_ip) not in (4, 16):
            raise ValueError(f"born_ip has {len(born_ip)} bytes, not 4 or 16")
        if self._free_count == 0:
            self._grow()
        self._free_count -= 1
        slot = self._free[self._free_count]
        memcpy(self._slots[slot].born_ip, <const char *>born_ip, len(born_ip))
        self._slots[slot].born_ip_length = len(born_ip)
        self._slots[slot].born_port = born_port
        self._slots[slot].output_length = 0
        self._slots[slot].dirty = False
        self._slots[slot].fd = -1
        return slot

    cdef int _grow(self) except -1:
        """Twice the slots, the new ones free (taken from the highest index down)."""
        cdef Py_ssize_t index, grown_count = 2 * self._count
        cdef ConnectionSlot *grown = <ConnectionSlot *>PyMem_Realloc(
            self._slots, grown_count * sizeof(ConnectionSlot))
        if grown == NULL:
            raise MemoryError()
        self._slots = grown
        memset(&self._slots[self._count], 0,
               (grown_count - self._count) * sizeof(ConnectionSlot))
        for index in range(self._count, grown_count):
            self._slots[index].fd = -1
        self._free = _grown_index_array(self._free, grown_count)
        self._dirty = _grown_index_array(self._dirty, grown_count)
        for index in range(grown_count - 1, self._count - 1, -1):
            self._free[self._free_count] = index
            self._free_count += 1
        self._count = grown_count
        return 0

    cdef int close(self, Py_ssize_t slot) except -1:
        cdef ConnectionSlot *entry
        self.check_open(slot)
        entry = &self._slots[slot]
        entry.born_ip_length = 0
        entry.generation += 1
        entry.output_length = 0
        entry.fd = -1
        self._free[self._free_count] = slot
        self._free_count += 1
        return 0

    cdef int check_open(self, Py_ssize_t slot) except -1:
        if not 0 <= slot < self._count or self._slots[slot].born_ip_length == 0:
            raise ValueError(f"slot {slot} is not open")
        return 0

    cdef ConnectionSlot *at(self, Py_ssize_t slot) noexcept nogil:
        return &self._slots[slot]

    cdef bint answers_due(self, Py_ssize_t slot, uint32_t generation) noexcept nogil:
        return self._slots[slot].generation == generation \
            and self._slots[slot].born_ip_length != 0

    cdef unsigned char *output(self, Py_ssize_t slot, Py_ssize_t need) except NULL:
        cdef ConnectionSlot *connection = &self._slots[slot]
        cdef Py_ssize_t capacity = connection.output_capacity or OUTPUT_INITIAL_BYTES
        cdef unsigned char *grown
        while capacity < connection.output_length + need:
            capacity *= 2
        if capacity != connection.output_capacity:
            grown = <unsigned char *>PyMem_Realloc(connection.output, capacity)
            if grown == NULL:
                raise MemoryError()
            connection.output, connection.output_capacity = grown, capacity
        if not connection.dirty:
            connection.dirty = True
            self._dirty[self._dirty_count] = slot
            self._dirty_count += 1
        return connection.output + connection.output_length

    cdef int set_fd(self, Py_ssize_t slot, int fd) except -1:
        self.check_open(slot)
        self._slots[slot].fd = fd
        return 0

    cdef list send_outputs(self):
        cdef list outputs = []
        cdef Py_ssize_t index, slot, written
        cdef ConnectionSlot *connection
        for index in range(self._dirty_count):
            slot = self._dirty[index]
            connection = &self._slots[slot]
            connection.dirty = False
            if connection.output_length and connection.born_ip_length:
                written = _send_some(connection.fd, connection.output,
                                     connection.output_length)
                if written < connection.output_length:
                    # No socket, or it is full (or failing): the rest goes through the
                    # connection's transport, which buffers it (or reports the error); the
                    # connection then takes its socket back (set_fd -1) until it is empty.
                    outputs.append((slot, PyBytes_FromStringAndSize(
                        <const char *>connection.output + written,
                        connection.output_length - written)))
            connection.output_length = 0
        self._dirty_count = 0
        return outputs


cdef Py_ssize_t _send_some(int fd, const unsigned char *data, Py_ssize_t length) noexcept:
    """Bytes of ``data`` the socket ``fd`` took without blocking (0 without a socket, when it
    is full or failing: the transport then writes them and deals with the error)."""
    cdef Py_ssize_t written = 0
    cdef ssize_t sent
    while fd >= 0 and written < length:
        sent = send(fd, data + written, length - written, MSG_DONTWAIT | MSG_NOSIGNAL)
        if sent > 0:
            written += sent
        elif sent < 0 and errno == EINTR:
            continue
        else:
            break
    return written
