# Faulty links for tests: an address that drops connections, a link that can be partitioned.
"""A fault proxy on a free 127.0.0.1 port standing where a broker should be
(:class:`FaultProxy`), and a forwarding link that can be cut like a network partition
(:class:`LinkProxy`, controller-mode tests: a master cut off from its controller).

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
import threading

__all__ = ["FaultProxy", "LinkProxy", "leader_rewrite"]


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


class LinkProxy:
    """A TCP link that can be cut and healed: forwards a free 127.0.0.1 port to ``target``
    (``host:port``) from its own thread and event loop, so synchronous tests can use it.

    :meth:`partition` stops every byte in both directions, as a network partition does:
    connections stay open (no FIN, no RST), bytes and closes wait, new connections are accepted
    but not connected onwards. :meth:`heal` lets everything through again, in order.

        proxy = LinkProxy("127.0.0.1:9878")
        address = proxy.start()            # give this address instead of the target
        proxy.partition(); ...; proxy.heal()
        proxy.stop()

    ``rewrite(frame) -> frame`` is applied to every whole remoting frame coming back from the
    target (e.g. :func:`leader_rewrite`: a controller names its own address as the leader, and
    a client would go around the proxy to it).
    """

    def __init__(self, target: str, rewrite=None):
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.rewrite = rewrite
        self.connections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._open: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread: threading.Thread | None = None

    def start(self, timeout_s: float = 10.0) -> str:
        started = threading.Event()
        address: list[str] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop

            async def serve() -> None:
                self._open = asyncio.Event()
                self._open.set()
                self._server = await asyncio.start_server(self._link, "127.0.0.1", 0)
                address.append(f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}")
                started.set()
                await self._server.serve_forever()
            try:
                loop.run_until_complete(serve())
            except asyncio.CancelledError:
                pass
            finally:
                loop.close()
        self._thread = threading.Thread(target=run, name="link-proxy", daemon=True)
        self._thread.start()
        if not started.wait(timeout_s):
            raise RuntimeError("link proxy did not start")
        return address[0]

    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        assert self._open is not None
        await self._open.wait()
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, upstream_writer))
        await asyncio.gather(self._pump(reader, upstream_writer),
                             self._pump(upstream_reader, writer, self.rewrite),
                             return_exceptions=True)
        self._writers.difference_update((writer, upstream_writer))

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    rewrite=None) -> None:
        assert self._open is not None
        pending = b""
        try:
            while True:
                data = await reader.read(1 << 16)
                await self._open.wait()
                if not data:
                    break
                if rewrite is not None:
                    pending += data
                    data = b""
                    while len(pending) >= 4:
                        size = 4 + int.from_bytes(pending[:4], "big")
                        if len(pending) < size:
                            break
                        data += rewrite(pending[:size])
                        pending = pending[size:]
                writer.write(data)
                await writer.drain()
        finally:
            await self._open.wait()
            writer.close()

    def _call(self, action) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(action)

    def partition(self) -> None:
        """Stop every byte both ways (see the class docstring)."""
        assert self._open is not None
        self._call(self._open.clear)

    def heal(self) -> None:
        assert self._open is not None
        self._call(self._open.set)

    def stop(self) -> None:
        if self._loop is None or self._server is None:
            return
        server = self._server

        def shut() -> None:
            if self._open is not None:
                self._open.set()
            for writer in list(self._writers):
                writer.close()
            server.close()
            for task in asyncio.all_tasks(self._loop):
                task.cancel()
        self._call(shut)
        if self._thread is not None:
            self._thread.join(10)
        self._server = None


def leader_rewrite(real: str, proxy: str):
    """A LinkProxy ``rewrite`` that turns a controller's ``controllerLeaderAddress`` ``real``
    into ``proxy`` in its answers (so a broker's every request to the leader crosses the
    proxy, as it would cross a real network)."""
    from pybroker.protocol import command

    def rewrite(frame: bytes) -> bytes:
        decoded = command.decode(frame, 0, len(frame), copy_body=True)
        fields = decoded.ext_fields or {}
        if fields.get("controllerLeaderAddress") != real:
            return frame
        fields["controllerLeaderAddress"] = proxy
        return bytes(command.encode(decoded))
    return rewrite
