# The slave side of the controller-mode ha worker: AutoSwitchHA handshake, truncation, transfer.
"""Controller-mode slave HA client (Java ``AutoSwitchHAClient``; wire format in
:mod:`pybroker.protocol.autoswitch_ha`). As in the classic :mod:`pybroker.proc.ha_slave`, the
worker is the CommitLog's only writer (through :class:`pybroker.store.replica.ReplicaLog`:
contiguous, records checked before they count), publishes ``written_position`` once per read
as the end of the last whole record, connects to the HA address the supervisor writes to
``run/ha-master`` (the master the controller named, as the NameServer registered it) and
reconnects with back-off (0.5 s doubling to 5 s).

Per connection: it sends its handshake (broker id, syncFromLastFile, asyncLearner), takes the
master's (end and epoch entries) and finds the **consistent point** of the two epoch lists
(:func:`pybroker.store.epoch_file.consistent_point`). A log that runs past it is cut: the
worker records the truncation (:func:`pybroker.store.replica.request_truncation`) and exits
with :data:`EXIT_TRUNCATE`; the next generation cuts the CommitLog and the epoch file before
recovery, and both steps are idempotent, so a ``kill -9`` anywhere in them leaves the request
in place and the next start does it again (unlike Java 5.3.3, whose in-memory truncation leaves
the old tail valid on disk: apache/rocketmq#10666). Otherwise it reports its end (the master's
first transfer starts there) and appends what follows, recording every new epoch the
transfer headers announce in its epoch file (Java's rule: refused unless it is newer). An
empty epoch file means a new replica: nothing is cut. With ``written_position`` it publishes
``confirm_position``: the confirm offset of the master's last transfer header, bounded by its
own end (Java's AutoSwitchHAClient), so its dispatcher serves only what the master's
SyncStateSet confirmed.
"""
import asyncio
import logging
import socket

from pybroker import clock
from pybroker.proc.ha_access import HAAccess, HAAccessRefused
from pybroker.proc.wake import signal_mask, wait_event
from pybroker.protocol import autoswitch_ha as wire
from pybroker.store import paths
from pybroker.store.commitlog import CommitLog
from pybroker.store.control_block import HA
from pybroker.store.epoch_file import EpochEntry, EpochFile, consistent_point
from pybroker.store.replica import ReplicaLog, ReplicaRefused, request_truncation
from pybroker.tasks import unless_set, within

log = logging.getLogger("pybroker.proc.autoswitch_slave")

__all__ = ["AutoSwitchSlaveClient", "EXIT_TRUNCATE"]

EXIT_TRUNCATE = 3                  # as the classic slave: a truncation waits for the next start
_BACKOFF_MIN_S = 0.5
_BACKOFF_MAX_S = 5.0
_ADDRESS_WAIT_S = 1.0


class _Truncate(Exception):
    def __init__(self, offset: int):
        super().__init__(offset)
        self.offset = offset


