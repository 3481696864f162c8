# Remoting server: the request table (code -> handler) and the asyncio listener.
"""Serve RocketMQ remoting requests.

:class:`RequestTable` maps request codes to handlers ``async (connection, command) ->
RemotingCommand | None`` and turns their outcomes into replies the way a Java broker does
(protocol.md §1.5): an unknown code gets REQUEST_CODE_NOT_SUPPORTED (3) "request type N not
supported"; a :class:`pybroker.errors.HeaderError` its own code and remark; any other exception
SYSTEM_ERROR (1) with a one-line remark, the exception's type and first line with local paths
(files, internal sockets) replaced by ``<path>`` (the stack trace goes to the log, rate limited per
cause, never to the client); oneway requests (flag bit 1) are never answered; a handler returning
None sends nothing (it may answer later with ``connection.send``).

Handlers are coroutines, but most finish without waiting. The table starts each one with
``coroutine.send(None)`` right inside the read callback and only wraps it in a Task (of the
connection's loop) when it actually waits; benchmarks/micro/test_bench_remoting.py measures the
gain. The answer of a handler that waited is written as soon as it is made (it is alone: the
other answers of its read left at that read's turn end), one loop turn earlier than a queued
write would leave.

:func:`start_server` / :func:`start_unix_server` listen (TCP with optional SO_REUSEPORT, or a
unix socket, or a socket bound by the caller) and return a :class:`RemotingServer`.
"""
import asyncio
import logging
import re
import socket
import types
from typing import Any, Callable, Coroutine, Optional, Protocol

from pybroker.errors import HeaderError
from pybroker.protocol.codes import ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response
from pybroker.remoting.connection import RemotingConnection
from pybroker.remoting.limits import ConnectionLimits
from pybroker.remoting.tls import SniffingListener, TlsServer

LOGGER = logging.getLogger("pybroker.remoting")

# A coroutine function: the table may drive it eagerly (coroutine.send) before any Task.
Handler = Callable[[RemotingConnection, RemotingCommand],
                   Coroutine[Any, Any, Optional[RemotingCommand]]]
OnConnect = Callable[[RemotingConnection], None]
OnClose = Callable[[RemotingConnection, Optional[BaseException]], None]
OnUnmatchedResponse = Callable[[RemotingConnection, RemotingCommand], None]
# Runs before any handler (the ACL check); raises HeaderError to answer with its code/remark.
Guard = Callable[[RemotingConnection, RemotingCommand], None]

