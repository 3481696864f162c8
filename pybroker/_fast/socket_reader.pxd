# C-level contract of pybroker._fast.socket_reader: a plain socket's reads, in C.
cdef extern from "sys/socket.h" nogil:
    ssize_t recv(int fd, void *buffer, size_t length, int flags)


cdef class SocketReader:
    cdef object _connection         # the RemotingConnection (its _process_frames)
    cdef object _transport          # its selector socket transport (EOF and error paths)
    cdef object _received           # the connection's ReceiveBuffer
    cdef object _timer              # the connection's ConnectionTimer (last_activity)
    cdef int _fd
    cdef Py_ssize_t _initial_bytes  # the receive buffer's first size

    cdef int _walk(self, object received, bytearray data, Py_ssize_t end) except -1
