# Who may replicate from a master's HA port, and how a slave proves it (docs/security.md).
"""Admission to the HA port (haListenPort), the part of the ha worker that runs before the
HA protocol starts: classic (:mod:`pybroker.proc.ha_master`, :mod:`pybroker.proc.ha_slave`)
or controller mode's AutoSwitchHA (:mod:`pybroker.proc.autoswitch_master`,
:mod:`pybroker.proc.autoswitch_slave`); both masters accept through :class:`HAGate`.

Java's HA port serves any peer that connects. A master here admits a connection when every
configured requirement holds:

* ``haAllowedSlaveAddresses``: the peer's IP address is in one of the listed addresses or
  CIDR networks (checked at accept, before a byte is read or sent). Works with Java slaves.
* ``haTlsEnable``: the connection is TLS (the broker's ``tls.server.certPath``/``keyPath``;
  the slave verifies the master with ``tls.client.authServer`` as its other outgoing links).
* ``haSharedSecret``: the peer proves the secret in the challenge of
  :mod:`pybroker.protocol.ha_auth` (inside TLS when both are on), and the master proves it
  back, so a slave also refuses a master that does not know it.

The last two are pybroker-to-pybroker only (a Java slave speaks neither). The handshake of a
connection must finish within :data:`HANDSHAKE_TIMEOUT_S`. What passes is a socket-like
object the HA services use as they use a plain socket (:class:`TlsSocket` for TLS).
"""
import asyncio
import dataclasses
import ipaddress
import logging
import os
import socket
import ssl
from typing import Callable

from pybroker import schema
from pybroker.protocol import ha_auth
from pybroker.tasks import start_task, within

log = logging.getLogger("pybroker.proc.ha_access")

__all__ = ["HAAccess", "HAAccessRefused", "HAGate", "TlsSocket", "parse_networks"]

HANDSHAKE_TIMEOUT_S = 10.0

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class HAAccessRefused(Exception):
    """The peer is not admitted (the reason is the message)."""


def parse_networks(text: str) -> tuple[Network, ...]:
    """``haAllowedSlaveAddresses``: comma-separated IP addresses or CIDR networks (ValueError
    for anything else). Empty: no list."""
    networks = schema.parse_networks(text)
    if networks is None:
        raise ValueError(f"not IP addresses or CIDR networks: {text!r}")
    return networks


class TlsSocket:
    """A non-blocking TLS socket with the calls the HA services make on a plain one; "would
    block" in either direction is BlockingIOError, as a plain socket says it."""

    def __init__(self, sock: ssl.SSLSocket):
        self._sock = sock

    def fileno(self) -> int:
        return self._sock.fileno()

    def recv(self, size: int) -> bytes:
        try:
            data = self._sock.recv(size)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise BlockingIOError from None
        # Decrypted bytes left in the TLS layer raise no readiness: take them now.
        while data and len(data) < size and self._sock.pending():
            data += self._sock.recv(min(size - len(data), self._sock.pending()))
        return data

    def recv_into(self, view) -> int:
        try:
            count = self._sock.recv_into(view)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise BlockingIOError from None
        while count and count < len(view) and self._sock.pending():
            count += self._sock.recv_into(view[count:], min(len(view) - count,
                                                            self._sock.pending()))
        return count

    def send(self, data) -> int:
        try:
            return self._sock.send(data)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise BlockingIOError from None

    def sendmsg(self, buffers) -> int:
        """What went out of ``buffers`` in order (TLS has no gather write: one send each)."""
        sent = 0
        for buffer in buffers:
            try:
                count = self._sock.send(buffer)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                if sent:
                    return sent
                raise BlockingIOError from None
            sent += count
            if count < len(buffer):
                break
        return sent

    def close(self) -> None:
        self._sock.close()