_SYSTEM_ERROR = int(ResponseCode.SYSTEM_ERROR)
_NOT_SUPPORTED = int(ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
# A remark is for a person reading a client log, not a dump.
SYSTEM_ERROR_REMARK_MAX_CHARS = 256
# Absolute paths (two or more segments), with an optional "unix:" prefix: store files and the
# internal unix sockets are nobody's business outside the broker host.
_LOCAL_PATH = re.compile(r"(?:unix:)?(?:/[^\s/'\"(),:;]+){2,}/?")


def client_remark(error: BaseException) -> str:
    """The remark a client gets for an unexpected ``error``: ``"Type: first line"`` without
    local paths, at most SYSTEM_ERROR_REMARK_MAX_CHARS characters."""
    lines = str(error).splitlines()
    text = _LOCAL_PATH.sub("<path>", lines[0] if lines else "")
    return f"{type(error).__name__}: {text}"[:SYSTEM_ERROR_REMARK_MAX_CHARS]


class RequestTable:
    """Request code -> handler, and the rules that turn handler outcomes into replies.

    ``handlers``: an optional initial mapping. ``eager``: start handlers inside the read
    callback and make a Task only when they wait (True), or always make a Task (False).
    ``guard(connection, request)``: runs before every request, known code or not (Java's
    server RPC hook); a HeaderError it raises is the answer and no handler runs.
    """

    def __init__(self, handlers: Optional[dict[int, Handler]] = None, *, eager: bool = True,
                 guard: Optional[Guard] = None):
        self._handlers: dict[int, Handler] = dict(handlers or {})
        self.eager = eager
        self.guard = guard

    def register(self, code: int, handler: Handler) -> None:
        """Serve request ``code`` with ``handler`` (replacing any earlier one)."""
        self._handlers[int(code)] = handler

    def update(self, handlers: dict[int, Handler]) -> None:
        """Register every ``code: handler`` of ``handlers``."""
        for code, handler in handlers.items():
            self.register(code, handler)

    def __contains__(self, code: int) -> bool:
        return code in self._handlers

    def __call__(self, connection: RemotingConnection, request: RemotingCommand) -> None:
        """Run the handler of ``request`` (the connection's dispatch callback)."""
        if self.guard is not None:
            try:
                self.guard(connection, request)
            except HeaderError as refused:
                if not request.is_oneway:
                    connection.send(create_response(request, refused.code, refused.remark))
                return
        handler = self._handlers.get(request.code)
        if handler is None:
            if not request.is_oneway:
                connection.send(create_response(
                    request, _NOT_SUPPORTED, f"request type {request.code} not supported"))
            return
        try:
            coroutine = handler(connection, request)
        except Exception as error:  # a handler that raised before its first await
            _answer_error(connection, request, error)
            return
        if not self.eager:
            self._spawn(connection, _finish(connection, request, coroutine, False))
            return
        try:
            yielded = coroutine.send(None)
        except StopIteration as stop:
            _answer(connection, request, stop.value)
            return
        except Exception as error:
            _answer_error(connection, request, error)
            return
        # The handler waits on something: a Task takes over from where it stopped, and
        # writes its answer at once when it comes (_finish).
        self._spawn(connection, _finish(connection, request, _resume(coroutine, yielded), True))

    @staticmethod
    def _spawn(connection: RemotingConnection, coroutine) -> None:
        # _finish answers every error of the request itself (per request: no done-callback).
        connection.start_handler_task(coroutine)


@types.coroutine
def _resume(coroutine, yielded):
    """Continue a coroutine that has already yielded ``yielded`` (the future it waits on)."""
    while True:
        try:
            sent = yield yielded
        except BaseException as error:  # cancellation and throws go to the handler
            try:
                yielded = coroutine.throw(error)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                yielded = coroutine.send(sent)
            except StopIteration as stop:
                return stop.value


async def _finish(connection: RemotingConnection, request: RemotingCommand, awaitable,
                  now: bool) -> None:
    """Await a handler's answer and send it; ``now``: the handler waited (it answers alone,
    in a later loop turn than its read), so its answer is written at once, not one more turn
    later (connection.send's ``now``)."""
    try:
        response = await awaitable
    except asyncio.CancelledError:
        raise
    except Exception as error:
        _answer_error(connection, request, error, now)
        return
    _answer(connection, request, response, now)


def _answer(connection: RemotingConnection, request: RemotingCommand,
            response: Optional[RemotingCommand], now: bool = False) -> None:
    if response is None or request.is_oneway:
        return
    try:
        connection.send(response, now=now)
    except (ValueError, TypeError) as error:  # e.g. a reply over frame_max_bytes
        _answer_error(connection, request, error, now)


def _answer_error(connection: RemotingConnection, request: RemotingCommand,
                  error: Exception, now: bool = False) -> None:
    if isinstance(error, HeaderError):
        code, remark = error.code, error.remark
    else:
        LOGGER.error("request code %d from %s failed", request.code, connection.remote_address,
                     exc_info=error)
        code = _SYSTEM_ERROR
        remark = client_remark(error)
    if request.is_oneway:
        return
    connection.send(create_response(request, code, remark), now=now)


class _Listener(Protocol):
    """What RemotingServer needs of asyncio.Server or a tls.SniffingListener."""
    @property
    def sockets(self) -> Any: ...

    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...


class RemotingServer:
    """A listening remoting server: its connections and its lifetime.

    ``connections``: connection_id -> live :class:`RemotingConnection`. ``on_connect(connection)``
    and ``on_close(connection, exc)`` let the broker track channels.
    """

    def __init__(self, table: RequestTable, limits: ConnectionLimits,
                 on_connect: Optional[OnConnect], on_close: Optional[OnClose],
                 connections_max: int = 0,
                 on_unmatched_response: Optional[OnUnmatchedResponse] = None):
        if connections_max < 0:
            raise ValueError(f"connections_max={connections_max}: must be >= 0 (0 = no cap)")
        self.table = table
        self.limits = limits
        self.connections_max = connections_max
        self.refused_connections_total = 0
        self.connections: dict[int, RemotingConnection] = {}
        self._on_connect = on_connect
        self._on_close = on_close
        self._on_unmatched_response = on_unmatched_response
        self._server: Optional[_Listener] = None
        self._address = ""

    def _make_connection(self) -> RemotingConnection:
        return RemotingConnection(self.table, self.limits, on_open=self._opened,
                                  on_close=self._closed,
                                  unmatched_response=self._on_unmatched_response)

    def _opened(self, connection: RemotingConnection) -> None:
        if self.connections_max and len(self.connections) >= self.connections_max:
            self.refused_connections_total += 1
            LOGGER.warning("refusing remoting connection from %s: %d connections open, the "
                           "connections_max", connection.remote_address, len(self.connections))
            connection.abort("connections_max reached")
            return
        self.connections[connection.connection_id] = connection
        if self._on_connect is not None:
            self._on_connect(connection)

    def _closed(self, connection: RemotingConnection, exc: Optional[BaseException]) -> None:
        if self.connections.pop(connection.connection_id, None) is None:
            return  # refused at the cap: on_connect never saw it
        if self._on_close is not None:
            self._on_close(connection, exc)

    def _listening(self, server: _Listener) -> "RemotingServer":
        self._server = server
        # Kept from the start: the address stays readable after close() for logs.
        name = server.sockets[0].getsockname() if server.sockets else ""
        self._address = f"{name[0]}:{name[1]}" if isinstance(name, tuple) else str(name)
        return self

    @property
    def sockets(self) -> tuple:
        """The listening sockets."""
        return tuple(self._server.sockets) if self._server is not None else ()

    @property
    def address(self) -> str:
        """``"ip:port"`` of the first listening socket (the real port when 0 was asked), or the
        unix socket path."""
        return self._address

    def close(self) -> None:
        """Stop listening and close every connection (unsent data is discarded)."""
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections.values()):
            for task in list(connection.handler_tasks):
                task.cancel()
            connection.abort("server closed")

    async def wait_closed(self) -> None:
        """Wait until the listener and every connection have closed, and their handler tasks
        have been cancelled."""
        tasks = []
        for connection in list(self.connections.values()):
            if connection.closed_future is not None:
                tasks.append(connection.closed_future)
        if tasks:
            await asyncio.gather(*tasks)
        if self._server is not None:
            await self._server.wait_closed()


