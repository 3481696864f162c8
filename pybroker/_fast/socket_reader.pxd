# C-level contract of pybroker._fast.socket_reader: a plain socket's reads, in C.
from pybroker._fast.taker cimport TakeAnswer


cdef extern from "sys/socket.h" nogil:
    ssize_t recv(int fd, void *buffer, size_t length, int flags)


# A frame taker's step the reader calls in C (send/port.pyx PortTake): what its take(buffer,
# start, end) answers, in *answer.
cdef class CTaker:
    cdef int take_c(self, object buffer, Py_ssize_t start, Py_ssize_t end,
                    TakeAnswer *answer) except -1


cdef class SocketReader:
    cdef object _connection         # the RemotingConnection (its _process_frames)
    cdef object _transport          # its selector socket transport (EOF and error paths)
    cdef object _received           # the connection's ReceiveBuffer
    cdef object _timer              # the connection's ConnectionTimer (last_activity)
    cdef int _fd
    cdef Py_ssize_t _initial_bytes  # the receive buffer's first size
    cdef CTaker _first              # the taker's first step in C (its c_first), or None
    cdef object _after_first        # the taker's answer from that step (after_first), or None

    cdef int _walk(self, object received, bytearray data, Py_ssize_t end) except -1
    cdef object _take(self, bytearray data, Py_ssize_t start, Py_ssize_t end)
