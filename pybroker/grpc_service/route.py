# QueryRoute and QueryAssignment: this broker's queues of a topic, reached at its gRPC endpoint.
"""The proxy's ``RouteActivity`` for a broker that serves its own queues.

A gRPC endpoint of pybroker serves the queues of the broker it runs in (docs/compatibility.md:
topics whose queues live on other brokers are the Java proxy's case). So a route lists this
broker alone, named ``brokerName`` with its ``brokerId``, at the addresses the client used
(``endpoints`` of the request, with grpcServerPort, as the proxy answers with its own
addresses), and the topic's queues split by permission as the proxy splits them: read-only,
write-only, read-write, then none. The permission is the topic's as this broker registers it
(brokerPermission overrides it when the broker is not read-write). A topic this broker does not
have is TOPIC_NOT_FOUND with the NameServer's remark, as the proxy relays it.
"""
from pybroker.broker.attributes import MESSAGE_TYPE, TopicMessageType
from pybroker.broker.registration import registered_perm
from pybroker.grpc_service import checks
from pybroker.grpc_service.status import OK_STATUS, Code, GrpcRefused, status
from pybroker.protocol.constants import Perm
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb

_ACCEPTED_TYPES = {
    TopicMessageType.NORMAL: (pb.NORMAL,), TopicMessageType.FIFO: (pb.FIFO,),
    TopicMessageType.TRANSACTION: (pb.TRANSACTION,), TopicMessageType.DELAY: (pb.DELAY,),
    TopicMessageType.MIXED: (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)}
_READ, _WRITE = int(Perm.READ), int(Perm.WRITE)


def topic_message_type(topic_config) -> str:
    """TopicConfig.getTopicMessageType: the ``message.type`` attribute, NORMAL without one;
    UNSPECIFIED for a topic this broker does not have (the proxy's metadata service)."""
    if topic_config is None:
        return TopicMessageType.UNSPECIFIED
    attributes = topic_config.attributes or {}
    return str(attributes.get(MESSAGE_TYPE.name, MESSAGE_TYPE.default))


# The proxy's TopicRouteService refusal is an MQClientException(TOPIC_NOT_EXIST, ...) whose
# message (what its status carries) is "CODE: 17  DESC: <text>" with FAQUrl's default URL
# appended: seen from rocketmq-proxy 5.3.3 for QueryRoute, QueryAssignment and ReceiveMessage.
_FAQ_DEFAULT_URL = "https://rocketmq.apache.org/docs/bestPractice/06FAQ"


def not_found(topic: str) -> GrpcRefused:
    return GrpcRefused(Code.TOPIC_NOT_FOUND,
                       f"CODE: 17  DESC: No topic route info in name server for the topic: "
                       f"{topic}\nFor more information, please visit the url, {_FAQ_DEFAULT_URL}")


def topic_perm(host, topic_config) -> int:
    return registered_perm(topic_config.perm, host.ctx.config.broker.broker_permission)


def this_broker(host, endpoints: pb.Endpoints) -> pb.Broker:
    """This broker at the client's addresses with the gRPC port (convertToAddressList)."""
    config = host.ctx.config
    port = config.grpc.grpc_server_port
    addresses = [pb.Address(host=address.host, port=port) for address in endpoints.addresses]
    scheme = endpoints.scheme if endpoints.scheme != pb.ADDRESS_SCHEME_UNSPECIFIED else pb.IPv4
    return pb.Broker(name=config.broker.broker_name, id=config.broker.broker_id,
                     endpoints=pb.Endpoints(scheme=scheme, addresses=addresses))


def _permission(perm: int) -> pb.Permission:
    readable, writable = bool(perm & _READ), bool(perm & _WRITE)
    if readable and writable:
        return pb.READ_WRITE
    if readable:
        return pb.READ
    if writable:
        return pb.WRITE
    return pb.NONE


def message_queues(topic: pb.Resource, topic_config, perm: int,
                   broker: pb.Broker) -> list[pb.MessageQueue]:
    """genMessageQueueFromQueueData."""
    reads, writes = topic_config.read_queue_nums, topic_config.write_queue_nums
    read_only = write_only = both = none = 0
    if perm & _READ and perm & _WRITE:
        both = min(reads, writes)
        read_only, write_only = reads - both, writes - both
    elif perm & _WRITE:
        write_only = writes
    elif perm & _READ:
        read_only = reads
    else:
        none = max(1, max(reads, writes))
    accepted = _ACCEPTED_TYPES.get(topic_message_type(topic_config),
                                   (pb.MESSAGE_TYPE_UNSPECIFIED,))
    queues: list[pb.MessageQueue] = []
    for count, permission in ((read_only, pb.READ), (write_only, pb.WRITE),
                              (both, pb.READ_WRITE), (none, pb.NONE)):
        for _ in range(count):
            queues.append(pb.MessageQueue(topic=topic, id=len(queues), permission=permission,
                                          broker=broker, accept_message_types=accepted))
    return queues


async def query_route(host, rctx, request: spb.QueryRouteRequest) -> spb.QueryRouteResponse:
    checks.validate_topic(request.topic.name)
    topic_config = host.ctx.metadata.topic_config(request.topic.name)
    if topic_config is None:
        raise not_found(request.topic.name)
    broker = this_broker(host, request.endpoints)
    queues = message_queues(request.topic, topic_config, topic_perm(host, topic_config), broker)
    return spb.QueryRouteResponse(status=OK_STATUS, message_queues=queues)


async def query_assignment(host, rctx,
                           request: spb.QueryAssignmentRequest) -> spb.QueryAssignmentResponse:
    """One assignment of queue -1 (the broker pops every queue) or, for an orderly group,
    one per readable queue."""
    checks.validate_topic(request.topic.name)
    checks.validate_group(request.group.name)
    topic_config = host.ctx.metadata.topic_config(request.topic.name)
    if topic_config is None:
        raise not_found(request.topic.name)
    group = host.ctx.metadata.subscription_group(request.group.name)
    fifo = group is not None and group.consume_message_orderly
    perm = topic_perm(host, topic_config)
    assignments = []
    if perm & _READ and topic_config.read_queue_nums > 0:
        broker = this_broker(host, request.endpoints)
        permission = _permission(perm)
        ids = range(topic_config.read_queue_nums) if fifo else (-1,)
        assignments = [pb.Assignment(message_queue=pb.MessageQueue(
            topic=request.topic, id=queue_id, permission=permission, broker=broker))
            for queue_id in ids]
    if not assignments:
        return spb.QueryAssignmentResponse(status=status(Code.FORBIDDEN, "no readable queue"))
    return spb.QueryAssignmentResponse(status=OK_STATUS, assignments=assignments)
