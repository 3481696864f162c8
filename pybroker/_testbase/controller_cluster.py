# Controller-mode test support: broker profile, the controller's view, a many-sender load.
"""Shared by the controller-mode tests and tools (tests/crash/test_controller_failover.py,
tests/compat/test_controller_mixed.py, tools/bench_controller.py).

* :data:`CONTROLLER_TEST_PROFILE` - broker.conf keys of a controller-mode pybroker broker with
  short timeouts, so an election, a shrink or a partition shows within seconds.
* :func:`replica_info` - the controller's view of a broker set (CONTROLLER_GET_REPLICA_INFO).
* :class:`SendLoad` - ``senders`` concurrent producers (one asyncio loop in a thread), each
  sending one numbered message at a time to whichever broker the controller names master,
  recording every answer; after a failure it asks the controller again and sends the same
  message again (as a client retries), so :attr:`SendLoad.acked` is what the brokers promised
  to keep.
* :func:`count_back` - every acknowledged key looked for on one broker (the CI failover tests'
  and tools/bench_controller.py's count of lost messages).
* :func:`controller_leader` - the leader of a controller group as its members name it.
"""
import asyncio
import collections
import dataclasses
import threading
import time

from pybroker._testbase.raw_client import client_for, read_queue
from pybroker.protocol import controller as bodies
from pybroker.protocol import headers
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.remoting.client import RemotingClient, SyncRemotingClient

__all__ = ["CONTROLLER_TEST_PROFILE", "JAVA_CONTROLLER_TEST_PROFILE", "replica_info",
           "SendLoad", "wait_for_master", "first_send_ok", "keys_of", "CountBack", "count_back",
           "controller_leader"]

CONTROLLER_TEST_PROFILE = {
    "enableControllerMode": "true", "brokerId": "-1", "brokerRole": "SLAVE",
    "allAckInSyncStateSet": "true", "controllerHeartBeatTimeoutMills": "3000",
    "brokerHeartbeatInterval": "500", "syncBrokerMetadataPeriod": "1000",
    "checkSyncStateSetPeriod": "1000", "haMaxTimeSlaveNotCatchup": "3000",
    "syncControllerMetadataPeriod": "3000", "autoCreateTopicEnable": "true",
    "syncFlushTimeout": "3000",
}
# The same for a Java 5.3.3 broker (tools/java_rocketmq.controller_broker_overrides adds the
# controller keys); its HA heartbeat must come before a pybroker master's 5 s housekeeping.
JAVA_CONTROLLER_TEST_PROFILE = {
    key: value for key, value in CONTROLLER_TEST_PROFILE.items()
    if key not in ("enableControllerMode", "brokerId", "brokerRole", "syncFlushTimeout")}
JAVA_CONTROLLER_TEST_PROFILE.update(haSendHeartbeatInterval="1000",
                                    haHousekeepingInterval="5000")
# The controller: inactive brokers looked for every second.
CONTROLLER_CONF = {"scanNotActiveBrokerInterval": "1000"}

_TIMEOUT_MS = 3000


def _replica_info_request(broker_name: str):
    return create_request(RequestCode.CONTROLLER_GET_REPLICA_INFO,
                          headers.encode_header(headers.GET_REPLICA_INFO_REQUEST,
                                                {"broker_name": broker_name}))


def replica_info(controller: str, broker_name: str) -> dict:
    """The controller's view of ``broker_name``: master id, address and epoch, SyncStateSet
    members and epoch (None values while it has none)."""
    with SyncRemotingClient() as client:
        client.connect(controller, _TIMEOUT_MS)
        response = client.invoke(_replica_info_request(broker_name), _TIMEOUT_MS)
    return _parse_replica_info(response)


def _parse_replica_info(response) -> dict:
    if response.code != ResponseCode.SUCCESS:
        return {"master_broker_id": None, "master_address": None, "master_epoch": None,
                "members": frozenset(), "set_epoch": None, "code": response.code}
    header = headers.MASTER_INFO_RESPONSE.parse(response.ext_fields)
    state = bodies.decode_sync_state_set(response.body or b"{}")
    return {"master_broker_id": header.master_broker_id,
            "master_address": header.master_address, "master_epoch": header.master_epoch,
            "members": state.members, "set_epoch": state.epoch, "code": response.code}


def wait_for_master(controller: str, broker_name: str, timeout_s: float, members=None,
                    not_address: str | None = None) -> dict:
    """Poll :func:`replica_info` until a master is named (other than ``not_address``) and,
    when given, the SyncStateSet is ``members``; AssertionError at the deadline."""
    deadline = time.monotonic() + timeout_s
    info: dict = {}
    while time.monotonic() < deadline:
        try:
            info = replica_info(controller, broker_name)
        except (OSError, TimeoutError, ConnectionError):
            info = {}
        if info.get("master_address") and info["master_address"] != not_address and \
                (members is None or info["members"] == frozenset(members)):
            return info
        time.sleep(0.1)
    raise AssertionError(f"no master{' with SyncStateSet ' + str(members) if members else ''} "
                         f"for {broker_name} within {timeout_s} s (last {info})")


