# TLS on remoting ports and links: SSL contexts from the tls.* settings, first-byte detection.
"""TLS for RocketMQ remoting, as Java's ``TlsSystemConfig`` / ``TlsModeHandler`` do it.

:func:`server_context` and :func:`client_context` build :class:`ssl.SSLContext` objects from
:class:`pybroker.config.TlsConfig`. :class:`TlsServer` says how a listening port treats a new
connection: ``tls.server.mode`` and the server context.

:class:`SniffingListener` serves a listening socket whose port accepts TLS: it accepts, waits
for the connection's first byte without consuming it (``MSG_PEEK``), and then, as Java's
``HandshakeHandler`` does, takes a 0x16 (a TLS handshake record) as TLS and anything else as
plain remoting. Permissive ports hand both to the same protocol factory; enforcing ports close
plain connections with one log line. The remoting protocol (a ``BufferedProtocol``) sees the
same bytes either way: asyncio's SSL transport feeds it decrypted data through
``get_buffer``/``buffer_updated``, so frame splitting and the send fast path read the same
receive buffer. Ports that serve no TLS (mode disabled, or no certificate) are plain asyncio
servers; a ClientHello sent there is closed by the frame decoder with its own log line.
"""
import asyncio
import dataclasses
import logging
import socket
import ssl
from typing import Any, Callable, Optional

from pybroker.config import ClientAuth, TlsConfig, TlsMode
from pybroker.errors import ConfigError
from pybroker.tasks import Rounds, start_task, within

log = logging.getLogger("pybroker.remoting.tls")

TLS_HANDSHAKE_RECORD = 0x16         # first byte of every TLS ClientHello
HANDSHAKE_TIMEOUT_S = 10.0          # a TLS handshake not finished by then is dropped
FIRST_BYTE_TIMEOUT_S_DEFAULT = 120.0  # Java's serverChannelMaxIdleTimeSeconds
PENDING_MAX_DEFAULT = 4096          # connections accepted but not yet classified or shaken
_ACCEPT_PAUSE_S = 0.1               # accepting again after a failed accept


def _load_chain(context: ssl.SSLContext, cert: str, key: str, password: Optional[str],
                key_name: str) -> None:
    try:
        context.load_cert_chain(cert, key, password=password)
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(f"{key_name}={key}: cannot load the certificate and key "
                          f"({cert}, {key}): {error}") from None


def _load_trust(context: ssl.SSLContext, path: str, key_name: str) -> None:
    try:
        context.load_verify_locations(cafile=path)
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(f"{key_name}={path}: cannot load trusted certificates: {error}") \
            from None


def server_context(tls: TlsConfig) -> Optional[ssl.SSLContext]:
    """The server context of the remoting ports, or None when they serve no TLS (mode
    disabled, or no certificate: permissive then serves plain TCP only). ConfigError when the
    files cannot be loaded."""
    if tls.tls_server_mode == TlsMode.DISABLED or not tls.tls_server_cert_path:
        return None
    assert tls.tls_server_key_path is not None    # config.check_tls: cert and key together
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, tls.tls_server_cert_path, tls.tls_server_key_path,
                tls.tls_server_key_password, "tls.server.keyPath")
    need = tls.tls_server_need_client_auth
    if need != ClientAuth.NONE or tls.tls_server_auth_client:
        assert tls.tls_server_trust_cert_path is not None   # config.check_tls
        _load_trust(context, tls.tls_server_trust_cert_path, "tls.server.trustCertPath")
        context.verify_mode = ssl.CERT_OPTIONAL if need == ClientAuth.OPTIONAL \
            else ssl.CERT_REQUIRED
    return context


