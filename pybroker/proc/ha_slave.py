# The slave side of the ha worker: pulls the master's CommitLog and is the slave's only writer.
"""Slave HA client (design.md §2: on a slave the ha worker takes the appender's role).

It connects to the master HA address the supervisor writes to ``run/ha-master`` (learned from
the NameServer's REGISTER_BROKER answer, or ``haMasterAddress``), speaks Java's classic HA
protocol (:mod:`pybroker.protocol.ha`) and appends what it receives through
:class:`pybroker.store.replica.ReplicaLog` (contiguous only, records checked before they
count). Per read from the socket it publishes ``written_position`` once (the end of the last
whole record, so the dispatcher and flusher never see half a record) with the waiter bits of
the dispatcher and flusher, and reports its end to the master once (Java reports after every
unit; one report per read carries the same information with fewer writes). It also reports
every ``haSendHeartbeatInterval`` and drops a master it has not heard from for
``haHousekeepingInterval``; it reconnects with back-off (0.5 s doubling to Java's 5 s).

**Divergence.** Each connection starts by *verifying*: the first report asks for the bytes
from a record boundary about ``_VERIFY_WINDOW_BYTES`` before this slave's end, and the bytes
that come back are compared with the slave's own. Where they first differ (or, when the
master's log is a strict prefix of the slave's, where the master's ends: two heartbeats at the
same offset with no data between) the slave's tail is not the master's: the worker logs both
offsets, records the truncation (:func:`pybroker.store.replica.request_truncation`) and exits
with :data:`EXIT_TRUNCATE`; the supervisor restarts the data plane, which applies it before
recovery. When the master has nothing from the verification point, or the bytes differ
already in its first record (the logs may part before the window: bytes written by two
masters at one offset never match for a whole record), the window grows (x4) on the next
connection, down to the slave's oldest file. Classic Java (4.9.x and 5.x
DefaultHAClient) has no such step and leaves a diverged slave appending to a mixed log; the
truncation follows what Java's controller-mode slave does (truncate to the consistent point,
then transfer).
"""
import asyncio
import logging
import socket

from pybroker import clock
from pybroker.proc.ha_access import HAAccess, HAAccessRefused
from pybroker.proc.wake import signal_mask, wait_event
from pybroker.protocol import ha as ha_protocol
from pybroker.store import paths
from pybroker.store.control_block import HA
from pybroker.store.commitlog import CommitLog
from pybroker.store.replica import ReplicaLog, ReplicaRefused, request_truncation
from pybroker.tasks import unless_set, within

log = logging.getLogger("pybroker.proc.ha_slave")

__all__ = ["HASlaveClient", "EXIT_TRUNCATE"]

EXIT_TRUNCATE = 3                  # the worker's exit status when a truncation is pending
_VERIFY_WINDOW_BYTES = 1 << 20
_VERIFY_WINDOW_GROWTH = 4
_BACKOFF_MIN_S = 0.5
_BACKOFF_MAX_S = 5.0               # Java's HAClient retries every 5 s
_ADDRESS_WAIT_S = 1.0
_HEARTBEATS_AT_END = 2             # heartbeats at one offset that prove the master's end


class _Diverged(Exception):
    """The slave's tail is not the master's from ``offset`` on."""

    def __init__(self, offset: int, reason: str):
        super().__init__(reason)
        self.offset = offset


class _Widen(Exception):
    """The verification point is not known to be common: the master sent nothing from it, or
    its bytes differ already in the first record. Widen the window and reconnect."""


