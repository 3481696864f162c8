# The metadata service: the single writer of broker metadata, serving forwarded requests.
"""Metadata service, run in the supervisor (docs/architecture/metadata.md).

Remoting workers connect over a unix socket and forward every METADATA request
(:data:`pybroker.broker.routing.METADATA_CODES`) with the client's channel in ext fields; the
service runs the ordinary broker handler against the authoritative
:class:`~pybroker.broker.metadata.MetadataState` and answers. Whenever the metadata changed, a
snapshot is pushed to every worker BEFORE the answer, on the same ordered connection, so a
client that sends a heartbeat and then pulls always finds its subscription in the worker.
Commands for clients (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE, calls to clients)
travel back to the owning worker as SEND_TO_CHANNEL.
"""
import logging
from collections.abc import Awaitable
from typing import Callable

import orjson

from pybroker.broker import (admin, client_manage, consumer_manage, controller_role, reply,
                             request_mode)
from pybroker.broker.channel import FORWARD_EXT_CHANNEL, Channel
from pybroker.broker.context import MetadataContext, MetadataHandler
from pybroker.broker.pop import assignment
from pybroker.broker.pop.directory import PopTableFull
from pybroker.broker.routing import METADATA_CODES
from pybroker.protocol.codes import InternalCode, RequestCode, ResponseCode
from pybroker.errors import ProtocolError
from pybroker.protocol.command import (RemotingCommand, create_request, create_response,
                                       decode, encode)
from pybroker.remoting.connection import RemotingConnection
from pybroker.remoting.limits import ConnectionLimits
from pybroker.remoting.server import (Handler, RemotingServer, RequestTable, start_server,
                                      start_unix_server)
from pybroker.store.pop_table import SlotKey

log = logging.getLogger("pybroker.proc.metadata")

EXT_WORKER_ID = "workerId"
EXT_CHANNEL_ID = "channelId"
# Both ends of a worker <-> service link: it is internal, so no idle close and no close or
# read pause for a write backlog (each end would wait on the other); the work on it is
# bounded by the workers (pybroker/proc/metadata_link.py).
INTERNAL_LINK_LIMITS = ConnectionLimits(idle_timeout_ms=0, write_stall_timeout_ms=1 << 40,
                                        write_buffer_max_bytes=1 << 40,
                                        requests_in_progress_max=1 << 30,
                                        pause_reading_on_backlog=False)

HANDLERS: dict[int, MetadataHandler] = {**client_manage.HANDLERS, **consumer_manage.HANDLERS,
                                        **admin.HANDLERS, **reply.HANDLERS,
                                        **controller_role.HANDLERS, **request_mode.HANDLERS,
                                        **assignment.HANDLERS}
assert set(HANDLERS) == set(METADATA_CODES), set(HANDLERS) ^ set(METADATA_CODES)


def worker_of_channel(channel_id: str) -> str:
    """The worker id part of a channel id ``"<worker>:<connection>"``."""
    return channel_id.split(":", 1)[0]