class AutoSwitchSlaveClient:
    """The controller-mode slave's replication loop (see the module docstring)."""

    def __init__(self, settings, broker_id: int, control, wakes, clock_ms=clock.now_ms,
                 access: HAAccess | None = None):
        self.access = access or HAAccess()      # TLS and the challenge, as a classic slave
        self.control = control
        self.wakes = wakes
        self.slots = wakes.by_slot()
        self.clock_ms = clock_ms
        self.broker_id = broker_id
        self.sync_from_last_file = settings.sync_from_last_file
        self.async_learner = settings.async_learner
        self.heartbeat_ms = settings.ha_send_heartbeat_interval
        self.housekeeping_ms = settings.ha_housekeeping_interval
        self.store_root = settings.store_path_root_dir
        self.address_path = paths.ha_master_address_path(self.store_root)
        self.epochs = EpochFile.load(settings.epoch_file_path)
        commitlog = CommitLog(settings.commitlog_dir, settings.mapped_file_size_commit_log)
        if not commitlog.load():
            raise ValueError(f"store {self.store_root}: a CommitLog file has the wrong size")
        commitlog.mapped_file_queue.forget_files_beyond(control.written_position)
        commitlog.set_wrote_and_flushed(control.written_position)
        self.replica = ReplicaLog(commitlog, settings.check_crc_on_recover)
        self.published = self.replica.record_end
        # The master's confirm offset from its last transfer header (-1: none yet).
        self.master_confirm = -1
        self.counters = control.worker(HA.slot)

    def close(self) -> None:
        self.replica.commitlog.shutdown(0)

    def read_master_address(self) -> str | None:
        try:
            with open(self.address_path, encoding="utf-8") as source:
                return source.read().strip() or None
        except FileNotFoundError:
            return None

    def publish(self) -> None:
        """``written_position`` (the end of the last whole record) and ``confirm_position``
        (Java's slave: the master's confirm offset, bounded by its own end)."""
        replica, control = self.replica, self.control
        mask = 0
        if replica.record_end != self.published:
            self.published = replica.record_end
            control.written_store_timestamp = replica.last_store_timestamp
            mask = control.publish("written_position", replica.record_end)
            self.counters.add(batches=1)
        confirm = min(self.master_confirm, replica.record_end)
        if self.master_confirm >= 0 and confirm != control.confirm_position:
            mask |= control.publish("confirm_position", confirm)
        signal_mask(mask, self.slots)

    async def run(self, address_changed: asyncio.Event) -> int:
        """Replicate until cancelled; returns EXIT_TRUNCATE when a truncation is pending."""
        backoff_s = _BACKOFF_MIN_S
        while True:
            address = self.read_master_address()
            address_changed.clear()
            if address is None:
                await wait_event(address_changed, _ADDRESS_WAIT_S)
                continue
            before = self.replica.end
            try:
                await self._session(address, address_changed)
            except _Truncate as truncate:
                log.warning("slave CommitLog ends at %d, the master agrees up to %d: truncating "
                            "to %d and restarting", self.replica.end, truncate.offset,
                            truncate.offset)
                request_truncation(self.store_root, truncate.offset)
                return EXIT_TRUNCATE
            except (OSError, TimeoutError, wire.HAProtocolError, ReplicaRefused,
                    HAAccessRefused) as error:
                log.warning("AutoSwitchHAClient: connection to master %s ended: %s (slave end "
                            "%d)", address, error or type(error).__name__, self.replica.end)
            finally:
                self.publish()
            if self.replica.end > before:
                backoff_s = _BACKOFF_MIN_S
            await wait_event(address_changed, backoff_s)
            backoff_s = min(backoff_s * 2, _BACKOFF_MAX_S)

    async def _session(self, address: str, address_changed: asyncio.Event) -> None:
        host, _, port = address.rpartition(":")
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                             socket.SOCK_STREAM)
        sock.setblocking(False)
        peer = sock
        try:
            await within(loop.sock_connect(sock, (host.strip("[]"), int(port))), 3.0)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # TLS and the shared-secret challenge, when configured (proc/ha_access.py).
            peer = await self.access.open_to_master(sock, host.strip("[]"))
            log.info("AutoSwitchHAClient connect to master %s (slave end %d, epochs %s)",
                     address, self.replica.end,
                     [(entry.epoch, entry.start_offset) for entry in self.epochs.entries])
            session = _Session(self, peer)
            if not await unless_set(session.receive(), address_changed):
                log.info("AutoSwitchHAClient: master address changed; reconnecting")
        finally:
            peer.close()            # a TLS socket holds the descriptor (wrap_socket detaches)
            sock.close()


