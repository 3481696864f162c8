# A client connection as broker handlers see it, whichever process they run in.
"""The :class:`ClientChannel` interface handlers receive, and :class:`Channel`, its value type.

In a remoting worker a Channel wraps the client's own connection. In the metadata service it is
rebuilt from the ext fields the worker adds when it forwards a request
(:data:`FORWARD_EXT_CHANNEL` ...), and ``send`` routes back through that worker.
"""
from dataclasses import dataclass, field
from typing import Callable, Protocol

from pybroker.protocol.command import RemotingCommand

# Ext fields a remoting worker adds to a request it forwards to the metadata service.
FORWARD_EXT_CHANNEL = "__pb_channel"
FORWARD_EXT_ADDRESS = "__pb_addr"
FORWARD_EXT_LANGUAGE = "__pb_lang"
FORWARD_EXT_VERSION = "__pb_ver"
FORWARD_EXT_KEYS = (FORWARD_EXT_CHANNEL, FORWARD_EXT_ADDRESS, FORWARD_EXT_LANGUAGE,
                    FORWARD_EXT_VERSION)


class ClientChannel(Protocol):
    """One client connection, whichever process the handler runs in.

    ``channel_id`` is unique in the broker (``"<worker>:<connection>"``); ``language`` and
    ``version`` are those of the client's latest request."""
    channel_id: str
    remote_address: str
    language: int
    version: int

    def send(self, command: RemotingCommand) -> None:
        """Write ``command`` to the client (a late response or a oneway request); raises
        ConnectionError when the connection is gone."""


def _refuse_send(command: RemotingCommand) -> None:
    raise ConnectionError("this channel cannot send")


@dataclass
class Channel:
    """One client connection.

    ``channel_id`` is unique in the broker (``"<worker>:<connection>"``); ``remote_address`` is
    the client's ``ip:port``; ``language``/``version`` come from its latest request; ``send``
    writes a command (a late response, or a oneway request such as
    NOTIFY_CONSUMER_IDS_CHANGED) to the client.
    """
    channel_id: str
    remote_address: str
    language: int = 0
    version: int = 0
    send: Callable[[RemotingCommand], None] = field(default=_refuse_send, repr=False,
                                                   compare=False)

    def forward_ext_fields(self) -> dict[str, str]:
        """The ext fields that carry this channel across to the metadata service."""
        return {FORWARD_EXT_CHANNEL: self.channel_id, FORWARD_EXT_ADDRESS: self.remote_address,
                FORWARD_EXT_LANGUAGE: str(self.language), FORWARD_EXT_VERSION: str(self.version)}

    @classmethod
    def from_forwarded(cls, ext_fields: dict[str, str],
                       send: Callable[[RemotingCommand], None]) -> "Channel":
        """Rebuild the channel of a forwarded request (and strip the forwarding fields)."""
        channel_id = ext_fields.pop(FORWARD_EXT_CHANNEL, "")
        address = ext_fields.pop(FORWARD_EXT_ADDRESS, "")
        language = ext_fields.pop(FORWARD_EXT_LANGUAGE, "0")
        version = ext_fields.pop(FORWARD_EXT_VERSION, "0")
        if not channel_id:
            raise ValueError("forwarded request carries no channel")
        return cls(channel_id, address, int(language), int(version), send)
