# Live producer connections by group (Java ProducerManager).
"""Producer channels registered by heartbeat, per producer group (transaction check-backs and
GET_PRODUCER_CONNECTION_LIST use them). Channels idle for longer than the expiry limit are
dropped by the owner's periodic scan."""
import logging
from collections.abc import Callable, Iterable

from pybroker.broker.channel import ClientChannel
from pybroker.broker.managers.client_channel import ClientChannelInfo

__all__ = ["ProducerManager"]

log = logging.getLogger("pybroker.broker.metadata")


class ProducerManager:
    """Producer groups -> {channel id: ClientChannelInfo}; ``now_ms`` is the clock (ms)."""

    def __init__(self, now_ms: Callable[[], int]):
        self.now_ms = now_ms
        self.producer_groups: dict[str, dict[str, ClientChannelInfo]] = {}

    def register_producer(self, group: str, client: ClientChannelInfo) -> None:
        """Register (or refresh) a producer channel of ``group``."""
        client.last_update_ms = self.now_ms()
        channels = self.producer_groups.setdefault(group, {})
        previous = channels.get(client.channel_id)
        if previous is None:
            channels[client.channel_id] = client
            log.info("new producer connected, group: %s %s", group, client.client_id)
        else:
            previous.last_update_ms = client.last_update_ms
            previous.channel = client.channel

    def unregister_producer(self, group: str, channel_id: str) -> bool:
        """Remove one producer channel of ``group``; True if it was there."""
        channels = self.producer_groups.get(group)
        if channels is None or channels.pop(channel_id, None) is None:
            return False
        if not channels:
            del self.producer_groups[group]
        return True

    def producer_channels(self, group: str) -> list[ClientChannel]:
        """Channels of the live producers of ``group`` (transaction checks), oldest first."""
        return [info.channel for info in self.producer_groups.get(group, {}).values()]

    def producer_clients(self, group: str) -> list[ClientChannelInfo]:
        """ClientChannelInfo of the live producers of ``group`` (GET_PRODUCER_CONNECTION_LIST)."""
        return list(self.producer_groups.get(group, {}).values())

    def find_channel(self, client_id: str) -> ClientChannel | None:
        """The channel of the producer client ``client_id`` (request-reply pushes the reply
        to the requester), the most recently heartbeating one; None if none is live."""
        found = [info for channels in self.producer_groups.values()
                 for info in channels.values() if info.client_id == client_id]
        return max(found, key=lambda info: info.last_update_ms).channel if found else None

    def channel_ids(self) -> set[str]:
        """Every registered producer channel id."""
        return {channel_id for channels in self.producer_groups.values()
                for channel_id in channels}

    def expired_channels(self, now_ms: int, limit_ms: int) -> set[str]:
        """Channel ids without a heartbeat for more than ``limit_ms`` at ``now_ms``."""
        return {channel_id for channels in self.producer_groups.values()
                for channel_id, client in channels.items()
                if now_ms - client.last_update_ms > limit_ms}

    def remove_channels(self, channel_ids: Iterable[str]) -> None:
        """Drop these channels from every group."""
        for group in list(self.producer_groups):
            for channel_id in channel_ids:
                self.unregister_producer(group, channel_id)