class _Session:
    """One connection: handshake, then transfer."""

    def __init__(self, client: AutoSwitchSlaveClient, sock):
        self.client = client
        self.replica = client.replica
        self.sock = sock
        self.transferring = False
        self.received_epoch = -1
        self.reported = -1
        self.last_report_ms = 0

    def _write(self, data: bytes) -> bool:
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            return False
        if sent != len(data):
            raise ConnectionError(f"frame written in part ({sent} of {len(data)} bytes)")
        return True

    def report(self, force: bool = False) -> None:
        end = self.replica.end
        if self.transferring and (end != self.reported or force) and \
                self._write(wire.encode_report(end)):
            self.reported = end
            self.last_report_ms = self.client.clock_ms()

    async def receive(self) -> None:
        client, loop = self.client, asyncio.get_running_loop()
        self.buffer = bytearray(wire.SLAVE_READ_BUFFER_BYTES)
        self.view = memoryview(self.buffer)
        self.filled = 0
        self.last_read_ms = client.clock_ms()
        self.ended: asyncio.Future = loop.create_future()
        if not self._write(wire.encode_slave_handshake(client.broker_id,
                                                       client.sync_from_last_file,
                                                       client.async_learner)):
            raise ConnectionError("handshake not written")
        tick_s = min(client.heartbeat_ms, client.housekeeping_ms) / 1000
        loop.add_reader(self.sock, self._readable)
        try:
            while True:
                try:
                    await within(asyncio.shield(self.ended), tick_s)
                except TimeoutError:
                    pass
                if self.ended.done():
                    self.ended.result()
                    return
                now = client.clock_ms()
                if now - self.last_read_ms > client.housekeeping_ms:
                    raise TimeoutError(f"housekeeping: master silent for "
                                       f"{now - self.last_read_ms} ms")
                self.report(force=now - self.last_report_ms > client.heartbeat_ms)
        finally:
            loop.remove_reader(self.sock)
            if not self.ended.done():
                self.ended.cancel()
            self.view.release()

    def _readable(self) -> None:
        if self.ended.done():
            return
        try:
            count = self.sock.recv_into(self.view[self.filled:])
            if count == 0:
                raise ConnectionError("closed by the master")
            self.last_read_ms = self.client.clock_ms()
            self.filled += count
            consumed = self._frames(self.view, self.filled)
            self.buffer[:self.filled - consumed] = self.buffer[consumed:self.filled]
            self.filled -= consumed
            self.client.publish()
            self.report()
        except (BlockingIOError, InterruptedError):
            return
        except (OSError, wire.HAProtocolError, ReplicaRefused, _Truncate) as error:
            self.ended.set_exception(error)

    def _frames(self, view, filled: int) -> int:
        position = 0
        while True:
            header = wire.parse_master_header(view, position, filled - position)
            if header is None:
                return position
            state, body_bytes, offset, epoch, epoch_start, confirm, header_bytes = header
            if filled - position - header_bytes < body_bytes:
                if header_bytes + body_bytes > len(view):
                    raise wire.HAProtocolError(f"frame of {header_bytes + body_bytes} bytes")
                return position
            body = view[position + header_bytes:position + header_bytes + body_bytes]
            try:
                if state == wire.ConnectionState.HANDSHAKE:
                    self._handshake(offset, epoch, wire.parse_epoch_entries(body))
                else:
                    self._transfer(offset, epoch, epoch_start, body)
                    if confirm >= 0:
                        self.client.master_confirm = confirm
            finally:
                body.release()
            position += header_bytes + body_bytes

    def _handshake(self, master_end: int, master_epoch: int, entries) -> None:
        if self.transferring:
            raise wire.HAProtocolError("a second handshake from the master")
        client, replica = self.client, self.replica
        local = client.epochs.copy_entries()
        log.info("receive handshake, master end %d, master epochs %s, local end %d, local "
                 "epochs %s", master_end, entries, replica.end,
                 [(entry.epoch, entry.start_offset) for entry in local])
        if local:
            master = [EpochEntry(epoch, start) for epoch, start in entries]
            for previous, entry in zip(master, master[1:], strict=False):
                previous.end_offset = entry.start_offset
            point = consistent_point(local, replica.end, master, master_end)
            if point < 0:
                raise wire.HAProtocolError(f"no consistent point between the master's epochs "
                                           f"{entries} and the slave's")
            if point < replica.end:
                raise _Truncate(point)
        self.transferring = True
        self.report(force=True)

    def _transfer(self, offset: int, epoch: int, epoch_start: int, body) -> None:
        if not self.transferring:
            raise wire.HAProtocolError("a transfer before the handshake")
        end = self.replica.end
        if len(body) and end and offset != end:
            raise wire.HAProtocolError(f"master pushed offset {offset}, slave end {end}")
        if epoch != self.received_epoch and epoch >= 0:
            self.received_epoch = epoch
            self.client.epochs.append(epoch, epoch_start)
        if len(body):
            self.replica.append(offset, body)
