# The client instance: connections, name-server lookups, route cache, heartbeats, periodic work.
"""One :class:`ClientInstance` serves any number of producers and consumers in a process.

It owns the connection pool (with the handlers for the broker's requests:
NOTIFY_CONSUMER_IDS_CHANGED and CHECK_TRANSACTION_STATE), the route cache fed by the name servers,
and the periodic work of RocketMQ's client instance: routes every 30 s, heartbeats every 30 s,
consumer offsets every 5 s, rebalance every 20 s. Each is one asyncio task, cancelled and awaited
by :meth:`ClientInstance.shutdown`, so nothing keeps running after it.

Producers and consumers register themselves (:meth:`register_producer`,
:meth:`register_consumer`); a consumer is any object with ``group``, ``consumer_data()``,
``rebalance()``, ``persist_offsets()``, ``route_topics()`` and ``notify_consumer_ids_changed()``.
"""
import asyncio
import functools
import logging
import os
import socket
import ssl
import time
from typing import Any, Awaitable, Callable, Optional

from pybroker.acl.signature import Credentials
from pybroker.client import client_calls
from pybroker.client.errors import (ClientError, ClientStateError, NameServerUnreachableError,
                                    NoRouteError, NotANameServerError, RequestTimeoutError,
                                    UnreachableError, error_for)
from pybroker.client.route import MASTER_ID, TopicPublishInfo
from pybroker.protocol import bodies, headers
from pybroker.protocol.bodies import HeartbeatData, TopicRouteData
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_request
from pybroker.protocol.constants import LanguageCode, SystemTopic
from pybroker.remoting.client import RemotingClient, RemotingClientPool
from pybroker.remoting.server import RequestTable
from pybroker.tasks import Rounds, start_task, within

LOGGER = logging.getLogger("pybroker.client")

REQUEST_TIMEOUT_MS_DEFAULT = 3000
POLL_NAME_SERVER_INTERVAL_MS_DEFAULT = 30_000
HEARTBEAT_BROKER_INTERVAL_MS_DEFAULT = 30_000
PERSIST_CONSUMER_OFFSET_INTERVAL_MS_DEFAULT = 5_000
REBALANCE_INTERVAL_MS_DEFAULT = 20_000
CLOSE_WAIT_MS = 1000
_LANGUAGE = int(LanguageCode.PYTHON)


def request(code: int, ext_fields: Optional[dict] = None, body=None, *,
            oneway: bool = False) -> RemotingCommand:
    """A request stamped with language PYTHON (brokers log it; no behaviour depends on it)."""
    return create_request(code, ext_fields, body, oneway=oneway, language=_LANGUAGE)


def check_response(response: RemotingCommand, address: str,
                   ok_codes=(ResponseCode.SUCCESS,)) -> RemotingCommand:
    """``response`` when its code is in ``ok_codes``, else raise its typed error."""
    if response.code not in ok_codes:
        raise error_for(response.code, response.remark, address)
    return response


# Requests every NameServer serves: REQUEST_CODE_NOT_SUPPORTED to one of them means the
# address is not a NameServer (a broker's port, most often).
_NAMESRV_CORE_CODES = frozenset({RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                 RequestCode.GET_BROKER_CLUSTER_INFO,
                                 RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER})


def unreachable_reason(error: OSError, address: str, timeout_ms: int) -> str:
    """Why a connect to ``address`` failed, in words (the host for a name that does not
    resolve, "connection refused" rather than "[Errno 111] Connect call failed")."""
    if isinstance(error, socket.gaierror):
        host = address.rpartition(":")[0] or address
        return f"host {host!r} is not known: {error.strerror}"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused: nothing listens on that port"
    if isinstance(error, TimeoutError):
        return f"no answer to the connect within {timeout_ms} ms"
    return error.strerror or str(error)


def local_ip() -> str:
    """The IPv4 address this host would use to reach a network (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 1))
            return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def default_instance_name() -> str:
    """``<pid>#<ns>``: what Java uses when the instance name is left as DEFAULT."""
    return f"{os.getpid()}#{time.monotonic_ns()}"


