# One remoting connection: receive buffer, frame splitting, request/response matching, writes.
"""The asyncio protocol both the server and the client run on each socket.

Receive path. A :class:`RemotingConnection` is an :class:`asyncio.BufferedProtocol`: the kernel
reads into free space at the end of one receive buffer (``recv_into``), then ONE
:func:`pybroker._fast.frame.split_frames` call per read finds every whole frame, and each frame is
decoded with :func:`pybroker.protocol.command.decode`. The header is parsed in place (orjson and
the binary decoder read from a view of the buffer); the body is copied ONCE out of the buffer into
a ``bytes`` (``copy_body=True``). So a message body costs two copies in all: kernel -> receive
buffer, receive buffer -> ``bytes``. The copy buys a simple buffer: handlers may keep a command
(long polling parks pulls; sends wait for the appender) while the buffer is compacted and reused,
and no view of the buffer outlives a read. Memory: the buffer (64 KiB) is allocated at the first
read, grows at most by doubling per read up to the frame being received (so a peer must really
send the bytes it announces), and shrinks back to 64 KiB once it is empty.

Send fast path. When the owner sets ``fast_sends`` (a remoting worker's client connections),
each read first goes to that port: it takes every leading send it can straight from the receive
buffer into the send ring (docs/architecture/send-fast-path.md); the first other frame is
decoded and dispatched as above, then the port goes on after it. When the ring has no room the
rest of the buffer waits (reading pauses) until the appender frees space. The port's answers
arrive as one bytes object per connection per completion drain (:meth:`write_frames`).

Write path. :meth:`RemotingConnection.send` encodes at once (so an unencodable command raises at
the caller) and queues the frame; the queue is written with one ``transport.writelines`` per
event-loop turn (``loop.call_soon``), so the replies to every frame of one read leave in one
system call. A pull's records (:class:`pybroker.protocol.command.MappedBody`, views of the
mapped CommitLog) are queued as those views after their frame head and are never copied in
user space: on a plain socket whose transport has nothing buffered the queue goes out with
``os.writev`` (asyncio 3.11's ``writelines`` would join it into one bytes), only a part the kernel
does not take is copied into the transport's buffer; over TLS the queue is joined. The views
are released once written.

Matching. Both sides may send requests on one connection (broker -> client
NOTIFY_CONSUMER_IDS_CHANGED / CHECK_TRANSACTION_STATE). Requests go to the ``dispatch`` callable
(a :class:`pybroker.remoting.server.RequestTable`); responses are matched by opaque to the futures
of :meth:`RemotingConnection.invoke`; unmatched responses are logged and dropped (protocol.md §1.5).

Limits (:class:`ConnectionLimits`), each closing only the offending connection: frame size and
ext-field count (ProtocolError: one log line with the TLS/HTTP hint, then close), idle time
(nothing read or written), partial-frame time (a frame started but not finished: slowloris), and
writes: above ``write_buffer_high_bytes`` of unsent replies reading is paused until the peer
drains; a peer that does not drain within ``write_stall_timeout_ms``, or lets the unsent bytes
pass ``write_buffer_max_bytes``, is closed. The same threshold is checked between the frames of
one read: the rest wait in the receive buffer until the replies drain, so a peer that pipelines
requests and reads nothing holds about one threshold of replies, not one reply per request.
Replies that do not exist yet count too: while ``requests_in_progress_max`` handlers of this
connection are still waiting (a forwarded metadata request, a put waiting for the appender),
its further frames wait in the receive buffer and reading is paused, so one client cannot
queue unbounded work behind everybody else's. Internal links between broker processes
(``pause_reading_on_backlog=False``) never stop reading because of their own write backlog:
both ends of such a link wait on each other, and their work is bounded by the callers.
"""
import asyncio
import dataclasses
import itertools
import logging
import os
from typing import Any, Callable, Optional, Protocol

from pybroker._fast.frame import split_frames
from pybroker.config import RemotingConfig
from pybroker.errors import ProtocolError
from pybroker.protocol import command as _command
from pybroker.protocol.command import MappedBody, RemotingCommand
from pybroker.protocol.constants import RPC_ONEWAY, SerializeType

