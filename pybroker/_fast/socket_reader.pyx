# pybroker._fast.socket_reader: a plain socket's reads into a connection's receive buffer, in C.
"""The read side of a plain (not TLS) remoting connection (docs/architecture/data-plane.md,
"The read chain in C").

asyncio reads a :class:`~asyncio.BufferedProtocol`'s socket with four Python calls before the
protocol sees a byte (the transport's ``_read_ready`` and ``_read_ready__get_buffer``, the
protocol's ``get_buffer`` and the receive buffer's ``free_view``) and three after
(``buffer_updated``, the idle timer's ``touch`` and ``loop.time``). A :class:`SocketReader` is
the event loop's reader of that socket instead (``loop._add_reader(fd, reader)``: the loop calls
``reader()``, a C call): it asks the receive buffer to make room
(:meth:`~pybroker.remoting.receive_buffer.ReceiveBuffer.make_room`) unless the buffer is empty
at its first size (the common read: nothing to move), ``recv`` s into its free end in C and
stamps the connection timer's ``last_activity`` with the loop's clock (``CLOCK_MONOTONIC``:
``loop.time()``).

Then the receive loop's first step: when nothing is queued, unsent, held or in a handler (so the
back-pressure check cannot hold the first frame) it asks the connection's frame taker itself;
when the taker took every whole frame to the end of the bytes the read is done (the buffer
emptied, no partial frame). A taker whose first step is a :class:`CTaker` (its ``c_first``: the
send fast path's port, alone or first of a chain, send/port.pyx) is asked in C, without a Python
frame; only an answer other than "all taken" goes on in the taker's ``after_first`` (a chain's
other takers, in Python). Any other outcome - a frame handed back, no room, a fault, a partial
frame left - goes on in the connection's one receive loop from that take
(``RemotingConnection._process_frames(taken)``: back-pressure, decoding and faults are written
there only; a ProtocolError the taker raises, as WholeFrames does, goes to the connection's
``_protocol_error`` as the loop sends it). With something pending the loop runs from the start
(``_process_frames()``).

End of stream and socket errors go to the transport's own paths, as its reader sends them: 0
bytes to ``_read_ready__on_eof`` (the protocol's ``eof_received``, then ``close``), an error to
``_fatal_error`` with the OSError asyncio would raise (ConnectionResetError for ECONNRESET...),
and so does an exception of the receive loop; ``connection_lost`` runs once, from the transport.
EAGAIN and EINTR are nothing to do (the loop calls again when the socket is readable).
"""
from libc.errno cimport EAGAIN, EINTR, errno
from libc.stdint cimport int64_t
from libc.string cimport strerror
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.set cimport PySet_GET_SIZE

from pybroker._fast.frame cimport TAKE_END
from pybroker._fast.taker cimport TakeAnswer
from pybroker.errors import ProtocolError

_READ_MESSAGE = "Fatal read error on socket transport"
_BUFFER_MESSAGE = "Fatal error: protocol.get_buffer() call failed."
_RECEIVE_MESSAGE = "Fatal error: protocol.buffer_updated() call failed."


cdef class CTaker:
    """A frame taker's step the reader calls in C (see the module docstring); a subclass
    implements take_c."""

    cdef int take_c(self, object buffer, Py_ssize_t start, Py_ssize_t end,
                    TakeAnswer *answer) except -1:
        raise NotImplementedError("a CTaker subclass takes")


