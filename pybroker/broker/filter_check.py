# CHECK_CLIENT_CONFIG (46): a consumer asks whether the broker accepts its filter expression.
"""The check a Java push consumer makes at start-up for every non-TAG subscription (Java 4.9
``ClientManageProcessor.checkClientConfig``): TAG or no subscription is SUCCESS; another type
with enablePropertyFilter off is SYSTEM_ERROR "The broker does not support consumer to filter
message by <type>"; an expression that does not compile is SUBSCRIPTION_PARSE_FAILED with the
Java broker's remark (the parser's exception, :mod:`pybroker.filter.parser`); an unknown type
is SUBSCRIPTION_PARSE_FAILED without remark (Java has no filter for it). The consumer fails to
start on anything but SUCCESS. Stateless: answered by the remoting worker.
"""
import logging

from pybroker.broker.context import BrokerContext, Handler
from pybroker.broker.interfaces import ClientChannel
from pybroker.broker.message_filter import UNSUPPORTED_REMARK
from pybroker.filter import SelectorError, cached_selector
from pybroker.protocol import bodies, constants
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response

__all__ = ["HANDLERS", "handle_check_client_config"]

log = logging.getLogger(__name__)


async def handle_check_client_config(ctx: BrokerContext, channel: ClientChannel,
                                     request: RemotingCommand) -> RemotingCommand | None:
    """CHECK_CLIENT_CONFIG (46); body: CheckClientRequestBody JSON."""
    if request.body is None or len(request.body) == 0:
        return create_response(request, ResponseCode.SYSTEM_ERROR,
                               "CHECK_CLIENT_CONFIG needs a CheckClientRequestBody")
    try:
        check = bodies.decode_check_client_request(request.body)
    except ValueError as error:
        return create_response(request, ResponseCode.SYSTEM_ERROR, str(error)[:200])
    subscription = check.subscription
    if subscription is None or subscription.expression_type == constants.EXPRESSION_TYPE_TAG:
        return create_response(request, ResponseCode.SUCCESS)
    expression_type = subscription.expression_type
    if not ctx.config.broker.enable_property_filter:
        return create_response(request, ResponseCode.SYSTEM_ERROR,
                               UNSUPPORTED_REMARK + expression_type)
    if expression_type != constants.EXPRESSION_TYPE_SQL92:
        return create_response(request, ResponseCode.SUBSCRIPTION_PARSE_FAILED)
    try:
        cached_selector(subscription.sub_string)
    except SelectorError as error:
        log.warning("Client %s@%s filter message, but failed to compile expression! sub=%r, "
                    "error=%s", check.client_id, check.group, subscription.sub_string[:200],
                    error.remark[:200])
        return create_response(request, ResponseCode.SUBSCRIPTION_PARSE_FAILED, error.remark)
    return create_response(request, ResponseCode.SUCCESS)


HANDLERS: dict[int, Handler] = {RequestCode.CHECK_CLIENT_CONFIG: handle_check_client_config}
