# A client connection as the producer and consumer registries keep it (Java ClientChannelInfo).
"""One live client connection of a producer or consumer group."""
import dataclasses

from pybroker.broker.channel import ClientChannel

__all__ = ["ClientChannelInfo", "make_channel_info"]


@dataclasses.dataclass
class ClientChannelInfo:
    """One client connection of a group: ``language``/``version`` as in its last request,
    ``last_update_ms`` = time of its last heartbeat (ms)."""
    client_id: str
    channel: ClientChannel
    language: int
    version: int
    last_update_ms: int

    @property
    def channel_id(self) -> str:
        return self.channel.channel_id


def make_channel_info(channel: ClientChannel, client_id: str, now_ms: int) -> ClientChannelInfo:
    """A :class:`ClientChannelInfo` for ``channel`` as of its latest request."""
    return ClientChannelInfo(client_id, channel, channel.language, channel.version, now_ms)
