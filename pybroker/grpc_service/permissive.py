# tls.server.mode=permissive on the gRPC port: TLS and plain HTTP/2 told apart by the first byte.
"""Permissive TLS for grpcio, which cannot sniff a connection itself.

The worker's grpc server listens on two abstract unix sockets of its own, one plain and one
with the TLS credentials; the worker listens on grpcServerPort (SO_REUSEPORT, like the other
workers' sockets) and, for each accepted connection, reads the first bytes and relays the
connection to the TLS socket when they start a TLS handshake record (0x16), else to the plain
one, as the remoting ports decide (pybroker/remoting/tls.py). The relay copies the bytes once
more inside the worker (a cost only this mode pays: ``enforcing`` and plain ports are grpc's
own sockets).
"""
import asyncio
import logging
import os
import socket

from pybroker.tasks import within

log = logging.getLogger("pybroker.grpc.permissive")

TLS_HANDSHAKE_RECORD = 0x16
FIRST_BYTES_TIMEOUT_S = 120.0      # Java's serverChannelMaxIdleTimeSeconds
RELAY_CHUNK_BYTES = 256 * 1024


class PermissiveRelay:
    """grpcServerPort -> the plain or TLS unix socket of this worker's grpc server."""

    def __init__(self, host: str, port: int, backlog: int, index: int):
        self.host, self.port, self.backlog = host, port, backlog
        base = f"pybroker-grpc-{os.getpid()}-{index}"
        self.plain_name, self.tls_name = f"{base}-plain", f"{base}-tls"
        self.server: asyncio.AbstractServer | None = None
        self.connections: set[asyncio.Task] = set()

    def grpc_addresses(self) -> tuple[str, str]:
        """The grpc addresses of the plain and the TLS listener."""
        return f"unix-abstract:{self.plain_name}", f"unix-abstract:{self.tls_name}"

    async def start(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listener.bind((self.host, self.port))
        listener.listen(self.backlog)
        listener.setblocking(False)
        self.server = await asyncio.start_server(self._accepted, sock=listener)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self.connections):
            task.cancel()

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        task = asyncio.current_task()
        assert task is not None
        self.connections.add(task)
        try:
            await self._relay(reader, writer)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            self.connections.discard(task)
            writer.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        first = await within(reader.read(RELAY_CHUNK_BYTES), FIRST_BYTES_TIMEOUT_S)
        if not first:
            return
        name = self.tls_name if first[0] == TLS_HANDSHAKE_RECORD else self.plain_name
        inner_reader, inner_writer = await asyncio.open_unix_connection("\0" + name)
        try:
            inner_writer.write(first)
            await asyncio.gather(_pump(reader, inner_writer), _pump(inner_reader, writer))
        finally:
            inner_writer.close()


async def _pump(source: asyncio.StreamReader, target: asyncio.StreamWriter) -> None:
    try:
        while True:
            chunk = await source.read(RELAY_CHUNK_BYTES)
            if not chunk:
                break
            target.write(chunk)
            await target.drain()
    finally:
        if target.can_write_eof():
            try:
                target.write_eof()
            except OSError:
                pass


def relay_for(config, index: int) -> PermissiveRelay:
    """The first-byte relay of gRPC worker ``index`` on grpcServerPort."""
    return PermissiveRelay(config.remoting.bind_address, config.grpc.grpc_server_port,
                           config.remoting.server_socket_backlog, index)


def serve_permissive(server, tls, config, index: int) -> tuple[str, PermissiveRelay]:
    """Add the two unix listeners to ``server``; the relay is started after the server."""
    relay = relay_for(config, index)
    plain, secure = relay.grpc_addresses()
    server.add_insecure_port(plain)
    server.add_secure_port(secure, tls.credentials())
    address = f"{config.remoting.bind_address}:{config.grpc.grpc_server_port}"
    return f"{address} (TLS and plain by first byte, grpcio)", relay
