# Python face of pybroker._fast.send.port (used by pybroker.proc.send_port).
import asyncio

from typing_extensions import Buffer

from pybroker._fast.send.take import SendPath
from pybroker._fast.socket_reader import CTaker

class PortTake(CTaker):
    core: SendPath
    def __init__(self, core: SendPath, slot: int, putter: object, fast_failure: object,
                 loop: asyncio.AbstractEventLoop) -> None: ...
    def take(self, buffer: Buffer, start: int, end: int) -> tuple[int, int, int]:
        """(position, outcome, frame_length)."""

def committed_has_work(fast_failure: object) -> bool:
    """False when FastFailure.committed would do nothing (the twin test)."""
