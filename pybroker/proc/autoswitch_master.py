# The master side of the controller-mode ha worker: AutoSwitchHA with epochs on the HA port.
"""Controller-mode master HA service (Java ``AutoSwitchHAConnection``; wire format in
:mod:`pybroker.protocol.autoswitch_ha`), on asyncio like the classic
:mod:`pybroker.proc.ha_master`, whose rules it keeps: the worker maps the CommitLog
read-only, sends units of at most ``haTransferBatchSize`` that never cross a CommitLog file
end (one ``sendmsg`` of header + a view of the map), a bounded number per turn, a header-only
unit as heartbeat after ``haSendHeartbeatInterval`` of silence, and closes a connection whose
peer is silent for ``haHousekeepingInterval`` or sends what the protocol does not allow.

Per connection: the slave's handshake (its broker id, syncFromLastFile, asyncLearner) is
answered with the master's end, last epoch and epoch entries (the epoch file, written by the
supervisor when this generation became master); the slave cuts its log to the consistent
point and reports its end, which starts the transfer (0: the master's first file, or its last
with syncFromLastFile). A unit never spans two epochs; its header carries the epoch, where
that epoch starts and the confirm offset.

**Acknowledgements** (docs/architecture/controller.md). The supervisor publishes the
SyncStateSet members the master waits for (``ControlBlock.sync_state``); from the slaves'
reports this worker publishes ``replicated_position`` - with ``allAckInSyncStateSet`` the
smallest acknowledgement of those members (Java's confirm offset, unchanged while one of them
is not connected), else the (inSyncReplicas-1)-th highest of all - and
``ha_slaves_connected`` as the number of acknowledgements a send waits for (0: none). When that
drops to 0 the position jumps to the written end: sends held for a member the controller took
out are answered, as Java's GroupTransferService answers them once the set is the master
alone. With them it publishes ``confirm_position``, Java's confirm offset, which the
dispatcher does not pass and the transfer headers carry. Per slave it also publishes the broker
id, when it last caught up (Java's lastCaughtUpTimeMs) and, once the slave is required, the
written end at that moment, which the supervisor waits for before proposing it to the
controller (broker/sync_state.py).
"""
import asyncio
import logging
import socket

from pybroker import clock
from pybroker.proc.ha_access import HAAccess, HAGate
from pybroker.proc.ha_master_base import CommitLogFollower, TransferBuffers, release_buffer
from pybroker.proc.wake import signal_mask
from pybroker.protocol import autoswitch_ha as wire
from pybroker.store.commitlog import CommitLog
from pybroker.store.control_block import (CONFIRM_UNBOUNDED, HA, HA_SLAVE_ASYNC_LEARNER,
                                         HA_SLAVE_SLOTS_MAX, BrokerState, peer_word)
from pybroker.store.drop_behind import DropBehind
from pybroker.store.epoch_file import EpochFile
from pybroker.store.mapped_file import MappedFile
from pybroker.store.read_only_store import READER_KEEP_BYTES

log = logging.getLogger("pybroker.proc.autoswitch_master")

__all__ = ["AutoSwitchMasterService"]

_READ_BYTES_MAX = 1 << 20
_UNITS_PER_TURN_MAX = 64
_HOUSEKEEPING_TICK_S = 0.5


