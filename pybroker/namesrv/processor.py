# NameServer request handlers: register/route/cluster/KV/admin codes (Java DefaultRequestProcessor).
"""The NameServer's request handlers (protocol.md §2.11), one async function per request code.

A handler is ``async (connection, request) -> RemotingCommand | None``; ``connection`` needs
only ``remote_address`` ("ip:port"), and the connection object itself identifies the broker's
channel in the route table (so closing it drops the broker). Headers are parsed with
:func:`pybroker.protocol.headers.parse_request_header`, whose :class:`HeaderError` the transport
turns into a response. Unknown codes are not handled here: the transport answers
REQUEST_CODE_NOT_SUPPORTED.

Remarks follow the Java NameServer's wording where clients or tools show them.
"""
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from pybroker import clock
from pybroker.namesrv.kv_config import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigManager
from pybroker.namesrv.route_table import RouteInfoManager
from pybroker.protocol import bodies
from pybroker.protocol import headers as H
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response
from pybroker.protocol.constants import MQVersion

log = logging.getLogger(__name__)

Handler = Callable[[Any, RemotingCommand], Coroutine[Any, Any, RemotingCommand | None]]

# Java appends FAQUrl.suggestTodo(APPLY_TOPIC_URL) to this remark; clients only log it.
TOPIC_NOT_EXIST_REMARK = ("No topic route info in name server for the topic: {topic}\n"
                          "See http://rocketmq.apache.org/docs/faq/ for further details.")
CRC32_NOT_MATCH_REMARK = "crc32 not match"


def _success(request: RemotingCommand, ext_fields: dict | None = None,
             body: bytes | None = None) -> RemotingCommand:
    return create_response(request, ResponseCode.SUCCESS, None, ext_fields, body)


