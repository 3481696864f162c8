# The data plane's shared parts: rings, control block, eventfds, and what each process attaches.
"""Wiring of one broker generation's data plane (docs/architecture/processes.md).

The supervisor creates everything before forking (regions under ``<store>/run``, eventfds
inherited by the children); slot ``i < N`` is remoting worker ``i``, slot ``N`` is the
supervisor's own ring (delay delivery, transaction checks), slot ``N + 1`` the timer worker's
(with ``timerWheelEnable``). Each process then uses its side:
the appender consumes every send ring and produces completions; a remoting worker (or the
supervisor) gets a :class:`Attachment` with a read-only store reader and a RingPutter.
"""
import asyncio
import logging
import os
import socket
from collections.abc import Callable, Sequence

from pybroker import clock
from pybroker.broker.send_fast import fast_send_settings
from pybroker.config import BrokerRole
from pybroker.proc import topic_deletion
from pybroker.proc.fast_failure import FastFailure
from pybroker.proc.appender import run_appender
from pybroker.proc.dispatcher import run_dispatcher
from pybroker.proc.flusher import flusher_owns_confirm, run_flusher
from pybroker.proc.ha import run_ha
from pybroker.proc.listeners import PortUse, check_ports_free
from pybroker.proc.timer import run_timer
from pybroker.proc.ring_format import PUT_STATUSES
from pybroker.proc.ring_putter import RingPutter
from pybroker.proc.shared import (RunDirectory, SharedRegion, create_byte_ring,
                                  create_completion_ring)
from pybroker._fast.send.round import CompletionRound, HeldRequests
from pybroker._fast.stats import StatsWriter
from pybroker.proc.wake import (AsyncWakeReader, DataPlaneWakes, PositionWatch, SleepFlag, WakeFd,
                                WhileWanted)
from pybroker.stats.region import StatsRegion
from pybroker.store import paths
from pybroker.store.control_block import (APPENDER, DISPATCHER, FLUSHER, BrokerState, ControlBlock,
                                         remoting_worker, timer_worker)
from pybroker.store.message_store import PutResult
from pybroker.store.pop_table import PopTable
from pybroker.store.queue_offsets import TABLE_BYTES as QUEUE_OFFSETS_BYTES
from pybroker.store.queue_offsets import QueueOffsetReader
from pybroker.store.queue_offsets import initialise as initialise_queue_offsets
from pybroker.store.read_only_store import (GRPC_READER_KEEP_BYTES, READER_KEEP_BYTES,
                                            TAIL_READER_KEEP_BYTES, MessageStoreReader)
from pybroker.store.status import PutStatus

log = logging.getLogger("pybroker.proc.dataplane")

# Stop order: remoting workers first (no new puts), then each data-plane worker after the one
# whose output it consumes. On a slave the ha worker is the writer (rank 1); on a master it
# only reads and stops with the remoting workers (rank 0).
_STOP_RANKS = {"appender": 1, "dispatcher": 2, "flusher": 3}
_SLAVE_STOP_RANKS = {"ha": 1, "dispatcher": 2, "flusher": 3}


def is_slave(config) -> bool:
    return config.store.broker_role == BrokerRole.SLAVE


class SlavePutter:
    """The putter of a slave's processes: Java's store refuses every put on a slave
    (SERVICE_NOT_AVAILABLE), and nothing may reach a ring nobody drains (no appender runs).
    It has no send fast path: every send goes to the handlers, which refuse it."""

    fast_enabled = False

    async def put(self, records, topic: str, queue_id: int, count: int, sys_flag: int,
                  wait_store: bool, *, message_ids: bool = True) -> PutResult:
        return PutResult(PutStatus.SERVICE_NOT_AVAILABLE)

    def sleep_flags(self) -> list:
        return []

    def on_wake(self) -> None:
        pass

    # Nothing for the completion round to drain or to watch (_fast/send/round.pyx).
    round_core = None

    @property
    def answers_pending(self) -> list:
        return []


def store_host_of(config) -> tuple[bytes, int]:
    """Broker IP bytes + listen port: the STOREHOSTADDRESS of records and offset message ids."""
    address = config.broker.broker_ip1
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return socket.inet_pton(family, address), config.broker.listen_port


