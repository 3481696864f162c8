# The master side of the ha worker: streams the CommitLog (read-only) to slaves on the HA port.
"""Master HA service (design.md §2, protocol.md §6.2), Java's HAService/HAConnection on asyncio.

The worker maps the CommitLog read-only and never writes it. Per slave connection:

* **Reports** (8-byte offsets) are read as they come; the last whole one counts. The first is
  the slave's request: 0 starts the transfer at the beginning of the master's last CommitLog
  file (Java's rule for a fresh slave), anything else at that offset. Every report is also an
  acknowledgement: the connection's line in the control block takes it, and
  ``replicated_position`` (the highest acknowledgement of any slave, monotonic, Java's
  push2SlaveMaxOffset) is published with the waiter bits of SYNC_MASTER puts, once per read.
* **Transfers** go out, under SYNC_MASTER, as soon as the appender publishes
  ``written_position`` (the ha worker is a waiter on it only while some slave is caught up);
  under ASYNC_MASTER on a 10 ms tick, which batches (Java's transfer thread polls every
  100 ms when no SYNC_MASTER put wakes it): units of at most
  ``haTransferBatchSize`` bytes that never cross a CommitLog file end (BLANK fillers go as
  they are, so the slave's files are byte-identical), one ``sendmsg`` of header + a view of
  the map (no copy in Python), a bounded number per loop turn so one slave that is GiBs
  behind does not starve the others. A header-only unit is the heartbeat when a connection
  sent nothing for ``haSendHeartbeatInterval``.
* **Refused input** closes the connection with a log line: a report beyond the master's
  written offset (garbage such as an HTTP or TLS greeting reads as a huge offset), a
  negative one, an acknowledgement that goes backwards, a request below the oldest CommitLog
  file, silence for ``haHousekeepingInterval``, or more than ``HA_SLAVE_SLOTS_MAX`` slaves.

``ha_slaves_connected`` counts connections that sent a valid first report (Java counts
accepted sockets; a port scanner is not a slave). A SYNC_MASTER put needs at least one
(protocol.md §6.2: SLAVE_NOT_AVAILABLE otherwise). A report counts toward
``replicated_position`` only for bytes this connection was sent (``sent_end``): the request
itself, a claim no byte backs yet, releases no acknowledgement (Java counts it). Who may
connect at all (address allow-list, TLS, shared secret) is :mod:`pybroker.proc.ha_access`,
applied by its :class:`~pybroker.proc.ha_access.HAGate` before a connection exists here.
"""
import asyncio
import logging
import socket

from pybroker import clock
from pybroker.proc.ha_access import HAAccess, HAGate
from pybroker.proc.ha_master_base import CommitLogFollower, TransferBuffers, release_buffer
from pybroker.proc.wake import PositionWatch, signal_mask
from pybroker.protocol import ha as ha_protocol
from pybroker.store.commitlog import CommitLog
from pybroker.store.control_block import HA, HA_SLAVE_SLOTS_MAX, BrokerState, peer_word
from pybroker.store.drop_behind import DropBehind
from pybroker.store.settings import BrokerRole
from pybroker.store.mapped_file import MappedFile
from pybroker.store.read_only_store import READER_KEEP_BYTES

log = logging.getLogger("pybroker.proc.ha_master")

__all__ = ["HAMasterService"]

_READ_BYTES_MAX = 1 << 20          # Java's master reads reports into 1 MiB
_UNITS_PER_TURN_MAX = 64           # then yield to the loop (other slaves, reports)
_HOUSEKEEPING_TICK_S = 0.5
# ASYNC_MASTER: no wake-up per append drain; new data goes out on this tick (Java's transfer
# thread waits up to 100 ms when no SYNC_MASTER put wakes it). Batches units, bounds the lag.
_ASYNC_TRANSFER_TICK_S = 0.01