class NamesrvProcessor:
    """Handlers over one :class:`RouteInfoManager` and one :class:`KVConfigManager`.

    ``order_message_enable``: add ``orderTopicConf`` from KV namespace ORDER_TOPIC_CONFIG to
    routes (Java ``orderMessageEnable``). ``now_ms``: clock in ms since the epoch (tests inject).
    :attr:`handlers` maps each request code to its handler, for the server's request table.
    """

    def __init__(self, route_table: RouteInfoManager, kv_config: KVConfigManager, *,
                 order_message_enable: bool = False, now_ms: Callable[[], int] = clock.now_ms):
        self.route_table = route_table
        self.kv_config = kv_config
        self.order_message_enable = order_message_enable
        self.now_ms = now_ms
        code = RequestCode
        self.handlers: dict[int, Handler] = {
            code.PUT_KV_CONFIG: self.put_kv_config,
            code.GET_KV_CONFIG: self.get_kv_config,
            code.DELETE_KV_CONFIG: self.delete_kv_config,
            code.GET_KVLIST_BY_NAMESPACE: self.get_kv_list_by_namespace,
            code.REGISTER_BROKER: self.register_broker,
            code.UNREGISTER_BROKER: self.unregister_broker,
            code.QUERY_DATA_VERSION: self.query_data_version,
            code.BROKER_HEARTBEAT: self.broker_heartbeat,
            code.GET_ROUTEINFO_BY_TOPIC: self.get_route_info_by_topic,
            code.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            code.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm_of_broker,
            code.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topic_list,
            code.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            code.DELETE_TOPIC_IN_NAMESRV: self.delete_topic_in_namesrv,
        }

    # --- KV config ------------------------------------------------------------------------------
    async def put_kv_config(self, connection, request: RemotingCommand) -> RemotingCommand:
        """PUT_KV_CONFIG 100: set namespace/key = value (persisted)."""
        header = H.parse_request_header(request.code, request.ext_fields)
        self.kv_config.put(header.namespace, header.key, header.value)
        return _success(request)

    async def get_kv_config(self, connection, request: RemotingCommand) -> RemotingCommand:
        """GET_KV_CONFIG 101: header ``value``, or QUERY_NOT_FOUND when absent."""
        header = H.parse_request_header(request.code, request.ext_fields)
        value = self.kv_config.get(header.namespace, header.key)
        if value is None:
            return create_response(request, ResponseCode.QUERY_NOT_FOUND,
                                   f"No config item, Namespace: {header.namespace} "
                                   f"Key: {header.key}")
        return _success(request, H.encode_header(H.GET_KV_CONFIG_RESPONSE, {"value": value}))

    async def delete_kv_config(self, connection, request: RemotingCommand) -> RemotingCommand:
        """DELETE_KV_CONFIG 102: remove namespace/key (absent is SUCCESS too)."""
        header = H.parse_request_header(request.code, request.ext_fields)
        self.kv_config.delete(header.namespace, header.key)
        return _success(request)

    async def get_kv_list_by_namespace(self, connection,
                                       request: RemotingCommand) -> RemotingCommand:
        """GET_KVLIST_BY_NAMESPACE 219: body KVTable, or QUERY_NOT_FOUND for a namespace
        never used."""
        header = H.parse_request_header(request.code, request.ext_fields)
        table = self.kv_config.namespace(header.namespace)
        if table is None:
            return create_response(request, ResponseCode.QUERY_NOT_FOUND,
                                   f"No config item, Namespace: {header.namespace}")
        return _success(request, body=bodies.encode_kv_table(table))

    def _order_topic_config_body(self) -> bytes | None:
        table = self.kv_config.namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
        return None if table is None else bodies.encode_kv_table(table)

    # --- broker registration --------------------------------------------------------------------
    async def register_broker(self, connection, request: RemotingCommand) -> RemotingCommand:
        """REGISTER_BROKER 103: record the broker and its topics (rules in the route table).

        The body is checked against ``bodyCrc32`` (mismatch: SYSTEM_ERROR "crc32 not match"),
        then decoded (JSON, or zlib when ``compressed``). The answer carries the master's
        ``haServerAddr``/``masterAddr`` for a slave and the ORDER_TOPIC_CONFIG KV table.
        """
        header = H.parse_request_header(request.code, request.ext_fields)
        try:
            body = self._register_body(request, header)
        except ValueError as error:
            log.warning("REGISTER_BROKER from %s refused: %s",
                        getattr(connection, "remote_address", "?"), error)
            return create_response(request, ResponseCode.SYSTEM_ERROR, str(error))
        result = self.route_table.register_broker(
            header.cluster_name, header.broker_addr, header.broker_name, header.broker_id,
            header.ha_server_addr, body.data_version, body.topic_config_table,
            body.filter_server_list, connection, self.now_ms(),
            heartbeat_timeout_ms=header.heartbeat_timeout_millis,
            enable_acting_master=header.enable_acting_master)
        ext_fields = H.encode_header(H.REGISTER_BROKER_RESPONSE, {
            "ha_server_addr": result.ha_server_address, "master_addr": result.master_address})
        return _success(request, ext_fields, self._order_topic_config_body())

    @staticmethod
    def _register_body(request: RemotingCommand, header) -> bodies.RegisterBrokerBody:
        if not request.body:
            if header.body_crc32:
                raise ValueError(CRC32_NOT_MATCH_REMARK)
            # Java registers a body-less broker with DataVersion 0/0 and no topics.
            return bodies.RegisterBrokerBody(bodies.DataVersion(0, 0), {})
        return bodies.decode_register_broker_body(request.body, header.compressed,
                                                  header.body_crc32)

    async def unregister_broker(self, connection, request: RemotingCommand) -> RemotingCommand:
        """UNREGISTER_BROKER 104: forget one broker address (its clean shutdown)."""
        header = H.parse_request_header(request.code, request.ext_fields)
        self.route_table.unregister_broker(header.cluster_name, header.broker_addr,
                                           header.broker_name, header.broker_id)
        return _success(request)

    async def query_data_version(self, connection, request: RemotingCommand) -> RemotingCommand:
        """QUERY_DATA_VERSION 322: header ``changed`` = the body's DataVersion differs from the
        one registered; an unchanged broker counts as heard from. Body: the registered one."""
        header = H.parse_request_header(request.code, request.ext_fields)
        try:
            data_version = bodies.decode_data_version(request.body or b"")
        except ValueError as error:
            return create_response(request, ResponseCode.SYSTEM_ERROR, str(error))
        changed = self.route_table.is_broker_topic_config_changed(header.broker_addr,
                                                                  data_version)
        if not changed:
            self.route_table.update_broker_timestamp(header.broker_addr, self.now_ms())
        registered = self.route_table.broker_data_version(header.broker_addr)
        body = None if registered is None else bodies.encode_data_version(registered)
        return _success(request, H.encode_header(H.QUERY_DATA_VERSION_RESPONSE,
                                                 {"changed": changed}), body)

    async def broker_heartbeat(self, connection,
                               request: RemotingCommand) -> RemotingCommand | None:
        """BROKER_HEARTBEAT 904 (5.x, usually oneway): the broker is alive."""
        header = H.parse_request_header(request.code, request.ext_fields)
        self.route_table.update_broker_timestamp(header.broker_addr, self.now_ms())
        return None if request.is_oneway else _success(request)

    # --- routes and lists -----------------------------------------------------------------------
    async def get_route_info_by_topic(self, connection,
                                      request: RemotingCommand) -> RemotingCommand:
        """GET_ROUTEINFO_BY_TOPIC 105: body TopicRouteData, or TOPIC_NOT_EXIST at once.

        Keys are quoted (standard JSON) for request version >= V4_9_4 or header
        ``acceptStandardJsonOnly``; older clients get fastjson's bare numeric keys.
        """
        header = H.parse_request_header(request.code, request.ext_fields)
        route = self.route_table.topic_route(header.topic)
        if route is None:
            return create_response(request, ResponseCode.TOPIC_NOT_EXIST,
                                   TOPIC_NOT_EXIST_REMARK.format(topic=header.topic))
        if self.order_message_enable:
            route.order_topic_conf = self.kv_config.get(NAMESPACE_ORDER_TOPIC_CONFIG,
                                                        header.topic)
        quoted_keys = request.version >= MQVersion.V4_9_4 or header.accept_standard_json_only
        return _success(request, body=bodies.encode_topic_route(route, quoted_keys))

    async def get_broker_cluster_info(self, connection,
                                      request: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CLUSTER_INFO 106: body ClusterInfo."""
        return _success(request, body=bodies.encode_cluster_info(self.route_table.cluster_info()))

    async def get_all_topic_list(self, connection, request: RemotingCommand) -> RemotingCommand:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER 206: body TopicList of every known topic."""
        return _success(request, body=bodies.encode_topic_list(self.route_table.all_topics()))

    async def get_topics_by_cluster(self, connection,
                                    request: RemotingCommand) -> RemotingCommand:
        """GET_TOPICS_BY_CLUSTER 224: body TopicList of the cluster's topics."""
        header = H.parse_request_header(request.code, request.ext_fields)
        topics = self.route_table.topics_by_cluster(header.cluster)
        return _success(request, body=bodies.encode_topic_list(topics))

    # --- administration -------------------------------------------------------------------------
    async def wipe_write_perm_of_broker(self, connection,
                                        request: RemotingCommand) -> RemotingCommand:
        """WIPE_WRITE_PERM_OF_BROKER 205: clear the write bit of the broker's queues; header
        ``wipeTopicCount``."""
        header = H.parse_request_header(request.code, request.ext_fields)
        count = self.route_table.wipe_write_perm(header.broker_name)
        log.info("wipe write perm of broker[%s], client: %s, %d", header.broker_name,
                 getattr(connection, "remote_address", "?"), count)
        return _success(request, H.encode_header(H.WIPE_WRITE_PERM_RESPONSE,
                                                 {"wipe_topic_count": count}))

    async def delete_topic_in_namesrv(self, connection,
                                      request: RemotingCommand) -> RemotingCommand:
        """DELETE_TOPIC_IN_NAMESRV 216: forget the topic (only on ``clusterName`` if given)."""
        header = H.parse_request_header(request.code, request.ext_fields)
        self.route_table.delete_topic(header.topic, header.cluster_name)
        return _success(request)