LOGGER = logging.getLogger("pybroker.remoting")

_REMOTING_DEFAULTS = RemotingConfig()
# Free space offered to each read; a frame larger than this grows the buffer to fit it.
RECEIVE_BUFFER_INITIAL_BYTES = 64 * 1024
_FRAME_LENGTH_FIELD_BYTES = 4
_SERIALIZE_JSON = int(SerializeType.JSON)
# IOV_MAX on Linux: parts per os.writev call.
_WRITEV_MAX_PARTS = 1024
_connection_ids = itertools.count(1)

class FastSends(Protocol):
    """A connection's door to its owner's send fast path (proc/ring_putter.FastSendPort)."""
    TAKE_END: int
    TAKE_OTHER: int
    TAKE_FULL: int
    TAKE_FAULT: int

    def take(self, buffer: bytearray, start: int, end: int) -> tuple[int, int, int]:
        """``(position, outcome, frame_length)`` after taking the fast frames from start."""

    def wait_for_space(self) -> "asyncio.Future[None]":
        """Resolved when a TAKE_FULL may be retried."""

    def close(self) -> None:
        """The connection closed."""


Dispatch = Callable[["RemotingConnection", RemotingCommand], None]


@dataclasses.dataclass(frozen=True)
class ConnectionLimits:
    """Per-connection limits; every one is enforced by closing the offending connection.

    ``frame_max_bytes``: largest whole frame accepted (Java's 16 MiB). ``ext_fields_max``: ext
    fields in one header. ``idle_timeout_ms``: close after this long with nothing read or
    written; 0 = never (Java's serverChannelMaxIdleTimeSeconds, 120 s).
    ``partial_frame_timeout_ms``: close when a frame has started arriving but is not complete
    after this long (slowloris). ``write_buffer_high_bytes``: unsent bytes above which reading
    from the peer is paused (resumed below a quarter of it). ``write_stall_timeout_ms``: close a
    peer whose reading has been paused this long. ``write_buffer_max_bytes``: close at once when
    unsent bytes exceed this. ``requests_in_progress_max``: handlers of this connection still
    waiting, above which further frames wait (reading paused). ``pause_reading_on_backlog``:
    False for internal links, which keep reading whatever their write backlog.
    """
    frame_max_bytes: int = _REMOTING_DEFAULTS.frame_max_bytes
    ext_fields_max: int = _REMOTING_DEFAULTS.ext_fields_max
    idle_timeout_ms: int = _REMOTING_DEFAULTS.server_channel_max_idle_time_seconds * 1000
    partial_frame_timeout_ms: int = 60_000
    write_buffer_high_bytes: int = 1 << 20
    write_stall_timeout_ms: int = 60_000
    write_buffer_max_bytes: int = 64 << 20
    requests_in_progress_max: int = 1024
    pause_reading_on_backlog: bool = True

    def __post_init__(self):
        checks = (("frame_max_bytes", self.frame_max_bytes, 16, 1 << 31),
                  ("ext_fields_max", self.ext_fields_max, 0, 1 << 20),
                  ("idle_timeout_ms", self.idle_timeout_ms, 0, 1 << 40),
                  ("partial_frame_timeout_ms", self.partial_frame_timeout_ms, 1, 1 << 40),
                  ("write_buffer_high_bytes", self.write_buffer_high_bytes, 4, 1 << 40),
                  ("write_stall_timeout_ms", self.write_stall_timeout_ms, 1, 1 << 40),
                  ("write_buffer_max_bytes", self.write_buffer_max_bytes,
                   self.write_buffer_high_bytes, 1 << 40),
                  ("requests_in_progress_max", self.requests_in_progress_max, 1, 1 << 30))
        for name, value, low, high in checks:
            if not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name}={value!r}: must be an int in [{low}, {high}]")

    @classmethod
    def from_config(cls, remoting: RemotingConfig, *, server: bool = True,
                    **overrides) -> "ConnectionLimits":
        """Limits from the broker's remoting settings (server or client idle time)."""
        idle_seconds = (remoting.server_channel_max_idle_time_seconds if server
                        else remoting.client_channel_max_idle_time_seconds)
        values: dict[str, Any] = dict(frame_max_bytes=remoting.frame_max_bytes,
                      ext_fields_max=remoting.ext_fields_max, idle_timeout_ms=idle_seconds * 1000)
        values.update(overrides)
        return cls(**values)


