# The supervisor: recovery, forking and watching the workers, metadata and periodic services.
"""Broker supervisor (docs/architecture/processes.md).

One *generation* = recover the store in this process, hand it over, fork the data plane
(appender, dispatcher, flusher) and the remoting workers, then serve the metadata service and
the periodic services until SIGTERM/SIGINT or until a worker dies. A dead worker ends the
generation: every other worker is stopped and the next generation starts with abnormal recovery
(the abort file is still there), as after a ``kill -9`` of the whole broker. Too many deaths in
a short time stop the broker with a non-zero exit.

Stops: SIGTERM or SIGINT to the supervisor alone or to its whole process group (workers ignore
both, see :mod:`pybroker.proc.children`) end the generation in order and remove the abort
file. A signal that arrives while a generation is being recovered or stopped is remembered
and honoured as soon as the event loop runs.
"""
import asyncio
import contextlib
import dataclasses
import errno
import logging
import os
import signal
import socket
import time
from collections.abc import Callable

from pybroker import clock
from pybroker import config as config_module
from pybroker.tasks import Rounds, start_task
from pybroker.acl.plain_config import AclConfigError
from pybroker.acl.validator import AccessValidator
from pybroker.broker.context import MetadataContext
from pybroker.broker.metadata import MetadataState
from pybroker.broker.pop.owner import PopOwner
from pybroker.broker.registration import NamesrvRegistration
from pybroker.broker.replicas_manager import ReplicasManager, Role
from pybroker.broker.schedule import ScheduleService
from pybroker.broker.slave_sync import SlaveLink
from pybroker.broker.transaction_check import TransactionCheckService
from pybroker.errors import ConfigError, StartupError, StoreCorruptError
from pybroker.proc import dataplane, preflight
from pybroker.proc.children import STOP_SIGNAL, fork_child, thaw
from pybroker.proc.dataplane import bind_ha_listener, is_slave
from pybroker.proc.listeners import Listeners, accepting, reserve_port
from pybroker.proc.metadata_service import MetadataService
from pybroker.proc.remoting import run_remoting_worker
from pybroker.proc.scrubber import ScrubberThread
from pybroker.proc.service_socket import ServiceSocket
from pybroker.proc.watchdog import Watchdog
from pybroker.grpc_service.tls import tls_problem
from pybroker.remoting.tls import TlsServer, outgoing_tls
from pybroker.stats.half_messages import HalfMessages
from pybroker.stats.recorder import Recorder
from pybroker.stats.region import StatsRegion, StatsWriter
from pybroker.stats.service import StatsService
from pybroker.store import cleanup_requests, lock_file, paths, replica
from pybroker.store.control_block import (ControlBlock, grpc_worker, stats_section_count,
                                          supervisor_worker)
from pybroker.store.config_docs import DelayOffsetDocument
from pybroker.store.message_store import MessageStore

log = logging.getLogger("pybroker.proc.supervisor")

GENERATION_DEATHS_MAX = 5          # deaths within GENERATION_DEATHS_WINDOW_S stop the broker
GENERATION_DEATHS_WINDOW_S = 60.0
WORKER_STOP_TIMEOUT_S = 15.0
OFFSET_PERSIST_INTERVAL_S = 5.0
CHANNEL_SCAN_INTERVAL_S = 10.0
WORKERS_READY_TIMEOUT_S = 30.0
STATS_SAMPLE_INTERVAL_S = 1.0
WATCHDOG_INTERVAL_S = 1.0
# The processes a controller-mode slave runs in its role and a master forks afresh on an
# in-process promotion (with the gRPC workers); the others keep running.
_SLAVE_SHAPED = frozenset({"ha", "timer"})