@dataclasses.dataclass(frozen=True)
class HAAccess:
    """The admission rules of one broker (see the module docstring); the default admits any
    peer in plain TCP, as Java."""

    networks: tuple[Network, ...] = ()
    secret: bytes | None = dataclasses.field(default=None, repr=False)
    server_context: ssl.SSLContext | None = None      # master with haTlsEnable
    client_context: ssl.SSLContext | None = None      # slave with haTlsEnable

    @classmethod
    def from_config(cls, config, master: bool) -> "HAAccess":
        from pybroker.remoting import tls      # noqa: PLC0415 (only brokers using TLS load it)
        store = config.store
        server_context = client_context = None
        if store.ha_tls_enable and master:
            # The HA port serves TLS whatever tls.server.mode says about the remoting ports.
            server_context = tls.server_context(dataclasses.replace(
                config.tls, tls_server_mode=tls.TlsMode.ENFORCING))
        elif store.ha_tls_enable:
            client_context = tls.client_context(config.tls)
        secret = store.ha_shared_secret
        return cls(parse_networks(store.ha_allowed_slave_addresses),
                   secret.encode() if secret else None, server_context, client_context)

    def describe(self) -> str:
        """For the start-up log line (never the secret)."""
        parts = [f"slaves from {', '.join(map(str, self.networks))}" if self.networks
                 else "any peer address"]
        if self.server_context is not None or self.client_context is not None:
            parts.append("TLS")
        if self.secret is not None:
            parts.append("haSharedSecret challenge")
        return ", ".join(parts)

    @property
    def open(self) -> bool:
        """True when any peer that reaches the port is served (Java's HA port)."""
        return not self.networks and self.secret is None and self.server_context is None

    def refusal(self, host: str) -> str | None:
        """Why a peer at ``host`` is refused at accept, or None."""
        if not self.networks:
            return None
        try:
            address = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return f"peer address {host!r} is not an IP address"
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if any(address in network for network in self.networks):
            return None
        return f"{host} is not in haAllowedSlaveAddresses"

    @property
    def handshake_needed(self) -> bool:
        return self.secret is not None or self.server_context is not None \
            or self.client_context is not None

    async def admit(self, sock: socket.socket):
        """Master: the TLS handshake and the challenge of an accepted, non-blocking socket;
        the socket to serve (HAAccessRefused, OSError or TimeoutError otherwise, the socket
        closed)."""
        peer: socket.socket | TlsSocket = sock
        try:
            if self.server_context is not None:
                peer = self.server_context.wrap_socket(sock, server_side=True,
                                                       do_handshake_on_connect=False)
            return await self._admit(peer)
        except BaseException:
            peer.close()
            raise

    async def _admit(self, peer):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + HANDSHAKE_TIMEOUT_S
        if isinstance(peer, ssl.SSLSocket):
            peer = await _tls(loop, peer, deadline)
        if self.secret is not None:
            magic = await _read_exactly(loop, peer, len(ha_auth.HELLO_MAGIC), deadline)
            rest = await _read_exactly(loop, peer, ha_auth.HELLO_BYTES - len(magic), deadline) \
                if magic == ha_auth.HELLO_MAGIC else b""
            try:
                slave_nonce = ha_auth.parse_hello(magic + rest)
                master_nonce = os.urandom(ha_auth.NONCE_BYTES)
                await _write_all(loop, peer, ha_auth.encode_challenge(
                    self.secret, slave_nonce, master_nonce), deadline)
                ha_auth.check_proof(self.secret, slave_nonce, master_nonce, await _read_exactly(
                    loop, peer, ha_auth.PROOF_BYTES, deadline))
            except ha_auth.HAAuthError as error:
                raise HAAccessRefused(str(error)) from None
        return peer

    async def open_to_master(self, sock: socket.socket, host: str):
        """Slave: the same from the connecting side; the socket to replicate on (the socket
        closed when refused)."""
        peer: socket.socket | TlsSocket = sock
        try:
            if self.client_context is not None:
                peer = self.client_context.wrap_socket(sock, server_hostname=host,
                                                       do_handshake_on_connect=False)
            return await self._open(peer)
        except BaseException:
            peer.close()
            raise

    async def _open(self, peer):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + HANDSHAKE_TIMEOUT_S
        if isinstance(peer, ssl.SSLSocket):
            peer = await _tls(loop, peer, deadline)
        if self.secret is not None:
            slave_nonce = os.urandom(ha_auth.NONCE_BYTES)
            await _write_all(loop, peer, ha_auth.encode_hello(slave_nonce), deadline)
            try:
                master_nonce = ha_auth.check_challenge(self.secret, slave_nonce,
                                                       await _read_exactly(
                                                           loop, peer, ha_auth.CHALLENGE_BYTES,
                                                           deadline))
            except ha_auth.HAAuthError as error:
                raise HAAccessRefused(str(error)) from None
            await _write_all(loop, peer, ha_auth.encode_proof(self.secret, slave_nonce,
                                                              master_nonce), deadline)
        return peer


