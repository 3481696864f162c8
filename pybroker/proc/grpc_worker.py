# A gRPC worker process: RocketMQ 5's MessagingService on grpcServerPort, on the shared data plane.
"""gRPC worker (docs/architecture/grpc.md).

Forked by the supervisor like the remoting workers and wired like them: a worker slot of its
own (send ring, completion ring, control-block line, statistics section), the read-only store
reader, the metadata link to the supervisor's metadata service and the metadata replica. It
*is* a remoting worker without remoting sockets (it reuses :class:`RemotingWorker`'s metadata
glue: snapshots, topic creation on send, commands to channels), serving grpc.aio instead.

grpcio binds its own listening socket: each gRPC worker binds grpcServerPort with SO_REUSEPORT
(the kernel spreads connections over the workers); the supervisor probed the port at start and
holds it with a socket that never listens (pybroker/proc/listeners.py, reserve_port). grpc is
imported only here, after the fork: the supervisor never starts grpc's threads, so no process
forks with them. With grpcNativeFront (the default where the front is built) the C++ front
(libgrpc++, pybroker/grpc_service/front.py) binds grpcServerPort instead and relays every call to
the grpcio server on a private socket.
"""
import asyncio
import logging

from pybroker.broker.channel import Channel
from pybroker.broker.context import Handler
from pybroker.config import BrokerRole
from pybroker.grpc_service import front as grpc_front
from pybroker.grpc_service.front_send import FastSends
from pybroker.grpc_service.acl import GrpcAccessCheck
from pybroker.grpc_service.client import Telemetry
from pybroker.grpc_service.fast_acks import FastAcks
from pybroker.grpc_service.front_acks import FrontAcks
from pybroker.grpc_service.producer import QueueSelector, TransactionData
from pybroker.grpc_service import consumer
from pybroker.grpc_service.renewal import Renewals, registry_has
from pybroker.grpc_service.request_context import RequestContext
from pybroker.grpc_service.settings import ClientSettings, retry_delay_ms
from pybroker.grpc_service.tls import bind_port
from pybroker.broker import slave_role
from pybroker.proc.children import STOP_SIGNAL, accept_stop
from pybroker.proc.metadata_link import LinkBusy
from pybroker.proc.metadata_service import EXT_CHANNEL_ID
from pybroker.proc.remoting import DATA_HANDLERS, RemotingWorker
from pybroker.protocol.codes import InternalCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_request, create_response
from pybroker.tasks import start_task

log = logging.getLogger("pybroker.proc.grpc")

GRPC_CHANNEL_MARK = ":grpc:"       # channel ids "<slot>:grpc:<client id>"
STOP_GRACE_S = 1.0