class Supervisor:
    """Runs one broker until stopped; :meth:`run` returns the process exit status."""

    def __init__(self, config, on_serving: Callable[[], None] | None = None):
        self.config = config
        # Called once, when the first generation serves (standalone prints its banner).
        self.on_serving = on_serving
        self.store_root = config.store.store_path_root_dir
        self.metadata: MetadataState | None = None
        # The delay service of the running generation (its offsets answer GET_ALL_DELAY_OFFSET).
        self.schedule: ScheduleService | None = None
        self.children: dict[int, str] = {}
        self.deaths: list[float] = []
        self.data_plane_stopped_cleanly = False
        self.stats_region: StatsRegion | None = None
        self.stats: StatsService | None = None
        self.stats_writer: StatsWriter | None = None
        self.recorder: Recorder | None = None        # the supervisor's own section
        self.half_messages: HalfMessages | None = None   # rocketmq_half_messages, persisted
        self.metrics_collector = None                     # the Prometheus endpoint's
        self.control: ControlBlock | None = None      # the running generation's
        self.stop_requested = False
        self.listeners: Listeners | None = None
        self.ha_listener: socket.socket | None = None    # a master's haListenPort
        self.grpc_port_holder: socket.socket | None = None   # grpcServerPort, held
        # Controller mode: the role of each generation (pybroker/broker/replicas_manager.py).
        self.replicas: ReplicasManager | None = None
        self.generation_config = config                  # self.config as this role runs it
        self.pop: PopOwner | None = None                 # the shared POP state (broker/pop/)

    def _delay_offsets(self) -> DelayOffsetDocument | None:
        return None if self.schedule is None else self.schedule.document

    # --- generations ----------------------------------------------------------------------------
    def _remember_stop(self, signal_number, frame) -> None:
        log.info("signal %d received: the broker stops once this step is done", signal_number)
        self.stop_requested = True

    def _catch_stop_signals(self) -> None:
        """Outside the event loop a stop signal only sets a flag (asyncio's handlers replace
        these while a generation serves, and reset them to the default when it ends)."""
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, self._remember_stop)

    def run(self) -> int:
        self._catch_stop_signals()
        os.makedirs(self.store_root, exist_ok=True)
        lock = lock_file.StoreLock(self.store_root)
        lock.acquire()
        try:
            self._bind_ports()
            self.metadata = MetadataState(self.config, delay_offsets=self._delay_offsets)
            self._create_stats()
            if self.config.broker.enable_controller_mode:
                self.replicas = ReplicasManager(self.config)
            self.pop = PopOwner(self.config, self.metadata, lambda: self.config)
            self._write_running_settings()
            while True:
                outcome = self._generation(lock)
                if outcome == "role-change" and not self.stop_requested:
                    if self.data_plane_stopped_cleanly:
                        # Stopped in order: the next recovery may take the normal path.
                        lock_file.delete_abort_file(self.store_root)
                    continue
                if outcome == "stopped" and self.data_plane_stopped_cleanly:
                    lock_file.delete_abort_file(self.store_root)
                    log.info("broker %s stopped cleanly", self.config.broker.broker_name)
                    return 0
                if outcome == "stopped":
                    # The abort file stays: the next start verifies the tail (abnormal).
                    log.error("broker %s stopped, but a data-plane worker did not finish "
                              "cleanly", self.config.broker.broker_name)
                    return 1
                now = time.monotonic()
                self.deaths = [t for t in self.deaths if now - t < GENERATION_DEATHS_WINDOW_S]
                self.deaths.append(now)
                if self.stop_requested:
                    log.warning("a stop was requested while the generation ended: stopping; "
                                "the next start recovers abnormally")
                    return 1
                if len(self.deaths) > GENERATION_DEATHS_MAX:
                    log.error("%d worker deaths within %.0f s: giving up", len(self.deaths),
                              GENERATION_DEATHS_WINDOW_S)
                    return 1
                log.warning("restarting the data plane with abnormal recovery")
        finally:
            if self.replicas is not None:
                self.replicas.close()
            if self.pop is not None:
                # After an unclean end the file stays: the next start recovers from it.
                self.pop.close(clean=self.data_plane_stopped_cleanly)
            if self.metadata is not None:
                self.metadata.shutdown()
            if self.stats_writer is not None:
                self.stats_writer.close()
            if self.stats_region is not None:
                self._persist_half_messages()
                for path in (paths.running_settings_path(self.store_root),
                             cleanup_requests.requests_path(self.store_root)):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                self.stats_region.close()
                _remove_if_empty(paths.run_dir(self.store_root))
            if self.listeners is not None:
                self.listeners.close()
            if self.ha_listener is not None:
                self.ha_listener.close()
            if self.grpc_port_holder is not None:
                self.grpc_port_holder.close()
            lock.release()

    def _bind_ports(self) -> None:
        """The remoting, HA and gRPC ports, bound once for every generation (preflight names
        each use in its error)."""
        remoting = self.config.remoting
        self.listeners = Listeners.bind(remoting.bind_address,
                                        preflight.broker_port_uses(self.config),
                                        remoting.remoting_workers,
                                        remoting.server_socket_backlog)
        self.ha_listener = bind_ha_listener(self.config)
        if self.config.grpc.grpc_workers:
            self.grpc_port_holder = reserve_port(remoting.bind_address,
                                                 preflight.grpc_port_use(self.config))

    def _create_stats(self) -> None:
        """The instrument region lives as long as this supervisor: workers of every
        generation write into the same sections, so counters and windows continue."""
        os.makedirs(paths.run_dir(self.store_root), mode=0o700, exist_ok=True)
        self.stats_region = StatsRegion.create(
            paths.stats_region_path(self.store_root),
            stats_section_count(_client_workers(self.config)), clock.now_ms(),
            enabled=self.config.broker.stats_instruments_enable)
        self.stats = StatsService(self.stats_region, self.config.broker.broker_cluster_name,
                                  control=lambda: self.control)
        # The supervisor's own section: the scrubber thread's figures, and what its services
        # count through the Recorder (transactions, DLQ sends).
        self.stats_writer = self.stats_region.writer(
            supervisor_worker(_client_workers(self.config)).stats_section)
        self.recorder = Recorder(self.stats_writer)
        self.half_messages = HalfMessages(paths.config_path(
            self.store_root, paths.TRANSACTION_METRICS_CONFIG))
        if not self.stats_region.enabled:
            log.warning("statsInstrumentsEnable=false: no statistics are recorded; brokerStatus "
                        "TPS read NaN and its counters are left out, statsAll is refused, "
                        "GET_CONSUME_STATS consumeTps reads 0.0, the metrics endpoint leaves "
                        "the traffic and latency families out, pybroker prof refuses to attach")

    def _persist_half_messages(self) -> None:
        """config/transactionMetrics, as Java's TransactionMetricsFlushService writes it."""
        if self.half_messages is not None and self.stats_region is not None \
                and self.stats_region.enabled:
            self.half_messages.persist(self.stats_region.snapshot())

    def _write_running_settings(self) -> None:
        """<store>/run/broker.conf: the settings in effect, for tools that attach by store
        directory (pybroker prof); replaced whole, so a reader never sees half a file."""
        path = paths.running_settings_path(self.store_root)
        with open(path + ".tmp", "w", encoding="iso-8859-1") as out:
            out.write(config_module.settings_text(self.config))
        os.replace(path + ".tmp", path)

    def _recover(self, lock) -> int:
        """Recover the store in this process; returns the valid end of the CommitLog. A
        slave's pending truncation (store/replica.py) is applied first."""
        store_config = self.config.store
        replica.apply_pending_truncation(
            self.store_root, store_config.commitlog_dir, store_config.mapped_file_size_commit_log,
            store_config.epoch_file_path if self.config.broker.enable_controller_mode else None)
        store = MessageStore(self.config.store, lock=lock)
        if not store.load():
            raise RuntimeError(f"store {self.store_root} could not be loaded")
        store.start()
        valid_end = store.max_physical_offset
        store.hand_over()
        log.info("store %s recovered (%s), CommitLog valid to %d", self.store_root,
                 "abnormal" if store.last_recovery_abnormal else "normal", valid_end)
        return valid_end

    def _generation(self, lock) -> str:
        valid_end = self._recover(lock)
        config = self.config
        if self.replicas is not None:
            self.replicas.prepare_generation(valid_end)
            config = self.replicas.generation_config(config)
        self.generation_config = config
        remoting_workers = config.remoting.remoting_workers
        workers = _client_workers(config)
        plane = dataplane.DataPlane.create(config, paths.run_dir(self.store_root), workers,
                                           valid_end, self.stats_region, self.ha_listener)
        self.control = plane.control
        pop = self.pop
        assert pop is not None          # made by run() before the first generation
        pop.new_generation()
        plane.pop_table = pop.table
        service_socket = ServiceSocket(paths.run_dir(self.store_root))
        scrubber: ScrubberThread | None = None
        try:
            for name, main in plane.worker_mains():
                self.children[fork_child(name, main)] = name
            socket_path = service_socket.address
            if config.grpc.grpc_workers:
                # Imported here, once: protobuf's runtime stays out of other brokers.
                import pybroker.proc.grpc_worker  # noqa: F401
            listeners = self.listeners
            assert listeners is not None       # bound by run() before the first generation
            for index in range(remoting_workers):
                def remoting_main(i: int = index) -> int:
                    return run_remoting_worker(i, config, plane.remoting_attachment(i),
                                               socket_path, listeners.for_worker(i))
                pid = fork_child(f"remoting-{index}", remoting_main)
                self.children[pid] = f"remoting-{index}"
            for index in range(config.grpc.grpc_workers):
                worker = grpc_worker(index, remoting_workers)
                self.children[fork_child(worker.name, _grpc_main(
                    index, worker.slot, config, plane, socket_path))] = worker.name
            # After the forks: a child must not inherit a running thread.
            scrubber = ScrubberThread(self.config.store, plane.control, self.stats_writer)
            self._running()[1].scrubber_status = scrubber.status
            scrubber.start()
            try:
                outcome = asyncio.run(self._serve(plane, service_socket.listener, workers))
            finally:
                self._catch_stop_signals()
        finally:
            if scrubber is not None:
                scrubber.stop()
                self._running()[1].scrubber_status = None
            self.data_plane_stopped_cleanly = self._stop_children(plane)
            thaw()                       # the children that shared the frozen pages are gone
            service_socket.close()       # the next generation binds it afresh
            plane.close()
        return outcome

    # --- the generation's event loop ------------------------------------------------------------
    def _running(self) -> tuple[MetadataState, StatsService, PopOwner]:
        """The metadata, statistics and POP services, which live from run() to its end."""
        assert self.metadata is not None and self.stats is not None and self.pop is not None, \
            "not running"
        return self.metadata, self.stats, self.pop

    def _outcome(self, loop) -> asyncio.Future:
        """The generation's outcome: "stopped" on SIGTERM/SIGINT (or a stop asked before);
        :meth:`_reap` resolves it when a child dies."""
        outcome = loop.create_future()
        for signal_number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signal_number, _resolve, outcome, "stopped")
        if self.stop_requested:
            _resolve(outcome, "stopped")
        loop.add_signal_handler(signal.SIGCHLD, self._reap, outcome)
        return outcome

    async def _serve(self, plane, service_socket, workers: int) -> str:
        metadata, stats, pop = self._running()
        loop = asyncio.get_running_loop()
        outcome = self._outcome(loop)
        attachment = plane.supervisor_attachment()
        attachment.start(loop, lambda moved: None)
        config, replicas = self.generation_config, self.replicas
        ctx = MetadataContext(config, attachment.reader, attachment.putter, metadata,
                              attachment.store_host, stats_service=stats,
                              topic_deleter=plane.topic_deleter(), replicas=replicas,
                              pop_directory=pop.directory, topic_routes=pop.routes)
        slave = _slave_link(config, metadata, plane, replicas)
        registration = NamesrvRegistration(config, lambda: metadata.topics.document,
                                           slave.on_registered if slave else None)
        registers = replicas is None or replicas.registers_with_namesrv
        service = MetadataService(ctx, service_socket.getsockname(),
                                  registration.topics_changed, pop.directory,
                                  registration.register_all if registers else None)
        serving = _Serving(plane, outcome, attachment, ctx, service, registration,
                           service_socket.getsockname(), slave)

        def settings_changed(config) -> None:
            # UPDATE_BROKER_CONFIG: the next generation forks with it, registration (the
            # permission) and the supervisor's services read it from here (registration
            # in the role of the generation: controller mode's brokerId and role).
            self.config = config
            registration.config = replicas.generation_config(config) \
                if replicas is not None else config
            if self.metrics_collector is not None:
                self.metrics_collector.config = config
            self._write_running_settings()
        metadata.settings_listeners[:] = [settings_changed]
        if slave is not None:
            slave.on_changed = service.push_if_changed    # synced documents reach the workers
        await service.start_on(service_socket)
        metrics = await self._start_metrics(attachment, ctx)
        self._start_services(serving)
        tasks = serving.tasks
        try:
            await _workers_ready(config, lambda: len(service.workers) >= workers, outcome)
            if replicas is None or replicas.registers_with_namesrv:
                await registration.register_all()
                tasks.append(_start_service(registration.run(), "NameServer registration",
                                            outcome))
            broker = config.broker
            log.info("The broker[%s, %s] boot success. serializeType=JSON and name server is %s",
                     broker.broker_name, config.derived.broker_addr,
                     broker.namesrv_addr or "(none)")
            if self.on_serving is not None:
                self.on_serving()
                self.on_serving = None
            result = await outcome
            if replicas is not None:
                replicas.freeze()          # the workers stop next: their slaves go with them
            if result == "stopped" and (replicas is None or replicas.registers_with_namesrv):
                await registration.unregister_all()
                await self._stop_remoting_workers(plane)
            return result
        finally:
            for task in tasks:
                task.cancel()
            service.close()
            registration.close()
            if metrics is not None:
                metrics.close()
            if serving.slave is not None:
                serving.slave.close()
            attachment.close()

    def _start_services(self, serving: "_Serving") -> None:
        """The generation's services, each a task whose end by an error ends the
        generation."""
        _, _, pop = self._running()
        outcome, plane, slave = serving.outcome, serving.plane, serving.slave
        serving.tasks += [
            _start_service(self._periodic(serving.service),
                           "offset persisting and channel expiry", outcome),
            _start_service(self._sample_stats(), "statistics sampling", outcome),
            _start_service(self._watch(plane), "the hang watchdog", outcome),
            _start_service(pop.harvest_forever(), "POP offset harvest", outcome)]
        if slave is not None:
            serving.slave_task = _start_service(
                slave.run(serving.registration.topics_changed), "slave sync", outcome)
            serving.tasks.append(serving.slave_task)
        elif not is_slave(self.generation_config):
            self._start_master_services(serving)
        self._start_controller_role(serving)

    def _start_master_services(self, serving: "_Serving") -> None:
        """A slave runs no delay delivery, transaction checks or POP revive (Java: master
        only)."""
        metadata, _, pop = self._running()
        attachment, outcome = serving.attachment, serving.outcome
        checks = TransactionCheckService(attachment.reader, attachment.putter, metadata,
                                         self.config.broker, self.recorder)
        serving.tasks += [
            _start_service(self._delay_delivery(attachment), "delay delivery", outcome),
            _start_service(checks.run(lambda: self.config.broker), "transaction checks",
                           outcome),
            # A retry topic the revive creates reaches the workers' POPs at once.
            _start_service(pop.revive_forever(attachment, serving.service.push_if_changed),
                           "POP revive", outcome)]

    def _start_controller_role(self, serving: "_Serving") -> None:
        replicas = self.replicas
        if replicas is None:
            return
        plane = serving.plane
        serving.replicas_task = _start_service(
            replicas.run(plane.control, plane.wakes.ha, lambda: self._role_decided(serving)),
            "controller role", serving.outcome)
        serving.tasks.append(serving.replicas_task)

    # --- controller mode: a new role ------------------------------------------------------------
    def _role_decided(self, serving: "_Serving") -> None:
        """The controller named a new role for this broker. A slave elected master switches
        in-process (:meth:`_promote`); every other change ends the generation and the next
        one forks in the new role (docs/architecture/controller.md says why)."""
        if serving.promotion is not None:
            return                 # the promotion looks at the decision again when done
        if self._promotes_in_place():
            serving.promotion = _start_service(self._promote(serving), "in-process promotion",
                                               serving.outcome)
            serving.tasks.append(serving.promotion)
        else:
            _resolve(serving.outcome, "role-change")

    def _promotes_in_place(self) -> bool:
        """A slave elected master whose SyncStateSet is itself alone (the controller's
        election always names a set of one: nothing a send waits for can be missed while
        the master's ha worker starts)."""
        replicas = self.replicas
        assert replicas is not None
        return (not self.stop_requested and replicas.running.role is Role.SLAVE
                and replicas.decided.role is Role.MASTER
                and replicas.sync.required <= {replicas.broker_id} and not replicas.joining)

    async def _promote(self, serving: "_Serving") -> None:
        """Java's changeToMaster in-process: the appender, dispatcher, flusher and remoting
        workers keep running; what only a slave runs stops (the ha worker replicating from
        the old master, the slave link, the timer worker and gRPC workers forked in the
        slave's role), the new epoch starts at the end the slave wrote, the master's ha
        worker, appender and timer are forked, then the remoting workers and this
        process's own putter take writes, and the master's services start. An error
        ends the generation (the next one recovers abnormally and forks in the new role)."""
        replicas, plane, control = self.replicas, serving.plane, serving.plane.control
        assert replicas is not None
        begun = time.monotonic()
        others = await self._stop_slave_side(serving)
        # It published the end of its last whole record on stopping: the new epoch's start.
        written = control.written_position
        replicas.prepare_generation(written)
        config = replicas.generation_config(self.config)
        self.generation_config = plane.config = config
        replicas.publish_sync_state()
        mains = dict(plane.worker_mains())
        # The master's ha worker publishes what sends wait for (nothing: a set of one) and
        # lifts the confirm offset, so the dispatcher reaches the written end; the appender
        # loads the queues' next offsets only then (proc/appender.py _await_dispatch; Java's
        # changeToMaster waits for the dispatch likewise). Sends put meanwhile wait in the
        # rings.
        self._fork_in_loop("ha", mains["ha"])
        self._fork_in_loop("appender", mains["appender"])
        putter = serving.attachment.promote(config)
        serving.ctx.config, serving.ctx.putter = config, putter
        serving.service.announce_role(config.store.broker_role.name, config.broker.broker_id)
        for pid, name in others.items():
            if not await _await_exit_async(pid, name):
                raise RuntimeError(f"the slave's {name} worker did not stop cleanly")
        for index in range(config.grpc.grpc_workers):
            worker = grpc_worker(index, config.remoting.remoting_workers)
            self._fork_in_loop(worker.name, _grpc_main(index, worker.slot, config, plane,
                                                       serving.socket_path))
        serving.registration.config = config
        self._start_master_services(serving)
        if serving.replicas_task is not None:
            serving.replicas_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving.replicas_task
            serving.tasks.remove(serving.replicas_task)
        self._start_controller_role(serving)
        await serving.registration.register_all()
        # The timer worker last: its recovery is no part of the way to the first SEND_OK.
        if "timer" in mains:
            self._fork_in_loop("timer", mains["timer"])
        log.info("promoted to master in-process in %.3f s (epoch %d from %d); the data plane "
                 "kept running", time.monotonic() - begun, replicas.running.master_epoch,
                 written)
        serving.promotion = None
        if replicas.decided != replicas.running:
            self._role_decided(serving)        # decided again meanwhile

    async def _stop_slave_side(self, serving: "_Serving") -> dict[int, str]:
        """The slave link goes and the slave-shaped workers are told to stop; returns those
        still to be waited for (all but the ha worker, the slave's CommitLog writer, whose
        exit is awaited here)."""
        if serving.slave_task is not None:
            serving.slave_task.cancel()
        if serving.slave is not None:
            serving.slave.close()
            serving.slave = None
        serving.registration.on_registered = None
        shaped = {pid: name for pid, name in self.children.items()
                  if name in _SLAVE_SHAPED or name.startswith("grpc-")}
        for pid in shaped:
            del self.children[pid]             # their exit is no death for _reap
            _signal_stop(pid)
        for pid, name in list(shaped.items()):
            if name == "ha":
                del shaped[pid]
                if not await _await_exit_async(pid, name):
                    raise RuntimeError("the slave's ha worker did not stop cleanly")
        return shaped

    def _fork_in_loop(self, name: str, main: Callable[[], int]) -> None:
        """Fork a worker while this event loop runs: the child drops the loop's signal
        wake-up and SIGCHLD handler before its main runs."""
        def child_main() -> int:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            return main()
        self.children[fork_child(name, child_main)] = name

    async def _stop_remoting_workers(self, plane) -> None:
        """On a stop, the remoting workers go first and while the metadata service still
        serves: their last forwards are answered and they close their links themselves, so
        no worker sees the service vanish (a lost link is a WARNING, and a clean stop logs
        none). _stop_children stops whoever is left, the data plane in order."""
        remoting = {pid: name for pid, name in self.children.items()
                    if plane.stop_rank(name) == 0}
        for pid in remoting:
            del self.children[pid]            # their exit is no death for _reap
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, STOP_SIGNAL)
        deadline = time.monotonic() + WORKER_STOP_TIMEOUT_S
        while remoting and time.monotonic() < deadline:
            for pid, name in list(remoting.items()):
                try:
                    done, status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    done, status = pid, 0
                if done:
                    del remoting[pid]
                    if status != 0:
                        log.warning("worker %s exited: %s", name, _describe_status(status))
            await asyncio.sleep(0.02)
        for pid, name in remoting.items():
            log.error("worker %s did not stop within %.0f s: killing it", name,
                      WORKER_STOP_TIMEOUT_S)
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)

    async def _watch(self, plane) -> None:
        """The hang watchdog (pybroker/proc/watchdog.py), once a second."""
        watchdog = Watchdog(plane, self.children, self.config.broker.worker_hang_timeout_millis,
                            self.config.store.flush_interval_commit_log)
        rounds = Rounds("the hang watchdog", logger=log)
        while True:
            await asyncio.sleep(WATCHDOG_INTERVAL_S)
            with rounds:
                watchdog.check(time.monotonic())

    async def _periodic(self, service: MetadataService) -> None:
        metadata, _, _ = self._running()
        last_scan = time.monotonic()
        rounds = Rounds("offset persisting and channel expiry", logger=log)
        while True:
            await asyncio.sleep(OFFSET_PERSIST_INTERVAL_S)
            with rounds:
                if self.pop is not None:
                    self.pop.persist()
                metadata.persist_if_dirty()
                self._persist_half_messages()
                if time.monotonic() - last_scan >= CHANNEL_SCAN_INTERVAL_S:
                    last_scan = time.monotonic()
                    metadata.scan_expired()
                    service.push_if_changed()

    async def _start_metrics(self, attachment, ctx):
        """The Prometheus endpoint (metricsExporterType=PROM), served in this loop."""
        broker = self.config.broker
        if broker.metrics_exporter_type != "PROM":
            return None
        # Imported only when enabled: prometheus_client is needed by brokers that export.
        from pybroker.stats.prometheus import BrokerCollector, MetricsServer
        from pybroker.broker.runtime_info import runtime_info
        collector = BrokerCollector(self.config, self.stats, self.metadata, attachment.reader,
                                    lambda: dict(self.children), self.half_messages,
                                    lambda: runtime_info(ctx), lambda: self.pop)
        self.metrics_collector = collector
        server = MetricsServer(collector, broker.metrics_prom_exporter_host or broker.broker_ip1,
                               broker.metrics_prom_exporter_port)
        await server.start()
        return server

    async def _sample_stats(self) -> None:
        """The statistics sampler: once a second (Java StoreStatsService's rate)."""
        _, stats, _ = self._running()
        rounds = Rounds("statistics sampling", logger=log)
        while True:
            with rounds:
                stats.tick()
            await asyncio.sleep(STATS_SAMPLE_INTERVAL_S)

    async def _delay_delivery(self, attachment) -> None:
        """Delay delivery (broker/schedule.py) through the supervisor's own ring; its offsets
        answer GET_ALL_DELAY_OFFSET while it runs."""
        root = self.config.store.store_path_root_dir
        schedule = ScheduleService(attachment.reader, attachment.putter,
                                   self.config.derived.delay_levels_ms,
                                   paths.config_path(root, paths.DELAY_OFFSET_CONFIG))
        self.schedule = schedule
        try:
            await schedule.run()
        finally:
            self.schedule = None

    def _reap(self, outcome: asyncio.Future) -> None:
        # Only our workers: in standalone mode the NameServer is a sibling child.
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if not done:
                continue
            name = self.children.pop(pid)
            log.error("worker %s (pid %d) died: %s", name, pid, _describe_status(status))
            _resolve(outcome, "worker-died")

    def _stop_children(self, plane) -> bool:
        """Stop the remoting workers first (no new requests), then let the data plane finish:
        the appender drains the rings and exits on STOPPING; only then is the dispatcher told
        to stop (it dispatches everything written), and after it the flusher (it makes all of
        it durable and writes the checkpoint). True when all three were alive and exited 0."""
        ranked = sorted(self.children.items(), key=lambda item: plane.stop_rank(item[1]))
        finished = []
        # The first rank (remoting workers, a master's ha reader) depends on nobody: all are
        # told at once and then waited for (a data-plane restart, e.g. a role change, is
        # that much shorter).
        for pid, name in ranked:
            if plane.stop_rank(name) == 0:
                _signal_stop(pid)
        for pid, name in ranked:
            if plane.stop_rank(name) == 0:
                _await_exit(pid, name)
            elif plane.stop_rank(name) == plane.stop_rank(plane.writer_name):
                plane.request_stop()
                clean = _await_exit(pid, name)
            else:
                clean = _terminate(pid, name)
            if plane.stop_rank(name) > 0:
                finished.append(clean)
        self.children.clear()
        return len(finished) == 3 and all(finished)


