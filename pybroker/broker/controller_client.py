# Requests from a controller-mode broker to Apache's controller, and its heartbeat channels.
"""The broker side of the controller protocol (Java ``BrokerOuterAPI``'s controller calls).

:class:`ControllerClient` sends one request at a time per call to the controller *leader*
(found with CONTROLLER_GET_METADATA_INFO on any configured address; a CONTROLLER_NOT_LEADER
answer makes it look again) and turns every answer into values or a :class:`ControllerError`
carrying the controller's code and remark. It lives for one generation's event loop.

:class:`HeartbeatChannels` keep one TCP connection per configured controller for
BROKER_HEARTBEAT (oneway). They outlive generations: the controller treats the close of the
connection a broker's heartbeats arrive on as that broker's death and elects another master,
so a data-plane restart of this broker must not close it. Between two generations the sockets
are only held (nothing is read or written); :meth:`HeartbeatChannels.attach` drives them in a
generation's loop, noticing a peer's close and reconnecting at the next beat.
"""
import asyncio
import logging
import socket

from pybroker import clock
from pybroker.protocol import controller as bodies
from pybroker.protocol import headers
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_request, encode
from pybroker.remoting.client import RemotingClientPool, split_address
from pybroker.remoting.tls import outgoing_tls
from pybroker.tasks import within

log = logging.getLogger("pybroker.broker.controller_client")

__all__ = ["ControllerClient", "ControllerError", "HeartbeatChannels", "controller_addresses"]

REQUEST_TIMEOUT_MS = 3000         # Java's BrokerOuterAPI controller calls
_PENDING_WRITE_MAX_BYTES = 64 << 10


class ControllerError(Exception):
    """The controller answered ``code`` (a ResponseCode) with ``remark``."""

    def __init__(self, code: int, remark: str | None, what: str):
        super().__init__(f"{what}: code {code} {remark or ''}".strip())
        self.code = code
        self.remark = remark


def controller_addresses(controller_addr: str) -> list[str]:
    """``controllerAddr`` split as Java does (``;``), blanks dropped."""
    return [part.strip() for part in controller_addr.split(";") if part.strip()]


class ControllerClient:
    """Requests to the controller leader of ``config.broker.controller_addr``."""

    def __init__(self, config, leader: str | None = None):
        self.config = config
        self.addresses = controller_addresses(config.broker.controller_addr)
        self.leader = leader
        self.pool = RemotingClientPool(ssl_context=outgoing_tls(config))

    def close(self) -> None:
        self.pool.close()

    async def update_leader(self) -> bool:
        """Ask each configured controller for the leader's address; True when one answered."""
        for address in self.addresses:
            try:
                response = await self.pool.invoke(
                    address, create_request(RequestCode.CONTROLLER_GET_METADATA_INFO, {}),
                    REQUEST_TIMEOUT_MS)
            except (OSError, TimeoutError, ConnectionError) as error:
                log.warning("controller %s: metadata request failed: %s", address, error)
                continue
            if response.code != ResponseCode.SUCCESS:
                continue
            meta = headers.GET_METADATA_RESPONSE.parse(response.ext_fields)
            if meta.controller_leader_address:
                if meta.controller_leader_address != self.leader:
                    log.info("controller leader is %s (%s)", meta.controller_leader_address,
                             meta.controller_leader_id)
                self.leader = meta.controller_leader_address
                return True
        return False

    async def _invoke(self, code: int, values: dict, schema, body: bytes | None = None,
                      ok=(ResponseCode.SUCCESS,)) -> RemotingCommand:
        if self.leader is None and not await self.update_leader():
            raise ControllerError(ResponseCode.CONTROLLER_NOT_LEADER, "no controller leader",
                                  RequestCode(code).name)
        assert self.leader is not None
        request = create_request(code, headers.encode_header(schema, values), body)
        try:
            response = await self.pool.invoke(self.leader, request, REQUEST_TIMEOUT_MS)
        except (OSError, TimeoutError, ConnectionError) as error:
            self.leader = None       # look again next time: it may have moved or died
            raise ControllerError(ResponseCode.SYSTEM_ERROR, str(error) or type(error).__name__,
                                  RequestCode(code).name) from None
        if response.code == ResponseCode.CONTROLLER_NOT_LEADER:
            self.leader = None
        if response.code not in ok:
            raise ControllerError(response.code, response.remark, RequestCode(code).name)
        return response

    async def next_broker_id(self, cluster: str, broker_name: str) -> int:
        response = await self._invoke(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                                      {"cluster_name": cluster, "broker_name": broker_name},
                                      headers.GET_NEXT_BROKER_ID_REQUEST)
        answer = headers.GET_NEXT_BROKER_ID_RESPONSE.parse(response.ext_fields)
        if answer.next_broker_id is None:
            raise ControllerError(response.code, "no nextBrokerId", "GET_NEXT_BROKER_ID")
        return answer.next_broker_id

    async def apply_broker_id(self, cluster: str, broker_name: str, broker_id: int,
                              check_code: str) -> None:
        await self._invoke(RequestCode.CONTROLLER_APPLY_BROKER_ID,
                           {"cluster_name": cluster, "broker_name": broker_name,
                            "applied_broker_id": broker_id, "register_check_code": check_code},
                           headers.APPLY_BROKER_ID_REQUEST)

    async def register(self, cluster: str, broker_name: str, broker_id: int,
                       address: str) -> tuple:
        """CONTROLLER_REGISTER_BROKER: (master info header, SyncStateSet)."""
        response = await self._invoke(RequestCode.CONTROLLER_REGISTER_BROKER,
                                      {"cluster_name": cluster, "broker_name": broker_name,
                                       "broker_id": broker_id, "broker_address": address,
                                       "invoke_time": clock.now_ms()},
                                      headers.REGISTER_TO_CONTROLLER_REQUEST)
        return (headers.MASTER_INFO_RESPONSE.parse(response.ext_fields),
                bodies.decode_sync_state_set(response.body or b"{}"))

    async def replica_info(self, broker_name: str) -> tuple:
        """CONTROLLER_GET_REPLICA_INFO: (master info header, SyncStateSet)."""
        response = await self._invoke(RequestCode.CONTROLLER_GET_REPLICA_INFO,
                                      {"broker_name": broker_name},
                                      headers.GET_REPLICA_INFO_REQUEST)
        return (headers.MASTER_INFO_RESPONSE.parse(response.ext_fields),
                bodies.decode_sync_state_set(response.body or b"{}"))

    async def elect(self, cluster: str, broker_name: str, broker_id: int) -> tuple:
        """CONTROLLER_ELECT_MASTER for this broker (Java's brokerElect): (master info header,
        the set's members). The master may be another broker (CONTROLLER_MASTER_STILL_EXIST
        counts as an answer, as in Java)."""
        response = await self._invoke(
            RequestCode.CONTROLLER_ELECT_MASTER,
            {"cluster_name": cluster, "broker_name": broker_name, "broker_id": broker_id,
             "designate_elect": False, "invoke_time": clock.now_ms()},
            headers.ELECT_MASTER_REQUEST,
            ok=(ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST))
        body = bodies.decode_elect_master_body(response.body or b"{}")
        return headers.MASTER_INFO_RESPONSE.parse(response.ext_fields), body.sync_state_set

    async def alter_sync_state_set(self, broker_name: str, master_id: int, master_epoch: int,
                                   members, set_epoch: int) -> bodies.SyncStateSet:
        response = await self._invoke(
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
            {"broker_name": broker_name, "master_broker_id": master_id,
             "master_epoch": master_epoch, "invoke_time": clock.now_ms()},
            headers.ALTER_SYNC_STATE_SET_REQUEST,
            body=bodies.encode_sync_state_set(members, set_epoch))
        return bodies.decode_sync_state_set(response.body or b"{}")