class _Connection(TransferBuffers):
    """One slave socket; the loop's reader/writer callbacks drive it."""

    def __init__(self, service: "AutoSwitchMasterService", sock: socket.socket, address,
                 slot: int):
        self.service = service
        self.sock = sock
        self.address = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else "?"
        self.peer = peer_word(address)
        self.slot = slot
        self.connected_ms = service.clock_ms()
        self.last_read_ms = self.last_write_ms = self.connected_ms
        self.broker_id = 0
        self.from_last_file = self.learner = False
        self.handshaken = False
        self.request_offset = -1
        self.ack_offset = -1
        self.next_transfer = -1
        self.epoch: tuple[int, int, int] | None = None     # (epoch, start, end) of next unit
        self.last_master_end = -1            # Java lastMasterMaxOffset / lastTransferTimeMs
        self.last_transfer_ms = 0
        self.caught_up_ms = 0
        self.required_from = 0
        self.pending = bytearray()
        self.out: list = []
        self.out_file: MappedFile | None = None
        self.writer_registered = self.pump_scheduled = self.closed = False
        self.transferred_bytes = 0

    def waiting_for_data(self) -> bool:
        return (not self.closed and self.request_offset >= 0 and not self.out
                and self.next_transfer >= self.service.written)

    def publish_line(self) -> None:
        self.service.control.publish_ha_slave(
            self.slot, max(self.ack_offset, 0), self.peer, self.connected_ms, self.broker_id,
            self.caught_up_ms, HA_SLAVE_ASYNC_LEARNER if self.learner else 0,
            self.required_from)

    # --- reads ----------------------------------------------------------------------------------
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
            frames, consumed = wire.parse_slave_frames(self.pending, len(self.pending))
        except wire.HAProtocolError as error:
            self.close(str(error))
            return
        del self.pending[:consumed]
        for frame in frames:
            if self.closed:
                return
            if frame[0] == "handshake":
                self.on_handshake(*frame[1:])
            else:
                self.service.on_report(self, frame[1])

    def on_handshake(self, broker_id: int, from_last_file: bool, learner: bool) -> None:
        if broker_id <= 0:
            self.close(f"handshake with broker id {broker_id}")
            return
        self.broker_id, self.from_last_file, self.learner = broker_id, from_last_file, learner
        self.handshaken = True
        service = self.service
        service.follow()
        if broker_id in service.required:
            # Required already (joining, or a member back on a new connection): the sends
            # answered so far ended at or before this end, as when it became required.
            self.required_from = service.control.written_position + 1
        entries = [(entry.epoch, entry.start_offset) for entry in service.epochs.entries]
        log.info("slave[%s] broker id %d handshake (syncFromLastFile %s, asyncLearner %s); "
                 "master end %d, epochs %s", self.address, broker_id, from_last_file, learner,
                 service.written, entries)
        self.out = [wire.encode_master_handshake(service.written, service.epochs.last_epoch(),
                                                 entries)]
        self.publish_line()
        self._send()

    # --- transfers ------------------------------------------------------------------------------
    def pump(self) -> None:
        self.pump_scheduled = False
        if self.closed or self.request_offset < 0:
            return
        service = self.service
        for _ in range(_UNITS_PER_TURN_MAX):
            if not self.out:
                if self.next_transfer >= service.written:
                    self.idle_caught_up()
                    return
                if not self._next_unit():
                    return
            if not self._send():
                return
        if not self.pump_scheduled:
            self.pump_scheduled = True
            asyncio.get_running_loop().call_soon(self.pump)

    def idle_caught_up(self) -> None:
        """Nothing left to send and the slave acknowledged it all: caught up now (Java's
        write loop refreshes the time while it has nothing to send)."""
        if self.ack_offset >= self.service.written and not self.learner:
            self.caught_up_ms = self.service.clock_ms()
            self.publish_line()

    def _epoch_of(self, offset: int) -> tuple[int, int, int] | None:
        entry = self.service.epochs.find_by_offset(offset)
        if entry is None:
            return None
        return entry.epoch, entry.start_offset, entry.end_offset

    def _next_unit(self) -> bool:
        service = self.service
        if self.epoch is None or self.next_transfer >= self.epoch[2]:
            self.epoch = self._epoch_of(self.next_transfer)
            if self.epoch is None:
                self.close(f"no epoch holds offset {self.next_transfer} (epochs "
                           f"{[(e.epoch, e.start_offset) for e in service.epochs.entries]})")
                return False
        mapped_file = service.commitlog.mapped_file_queue.find_mapped_file_by_offset(
            self.next_transfer)
        if mapped_file is None:
            self.close(f"offset {self.next_transfer} is not in the master's CommitLog")
            return False
        position = self.next_transfer - mapped_file.file_from_offset
        size = min(service.batch_bytes, mapped_file.wrote_position - position,
                   service.written - self.next_transfer,
                   self.epoch[2] - self.next_transfer)
        view = mapped_file.view(position, size) if size > 0 else None
        if view is None:
            self.close(f"cannot read {size} bytes at {self.next_transfer}")
            return False
        epoch, start, _ = self.epoch
        self.out = [wire.encode_transfer_header(self.next_transfer, size, epoch, start,
                                                service.confirm_offset()), view]
        self.out_file = mapped_file
        self.next_transfer += size
        self.transferred_bytes += size
        self.last_master_end = service.written
        self.last_transfer_ms = service.clock_ms()
        return True

    def heartbeat(self) -> None:
        if self.request_offset < 0 or self.out:
            return
        service = self.service
        epoch = self.epoch or self._epoch_of(max(self.next_transfer - 1, 0))
        if epoch is None:
            first = service.epochs.first()
            epoch = (first.epoch, first.start_offset, first.end_offset) if first else (-1, 0, 0)
        self.out = [wire.encode_transfer_header(self.next_transfer, 0, epoch[0], epoch[1],
                                                service.confirm_offset())]
        self._send()

    def _send(self) -> bool:
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
            length = len(self.out[0])
            if sent >= length:
                sent -= length
                release_buffer(self.out.pop(0))
            else:
                self.out[0] = memoryview(self.out[0])[sent:]
                sent = 0
        if not self.out:
            self._release_file()
            return True
        if not self.writer_registered:
            self.writer_registered = True
            asyncio.get_running_loop().add_writer(self.sock, self._writable)
        return False

    def _writable(self) -> None:
        asyncio.get_running_loop().remove_writer(self.sock)
        self.writer_registered = False
        if self._send():
            self.pump()

    def close(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        log.warning("HA connection of slave[%s] (broker id %d) closed: %s (acknowledged %d, "
                    "transferred %d bytes)", self.address, self.broker_id, reason,
                    self.ack_offset, self.transferred_bytes)
        self._detach()


class AutoSwitchMasterService(CommitLogFollower):
    """The controller-mode master's HA port (see the module docstring)."""

    def __init__(self, settings, control, wakes, listener: socket.socket,
                 clock_ms=clock.now_ms, access: HAAccess | None = None):
        self.control = control
        self.wakes = wakes
        self.slots = wakes.by_slot()
        # Admission as on the classic port (haAllowedSlaveAddresses, haTlsEnable,
        # haSharedSecret; proc/ha_access.py), before the AutoSwitchHA handshake.
        self.gate = HAGate(listener, access or HAAccess(), self._register, HA_SLAVE_SLOTS_MAX)
        self.clock_ms = clock_ms
        self.batch_bytes = settings.ha_transfer_batch_size
        self.heartbeat_ms = settings.ha_send_heartbeat_interval
        self.housekeeping_ms = settings.ha_housekeeping_interval
        self.all_ack = settings.all_ack_in_sync_state_set
        self.in_sync_replicas = settings.in_sync_replicas
        self.epochs = EpochFile.load(settings.epoch_file_path)
        self.commitlog = CommitLog(settings.commitlog_dir, settings.mapped_file_size_commit_log,
                                   read_only=True)
        if not self.commitlog.load():
            raise ValueError(f"store {settings.store_path_root_dir}: a CommitLog file has the "
                             "wrong size")
        self.file_size = self.commitlog.file_size
        self.written = -1
        self.commitlog_min_offset = 0
        self.drop_behind = DropBehind(self.commitlog.mapped_file_queue,
                                      keep_bytes=READER_KEEP_BYTES)
        self.connections: dict[int, _Connection] = {}
        self.required: tuple[int, ...] = ()
        self.sync_sequence = -1
        self.stop: asyncio.Event | None = None
        self.armed = False
        self._timer: asyncio.TimerHandle | None = None
        self.follow()

    def confirm_offset(self) -> int:
        """Java's confirm offset as the transfer headers carry it: ``confirm_position``, the
        written end when unbounded."""
        return min(self.control.confirm_position, self.written)

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        self.stop = stop
        self.gate.start("AutoSwitchHA service", f"master end {self.written}, epochs "
                        f"{[(entry.epoch, entry.start_offset) for entry in self.epochs.entries]}")
        loop.add_reader(self.wakes.ha.fd, self._wake_readable)
        self.apply_sync_state()
        self._timer = loop.call_later(_HOUSEKEEPING_TICK_S, self._tick)
        try:
            await stop.wait()
        finally:
            if self._timer is not None:
                self._timer.cancel()
            self._disarm()
            loop.remove_reader(self.wakes.ha.fd)
            self.gate.stop()
            for connection in list(self.connections.values()):
                connection.close("master stopping")
            self.commitlog.shutdown(0)

    def _tick(self) -> None:
        self._on_wake()
        now = self.clock_ms()
        if self.connections:
            self.drop_behind.sweep(self.written)
        for connection in list(self.connections.values()):
            if connection.request_offset >= 0 and not connection.out:
                connection.idle_caught_up()
            if now - connection.last_read_ms > self.housekeeping_ms:
                connection.close(f"ha housekeeping: silent for {now - connection.last_read_ms}"
                                 " ms")
            elif now - connection.last_write_ms > self.heartbeat_ms:
                connection.heartbeat()
        if self.stop is None or not self.stop.is_set():
            self._timer = asyncio.get_running_loop().call_later(_HOUSEKEEPING_TICK_S, self._tick)

    # --- wake-ups -----------------------------------------------------------------------------
    def _wake_readable(self) -> None:
        self.wakes.ha.consume()
        self._on_wake()

    def _on_wake(self) -> None:
        self._disarm()
        if self.control.broker_state >= BrokerState.STOPPING and self.stop is not None:
            self.stop.set()
        self.follow()
        self.apply_sync_state()
        for connection in list(self.connections.values()):
            if not connection.out:
                connection.pump()
        self._arm()

    def _arm(self) -> None:
        """Waiter bit on written_position while a slave waits for data (set, fence,
        re-check: a wake-up is never lost)."""
        if self.armed or not any(c.waiting_for_data() for c in self.connections.values()):
            return
        self.control.add_waiter("written_position", HA.slot)
        self.armed = True
        if self.control.written_position > self.written:
            asyncio.get_running_loop().call_soon(self._on_wake)

    def _disarm(self) -> None:
        if self.armed:
            self.armed = False
            self.control.remove_waiter("written_position", HA.slot)

    # --- connections --------------------------------------------------------------------------
    def _register(self, sock, address) -> None:
        """A peer the gate admitted (a plain or TLS socket)."""
        free = [slot for slot in range(HA_SLAVE_SLOTS_MAX) if slot not in self.connections]
        if not free:
            log.warning("HA connection from %s refused: %d slaves connected already", address,
                        HA_SLAVE_SLOTS_MAX)
            sock.close()
            return
        connection = _Connection(self, sock, address, free[0])
        self.connections[connection.slot] = connection
        asyncio.get_running_loop().add_reader(sock, connection.readable)
        log.info("AutoSwitchHA receives a new connection, %s", connection.address)

    def on_report(self, connection: _Connection, offset: int) -> None:
        """A slave's first report (where to start) or acknowledgement."""
        if not connection.handshaken:
            connection.close("report before the handshake")
            return
        self.follow()
        if offset > self.written:
            connection.close(f"slave reported {offset} beyond the master's end {self.written}")
            return
        if offset < connection.ack_offset:
            connection.close(f"acknowledgement went back from {connection.ack_offset} to "
                             f"{offset}")
            return
        if connection.request_offset < 0 and not self._start(connection, offset):
            return
        connection.ack_offset = offset
        if not connection.learner:
            if offset >= self.written:
                connection.caught_up_ms = self.clock_ms()
            elif offset >= connection.last_master_end >= 0:     # Java's maybeExpand...
                connection.caught_up_ms = connection.last_transfer_ms
        connection.publish_line()
        self.publish_acknowledgements()
        if not connection.out:
            connection.pump()
        self._arm()

    def _start(self, connection: _Connection, offset: int) -> bool:
        if offset == 0:
            if connection.from_last_file:
                start = max(self.written - self.written % self.file_size, 0)
            else:
                start = max(self.commitlog.min_offset(), 0)
        else:
            start = offset
        min_offset = self.commitlog.min_offset()
        if start < self.written and (min_offset < 0 or start < min_offset):
            connection.close(f"slave requests {start}, below the master's oldest CommitLog "
                             f"file {min_offset}")
            return False
        connection.request_offset = offset
        connection.next_transfer = start
        log.info("slave[%s] broker id %d requests %d, master transfers from %d (end %d)",
                 connection.address, connection.broker_id, offset, start, self.written)
        return True

    def removed(self, connection: _Connection) -> None:
        self.connections.pop(connection.slot, None)
        self.control.publish_ha_slave(connection.slot, 0, 0, 0)
        self.publish_acknowledgements()

    # --- the acknowledgement rule -----------------------------------------------------------
    def apply_sync_state(self) -> None:
        """Read the members the supervisor published; mark the newly required."""
        sequence, members, _ = self.control.sync_state()
        if sequence == self.sync_sequence:
            return
        self.sync_sequence, previous = sequence, set(self.required)
        self.required = members
        self.publish_acknowledgements()
        # After the count is published (a fence): every send answered without a new member
        # ended at or before this written end.
        written = self.control.written_position
        for connection in self.connections.values():
            if connection.broker_id in members and connection.broker_id not in previous:
                connection.required_from = written + 1
            elif connection.broker_id not in members:
                connection.required_from = 0
            if connection.handshaken:
                connection.publish_line()

    def publish_acknowledgements(self) -> None:
        """``ha_slaves_connected`` = acknowledgements a send waits for, ``replicated_position``
        = what they all cover (see the module docstring)."""
        control = self.control
        acks = {c.broker_id: c.ack_offset for c in self.connections.values()
                if c.request_offset >= 0}
        if self.all_ack:
            needed = len(self.required)
            known = [acks.get(member, -1) for member in self.required]
            covered = min(known) if known and min(known) >= 0 else None
        else:
            needed = max(self.in_sync_replicas - 1, 0)
            ranked = sorted(acks.values(), reverse=True)
            covered = ranked[needed - 1] if needed and len(ranked) >= needed else None
        if needed == 0:
            covered = control.written_position
        mask = control.publish("ha_slaves_connected", needed)
        if covered is not None:
            mask |= control.publish("replicated_position", covered, True)
        # Java's confirm offset (CommitLog.getConfirmOffset): with allAckInSyncStateSet what
        # every member a send waits for has (unchanged while one is unknown), else - and while
        # it waits for none - the written end. The dispatcher serves no further.
        confirm = control.replicated_position if self.all_ack and needed else CONFIRM_UNBOUNDED
        if confirm != control.confirm_position:
            mask |= control.publish("confirm_position", confirm)
        signal_mask(mask, self.slots)
