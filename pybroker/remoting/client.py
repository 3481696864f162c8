# Remoting client: one connection to a peer, a pool per address, a blocking facade.
"""Talk to a RocketMQ remoting peer.

:class:`RemotingClient` owns one connection (``"ip:port"`` over TCP, or a unix socket path:
any address containing ``/``). Its :class:`pybroker.remoting.server.RequestTable` answers the
requests the server sends (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE).
:class:`RemotingClientPool` keeps one client per address and reconnects on demand.
:class:`SyncRemotingClient` is a blocking facade running its own loop in a thread, for tests and
tools.
"""
import asyncio
import logging
import ssl
import threading
from typing import Callable, Optional

from pybroker.protocol.command import RemotingCommand
from pybroker.protocol.constants import SerializeType
from pybroker.config import RemotingConfig
from pybroker.remoting.connection import RemotingConnection
from pybroker.remoting.limits import ConnectionLimits
from pybroker.remoting.server import RequestTable
from pybroker.tasks import within

LOGGER = logging.getLogger("pybroker.remoting")

_REMOTING_DEFAULTS = RemotingConfig()

CONNECT_TIMEOUT_MS_DEFAULT = _REMOTING_DEFAULTS.connect_timeout_millis
INVOKE_TIMEOUT_MS_DEFAULT = 3000
_CLIENT_LIMITS_DEFAULT = ConnectionLimits(
    idle_timeout_ms=_REMOTING_DEFAULTS.client_channel_max_idle_time_seconds * 1000)
# Called on every request this side sends, before it is encoded (Java's client RPC hook; the
# ACL signer adds AccessKey and Signature).
Signer = Callable[[RemotingCommand], None]


def split_address(address: str) -> tuple[str, int]:
    """``"ip:port"`` -> ``(ip, port)``; ValueError when it is not one."""
    host, separator, port_text = address.rpartition(":")
    if not separator or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"address {address!r} is not host:port with port 1..65535")
    return host.strip("[]"), int(port_text)


def is_unix_address(address: str) -> bool:
    """True when ``address`` names a unix socket path rather than ``ip:port``."""
    return "/" in address


class RemotingClient:
    """One remoting connection, opened by :meth:`connect`.

    ``table``: handlers for requests the server sends (unknown codes get code 3).
    ``serialize_type``: header encoding of our requests (JSON, or ROCKETMQ binary as the Java
    producer uses). ``limits``: :class:`ConnectionLimits` (idle time from
    clientChannelMaxIdleTimeSeconds by default). ``ssl_context``: speak TLS to TCP peers
    (:func:`pybroker.remoting.tls.client_context`); None = plain TCP. ``signer(request)``: runs
    on every request sent (pybroker.acl.signature.Credentials.sign signs for ACL).
    """

    def __init__(self, table: Optional[RequestTable] = None, *,
                 serialize_type: int = int(SerializeType.JSON),
                 limits: ConnectionLimits = _CLIENT_LIMITS_DEFAULT,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 signer: Optional[Signer] = None):
        self.table = table if table is not None else RequestTable()
        self.serialize_type = serialize_type
        self.limits = limits
        self.ssl_context = ssl_context
        self.signer = signer
        self.address: Optional[str] = None
        self.connection: Optional[RemotingConnection] = None

    @property
    def is_connected(self) -> bool:
        """True while the connection is open."""
        return self.connection is not None and not self.connection.is_closed

    async def connect(self, address: str, timeout_ms: int = CONNECT_TIMEOUT_MS_DEFAULT) -> None:
        """Connect to ``address`` (``"ip:port"`` or a unix socket path) within ``timeout_ms``.

        Raises TimeoutError, or ConnectionError (OSError) when the peer refuses.
        """
        if self.is_connected:
            raise RuntimeError(f"already connected to {self.address}")
        loop = asyncio.get_running_loop()

        def make_connection() -> RemotingConnection:
            return RemotingConnection(self.table, self.limits,
                                      serialize_type=self.serialize_type)

        if is_unix_address(address):
            opening = loop.create_unix_connection(make_connection, address)
        else:
            host, port = split_address(address)
            opening = loop.create_connection(
                make_connection, host, port, ssl=self.ssl_context,
                server_hostname=host if self.ssl_context is not None else None)
        try:
            transport, connection = await within(opening, timeout_ms / 1000)
        except asyncio.TimeoutError:
            raise TimeoutError(f"connect to {address} timed out after {timeout_ms} ms") from None
        # asyncio sets TCP_NODELAY on TCP transports itself: requests are not held by Nagle.
        self.address = address
        self.connection = connection

    def _open_connection(self) -> RemotingConnection:
        connection = self.connection
        if connection is None or connection.is_closed:
            raise ConnectionError(f"not connected to {self.address or 'any address'}")
        return connection

    async def invoke(self, command: RemotingCommand,
                     timeout_ms: int = INVOKE_TIMEOUT_MS_DEFAULT) -> RemotingCommand:
        """Send request ``command``; return its response within ``timeout_ms``.

        Raises TimeoutError when none arrives in time, ConnectionError when not connected or
        the connection is lost while waiting.
        """
        if self.signer is not None:
            self.signer(command)
        return await self._open_connection().invoke(command, timeout_ms)

    def invoke_oneway(self, command: RemotingCommand) -> None:
        """Send ``command`` with the oneway flag; nothing comes back. ConnectionError when not
        connected."""
        if self.signer is not None:
            self.signer(command)
        self._open_connection().send_oneway(command)

    def close(self) -> None:
        """Close the connection (queued writes are flushed first); waiting invokes get
        ConnectionError."""
        if self.connection is not None:
            self.connection.close()

    async def wait_closed(self) -> None:
        """Wait until the connection is fully closed."""
        if self.connection is not None and self.connection.closed_future is not None:
            await self.connection.closed_future


