# The remoting transport: asyncio server and client over the RocketMQ frame codec.
"""RocketMQ remoting over asyncio: :mod:`.connection` (one socket), :mod:`.server` (request
table and listener), :mod:`.client` (client, pool, blocking facade)."""
from pybroker.remoting.client import RemotingClient, RemotingClientPool, SyncRemotingClient
from pybroker.remoting.connection import ConnectionLimits, RemotingConnection
from pybroker.remoting.server import (
    RemotingServer,
    RequestTable,
    start_server,
    start_unix_server,
)

__all__ = ["ConnectionLimits", "RemotingClient", "RemotingClientPool", "RemotingConnection",
           "RemotingServer", "RequestTable", "SyncRemotingClient", "start_server",
           "start_unix_server"]
