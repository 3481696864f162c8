# What Python sees of pybroker._fast.socket_reader (a plain socket's reads, in C).
import asyncio

class SocketReader:
    def __init__(self, connection: object, transport: asyncio.Transport, fd: int,
                 initial_bytes: int) -> None: ...
    def __call__(self) -> None: ...
