# gRPC answers: the proxy's status codes and messages, and the one remoting -> gRPC code table.
"""Status values of RocketMQ 5's gRPC protocol as the Java 5.3.3 proxy builds them.

Every RPC answers with gRPC status OK and a ``status`` field in its response (the proxy's
``ResponseBuilder``); a refusal raised anywhere below an activity is a :class:`GrpcRefused`
with its code and message (Java's ``GrpcProxyException``). A remoting answer (a pybroker
handler's response code and remark) becomes a status through :data:`REMOTING_TO_GRPC`, the
proxy's ``RESPONSE_CODE_MAPPING``: every other code is INTERNAL_SERVER_ERROR with the remark.
"""
from pybroker.protocol.codes import ResponseCode
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb

Code = pb.Code

# ResponseBuilder.RESPONSE_CODE_MAPPING (ClientErrorCode.ACCESS_BROKER_TIMEOUT has no broker
# equivalent: pybroker answers a timed-out forward with SYSTEM_BUSY, as its remoting port does).
REMOTING_TO_GRPC: dict[int, pb.Code] = {
    ResponseCode.SUCCESS: Code.OK,
    ResponseCode.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: Code.NOT_IMPLEMENTED,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
}


class GrpcRefused(Exception):
    """A request answered with ``code`` and ``message`` in its response's status."""

    def __init__(self, code: pb.Code, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


# A ProxyException the proxy wraps in its GrpcProxyException keeps the exception's toString()
# as the message ("...ProxyException: <message>", seen on SDKs behind rocketmq-proxy 5.3.3).
PROXY_EXCEPTION_PREFIX = "org.apache.rocketmq.proxy.common.ProxyException: "


def proxy_exception(code: pb.Code, message: str) -> GrpcRefused:
    """A refusal the proxy raises as a ProxyException (message type conflicts, no writable
    queue, transaction data not found, ...)."""
    return GrpcRefused(code, PROXY_EXCEPTION_PREFIX + message)


def status(code: pb.Code, message: str | None = None) -> pb.Status:
    """``Status{code, message}``; the message defaults to the code's name, as Java's."""
    return pb.Status(code=code, message=message if message is not None else Code.Name(code))


OK_STATUS = status(Code.OK)


def code_of_remoting(remoting_code: int) -> pb.Code:
    """The gRPC code of a remoting response code (ResponseBuilder.buildCode)."""
    return REMOTING_TO_GRPC.get(remoting_code, Code.INTERNAL_SERVER_ERROR)


def status_of_answer(remoting_code: int, remark: str | None) -> pb.Status:
    """ResponseBuilder.buildStatus(int, String): a broker answer the proxy hands on as it is
    (the code through the table; a missing remark reads as the code)."""
    message = remark if remark is not None else str(remoting_code)
    return status(code_of_remoting(remoting_code), message)


def status_of_remoting(remoting_code: int, remark: str | None) -> pb.Status:
    """A broker's refusal as the proxy relays the exception it raises for it: as
    :func:`status_of_answer`, but TOPIC_NOT_EXIST is TOPIC_NOT_FOUND (the proxy's
    TopicRouteHelper.isTopicNotExistError)."""
    if remoting_code == ResponseCode.TOPIC_NOT_EXIST:
        return status(Code.TOPIC_NOT_FOUND, remark if remark is not None else str(remoting_code))
    return status_of_answer(remoting_code, remark)


def raise_for_remoting(remoting_code: int, remark: str | None) -> None:
    """GrpcRefused unless ``remoting_code`` is SUCCESS."""
    if remoting_code != ResponseCode.SUCCESS:
        answer = status_of_remoting(remoting_code, remark)
        raise GrpcRefused(answer.code, answer.message)