class MetadataService:
    """Serves forwarded metadata requests for ``ctx`` (whose ``metadata`` is authoritative).

    ``on_topics_changed()`` is called after topics change (re-register with NameServers).
    """

    def __init__(self, ctx: MetadataContext, socket_path: str,
                 on_topics_changed: Callable[[], None], pop_directory=None,
                 register_now: Callable[[], Awaitable[object]] | None = None):
        self.ctx = ctx
        # UPDATE_AND_CREATE_TOPIC is answered after the NameServers have the topic, as Java's
        # AdminBrokerProcessor registers (registerIncrementBrokerData, waiting for each
        # NameServer up to its timeout) before it answers: `mqadmin updateTopic` then a
        # client's route lookup must find it.
        self.register_now = register_now
        # The POP table's directory (broker/pop/directory.py): slots for the workers.
        self.pop_directory = pop_directory
        self.socket_path = socket_path
        self.on_topics_changed = on_topics_changed
        self.workers: dict[str, RemotingConnection] = {}
        self.server: RemotingServer | None = None
        self._pushed_versions: tuple = ()
        # The role announced to the workers (announce_role), None: the one they were forked in.
        self.announced_role: dict[str, str] | None = None
        table = RequestTable()
        for code, handler in HANDLERS.items():
            table.register(code, self._forwarded(handler))
        table.register(InternalCode.WORKER_HELLO, self._worker_hello)
        table.register(InternalCode.CHANNEL_CLOSED, self._channel_closed)
        table.register(InternalCode.CREATE_TOPIC_ON_SEND, self._create_topic_on_send)
        table.register(InternalCode.COMMIT_OFFSET, self._commit_offset)
        table.register(InternalCode.CLIENT_RESPONSE, self._client_response)
        table.register(InternalCode.POP_SLOTS, self._pop_slots)
        self.table = table

    async def start(self) -> None:
        """Listen on ``socket_path``."""
        self.server = await start_unix_server(self.socket_path, self.table,
                                              limits=INTERNAL_LINK_LIMITS,
                                              on_close=self._connection_closed)

    async def start_on(self, listener) -> None:
        """Serve an already bound and listening unix socket (bound before the workers were
        forked, so they can connect before this loop runs)."""
        self.server = await start_server(None, 0, self.table, sock=listener,
                                         limits=INTERNAL_LINK_LIMITS,
                                         on_close=self._connection_closed)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()

    # --- snapshots ------------------------------------------------------------------------------
    def push_if_changed(self) -> bool:
        """Send the metadata snapshot to every worker when it changed since the last push;
        whether the topics changed."""
        metadata = self.ctx.metadata
        versions = metadata.versions()
        if versions == self._pushed_versions:
            return False
        topics_changed = versions[:2] != self._pushed_versions[:2]
        self._pushed_versions = versions
        snapshot = metadata.snapshot()
        for connection in self.workers.values():
            connection.send(create_request(InternalCode.METADATA_SNAPSHOT, None, snapshot,
                                           oneway=True))
        if topics_changed:
            self.on_topics_changed()
        return topics_changed

    def announce_role(self, broker_role: str, broker_id: int) -> None:
        """Tell every worker its broker now runs as ``broker_role`` (an in-process promotion
        in controller mode; proc/remoting.py switches on it). A worker that says hello later
        (its link re-made) is told too; one forked in that role ignores it."""
        self.announced_role = {"brokerRole": broker_role, "brokerId": str(broker_id)}
        for connection in self.workers.values():
            self._send_role(connection)

    def _send_role(self, connection: RemotingConnection) -> None:
        if self.announced_role is not None:
            connection.send(create_request(InternalCode.ROLE_CHANGED,
                                           dict(self.announced_role), oneway=True))

    # --- channels ------------------------------------------------------------------------------
    def _sender(self, channel_id: str) -> Callable[[RemotingCommand], None]:
        def send(command: RemotingCommand) -> None:
            connection = self.workers.get(worker_of_channel(channel_id))
            if connection is None or connection.is_closed:
                raise ConnectionError(f"channel {channel_id}: its worker is gone")
            connection.send(create_request(InternalCode.SEND_TO_CHANNEL,
                                           {EXT_CHANNEL_ID: channel_id}, encode(command),
                                           oneway=True))
        return send

    def channel(self, channel_id: str, address: str = "") -> Channel:
        """A Channel object for a client connection living in some worker."""
        return Channel(channel_id, address, send=self._sender(channel_id))

    def _forwarded(self, handler: MetadataHandler) -> Handler:
        async def run(connection: RemotingConnection,
                      request: RemotingCommand) -> RemotingCommand | None:
            ext_fields = dict(request.ext_fields)
            send = self._sender(ext_fields.get(FORWARD_EXT_CHANNEL, ""))
            try:
                channel = Channel.from_forwarded(ext_fields, send)
            except ValueError as error:
                return create_response(request, ResponseCode.SYSTEM_ERROR, str(error))
            request.ext_fields = ext_fields
            response = await handler(self.ctx, channel, request)
            if self.push_if_changed() and request.code == RequestCode.UPDATE_AND_CREATE_TOPIC \
                    and self.register_now is not None:
                await self.register_now()
            return response
        return run

    # --- internal requests ---------------------------------------------------------------------
    async def _worker_hello(self, connection: RemotingConnection, request: RemotingCommand):
        worker_id = request.ext_fields.get(EXT_WORKER_ID, "")
        if not worker_id:
            return create_response(request, ResponseCode.SYSTEM_ERROR, "no workerId")
        connection.attachment = worker_id
        self.workers[worker_id] = connection
        log.info("remoting worker %s connected", worker_id)
        self._send_role(connection)
        return create_response(request, ResponseCode.SUCCESS,
                               body=self.ctx.metadata.snapshot())

    def _connection_closed(self, connection: RemotingConnection, exc) -> None:
        worker_id = connection.attachment
        if isinstance(worker_id, str) and self.workers.get(worker_id) is connection:
            del self.workers[worker_id]
            self._drop_worker_channels(worker_id + ":")
            self.push_if_changed()

    def _drop_worker_channels(self, prefix: str) -> None:
        """A worker went away: every client channel it held is closed."""
        self.ctx.metadata.worker_closed(prefix)

    async def _channel_closed(self, connection: RemotingConnection, request: RemotingCommand):
        channel_id = request.ext_fields.get(EXT_CHANNEL_ID, "")
        if channel_id:
            self.ctx.metadata.channel_closed(channel_id)
            self.push_if_changed()
        return None

    async def _create_topic_on_send(self, connection: RemotingConnection,
                                    request: RemotingCommand):
        ext = request.ext_fields
        topics = self.ctx.metadata.topics
        if not ext.get("topic"):
            return create_response(request, ResponseCode.TOPIC_NOT_EXIST, "no topic")
        try:
            queue_nums, sys_flag = int(ext.get("queueNums", "4")), int(ext.get("sysFlag", "0"))
            perm = int(ext["perm"]) if "perm" in ext else None
        except ValueError:
            return create_response(request, ResponseCode.SYSTEM_ERROR,
                                   "bad queueNums/sysFlag/perm")
        if perm is None:
            created = topics.create_topic_on_send(ext.get("topic", ""), ext.get("defaultTopic", ""),
                                                  queue_nums, sys_flag)
        else:   # a %RETRY%/%DLQ% topic for a send-back (createTopicInSendMessageBackMethod)
            created = topics.create_topic_for_send_back(ext.get("topic", ""), queue_nums, perm,
                                                        sys_flag)
        self.push_if_changed()
        if created is None:
            return create_response(request, ResponseCode.TOPIC_NOT_EXIST, "not created")
        return create_response(request, ResponseCode.SUCCESS)

    async def _commit_offset(self, connection: RemotingConnection, request: RemotingCommand):
        """A worker's pull-piggy-backed commits: a JSON body of [group, topic, queueId,
        offset] rows (the last of each queue since the worker's previous forward;
        proc/commit_forward.py)."""
        body = request.body
        commit = self.ctx.metadata.offsets.commit
        try:
            if not isinstance(body, (bytes, bytearray, memoryview)):
                raise TypeError("no JSON body")
            for group, topic, queue_id, offset in orjson.loads(body):
                commit(str(group), str(topic), int(queue_id), int(offset))
        except (ValueError, TypeError, orjson.JSONDecodeError) as error:
            log.warning("bad internal COMMIT_OFFSET: %r", error)
        return None

    async def _pop_slots(self, connection: RemotingConnection, request: RemotingCommand):
        """The POP table slots of the keys a worker needs (assigned when new)."""
        directory = self.pop_directory
        if directory is None:
            return create_response(request, ResponseCode.SYSTEM_ERROR, "no POP table")
        try:
            keys = [SlotKey(str(topic), str(group), int(queue_id))
                    for topic, group, queue_id in orjson.loads(bytes(request.body or b"[]"))]
            slots = directory.slots_for(keys)
        except (ValueError, TypeError, orjson.JSONDecodeError) as error:
            return create_response(request, ResponseCode.SYSTEM_ERROR,
                                   f"bad POP slot request: {error}")
        except PopTableFull as full:
            log.error("%s", full)
            return create_response(request, ResponseCode.SYSTEM_ERROR, str(full))
        return create_response(request, ResponseCode.SUCCESS, body=orjson.dumps(slots))

    async def _client_response(self, connection: RemotingConnection, request: RemotingCommand):
        channel_id = request.ext_fields.get(EXT_CHANNEL_ID, "")
        body = request.body
        if channel_id and body:
            frame = bytes(body)
            try:
                response = decode(frame, 0, len(frame))
            except ProtocolError as error:
                log.warning("bad relayed client response: %s", error)
                return None
            self.ctx.metadata.client_calls.complete_client_call(channel_id, response)
        return None