class ClientInstance:
    """Connections, routes and periodic work shared by producers and consumers.

    ``namesrv_addr``: name servers, ``"ip:port"`` separated by ``;``. ``instance_name``: the
    part of the client id after ``ip@`` (default ``pid#ns``). Intervals in ms; every request
    waits at most ``request_timeout_ms`` unless the caller passes its own timeout.
    ``credentials``: an ACL account (:class:`pybroker.acl.signature.Credentials`) that signs
    every request, as Java's AclClientRPCHook. ``ssl_context``: TLS to name servers and brokers
    (:func:`pybroker.remoting.tls.client_context`).
    """

    def __init__(self, namesrv_addr: str, *, instance_name: Optional[str] = None,
                 client_ip: Optional[str] = None,
                 request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
                 poll_name_server_interval_ms: int = POLL_NAME_SERVER_INTERVAL_MS_DEFAULT,
                 heartbeat_broker_interval_ms: int = HEARTBEAT_BROKER_INTERVAL_MS_DEFAULT,
                 persist_consumer_offset_interval_ms: int =
                 PERSIST_CONSUMER_OFFSET_INTERVAL_MS_DEFAULT,
                 rebalance_interval_ms: int = REBALANCE_INTERVAL_MS_DEFAULT,
                 credentials: Optional[Credentials] = None,
                 ssl_context: Optional[ssl.SSLContext] = None):
        self.namesrv_addresses = [a.strip() for a in namesrv_addr.split(";") if a.strip()]
        if not self.namesrv_addresses:
            raise ValueError("namesrv_addr names no name server")
        self.client_id = f"{client_ip or local_ip()}@{instance_name or default_instance_name()}"
        self.request_timeout_ms = request_timeout_ms
        self.credentials = credentials
        self.ssl_context = ssl_context
        self.intervals_ms = {"route": poll_name_server_interval_ms,
                             "heartbeat": heartbeat_broker_interval_ms,
                             "offsets": persist_consumer_offset_interval_ms,
                             "rebalance": rebalance_interval_ms}
        self.producers: dict[str, Any] = {}
        self.consumers: dict[str, Any] = {}
        self.routes: dict[str, TopicRouteData] = {}
        self.publish_infos: dict[str, TopicPublishInfo] = {}
        self.broker_addresses: dict[str, dict[int, str]] = {}
        # Queue -> broker id its last pull answer suggested (Java PullAPIWrapper's table).
        self._pull_from_which_node: dict = {}
        self.table = RequestTable({
            RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: self._on_consumer_ids_changed,
            RequestCode.CHECK_TRANSACTION_STATE: self._on_check_transaction_state,
        })
        for code, handler in client_calls.HANDLERS.items():
            self.table.register(code, functools.partial(handler, self))
        self._pool: Optional[RemotingClientPool] = None
        self._clients: set[RemotingClient] = set()
        self._tasks: list[asyncio.Task] = []
        self._side_tasks: set[asyncio.Task] = set()
        self._users = 0
        self._namesrv_index = 0
        self._route_lock: Optional[asyncio.Lock] = None

    # --- life cycle ------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True between the first :meth:`start` and the matching last :meth:`shutdown`."""
        return self._pool is not None

    async def start(self) -> None:
        """Start (or join) the instance; every start needs one :meth:`shutdown`."""
        self._users += 1
        if self._pool is not None:
            return
        self._pool = RemotingClientPool(
            self.table, ssl_context=self.ssl_context,
            signer=self.credentials.sign if self.credentials is not None else None)
        self._route_lock = asyncio.Lock()
        loops = (("route", self.refresh_routes), ("heartbeat", self.send_heartbeat),
                 ("offsets", self._persist_all_offsets), ("rebalance", self.rebalance_all))
        self._tasks = [start_task(self._every(name, work), f"pybroker-{name}", None, LOGGER)
                       for name, work in loops]

    async def shutdown(self) -> None:
        """Leave the instance; the last user stops every task and closes every connection."""
        if self._users == 0:
            return
        self._users -= 1
        if self._users:
            return
        tasks = self._tasks + list(self._side_tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks, self._side_tasks = [], set()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        for client in self._clients:
            try:
                await within(client.wait_closed(), CLOSE_WAIT_MS / 1000)
            except asyncio.TimeoutError:
                LOGGER.warning("connection to %s did not close in %d ms", client.address,
                               CLOSE_WAIT_MS)
        self._clients.clear()

    async def _every(self, name: str, work: Callable[[], Awaitable[None]]) -> None:
        interval_s = self.intervals_ms[name] / 1000
        # A periodic task survives every bad round (pybroker/tasks.py, never giving up).
        rounds = Rounds(f"periodic {name}", failures_max=None, logger=LOGGER)
        while True:
            await asyncio.sleep(interval_s)
            with rounds:
                try:
                    await work()
                except (ConnectionError, TimeoutError, OSError, ClientError) as error:
                    # An operating error (a peer down, a refusal): one line, tried again next
                    # round.
                    LOGGER.warning("periodic %s failed: %s", name, error)

    def spawn(self, coroutine) -> asyncio.Task:
        """Run ``coroutine`` as a task that :meth:`shutdown` cancels and awaits (an end by an
        error is logged with its cause)."""
        task = start_task(coroutine, f"pybroker-{getattr(coroutine, '__qualname__', 'task')}",
                          None, LOGGER)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)
        return task

    def register_producer(self, group: str, producer: Any) -> None:
        """Add a producer group (ValueError if the group is already registered here)."""
        if group in self.producers:
            raise ValueError(f"producer group {group} already registered in {self.client_id}")
        self.producers[group] = producer

    def register_consumer(self, group: str, consumer: Any) -> None:
        """Add a consumer group (ValueError if the group is already registered here)."""
        if group in self.consumers:
            raise ValueError(f"consumer group {group} already registered in {self.client_id}")
        self.consumers[group] = consumer

    # --- requests ----------------------------------------------------------------------------

    async def _client(self, address: str) -> RemotingClient:
        if self._pool is None:
            raise ClientStateError("client instance is not started")
        try:
            client = await self._pool.client(address)
        except OSError as error:
            if isinstance(error, UnreachableError) or self._pool.closed:
                raise
            reason = unreachable_reason(error, address, self._pool.connect_timeout_ms)
            raise UnreachableError(address, reason) from error
        self._clients.add(client)
        return client

    async def invoke(self, address: str, command: RemotingCommand,
                     timeout_ms: Optional[int] = None) -> RemotingCommand:
        """Send ``command`` to ``address``; its response within ``timeout_ms`` (default: the
        instance's). RequestTimeoutError when none comes; ConnectionError when unreachable."""
        timeout_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        client = await self._client(address)
        try:
            return await client.invoke(command, timeout_ms)
        except TimeoutError as error:
            raise RequestTimeoutError(f"{address}: {error}") from None

    async def invoke_oneway(self, address: str, command: RemotingCommand) -> None:
        """Send ``command`` oneway to ``address`` (no answer)."""
        client = await self._client(address)
        client.invoke_oneway(command)

    async def invoke_namesrv(self, command: RemotingCommand,
                             timeout_ms: Optional[int] = None) -> RemotingCommand:
        """Invoke on the current name server, moving to the next one when it is unreachable.
        NameServerUnreachableError when none can be connected to; NotANameServerError when
        the one that answered refuses a request every name server serves."""
        last_error: Optional[Exception] = None
        failures: list[tuple[str, str]] = []
        for _ in range(len(self.namesrv_addresses)):
            address = self.namesrv_addresses[self._namesrv_index % len(self.namesrv_addresses)]
            try:
                response = await self.invoke(address, command, timeout_ms)
            except UnreachableError as error:
                failures.append((address, error.reason))
                self._namesrv_index += 1
                continue
            except (ConnectionError, OSError, TimeoutError) as error:
                last_error = error
                self._namesrv_index += 1
                continue
            if response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED \
                    and command.code in _NAMESRV_CORE_CODES:
                raise NotANameServerError(response.code, response.remark, address)
            return response
        if last_error is not None:
            raise last_error
        raise NameServerUnreachableError(failures)

    # --- routes ------------------------------------------------------------------------------

    async def fetch_route(self, topic: str, timeout_ms: Optional[int] = None
                          ) -> Optional[TopicRouteData]:
        """The route of ``topic`` from a name server; None when it answers TOPIC_NOT_EXIST."""
        fields = headers.encode_header(headers.GET_ROUTE_INFO_REQUEST,
                                       {"topic": topic, "accept_standard_json_only": True})
        response = await self.invoke_namesrv(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, fields),
                                             timeout_ms)
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        check_response(response, "name server")
        if not response.body:
            return None
        return bodies.decode_topic_route(response.body)

    def _store_route(self, topic: str, route: TopicRouteData) -> None:
        self.routes[topic] = route
        for broker in route.broker_datas:
            self.broker_addresses[broker.broker_name] = dict(broker.broker_addrs)
        current = self.publish_infos.get(topic)
        if current is None or current.route != route:
            self.publish_infos[topic] = TopicPublishInfo(topic, route)

    async def update_route(self, topic: str) -> Optional[TopicRouteData]:
        """Fetch and cache the route of ``topic``; None when the topic does not exist."""
        route = await self.fetch_route(topic)
        if route is not None:
            self._store_route(topic, route)
        return route

    async def publish_info(self, topic: str, default_topic_queue_nums: int = 4,
                           create_topic_key: str = SystemTopic.AUTO_CREATE_TEMPLATE
                           ) -> TopicPublishInfo:
        """Where ``topic`` can be written. A topic unknown to the name server borrows the
        route of ``create_topic_key`` (queues capped at ``default_topic_queue_nums``) so the
        first send creates it. NoRouteError when neither has a writable queue."""
        info = self.publish_infos.get(topic)
        if info is not None and info.ok:
            return info
        assert self._route_lock is not None, "start() the instance first"
        async with self._route_lock:
            route = await self.update_route(topic)
            if route is None:
                template = await self.fetch_route(create_topic_key)
                if template is not None:
                    for queue_data in template.queue_datas:
                        nums = min(default_topic_queue_nums, queue_data.read_queue_nums)
                        queue_data.read_queue_nums = queue_data.write_queue_nums = nums
                    for broker in template.broker_datas:
                        self.broker_addresses[broker.broker_name] = dict(broker.broker_addrs)
                    self.publish_infos[topic] = TopicPublishInfo(topic, template)
        info = self.publish_infos.get(topic)
        if info is None or not info.ok:
            raise NoRouteError(f"no route info of topic {topic} (nor of {create_topic_key})")
        return info

    async def refresh_routes(self) -> None:
        """Re-fetch the route of every topic in use (producers' and consumers')."""
        topics = set(self.publish_infos) | set(self.routes)
        for consumer in list(self.consumers.values()):
            topics |= set(consumer.route_topics())
        for topic in topics:
            try:
                await self.update_route(topic)
            except (ConnectionError, TimeoutError, OSError) as error:
                LOGGER.info("route of %s not refreshed: %s", topic, error)

    def master_address(self, broker_name: str) -> Optional[str]:
        """The master address of ``broker_name`` from the route cache, or None."""
        return self.broker_addresses.get(broker_name, {}).get(MASTER_ID)

    async def find_master(self, broker_name: str, topic: Optional[str] = None) -> str:
        """The master address of ``broker_name``, refreshing ``topic``'s route once if needed."""
        address = self.master_address(broker_name)
        if address is None and topic is not None:
            await self.update_route(topic)
            address = self.master_address(broker_name)
        if address is None:
            raise NoRouteError(f"broker {broker_name} has no known master")
        return address

    def broker_address_for_subscribe(self, broker_name: str, broker_id: int,
                                     only_this_broker: bool = False) -> Optional[str]:
        """Java's findBrokerAddressInSubscribe over the route cache: ``broker_id``'s address;
        for a slave id also id + 1; else, unless ``only_this_broker``, the lowest id known
        (the master while it is routed, a slave once the master is gone)."""
        addresses = self.broker_addresses.get(broker_name) or {}
        address = addresses.get(broker_id)
        if address is None and broker_id != MASTER_ID:
            address = addresses.get(broker_id + 1)
        if address is None and not only_this_broker and addresses:
            address = addresses[min(addresses)]
        return address

    async def find_broker_for_subscribe(self, broker_name: str, broker_id: int = MASTER_ID,
                                        topic: Optional[str] = None) -> str:
        """:meth:`broker_address_for_subscribe` (not only that broker), refreshing ``topic``'s
        route once when the broker name is unknown: where consumers pull and commit."""
        address = self.broker_address_for_subscribe(broker_name, broker_id)
        if address is None and topic is not None:
            await self.update_route(topic)
            address = self.broker_address_for_subscribe(broker_name, broker_id)
        if address is None:
            raise NoRouteError(f"broker {broker_name} has no known address")
        return address

    def pull_from_which_node(self, queue) -> int:
        """The broker id the last pull answer of ``queue`` suggested (master at first)."""
        return self._pull_from_which_node.get(queue, MASTER_ID)

    def suggest_pull_from(self, queue, broker_id: int) -> None:
        """Remember a pull answer's suggestWhichBrokerId for ``queue``'s next pull."""
        self._pull_from_which_node[queue] = broker_id

    # --- heartbeats ---------------------------------------------------------------------------

    def heartbeat_data(self) -> HeartbeatData:
        """The HEART_BEAT body for every registered group."""
        return HeartbeatData(client_id=self.client_id, producer_groups=sorted(self.producers),
                             consumer_datas=[c.consumer_data() for c in self.consumers.values()])

    async def send_heartbeat(self) -> None:
        """HEART_BEAT to every master (and, with consumers, every slave) in the route cache."""
        if not self.producers and not self.consumers:
            return
        body = bodies.encode_heartbeat(self.heartbeat_data())
        for broker_name, addresses in list(self.broker_addresses.items()):
            for broker_id, address in addresses.items():
                if broker_id != MASTER_ID and not self.consumers:
                    continue
                try:
                    response = await self.invoke(address, request(RequestCode.HEART_BEAT,
                                                                  body=body))
                    check_response(response, address)
                except (ConnectionError, TimeoutError, OSError) as error:
                    LOGGER.info("heartbeat to %s (%s) failed: %s", broker_name, address, error)

    async def unregister_client(self, producer_group: Optional[str] = None,
                                consumer_group: Optional[str] = None) -> None:
        """UNREGISTER_CLIENT for one group at every known broker (errors are only logged)."""
        fields = headers.encode_header(headers.UNREGISTER_CLIENT_REQUEST, {
            "client_id": self.client_id, "producer_group": producer_group,
            "consumer_group": consumer_group})
        for addresses in list(self.broker_addresses.values()):
            for address in addresses.values():
                try:
                    await self.invoke(address, request(RequestCode.UNREGISTER_CLIENT,
                                                       dict(fields)))
                except (ConnectionError, TimeoutError, OSError) as error:
                    LOGGER.info("unregister at %s failed: %s", address, error)

    # --- consumers ------------------------------------------------------------------------------

    async def _persist_all_offsets(self) -> None:
        for consumer in list(self.consumers.values()):
            await consumer.persist_offsets()

    async def rebalance_all(self) -> None:
        """Rebalance every registered consumer once."""
        for consumer in list(self.consumers.values()):
            await consumer.rebalance()

    async def _on_consumer_ids_changed(self, connection, command: RemotingCommand) -> None:
        group = (command.ext_fields or {}).get("consumerGroup", "")
        consumer = self.consumers.get(group)
        if consumer is not None:
            LOGGER.info("consumer ids of %s changed: rebalance now", group)
            consumer.notify_consumer_ids_changed()
        return None

    async def _on_check_transaction_state(self, connection, command: RemotingCommand) -> None:
        for producer in list(self.producers.values()):
            handler = getattr(producer, "check_transaction_state", None)
            if handler is not None:
                self.spawn(handler(connection.remote_address, command))
        return None
