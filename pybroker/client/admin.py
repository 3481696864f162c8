# Admin API basics: topics, routes, cluster info, queue and consumer progress, message lookup.
"""The asyncio admin client (what ``mqadmin`` does for the common cases).

Topic creation and deletion go to every master of a cluster (or one broker address); topic
statistics and consumer progress are assembled from per-queue GET_MIN_OFFSET / GET_MAX_OFFSET /
QUERY_CONSUMER_OFFSET calls, which every broker version answers with plain headers.
"""
import dataclasses
import time
from typing import Any, Optional

from pybroker.client.errors import QueryNotFoundError
from pybroker.client.instance import ClientInstance, check_response, request
from pybroker.client.member import InstanceMember, member_instance
from pybroker.client.message import MessageExt, decode_messages
from pybroker.client.offset_store import OFFSET_UNKNOWN, RemoteOffsetStore
from pybroker.client.pulling import queue_offset_query
from pybroker.client.route import MASTER_ID, subscribe_queues
from pybroker.config import parse_properties
from pybroker.errors import ProtocolError
from pybroker.protocol import bodies, fastjson, headers
from pybroker.protocol.bodies import ClusterInfo, MessageQueue, TopicRouteData
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.constants import PERM_READ_WRITE, UNIQUE_KEY_QUERY_EXT, SystemTopic
from pybroker.protocol.message_id import decode_offset_message_id


@dataclasses.dataclass(frozen=True)
class QueueStats:
    """Queue offsets of one queue: [min_offset, max_offset) holds its messages."""
    min_offset: int
    max_offset: int


@dataclasses.dataclass(frozen=True)
class QueueProgress:
    """A group on one queue: ``broker_offset`` (max) vs ``consumer_offset`` (-1 = none)."""
    broker_offset: int
    consumer_offset: int

    @property
    def lag(self) -> int:
        """Messages not yet consumed."""
        return self.broker_offset - max(self.consumer_offset, 0)


