# Commands the broker sends to clients, and the answers it waits for (Java Broker2Client).
"""NOTIFY_CONSUMER_IDS_CHANGED (oneway) and calls that wait for the client's answer
(GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY), correlated by (channel id, opaque)."""
import asyncio
import logging
from collections.abc import Iterable

from pybroker.broker.channel import ClientChannel
from pybroker.broker.managers.client_channel import ClientChannelInfo
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.command import RemotingCommand, create_request

__all__ = ["ClientCalls", "CLIENT_CALL_TIMEOUT_MS"]

log = logging.getLogger("pybroker.broker.metadata")

CLIENT_CALL_TIMEOUT_MS = 10_000       # Java Broker2Client.callClient


def _expire_client_call(future: asyncio.Future, timeout_ms: int) -> None:
    """Fail a broker -> client call still waiting after ``timeout_ms``."""
    if not future.done():
        future.set_exception(TimeoutError(f"no answer from the client in {timeout_ms} ms"))


class ClientCalls:
    """Broker -> client commands; ``timeout_ms`` is the default wait of :meth:`call_client`."""

    def __init__(self, timeout_ms: int = CLIENT_CALL_TIMEOUT_MS):
        self.timeout_ms = timeout_ms
        # Calls awaiting the client's response: (channel_id, opaque) -> future.
        self._calls: dict[tuple[str, int], asyncio.Future] = {}

    @staticmethod
    def notify_consumer_ids_changed(group: str, clients: Iterable[ClientChannelInfo]) -> int:
        """Send NOTIFY_CONSUMER_IDS_CHANGED (oneway) to each client; returns the count sent. A
        channel that cannot send is skipped (it will expire)."""
        sent = 0
        for client in list(clients):
            request = create_request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                     {"consumerGroup": group}, oneway=True)
            try:
                client.channel.send(request)
                sent += 1
            except (ConnectionError, OSError, RuntimeError) as error:
                log.warning("notify consumer ids changed to %s failed: %s",
                            client.client_id, error)
        return sent

    async def call_client(self, channel: ClientChannel, request: RemotingCommand,
                          timeout_ms: int | None = None) -> RemotingCommand:
        """Send ``request`` to the client on ``channel`` and wait for its response.

        ``timeout_ms`` defaults to the manager's (10 s, Java's). Correlation is by (channel
        id, opaque): whoever receives the client's response (the remoting worker relays
        responses it did not originate to the service) hands it to
        :meth:`complete_client_call`. Raises TimeoutError after ``timeout_ms`` and
        ConnectionError when the channel cannot send.
        """
        if timeout_ms is None:
            timeout_ms = self.timeout_ms
        key = (channel.channel_id, request.opaque)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._calls[key] = future
        # A timer on the future itself (pybroker.tasks.within would make a task of it: the
        # future is the answer's, resolved by the response's arrival).
        timer = loop.call_later(timeout_ms / 1000, _expire_client_call, future, timeout_ms)
        try:
            channel.send(request)
            return await future
        finally:
            timer.cancel()
            self._calls.pop(key, None)

    def complete_client_call(self, channel_id: str, response: RemotingCommand) -> bool:
        """Deliver a client's response to the :meth:`call_client` waiting for it; False when
        none waits (late or unknown: dropped, as Java drops unmatched responses)."""
        future = self._calls.pop((channel_id, response.opaque), None)
        if future is None or future.done():
            return False
        future.set_result(response)
        return True
