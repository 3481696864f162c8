# Admin handlers of connections: who is connected, and the calls forwarded to a consumer.
"""Connection requests of ``mqadmin`` (consumerConnection, producerConnection) and the
requests it makes of one consumer through the broker (consumerStatus's running info,
CONSUME_MESSAGE_DIRECTLY), run in the metadata service (protocol.md §2.10, §2.12).

GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY are forwarded to the client's channel
with :meth:`MetadataState.call_client` (correlated by channel id and opaque; the service hands
the client's response to :meth:`MetadataState.complete_client_call`); the client's answer is
returned under the admin request's opaque.
"""
from pybroker.broker.admin.answers import answer_error, answer_ok, language_name, sorted_json
from pybroker.broker.context import MetadataContext, MetadataHandler
from pybroker.broker.interfaces import ClientChannel
from pybroker.broker.managers.consumer import subscription_to_json
from pybroker.protocol import constants
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_request, create_response
from pybroker.protocol.headers import parse_request_header
from pybroker.protocol.message_id import decode_offset_message_id

__all__ = ["HANDLERS", "encode_consumer_connection"]

V3_1_8_SNAPSHOT = 62            # MQVersion ordinal: oldest client that answers 307/309


def encode_consumer_connection(info) -> bytes:
    """ConsumerConnection of a :class:`pybroker.broker.metadata.ConsumerGroupInfo`."""
    connections = [{"clientAddr": client.channel.remote_address, "clientId": client.client_id,
                    "language": language_name(client.language), "version": client.version}
                   for client in info.channels.values()]
    return sorted_json({
        "connectionSet": connections,
        "consumeFromWhere": constants.ConsumeFromWhere(info.consume_from_where).name,
        "consumeType": constants.ConsumeType(info.consume_type).name,
        "messageModel": constants.MessageModel(info.message_model).name,
        "subscriptionTable": {topic: subscription_to_json(subscription)
                              for topic, subscription in info.subscriptions.items()},
    })


async def handle_get_consumer_connection_list(ctx: MetadataContext, channel: ClientChannel,
                                              request: RemotingCommand) -> RemotingCommand | None:
    """GET_CONSUMER_CONNECTION_LIST (203): the group's live connections and subscriptions;
    CONSUMER_NOT_ONLINE when it has none."""
    header = parse_request_header(request.code, request.ext_fields)
    info = ctx.metadata.consumers.consumer_group_info(header.consumer_group)
    if info is None:
        return answer_error(request, f"the consumer group[{header.consumer_group}] not online",
                            ResponseCode.CONSUMER_NOT_ONLINE)
    return answer_ok(request, encode_consumer_connection(info))


async def handle_get_producer_connection_list(ctx: MetadataContext, channel: ClientChannel,
                                              request: RemotingCommand) -> RemotingCommand | None:
    """GET_PRODUCER_CONNECTION_LIST (204): ProducerConnection of the group's live producers;
    SYSTEM_ERROR "the producer group[g] not exist" when it has none (as Java)."""
    header = parse_request_header(request.code, request.ext_fields)
    clients = ctx.metadata.producers.producer_clients(header.producer_group)
    if not clients:
        return answer_error(request, f"the producer group[{header.producer_group}] not exist")
    connections = [{"clientAddr": client.channel.remote_address, "clientId": client.client_id,
                    "language": language_name(client.language), "version": client.version}
                   for client in clients]
    return answer_ok(request, sorted_json({"connectionSet": connections}))


async def _call_consumer(ctx, request, code: int, group: str, client_id: str | None):
    client = ctx.metadata.consumers.find_consumer_channel(group, client_id or "")
    if client is None:
        return answer_error(request, f"The Consumer <{group}> <{client_id}> not online")
    if client.version < V3_1_8_SNAPSHOT:
        return answer_error(request, f"The Consumer <{client_id}> Version <{client.version}> "
                                     "too low to finish, please upgrade it to V3_1_8_SNAPSHOT")
    forwarded = create_request(code, dict(request.ext_fields), request.body)
    try:
        answer = await ctx.metadata.client_calls.call_client(client.channel, forwarded)
    except TimeoutError as error:
        return answer_error(request, f"consumer <{group}> <{client_id}> Timeout: {error!r}",
                            ResponseCode.CONSUME_MSG_TIMEOUT)
    except (ConnectionError, OSError, RuntimeError) as error:
        return answer_error(request,
                            f"invoke consumer <{group}> <{client_id}> Exception: {error!r}")
    # The client's answer goes back under the admin request's opaque.
    return create_response(request, answer.code, answer.remark, dict(answer.ext_fields),
                           answer.body)


async def handle_get_consumer_running_info(ctx: MetadataContext, channel: ClientChannel,
                                           request: RemotingCommand) -> RemotingCommand | None:
    """GET_CONSUMER_RUNNING_INFO (307): ask the client; its ConsumerRunningInfo comes back."""
    header = parse_request_header(request.code, request.ext_fields)
    return await _call_consumer(ctx, request, RequestCode.GET_CONSUMER_RUNNING_INFO,
                                header.consumer_group, header.client_id)


def _message_record(ctx, message_id: str | None) -> bytes | None:
    try:
        _, _, physical_offset = decode_offset_message_id(message_id or "")
    except ValueError:
        return None   # Java also forwards the request unchanged when the id does not decode
    selected = ctx.store.look_message_by_offset(physical_offset)
    if selected is None:
        return None
    with selected:
        return bytes(selected.buffer)


async def handle_consume_message_directly(ctx: MetadataContext, channel: ClientChannel,
                                          request: RemotingCommand) -> RemotingCommand | None:
    """CONSUME_MESSAGE_DIRECTLY (309): send the stored message (by offset msgId) to the client
    to consume; its ConsumeMessageDirectlyResult comes back."""
    header = parse_request_header(request.code, request.ext_fields)
    request.ext_fields["brokerName"] = ctx.config.broker.broker_name
    record = _message_record(ctx, header.msg_id)
    if record is not None:
        request.body = record
    return await _call_consumer(ctx, request, RequestCode.CONSUME_MESSAGE_DIRECTLY,
                                header.consumer_group, header.client_id)



HANDLERS: dict[int, MetadataHandler] = {
    RequestCode.GET_CONSUMER_CONNECTION_LIST: handle_get_consumer_connection_list,
    RequestCode.GET_PRODUCER_CONNECTION_LIST: handle_get_producer_connection_list,
    RequestCode.GET_CONSUMER_RUNNING_INFO: handle_get_consumer_running_info,
    RequestCode.CONSUME_MESSAGE_DIRECTLY: handle_consume_message_directly,
}
