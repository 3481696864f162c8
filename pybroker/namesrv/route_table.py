# The NameServer's routing state: clusters, brokers, topic queues, live brokers (RouteInfoManager).
"""What a NameServer knows about its brokers, and the rules that keep it current (protocol.md
§2.11).

Tables (Java ``RouteInfoManager``, 4.9.x shape):

* ``cluster_addr_table``: cluster name -> set of broker names;
* ``broker_addr_table``: broker name -> :class:`~pybroker.protocol.bodies.BrokerData`
  (brokerId -> "ip:port", 0 = master);
* ``topic_queue_table``: topic -> broker name -> :class:`~pybroker.protocol.bodies.QueueData`;
* ``broker_live_table``: broker address -> :class:`BrokerLiveInfo`;
* ``filter_server_table``: broker address -> filter server addresses.

Everything runs on one asyncio loop, so there are no locks: each method is one atomic step.
Channel ids are opaque hashables chosen by the server (it passes the connection object).
Clock values are milliseconds since the epoch, passed in so tests control time.
"""
import dataclasses
import logging
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from pybroker.protocol.bodies import (BrokerData, ClusterInfo, DataVersion, QueueData,
                                      TopicRouteData)
from pybroker.protocol.constants import Perm

log = logging.getLogger(__name__)

MASTER_ID = 0
BROKER_CHANNEL_EXPIRED_TIME_MS = 120_000   # Java's DEFAULT_BROKER_CHANNEL_EXPIRED_TIME


@dataclasses.dataclass(slots=True)
class BrokerLiveInfo:
    """One registered broker address: when it was last heard from (ms), the DataVersion of
    its topic config, its connection, its HA address and how long it may stay silent (ms)."""
    last_update_timestamp_ms: int
    data_version: DataVersion
    channel_id: Hashable | None
    ha_server_address: str | None
    heartbeat_timeout_ms: int


@dataclasses.dataclass(slots=True, frozen=True)
class RegisterBrokerResult:
    """What REGISTER_BROKER answers a slave: its master's HA and remoting addresses (or None)."""
    ha_server_address: str | None = None
    master_address: str | None = None


