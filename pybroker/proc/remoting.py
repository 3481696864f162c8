# A remoting worker process: client connections, data requests, forwarding of metadata requests.
"""Remoting worker (docs/architecture/processes.md).

Serves its own SO_REUSEPORT listening sockets of listenPort and the fast port (listenPort - 2),
bound by the supervisor (pybroker/proc/listeners.py), alongside its sibling workers. DATA
requests run here against the read-only store reader and the send ring; METADATA requests are
forwarded to the metadata service over a unix socket with the client's channel attached, and
the answer is relayed under the client's opaque. The service pushes metadata snapshots (applied
to the local replica) and commands for this worker's clients.
"""
import asyncio
import logging

import orjson

from pybroker._fast.send.round import HeldRequests
from pybroker._fast.selector import new_event_loop as fast_event_loop
from pybroker.acl.validator import AccessValidator
from pybroker.broker import (end_transaction, filter_check, pull, query, runtime_settings,
                             timer_requests,
                             send, send_back, send_fast, slave_role)
from pybroker.broker.channel import Channel
from pybroker.broker.context import BrokerContext, Handler
from pybroker.broker.long_poll import LongPollService
from pybroker.broker.metadata import MetadataReplica
from pybroker.broker.pop import ack as pop_ack
from pybroker.broker.pop import change_invisible, notification, peek, pop_message
from pybroker.broker.pop.long_poll import PopLongPoll
from pybroker.broker.pop.state import PopState, PopStateError, SlotCache
from pybroker.broker.replicas_manager import with_role
from pybroker.broker.routing import DATA_CODES, METADATA_CODES
from pybroker.broker.timer_slots import slot_counts_of
from pybroker.config import BrokerRole, with_broker_settings
from pybroker.proc.ack_port import FastAckPort
from pybroker.proc.children import STOP_SIGNAL, accept_stop
from pybroker.proc.commit_forward import CommitForwards
from pybroker.proc.metadata_link import LinkBusy, MetadataLink
from pybroker.proc.metadata_service import EXT_CHANNEL_ID
from pybroker.proc.pull_port import FastPullPort, PullTaker
from pybroker.proc.ring_putter import RingPutter
from pybroker.proc.wake import PopTableWatch
from pybroker.protocol import constants
from pybroker.protocol.codes import InternalCode, RequestCode, ResponseCode
from pybroker.protocol.command import (RemotingCommand, create_request, create_response,
                                       encode)
from pybroker.remoting.connection import RemotingConnection
from pybroker.remoting.frame_taker import FrameTaker, TakerChain
from pybroker.remoting.limits import ConnectionLimits
from pybroker.remoting.server import Handler as ConnectionHandler
from pybroker.remoting.server import RemotingServer, RequestTable, start_server
from pybroker.remoting.tls import TlsServer
from pybroker.stats.recorder import Recorder
from pybroker.store.config_docs import TopicConfig
from pybroker.tasks import Rounds, start_task, unless_set

log = logging.getLogger("pybroker.proc.remoting")

DATA_HANDLERS: dict[int, Handler] = {**send.HANDLERS, **pull.HANDLERS, **query.HANDLERS,
                                     **send_back.HANDLERS, **end_transaction.HANDLERS,
                                     **filter_check.HANDLERS, **pop_message.HANDLERS,
                                     **pop_ack.HANDLERS, **change_invisible.HANDLERS,
                                     **peek.HANDLERS, **notification.HANDLERS,
                                     **timer_requests.HANDLERS}
assert set(DATA_HANDLERS) == set(DATA_CODES), set(DATA_HANDLERS) ^ set(DATA_CODES)

# Request families reported as Java's thread-pool queues (requests waiting in this worker).
_FAMILIES: dict[int, str] = {RequestCode.SEND_MESSAGE: "send", RequestCode.SEND_MESSAGE_V2: "send",
             RequestCode.SEND_BATCH_MESSAGE: "send", RequestCode.CONSUMER_SEND_MSG_BACK: "send",
             RequestCode.PULL_MESSAGE: "pull", RequestCode.LITE_PULL_MESSAGE: "pull",
             RequestCode.QUERY_MESSAGE: "query",
             RequestCode.VIEW_MESSAGE_BY_ID: "query", RequestCode.END_TRANSACTION: "transaction",
             RequestCode.POP_MESSAGE: "pull", RequestCode.PEEK_MESSAGE: "pull",
             RequestCode.NOTIFICATION: "pull", RequestCode.POLLING_INFO: "pull",
             RequestCode.ACK_MESSAGE: "ack",
             RequestCode.BATCH_ACK_MESSAGE: "ack", RequestCode.CHANGE_MESSAGE_INVISIBLETIME: "ack"}