@dataclasses.dataclass
class _Serving:
    """What one generation's event loop serves; an in-process promotion changes it."""
    plane: dataplane.DataPlane
    outcome: asyncio.Future
    attachment: dataplane.Attachment
    ctx: MetadataContext
    service: MetadataService
    registration: NamesrvRegistration
    socket_path: str
    slave: SlaveLink | None = None
    tasks: list[asyncio.Task] = dataclasses.field(default_factory=list)
    slave_task: asyncio.Task | None = None
    replicas_task: asyncio.Task | None = None
    promotion: asyncio.Task | None = None


def _grpc_main(index: int, slot: int, config, plane, socket_path: str) -> Callable[[], int]:
    def main() -> int:
        from pybroker.proc.grpc_worker import run_grpc_worker
        return run_grpc_worker(index, slot, config,
                               plane.grpc_attachment(slot, config.grpc.grpc_native_front),
                               socket_path)
    return main


async def _await_exit_async(pid: int, name: str) -> bool:
    """_await_exit without blocking the event loop."""
    deadline = time.monotonic() + WORKER_STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        exited = _exited(pid, name)
        if exited is not None:
            return exited
        await asyncio.sleep(0.002)
    return _kill_late(pid, name)


def _client_workers(config) -> int:
    """Workers with a send ring of their own: remoting, then gRPC (control_block.grpc_worker)."""
    return config.remoting.remoting_workers + config.grpc.grpc_workers