cdef class SocketReader:
    """The loop's reader of one plain connection's socket (see the module docstring)."""

    def __init__(self, connection, transport, int fd, Py_ssize_t initial_bytes):
        """``connection``'s socket ``fd`` under ``transport`` (a selector socket transport);
        ``initial_bytes``: the receive buffer's first size (receive_buffer.py)."""
        self._connection = connection
        self._transport = transport
        self._received = connection._received
        self._timer = connection._timer
        self._fd = fd
        self._initial_bytes = initial_bytes
        self.use_taker(connection._taker)

    def use_taker(self, taker):
        """The connection walks its buffer with ``taker`` from now on (use_frame_taker): its
        ``c_first`` (a CTaker), when it has one, is asked in C, and its ``after_first(buffer,
        end, taken)``, if any, goes on from that step's answer."""
        first = getattr(taker, "c_first", None)
        self._first = first
        self._after_first = None if first is None else getattr(taker, "after_first", None)

    def __call__(self):
        cdef object received = self._received
        cdef bytearray data
        cdef Py_ssize_t end, received_bytes
        cdef int error
        try:
            data = received.data
            end = received.end
            if end or PyByteArray_GET_SIZE(data) != self._initial_bytes:
                received.make_room()
                data = received.data
                end = received.end
            if PyByteArray_GET_SIZE(data) == end:
                raise RuntimeError("get_buffer() returned an empty buffer")
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._transport._fatal_error(exc, _BUFFER_MESSAGE)
            return
        received_bytes = recv(self._fd, PyByteArray_AS_STRING(data) + end,
                              <size_t>(PyByteArray_GET_SIZE(data) - end), 0)
        if received_bytes < 0:
            error = errno
            if error == EAGAIN or error == EINTR:      # EWOULDBLOCK is EAGAIN on Linux
                return
            self._transport._fatal_error(OSError(error, strerror(error).decode()),
                                         _READ_MESSAGE)
            return
        if received_bytes == 0:
            self._transport._read_ready__on_eof()
            return
        end += received_bytes
        received.end = end
        self._timer.last_activity = _loop_time()
        try:
            self._walk(received, data, end)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._transport._fatal_error(exc, _RECEIVE_MESSAGE)


    cdef int _walk(self, object received, bytearray data, Py_ssize_t end) except -1:
        """The receive loop's first step: the connection's taker from ``received.start``
        when nothing can hold a frame back; everything but "all taken" goes on in
        ``_process_frames`` (from this take)."""
        cdef object connection = self._connection
        cdef object taken
        if not _nothing_pending(connection):
            connection._process_frames()
            return 0
        try:
            taken = self._take(data, received.start, end)
        except ProtocolError as error:      # a malformed frame (WholeFrames): as the loop does
            connection._protocol_error(error)
            return 0
        if taken is None:
            # What _process_frames does when a walk ends at the end of the bytes.
            received.start = 0
            received.end = 0
            self._timer.partial_since = None
            return 0
        connection._process_frames(taken)
        return 0

    cdef object _take(self, bytearray data, Py_ssize_t start, Py_ssize_t end):
        """The taker's answer from ``start``; None when it took every whole frame to ``end``."""
        cdef TakeAnswer answer
        cdef object taken
        if self._first is None:
            taken = self._connection._taker.take(data, start, end)
        else:
            self._first.take_c(data, start, end, &answer)
            if answer.position == end and answer.outcome == TAKE_END:
                return None
            taken = (answer.position, answer.outcome, answer.frame_bytes)
            if self._after_first is not None:
                taken = self._after_first(data, end, taken)
        if <Py_ssize_t>taken[0] == end and <int>taken[1] == TAKE_END:
            return None
        return taken


cdef inline bint _nothing_pending(object connection) except -1:
    """Open, no frames held, nothing queued or unsent, no handler waiting: nothing the
    connection's back-pressure check (_must_wait) could hold the first frame for."""
    return not connection._closed and not connection._frames_held \
        and connection._writes.queued_bytes == 0 and connection._transport_unsent == 0 \
        and PySet_GET_SIZE(connection.handler_tasks) == 0


cdef inline double _loop_time() noexcept:
    """``loop.time()`` of asyncio's loops: time.monotonic, CLOCK_MONOTONIC on Linux, in
    nanoseconds over 1e9 as Python makes it."""
    cdef timespec now
    clock_gettime(CLOCK_MONOTONIC, &now)
    return <double>(<int64_t>now.tv_sec * 1000000000 + now.tv_nsec) / 1e9