def first_send_ok(address: str, topic: str, deadline_s: float) -> float:
    """Seconds until ``address`` answers a send SEND_OK (probed every 10 ms, reconnecting
    while it restarts its data plane); AssertionError at the deadline."""
    started, client = time.monotonic(), None
    try:
        while time.monotonic() - started < deadline_s:
            try:
                if client is None:
                    client = SyncRemotingClient()
                    client.connect(address, _TIMEOUT_MS)
                response = client.invoke(_send_request(topic, 0, 4, "probe", b"probe|"),
                                         _TIMEOUT_MS)
                if response.code == ResponseCode.SUCCESS:
                    return time.monotonic() - started
            except (OSError, TimeoutError, ConnectionError):
                if client is not None:
                    client.close()
                client = None
            time.sleep(0.01)
    finally:
        if client is not None:
            client.close()
    raise AssertionError(f"{address} did not answer SEND_OK within {deadline_s} s")


def _send_request(topic: str, queue_id: int, queues: int, key: str, body: bytes):
    properties = props.encode_properties({"KEYS": key, "UNIQ_KEY": key, "WAIT": "true"})
    ext = {"a": "controller_load", "b": topic, "c": "TBW102", "d": str(queues),
           "e": str(queue_id), "f": "0", "g": str(time.time_ns() // 1_000_000), "h": "0",
           "i": properties, "j": "0", "k": "false", "m": "false"}
    return create_request(RequestCode.SEND_MESSAGE_V2, ext, body)


class SendLoad:
    """Concurrent senders against a controller-mode broker set (see the module docstring).

    ``pace_s``: each sender's pause after a SEND_OK (0: as fast as the broker answers).
    ``acked``: key -> (broker address, monotonic time sent, monotonic time answered) of every
    SEND_OK; ``answers``:
    Counter of (broker address, response code); ``failures``: count of sends that got no
    answer (connection lost, timeout)."""

    def __init__(self, controller: str, broker_name: str, topic: str, queues: int = 4,
                 senders: int = 64, body_bytes: int = 256, pace_s: float = 0.0):
        self.controller = controller
        self.broker_name = broker_name
        self.topic = topic
        self.queues = queues
        self.senders = senders
        self.padding = b"x" * max(body_bytes - 16, 0)
        self.pace_s = pace_s            # each sender's pause after a SEND_OK
        self.acked: dict[str, tuple[str, float, float]] = {}
        self.answers: collections.Counter = collections.Counter()
        self.failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._master_address: str | None = None
        self.error: BaseException | None = None

    # --- control ---------------------------------------------------------------------------
    def start(self) -> "SendLoad":
        self._thread = threading.Thread(target=self._main, name="send-load", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
        if self.error is not None:
            raise self.error

    def acked_count(self) -> int:
        return len(self.acked)

    def acked_keys(self) -> list[str]:
        """The keys acknowledged so far (a copy: the senders go on adding)."""
        return list(self.acked.copy())

    def wait_acked(self, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.acked) < count:
            if self.error is not None:
                raise self.error
            assert time.monotonic() < deadline, \
                f"{len(self.acked)} of {count} sends acknowledged in {timeout_s} s " \
                f"({dict(self.answers)}, {self.failures} without answer)"
            time.sleep(0.05)

    # --- the load ---------------------------------------------------------------------------
    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as error:      # noqa: BLE001 - reported by stop()
            self.error = error

    async def _run(self) -> None:
        clients: dict[str, RemotingClient] = {}
        self._lookup = asyncio.Lock()
        self._connecting: dict[str, asyncio.Lock] = {}
        try:
            await asyncio.gather(*(self._sender(index, clients)
                                   for index in range(self.senders)))
        finally:
            for client in clients.values():
                client.close()
            for client in clients.values():
                await client.wait_closed()

    async def _master(self, clients: dict) -> str | None:
        """The master the controller names (one look-up at a time for all senders)."""
        if self._master_address is None:
            async with self._lookup:
                if self._master_address is None:
                    try:
                        client = await self._client(self.controller, clients)
                        response = await client.invoke(
                            _replica_info_request(self.broker_name), _TIMEOUT_MS)
                        self._master_address = \
                            _parse_replica_info(response).get("master_address")
                    except (OSError, TimeoutError, ConnectionError):
                        pass
                    if self._master_address is None:
                        await asyncio.sleep(0.1)
        return self._master_address

    async def _client(self, address: str, clients: dict) -> RemotingClient:
        """One connection per address for all senders (connected under a lock)."""
        client = clients.get(address)
        if client is not None and client.is_connected:
            return client
        async with self._connecting.setdefault(address, asyncio.Lock()):
            client = clients.get(address)
            if client is None or not client.is_connected:
                if client is not None:
                    client.close()
                    await client.wait_closed()
                    del clients[address]
                client = RemotingClient()
                await client.connect(address, _TIMEOUT_MS)
                clients[address] = client
        return client

    async def _sender(self, index: int, clients: dict) -> None:
        number = 0
        key = f"s{index}-{number}"
        while not self._stop.is_set():
            master = await self._master(clients)
            if master is None:
                continue
            body = key.encode() + b"|" + self.padding
            request = _send_request(self.topic, number % self.queues, self.queues, key, body)
            sent_at = time.monotonic()
            try:
                client = await self._client(master, clients)
                response = await client.invoke(request, _TIMEOUT_MS + 2000)
            except (OSError, TimeoutError, ConnectionError):
                self.failures += 1
                self._master_address = None
                await asyncio.sleep(0.1)
                continue
            self.answers[(master, response.code)] += 1
            if response.code == ResponseCode.SUCCESS:
                self.acked[key] = (master, sent_at, time.monotonic())
                number += 1
                key = f"s{index}-{number}"
                if self.pace_s:
                    await asyncio.sleep(self.pace_s)
            else:
                # Not the master (SERVICE_NOT_AVAILABLE), or the replicas did not answer in
                # time (FLUSH_SLAVE_TIMEOUT: stored, not promised): ask again, send again.
                self._master_address = None
                await asyncio.sleep(0.1)


def keys_of(bodies_found) -> collections.Counter:
    """Keys of message bodies written by :class:`SendLoad` (``key|padding``)."""
    return collections.Counter(bytes(body).split(b"|", 1)[0].decode() for body in bodies_found)


@dataclasses.dataclass
class CountBack:
    """What :func:`count_back` found: ``acknowledged`` keys looked for, ``stored`` messages
    read, ``missing`` keys not found (lost)."""
    address: str
    acknowledged: int
    stored: int
    missing: list[str]

    def line(self) -> str:
        return (f"count-back on {self.address}: {self.acknowledged} acknowledged, "
                f"{self.stored} stored, {len(self.missing)} missing")


def count_back(address: str, topic: str, queues: int, acked, settle_s: float = 10.0
               ) -> CountBack:
    """Look for every key of ``acked`` (SendLoad's format) among the messages ``address``
    serves in ``topic``'s ``queues``, read with raw pulls from offset 0. A key not found yet is
    looked for again in what the queues gained since, until ``settle_s``: a message is served
    once dispatched, a little after its SEND_OK (and under load that may take a while). What
    is still missing then is lost."""
    wanted = list(acked)
    found: collections.Counter = collections.Counter()
    offsets = [0] * queues
    deadline = time.monotonic() + settle_s
    with client_for(address) as client:
        while True:
            for queue in range(queues):
                bodies_read = read_queue(client, topic, queue, offsets[queue])
                offsets[queue] += len(bodies_read)
                found.update(keys_of(bodies_read))
            missing = [key for key in wanted if key not in found]
            if not missing or time.monotonic() > deadline:
                return CountBack(address, len(wanted), sum(found.values()), missing)
            time.sleep(0.2)


def _metadata_request():
    return create_request(RequestCode.CONTROLLER_GET_METADATA_INFO, {})


def controller_leader(addresses, timeout_s: float, not_address: str | None = None) -> str:
    """The controller leader's address once a live member of ``addresses`` names one (other
    than ``not_address``) and the named one says it leads; AssertionError at the deadline."""
    deadline = time.monotonic() + timeout_s
    seen: dict = {}
    while time.monotonic() < deadline:
        for address in addresses:
            try:
                with SyncRemotingClient() as client:
                    client.connect(address, _TIMEOUT_MS)
                    response = client.invoke(_metadata_request(), _TIMEOUT_MS)
            except (OSError, TimeoutError, ConnectionError):
                continue
            if response.code != ResponseCode.SUCCESS:
                continue
            meta = headers.GET_METADATA_RESPONSE.parse(response.ext_fields)
            seen[address] = (meta.controller_leader_address, meta.is_leader)
            leader = meta.controller_leader_address
            if leader and leader != not_address and seen.get(leader, (None, False))[1]:
                return leader
        time.sleep(0.2)
    raise AssertionError(f"no controller leader among {addresses} within {timeout_s} s "
                         f"(answers {seen})")