# How often held pulls are re-checked even without a dispatcher wake-up (Java: 5 s).
HELD_PULL_SWEEP_S = 5.0
HEARTBEAT_INTERVAL_S = 1.0



def _channel_of(connection: RemotingConnection) -> Channel:
    """The Channel a client connection carries (set when it was accepted)."""
    channel = connection.attachment
    if not isinstance(channel, Channel):
        raise TypeError(f"connection {connection.connection_id} carries no Channel")
    return channel

class RemotingWorker:
    """One worker's asyncio side. ``data_plane`` attaches the store reader and the putter
    (see :mod:`pybroker.proc.dataplane`); ``metadata_socket`` is the service's unix path."""

    def __init__(self, worker_id: int, config, data_plane, metadata_socket: str,
                 listen_sockets: dict):
        self.worker_id = worker_id
        self.config = config
        self.data_plane = data_plane
        self.metadata_socket = metadata_socket
        self.listen_sockets = listen_sockets
        self.connections: dict[str, RemotingConnection] = {}
        self.servers: list[RemotingServer] = []
        client_table = RequestTable()
        client_table.register(InternalCode.METADATA_SNAPSHOT, self._apply_snapshot)
        client_table.register(InternalCode.SEND_TO_CHANNEL, self._send_to_channel)
        client_table.register(InternalCode.ROLE_CHANGED, self._role_changed)
        self.exit_status = 0
        self.metadata_client = MetadataLink(worker_id, metadata_socket, client_table,
                                            self._apply_hello, self._link_lost)
        # Offsets committed by pulls (piggy-backed), forwarded per interval: the last one of
        # each queue (Java keeps only that one too).
        self.commit_forwards = CommitForwards(self.metadata_client.invoke_oneway)
        self.replica = MetadataReplica(self._create_topic, self._commit_offset,
                                       self._create_send_back_topic)
        self.long_poll = LongPollService(data_plane.reader.get_max_offset_in_queue,
                                         on_park=data_plane.watch_dispatched)
        self.stats = Recorder(data_plane.stats_writer)
        self.pop_polls: list[PopLongPoll] = []      # held POPs and NOTIFICATIONs
        self.pop = self._pop_state(config, data_plane)
        self.holds_requests = HeldRequests([self.long_poll, *self.pop_polls])  # asked in C
        self.pop_watch = PopTableWatch(self.pop.table, worker_id, HeldRequests(self.pop_polls)) \
            if self.pop is not None else None
        # ACL 1.0: every request of every client connection is checked here, before it runs
        # locally or is forwarded to the metadata service (docs/security.md); the handlers
        # that find records by offset or key check the records' own topics with it.
        self.acl = AccessValidator(config.derived.acl_file_path) \
            if config.broker.acl_enable else None
        timer_slot_counts = slot_counts_of(config.store)
        self.ctx = BrokerContext(config, data_plane.reader, data_plane.putter, self.replica,
                                 data_plane.store_host, long_poll=self.long_poll,
                                 stats=self.stats, read_check=self.acl, pop=self.pop,
                                 timer_slot_num=timer_slot_counts)
        self.tls = TlsServer.from_config(config.tls)
        # The send fast path, when this worker's putter has one (not on a slave) and no ACL
        # is enforced: the fast path takes sends from the receive buffer without a
        # RemotingCommand, so the ACL guard of the request table would never see them
        # (tests/broker/test_acl_broker.py). Fast sends count into the same section as the
        # handlers' (docs/statistics.md), and so do the putter's held acknowledgements.
        putter = data_plane.putter
        if isinstance(putter, RingPutter):
            putter.set_stats(self.stats)
        self.fast_putter: RingPutter | None = \
            putter if isinstance(putter, RingPutter) and putter.fast_enabled \
            and self.acl is None else None
        if self.fast_putter is not None and timer_slot_counts is not None:
            timer_slot_counts.follow(self.fast_putter.set_timer_wheel)
        # The ACK_MESSAGE fast path, on the send fast path's putter (so never on a slave or
        # with ACL) when POP is served here; not where a put may be refused for want of
        # in-sync replicas (controller mode's minInSyncReplicas > 1: the handler's rule).
        self.ack_port: FastAckPort | None = None
        if self.fast_putter is not None and self.pop is not None \
                and self.fast_putter.min_in_sync_replicas <= 1:
            self.ack_port = FastAckPort(config, self.ctx, self.fast_putter)
            if timer_slot_counts is not None:
                timer_slot_counts.follow(self.ack_port.set_timer_wheel)
        # The pull fast path (a master without ACL; its table follows the replica and the
        # live brokerPermission): FOUND answers written from the mappings in C.
        self.pull_port: FastPullPort | None = None
        if config.store.broker_role != BrokerRole.SLAVE and not config.broker.acl_enable:
            self.pull_port = FastPullPort(config, data_plane.reader, self.stats,
                                          self.commit_forwards.add)
        self.table: RequestTable | None = None          # the request table, once serving
        self.stopping = asyncio.Event()

    def _pop_state(self, config, data_plane) -> PopState | None:
        """This worker's handle on the shared POP state (broker/pop/state.py)."""
        table = data_plane.pop_table
        if table is None:
            return None
        def limits() -> tuple[int, int, int]:
            broker = self.config.broker
            return (broker.max_pop_polling_size, broker.pop_polling_size,
                    broker.pop_polling_map_size)
        self.pop_polls = [PopLongPoll(self.ctx_now_ms, limits, data_plane.watch_dispatched,
                                      table.add_held),
                          PopLongPoll(self.ctx_now_ms, limits, data_plane.watch_dispatched)]
        return PopState(table, SlotCache(self._fetch_pop_slots), self.worker_id + 1,
                        self.worker_id, data_plane.wake_workers, *self.pop_polls)

    def ctx_now_ms(self) -> int:
        return self.ctx.now_ms()

    async def _fetch_pop_slots(self, keys) -> list[int]:
        """The POP table slots of ``keys`` from the metadata service (its directory)."""
        answer = await self.metadata_client.invoke(create_request(
            InternalCode.POP_SLOTS, None, orjson.dumps([list(key) for key in keys])))
        if answer.code != ResponseCode.SUCCESS:
            raise PopStateError(answer.remark or "no POP slot")
        slots = orjson.loads(bytes(answer.body or b"[]"))
        if not isinstance(slots, list) or not all(isinstance(slot, int) for slot in slots):
            raise PopStateError("bad POP slots answer")
        return slots

    # --- start and stop -------------------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        # The supervisor's stop request only; Ctrl-C reaches the supervisor, which decides.
        loop.add_signal_handler(STOP_SIGNAL, self.stopping.set)
        accept_stop()
        if not await self._connect_metadata():
            return
        self.data_plane.start(loop, self._on_data_plane_wake, self.holds_requests,
                              [self.pop_watch] if self.pop_watch is not None else [])
        table = self.table = self._request_table()
        limits = ConnectionLimits.from_config(self.config.remoting)
        for listen_socket in self.listen_sockets.values():
            self.servers.append(await start_server(
                None, 0, table, sock=listen_socket, limits=limits,
                backlog=self.config.remoting.server_socket_backlog,
                on_connect=self._connected, on_close=self._disconnected,
                on_unmatched_response=self._relay_client_response, tls=self.tls))
        sweeper = start_task(self._sweep_held_pulls(), "the held-pull sweep", self._fail_stop,
                             log)
        beat = start_task(self._beat(), "the heartbeat", self._fail_stop, log)
        log.info("remoting worker %d serving %s ports %d and %d", self.worker_id,
                 self.config.remoting.bind_address, self.config.broker.listen_port,
                 self.config.derived.fast_listen_port)
        await self.stopping.wait()
        sweeper.cancel()
        beat.cancel()
        await self._stop()

    async def _connect_metadata(self) -> bool:
        """Connect to the metadata service and apply its hello; False when told to stop
        before the hello came (a role change in the generation's first second): nothing is
        served yet, and the link is closed."""
        if await unless_set(self.metadata_client.connect(), self.stopping):
            return True
        log.info("%s %d: told to stop while waiting for the metadata service's hello",
                 type(self).__name__, self.worker_id)
        self.metadata_client.close()
        return False

    async def _stop(self) -> None:
        for server in self.servers:
            server.close()
        self.long_poll.close()
        for held in self.pop_polls:
            held.close()
        for server in self.servers:
            await server.wait_closed()
        self.commit_forwards.close()
        self.metadata_client.close()
        if self.pull_port is not None:
            self.pull_port.close()
        self.data_plane.close()

    async def _beat(self) -> None:
        """Show the supervisor's watchdog that this event loop turns (pybroker/proc/watchdog.py)."""
        counters = self.data_plane.control.worker(self.worker_id)
        while True:
            counters.beat()
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)

    async def _sweep_held_pulls(self) -> None:
        rounds = Rounds("the held-pull sweep", logger=log)
        while True:
            await asyncio.sleep(HELD_PULL_SWEEP_S)
            with rounds:
                self.long_poll.check_held()
                for held in self.pop_polls:
                    held.check_held()

    def _apply_hello(self, snapshot) -> None:
        self.replica.apply(snapshot)
        self._apply_settings()
        self._refresh_fast_topics()

    def _apply_settings(self) -> None:
        """Take the live settings of the last snapshot (UPDATE_BROKER_CONFIG,
        broker/runtime_settings.py): handlers read ``ctx.config`` per request; the fast
        failure state keeps its own copy of its limits."""
        wanted = self.replica.settings
        config = self.ctx.config
        if not wanted or wanted == runtime_settings.live_values(config):
            return
        config = with_broker_settings(config, wanted)
        self.config = self.ctx.config = config
        fast_failure = getattr(self.data_plane.putter, "fast_failure", None)
        if fast_failure is not None:
            broker = config.broker
            fast_failure.set_limits(
                broker.wait_time_mills_in_send_queue if broker.broker_fast_failure_enable
                else None, config.store.os_page_cache_busy_time_out_mills)

    def _link_lost(self) -> None:
        self._fail_stop(None)

    def _fail_stop(self, error: BaseException | None) -> None:
        """Stop with exit status 1 (the supervisor ends the generation): the metadata link
        is lost, or a task of this worker ended by an error (logged by its task)."""
        self.exit_status = 1
        self.stopping.set()

    def _on_data_plane_wake(self, dispatched_moved: bool) -> None:
        # Only the wake-ups with Python work come here (the completion round, _fast/send/
        # round.pyx): while a pull or POP is held, every one (holds_requests is its question).
        if dispatched_moved and self.long_poll.held_count:
            self.long_poll.check_held()
        watch = self.pop_watch
        if watch is not None and (dispatched_moved or watch.moved()):
            for held in self.pop_polls:
                if held.held_count:
                    held.check_held()

    # --- request table --------------------------------------------------------------------------
    def _request_table(self) -> RequestTable:
        table = RequestTable(guard=self.acl.guard if self.acl is not None else None)
        self._register_data_handlers(table)
        for code in METADATA_CODES:
            table.register(code, self._forward)
        return table

    def _register_data_handlers(self, table: RequestTable) -> None:
        slave = self.config.store.broker_role == BrokerRole.SLAVE
        for code, handler in DATA_HANDLERS.items():
            table.register(code, self._local(slave_role.guard(code, handler) if slave
                                             else handler, code))

    async def _role_changed(self, connection: RemotingConnection, request: RemotingCommand):
        """ROLE_CHANGED from the supervisor: this slave's worker becomes a master's
        (controller mode's in-process promotion, docs/architecture/controller.md). The
        supervisor sends it once the appender is forked: from here sends go to this worker's
        ring (waiting there until the appender runs), as in a worker forked as a master;
        connections accepted before keep the handlers' path (their frame takers were chosen
        at accept), new ones get the fast paths."""
        fields = request.ext_fields
        role = BrokerRole[fields["brokerRole"]]
        if role == self.config.store.broker_role:
            return None                 # forked in that role already
        if self.config.store.broker_role != BrokerRole.SLAVE or role == BrokerRole.SLAVE:
            log.error("remoting worker %d: role change from %s to %s is not an in-process "
                      "promotion: stopping (the supervisor restarts the data plane)",
                      self.worker_id, self.config.store.broker_role.name, role.name)
            self._fail_stop(None)
            return None
        config = with_role(self.config, role, int(fields["brokerId"]))
        putter = self.data_plane.promote(config)
        putter.set_stats(self.stats)
        self.config = self.ctx.config = config
        self.ctx.putter = putter
        self.fast_putter = putter if putter.fast_enabled and self.acl is None else None
        if not config.broker.acl_enable:
            self.pull_port = FastPullPort(config, self.data_plane.reader, self.stats,
                                          self.commit_forwards.add)
        if self.table is not None:
            self._register_data_handlers(self.table)
        self._refresh_fast_topics()
        log.info("remoting worker %d: now serving as %s (brokerId %d)", self.worker_id,
                 role.name, config.broker.broker_id)
        return None

    def _local(self, handler: Handler, code: int) -> ConnectionHandler:
        ctx = self.ctx
        stats = self.stats
        family = _FAMILIES.get(code)

        async def run(connection: RemotingConnection,
                      request: RemotingCommand) -> RemotingCommand | None:
            channel = _channel_of(connection)
            channel.language, channel.version = request.language, request.version
            started = stats.now_ns()
            token = stats.request_started(family)
            response = None
            try:
                response = await handler(ctx, channel, request)
                return response
            finally:
                stats.request_finished(family, token, (stats.now_ns() - started) // 1000,
                                       _rpc_answer(request, response))
        return run

    async def _forward(self, connection: RemotingConnection,
                       request: RemotingCommand) -> RemotingCommand | None:
        # Commits of earlier pulls first: a later UPDATE_CONSUMER_OFFSET must win over them,
        # and a QUERY_CONSUMER_OFFSET must see them.
        self.commit_forwards.flush()
        channel = _channel_of(connection)
        channel.language, channel.version = request.language, request.version
        ext_fields = dict(request.ext_fields)
        ext_fields.update(channel.forward_ext_fields())
        forwarded = create_request(request.code, ext_fields, request.body,
                                   oneway=request.is_oneway, language=request.language)
        forwarded.version, forwarded.remark = request.version, request.remark
        started = self.stats.now_ns()
        if request.is_oneway:
            self.metadata_client.invoke_oneway(forwarded)
            self.stats.rpc(request.code, ResponseCode.SUCCESS,
                           (self.stats.now_ns() - started) // 1000, result="oneway")
            return None
        try:
            answer = await self.metadata_client.forward(forwarded)
        except LinkBusy as busy:
            answer = create_response(request, ResponseCode.SYSTEM_BUSY, busy.remark)
        response = create_response(request, answer.code, answer.remark, answer.ext_fields,
                                   answer.body)
        response.version = answer.version
        self.stats.rpc(request.code, response.code, (self.stats.now_ns() - started) // 1000)
        return response

    # --- channels -------------------------------------------------------------------------------
    def _connected(self, connection: RemotingConnection) -> None:
        channel_id = f"{self.worker_id}:{connection.connection_id}"
        connection.attachment = Channel(channel_id, connection.remote_address,
                                        send=connection.send)
        takers: list[FrameTaker] = []
        if self.fast_putter is not None:
            port = self.fast_putter.open_fast_port(
                send.born_host_of(connection.remote_address), connection.write_frames)
            connection.lend_socket(port.lend_socket)
            takers.append(port)
        if self.ack_port is not None:
            takers.append(self.ack_port.open(connection.write_frames))
        if self.pull_port is not None:
            takers.append(PullTaker(self.pull_port, connection,
                                    connection.limits.write_buffer_high_bytes))
        if takers:
            connection.use_frame_taker(takers[0] if len(takers) == 1 else TakerChain(takers))
        self.connections[channel_id] = connection

    def _relay_client_response(self, connection: RemotingConnection,
                               response: RemotingCommand) -> None:
        """A client answered a call the metadata service made (GET_CONSUMER_RUNNING_INFO...)."""
        if self.metadata_client.is_connected:
            self.metadata_client.invoke_oneway(create_request(
                InternalCode.CLIENT_RESPONSE,
                {EXT_CHANNEL_ID: _channel_of(connection).channel_id}, encode(response),
                oneway=True))

    def _disconnected(self, connection: RemotingConnection, exc) -> None:
        channel = connection.attachment
        if not isinstance(channel, Channel):
            return
        connection.frame_taker.close()
        connection.use_frame_taker(None)
        self.connections.pop(channel.channel_id, None)
        self.long_poll.channel_closed(channel.channel_id)
        for held in self.pop_polls:
            held.channel_closed(channel.channel_id)
        if self.metadata_client.is_connected:
            self.metadata_client.invoke_oneway(create_request(
                InternalCode.CHANNEL_CLOSED, {EXT_CHANNEL_ID: channel.channel_id}, oneway=True))

    # --- from the metadata service --------------------------------------------------------------
    async def _apply_snapshot(self, connection: RemotingConnection, request: RemotingCommand):
        self.replica.apply(request.body)
        self._apply_settings()
        self._refresh_fast_topics()
        return None

    def _refresh_fast_topics(self) -> None:
        """The send fast path's topic table follows the replica: it changes only with a
        snapshot (hello, push) or a topic created on send or send-back, so the fast path never
        sees a topic the handler would not (after _apply_settings: a live brokerPermission
        decides whether order topics are fast)."""
        if self.fast_putter is not None:
            self.fast_putter.set_fast_topics(send_fast.fast_topics(self.config, self.replica))
        if self.pull_port is not None:
            self.pull_port.refresh(self.config, self.replica)

    async def _send_to_channel(self, connection: RemotingConnection, request: RemotingCommand):
        target = self.connections.get(request.ext_fields.get(EXT_CHANNEL_ID, ""))
        if target is not None and request.body is not None:
            target.send_frame(bytes(request.body))
        return None

    async def _create_topic(self, topic: str, default_topic: str, queue_nums: int,
                            topic_sys_flag: int) -> TopicConfig | None:
        answer = await self.metadata_client.invoke(create_request(
            InternalCode.CREATE_TOPIC_ON_SEND,
            {"topic": topic, "defaultTopic": default_topic, "queueNums": str(queue_nums),
             "sysFlag": str(topic_sys_flag)}))
        # The snapshot that carries the new topic arrived before this answer.
        if answer.code != ResponseCode.SUCCESS:
            return None
        self._refresh_fast_topics()
        return self.replica.topic_config(topic)

    async def _create_send_back_topic(self, topic: str, queue_nums: int, perm: int,
                                      topic_sys_flag: int) -> TopicConfig | None:
        answer = await self.metadata_client.invoke(create_request(
            InternalCode.CREATE_TOPIC_ON_SEND,
            {"topic": topic, "queueNums": str(queue_nums), "perm": str(perm),
             "sysFlag": str(topic_sys_flag)}))
        if answer.code != ResponseCode.SUCCESS:
            return None
        self._refresh_fast_topics()
        return self.replica.topic_config(topic)

    async def _commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.commit_forwards.add([(group, topic, queue_id, offset)])


def run_remoting_worker(worker_id: int, config, data_plane, metadata_socket: str,
                        listen_sockets: dict) -> int:
    """Main of a forked remoting worker process; returns its exit status. ``listen_sockets``:
    port -> this worker's listening socket."""
    worker = RemotingWorker(worker_id, config, data_plane, metadata_socket, listen_sockets)
    # The loop's selector calls the C readers (socket reads, completion round) without a loop
    # turn each (docs/architecture/data-plane.md, "The loop's C readers called by its selector").
    with asyncio.Runner(loop_factory=fast_event_loop) as runner:
        runner.run(worker.run())
    return worker.exit_status


__all__ = ["RemotingWorker", "run_remoting_worker", "constants"]


def _rpc_answer(request: RemotingCommand,
                response: RemotingCommand | None) -> tuple[int, int, bool] | None:
    """rocketmq_rpc_latency's (request code, response code, oneway) of a handled request;
    None when it has no answer yet (a held pull, counted when the long poll answers it)."""
    if response is not None:
        return request.code, response.code, request.is_oneway
    if request.is_oneway:           # Java's processors answer oneway requests SUCCESS too
        return request.code, ResponseCode.SUCCESS, True
    return None
