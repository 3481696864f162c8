# A broker address that fails: accepts connections and drops them (client fault tests).
"""A fault proxy on a free 127.0.0.1 port standing where a broker should be.

Every connection is accepted and closed as soon as its first request bytes arrive, so a client
sees a broker that is reachable but never answers (a crashed process behind a live socket, or a
connection cut mid-request). :attr:`FaultProxy.accepted` counts the connections, which tells a
test exactly how many attempts reached this address.

    proxy = FaultProxy()
    address = await proxy.start()      # "127.0.0.1:<port>", put it in a route
    ...
    await proxy.stop()

It runs in the test's own event loop.
"""
import asyncio

__all__ = ["FaultProxy"]


class FaultProxy:
    """Accepts every connection and drops it as soon as a request arrives."""

    def __init__(self) -> None:
        self.accepted = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        """Listen on a free 127.0.0.1 port; the ``host:port`` address to give clients."""
        self._server = await asyncio.start_server(self._drop, "127.0.0.1", 0)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _drop(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        await reader.read(1)
        writer.close()

    async def stop(self) -> None:
        """Stop listening (connections already dropped stay closed)."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