async def start_server(host: Optional[str], port: int, table: RequestTable, *,
                       reuse_port: bool = False, sock: Optional[socket.socket] = None,
                       backlog: int = 1024, on_connect: Optional[OnConnect] = None,
                       on_close: Optional[OnClose] = None, connections_max: int = 0,
                       limits: Optional[ConnectionLimits] = None,
                       on_unmatched_response: Optional[OnUnmatchedResponse] = None,
                       tls: Optional[TlsServer] = None,
                       **limit_values) -> RemotingServer:
    """Listen on ``host:port`` (port 0: an ephemeral port, see :attr:`RemotingServer.address`).

    ``reuse_port`` sets SO_REUSEPORT so several worker processes share the port. ``sock``: an
    already bound socket (TCP or unix) to serve instead of host/port. ``connections_max``:
    connections beyond this many are closed at once (0 = no cap). Limits: pass a
    :class:`ConnectionLimits` as ``limits`` or its fields as keywords (``idle_timeout_ms=...``).
    ``on_unmatched_response(connection, response)``: a response no invoke() waits for (a
    client's answer to a call the broker made through that connection). ``tls``: the port's
    TLS (:class:`pybroker.remoting.tls.TlsServer`); when it serves TLS, connections are told
    apart by their first byte (tls.SniffingListener).
    """
    server = RemotingServer(table, _limits(limits, limit_values), on_connect, on_close,
                            connections_max, on_unmatched_response)
    loop = asyncio.get_running_loop()
    make = server._make_connection
    if tls is not None and tls.sniffs:
        if sock is None:
            sock = socket.create_server((host or "", port), backlog=backlog,
                                        reuse_port=reuse_port)
        idle_s = server.limits.idle_timeout_ms / 1000 or None
        sniffing = SniffingListener(sock, make, tls, pending_max=connections_max or 4096,
                                    **({"first_byte_timeout_s": idle_s} if idle_s else {}))
        return server._listening(sniffing.start(backlog))
    if sock is not None and sock.family == socket.AF_UNIX:
        listener = await loop.create_unix_server(make, sock=sock, backlog=backlog)
    elif sock is not None:
        listener = await loop.create_server(make, sock=sock, backlog=backlog)
    else:
        listener = await loop.create_server(make, host, port, reuse_port=reuse_port or None,
                                            backlog=backlog)
    return server._listening(listener)


async def start_unix_server(path: str, table: RequestTable, *, backlog: int = 1024,
                            on_connect: Optional[OnConnect] = None,
                            on_close: Optional[OnClose] = None, connections_max: int = 0,
                            limits: Optional[ConnectionLimits] = None,
                            **limit_values) -> RemotingServer:
    """Listen on the unix socket ``path`` (the metadata service); otherwise as start_server."""
    server = RemotingServer(table, _limits(limits, limit_values), on_connect, on_close,
                            connections_max)
    loop = asyncio.get_running_loop()
    listener = await loop.create_unix_server(server._make_connection, path, backlog=backlog)
    return server._listening(listener)


def _limits(limits: Optional[ConnectionLimits], limit_values: dict) -> ConnectionLimits:
    if limits is not None and limit_values:
        raise TypeError("pass either limits= or limit keywords, not both")
    return limits if limits is not None else ConnectionLimits(**limit_values)