class HASlaveClient:
    """The slave's replication loop (see the module docstring)."""

    def __init__(self, settings, control, wakes, clock_ms=clock.now_ms,
                 access: HAAccess | None = None):
        self.control = control
        self.access = access or HAAccess()     # plain TCP, no challenge (Java's HAClient)
        self.wakes = wakes
        self.slots = wakes.by_slot()
        self.clock_ms = clock_ms
        self.heartbeat_ms = settings.ha_send_heartbeat_interval
        self.housekeeping_ms = settings.ha_housekeeping_interval
        self.connect_timeout_s = 3.0
        self.store_root = settings.store_path_root_dir
        self.address_path = paths.ha_master_address_path(self.store_root)
        commitlog = CommitLog(settings.commitlog_dir,
                              settings.mapped_file_size_commit_log)
        if not commitlog.load():
            raise ValueError(f"store {self.store_root}: a CommitLog file has the wrong size")
        # As the appender does: ready files the allocator left beyond the end (a kill -9)
        # must not become the target of the next replicated bytes.
        commitlog.mapped_file_queue.forget_files_beyond(control.written_position)
        commitlog.set_wrote_and_flushed(control.written_position)
        self.replica = ReplicaLog(commitlog, settings.check_crc_on_recover)
        self.published = self.replica.record_end
        self.window_bytes = _VERIFY_WINDOW_BYTES
        self.master_address: str | None = None
        self.counters = control.worker(HA.slot)

    def close(self) -> None:
        self.replica.commitlog.shutdown(0)

    def read_master_address(self) -> str | None:
        try:
            with open(self.address_path, encoding="utf-8") as source:
                text = source.read().strip()
        except FileNotFoundError:
            return None
        return text or None

    def publish(self) -> None:
        """Publish the end of the last whole record (timestamp first, as the appender)."""
        replica = self.replica
        if replica.record_end != self.published:
            self.published = replica.record_end
            self.control.written_store_timestamp = replica.last_store_timestamp
            signal_mask(self.control.publish("written_position", replica.record_end),
                        self.slots)
            self.counters.add(batches=1)

    async def run(self, address_changed: asyncio.Event) -> int:
        """Replicate until cancelled; returns EXIT_TRUNCATE when a truncation is pending."""
        backoff_s = _BACKOFF_MIN_S
        while True:
            address = self.read_master_address()
            address_changed.clear()
            if address is None:
                await wait_event(address_changed, _ADDRESS_WAIT_S)
                continue
            if address != self.master_address:
                log.info("update master address, OLD: %s NEW: %s", self.master_address, address)
                self.master_address = address
            before = self.replica.end
            try:
                await self._connect_and_replicate(address, address_changed)
            except _Diverged as diverged:
                log.warning("slave CommitLog diverges from the master's at physical offset %d "
                            "(slave end %d, master %s): %s; truncating the slave to %d and "
                            "restarting", diverged.offset, self.replica.end, address, diverged,
                            diverged.offset)
                request_truncation(self.store_root, diverged.offset)
                return EXIT_TRUNCATE
            except _Widen:
                log.info("HAClient: no common point in the last %d bytes of the slave; "
                         "verifying a wider window next", self.window_bytes)
                self._widen(address)
            except (OSError, TimeoutError, ha_protocol.HAProtocolError, ReplicaRefused,
                    HAAccessRefused) as error:
                log.warning("HAClient: connection to master %s ended: %s (slave end %d)",
                            address, error or type(error).__name__, self.replica.end)
            finally:
                self.publish()
            if self.replica.end > before:
                backoff_s = _BACKOFF_MIN_S
            await wait_event(address_changed, backoff_s)
            backoff_s = min(backoff_s * 2, _BACKOFF_MAX_S)

    def _widen(self, address: str) -> None:
        floor = max(self.replica.min_offset, 0)
        if self.replica.end - self.window_bytes <= floor:
            log.error("master %s has no data at or after the slave's oldest offset %d (slave "
                      "end %d): no common point; the slave keeps its log and retries",
                      address, floor, self.replica.end)
        self.window_bytes *= _VERIFY_WINDOW_GROWTH

    async def _connect_and_replicate(self, address: str, address_changed: asyncio.Event) -> None:
        host, _, port = address.rpartition(":")
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                             socket.SOCK_STREAM)
        sock.setblocking(False)
        peer = sock
        try:
            await within(loop.sock_connect(sock, (host.strip("[]"), int(port))),
                         self.connect_timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # TLS and the shared-secret challenge, when configured (proc/ha_access.py).
            peer = await self.access.open_to_master(sock, host.strip("[]"))
            log.info("HAClient connect to master %s (slave end %d)", address, self.replica.end)
            session = _Session(self, peer)
            if not await unless_set(session.receive(), address_changed):
                log.info("HAClient: master address changed; reconnecting")
        finally:
            peer.close()
            sock.close()


class _Session:
    """One connection: verify, then append (see the module docstring)."""

    def __init__(self, client: HASlaveClient, sock: socket.socket):
        self.client = client
        self.replica = client.replica
        self.sock = sock
        replica = self.replica
        end = replica.end
        if end > 0 and replica.min_offset >= 0:
            self.verify_from = replica.record_boundary_at_or_below(
                max(end - client.window_bytes, replica.min_offset))
            if self.verify_from == 0:
                # A report of 0 asks a fresh slave's start (the master's last file): verify
                # from the second record instead.
                self.verify_from = min(replica.record_end_from(0), end)
        else:
            self.verify_from = end
        self.verified = self.verify_from
        self.verifying = self.verify_from < end
        # A mismatch inside the first record says nothing about where the logs part: the
        # divergence may lie before the window.
        self.first_record_end = replica.record_end_from(self.verify_from)
        self.heartbeat_at = -1
        self.heartbeats = 0
        self.reported = -1
        self.last_report_ms = 0

    def report_offset(self) -> int:
        return self.verified if self.verifying else self.replica.end

    def report(self, force: bool = False) -> None:
        """Send the report when it moved (or ``force``); a full socket leaves it to the next
        try (the master only needs the latest)."""
        offset = self.report_offset()
        if offset == self.reported and not force:
            return
        try:
            sent = self.sock.send(ha_protocol.encode_report(offset))
        except (BlockingIOError, InterruptedError):
            return
        if sent != ha_protocol.REPORT_BYTES:
            raise ConnectionError(f"report of {offset} written in part ({sent} bytes)")
        self.reported = offset
        self.last_report_ms = self.client.clock_ms()

    async def receive(self) -> None:
        """Read with a reader callback (one recv_into per readiness, no future per read) until
        the master closes, goes silent, or sends what the slave refuses (raised here)."""
        client, loop = self.client, asyncio.get_running_loop()
        self.buffer = bytearray(ha_protocol.SLAVE_READ_BUFFER_BYTES)
        self.view = memoryview(self.buffer)
        self.filled = 0
        self.last_read_ms = client.clock_ms()
        self.ended: asyncio.Future = loop.create_future()
        self.report(force=True)
        if self.verifying:
            log.info("HAClient: verifying the slave's tail from %d (slave end %d)",
                     self.verify_from, self.replica.end)
        tick_s = min(client.heartbeat_ms, client.housekeeping_ms) / 1000
        loop.add_reader(self.sock, self._readable)
        try:
            while True:
                try:
                    await within(asyncio.shield(self.ended), tick_s)
                except TimeoutError:
                    pass
                if self.ended.done():
                    self.ended.result()          # raises why the session ended
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
                if self.verifying and self.verified == self.verify_from:
                    raise _Widen()     # e.g. our offset was beyond the master's
                raise ConnectionError("closed by the master")
            self.last_read_ms = self.client.clock_ms()
            self.filled += count
            consumed = self._units(self.view, self.filled)
            buffer, filled = self.buffer, self.filled
            buffer[:filled - consumed] = buffer[consumed:filled]
            self.filled = filled - consumed
            self.client.publish()
            self.report()
        except (BlockingIOError, InterruptedError):
            return
        except (OSError, ha_protocol.HAProtocolError, ReplicaRefused, _Diverged,
                _Widen) as error:
            self.ended.set_exception(error)

    def _units(self, view, filled: int) -> int:
        """Handle every whole transfer unit in ``view[:filled]``; returns bytes consumed."""
        position = 0
        header_bytes = ha_protocol.TRANSFER_HEADER_BYTES
        while filled - position >= header_bytes:
            offset, size = ha_protocol.parse_transfer_header(view, position)
            if filled - position - header_bytes < size:
                break
            body = view[position + header_bytes:position + header_bytes + size]
            try:
                if self.verifying:
                    self._verify(offset, body)
                else:
                    self._append(offset, body)
            finally:
                body.release()
            position += header_bytes + size
        return position

    def _append(self, offset: int, body) -> None:
        replica = self.replica
        end = replica.end
        if (end or replica.min_offset >= 0) and offset != end:
            raise ReplicaRefused(f"master pushed offset not equal the max phy offset in slave, "
                                 f"SLAVE: {end} MASTER: {offset}")
        if len(body):
            replica.append(offset, body)

    def _verify(self, offset: int, body) -> None:
        if offset != self.verified:
            raise ha_protocol.HAProtocolError(f"master sent offset {offset} while the slave "
                                              f"verifies at {self.verified}")
        end = self.replica.end
        if not len(body):
            self.heartbeats = self.heartbeats + 1 if self.heartbeat_at == offset else 1
            self.heartbeat_at = offset
            if self.heartbeats >= _HEARTBEATS_AT_END:
                if offset < self.first_record_end:
                    raise _Widen()
                raise _Diverged(offset, f"the master's log ends at {offset}")
            return
        self.heartbeats = 0
        compared = min(len(body), end - offset)
        mismatch = self.replica.first_mismatch(offset, body[:compared])
        if mismatch is not None and mismatch < self.first_record_end:
            raise _Widen()
        if mismatch is not None:
            cut = self.replica.record_boundary_at_or_below(mismatch)
            raise _Diverged(cut, f"first different byte at {mismatch}")
        self.verified = offset + compared
        if self.verified == end:
            self.verifying = False
            self.client.window_bytes = _VERIFY_WINDOW_BYTES
            log.info("HAClient: slave tail [%d, %d) matches the master; transferring",
                     self.verify_from, end)
            if compared < len(body):
                self._append(end, body[compared:])
