# What Python sees of pybroker._fast.socket_reader (a plain socket's reads, in C).
import asyncio

class CTaker:
    """A frame taker's step the reader calls in C (send/port.pyx PortTake)."""

class SocketReader:
    def __init__(self, connection: object, transport: asyncio.Transport, fd: int,
                 initial_bytes: int) -> None: ...
    def use_taker(self, taker: object) -> None:
        """The connection walks its buffer with ``taker`` from now on."""
    def __call__(self) -> None: ...