def _fast_failure(config, control, slot: int, workers: int) -> FastFailure | None:
    """Client puts (remoting worker slots) fail fast; the supervisor's own puts (delay
    delivery, transaction checks) wait and retry by themselves."""
    if slot >= workers:
        return None
    broker = config.broker
    return FastFailure(control, slot, APPENDER.slot,
                       broker.wait_time_mills_in_send_queue
                       if broker.broker_fast_failure_enable else None,
                       config.store.os_page_cache_busy_time_out_mills, clock.now_ms)


class Attachment:
    """A process's view of the data plane: ``reader``, ``putter``, ``store_host``.
    ``keep_bytes``: the newest CommitLog bytes its reader keeps mapped, by how the process
    reads (store/read_only_store.py)."""

    def __init__(self, plane: "DataPlane", slot: int, fast_sends: bool = False,
                 keep_bytes: int = READER_KEEP_BYTES):
        config = plane.config
        self.plane = plane
        self.control = plane.control
        self.store_host = store_host_of(config)
        control = plane.control
        # Reads consult the live positions: a request handled before this loop has run the
        # dispatcher's wake-up must still see what its client was already acknowledged. The
        # supervisor's max offsets (metrics scrapes, brokerStatus, consume stats) come from the
        # dispatcher's queue offset table, not from the queues' files.
        # A remoting worker's POPs count what their queues have left from the same table
        # (MessageStoreReader.get_max_offsets_in_queues); its other reads stay with the
        # queues' files, which never trail its dispatched position.
        table = QueueOffsetReader(plane.queue_offsets.buffer) \
            if plane.queue_offsets is not None else None
        self.reader = MessageStoreReader(
            config.store, control.dispatched_position,
            positions=control.two_loader("dispatched_position", "written_position"),
            store_changes=control.two_loader("commitlog_min_offset", "topic_deletion_done"),
            queue_offsets=table if slot == plane.workers else None,
            rest_offsets=table if slot < plane.workers else None, keep_bytes=keep_bytes)
        self.slot = slot
        self.fast_sends = fast_sends
        self.putter: SlavePutter | RingPutter = self._putter(config)
        self.wake_fd = plane.wakes.workers[slot]
        # This process's section of the instrument region (remoting workers only).
        self.stats_writer: StatsWriter | None = None
        if plane.stats_region is not None and slot < plane.workers:
            self.stats_writer = plane.stats_region.writer(remoting_worker(slot).stats_section)
        # Read on every wake-up, in C by the completion round (the one copy of the position
        # last seen: CompletionRound.dispatched_seen).
        self._load_dispatched = plane.control.loader("dispatched_position")
        self._round: CompletionRound | None = None
        self._wake_reader: AsyncWakeReader | None = None
        self._on_wake: Callable[[bool], object] = lambda dispatched_moved: None
        # The held requests' watches (dispatched_position, extra_flags), armed while wanted.
        self._held_watches: WhileWanted | None = None
        # The shared POP state (store/pop_table.py), mapped by the supervisor for its life.
        self.pop_table = plane.pop_table
        self._worker_wakes = plane.wakes.workers

    def _putter(self, config) -> "SlavePutter | RingPutter":
        """The putter of this process in ``config``'s role."""
        if is_slave(config):
            return SlavePutter()
        plane, slot, control = self.plane, self.slot, self.control
        sync_master = config.store.broker_role == BrokerRole.SYNC_MASTER
        controller = config.broker.enable_controller_mode
        min_in_sync = config.store.min_in_sync_replicas
        # The fast path holds SYNC_FLUSH and SYNC_MASTER acks itself. It does not check
        # ACL signatures: with aclEnable every send goes through the request table's
        # guard (proc/remoting.py, docs/security.md); nor the in-sync count of
        # minInSyncReplicas (controller mode), which the handlers' putter checks.
        fast = self.fast_sends and not config.broker.acl_enable \
            and not (controller and min_in_sync > 1)
        return RingPutter(
            plane.rings[slot].ring, plane.completions[slot].ring, control,
            plane.wakes.appender, slot, self.store_host, config.store.sync_flush,
            config.store.sync_flush_timeout, sync_master,
            config.store.ha_max_gap_not_in_sync,
            fast_failure=_fast_failure(config, control, slot, plane.workers),
            fast_sends=fast_send_settings(config, PUT_STATUSES) if fast else None,
            controller_mode=controller, min_in_sync_replicas=min_in_sync,
            auto_message_version=config.store.auto_message_version_on_topic_len,
            slave_timeout_ms=config.store.slave_timeout)

    def promote(self, config) -> "RingPutter":
        """A slave's attachment becomes a master's (controller mode's in-process promotion,
        docs/architecture/controller.md): ``config`` is the master's; the send ring of this
        slot, unused while a slave, now takes this process's puts. Returns the new putter."""
        assert isinstance(self.putter, SlavePutter) and not is_slave(config)
        self.plane.config = config
        putter = self._putter(config)
        assert isinstance(putter, RingPutter)
        self.putter = putter
        if self._round is not None:
            self._round.core = putter.round_core
            self._round.answers = putter.answers_pending
        reader = self._wake_reader
        if reader is not None:
            reader.flags[:0] = putter.sleep_flags()
            reader.kick()
        return putter

    def wake_workers(self, mask: int) -> None:
        """Signal the eventfds of the worker slots in ``mask`` (held POPs to re-check)."""
        for slot, wake_fd in enumerate(self._worker_wakes):
            if mask >> slot & 1:
                wake_fd.signal()

    def start(self, loop: asyncio.AbstractEventLoop, on_wake: Callable[[bool], object],
              wants_dispatched: HeldRequests | None = None,
              extra_flags: Sequence[SleepFlag] = ()) -> None:
        """Serve wake-ups in ``loop``: completions, flushed and dispatched positions.
        ``on_wake(dispatched_moved)`` runs after the putter's work on every wake-up that has
        Python work (the completion round, pybroker/_fast/send/round.pyx: while
        ``wants_dispatched()``, every one). The dispatcher wakes this process only while
        ``wants_dispatched()`` (held long polls): reads consult the live positions, so
        nothing else needs its wake-up. ``extra_flags``: further sleep flags of this process
        (the POP table's held-POP wake-up), armed only while ``wants_dispatched()`` when that
        is given (they ask their own narrower question then)."""
        self._on_wake = on_wake
        putter = self.putter
        self._round = CompletionRound(putter.round_core, self._load_dispatched,
                                      self._load_dispatched(), wants_dispatched,
                                      putter.answers_pending, self._wake)
        wake_round = self._round
        flags = [*self.putter.sleep_flags()]
        if wants_dispatched is not None:
            # The waiter bit on dispatched_position, set only while wanted (held long polls):
            # the dispatcher signals only the slots whose bit it takes.
            dispatched = PositionWatch(self.control, "dispatched_position", self.slot,
                                       lambda: wake_round.dispatched_seen + 1)
            self._held_watches = WhileWanted([dispatched, *extra_flags], wants_dispatched)
            flags.append(self._held_watches)
        else:
            flags.extend(extra_flags)
        reader = self._wake_reader = AsyncWakeReader(loop, self.wake_fd, flags, wake_round)
        reader.start()

    def watch_dispatched(self) -> None:
        """Something now waits for dispatched_position (a pull was parked): set the waiter
        bit and re-check at once (the set-fence-re-check of pybroker/proc/wake.py)."""
        watches, reader = self._held_watches, self._wake_reader
        if watches is not None and reader is not None and not watches.armed \
                and watches.set_sleeping():
            reader.kick()

    def _wake(self, outcomes: list | None, outputs: list | None, moved: bool) -> None:
        """A wake-up's Python work (the completion round found some): the putter's whole
        wake-up (``outcomes`` None), or the answers of what the round drained, then
        ``on_wake(moved)``. The reader is not advanced here: its reads catch up from the
        live positions (MessageStoreReader._catch_up)."""
        putter = self.putter
        if outcomes is None:
            putter.on_wake()
        else:
            assert isinstance(putter, RingPutter)     # it has a round_core: a master's
            putter.answer(outcomes, outputs)
        self._on_wake(moved)

    def close(self) -> None:
        if self._wake_reader is not None:
            self._wake_reader.stop()
            self._wake_reader = None
        self.reader.close()