class GrpcWorker(RemotingWorker):
    """gRPC worker ``index`` in worker slot ``slot``."""

    def __init__(self, index: int, slot: int, config, data_plane, metadata_socket: str):
        super().__init__(slot, config, data_plane, metadata_socket, {})
        self.index = index
        # The putter's send fast path serves the C++ front's fast sends (grpcNativeFront:
        # grpc_service/front_send.py). The ACK_MESSAGE fast path (RemotingWorker's ack_port,
        # under the same conditions) takes the consumer activities' acks (fast_acks.py).
        self.fast_acks = FastAcks(self.ack_port) if self.ack_port is not None else None
        self.fast_sends: FastSends | None = None
        self.settings = ClientSettings(lambda: self.ctx.config, self.replica.subscription_group)
        self.telemetry = Telemetry(self._relay_client_answer)
        self.transactions = TransactionData()
        self.queue_selector = QueueSelector()
        self.access = GrpcAccessCheck(self.acl) if self.acl is not None else None
        self.renewals = Renewals(
            lambda: self.ctx.config.grpc,
            lambda rctx, handle, group, topic, ms: consumer.change_invisible(
                self, rctx, handle, group, topic, ms),
            lambda rctx, group: registry_has(self.forward, rctx, group),
            lambda group, times: retry_delay_ms(self.replica.subscription_group(group), times))
        self.peer_key: str | None = None   # set when the C++ front serves the port

    # --- the host of pybroker.grpc_service ------------------------------------------------------
    def channel_id(self, rctx: RequestContext) -> str:
        return f"{self.worker_id}{GRPC_CHANNEL_MARK}{rctx.client_id}"

    def local_handler(self, code: int) -> Handler | None:
        handler = DATA_HANDLERS.get(code)
        if handler is not None and self.config.store.broker_role == BrokerRole.SLAVE:
            return slave_role.guard(code, handler)
        return handler

    async def forward(self, code: int, ext_fields: dict, body, rctx: RequestContext):
        """A metadata request for the client of ``rctx``, answered by the metadata service."""
        channel = Channel(self.channel_id(rctx), rctx.remote_address, rctx.language,
                          rctx.version)
        fields = dict(ext_fields)
        fields.update(channel.forward_ext_fields())
        request = create_request(code, fields, body, language=rctx.language)
        request.version = rctx.version
        try:
            return await self.metadata_client.forward(request)
        except LinkBusy as busy:
            return create_response(request, ResponseCode.SYSTEM_BUSY, busy.remark)

    def _refresh_fast_topics(self) -> None:
        """The send fast path's table, and the front's rules, follow the replica (and the
        settings: the message type check, the limits)."""
        super()._refresh_fast_topics()
        if self.fast_sends is not None:
            self.fast_sends.refresh()

    def _relay_client_answer(self, channel_id: str, frame: bytes) -> None:
        if self.metadata_client.is_connected:
            self.metadata_client.invoke_oneway(create_request(
                InternalCode.CLIENT_RESPONSE, {EXT_CHANNEL_ID: channel_id}, frame, oneway=True))

    async def _send_to_channel(self, connection, request: RemotingCommand):
        channel_id = request.ext_fields.get(EXT_CHANNEL_ID, "")
        _, mark, client_id = channel_id.partition(GRPC_CHANNEL_MARK)
        if mark and request.body is not None:
            self.telemetry.deliver(self, channel_id, client_id, bytes(request.body))
        return None

    # --- start and stop -------------------------------------------------------------------------
    def _start_front(self, front_type, backend, handoff):
        """Start the C++ front before ``backend`` with the fast sends and the AckMessage
        calls in one take when their fast paths are on; (address, front, relay)."""
        putter = self.fast_putter
        address, front, relay = grpc_front.start_front(front_type, self.config, self.index,
                                                       backend.address, handoff,
                                                       fast_sends=putter is not None)
        if putter is not None:
            self.fast_sends = handoff.sends = FastSends(self, putter, front, handoff)
            self.fast_sends.refresh()
        if self.fast_acks is not None:
            handoff.acks = FrontAcks(self, front)
        return address, front, relay

    async def run(self) -> None:
        import grpc
        from pybroker.grpc_service.service import MessagingService
        from pybroker.protocol.rocketmq_v2 import service_pb2_grpc

        loop = asyncio.get_running_loop()
        loop.add_signal_handler(STOP_SIGNAL, self.stopping.set)
        accept_stop()
        if not await self._connect_metadata():
            return
        # Held receives are the worker's held POPs (ReceiveMessage runs POP_MESSAGE here):
        # woken by the dispatcher and by other workers' POP table changes, as in a remoting
        # worker.
        self.data_plane.start(loop, self._on_data_plane_wake, self.holds_requests,
                              [self.pop_watch] if self.pop_watch is not None else [])
        size_max = self.config.grpc.grpc_max_inbound_message_size
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", size_max),
                                          ("grpc.max_send_message_length", size_max),
                                          ("grpc.so_reuseport", 1)])
        service = MessagingService(self)
        service_pb2_grpc.add_MessagingServiceServicer_to_server(service, server)
        front_type = grpc_front.front_type() if self.config.grpc.grpc_native_front else None
        if not self.config.grpc.grpc_native_front and not grpc_front.built():
            log.info("gRPC worker %d: this build has no C++ gRPC front (libgrpc++ was not "
                     "found at build time): grpcio serves grpcServerPort", self.index)
        front = handoff = backend = None
        if front_type is None:
            address, relay = bind_port(server, self.config, self.index)
        else:
            backend = grpc_front.Backend(self.index)
            server.add_insecure_port(backend.address)
            self.peer_key = grpc_front.peer_key()
        await server.start()
        if front_type is not None and backend is not None:
            handoff = grpc_front.HandOff(service)
            address, front, relay = self._start_front(front_type, backend, handoff)
        if relay is not None:
            await relay.start()
        beat = start_task(self._beat(), "the heartbeat", self._fail_stop, log)
        sweeper = start_task(self._sweep_held_pulls(), "the held-POP sweep", self._fail_stop,
                             log)
        renewer = start_task(self.renewals.run(), "the receipt handle renewal", self._fail_stop,
                             log)
        log.info("gRPC worker %d serving %s", self.index, address)
        await self.stopping.wait()
        beat.cancel()
        sweeper.cancel()
        renewer.cancel()
        await self.renewals.stop()
        if relay is not None:
            relay.close()
        if front is not None and handoff is not None:
            accepted, handed_off = front.calls_accepted, front.calls_handed_off
            sent_fast = front.calls_sent_fast
            # The calls in flight end through grpcio or the hand-off: this loop keeps running.
            await handoff.stop(STOP_GRACE_S)
            if self.fast_sends is not None:
                self.fast_sends.close()
            log.info("gRPC worker %d: the front took %d calls, %d of them handed off, %d sends "
                     "put by the front, %d streams served (%d cancelled while held)",
                     self.index, accepted, handed_off, sent_fast, *handoff.stream_counts)
        await server.stop(STOP_GRACE_S)
        if self.fast_acks is not None:
            log.info("gRPC worker %d: %d acks taken by the ACK fast path (%d AckMessage calls "
                     "put by the hand-off in one take)", self.index, self.fast_acks.taken_total,
                     handoff.acks.calls_total if handoff is not None else 0)
        if backend is not None:
            backend.close()
        await self._stop()


def run_grpc_worker(index: int, slot: int, config, data_plane, metadata_socket: str) -> int:
    """Main of a forked gRPC worker process; returns its exit status."""
    worker = GrpcWorker(index, slot, config, data_plane, metadata_socket)
    asyncio.run(worker.run())
    return worker.exit_status
