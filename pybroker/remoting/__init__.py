# The remoting transport: asyncio server and client over the RocketMQ frame codec.
"""RocketMQ remoting over asyncio: :mod:`.connection` (one socket: the receive loop over a
frame taker and back-pressure, wiring :mod:`.receive_buffer`, :mod:`.frame_taker`,
:mod:`.write_queue`, :mod:`.invocations` and :mod:`.timers`; its :mod:`.limits`), :mod:`.server`
(request table and listener), :mod:`.client` (client, pool, blocking facade), :mod:`.tls`."""
from pybroker.remoting.client import RemotingClient, RemotingClientPool, SyncRemotingClient
from pybroker.remoting.connection import RemotingConnection
from pybroker.remoting.limits import ConnectionLimits
from pybroker.remoting.server import (
    RemotingServer,
    RequestTable,
    start_server,
    start_unix_server,
)

__all__ = ["ConnectionLimits", "RemotingClient", "RemotingClientPool", "RemotingConnection",
           "RemotingServer", "RequestTable", "SyncRemotingClient", "start_server",
           "start_unix_server"]