# The transport of a connection not made yet (asyncio calls connection_made first).
_UNCONNECTED = asyncio.Transport()


class RemotingConnection(asyncio.BufferedProtocol):
    """One remoting connection (server or client side); see the module docstring.

    ``dispatch(connection, request)`` is called for every request that arrives (it must not
    block; a RequestTable runs handlers). ``limits``: :class:`ConnectionLimits`.
    ``serialize_type``: header encoding of the commands this side sends (JSON by default; replies
    stay JSON so C++ clients can read them). ``on_close(connection, exc)`` runs once when the
    connection is lost. ``attachment`` is free for the owner (the broker keeps its Channel there).
    """

    def __init__(self, dispatch: Dispatch, limits: ConnectionLimits = ConnectionLimits(), *,
                 serialize_type: int = _SERIALIZE_JSON,
                 on_open: Optional[Callable[["RemotingConnection"], None]] = None,
                 on_close: Optional[Callable[["RemotingConnection", Optional[BaseException]],
                                             None]] = None,
                 unmatched_response: Optional[Callable[["RemotingConnection", RemotingCommand],
                                                       None]] = None):
        self.connection_id = next(_connection_ids)
        self.remote_address = ""
        self.attachment: object = None
        # The owner's send fast path (a ring_putter.FastSendPort), or None: every frame is
        # decoded into a RemotingCommand. See _process_fast_frames.
        self.fast_sends: Optional[FastSends] = None
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
        # Allocated at the first read: a connection that never sends holds no buffer.
        self._receive_buffer = bytearray()
        self._data_start = 0      # first unconsumed byte in _receive_buffer
        self._data_end = 0        # end of the received bytes
        self._write_queue: list[bytes | memoryview] = []
        self._queued_bytes = 0        # bytes in _write_queue
        self._write_holds: list[MappedBody] = []    # released once the queue is written
        self._socket_fd = -1          # a plain socket written with os.writev (not TLS)
        self._transport_unsent = 0    # transport buffer at the last flush or resume (bytes)
        self._flush_scheduled = False
        self._reading_paused = False
        self._writing_paused = False  # the transport asked us to stop writing
        # Whole frames left in the receive buffer while the replies already queued exceed
        # write_buffer_high_bytes: run once they drain (a stalled reader holds 1 reply batch).
        self._frames_held = False
        self._pending: dict[int, asyncio.Future] = {}
        self._deadlines_by_opaque: dict[int, tuple[float, int]] = {}  # (loop time, timeout_ms)
        self._sweep_timer: Optional[asyncio.TimerHandle] = None
        self.handler_tasks: set[asyncio.Task] = set()
        self._timer: Optional[asyncio.TimerHandle] = None
        self._last_activity = 0.0
        self._partial_since: Optional[float] = None
        self._stall_since: Optional[float] = None
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
        return len(self._pending)

    @property
    def unsent_bytes(self) -> int:
        """Bytes queued for this loop turn plus bytes the transport has not written yet."""
        transport_bytes = 0 if self._transport is _UNCONNECTED \
            else self._transport.get_write_buffer_size()
        return transport_bytes + sum(len(frame) for frame in self._write_queue)

    @property
    def is_reading_paused(self) -> bool:
        """True while reading is paused because the peer does not read its replies."""
        return self._reading_paused

    @property
    def receive_buffer_capacity_bytes(self) -> int:
        """Current size of the receive buffer (grows for a big frame, shrinks after it)."""
        return len(self._receive_buffer)

    def __repr__(self) -> str:
        return f"RemotingConnection(id={self.connection_id}, remote={self.remote_address!r})"

    # --- asyncio protocol callbacks ----------------------------------------------------------

    def connection_made(self, transport) -> None:
        self._transport = transport
        self._loop = asyncio.get_running_loop()
        self.closed_future = self._loop.create_future()
        self.remote_address = _address_text(transport)
        socket = transport.get_extra_info("socket")
        if socket is not None and transport.get_extra_info("sslcontext") is None:
            self._socket_fd = socket.fileno()
        high = self.limits.write_buffer_high_bytes
        transport.set_write_buffer_limits(high=high, low=high // 4)
        self._last_activity = self._loop.time()
        self._arm_timer()
        if self._on_open is not None:
            self._on_open(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        # Room is made here, not in buffer_updated: asyncio still holds the view it read into
        # while buffer_updated runs, and a bytearray with a live view cannot move.
        self._make_room()
        return memoryview(self._receive_buffer)[self._data_end:]

    def buffer_updated(self, nbytes: int) -> None:
        self._data_end += nbytes
        self._last_activity = self._loop.time()
        self._process_frames()

    def _process_frames(self) -> None:
        if self.fast_sends is not None:
            self._process_fast_frames()
            return
        limits = self.limits
        high_bytes = limits.write_buffer_high_bytes
        try:
            frames, tail_position = split_frames(self._receive_buffer, self._data_start,
                                                 self._data_end, limits.frame_max_bytes)
            for frame_start, frame_length in frames:
                if self._closed:
                    return
                if limits.pause_reading_on_backlog and \
                        self._queued_bytes + self._transport_unsent > high_bytes:
                    # One read may hold hundreds of requests, each answered with up to a
                    # pull batch: stop here and run the rest once the replies have drained.
                    self._hold_frames()
                    return
                if len(self.handler_tasks) >= limits.requests_in_progress_max:
                    # Replies still to come: resumed by _task_done, not by a timer.
                    self._frames_held = True
                    self._update_reading()
                    return
                self._receive(_command.decode(
                    self._receive_buffer, frame_start, frame_length,
                    ext_fields_max=self.limits.ext_fields_max,
                    frame_max_bytes=self.limits.frame_max_bytes, copy_body=True))
                self._data_start = frame_start + frame_length
        except ProtocolError as error:
            self._protocol_error(error)
            return
        self._data_start = tail_position
        if tail_position == self._data_end:
            self._data_start = self._data_end = 0
            self._partial_since = None
        elif self._partial_since is None or frames:
            # No timer move needed: the timer never sleeps longer than the partial-frame timeout.
            self._partial_since = self._last_activity

    def _process_fast_frames(self) -> None:
        """_process_frames with the send fast path: the port takes every leading frame it can
        (sends to known topics, straight into the send ring, no command object); the first
        other frame is decoded and dispatched here, then the port goes on after it, so the
        requests of a connection keep their order."""
        port = self.fast_sends
        assert port is not None
        limits = self.limits
        buffer = self._receive_buffer
        start = position = self._data_start
        end = self._data_end
        try:
            while position < end:
                if self._closed:
                    return
                if limits.pause_reading_on_backlog and \
                        self._queued_bytes + self._transport_unsent > \
                        limits.write_buffer_high_bytes:
                    self._data_start = position
                    self._hold_frames()
                    return
                if len(self.handler_tasks) >= limits.requests_in_progress_max:
                    self._data_start = position     # resumed by _task_done
                    self._frames_held = True
                    self._update_reading()
                    return
                position, outcome, frame_length = port.take(buffer, position, end)
                self._data_start = position
                if outcome == port.TAKE_END:
                    break
                if outcome == port.TAKE_FULL:
                    # Back-pressure: the rest waits in the receive buffer (reading pauses)
                    # until the appender frees ring space or completion slots.
                    self._frames_held = True
                    self._update_reading()
                    port.wait_for_space().add_done_callback(self._space_freed)
                    return
                if outcome == port.TAKE_FAULT:
                    split_frames(buffer, position, end, limits.frame_max_bytes)
                    raise ProtocolError(f"frame at byte {position} is malformed")
                self._receive(_command.decode(
                    buffer, position, frame_length, ext_fields_max=limits.ext_fields_max,
                    frame_max_bytes=limits.frame_max_bytes, copy_body=True))
                position += frame_length
                self._data_start = position
        except ProtocolError as error:
            self._protocol_error(error)
            return
        if position == self._data_end:
            self._data_start = self._data_end = 0
            self._partial_since = None
        elif self._partial_since is None or position != start:
            self._partial_since = self._last_activity

    def _space_freed(self, future: asyncio.Future) -> None:
        if not future.cancelled():
            self._run_held_frames()

    def _hold_frames(self) -> None:
        self._frames_held = True
        self._update_reading()
        if not self._flush_scheduled and not self._writing_paused:
            # Nothing will wake us (no flush pending, no resume_writing coming): retry soon.
            self._loop.call_soon(self._run_held_frames)

    def track_task(self, task: asyncio.Task) -> None:
        """Count a handler that waits (see ``requests_in_progress_max``) until it finishes."""
        self.handler_tasks.add(task)
        task.add_done_callback(self._task_done)

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
        if paused:
            self._transport.pause_reading()
        else:
            self._transport.resume_reading()

    def eof_received(self) -> bool:
        return False  # close our side too: RocketMQ has no half-closed use

    def pause_writing(self) -> None:
        # The peer is not reading its replies: stop reading its requests until it does.
        if not self.limits.pause_reading_on_backlog:
            return
        if not self._writing_paused and not self._closed:
            self._writing_paused = True
            self._update_reading()
            self._stall_since = self._loop.time()
            self._arm_timer()

    def resume_writing(self) -> None:
        self._stall_since = None
        self._writing_paused = False
        if self._closed:
            return
        self._transport_unsent = self._transport.get_write_buffer_size()
        if self._frames_held:
            self._loop.call_soon(self._run_held_frames)
        else:
            self._update_reading()

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        self._closed = True
        for timer in (self._timer, self._sweep_timer):
            if timer is not None:
                timer.cancel()
        self._timer = self._sweep_timer = None
        self._write_queue.clear()
        self._release_holds()
        reason = self._close_reason or (f"connection lost: {exc}" if exc else "connection closed")
        pending, self._pending = self._pending, {}
        self._deadlines_by_opaque.clear()
        for future in pending.values():
            if not future.done():
                future.set_exception(ConnectionError(f"{self.remote_address}: {reason}"))
        # Drop the receive buffer: a closed connection holds no memory.
        self._receive_buffer = bytearray()
        if self.closed_future is not None and not self.closed_future.done():
            self.closed_future.set_result(None)
        if self._on_close is not None:
            self._on_close(self, exc)

    # --- receive -----------------------------------------------------------------------------

    def _make_room(self) -> None:
        buffer = self._receive_buffer
        held_bytes = self._data_end - self._data_start
        if held_bytes == 0 and len(buffer) > RECEIVE_BUFFER_INITIAL_BYTES:
            # A big frame is done: give the memory back instead of keeping it per connection.
            self._receive_buffer = bytearray(RECEIVE_BUFFER_INITIAL_BYTES)
            self._data_start = self._data_end = 0
            return
        wanted_bytes = RECEIVE_BUFFER_INITIAL_BYTES
        if held_bytes >= _FRAME_LENGTH_FIELD_BYTES:
            # split_frames has already checked this length field against frame_max_bytes.
            announced = int.from_bytes(buffer[self._data_start:self._data_start + 4], "big")
            # Room for the rest of the frame, but at most doubling per read: the memory a peer
            # makes us hold follows the bytes it really sent, not the length it announced.
            wanted_bytes = max(wanted_bytes, min(announced + 4 - held_bytes, len(buffer)))
        if len(buffer) - self._data_end >= wanted_bytes:
            return
        if len(buffer) - held_bytes >= wanted_bytes:
            buffer[:held_bytes] = buffer[self._data_start:self._data_end]
        else:
            grown = bytearray(held_bytes + wanted_bytes)
            grown[:held_bytes] = buffer[self._data_start:self._data_end]
            self._receive_buffer = grown
        self._data_start, self._data_end = 0, held_bytes

    def _receive(self, command: RemotingCommand) -> None:
        if command.is_response:
            future = self._pending.pop(command.opaque, None)
            self._deadlines_by_opaque.pop(command.opaque, None)
            if future is None or future.done():
                if self.unmatched_response is not None:
                    self.unmatched_response(self, command)
                    return
                LOGGER.debug("%s: dropped a response nobody waits for (opaque %d, code %d)",
                             self.remote_address, command.opaque, command.code)
                return
            future.set_result(command)
            return
        self._dispatch(self, command)

    def _protocol_error(self, error: ProtocolError) -> None:
        # The message carries the TLS/HTTP hint when the first bytes look like another protocol.
        LOGGER.warning("closing remoting connection from %s: %s", self.remote_address, error)
        self.abort(f"protocol error: {error}")

    # --- send ------------------------------------------------------------------------------

    def send(self, command: RemotingCommand) -> None:
        """Encode ``command`` now and write it at the end of this loop turn.

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
            self.send_frame(head)
            if self._closed:
                body.release()
                return
            self._write_queue.extend(body.views)
            self._queued_bytes += body.nbytes
            self._write_holds.append(body)
            return
        frame = _command.encode(command, self.serialize_type,
                                frame_max_bytes=self.limits.frame_max_bytes)
        self.send_frame(frame)

    def send_frame(self, frame: bytes) -> None:
        """Queue an already encoded frame (e.g. a forwarded answer) for this loop turn's write."""
        if self._closed:
            LOGGER.debug("%s: connection closed, dropped a %d-byte frame", self.remote_address,
                         len(frame))
            return
        self._write_queue.append(frame)
        self._queued_bytes += len(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def write_frames(self, frames: bytes) -> None:
        """Write already encoded frames now, after anything queued (the send fast path's
        answers: one call per connection per completion drain)."""
        if self._closed:
            return
        if self._write_queue:
            self._write_queue.append(frames)
            self._queued_bytes += len(frames)
            self._flush()
            return
        self._transport.write(frames)
        self._after_write()

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._closed or not self._write_queue:
            return
        queue, self._write_queue = self._write_queue, []
        self._queued_bytes = 0
        self._write_out(queue)
        self._release_holds()
        self._after_write()

    def _after_write(self) -> None:
        self._last_activity = self._loop.time()
        unsent_bytes = self._transport_unsent = self._transport.get_write_buffer_size()
        if unsent_bytes > self.limits.write_buffer_max_bytes:
            LOGGER.warning("closing remoting connection from %s: %d unsent bytes, over "
                           "write_buffer_max_bytes %d", self.remote_address, unsent_bytes,
                           self.limits.write_buffer_max_bytes)
            self.abort(f"{unsent_bytes} unsent bytes over write_buffer_max_bytes")
        elif self._frames_held and not self._writing_paused:
            self._loop.call_soon(self._run_held_frames)

    def _write_out(self, queue: list) -> None:
        """Write the queue in order: straight to a plain socket while the transport holds
        nothing (the views are not copied), else through the transport."""
        transport = self._transport
        if self._socket_fd < 0 or transport.get_write_buffer_size() or transport.is_closing():
            transport.writelines(queue)
            return
        start = 0
        while start < len(queue):
            parts = queue[start:start + _WRITEV_MAX_PARTS]
            try:
                written = os.writev(self._socket_fd, parts)
            except (BlockingIOError, InterruptedError):
                written = 0
            except OSError:
                break        # the transport's own write meets the error and closes
            for part in parts:
                if written < len(part):
                    if written:
                        queue[start] = part[written:]
                    break
                written -= len(part)
                start += 1
            else:
                continue
            break
        if start < len(queue):
            transport.write(b"".join(queue[start:]))

    def _release_holds(self) -> None:
        holds, self._write_holds = self._write_holds, []
        for body in holds:
            body.release()

    async def invoke(self, command: RemotingCommand, timeout_ms: int) -> RemotingCommand:
        """Send request ``command`` and wait up to ``timeout_ms`` for the response to its opaque.

        Raises TimeoutError when no response arrives in time, ConnectionError when the
        connection is or becomes closed, ValueError when the opaque is already outstanding.
        """
        if self._closed:
            raise ConnectionError(f"{self.remote_address}: connection is closed")
        opaque = command.opaque
        if opaque in self._pending:
            raise ValueError(f"opaque {opaque} already has an outstanding request")
        future = self._loop.create_future()
        deadline = self._loop.time() + timeout_ms / 1000
        self._pending[opaque] = future
        self._deadlines_by_opaque[opaque] = (deadline, timeout_ms)
        try:
            self.send(command)
        except BaseException:
            self._forget(opaque)
            raise
        # One sweep timer for all outstanding requests instead of a timer each (a timer per
        # request cost ~15% of a round trip); it is moved only for an earlier deadline.
        if self._sweep_timer is None or deadline < self._sweep_timer.when():
            self._arm_sweep(deadline)
        try:
            return await future
        finally:
            if self._pending.get(opaque) is future:
                self._forget(opaque)

    def _forget(self, opaque: int) -> None:
        self._pending.pop(opaque, None)
        self._deadlines_by_opaque.pop(opaque, None)

    def _arm_sweep(self, deadline: float) -> None:
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
        self._sweep_timer = self._loop.call_at(deadline, self._sweep_expired)

    def _sweep_expired(self) -> None:
        self._sweep_timer = None
        now = self._loop.time()
        earliest = None
        for opaque, (deadline, timeout_ms) in list(self._deadlines_by_opaque.items()):
            if deadline > now:
                earliest = deadline if earliest is None else min(earliest, deadline)
                continue
            future = self._pending.pop(opaque, None)
            del self._deadlines_by_opaque[opaque]
            if future is not None and not future.done():
                future.set_exception(TimeoutError(
                    f"no response to opaque {opaque} in {timeout_ms} ms"))
        if earliest is not None and not self._closed:
            self._arm_sweep(earliest)

    def send_oneway(self, command: RemotingCommand) -> None:
        """Send ``command`` as a oneway request (flag bit 1 set): the peer never answers."""
        command.flag |= RPC_ONEWAY
        self.send(command)

    # --- close and timers --------------------------------------------------------------------

    def close(self) -> None:
        """Write what is queued, then close (the transport flushes its buffer first)."""
        if self._closed or self._transport is _UNCONNECTED:
            return
        self._flush()
        self._closed = True
        self._transport.close()

    def abort(self, reason: str) -> None:
        """Close at once, discarding unsent data; ``reason`` is kept in :attr:`close_reason`."""
        if self._transport is _UNCONNECTED:
            return
        if self._close_reason is None:
            self._close_reason = reason
        self._closed = True
        self._transport.abort()

    def _deadlines(self) -> list[tuple[float, str]]:
        limits = self.limits
        deadlines = []
        if limits.idle_timeout_ms:
            deadlines.append((self._last_activity + limits.idle_timeout_ms / 1000,
                              f"idle for {limits.idle_timeout_ms} ms"))
        if self._partial_since is not None:
            deadlines.append((self._partial_since + limits.partial_frame_timeout_ms / 1000,
                              f"frame incomplete after {limits.partial_frame_timeout_ms} ms"))
        if self._stall_since is not None:
            deadlines.append((self._stall_since + limits.write_stall_timeout_ms / 1000,
                              f"peer read no replies for {limits.write_stall_timeout_ms} ms"))
        return deadlines

    def _arm_timer(self) -> None:
        # One timer per connection, moved only when a deadline comes EARLIER than it (a write
        # stall); reads just stamp times and the timer re-checks when it fires.
        if self._closed:
            return
        # Never sleep past one partial-frame timeout, so a partial frame that starts later is
        # still caught on time without moving the timer on every read.
        earliest = self._loop.time() + self.limits.partial_frame_timeout_ms / 1000
        for deadline, _ in self._deadlines():
            earliest = min(earliest, deadline)
        if self._timer is not None:
            if self._timer.when() <= earliest:
                return
            self._timer.cancel()
        self._timer = self._loop.call_at(earliest, self._check_timeouts)

    def _check_timeouts(self) -> None:
        self._timer = None
        if self._closed:
            return
        now = self._loop.time()
        for deadline, reason in self._deadlines():
            if now >= deadline:
                LOGGER.info("closing remoting connection from %s: %s", self.remote_address,
                            reason)
                self.abort(reason)
                return
        self._arm_timer()


def _address_text(transport) -> str:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    # Unix sockets: the client side has no peer name; name the socket path instead.
    return f"unix:{peer or transport.get_extra_info('sockname') or ''}"
