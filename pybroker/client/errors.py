# Typed client errors: one exception class per response-code family, carrying the broker's remark.
"""Exceptions raised by :mod:`pybroker.client`.

Every failed broker or name-server response becomes a :class:`BrokerResponseError` subclass
chosen by one table (:data:`RESPONSE_ERROR_CLASSES`) from the response code; it keeps the code,
the remark and the address that answered. Waits that run out raise :class:`RequestTimeoutError`
(also a builtin ``TimeoutError``). An address that cannot be connected to raises
:class:`UnreachableError` (:class:`NameServerUnreachableError` when no name server answers),
a builtin ``ConnectionError`` too; connections lost later stay builtin ``ConnectionError``.
docs/client.md ("Errors and exceptions") says what each means and what to do.
"""
from typing import Optional

from pybroker.errors import BrokerError
from pybroker.protocol.codes import SEND_RETRY_RESPONSE_CODES, ResponseCode


class ClientError(BrokerError):
    """Base of every client-side error."""


class ClientStateError(ClientError):
    """A call the client's state does not allow (not started, already shut down)."""


class RequestTimeoutError(ClientError, TimeoutError):
    """A request or wait did not finish within its timeout."""


class NoRouteError(ClientError):
    """No name server knows a route (or no writable/readable queue) for the topic."""


class MessageTooLargeError(ClientError, ValueError):
    """A body (or batch) over the producer's ``max_message_size``, refused before sending.

    ``size``: the body's bytes; ``size_max``: the limit. The broker's own limit is
    ``maxMessageSize`` in broker.conf (4 MiB by default, as the producer's)."""

    def __init__(self, what: str, size: int, size_max: int):
        self.size = size
        self.size_max = size_max
        super().__init__(
            f"{what} is {size} bytes, over the producer's max_message_size={size_max} (the "
            f"broker refuses bodies over its maxMessageSize, 4194304 by default): send less, "
            f"or raise maxMessageSize in broker.conf and Producer(max_message_size=...) "
            f"together")


class UnreachableError(ClientError, ConnectionError):
    """``address`` could not be connected to; ``reason`` says why in words."""

    def __init__(self, address: str, reason: str, text: Optional[str] = None):
        self.address = address
        self.reason = reason
        super().__init__(text or f"cannot connect to {address} ({reason})")


class NameServerUnreachableError(UnreachableError):
    """None of the name servers of ``namesrv_addr`` could be connected to."""

    def __init__(self, failures: list[tuple[str, str]]):
        self.failures = failures
        where = "; ".join(f"{address} ({reason})" for address, reason in failures)
        first_address, first_reason = failures[0]
        super().__init__(first_address, first_reason,
                         f"no NameServer reachable at {where}: start one (pybroker "
                         f"standalone serves one on 127.0.0.1:9876) or correct namesrv_addr")


class BrokerResponseError(ClientError):
    """A peer answered with a failure code.

    ``code``: the RocketMQ response code (int). ``remark``: the peer's text, or None.
    ``address``: ``"ip:port"`` of the peer that answered.
    """

    def __init__(self, code: int, remark: Optional[str], address: str = ""):
        self.code = code
        self.remark = remark
        self.address = address
        try:
            name = ResponseCode(code).name
        except ValueError:
            name = "UNKNOWN"
        super().__init__(f"{name} ({code}) from {address or 'peer'}: {remark or ''}")

    @property
    def retriable(self) -> bool:
        """True when producers retry this code on another broker."""
        return self.code in _SEND_RETRIABLE


class BrokerSystemError(BrokerResponseError):
    """SYSTEM_ERROR (1)."""


class SystemBusyError(BrokerResponseError):
    """SYSTEM_BUSY (2) and FLOW_CONTROL (215): the peer sheds load."""


class RequestNotSupportedError(BrokerResponseError):
    """REQUEST_CODE_NOT_SUPPORTED (3)."""


class NotANameServerError(RequestNotSupportedError):
    """A ``namesrv_addr`` entry answered REQUEST_CODE_NOT_SUPPORTED to a request every name
    server serves (route, cluster or topic list): it is something else, usually a broker's
    port."""

    def __init__(self, code: int, remark: Optional[str], address: str = ""):
        super().__init__(code, remark, address)
        self.args = (f"{address} is not a NameServer: it refused a request every NameServer "
                     f"serves ({remark or 'REQUEST_CODE_NOT_SUPPORTED'}); namesrv_addr must name "
                     f"NameServers (port 9876 by default), not a broker (10911 by default)",)


