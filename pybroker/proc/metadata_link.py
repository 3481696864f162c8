# A remoting worker's link to the metadata service: bounded, and re-established when lost.
"""The internal unix-socket link from a remoting worker to the supervisor's metadata service.

Bounded: at most :data:`FORWARDS_IN_FLIGHT_MAX` forwarded client requests wait for the service
at a time. Beyond that, or while the link is down, a client gets SYSTEM_BUSY with Java's
overload remark (clients retry later or elsewhere) instead of piling work up in the worker;
a forwarded request the service does not answer in time gets SYSTEM_BUSY
"[TIMEOUT_CLEAN_QUEUE]...". Remarks never carry the socket path.

Kept: the link is internal, so neither end closes it for a write backlog or a stall (see
:data:`INTERNAL_LINK_LIMITS`). If it is lost anyway, the worker reconnects at once and then
every :data:`RECONNECT_INTERVAL_S`, says hello again (the service sends a fresh snapshot), and
logs both events; after :data:`RECONNECT_TIMEOUT_S` without success it gives up and the worker
exits non-zero, which restarts the generation.
"""
import asyncio
import logging
import time

from pybroker.proc.metadata_service import EXT_WORKER_ID, INTERNAL_LINK_LIMITS
from pybroker.protocol.codes import InternalCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_request
from pybroker.remoting.client import RemotingClient
from pybroker.tasks import start_task

__all__ = ["MetadataLink", "LinkBusy", "OVERLOAD_REMARK", "FORWARD_TIMEOUT_MS"]

log = logging.getLogger("pybroker.proc.metadata_link")

FORWARD_TIMEOUT_MS = 15_000
FORWARDS_IN_FLIGHT_MAX = 8192
RECONNECT_INTERVAL_S = 0.5
RECONNECT_TIMEOUT_S = 30.0
# Java's answer when a processor's request queue is full (NettyRemotingAbstract).
OVERLOAD_REMARK = "[OVERLOAD]system busy, start flow control for a while"
TIMEOUT_CLEAN_QUEUE_REMARK = ("[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a "
                              "while, period in queue: {waited_ms}ms, size of queue: {queued}")


class LinkBusy(Exception):
    """A forwarded request the link could not carry; ``remark`` for the SYSTEM_BUSY answer."""

    def __init__(self, remark: str):
        super().__init__(remark)
        self.remark = remark


class MetadataLink:
    """Worker ``worker_id``'s link to the service at ``socket_path``.

    ``table`` answers what the service sends (snapshots, commands for clients);
    ``on_snapshot(body)`` applies the snapshot of each hello; ``on_lost()`` runs when the link
    is given up for good (or its keeper ended by an error, logged with its cause).
    """

    def __init__(self, worker_id: int, socket_path: str, table, on_snapshot, on_lost):
        self.worker_id = worker_id
        self.socket_path = socket_path
        self.client = RemotingClient(table, limits=INTERNAL_LINK_LIMITS)
        self.on_snapshot = on_snapshot
        self.on_lost = on_lost
        self.forwards_in_flight = 0
        self.reconnects_total = 0
        self._keeper: asyncio.Task | None = None
        self._closing = False

    @property
    def is_connected(self) -> bool:
        return self.client.is_connected

    async def connect(self) -> None:
        """Connect and say hello (raises on failure); then keep the link up."""
        await self._connect_once()
        self._keeper = start_task(self._keep(), "the metadata link's keeper",
                                  lambda error: self.on_lost(), log)

    async def _connect_once(self) -> None:
        await self.client.connect(self.socket_path)
        hello = await self.client.invoke(create_request(
            InternalCode.WORKER_HELLO, {EXT_WORKER_ID: str(self.worker_id)}), FORWARD_TIMEOUT_MS)
        if hello.code != ResponseCode.SUCCESS:
            self.client.close()
            raise RuntimeError(f"metadata service refused worker {self.worker_id}: "
                               f"{hello.remark}")
        self.on_snapshot(hello.body)

    async def _keep(self) -> None:
        while not self._closing:
            await self.client.wait_closed()
            if self._closing:
                return
            reason = self.client.connection.close_reason if self.client.connection else None
            log.warning("link to the metadata service lost (%s): reconnecting",
                        reason or "closed by the service")
            if not await self._reconnect():
                log.error("no link to the metadata service for %.0f s: this worker stops",
                          RECONNECT_TIMEOUT_S)
                self.on_lost()
                return

    async def _reconnect(self) -> bool:
        deadline = time.monotonic() + RECONNECT_TIMEOUT_S
        while not self._closing and time.monotonic() < deadline:
            try:
                await self._connect_once()
            except (OSError, TimeoutError, RuntimeError) as error:
                log.warning("reconnecting to the metadata service failed: %s", error)
                await asyncio.sleep(RECONNECT_INTERVAL_S)
                continue
            self.reconnects_total += 1
            log.info("link to the metadata service re-established")
            return True
        return self._closing

    async def forward(self, forwarded: RemotingCommand) -> RemotingCommand:
        """Send the forwarded client request and return the service's answer; LinkBusy (with
        the remark for a SYSTEM_BUSY answer) when the link cannot take or answer it."""
        if not self.client.is_connected or self.forwards_in_flight >= FORWARDS_IN_FLIGHT_MAX:
            raise LinkBusy(OVERLOAD_REMARK)
        self.forwards_in_flight += 1
        started = time.monotonic()
        try:
            return await self.client.invoke(forwarded, FORWARD_TIMEOUT_MS)
        except TimeoutError:
            raise LinkBusy(TIMEOUT_CLEAN_QUEUE_REMARK.format(
                waited_ms=int((time.monotonic() - started) * 1000),
                queued=self.forwards_in_flight)) from None
        except ConnectionError:
            raise LinkBusy(OVERLOAD_REMARK) from None
        finally:
            self.forwards_in_flight -= 1

    async def invoke(self, command: RemotingCommand) -> RemotingCommand:
        """An internal request of the worker itself (raises ConnectionError, TimeoutError)."""
        return await self.client.invoke(command, FORWARD_TIMEOUT_MS)

    def invoke_oneway(self, command: RemotingCommand) -> None:
        """Send ``command`` oneway if the link is up (dropped otherwise: oneway requests are
        best effort, and the service forgets the worker's state when the link drops)."""
        if self.client.is_connected:
            self.client.invoke_oneway(command)

    def close(self) -> None:
        self._closing = True
        if self._keeper is not None:
            self._keeper.cancel()
        self.client.close()
