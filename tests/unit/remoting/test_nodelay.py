"""Answers are never held back by Nagle: every accepted TCP connection has TCP_NODELAY on,
whatever made its listening socket.

Method: real listeners on 127.0.0.1 made three ways — by asyncio itself, by
``socket.create_server`` (the TLS sniffing path's), and by the supervisor's SO_REUSEPORT
:class:`pybroker.proc.listeners.Listeners` (made with proto 0, on whose accepted sockets asyncio
does not turn Nagle off) — a real client that gets one answer from each, and the server's end of
that connection found among this process's descriptors and asked for TCP_NODELAY. With Nagle on,
an answer written while an earlier one was unacknowledged waited for the client's delayed ACK
(40 ms): POP consumers acking every message saw a tenth of their pops take 43 ms.
"""
import asyncio
import os
import socket

import pytest

from pybroker._testbase.ports import free_port
from pybroker.proc.listeners import Listeners, PortUse
from pybroker.protocol.command import create_request, create_response
from pybroker.remoting import RemotingClient, RequestTable, start_server

PING = 201


def _server_end(port: int) -> socket.socket:
    """This process's accepted socket of the one connection to ``port`` (a duplicate of its
    descriptor: close it)."""
    found: dict[tuple, socket.socket] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            duplicate = os.dup(int(name))
        except OSError:
            continue                           # closed meanwhile
        try:
            candidate = socket.socket(fileno=duplicate)
        except OSError:
            os.close(duplicate)                # a duplicate left open would keep its locks
            continue
        try:
            if candidate.family == socket.AF_INET and candidate.type == socket.SOCK_STREAM \
                    and candidate.getsockname()[1] == port:
                # listening sockets have no peer; one of our own duplicates (a descriptor
                # number the listing also held) names the same connection again
                key = (candidate.getsockname(), candidate.getpeername())
                if key not in found:
                    found[key] = candidate
                    continue
        except OSError:
            pass
        candidate.close()
    assert len(found) == 1, found
    return next(iter(found.values()))


def _listener(kind: str, port: int):
    if kind == "asyncio":
        return None, None
    if kind == "create_server":
        return socket.create_server(("127.0.0.1", port)), None
    listeners = Listeners.bind("127.0.0.1", [PortUse(port, "listenPort", "listenPort")], 1, 16)
    return listeners.for_worker(0)[port], listeners


@pytest.mark.parametrize("kind", ["asyncio", "create_server", "supervisor_listeners"])
def test_accepted_connections_have_nagle_off(kind):
    async def scenario():
        port = free_port()
        sock, listeners = _listener(kind, port)
        table = RequestTable({PING: lambda connection, request: _pong(request)})
        server = await start_server("127.0.0.1", port, table, sock=sock)
        client = RemotingClient()
        try:
            await client.connect(f"127.0.0.1:{port}")
            response = await client.invoke(create_request(PING, {}), 5_000)
            assert response.remark == "pong"
            server_end = _server_end(port)
            try:
                assert server_end.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
            finally:
                server_end.close()
        finally:
            client.close()
            server.close()
            await server.wait_closed()
            if listeners is not None:
                listeners.close()

    asyncio.run(scenario())


async def _pong(request):
    return create_response(request, 0, "pong")
