# Contract of pybroker._fast.send.slots: the send fast path's client connections (a slot each)
# and the response frames written to each since the last hand-over.
from libc.stdint cimport int32_t, uint32_t


cdef struct ConnectionSlot:
    unsigned char born_ip[16]
    Py_ssize_t born_ip_length       # 4 or 16; 0 while the slot is free
    int32_t born_port
    uint32_t generation             # bumped at close: late completions for it are dropped
    unsigned char *output           # response frames written since the last send_outputs
    Py_ssize_t output_length
    Py_ssize_t output_capacity
    bint dirty
    int fd                          # the socket send_outputs may write to itself now, or -1


cdef class ConnectionSlots:
    cdef ConnectionSlot *_slots
    cdef Py_ssize_t _count
    cdef Py_ssize_t *_free
    cdef Py_ssize_t _free_count
    cdef Py_ssize_t *_dirty         # slots written to since the last send_outputs
    cdef Py_ssize_t _dirty_count

    # A slot for a new connection whose peer is born_ip (4 or 16 bytes):born_port.
    cdef Py_ssize_t open(self, bytes born_ip, int32_t born_port) except -1
    cdef int _grow(self) except -1
    # The connection of ``slot`` closed: answers still due to it are dropped.
    cdef int close(self, Py_ssize_t slot) except -1
    # ValueError unless ``slot`` is open.
    cdef int check_open(self, Py_ssize_t slot) except -1
    # The slot (open or not; valid until the next open).
    cdef ConnectionSlot *at(self, Py_ssize_t slot) noexcept nogil
    # True when an answer for a send taken at ``generation`` is still due to ``slot``.
    cdef bint answers_due(self, Py_ssize_t slot, uint32_t generation) noexcept nogil
    # Room for ``need`` more bytes at the end of the slot's output; marks it written to.
    cdef unsigned char *output(self, Py_ssize_t slot, Py_ssize_t need) except NULL
    # The socket the slot's frames may be written to directly (nothing queued or buffered
    # before them on its connection), or -1: they are handed over instead.
    cdef int set_fd(self, Py_ssize_t slot, int fd) except -1
    # Each open connection's frames since the last call: written to its socket where it has
    # one (set_fd), else (or what the socket did not take) in the list, [(slot, frames)], one
    # bytes object each.
    cdef list send_outputs(self)
