# One remoting connection: the receive loop over a frame taker, back-pressure, the parts wired.
"""The asyncio protocol both the server and the client run on each socket.

A :class:`RemotingConnection` wires its parts: the receive buffer
(:mod:`pybroker.remoting.receive_buffer`), a frame taker (:mod:`pybroker.remoting.frame_taker`),
the write queue (:mod:`pybroker.remoting.write_queue`), the outgoing invocations
(:mod:`pybroker.remoting.invocations`) and the time limits (:mod:`pybroker.remoting.timers`).
What stays here is the one receive loop and back-pressure.

Receive path. The connection is an :class:`asyncio.BufferedProtocol`: the kernel reads into
free space at the end of the receive buffer (``recv_into``), then ONE receive loop walks the
buffer with the connection's frame taker. A plain socket is read in C
(:class:`pybroker._fast.socket_reader.SocketReader`, the loop's reader of the socket in place of
the transport's, added and removed by the back-pressure here; the transport keeps its writes,
its close and its EOF and error paths; it makes the loop's first take itself when nothing is
pending), a TLS one by asyncio's transport (``get_buffer``, ``buffer_updated``); both go on in
the same receive loop. The taker takes what it can (the send fast path's port takes every
leading send straight into the send ring: docs/architecture/send-fast-path.md;
:class:`~pybroker.remoting.frame_taker.WholeFrames`, the default, takes nothing) and hands back
the first frame it does not take, which is decoded with :func:`pybroker.protocol.command.decode`
and dispatched; then the taker goes on after it, so the requests of a connection keep their
order. The header is parsed in place (orjson and the binary decoder read from a view of the
buffer); the body is copied ONCE out of the buffer into a ``bytes`` (``copy_body=True``). So a
message body costs two copies in all: kernel -> receive buffer, receive buffer -> ``bytes``. The
copy buys a simple buffer: handlers may keep a command (long polling parks pulls; sends wait for
the appender) while the buffer is compacted and reused, and no view of the buffer outlives a read.
When the taker has no room (the send ring is full) the rest of the buffer waits (reading pauses)
until it has. The fast path's answers of a completion drain go to the socket straight from C
while the connection lends it (:meth:`RemotingConnection.lend_socket`: nothing queued or
buffered before them), else, and for what the socket did not take, they arrive as one bytes
object per connection (:meth:`RemotingConnection.write_frames`).

Write path. :meth:`RemotingConnection.send` encodes at once (so an unencodable command raises at
the caller) and queues the frame; the queue is written once per event-loop turn
(``loop.call_soon``), so the replies to every frame of one read leave in one system call. The
answer of a handler that waited (``send(now=True)``: made alone, in a later turn than its read)
is written at once with what is queued before it, not one more loop turn later.

Matching. Requests go to the ``dispatch`` callable (a :class:`pybroker.remoting.server.
RequestTable`); responses to the futures of :meth:`RemotingConnection.invoke`, by opaque;
unmatched responses go to ``unmatched_response`` or are logged and dropped (protocol.md §1.5).

Limits (:class:`~pybroker.remoting.limits.ConnectionLimits`), each closing only the offending
connection: frame size and ext-field count (ProtocolError: one log line with the TLS/HTTP hint,
then close), idle, partial-frame and write-stall time (:mod:`pybroker.remoting.timers`), and
back-pressure: above ``write_buffer_high_bytes`` of unsent replies reading is paused until the
peer drains; a peer that does not drain within ``write_stall_timeout_ms``, or lets the unsent
bytes pass ``write_buffer_max_bytes``, is closed. The same threshold is checked between the
frames of one read: the rest wait in the receive buffer until the replies drain, so a peer that
pipelines requests and reads nothing holds about one threshold of replies, not one reply per
request. Replies that do not exist yet count too: while ``requests_in_progress_max`` handlers of
this connection are still waiting (a forwarded metadata request, a put waiting for the
appender), its further frames wait in the receive buffer and reading is paused, so one client
cannot queue unbounded work behind everybody else's. Internal links between broker processes
(``pause_reading_on_backlog=False``) never stop reading because of their own write backlog: both
ends of such a link wait on each other, and their work is bounded by the callers.
"""
import asyncio
import itertools
import logging
import socket as _socket
from typing import Any, Callable, Optional