def _slave_link(config, metadata, plane, replicas) -> SlaveLink | None:
    """A slave's link to its master (its HA address, metadata sync); in controller mode only
    to the master the controller named, and none while fenced."""
    if not is_slave(config):
        return None
    master_line = plane.control.timer_master()

    def timer_checkpoint(values) -> None:
        # The master's timer checkpoint, for the slave's timer worker to follow.
        master_line.write(values.last_read_time_ms, values.master_timer_queue_offset,
                          values.state_version, values.version_timestamp,
                          values.version_counter)
    if replicas is None:
        return SlaveLink(config, metadata, plane.wakes.ha, timer_checkpoint=timer_checkpoint)
    role = replicas.running
    if role.role is not Role.SLAVE:
        return None
    return SlaveLink(config, metadata, plane.wakes.ha, expected_master=role.master_address,
                     timer_checkpoint=timer_checkpoint)


def _signal_stop(pid: int) -> bool:
    """Ask a worker to stop (STOP_SIGNAL); False when it is gone already."""
    try:
        os.kill(pid, STOP_SIGNAL)
    except ProcessLookupError:
        return False
    return True


def _terminate(pid: int, name: str) -> bool:
    """Ask a worker to stop (STOP_SIGNAL) and wait for it (see _await_exit)."""
    if not _signal_stop(pid):
        return False
    return _await_exit(pid, name)


