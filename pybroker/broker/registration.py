# Registration of this broker with every NameServer (REGISTER_BROKER / UNREGISTER_BROKER).
"""Broker -> NameServer registration (protocol.md §2.11, §7.4).

:class:`NamesrvRegistration` builds the REGISTER_BROKER request from the broker config and the
current topic configs and sends it to every configured NameServer, at start, every
``registerNameServerPeriod`` and whenever topics change; UNREGISTER_BROKER at shutdown. A
NameServer that does not answer is logged and retried on the next round; it never blocks the
broker.
"""
import asyncio
import logging

from pybroker.protocol import bodies, headers
from pybroker.protocol.constants import Perm
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_request
from pybroker.remoting.client import RemotingClientPool
from pybroker.remoting.tls import outgoing_tls
from pybroker.acl.signature import inner_signer
from pybroker.tasks import Rounds, within

log = logging.getLogger("pybroker.broker.registration")

REGISTER_TIMEOUT_MS = 6000



def registered_perm(topic_perm: int, broker_permission: int) -> int:
    """A topic's permission as routes show it. Java's registerBrokerAll: a broker that is not
    both readable and writable (brokerPermission=4 to drain it) gives every topic its own
    permission, so routes stop sending (or pulling) there."""
    if broker_permission & (Perm.READ | Perm.WRITE) != Perm.READ | Perm.WRITE:
        return broker_permission
    return topic_perm


class NamesrvRegistration:
    """Keeps this broker registered with the NameServers of ``config.derived``.

    ``topics_document()`` returns the current :class:`TopicConfigDocument` (the metadata
    service's). ``on_registered(response)`` sees each successful REGISTER_BROKER answer (a slave
    learns its master's addresses from it).
    """

    def __init__(self, config, topics_document, on_registered=None):
        self.config = config
        self.topics_document = topics_document
        self.on_registered = on_registered
        self.pool = RemotingClientPool(ssl_context=outgoing_tls(config),
                                       signer=inner_signer(config))
        self._kick = asyncio.Event()
        self.registrations_total = 0

    @property
    def addresses(self) -> list[str]:
        return [f"{host}:{port}" for host, port in self.config.derived.namesrv_addresses]

    def _identity(self) -> dict:
        broker = self.config.broker
        return {"broker_name": broker.broker_name, "broker_addr": self.config.derived.broker_addr,
                "cluster_name": broker.broker_cluster_name, "broker_id": broker.broker_id}

    def register_request(self) -> RemotingCommand:
        """The REGISTER_BROKER request for the current topics."""
        document = self.topics_document()
        version = document.data_version
        topics = {name: topic.to_json() for name, topic in document.topic_config_table.items()}
        permission = self.config.broker.broker_permission
        for topic in topics.values():
            topic["perm"] = registered_perm(topic["perm"], permission)
        body = bodies.encode_register_broker_body(bodies.RegisterBrokerBody(
            bodies.DataVersion(version.timestamp, version.counter), topics), compressed=False)
        values = dict(self._identity(), ha_server_addr=self.config.derived.ha_server_addr,
                      compressed=False, body_crc32=bodies.body_crc32(body))
        ext_fields = headers.encode_header(headers.REGISTER_BROKER_REQUEST, values)
        return create_request(RequestCode.REGISTER_BROKER, ext_fields, body)

    async def register_all(self) -> int:
        """Register with every NameServer now; returns how many accepted."""
        accepted = 0
        for address in self.addresses:
            try:
                response = await self.pool.invoke(address, self.register_request(),
                                                  REGISTER_TIMEOUT_MS)
            except (OSError, TimeoutError, ConnectionError) as error:
                log.warning("register to name server %s failed: %s", address, error)
                continue
            if response.code != ResponseCode.SUCCESS:
                log.warning("register to name server %s refused: code %d %s", address,
                            response.code, response.remark)
                continue
            accepted += 1
            self.registrations_total += 1
            if self.on_registered is not None:
                self.on_registered(response)
        return accepted

    async def unregister_all(self) -> None:
        """UNREGISTER_BROKER on every NameServer (best effort, at shutdown)."""
        ext_fields = headers.encode_header(headers.BROKER_IDENTITY_REQUEST, self._identity())
        for address in self.addresses:
            try:
                await self.pool.invoke(address, create_request(RequestCode.UNREGISTER_BROKER,
                                                               dict(ext_fields)), 3000)
            except (OSError, TimeoutError, ConnectionError) as error:
                log.warning("unregister from name server %s failed: %s", address, error)

    def topics_changed(self) -> None:
        """Register again soon (a topic was created, updated or deleted)."""
        self._kick.set()

    async def run(self) -> None:
        """Register every registerNameServerPeriod and at once on topic changes (the caller
        registers once at start-up before it announces the broker)."""
        period_s = self.config.broker.register_name_server_period / 1000
        # A NameServer's refusal or silence is logged by register_all; a round that raises
        # anything else is logged and retried a period later (pybroker/tasks.py).
        rounds = Rounds("NameServer registration", logger=log)
        while True:
            try:
                await within(self._kick.wait(), period_s)
            except TimeoutError:
                pass
            self._kick.clear()
            with rounds:
                await self.register_all()

    def close(self) -> None:
        self.pool.close()