class RemotingClientPool:
    """One :class:`RemotingClient` per address, connected on first use and after a loss.

    ``table``, ``serialize_type``, ``limits`` and ``ssl_context`` are given to every client.
    """

    def __init__(self, table: Optional[RequestTable] = None, *,
                 serialize_type: int = int(SerializeType.JSON),
                 limits: ConnectionLimits = _CLIENT_LIMITS_DEFAULT,
                 connect_timeout_ms: int = CONNECT_TIMEOUT_MS_DEFAULT,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 signer: Optional[Signer] = None):
        self.table = table if table is not None else RequestTable()
        self.serialize_type = serialize_type
        self.limits = limits
        self.ssl_context = ssl_context
        self.signer = signer
        self.connect_timeout_ms = connect_timeout_ms
        self._clients: dict[str, RemotingClient] = {}
        self._connecting: dict[str, asyncio.Lock] = {}
        self._closed = False

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    async def client(self, address: str) -> RemotingClient:
        """The connected client for ``address``, (re)connecting when needed."""
        if self._closed:
            raise ConnectionError("client pool is closed")
        client = self._clients.get(address)
        if client is not None and client.is_connected:
            return client
        lock = self._connecting.setdefault(address, asyncio.Lock())
        async with lock:
            client = self._clients.get(address)
            if client is not None and client.is_connected:
                return client  # someone else connected while we waited
            client = RemotingClient(self.table, serialize_type=self.serialize_type,
                                    limits=self.limits, ssl_context=self.ssl_context,
                                    signer=self.signer)
            await client.connect(address, self.connect_timeout_ms)
            if self._closed:
                client.close()
                raise ConnectionError("client pool is closed")
            self._clients[address] = client
            return client

    async def invoke(self, address: str, command: RemotingCommand,
                     timeout_ms: int = INVOKE_TIMEOUT_MS_DEFAULT) -> RemotingCommand:
        """Invoke ``command`` on ``address`` (see :meth:`RemotingClient.invoke`)."""
        client = await self.client(address)
        return await client.invoke(command, timeout_ms)

    async def invoke_oneway(self, address: str, command: RemotingCommand) -> None:
        """Send ``command`` oneway to ``address`` (connecting first when needed)."""
        client = await self.client(address)
        client.invoke_oneway(command)

    def close(self) -> None:
        """Close every connection; further calls raise ConnectionError."""
        self._closed = True
        for client in self._clients.values():
            client.close()
        self._clients.clear()


class SyncRemotingClient:
    """A blocking :class:`RemotingClient` for tests and tools: its loop runs in a daemon thread.

    Every call waits at most its timeout (plus a second of slack for the thread hop).
    """

    def __init__(self, table: Optional[RequestTable] = None, *,
                 serialize_type: int = int(SerializeType.JSON),
                 limits: ConnectionLimits = _CLIENT_LIMITS_DEFAULT,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 signer: Optional[Signer] = None):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever,
                                        name="pybroker-sync-remoting", daemon=True)
        self._thread.start()
        self._client = RemotingClient(table, serialize_type=serialize_type, limits=limits,
                                      ssl_context=ssl_context, signer=signer)

    def _call(self, coroutine, timeout_ms: int):
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout_ms / 1000 + 1.0)
        except TimeoutError:
            future.cancel()  # the loop thread is stuck or the call is: do not leave it running
            raise

    def connect(self, address: str, timeout_ms: int = CONNECT_TIMEOUT_MS_DEFAULT) -> None:
        """Connect to ``address`` (see :meth:`RemotingClient.connect`)."""
        self._call(self._client.connect(address, timeout_ms), timeout_ms)

    def invoke(self, command: RemotingCommand,
               timeout_ms: int = INVOKE_TIMEOUT_MS_DEFAULT) -> RemotingCommand:
        """Send ``command`` and block for its response (TimeoutError, ConnectionError)."""
        return self._call(self._client.invoke(command, timeout_ms), timeout_ms)

    def invoke_oneway(self, command: RemotingCommand) -> None:
        """Send ``command`` oneway."""
        async def send() -> None:
            self._client.invoke_oneway(command)
        self._call(send(), INVOKE_TIMEOUT_MS_DEFAULT)

    def close(self) -> None:
        """Close the connection and stop the loop thread."""
        if not self._thread.is_alive():
            return

        async def shut() -> None:
            self._client.close()
            try:
                await within(self._client.wait_closed(), 1.0)
            except asyncio.TimeoutError:
                LOGGER.warning("remoting connection to %s did not close within 1 s",
                               self._client.address)
        self._call(shut(), 2000)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(2.0)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> "SyncRemotingClient":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
