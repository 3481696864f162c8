# QUERY_ASSIGNMENT (400): the broker splits a topic's queues among a group's clients (5.x).
"""The broker-side rebalance of RocketMQ 5.x (Java 5.3.3 QueryAssignmentProcessor).

A 5.x client that leaves rebalancing to the broker (the push consumer with clientRebalance
false, the proxy) asks one broker which queues of a topic are its own. The answer covers the
topic on every broker: the queues come from the NameServer's route (:class:`TopicRoutes`, Java's
TopicRouteInfoManager: fetched on first use, asked again after
loadBalancePollNameServerInterval), the clients from the group's live members here. Each queue
of the answer carries the group's request mode on the topic: the mode set for it
(SET_MESSAGE_REQUEST_MODE), else PULL for a retry topic and defaultMessageRequestMode for
others; a POP group gets defaultPopShareQueueNum.

The split, as Java's doLoadBalance: BROADCASTING gets every queue; CLUSTERING gets every queue
when serverLoadBalancerEnable is false, else the strategy the client names (AVG,
AVG_BY_CIRCLE; pybroker.client.rebalance, the client's own implementation) over the sorted
queues and client ids, or for a POP group Java's allocate4Pop: every broker's queue -1 (pop
every queue) when popShareQueueNum is not in (0, clients - 1), else the client's queues and
those of the popShareQueueNum clients after it, or one queue each when there are more clients
than queues. No answer (a body without ``messageQueueAssignments``: the client keeps what it
has) where Java has none: no route, no live member, an unknown strategy, or an allocation
Java's checks refuse.
"""
import logging
import time
from collections.abc import Callable

from pybroker.broker.context import MetadataContext, MetadataHandler
from pybroker.broker.interfaces import ClientChannel
from pybroker.client.rebalance import allocate_average, allocate_average_by_circle
from pybroker.client.route import sort_queues, subscribe_queues
from pybroker.protocol import bodies, headers, pop_bodies
from pybroker.protocol.bodies import MessageQueue
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_request, create_response
from pybroker.protocol.constants import RETRY_GROUP_TOPIC_PREFIX
from pybroker.protocol.pop_bodies import QueueAssignment
from pybroker.remoting.client import RemotingClientPool

__all__ = ["HANDLERS", "TopicRoutes", "allocate_for_pop", "STRATEGIES"]

log = logging.getLogger("pybroker.broker.pop")

STRATEGIES = {"AVG": allocate_average, "AVG_BY_CIRCLE": allocate_average_by_circle}
ROUTE_TIMEOUT_MS = 3000                # Java TopicRouteInfoManager.GET_TOPIC_ROUTE_TIMEOUT
_LMQ_PREFIX = "%LMQ%"
_LMQ_QUEUE_ID = 0


class TopicRoutes:
    """Readable queues of topics as the NameServers route them (Java TopicRouteInfoManager's
    subscribe side). ``addresses()``: the NameServers now; ``ssl_context``: outgoing TLS."""

    def __init__(self, addresses: Callable[[], list[str]], ssl_context=None,
                 interval_ms: Callable[[], int] = lambda: 30000,
                 clock_s: Callable[[], float] = time.monotonic):
        self.addresses = addresses
        self.interval_ms = interval_ms
        self.clock_s = clock_s
        self.ssl_context = ssl_context
        self.pool = RemotingClientPool(ssl_context=ssl_context)
        self._queues: dict[str, tuple[float, list[MessageQueue]]] = {}

    async def subscribe_queues(self, topic: str) -> list[MessageQueue] | None:
        """The topic's readable queues on every broker; None when no NameServer knows it."""
        cached = self._queues.get(topic)
        now = self.clock_s()
        if cached is not None and cached[1] and now - cached[0] < self.interval_ms() / 1000:
            return cached[1]
        fetched = await self._fetch(topic)
        if fetched is None:
            return cached[1] if cached is not None and cached[1] else None
        if not fetched:
            self._queues.pop(topic, None)       # Java cleanNoneRouteTopic
            return None
        self._queues[topic] = (now, fetched)
        return fetched

    async def _fetch(self, topic: str) -> list[MessageQueue] | None:
        """The route's readable queues; [] when the NameServers say the topic does not exist,
        None when none answered."""
        fields = headers.encode_header(headers.GET_ROUTE_INFO_REQUEST,
                                       {"topic": topic, "accept_standard_json_only": True})
        for address in self.addresses():
            try:
                response = await self.pool.invoke(address, create_request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, dict(fields)), ROUTE_TIMEOUT_MS)
            except (OSError, TimeoutError, ConnectionError) as error:
                log.warning("QueryLoad: route of %s from name server %s failed: %s", topic,
                            address, error)
                continue
            if response.code == ResponseCode.TOPIC_NOT_EXIST:
                return []
            if response.code != ResponseCode.SUCCESS or not response.body:
                log.warning("QueryLoad: route of %s from name server %s: code %d %s", topic,
                            address, response.code, response.remark)
                continue
            try:
                return subscribe_queues(topic, bodies.decode_topic_route(response.body))
            except ValueError as error:
                log.warning("QueryLoad: route of %s from name server %s unreadable: %s",
                            topic, address, error)
        return None

    def close_connections(self) -> None:
        """Close the connections (they belong to the running event loop); the routes stay
        and the next request connects again."""
        self.pool.close()
        self.pool = RemotingClientPool(ssl_context=self.ssl_context)