from pybroker._fast.frame import TAKE_END, TAKE_FAULT, TAKE_FULL, split_frames
from pybroker._fast.socket_reader import SocketReader
from pybroker.errors import ProtocolError
from pybroker.protocol import command as _command
from pybroker.protocol.command import MappedBody, RemotingCommand
from pybroker.protocol.constants import RPC_ONEWAY, SerializeType
from pybroker.remoting.frame_taker import FrameTaker, WholeFrames
from pybroker.remoting.invocations import Invocations
from pybroker.remoting.limits import ConnectionLimits
from pybroker.remoting.receive_buffer import RECEIVE_BUFFER_INITIAL_BYTES, ReceiveBuffer
from pybroker.remoting.timers import ConnectionTimer
from pybroker.remoting.write_queue import WriteQueue

__all__ = ["Dispatch", "RemotingConnection"]

LOGGER = logging.getLogger("pybroker.remoting")

_SERIALIZE_JSON = int(SerializeType.JSON)
_DEFAULT_LIMITS = ConnectionLimits()
_connection_ids = itertools.count(1)

Dispatch = Callable[["RemotingConnection", RemotingCommand], None]

# The transport of a connection not made yet (asyncio calls connection_made first).
_UNCONNECTED = asyncio.Transport()
# asyncio's plain socket transport (not public): the one whose socket a SocketReader may read.
_SOCKET_TRANSPORT: type = \
    asyncio.selector_events._SelectorSocketTransport  # type: ignore[attr-defined]