async def _ready(loop, sock, readable: bool, deadline: float) -> None:
    """Wait until ``sock`` is readable (or writable); TimeoutError past ``deadline``."""
    future = loop.create_future()

    def ready() -> None:
        if not future.done():
            future.set_result(None)
    (loop.add_reader if readable else loop.add_writer)(sock.fileno(), ready)
    try:
        await within(future, max(deadline - loop.time(), 0))
    except TimeoutError:
        raise TimeoutError(f"HA handshake not finished within {HANDSHAKE_TIMEOUT_S} s") \
            from None
    finally:
        (loop.remove_reader if readable else loop.remove_writer)(sock.fileno())


async def _tls(loop, sock: ssl.SSLSocket, deadline: float) -> TlsSocket:
    while True:
        try:
            sock.do_handshake()
            return TlsSocket(sock)
        except ssl.SSLWantReadError:
            await _ready(loop, sock, True, deadline)
        except ssl.SSLWantWriteError:
            await _ready(loop, sock, False, deadline)


async def _read_exactly(loop, sock, size: int, deadline: float) -> bytes:
    data = b""
    while len(data) < size:
        try:
            chunk = sock.recv(size - len(data))
        except BlockingIOError:
            await _ready(loop, sock, True, deadline)
            continue
        if not chunk:
            raise HAAccessRefused("the peer closed the connection during the HA handshake")
        data += chunk
    return data


async def _write_all(loop, sock, data: bytes, deadline: float) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[sock.send(view):]
        except BlockingIOError:
            await _ready(loop, sock, False, deadline)


class HAGate:
    """A master's listener with its admission (classic HA and controller mode's AutoSwitchHA
    alike): accepts, refuses by address at once, runs TLS and the challenge in a task of
    its own (at most ``handshakes_max`` at a time) and hands every admitted peer, a plain or
    TLS socket, to ``register(peer, address)``."""

    def __init__(self, listener: socket.socket, access: HAAccess,
                 register: Callable[[object, object], None], handshakes_max: int):
        self.listener = listener
        self.access = access
        self.register = register
        self.handshakes_max = handshakes_max
        self.handshakes: set[asyncio.Task] = set()

    def start(self, what: str, served_from: str) -> None:
        """Accept from now on; the start-up line, and the warning for a port that serves any
        peer on an address other than loopback."""
        self.listener.setblocking(False)
        asyncio.get_running_loop().add_reader(self.listener, self.accept)
        address = self.listener.getsockname()
        log.info("%s listening on %s, %s, serving %s", what, address, served_from,
                 self.access.describe())
        if self.access.open and not ipaddress.ip_address(address[0]).is_loopback:
            log.warning("the HA port %s serves any peer that reaches it the whole CommitLog "
                        "(set haAllowedSlaveAddresses, haListenAddress, haSharedSecret or "
                        "haTlsEnable; docs/security.md)", address)

    def stop(self) -> None:
        asyncio.get_running_loop().remove_reader(self.listener)
        for handshake in list(self.handshakes):
            handshake.cancel()

    def accept(self) -> None:
        try:
            sock, address = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as error:
            log.warning("HA accept failed: %s", error)
            return
        refusal = self.access.refusal(str(address[0]))
        if refusal is not None:
            log.warning("HA connection from %s refused: %s", address, refusal)
            sock.close()
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not self.access.handshake_needed:
            self.register(sock, address)
        elif len(self.handshakes) >= self.handshakes_max:
            log.warning("HA connection from %s refused: %d handshakes in progress", address,
                        len(self.handshakes))
            sock.close()
        else:
            task = start_task(self._admit(sock, address), "an HA handshake", None, log)
            self.handshakes.add(task)
            task.add_done_callback(self.handshakes.discard)

    async def _admit(self, sock: socket.socket, address) -> None:
        try:
            peer = await self.access.admit(sock)
        except (HAAccessRefused, OSError, TimeoutError) as error:
            log.warning("HA connection from %s refused: %s", address,
                        error or type(error).__name__)
            sock.close()
            return
        except BaseException:
            sock.close()
            raise
        self.register(peer, address)