def allocate_for_pop(strategy, group: str, client_id: str, queues: list[MessageQueue],
                     client_ids: list[str], share: int) -> list[MessageQueue]:
    """Java QueryAssignmentProcessor.allocate4Pop over sorted ``queues`` and ``client_ids``
    (raises ValueError where Java's checks throw)."""
    if share <= 0 or share >= len(client_ids) - 1:
        # Every client pops every queue: one entry per broker, queue id -1.
        return list(dict.fromkeys(MessageQueue(queue.topic, queue.broker_name, -1)
                                  for queue in queues))
    if len(client_ids) <= len(queues):
        result = strategy(group, client_id, queues, client_ids)
        if client_id in client_ids:
            index = client_ids.index(client_id)
            for _ in range(share):
                index = (index + 1) % len(client_ids)
                result += strategy(group, client_ids[index], queues, client_ids)
        return result
    if not client_id or not queues or not client_ids:
        raise ValueError("currentCID, mqAll or cidAll is empty")
    if client_id not in client_ids:
        return []
    return [queues[client_ids.index(client_id) % len(queues)]]


def _request_mode(ctx: MetadataContext, topic: str, group: str) -> tuple[str, int]:
    """(mode, popShareQueueNum) of the group on the topic: the one set by
    SET_MESSAGE_REQUEST_MODE, else PULL for a retry topic and the broker's default."""
    chosen = ctx.metadata.request_modes.mode(topic, group)
    if chosen is not None:
        return chosen.mode, chosen.pop_share_queue_num
    broker = ctx.config.broker
    mode = "PULL" if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) \
        else broker.default_message_request_mode
    return mode, broker.default_pop_share_queue_num if mode == "POP" else 0


async def _load_balance(ctx: MetadataContext, request: pop_bodies.QueryAssignmentRequest,
                        mode: str, share: int) -> list[MessageQueue] | None:
    """Java doLoadBalance: the client's queues, None for no answer."""
    topic, group, client_id = request.topic, request.consumer_group, request.client_id
    broker = ctx.config.broker
    if topic.startswith(_LMQ_PREFIX):
        queues: list[MessageQueue] | None = [MessageQueue(topic, broker.broker_name,
                                                          _LMQ_QUEUE_ID)]
    else:
        queues = await ctx.topic_routes.subscribe_queues(topic)
    if queues is None:
        if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            log.warning("QueryLoad: no assignment for group[%s], the topic[%s] does not exist.",
                        group, topic)
        return None
    if request.message_model == "BROADCASTING" or not broker.server_load_balancer_enable:
        return queues
    info = ctx.metadata.consumers.consumer_group_info(group)
    if info is None:
        log.warning("QueryLoad: no assignment for group[%s] topic[%s], get consumer id list "
                    "failed", group, topic)
        return None
    strategy = STRATEGIES.get(request.strategy_name)
    if strategy is None:
        log.warning("QueryLoad: unsupported strategy [%s]", request.strategy_name)
        return None
    client_ids = sorted(info.client_ids())
    queues = sort_queues(queues)
    try:
        if not client_id or not client_ids or not queues:
            raise ValueError("currentCID, mqAll or cidAll is empty")
        if mode == "POP":
            return allocate_for_pop(strategy, group, client_id, queues, client_ids, share)
        return strategy(group, client_id, queues, client_ids)
    except ValueError as error:
        log.error("QueryLoad: no assignment for group[%s] topic[%s], allocate message queue "
                  "exception. strategy name: %s, ex: %s", group, topic, request.strategy_name,
                  error)
        return None


async def handle_query_assignment(ctx: MetadataContext, channel: ClientChannel,
                                  request: RemotingCommand) -> RemotingCommand | None:
    """QUERY_ASSIGNMENT (400): the queues of the topic this client consumes, with their mode
    (the module docstring)."""
    try:
        question = pop_bodies.decode_query_assignment_request(request.body or b"")
    except ValueError as error:
        return create_response(request, ResponseCode.SYSTEM_ERROR, str(error))
    if question.message_model not in ("CLUSTERING", "BROADCASTING"):
        return create_response(request, ResponseCode.SYSTEM_ERROR,
                               f"messageModel {question.message_model[:32]!r} is not "
                               f"CLUSTERING or BROADCASTING")
    mode, share = _request_mode(ctx, question.topic, question.consumer_group)
    queues = await _load_balance(ctx, question, mode, share)
    assignments = None if queues is None else \
        [QueueAssignment(queue, mode) for queue in sort_queues(set(queues))]
    return create_response(request, ResponseCode.SUCCESS,
                           body=pop_bodies.encode_query_assignment_response(assignments))


HANDLERS: dict[int, MetadataHandler] = {RequestCode.QUERY_ASSIGNMENT: handle_query_assignment}