class FlushError(BrokerResponseError):
    """Flush/replication codes (10, 11, 12) outside a send, where they are not a success."""


class MessageIllegalError(BrokerResponseError):
    """MESSAGE_ILLEGAL (13): size, properties or name rules broken."""


class ServiceNotAvailableError(BrokerResponseError):
    """SERVICE_NOT_AVAILABLE (14), VERSION_NOT_SUPPORTED (15), GO_AWAY (1500)."""


class NoPermissionError(BrokerResponseError):
    """NO_PERMISSION (16)."""


class TopicError(BrokerResponseError):
    """TOPIC_NOT_EXIST (17) and TOPIC_EXIST_ALREADY (18)."""


class PullStatusError(BrokerResponseError):
    """Pull outcome codes 19-21 where a caller did not expect them."""


class QueryNotFoundError(BrokerResponseError):
    """QUERY_NOT_FOUND (22)."""


class SubscriptionError(BrokerResponseError):
    """Subscription and filter codes 23-28."""


class InvalidParameterError(BrokerResponseError):
    """INVALID_PARAMETER (29), ILLEGAL_OPERATION (604)."""


class TransactionError(BrokerResponseError):
    """TRANSACTION_FAILED (4) and the transaction codes 200-203."""


class ConsumerError(BrokerResponseError):
    """CONSUMER_NOT_ONLINE (206), CONSUME_MSG_TIMEOUT (207), NO_MESSAGE (208), polling codes."""


_RC = ResponseCode
RESPONSE_ERROR_CLASSES: dict[int, type] = {
    _RC.SYSTEM_ERROR: BrokerSystemError, _RC.SYSTEM_BUSY: SystemBusyError,
    _RC.FLOW_CONTROL: SystemBusyError,
    _RC.REQUEST_CODE_NOT_SUPPORTED: RequestNotSupportedError,
    _RC.TRANSACTION_FAILED: TransactionError,
    _RC.FLUSH_DISK_TIMEOUT: FlushError, _RC.SLAVE_NOT_AVAILABLE: FlushError,
    _RC.FLUSH_SLAVE_TIMEOUT: FlushError,
    _RC.MESSAGE_ILLEGAL: MessageIllegalError,
    _RC.SERVICE_NOT_AVAILABLE: ServiceNotAvailableError,
    _RC.VERSION_NOT_SUPPORTED: ServiceNotAvailableError, _RC.GO_AWAY: ServiceNotAvailableError,
    _RC.NO_PERMISSION: NoPermissionError, _RC.NO_BUYER_ID: NoPermissionError,
    _RC.NOT_IN_CURRENT_UNIT: NoPermissionError,
    _RC.TOPIC_NOT_EXIST: TopicError, _RC.TOPIC_EXIST_ALREADY: TopicError,
    _RC.PULL_NOT_FOUND: PullStatusError, _RC.PULL_RETRY_IMMEDIATELY: PullStatusError,
    _RC.PULL_OFFSET_MOVED: PullStatusError,
    _RC.QUERY_NOT_FOUND: QueryNotFoundError,
    _RC.INVALID_PARAMETER: InvalidParameterError, _RC.ILLEGAL_OPERATION: InvalidParameterError,
    _RC.CONSUMER_NOT_ONLINE: ConsumerError, _RC.CONSUME_MSG_TIMEOUT: ConsumerError,
    _RC.NO_MESSAGE: ConsumerError, _RC.POLLING_FULL: ConsumerError,
    _RC.POLLING_TIMEOUT: ConsumerError, _RC.BROADCAST_CONSUMPTION: ConsumerError,
}
for _code in range(_RC.SUBSCRIPTION_PARSE_FAILED, _RC.FILTER_DATA_NOT_LATEST + 1):
    RESPONSE_ERROR_CLASSES[_code] = SubscriptionError
for _code in range(_RC.TRANSACTION_SHOULD_COMMIT, _RC.TRANSACTION_STATE_GROUP_WRONG + 1):
    RESPONSE_ERROR_CLASSES[_code] = TransactionError

_SEND_RETRIABLE = frozenset(int(code) for code in SEND_RETRY_RESPONSE_CODES)


def error_for(code: int, remark: Optional[str], address: str = "") -> BrokerResponseError:
    """The typed exception for a failed response ``code`` (BrokerResponseError if unknown)."""
    return RESPONSE_ERROR_CLASSES.get(int(code), BrokerResponseError)(int(code), remark, address)