def _await_exit(pid: int, name: str) -> bool:
    """Wait for a worker to exit; SIGKILL it after WORKER_STOP_TIMEOUT_S. True when it exited
    by itself with status 0."""
    deadline = time.monotonic() + WORKER_STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        exited = _exited(pid, name)
        if exited is not None:
            return exited
        time.sleep(0.002)  # tidy: allow (supervisor shutdown, not a data-plane loop)
    return _kill_late(pid, name)


def _exited(pid: int, name: str) -> bool | None:
    """None while the worker runs; else whether it exited by itself with status 0 (a worker
    already reaped counts as not clean)."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    if not done:
        return None
    if status != 0:
        log.warning("worker %s exited: %s", name, _describe_status(status))
    return status == 0


def _kill_late(pid: int, name: str) -> bool:
    """A worker past WORKER_STOP_TIMEOUT_S: SIGKILL and reap it; False (not a clean exit)."""
    log.error("worker %s did not stop within %.0f s: killing it", name, WORKER_STOP_TIMEOUT_S)
    with contextlib.suppress(ProcessLookupError, ChildProcessError):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return False


def _describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def _start_service(coroutine, name: str, outcome: asyncio.Future) -> asyncio.Task:
    """A service of the generation: when it ends by an error (logged with its cause by its
    task, pybroker/tasks.py) the generation ends as after a worker's death, and the next one
    recovers abnormally."""
    def failed(error: BaseException) -> None:
        log.error("supervisor service %s failed: ending the generation", name)
        _resolve(outcome, "service-failed")
    return start_task(coroutine, name, failed, log)


def _resolve(future: asyncio.Future, value: str) -> None:
    if not future.done():
        future.set_result(value)


async def _workers_ready(config, connected, outcome: asyncio.Future) -> None:
    """Every worker connected to the metadata service (``connected()``), and, with gRPC
    workers, a connection to grpcServerPort accepted: a gRPC worker binds the port after its
    metadata link is up, and "boot success" must not come before the port serves."""
    await _wait_until(connected, WORKERS_READY_TIMEOUT_S, outcome,
                      "remoting workers did not connect to the metadata service")
    if config.grpc.grpc_workers:
        await _wait_until(lambda: accepting(config.remoting.bind_address,
                                            config.grpc.grpc_server_port),
                          WORKERS_READY_TIMEOUT_S, outcome,
                          "no gRPC worker listens on grpcServerPort")


async def _wait_until(predicate, timeout_s: float, outcome: asyncio.Future,
                      what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if outcome.done():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.02)


def run_broker(config, on_serving: Callable[[], None] | None = None) -> int:
    """``pybroker broker``: run the supervisor in this process; returns the exit status.
    ``on_serving()`` runs once, when the broker first serves and has registered."""
    problem = security_problem(config)
    if problem is not None:
        log.error("cannot start: %s", problem)
        return 1
    try:
        preflight.check_broker_start(config)
        return Supervisor(config, on_serving).run()
    except (lock_file.StoreLockedError, StartupError, StoreCorruptError) as error:
        # A refusal with its reason, not a traceback: the operator acts on the message.
        log.error("cannot start: %s", error)
        return 1
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        log.error("cannot start: the disk is full: %s", error)
        return 1


def security_problem(config) -> str | None:
    """Why the ACL file or the TLS files cannot be used, or None. Checked before anything
    starts: each remoting worker loads them again and must not fail there."""
    try:
        if config.broker.acl_enable:
            validator = AccessValidator(config.derived.acl_file_path)
            log.info("ACL enabled: %s, %d accounts", validator.path,
                     len(validator.table.accounts))
        grpc_tls = tls_problem(config)
        if grpc_tls is not None:
            return grpc_tls
        tls = TlsServer.from_config(config.tls)
        log.info("remoting ports: tls.server.mode=%s, %s", tls.mode,
                 "TLS and plain TCP by first byte" if tls.sniffs and tls.mode == "permissive"
                 else "TLS only" if tls.sniffs else "plain TCP only")
        outgoing_tls(config)
    except (OSError, AclConfigError, ConfigError) as error:
        return str(error)
    return None


def _remove_if_empty(directory: str) -> None:
    # <store>/run holds only what a running broker shares; the stats region goes last, so an
    # empty run/ is removed after it (a clean stop leaves no runtime state behind).
    try:
        os.rmdir(directory)
    except OSError as error:
        if error.errno not in (errno.ENOENT, errno.ENOTEMPTY):
            log.warning("could not remove %s: %s", directory, error)