class DataPlane:
    """Everything shared by one generation's processes. Create with :meth:`create`."""

    def __init__(self, config, run_directory, control, rings, completions, wakes, workers,
                 stats_region: StatsRegion | None = None, ha_listener=None,
                 timer_slot: int | None = None,
                 queue_offsets: SharedRegion | None = None):
        # The supervisor's instrument region (pybroker/stats/region.py), None in tests.
        self.stats_region = stats_region
        self.config = config
        self.run_directory = run_directory
        self.control = control
        self.rings = rings
        self.completions = completions
        self.wakes = wakes
        self.workers = workers
        self.ha_listener = ha_listener
        # Set by the supervisor before forking (broker/pop/, store/pop_table.py).
        self.pop_table: PopTable | None = None
        # The timer worker's ring slot (after the supervisor's), None without the timer.
        self.timer_slot = timer_slot
        # Every queue's max offset, published by the dispatcher (store/queue_offsets.py).
        self.queue_offsets = queue_offsets

    @classmethod
    def create(cls, config, run_dir: str, workers: int, valid_end: int,
               stats_region: StatsRegion | None = None,
               ha_listener: socket.socket | None = None) -> "DataPlane":
        """Create the regions and eventfds for ``workers`` remoting workers (+ the supervisor's
        slot) with every position at the recovered CommitLog end ``valid_end``; workers
        write their figures into ``stats_region``; a master's ha worker serves slaves on
        ``ha_listener`` (the supervisor's, see :func:`bind_ha_listener`)."""
        store = config.store
        run_directory = RunDirectory(run_dir, create=True)
        control = ControlBlock(paths.control_block_path(store.store_path_root_dir), create=True)
        for field in ("written_position", "flushed_position", "dispatched_position"):
            control.publish(field, valid_end)
        if config.broker.enable_controller_mode or store.sync_flush:
            # Recovery dispatched everything to valid_end (as Java's); the ha worker (controller
            # mode) or else the flusher (SYNC_FLUSH, flusher_owns_confirm) moves it.
            control.publish("confirm_position", valid_end)
        timer_slot = timer_worker(workers).slot if store.timer_wheel_enable else None
        slots = workers + 1 + (timer_slot is not None)
        grpc_slots = range(config.remoting.remoting_workers, workers)
        slot_count = config.remoting.completion_ring_slots
        # The rings are memfds, never written back to the store's disk (proc/shared.py).
        rings = [create_byte_ring(run_directory.region_path(f"send-{slot}"),
                                  config.derived.grpc_send_ring_bytes if slot in grpc_slots
                                  else config.remoting.send_ring_size_bytes, in_memory=True)
                 for slot in range(slots)]
        completions = [create_completion_ring(run_directory.region_path(f"done-{slot}"),
                                              slot_count, in_memory=True)
                       for slot in range(slots)]
        wakes = DataPlaneWakes(WakeFd(), WakeFd(), WakeFd(), [WakeFd() for _ in range(slots)],
                               WakeFd())
        queue_offsets = SharedRegion.create(run_directory.region_path("queue-offsets"),
                                            QUEUE_OFFSETS_BYTES, populate=False)
        initialise_queue_offsets(queue_offsets.buffer)
        control.broker_state = BrokerState.RUNNING
        return cls(config, run_directory, control, rings, completions, wakes, workers,
                   stats_region, ha_listener, timer_slot, queue_offsets)

    def worker_mains(self):
        """(name, main) of the data-plane processes: appender (master) or ha (slave) as the
        CommitLog writer, dispatcher, flusher, and on a master the ha worker serving slaves."""
        config, store, control, wakes = self.config, self.config.store, self.control, self.wakes
        rings = [region.ring for region in self.rings]
        completions = [region.ring for region in self.completions]
        region = self.stats_region
        offsets = self.queue_offsets.buffer if self.queue_offsets is not None else None

        def writer(slot: int):
            # Called in the forked child: its own section of the inherited map.
            return region.writer(slot) if region is not None else None
        ha = ("ha", lambda: _exit_status(run_ha(config, control, wakes, self.ha_listener)))
        if is_slave(config):
            commitlog_writer = ha
        else:
            commitlog_writer = ("appender", lambda: _exit_status(run_appender(
                store, rings, completions, control, wakes, stats=writer(APPENDER.stats_section))))
        mains = [commitlog_writer,
                 ("dispatcher", lambda: _exit_status(run_dispatcher(
                     store, control, wakes, stats=writer(DISPATCHER.stats_section),
                     queue_offsets=offsets))),
                 ("flusher", lambda: _exit_status(run_flusher(
                     store, control, wakes, stats=writer(FLUSHER.stats_section),
                     owns_confirm=flusher_owns_confirm(
                         store.sync_flush, config.broker.enable_controller_mode))))]
        timer_slot = self.timer_slot
        if timer_slot is not None:
            section = timer_worker(self.workers).stats_section
            mains.append(("timer", lambda: _exit_status(run_timer(self, timer_slot,
                                                                  writer(section)))))
        return mains if is_slave(config) else mains + [ha]

    def remoting_attachment(self, slot: int) -> Attachment:
        """Remoting worker ``slot``'s attachment (call in the worker process); its putter has
        the send fast path."""
        return Attachment(self, slot, fast_sends=True)

    def grpc_attachment(self, slot: int, fast_sends: bool = False) -> Attachment:
        """A gRPC worker's attachment (its slot follows the remoting workers'); its putter
        has the send fast path when ``fast_sends`` (the C++ front's sends,
        grpc_service/front_send.py), else sends go through the handler path. Its reader
        keeps a few seconds of a gRPC worker's reads mapped."""
        return Attachment(self, slot, fast_sends=fast_sends, keep_bytes=GRPC_READER_KEEP_BYTES)

    def timer_attachment(self) -> Attachment:
        """The timer worker's attachment (its own ring; call in the timer worker): its reader
        keeps only the page in use mapped (parked records are read once more, when due)."""
        assert self.timer_slot is not None, "no timer worker without timerWheelEnable"
        return Attachment(self, self.timer_slot, keep_bytes=TAIL_READER_KEEP_BYTES)

    def supervisor_attachment(self) -> Attachment:
        """The supervisor's attachment (the last slot): its reader keeps only the page in use
        mapped (the revive reads new records at the end and un-acked messages once)."""
        return Attachment(self, self.workers, keep_bytes=TAIL_READER_KEEP_BYTES)

    def topic_deleter(self) -> topic_deletion.TopicDeletionRequests:
        """The supervisor's way to delete topics' consume queues in the data plane
        (pybroker/proc/topic_deletion.py; one per generation)."""
        store_root = self.config.store.store_path_root_dir
        return topic_deletion.TopicDeletionRequests(topic_deletion.requests_path(store_root),
                                                    self.control, self.wakes.appender)

    def stop_rank(self, name: str) -> int:
        """0 = stopped first with the stop signal; 1 = the CommitLog writer (stopped by
        :meth:`request_stop`); 2, 3 = after it, in data-flow order."""
        return (_SLAVE_STOP_RANKS if is_slave(self.config) else _STOP_RANKS).get(name, 0)

    @property
    def writer_name(self) -> str:
        """The process that writes the CommitLog in this role."""
        return "ha" if is_slave(self.config) else "appender"

    def request_stop(self) -> None:
        """Ask the data-plane workers to finish: they drain, dispatch and flush, then exit."""
        self.control.broker_state = BrokerState.STOPPING
        for wake_fd in (self.wakes.appender, self.wakes.dispatcher, self.wakes.flusher,
                        self.wakes.ha):
            wake_fd.signal()

    def close(self) -> None:
        """Unmap and unlink every region; close the eventfds (supervisor, after the workers
        have exited)."""
        for region in self.rings + self.completions:
            region.close()
        if self.queue_offsets is not None:
            self.queue_offsets.close()
        for wake_fd in (self.wakes.appender, self.wakes.dispatcher, self.wakes.flusher,
                        self.wakes.ha, *self.wakes.workers):
            wake_fd.close()
        self.control.close()
        store_root = self.config.store.store_path_root_dir
        for path in (paths.control_block_path(store_root),
                     topic_deletion.requests_path(store_root),
                     paths.ha_master_address_path(store_root)):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self.run_directory.close()


def _exit_status(result) -> int:
    return 0 if result is None else int(result)


def bind_ha_listener(config) -> socket.socket | None:
    """A master's HA port (haListenPort on haListenAddress, default bindAddress), or None on
    a slave. The supervisor binds it once, before any worker exists, like the remoting ports
    (pybroker/proc/listeners.py): a busy port stops the start (PortInUseError), and the ha
    workers of every generation inherit it, so a restart never closes the port."""
    if is_slave(config) and not config.broker.enable_controller_mode:
        return None      # (in controller mode any broker may become master)
    host = config.store.ha_listen_address or config.remoting.bind_address
    port = config.store.ha_listen_port
    check_ports_free(host, [PortUse(port, "haListenPort", "haListenPort")])
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                             socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(config.remoting.server_socket_backlog)
    except BaseException:
        listener.close()
        raise
    return listener