def client_context(tls: TlsConfig) -> ssl.SSLContext:
    """The context of outgoing TLS links. As Java: the server certificate is verified only
    with ``tls.client.authServer`` (against tls.client.trustCertPath), host names never."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    if tls.tls_client_auth_server:
        assert tls.tls_client_trust_cert_path is not None   # config.check_tls
        _load_trust(context, tls.tls_client_trust_cert_path, "tls.client.trustCertPath")
        context.verify_mode = ssl.CERT_REQUIRED
    else:
        context.verify_mode = ssl.CERT_NONE
    if tls.tls_client_cert_path:
        assert tls.tls_client_key_path is not None
        _load_chain(context, tls.tls_client_cert_path, tls.tls_client_key_path,
                    tls.tls_client_key_password, "tls.client.keyPath")
    return context


def outgoing_tls(config) -> Optional[ssl.SSLContext]:
    """The context of a broker's outgoing links (NameServer registration, slave sync) when
    ``useTLS`` (default: ``tls.enable``) is on, else None."""
    return client_context(config.tls) if config.remoting.use_tls else None


@dataclasses.dataclass(frozen=True)
class TlsServer:
    """How a listening port treats new connections: ``mode`` and the server ``context``
    (None: the port serves plain TCP only)."""
    mode: TlsMode
    context: Optional[ssl.SSLContext]

    @property
    def sniffs(self) -> bool:
        """True when connections are told apart by their first byte."""
        return self.context is not None and self.mode != TlsMode.DISABLED

    @classmethod
    def from_config(cls, tls: TlsConfig) -> "TlsServer":
        return cls(tls.tls_server_mode, server_context(tls))


def _peer(address) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)


class SniffingListener:
    """Accept loop of one listening socket that serves TLS and, when permissive, plain TCP.

    ``protocol_factory`` makes the protocol of each connection (as for ``create_server``).
    ``first_byte_timeout_s``: a connection that sends nothing for this long is closed.
    ``pending_max``: connections accepted but not classified yet; more are closed at once.
    """

    def __init__(self, sock: socket.socket, protocol_factory: Callable[[], Any],
                 tls: TlsServer, *, first_byte_timeout_s: float = FIRST_BYTE_TIMEOUT_S_DEFAULT,
                 pending_max: int = PENDING_MAX_DEFAULT):
        assert tls.sniffs
        self._sock = sock
        self._factory = protocol_factory
        self._tls = tls
        self._first_byte_timeout_s = first_byte_timeout_s
        self._pending_max = pending_max
        self._pending: set[asyncio.Task] = set()
        self._accepting: Optional[asyncio.Task] = None
        self._closed = asyncio.get_running_loop().create_future()
        self.refused_plain_total = 0
        self.failed_handshakes_total = 0

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return (self._sock,)

    def start(self, backlog: int) -> "SniffingListener":
        self._sock.setblocking(False)
        self._sock.listen(backlog)
        self._accepting = start_task(self._accept_loop(), "the TLS accept loop", None, log)
        return self

    def close(self) -> None:
        """Stop accepting, drop connections not classified yet, close the socket."""
        if self._accepting is not None:
            self._accepting.cancel()
        for task in list(self._pending):
            task.cancel()
        self._sock.close()
        if not self._closed.done():
            self._closed.set_result(None)

    async def wait_closed(self) -> None:
        await self._closed
        if self._accepting is not None:
            await asyncio.gather(self._accepting, *self._pending, return_exceptions=True)

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        # A port never stops accepting by itself: anything unexpected is logged with its
        # cause and the loop accepts again after a pause (pybroker/tasks.py).
        rounds = Rounds("the TLS accept loop", failures_max=None, logger=log)
        while True:
            if rounds.failures:
                await asyncio.sleep(_ACCEPT_PAUSE_S)
            with rounds:
                try:
                    conn, address = await loop.sock_accept(self._sock)
                except OSError as error:   # EMFILE, ENFILE...: accept again after a pause
                    log.warning("accept on %s failed: %s", self._sock.getsockname(), error)
                    await asyncio.sleep(_ACCEPT_PAUSE_S)
                    continue
                if len(self._pending) >= self._pending_max:
                    log.warning("closing connection from %s: %d connections wait for their "
                                "first byte or TLS handshake", _peer(address),
                                len(self._pending))
                    conn.close()
                    continue
                task = start_task(self._serve(conn, address), "a TLS hand-over", None, log)
                self._pending.add(task)
                task.add_done_callback(self._pending.discard)

    async def _first_byte(self, conn: socket.socket) -> bytes:
        loop = asyncio.get_running_loop()
        readable: asyncio.Future[None] = loop.create_future()

        def on_readable() -> None:
            if not readable.done():
                readable.set_result(None)
        loop.add_reader(conn.fileno(), on_readable)
        try:
            await within(readable, self._first_byte_timeout_s)
        finally:
            loop.remove_reader(conn.fileno())
        return conn.recv(1, socket.MSG_PEEK)

    async def _serve(self, conn: socket.socket, address) -> None:
        peer = _peer(address)
        try:
            first = await self._first_byte(conn)
        except (asyncio.TimeoutError, OSError) as error:
            log.info("closing connection from %s: %s before its first byte", peer,
                     "timeout" if isinstance(error, asyncio.TimeoutError) else error)
            conn.close()
            return
        except asyncio.CancelledError:
            conn.close()
            raise
        if not first:
            conn.close()
            return
        await self._hand_over(conn, peer, first[0] == TLS_HANDSHAKE_RECORD)

    async def _hand_over(self, conn: socket.socket, peer: str, is_tls: bool) -> None:
        loop = asyncio.get_running_loop()
        if not is_tls and self._tls.mode == TlsMode.ENFORCING:
            self.refused_plain_total += 1
            log.warning("closing plain TCP connection from %s: this port requires TLS "
                        "(tls.server.mode=enforcing)", peer)
            conn.close()
            return
        try:
            if is_tls:
                await loop.connect_accepted_socket(
                    self._factory, conn, ssl=self._tls.context,
                    ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
            else:
                await loop.connect_accepted_socket(self._factory, conn)
        except asyncio.CancelledError:
            conn.close()
            raise
        except (OSError, ssl.SSLError, asyncio.TimeoutError, ConnectionError) as error:
            self.failed_handshakes_total += 1
            log.warning("closing connection from %s: TLS handshake failed: %s", peer,
                        error or type(error).__name__)
            conn.close()