class _Channel:
    """One heartbeat connection (non-blocking socket, kept across event loops)."""

    def __init__(self, address: str, connect_timeout_s: float):
        self.address = address
        self.connect_timeout_s = connect_timeout_s
        self.sock: socket.socket | None = None
        self.pending = b""
        self.connecting = False
        self.loop: asyncio.AbstractEventLoop | None = None

    async def ensure(self) -> bool:
        if self.sock is not None or self.connecting:
            return self.sock is not None
        host, port = split_address(self.address)
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                             socket.SOCK_STREAM)
        sock.setblocking(False)
        self.connecting = True
        try:
            await within(asyncio.get_running_loop().sock_connect(sock, (host, port)),
                         self.connect_timeout_s)
        except (OSError, TimeoutError) as error:
            sock.close()
            log.warning("heartbeat connection to controller %s failed: %s", self.address,
                        error or type(error).__name__)
            return False
        finally:
            self.connecting = False
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.pending = b""
        if self.loop is not None:
            self.loop.add_reader(sock, self._readable)
        log.info("heartbeat connection to controller %s open", self.address)
        return True

    def write(self, frame: bytes) -> None:
        sock = self.sock
        if sock is None:
            return
        data = self.pending + frame
        try:
            sent = sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as error:
            self.close(f"write failed: {error}")
            return
        self.pending = data[sent:]
        if len(self.pending) > _PENDING_WRITE_MAX_BYTES:
            self.close("the controller does not read its heartbeats")

    def _readable(self) -> None:
        sock = self.sock
        if sock is None:
            return
        try:
            data = sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as error:
            self.close(f"read failed: {error}")
            return
        if not data:
            self.close("closed by the controller")

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        if self.sock is not None:
            loop.add_reader(self.sock, self._readable)

    def detach(self) -> None:
        if self.loop is not None and self.sock is not None:
            self.loop.remove_reader(self.sock)
        self.loop = None

    def close(self, reason: str) -> None:
        if self.sock is None:
            return
        log.warning("heartbeat connection to controller %s closed: %s", self.address, reason)
        if self.loop is not None:
            self.loop.remove_reader(self.sock)
        self.sock.close()
        self.sock = None
        self.pending = b""


class HeartbeatChannels:
    """BROKER_HEARTBEAT to every configured controller (see the module docstring);
    ``timeout_ms`` (sendHeartbeatTimeoutMillis) bounds a connection attempt."""

    def __init__(self, addresses: list[str], timeout_ms: int):
        self.channels = [_Channel(address, timeout_ms / 1000) for address in addresses]
        self.sent_total = 0

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        for channel in self.channels:
            channel.attach(loop)

    def detach(self) -> None:
        for channel in self.channels:
            channel.detach()

    async def beat(self, values: dict) -> None:
        """One heartbeat (``values``: BROKER_HEARTBEAT_REQUEST attributes) on every channel,
        connecting those that are not."""
        frame = encode(create_request(RequestCode.BROKER_HEARTBEAT,
                                      headers.encode_header(headers.BROKER_HEARTBEAT_REQUEST,
                                                            values), oneway=True))
        for channel in self.channels:
            if await channel.ensure():
                channel.write(frame)
        self.sent_total += 1

    def close(self) -> None:
        for channel in self.channels:
            channel.close("broker stopping")