class RouteInfoManager:
    """The NameServer's routing tables and their update rules (see the module docstring).

    ``broker_channel_expired_time_ms``: how long a broker that sent no heartbeat timeout of its
    own may stay silent before :meth:`scan_not_active` drops it (Java: 120 s).
    """

    def __init__(self, broker_channel_expired_time_ms: int = BROKER_CHANNEL_EXPIRED_TIME_MS):
        if broker_channel_expired_time_ms <= 0:
            raise ValueError("broker_channel_expired_time_ms must be positive")
        self.broker_channel_expired_time_ms = broker_channel_expired_time_ms
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self.filter_server_table: dict[str, list[str]] = {}

    # --- registration ---------------------------------------------------------------------------
    def register_broker(self, cluster_name: str, broker_address: str, broker_name: str,
                        broker_id: int, ha_server_address: str | None,
                        data_version: DataVersion | None,
                        topic_config_table: Mapping[str, Mapping[str, Any]] | None,
                        filter_server_list: Iterable[str], channel_id: Hashable | None,
                        now_ms: int, *, heartbeat_timeout_ms: int | None = None,
                        enable_acting_master: bool | None = None) -> RegisterBrokerResult:
        """Record one REGISTER_BROKER (a broker's periodic heartbeat with its topic configs).

        Topic queue data is taken only from a master (``broker_id`` 0), and only on its first
        registration or when ``data_version`` differs from the one last recorded for
        ``broker_address``; slaves only add their address. ``topic_config_table`` maps topic
        name to a TopicConfig dict with Java field names. ``heartbeat_timeout_ms`` (5.x header)
        overrides the default expiry for this broker. Returns the master's addresses for a
        slave, empty for a master.
        """
        data_version = data_version if data_version is not None else DataVersion()
        self.cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)
        broker_data = self.broker_addr_table.get(broker_name)
        register_first = broker_data is None
        if broker_data is None:
            broker_data = BrokerData(cluster_name, broker_name, {})
            self.broker_addr_table[broker_name] = broker_data
        if enable_acting_master is not None:
            broker_data.enable_acting_master = enable_acting_master
        addresses = broker_data.broker_addrs
        # One ip:port has one role: a slave promoted to master (or the reverse) keeps its
        # address under a new id, so the entry under the old id goes.
        for other_id in [i for i, a in addresses.items() if a == broker_address and i != broker_id]:
            del addresses[other_id]
        register_first = addresses.get(broker_id) is None or register_first
        addresses[broker_id] = broker_address
        if broker_id == MASTER_ID and topic_config_table is not None:
            if register_first or self.is_broker_topic_config_changed(broker_address,
                                                                      data_version):
                for topic_config in topic_config_table.values():
                    self._create_and_update_queue_data(broker_name, topic_config)
        timeout_ms = heartbeat_timeout_ms if heartbeat_timeout_ms and heartbeat_timeout_ms > 0 \
            else self.broker_channel_expired_time_ms
        previous = self.broker_live_table.get(broker_address)
        self.broker_live_table[broker_address] = BrokerLiveInfo(
            now_ms, dataclasses.replace(data_version), channel_id, ha_server_address, timeout_ms)
        if previous is None:
            log.info("new broker registered, %s HAServer: %s", broker_address, ha_server_address)
        filter_servers = list(filter_server_list)
        if filter_servers:
            self.filter_server_table[broker_address] = filter_servers
        else:
            self.filter_server_table.pop(broker_address, None)
        return self._master_of(broker_data, broker_id)

    def _master_of(self, broker_data: BrokerData, broker_id: int) -> RegisterBrokerResult:
        if broker_id == MASTER_ID:
            return RegisterBrokerResult()
        master_address = broker_data.broker_addrs.get(MASTER_ID)
        if master_address is None:
            return RegisterBrokerResult()
        master_live = self.broker_live_table.get(master_address)
        if master_live is None:
            return RegisterBrokerResult()
        return RegisterBrokerResult(master_live.ha_server_address, master_address)

    def _create_and_update_queue_data(self, broker_name: str,
                                      topic_config: Mapping[str, Any]) -> None:
        topic = topic_config["topicName"]
        queue_data = QueueData(broker_name, int(topic_config["readQueueNums"]),
                               int(topic_config["writeQueueNums"]), int(topic_config["perm"]),
                               int(topic_config.get("topicSysFlag") or 0))
        queues = self.topic_queue_table.setdefault(topic, {})
        previous = queues.get(broker_name)
        if previous != queue_data:
            if previous is not None:
                log.info("topic changed, %s OLD: %s NEW: %s", topic, previous, queue_data)
            queues[broker_name] = queue_data

    def is_broker_topic_config_changed(self, broker_address: str,
                                       data_version: DataVersion) -> bool:
        """True when ``data_version`` differs from the one recorded for the address (or none)."""
        live = self.broker_live_table.get(broker_address)
        return live is None or live.data_version != data_version

    def broker_data_version(self, broker_address: str) -> DataVersion | None:
        """The DataVersion last registered by ``broker_address`` (a copy), or None."""
        live = self.broker_live_table.get(broker_address)
        return None if live is None else dataclasses.replace(live.data_version)

    def update_broker_timestamp(self, broker_address: str, now_ms: int) -> None:
        """Mark ``broker_address`` as heard from at ``now_ms`` (QUERY_DATA_VERSION, 5.x
        BROKER_HEARTBEAT); unknown addresses are ignored."""
        live = self.broker_live_table.get(broker_address)
        if live is not None:
            live.last_update_timestamp_ms = now_ms

    def unregister_broker(self, cluster_name: str, broker_address: str, broker_name: str,
                          broker_id: int) -> None:
        """Remove one broker address (UNREGISTER_BROKER, a broker's clean shutdown).

        When the broker name has no address left it leaves its cluster and every topic.
        """
        live = self.broker_live_table.pop(broker_address, None)
        log.info("unregisterBroker, remove from brokerLiveTable %s, %s",
                 "OK" if live is not None else "Failed", broker_address)
        self.filter_server_table.pop(broker_address, None)
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None:
            return
        broker_data.broker_addrs.pop(broker_id, None)
        if broker_data.broker_addrs:
            return
        del self.broker_addr_table[broker_name]
        names = self.cluster_addr_table.get(cluster_name)
        if names is not None:
            names.discard(broker_name)
            if not names:
                del self.cluster_addr_table[cluster_name]
        self._remove_broker_names_from_topics({broker_name})

    # --- expiry ---------------------------------------------------------------------------------
    def scan_not_active(self, now_ms: int) -> list[tuple[str, Hashable | None]]:
        """Drop every broker silent for longer than its timeout at ``now_ms``.

        Returns ``(broker address, channel id)`` of each dropped broker, so the caller can
        close those connections (Java closes the channel too).
        """
        expired = [(address, live.channel_id) for address, live in self.broker_live_table.items()
                   if live.last_update_timestamp_ms + live.heartbeat_timeout_ms < now_ms]
        for address, _ in expired:
            log.warning("The broker channel expired, %s %dms", address,
                        self.broker_live_table[address].heartbeat_timeout_ms)
            self._destroy_broker_address(address)
        return expired

    def channel_closed(self, channel_id: Hashable, remote_address: str | None = None
                       ) -> list[str]:
        """Forget the broker(s) registered over the connection ``channel_id``, which closed.

        ``remote_address`` ("ip:port" of the peer) is the fallback key when no live entry has
        this channel (Java does the same). Returns the broker addresses removed.
        """
        addresses = [address for address, live in self.broker_live_table.items()
                     if live.channel_id is not None and live.channel_id == channel_id]
        if not addresses and remote_address is not None \
                and self._address_known(remote_address):
            addresses = [remote_address]
        for address in addresses:
            log.info("the broker's channel destroyed, %s, clean it's data structure at once",
                     address)
            self._destroy_broker_address(address)
        return addresses

    def _address_known(self, address: str) -> bool:
        return address in self.broker_live_table or any(
            address in data.broker_addrs.values() for data in self.broker_addr_table.values())

    def _destroy_broker_address(self, broker_address: str) -> None:
        self.broker_live_table.pop(broker_address, None)
        self.filter_server_table.pop(broker_address, None)
        removed_names = set()
        for broker_name, broker_data in list(self.broker_addr_table.items()):
            addresses = broker_data.broker_addrs
            for broker_id in [i for i, a in addresses.items() if a == broker_address]:
                del addresses[broker_id]
            if not addresses:
                del self.broker_addr_table[broker_name]
                removed_names.add(broker_name)
        if not removed_names:
            return
        for cluster_name, names in list(self.cluster_addr_table.items()):
            names.difference_update(removed_names)
            if not names:
                del self.cluster_addr_table[cluster_name]
        self._remove_broker_names_from_topics(removed_names)

    def _remove_broker_names_from_topics(self, broker_names: set[str]) -> None:
        for topic, queues in list(self.topic_queue_table.items()):
            for broker_name in broker_names:
                queues.pop(broker_name, None)
            if not queues:
                log.info("remove topic[%s] all queue, from topicQueueTable, because channel "
                         "destroyed", topic)
                del self.topic_queue_table[topic]

    # --- reads ----------------------------------------------------------------------------------
    def topic_route(self, topic: str) -> TopicRouteData | None:
        """The route of ``topic``, or None when no queue or no broker of it is known.

        Queue and broker data are copies sorted by broker name; ``orderTopicConf`` is left
        for the caller (it lives in the KV config).
        """
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        broker_datas = []
        filter_servers: dict[str, list[str]] = {}
        for broker_name in sorted(queues):
            broker_data = self.broker_addr_table.get(broker_name)
            if broker_data is None:
                continue
            broker_datas.append(_copy_broker_data(broker_data))
            for address in broker_data.broker_addrs.values():
                servers = self.filter_server_table.get(address)
                if servers:
                    filter_servers[address] = list(servers)
        if not broker_datas:
            return None
        queue_datas = [dataclasses.replace(queues[name]) for name in sorted(queues)]
        return TopicRouteData(queue_datas, broker_datas, None, filter_servers)

    def cluster_info(self) -> ClusterInfo:
        """Every broker name's addresses and every cluster's broker names (copies)."""
        return ClusterInfo(
            {name: _copy_broker_data(data) for name, data in self.broker_addr_table.items()},
            {cluster: sorted(names) for cluster, names in self.cluster_addr_table.items()})

    def all_topics(self) -> list[str]:
        """Every topic with queue data, sorted."""
        return sorted(self.topic_queue_table)

    def topics_by_cluster(self, cluster_name: str) -> list[str]:
        """Topics with queues on at least one broker of ``cluster_name``, sorted."""
        names = self.cluster_addr_table.get(cluster_name, set())
        return sorted(topic for topic, queues in self.topic_queue_table.items()
                      if not names.isdisjoint(queues))

    # --- administration -------------------------------------------------------------------------
    def delete_topic(self, topic: str, cluster_name: str | None = None) -> None:
        """Forget ``topic``; with ``cluster_name``, only its queues on that cluster's brokers."""
        if not cluster_name:
            self.topic_queue_table.pop(topic, None)
            return
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            return
        for broker_name in self.cluster_addr_table.get(cluster_name, ()):
            queues.pop(broker_name, None)
        if not queues:
            del self.topic_queue_table[topic]

    def wipe_write_perm(self, broker_name: str) -> int:
        """Clear the write bit of every queue on ``broker_name``; returns the topic count."""
        count = 0
        for queues in self.topic_queue_table.values():
            queue_data = queues.get(broker_name)
            if queue_data is not None:
                queue_data.perm &= ~int(Perm.WRITE)
                count += 1
        return count


def _copy_broker_data(broker_data: BrokerData) -> BrokerData:
    return dataclasses.replace(broker_data, broker_addrs=dict(broker_data.broker_addrs))