class _SlaveConnection(TransferBuffers):
    """One slave socket (non-blocking; the loop's reader/writer callbacks drive it)."""

    def __init__(self, service: "HAMasterService", sock: socket.socket, address, slot: int):
        self.service = service
        self.sock = sock
        self.address = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else "?"
        self.peer = peer_word(address)
        self.slot = slot
        self.connected_ms = service.clock_ms()
        self.last_read_ms = self.last_write_ms = self.connected_ms
        self.request_offset = -1
        self.ack_offset = -1
        self.acknowledged = -1                # the last report backed by bytes sent here
        self.next_transfer = -1
        self.transfer_start = -1
        self.sent_end = -1                    # end of the data units fully sent
        self.unit_end = -1
        self.pending = bytearray()            # an incomplete report
        self.out: list = []                   # buffers of the unit being sent
        self.out_file: MappedFile | None = None   # the mapped file the unit's view holds
        self.writer_registered = False
        self.pump_scheduled = False
        self.closed = False
        self.transferred_bytes = 0

    def waiting_for_data(self) -> bool:
        return (not self.closed and self.request_offset >= 0 and not self.out
                and self.next_transfer >= self.service.written)

    # --- reports --------------------------------------------------------------------------------
    def readable(self) -> None:
        try:
            data = self.sock.recv(_READ_BYTES_MAX)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as error:
            self.close(f"read failed: {error}")
            return
        if not data:
            self.close("closed by the slave")
            return
        self.last_read_ms = self.service.clock_ms()
        self.pending += data
        try:
            offset, consumed = ha_protocol.last_report(self.pending, 0, len(self.pending))
        except ha_protocol.HAProtocolError as error:
            self.close(str(error))
            return
        del self.pending[:consumed]
        if offset is not None:
            self.service.on_report(self, offset)

    # --- transfers ------------------------------------------------------------------------------
    def pump(self) -> None:
        """Send what is written beyond next_transfer, a bounded number of units per turn."""
        self.pump_scheduled = False
        if self.closed or self.request_offset < 0:
            return
        service = self.service
        for _ in range(_UNITS_PER_TURN_MAX):
            if not self.out:
                if self.closed or self.next_transfer >= service.written:
                    return
                if not self._next_unit():
                    return
            if not self._send():
                return      # the socket is full (a writer callback resumes) or closed
        if not self.pump_scheduled:
            self.pump_scheduled = True
            asyncio.get_running_loop().call_soon(self.pump)

    def _next_unit(self) -> bool:
        service = self.service
        mapped_file = service.commitlog.mapped_file_queue.find_mapped_file_by_offset(
            self.next_transfer)
        if mapped_file is None:
            self.close(f"offset {self.next_transfer} is not in the master's CommitLog (min "
                       f"{service.commitlog.min_offset()}, max {service.written})")
            return False
        position = self.next_transfer - mapped_file.file_from_offset
        size = min(service.batch_bytes, mapped_file.wrote_position - position,
                   service.written - self.next_transfer)
        view = mapped_file.view(position, size) if size > 0 else None
        if view is None:
            self.close(f"cannot read {size} bytes at {self.next_transfer}")
            return False
        self.out = [ha_protocol.encode_transfer_header(self.next_transfer, size), view]
        self.out_file = mapped_file
        self.next_transfer += size
        self.unit_end = self.next_transfer
        self.transferred_bytes += size
        return True

    def heartbeat(self) -> None:
        """A header-only unit (Java's heartbeat) when idle for haSendHeartbeatInterval."""
        if self.request_offset >= 0 and not self.out:
            self.out = [ha_protocol.encode_transfer_header(self.next_transfer, 0)]
            self._send()

    def _send(self) -> bool:
        """Write the pending unit; True when all of it went out."""
        try:
            sent = self.sock.sendmsg(self.out)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as error:
            self.close(f"write failed: {error}")
            return False
        if sent:
            self.last_write_ms = self.service.clock_ms()
        while sent and self.out:
            first = self.out[0]
            length = len(first)
            if sent >= length:
                sent -= length
                self.out.pop(0)
                release_buffer(first)
            else:
                self.out[0] = memoryview(first)[sent:]
                sent = 0
        if not self.out:
            self._release_file()
            self.sent_end = max(self.sent_end, self.unit_end)
            return True
        if not self.writer_registered:
            self.writer_registered = True
            asyncio.get_running_loop().add_writer(self.sock, self._writable)
        return False

    def _writable(self) -> None:
        asyncio.get_running_loop().remove_writer(self.sock)
        self.writer_registered = False
        self.pump()

    def close(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        log.warning("HA connection of slave[%s] closed: %s (acknowledged %d, transferred %d "
                    "bytes)", self.address, reason, self.ack_offset, self.transferred_bytes)
        self._detach()


class HAMasterService(CommitLogFollower):
    """The master's HA port (see the module docstring). ``listener`` is a bound, listening
    socket (the supervisor binds it before forking: a busy port stops the start)."""

    def __init__(self, settings, control, wakes, listener: socket.socket, clock_ms=clock.now_ms,
                 access: HAAccess | None = None):
        # SYNC_MASTER puts wait for the slave: each append drain wakes this worker. An
        # ASYNC_MASTER's slave takes what a short tick found (fewer, larger units).
        self.sync_master = settings.broker_role == BrokerRole.SYNC_MASTER
        self.control = control
        self.wakes = wakes
        self.slots = wakes.by_slot()
        self.clock_ms = clock_ms
        self.batch_bytes = settings.ha_transfer_batch_size
        self.heartbeat_ms = settings.ha_send_heartbeat_interval
        self.housekeeping_ms = settings.ha_housekeeping_interval
        store_root = settings.store_path_root_dir
        self.commitlog = CommitLog(settings.commitlog_dir,
                                   settings.mapped_file_size_commit_log,
                                   read_only=True)
        if not self.commitlog.load():
            raise ValueError(f"store {store_root}: a CommitLog file has the wrong size")
        self.written = -1
        self.commitlog_min_offset = 0
        # Pages sent to slaves leave this process's page tables on the housekeeping tick
        # (store/drop_behind.py; a slave catching up reads far back: a sweep).
        self.drop_behind = DropBehind(self.commitlog.mapped_file_queue,
                                      keep_bytes=READER_KEEP_BYTES)
        self.connections: dict[int, _SlaveConnection] = {}
        self.gate = HAGate(listener, access or HAAccess(),      # as Java: any peer, plain TCP
                           self._register, HA_SLAVE_SLOTS_MAX)
        self.counted = 0
        self.stop: asyncio.Event | None = None
        # The waiter bit on written_position, set only while a slave waits for new data.
        self.flag = PositionWatch(self.control, "written_position", HA.slot,
                                  self._caught_up_target)
        self._tick_s = _HOUSEKEEPING_TICK_S
        self._next_housekeeping = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.follow()

    def _caught_up_target(self) -> int | None:
        """What written_position must pass to wake this process: past what it follows, while
        a SYNC_MASTER's slave waits for new data; None otherwise."""
        if not self.sync_master or not any(c.waiting_for_data()
                                           for c in self.connections.values()):
            return None
        return self.written + 1

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set or ``broker_state`` turns STOPPING."""
        loop = asyncio.get_running_loop()
        self.stop = stop
        self.gate.start("HA service", f"master offset {self.written}")
        loop.add_reader(self.wakes.ha.fd, self._wake_readable)
        self._tick_s = _HOUSEKEEPING_TICK_S if self.sync_master else _ASYNC_TRANSFER_TICK_S
        self._next_housekeeping = loop.time() + _HOUSEKEEPING_TICK_S
        self._timer = loop.call_later(self._tick_s, self._tick)
        try:
            await stop.wait()
        finally:
            if self._timer is not None:
                self._timer.cancel()
            self.flag.clear_sleeping()
            loop.remove_reader(self.wakes.ha.fd)
            self.gate.stop()
            for connection in list(self.connections.values()):
                connection.close("master stopping")
            self.commitlog.shutdown(0)

    def _tick(self) -> None:
        """The transfer tick (ASYNC_MASTER) and housekeeping: a timer, not a task per tick."""
        loop = asyncio.get_running_loop()
        self._on_wake()
        if loop.time() >= self._next_housekeeping:
            self._next_housekeeping = loop.time() + _HOUSEKEEPING_TICK_S
            self._housekeeping()
        if self.stop is None or not self.stop.is_set():
            # Without a slave there is nothing to transfer: housekeeping pace only (the 10 ms
            # tick cost an event-loop turn 100 times a second on every master).
            tick_s = self._tick_s if self.connections else _HOUSEKEEPING_TICK_S
            self._timer = loop.call_later(tick_s, self._tick)

    # --- wake-ups: the appender signals only while the flag is armed --------------------------
    def _wake_readable(self) -> None:
        self.wakes.ha.consume()
        self._on_wake()

    def _on_wake(self) -> None:
        self.flag.clear_sleeping()
        if self.control.broker_state >= BrokerState.STOPPING and self.stop is not None:
            self.stop.set()
        self.follow()
        for connection in list(self.connections.values()):
            if not connection.out:
                connection.pump()
        self.arm()

    def arm(self) -> None:
        """Arm the waiter bit when a slave waits for data; run again at once if the position
        moved meanwhile (set flag, fence, re-check: a wake-up is never lost)."""
        if not self.flag.armed and self.flag.set_sleeping():
            asyncio.get_running_loop().call_soon(self._on_wake)

    def _housekeeping(self) -> None:
        now = self.clock_ms()
        if self.connections:
            self.drop_behind.sweep(self.written)
        for connection in list(self.connections.values()):
            if now - connection.last_read_ms > self.housekeeping_ms:
                connection.close(f"ha housekeeping: no report for {now - connection.last_read_ms}"
                                 " ms")
            elif now - connection.last_write_ms > self.heartbeat_ms:
                connection.heartbeat()

    def _register(self, sock, address) -> None:
        """A peer admitted to the classic protocol."""
        free = [slot for slot in range(HA_SLAVE_SLOTS_MAX) if slot not in self.connections]
        if not free:
            log.warning("HA connection from %s refused: %d slaves connected already", address,
                        HA_SLAVE_SLOTS_MAX)
            sock.close()
            return
        connection = _SlaveConnection(self, sock, address, free[0])
        self.connections[connection.slot] = connection
        loop = asyncio.get_running_loop()
        loop.add_reader(sock, connection.readable)
        if self._timer is not None and self._tick_s < _HOUSEKEEPING_TICK_S:
            self._timer.cancel()            # back to the transfer tick at once
            self._timer = loop.call_later(self._tick_s, self._tick)
        log.info("HAService receive new connection, %s", connection.address)

    def on_report(self, connection: _SlaveConnection, offset: int) -> None:
        """A slave's request (first) or acknowledgement (later): check, publish, transfer."""
        self.follow()
        if offset > self.written:
            connection.close(f"slave reported offset {offset} beyond the master's max offset "
                             f"{self.written}")
            return
        if offset < connection.ack_offset:
            connection.close(f"slave acknowledgement went back from {connection.ack_offset} "
                             f"to {offset}")
            return
        if connection.request_offset < 0 and not self._start(connection, offset):
            return
        connection.ack_offset = offset
        # Only bytes sent on this connection back an acknowledgement: not the request (a
        # claim), not a report beyond what it was sent.
        if connection.sent_end > connection.transfer_start and offset <= connection.sent_end:
            connection.acknowledged = offset
        control = self.control
        control.publish_ha_slave(connection.slot, offset, connection.peer,
                                 connection.connected_ms)
        highest = max(c.acknowledged for c in self.connections.values())
        if highest >= 0:
            signal_mask(control.publish("replicated_position", highest, True), self.slots)
        if not connection.out:
            connection.pump()
        self.arm()

    def _start(self, connection: _SlaveConnection, offset: int) -> bool:
        if offset == 0:
            file_size = self.commitlog.file_size
            start = max(self.written - self.written % file_size, 0)
        else:
            start = offset
        min_offset = self.commitlog.min_offset()
        if start < self.written and (min_offset < 0 or start < min_offset):
            connection.close(f"slave requests offset {start} below the master's oldest "
                             f"CommitLog file {min_offset}: rebuild the slave from a copy")
            return False
        connection.request_offset = offset
        connection.next_transfer = connection.transfer_start = connection.sent_end = start
        self.counted += 1
        signal_mask(self.control.publish("ha_slaves_connected", self.counted), self.slots)
        log.info("slave[%s] request offset %d, master transfers from %d (master max %d)",
                 connection.address, offset, start, self.written)
        return True

    def removed(self, connection: _SlaveConnection) -> None:
        self.connections.pop(connection.slot, None)
        self.control.publish_ha_slave(connection.slot, 0, 0, 0)
        if connection.request_offset >= 0:
            self.counted -= 1
            signal_mask(self.control.publish("ha_slaves_connected", self.counted), self.slots)