class RemotingConnection(asyncio.BufferedProtocol):
    """One remoting connection (server or client side); see the module docstring.

    ``dispatch(connection, request)`` is called for every request that arrives (it must not
    block; a RequestTable runs handlers). ``limits``: :class:`ConnectionLimits`.
    ``serialize_type``: header encoding of the commands this side sends (JSON by default; replies
    stay JSON so C++ clients can read them). ``on_close(connection, exc)`` runs once when the
    connection is lost. ``attachment`` is free for the owner (the broker keeps its Channel there).
    ``read_in_c``: a plain socket is read by :class:`~pybroker._fast.socket_reader.SocketReader`
    (False: by asyncio's transport, as a TLS one always is; the tests compare the two).
    """

    def __init__(self, dispatch: Dispatch, limits: ConnectionLimits = _DEFAULT_LIMITS, *,
                 serialize_type: int = _SERIALIZE_JSON,
                 on_open: Optional[Callable[["RemotingConnection"], None]] = None,
                 on_close: Optional[Callable[["RemotingConnection", Optional[BaseException]],
                                             None]] = None,
                 unmatched_response: Optional[Callable[["RemotingConnection", RemotingCommand],
                                                       None]] = None,
                 read_in_c: bool = True):
        self.connection_id = next(_connection_ids)
        self.remote_address = ""
        self.attachment: object = None
        # Called with responses no invoke() here waits for (the broker relays a client's answer
        # to a call the metadata service made through this connection); None: log and drop.
        self.unmatched_response = unmatched_response
        self.limits = limits
        self.serialize_type = serialize_type
        self._dispatch = dispatch
        self._on_open = on_open
        self._on_close = on_close
        self._loop: asyncio.AbstractEventLoop          # set by connection_made
        self._transport: asyncio.Transport = _UNCONNECTED
        self._closed = False
        self._close_reason: Optional[str] = None
        self._taker: FrameTaker = WholeFrames(limits.frame_max_bytes)
        self._received = ReceiveBuffer()
        self._read_in_c = read_in_c
        # The loop's reader of a plain socket in place of the transport's (connection_made),
        # and its selector loop (_add_reader and _remove_reader are not public).
        self._reader: Optional[SocketReader] = None
        self._selector_loop: Any = None
        # The reader in C reads _closed, _frames_held, _writes.queued_bytes, _transport_unsent
        # and handler_tasks to know that nothing is pending before its first take.
        self._writes = WriteQueue()
        # lend_socket's borrower and whether it holds the socket now.
        self._borrower: Optional[Callable[[int], object]] = None
        self._socket_lent = False
        self._calls = Invocations()
        self._timer = ConnectionTimer(limits, self._time_limit_passed)
        self._transport_unsent = 0    # transport buffer at the last flush or resume (bytes)
        self._flush_scheduled = False
        self._reading_paused = False
        self._writing_paused = False  # the transport asked us to stop writing
        # Whole frames left in the receive buffer while back-pressure holds them (replies
        # unsent, handlers still waiting, no room in the taker): run once that eases.
        self._frames_held = False
        self.handler_tasks: set[asyncio.Task] = set()
        self.closed_future: Optional[asyncio.Future] = None

    # --- state -----------------------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        """True once the connection is closing or closed; sends are then dropped."""
        return self._closed

    @property
    def close_reason(self) -> Optional[str]:
        """Why this side closed the connection (a limit, a protocol error), or None."""
        return self._close_reason

    @property
    def pending_requests_count(self) -> int:
        """Requests sent with :meth:`invoke` and not yet answered."""
        return len(self._calls)

    @property
    def unsent_bytes(self) -> int:
        """Bytes queued for this loop turn plus bytes the transport has not written yet."""
        transport_bytes = 0 if self._transport is _UNCONNECTED \
            else self._transport.get_write_buffer_size()
        return transport_bytes + self._writes.queued_bytes

    @property
    def is_reading_paused(self) -> bool:
        """True while reading is paused because the peer does not read its replies."""
        return self._reading_paused

    @property
    def receive_buffer_capacity_bytes(self) -> int:
        """Current size of the receive buffer (grows for a big frame, shrinks after it)."""
        return len(self._received.data)

    @property
    def frame_taker(self) -> FrameTaker:
        """What the receive loop walks the buffer with (see the module docstring)."""
        return self._taker

    def use_frame_taker(self, taker: Optional[FrameTaker]) -> None:
        """Walk the receive buffer with ``taker`` from the next read on (the send fast path's
        port); None: :class:`WholeFrames` again."""
        self._taker = taker if taker is not None else WholeFrames(self.limits.frame_max_bytes)
        if self._reader is not None:
            self._reader.use_taker(self._taker)

    def __repr__(self) -> str:
        return f"RemotingConnection(id={self.connection_id}, remote={self.remote_address!r})"

    # --- asyncio protocol callbacks ----------------------------------------------------------

    def connection_made(self, transport) -> None:
        self._transport = transport
        self._loop = asyncio.get_running_loop()
        self.closed_future = self._loop.create_future()
        self.remote_address = _address_text(transport)
        socket = transport.get_extra_info("socket")
        if socket is not None and socket.family in (_socket.AF_INET, _socket.AF_INET6):
            # asyncio turns Nagle off only on sockets made with proto IPPROTO_TCP; the ones
            # accepted from our listeners (made with proto 0) kept it on, so an answer written
            # while an earlier one was unacknowledged waited for the peer's delayed ACK (40 ms).
            socket.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        if socket is not None and transport.get_extra_info("sslcontext") is None:
            self._writes.socket_fd = socket.fileno()
            if self._read_in_c and isinstance(transport, _SOCKET_TRANSPORT):
                self._read_socket_in_c(transport, socket.fileno())
        high = self.limits.write_buffer_high_bytes
        transport.set_write_buffer_limits(high=high, low=high // 4)
        self._calls.start(self._loop)
        self._timer.start(self._loop)
        if self._on_open is not None:
            self._on_open(self)

    def _read_socket_in_c(self, transport: Any, fd: int) -> None:
        """Be the loop's reader of ``fd`` (SocketReader) instead of ``transport``: the
        transport stays paused for good (asyncio calls connection_made before it adds its
        reader, which a paused transport does not; its close and abort remove whichever
        reader the fd has), and _update_reading adds and removes this one."""
        self._reader = SocketReader(self, transport, fd, RECEIVE_BUFFER_INITIAL_BYTES)
        transport.pause_reading()
        # loop.add_reader refuses an fd a transport owns; _add_reader is what the transport
        # itself calls.
        self._selector_loop = self._loop
        self._selector_loop._add_reader(fd, self._reader)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._received.free_view()

    def buffer_updated(self, nbytes: int) -> None:
        self._received.end += nbytes
        self._timer.touch()
        self._process_frames()

    def eof_received(self) -> bool:
        return False  # close our side too: RocketMQ has no half-closed use

    def pause_writing(self) -> None:
        # The peer is not reading its replies: stop reading its requests until it does.
        if not self.limits.pause_reading_on_backlog:
            return
        if not self._writing_paused and not self._closed:
            self._writing_paused = True
            self._update_reading()
            self._timer.stall_started()

    def resume_writing(self) -> None:
        self._timer.stall_since = None
        self._writing_paused = False
        if self._closed:
            return
        self._transport_unsent = self._transport.get_write_buffer_size()
        if self._frames_held:
            self._loop.call_soon(self._run_held_frames)
        else:
            self._update_reading()

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        self._mark_closed()
        self._reader = None
        self._writes.drop()
        reason = self._close_reason or (f"connection lost: {exc}" if exc else "connection closed")
        self._calls.fail_all(f"{self.remote_address}: {reason}")
        # Drop the receive buffer: a closed connection holds no memory.
        self._received.drop()
        if self.closed_future is not None and not self.closed_future.done():
            self.closed_future.set_result(None)
        if self._on_close is not None:
            self._on_close(self, exc)

    # --- receive: the one loop over the frame taker ------------------------------------------

    def _process_frames(self, taken: Optional[tuple[int, int, int]] = None) -> None:
        """Walk the received bytes with the frame taker: what it takes is done; the frame it
        hands back is decoded and dispatched here; back-pressure is checked before each step.
        ``taken``: the first step's take, already made from ``received.start`` (the reader in
        C makes it when nothing can hold the first frame back)."""
        taker = self._taker
        limits = self.limits
        received = self._received
        buffer = received.data
        start = position = received.start
        end = received.end
        try:
            while position < end:
                if taken is None:
                    if self._closed:
                        return
                    if self._must_wait():
                        received.start = position
                        return
                    taken = taker.take(buffer, position, end)
                (position, outcome, frame_length), taken = taken, None
                received.start = position
                if outcome == TAKE_END:
                    break
                if outcome == TAKE_FULL:
                    # The rest waits in the receive buffer (reading pauses) until the taker
                    # has room (the appender frees ring space or completion slots).
                    self._frames_held = True
                    self._update_reading()
                    taker.wait_for_space().add_done_callback(self._space_freed)
                    return
                if outcome == TAKE_FAULT:
                    split_frames(buffer, position, end, limits.frame_max_bytes)
                    raise ProtocolError(f"frame at byte {position} is malformed")
                self._receive(_command.decode(
                    buffer, position, frame_length, ext_fields_max=limits.ext_fields_max,
                    frame_max_bytes=limits.frame_max_bytes, copy_body=True))
                position += frame_length
                received.start = position
        except ProtocolError as error:
            self._protocol_error(error)
            return
        received.consumed_to(position)
        if position == end:
            self._timer.partial_since = None
        elif self._timer.partial_since is None or position != start:
            # No timer move needed: the timer never sleeps longer than the partial-frame timeout.
            self._timer.partial_since = self._timer.last_activity

    def _receive(self, command: RemotingCommand) -> None:
        if not command.is_response:
            self._dispatch(self, command)
        elif not self._calls.answer(command):
            if self.unmatched_response is not None:
                self.unmatched_response(self, command)
                return
            LOGGER.debug("%s: dropped a response nobody waits for (opaque %d, code %d)",
                         self.remote_address, command.opaque, command.code)

    def _protocol_error(self, error: ProtocolError) -> None:
        # The message carries the TLS/HTTP hint when the first bytes look like another protocol.
        LOGGER.warning("closing remoting connection from %s: %s", self.remote_address, error)
        self.abort(f"protocol error: {error}")

    # --- back-pressure -------------------------------------------------------------------------

    def _must_wait(self) -> bool:
        """Checked before each frame: True when the rest must wait in the receive buffer (the
        replies already queued exceed write_buffer_high_bytes: one read may hold hundreds of
        requests, each answered with up to a pull batch; or requests_in_progress_max handlers
        still wait, resumed by _task_done, not by a timer)."""
        limits = self.limits
        if limits.pause_reading_on_backlog and \
                self._writes.queued_bytes + self._transport_unsent > \
                limits.write_buffer_high_bytes:
            self._frames_held = True
            self._update_reading()
            if not self._flush_scheduled and not self._writing_paused:
                # Nothing will wake us (no flush pending, no resume_writing coming): retry soon.
                self._loop.call_soon(self._run_held_frames)
            return True
        if len(self.handler_tasks) >= limits.requests_in_progress_max:
            self._frames_held = True
            self._update_reading()
            return True
        return False

    def _space_freed(self, future: asyncio.Future) -> None:
        if not future.cancelled():
            self._run_held_frames()

    def start_handler_task(self, coroutine) -> asyncio.Task:
        """Run ``coroutine`` (a handler that waits; it answers its own errors) as a Task of
        this connection's loop, counted against ``requests_in_progress_max`` until it
        finishes. The loop keeps only weak references to tasks: the connection keeps them
        alive. (The connection's own loop: asyncio.get_running_loop() is a getpid system call
        on Python 3.11.)"""
        task = self._loop.create_task(coroutine)  # tidy: allow (answers its own errors)
        self.handler_tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self.handler_tasks.discard(task)
        if self._frames_held and not self._closed and \
                len(self.handler_tasks) < self.limits.requests_in_progress_max:
            self._loop.call_soon(self._run_held_frames)

    def _run_held_frames(self) -> None:
        if self._closed or not self._frames_held or self._writing_paused:
            return
        self._transport_unsent = self._transport.get_write_buffer_size()
        self._frames_held = False
        self._process_frames()
        self._update_reading()

    def _update_reading(self) -> None:
        # Read while neither the transport's write buffer nor held frames say stop.
        paused = self._writing_paused or self._frames_held
        if paused == self._reading_paused or self._closed:
            return
        self._reading_paused = paused
        transport = self._transport
        if self._reader is not None:
            if paused:
                self._selector_loop._remove_reader(self._writes.socket_fd)
            elif not transport.is_closing():    # a closing transport removed the reader
                self._selector_loop._add_reader(self._writes.socket_fd, self._reader)
        elif paused:
            transport.pause_reading()
        else:
            transport.resume_reading()

    # --- send ------------------------------------------------------------------------------

    def send(self, command: RemotingCommand, *, now: bool = False) -> None:
        """Encode ``command`` now and write it at the end of this loop turn, or with ``now``
        at once, after what is queued before it (an answer that is not one of a read's, as a
        handler's that waited: no other answer of the same read can join its write, and the
        end of the turn is one more loop turn away).

        Raises ValueError/TypeError when the command cannot be encoded (e.g. a frame over
        ``frame_max_bytes``). On a closed connection the command is dropped (logged at DEBUG),
        as a late reply to a client that went away is.
        """
        body = command.body
        if isinstance(body, MappedBody):
            try:
                head = _command.encode_head(command, body.nbytes, self.serialize_type,
                                            frame_max_bytes=self.limits.frame_max_bytes)
            except BaseException:
                body.release()
                raise
            if not self._queue(head, now):
                body.release()
                return
            self._writes.append_mapped(body)
        elif not self._queue(_command.encode(command, self.serialize_type,
                                             frame_max_bytes=self.limits.frame_max_bytes),
                             now):
            return
        if now:
            self._write_queued()
        else:
            self._flush_at_turn_end()

    def send_frame(self, frame: bytes) -> None:
        """Queue an already encoded frame (e.g. a forwarded answer) for this loop turn's write."""
        if self._queue(frame):
            self._flush_at_turn_end()

    def _queue(self, frame: bytes, written_now: bool = False) -> bool:
        """Queue ``frame``; False when the connection is closed (the frame dropped).
        ``written_now``: the caller writes the queue before anything else runs, and
        _after_write then decides whether the socket stays lent (no lending back and forth
        around a write)."""
        if self._closed:
            LOGGER.debug("%s: connection closed, dropped a %d-byte frame", self.remote_address,
                         len(frame))
            return False
        self._writes.append(frame)
        if self._socket_lent and not written_now:
            self._lend(False)       # it must not write before this frame
        return True

    def _flush_at_turn_end(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def write_frames(self, frames: bytes) -> None:
        """Write already encoded frames now, after anything queued (the send fast path's
        answers: one call per connection per completion drain)."""
        if self._closed:
            return
        if self._writes:
            self._writes.append(frames)
            self._flush()
            return
        self._transport.write(frames)
        self._after_write()

    def direct_write_fd(self) -> int:
        """The socket a frame taker may write whole answers to itself now: a plain socket
        with nothing queued or buffered before them (they leave in order), else -1 (then
        :meth:`write_frames`). The pull fast path writes its records from the mappings."""
        transport = self._transport
        if self._closed or self._writes or transport.get_write_buffer_size() \
                or transport.is_closing():
            return -1
        return self._writes.socket_fd

    def wrote_directly(self) -> None:
        """A frame taker wrote answers to :meth:`direct_write_fd` itself."""
        self._after_write()

    def lend_socket(self, borrower: Callable[[int], object]) -> None:
        """Let ``borrower`` write whole answers to the socket itself between loop callbacks
        (the send fast path's answers of a completion drain, SendCompletions.send_outputs):
        ``borrower(fd)`` whenever nothing is queued or buffered before what it would write,
        ``borrower(-1)`` as soon as something is (a frame queued, bytes left in the
        transport's buffer, the connection closing); what its socket does not take it
        writes with :meth:`write_frames`, after which the connection decides again. Only on
        a plain socket (not TLS); the borrower's writes do not count as activity for
        the idle timer (the requests they answer did)."""
        if self._writes.socket_fd < 0:
            return
        self._borrower = borrower
        self._lend(self._socket_free())

    def _socket_free(self) -> bool:
        """Nothing queued or buffered before what a borrower would write, and open."""
        transport = self._transport
        return not (self._closed or self._writes or transport.get_write_buffer_size()
                    or transport.is_closing())

    def _lend(self, lent: bool) -> None:
        borrower = self._borrower
        if borrower is not None:
            self._socket_lent = lent
            borrower(self._writes.socket_fd if lent else -1)

    def _flush(self) -> None:
        self._flush_scheduled = False
        self._write_queued()

    def _write_queued(self) -> None:
        if self._closed or not self._writes:
            return
        self._writes.write_to(self._transport)
        self._after_write()

    def _after_write(self) -> None:
        self._timer.touch()
        unsent_bytes = self._transport_unsent = self._transport.get_write_buffer_size()
        if self._borrower is not None:
            free = self._socket_free()
            if free != self._socket_lent:
                self._lend(free)
        if unsent_bytes > self.limits.write_buffer_max_bytes:
            LOGGER.warning("closing remoting connection from %s: %d unsent bytes, over "
                           "write_buffer_max_bytes %d", self.remote_address, unsent_bytes,
                           self.limits.write_buffer_max_bytes)
            self.abort(f"{unsent_bytes} unsent bytes over write_buffer_max_bytes")
        elif self._frames_held and not self._writing_paused:
            self._loop.call_soon(self._run_held_frames)

    async def invoke(self, command: RemotingCommand, timeout_ms: int) -> RemotingCommand:
        """Send request ``command`` and wait up to ``timeout_ms`` for the response to its opaque.

        Raises TimeoutError when no response arrives in time, ConnectionError when the
        connection is or becomes closed, ValueError when the opaque is already outstanding.
        """
        if self._closed:
            raise ConnectionError(f"{self.remote_address}: connection is closed")
        opaque = command.opaque
        future = self._calls.expect(opaque, timeout_ms)
        try:
            self.send(command)
        except BaseException:
            self._calls.forget(opaque)
            raise
        try:
            return await future
        finally:
            self._calls.forget(opaque, future)

    def send_oneway(self, command: RemotingCommand) -> None:
        """Send ``command`` as a oneway request (flag bit 1 set): the peer never answers."""
        command.flag |= RPC_ONEWAY
        self.send(command)

    # --- close ----------------------------------------------------------------------------

    def close(self) -> None:
        """Write what is queued, then close (the transport flushes its buffer first)."""
        if self._closed or self._transport is _UNCONNECTED:
            return
        self._flush()
        self._mark_closed()
        self._transport.close()

    def abort(self, reason: str) -> None:
        """Close at once, discarding unsent data; ``reason`` is kept in :attr:`close_reason`."""
        if self._transport is _UNCONNECTED:
            return
        if self._close_reason is None:
            self._close_reason = reason
        self._mark_closed()
        self._transport.abort()

    def _mark_closed(self) -> None:
        self._closed = True
        self._timer.stop()
        if self._socket_lent:
            self._lend(False)

    def _time_limit_passed(self, reason: str) -> None:
        LOGGER.info("closing remoting connection from %s: %s", self.remote_address, reason)
        self.abort(reason)


def _address_text(transport) -> str:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    # Unix sockets: the client side has no peer name; name the socket path instead.
    return f"unix:{peer or transport.get_extra_info('sockname') or ''}"