class Admin(InstanceMember):
    """Administration of a cluster through its name servers (``namesrv_addr``) or a shared
    ``instance``. Every call waits at most the instance's request timeout per request."""

    def __init__(self, namesrv_addr: Optional[str] = None, *,
                 instance: Optional[ClientInstance] = None, **instance_options: Any):
        instance = member_instance(namesrv_addr, instance, instance_options)
        self.instance = instance

    async def start(self) -> None:
        """Start the instance."""
        await self.instance.start()

    async def shutdown(self) -> None:
        """Stop the instance."""
        await self.instance.shutdown()

    # --- name server --------------------------------------------------------------------------

    async def cluster_info(self) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO: brokers and clusters."""
        response = await self.instance.invoke_namesrv(
            request(RequestCode.GET_BROKER_CLUSTER_INFO))
        check_response(response, "name server")
        return bodies.decode_cluster_info(response.body or b"{}")

    async def topic_route(self, topic: str) -> Optional[TopicRouteData]:
        """The route of ``topic`` (None when the name server does not know it)."""
        return await self.instance.fetch_route(topic)

    async def topic_list(self) -> list[str]:
        """Every topic the name server knows."""
        response = await self.instance.invoke_namesrv(
            request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        check_response(response, "name server")
        return bodies.decode_topic_list(response.body or b"{}")

    async def _masters(self, cluster: Optional[str]) -> list[str]:
        info = await self.cluster_info()
        names = (info.cluster_addr_table.get(cluster, []) if cluster
                 else list(info.broker_addr_table))
        return [info.broker_addr_table[name].broker_addrs[MASTER_ID] for name in sorted(names)
                if name in info.broker_addr_table
                and MASTER_ID in info.broker_addr_table[name].broker_addrs]

    # --- topics --------------------------------------------------------------------------------

    async def create_topic(self, topic: str, queue_nums: int = 8, *,
                           broker_addr: Optional[str] = None, cluster: Optional[str] = None,
                           perm: int = int(PERM_READ_WRITE), order: bool = False) -> list[str]:
        """UPDATE_AND_CREATE_TOPIC at ``broker_addr``, or at every master of ``cluster`` (all
        masters when None). Returns the broker addresses that created it."""
        remark = headers.validate_topic(topic)
        if remark is not None:
            raise ValueError(remark)
        fields = headers.encode_header(headers.CREATE_TOPIC_REQUEST, {
            "topic": topic, "default_topic": SystemTopic.AUTO_CREATE_TEMPLATE,
            "read_queue_nums": queue_nums, "write_queue_nums": queue_nums, "perm": perm,
            "topic_filter_type": "SINGLE_TAG", "topic_sys_flag": 0, "order": order})
        addresses = [broker_addr] if broker_addr else await self._masters(cluster)
        for address in addresses:
            response = await self.instance.invoke(
                address, request(RequestCode.UPDATE_AND_CREATE_TOPIC, dict(fields)))
            check_response(response, address)
        return addresses

    async def delete_topic(self, topic: str, *, cluster: Optional[str] = None) -> None:
        """DELETE_TOPIC_IN_BROKER at the masters, then DELETE_TOPIC_IN_NAMESRV."""
        for address in await self._masters(cluster):
            fields = headers.encode_header(headers.TOPIC_REQUEST, {"topic": topic})
            response = await self.instance.invoke(
                address, request(RequestCode.DELETE_TOPIC_IN_BROKER, fields))
            check_response(response, address)
        fields = headers.encode_header(headers.DELETE_TOPIC_IN_NAMESRV_REQUEST,
                                       {"topic": topic, "cluster_name": cluster})
        response = await self.instance.invoke_namesrv(
            request(RequestCode.DELETE_TOPIC_IN_NAMESRV, fields))
        check_response(response, "name server")
        self.instance.routes.pop(topic, None)
        self.instance.publish_infos.pop(topic, None)

    async def _queues(self, topic: str) -> list[MessageQueue]:
        route = await self.instance.update_route(topic)
        return [] if route is None else subscribe_queues(topic, route)

    async def topic_stats(self, topic: str) -> dict[MessageQueue, QueueStats]:
        """Min and max queue offsets of every readable queue of ``topic``."""
        stats = {}
        for queue in await self._queues(topic):
            stats[queue] = QueueStats(
                await queue_offset_query(self.instance, queue, RequestCode.GET_MIN_OFFSET),
                await queue_offset_query(self.instance, queue, RequestCode.GET_MAX_OFFSET))
        return stats

    async def consumer_progress(self, group: str, topic: str) -> dict[MessageQueue,
                                                                       QueueProgress]:
        """Per queue of ``topic``: the broker's max offset and ``group``'s consumer offset."""
        store = RemoteOffsetStore(self.instance, group)
        progress = {}
        for queue in await self._queues(topic):
            consumer_offset = await store.read_offset(queue, from_store=True)
            progress[queue] = QueueProgress(
                await queue_offset_query(self.instance, queue, RequestCode.GET_MAX_OFFSET),
                consumer_offset if consumer_offset >= 0 else OFFSET_UNKNOWN)
        return progress

    # --- messages -------------------------------------------------------------------------------

    async def query_message_by_key(self, topic: str, key: str, *, max_num: int = 32,
                                   begin_timestamp_ms: int = 0,
                                   end_timestamp_ms: Optional[int] = None,
                                   unique_key: bool = False) -> list[MessageExt]:
        """Messages of ``topic`` indexed under ``key`` (a KEYS entry, or the UNIQ_KEY when
        ``unique_key``), from every master; at most ``max_num`` per broker."""
        if end_timestamp_ms is None:
            end_timestamp_ms = time.time_ns() // 1_000_000 + 1000
        route = await self.instance.update_route(topic)
        found: list[MessageExt] = []
        for broker in [] if route is None else route.broker_datas:
            address = broker.broker_addrs.get(MASTER_ID)
            if address is None:
                continue
            fields = headers.encode_header(headers.QUERY_MESSAGE_REQUEST, {
                "topic": topic, "key": key, "max_num": max_num,
                "begin_timestamp": begin_timestamp_ms, "end_timestamp": end_timestamp_ms})
            if unique_key:
                fields[UNIQUE_KEY_QUERY_EXT] = "true"
            response = await self.instance.invoke(address, request(RequestCode.QUERY_MESSAGE,
                                                                   fields))
            try:
                check_response(response, address)
            except QueryNotFoundError:
                continue
            messages = decode_messages(response.body or b"", broker.broker_name)
            found += [m for m in messages if m.topic == topic
                      and (key in m.keys or (unique_key and m.uniq_id == key))]
        return found

    async def view_message(self, offset_msg_id: str) -> MessageExt:
        """The message with broker (offset) message id ``offset_msg_id``."""
        host, port, physical_offset = decode_offset_message_id(offset_msg_id)
        if len(host) != 4:
            raise ValueError("IPv6 store hosts are not supported by view_message")
        address = f"{host[0]}.{host[1]}.{host[2]}.{host[3]}:{port}"
        fields = headers.encode_header(headers.VIEW_MESSAGE_REQUEST,
                                       {"physical_offset": physical_offset})
        response = await self.instance.invoke(address, request(RequestCode.VIEW_MESSAGE_BY_ID,
                                                               fields))
        check_response(response, address)
        messages = decode_messages(response.body or b"")
        if len(messages) != 1:
            raise ProtocolError(f"VIEW_MESSAGE_BY_ID answered {len(messages)} records")
        return messages[0]

    async def broker_stats(self, broker_addr: str, stats_name: str,
                           stats_key: str) -> dict[str, dict[str, float]]:
        """VIEW_BROKER_STATS_DATA: {"statsMinute"|"statsHour"|"statsDay": {sum, tps, avgpt}}
        of a broker StatsItem (``TOPIC_PUT_NUMS`` + topic, ``GROUP_GET_NUMS`` +
        ``topic@group``, ...)."""
        fields = {"statsName": stats_name, "statsKey": stats_key}
        response = await self.instance.invoke(broker_addr, request(
            RequestCode.VIEW_BROKER_STATS_DATA, fields))
        check_response(response, broker_addr)
        return fastjson.loads(response.body or b"{}")

    async def consume_stats(self, broker_addr: str, group: str,
                            topic: str = "") -> dict[str, Any]:
        """GET_CONSUME_STATS of one broker: ``consumeTps`` and the per-queue offsets."""
        fields = {"consumerGroup": group, **({"topic": topic} if topic else {})}
        response = await self.instance.invoke(broker_addr, request(
            RequestCode.GET_CONSUME_STATS, fields))
        check_response(response, broker_addr)
        return fastjson.loads(response.body or b"{}")

    async def producer_connection(self, broker_addr: str, group: str) -> list[dict]:
        """GET_PRODUCER_CONNECTION_LIST: the live producers of ``group`` on one broker."""
        response = await self.instance.invoke(broker_addr, request(
            RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group}))
        check_response(response, broker_addr)
        return fastjson.loads(response.body or b"{}").get("connectionSet", [])

    async def broker_config(self, broker_addr: str) -> dict[str, str]:
        """GET_BROKER_CONFIG of one broker: {RocketMQ key: value text} (mqadmin
        getBrokerConfig)."""
        response = await self.instance.invoke(broker_addr,
                                              request(RequestCode.GET_BROKER_CONFIG))
        check_response(response, broker_addr)
        return parse_properties(bytes(response.body or b"").decode("utf-8"),
                                source=broker_addr)

    async def broker_runtime_info(self, broker_addr: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO of one broker: its statistics table."""
        response = await self.instance.invoke(broker_addr,
                                              request(RequestCode.GET_BROKER_RUNTIME_INFO))
        check_response(response, broker_addr)
        return bodies.decode_kv_table(response.body or b"{}")
