# What Python sees of pybroker._fast.wake (a worker's sleep-flag round, in C).
import asyncio
from typing import Callable, Sequence

class ProducerSide:
    """A ByteRing's producer sleep flag, raised only while ``wanted()``; freed space is work
    only while ``ready()``."""
    def __init__(self, ring: object, wanted: Callable[[], object] | None = None,
                 ready: Callable[[], bool] | None = None) -> None: ...
    def set_sleeping(self) -> bool: ...
    def clear_sleeping(self) -> None: ...

class WhileWanted:
    """Sleep flags armed only while ``wanted()``."""
    flags: list
    wanted: Callable[[], object]
    armed: bool
    def __init__(self, flags: Sequence[object], wanted: Callable[[], object]) -> None: ...
    def set_sleeping(self) -> bool: ...
    def clear_sleeping(self) -> None: ...

def arm_flags(flags: list) -> bool:
    """Set every flag; True (all cleared again) as soon as one reports work."""
def disarm_flags(flags: list) -> None:
    """Clear every flag."""

class AsyncWakeReader:
    """The event loop's reader of a worker's eventfd, running the sleep-flag round."""
    loop: asyncio.AbstractEventLoop
    wake_fd: object
    flags: list
    on_wake: Callable[[], object]
    rounds_max: int
    rounds: int
    def __init__(self, loop: asyncio.AbstractEventLoop, wake_fd: object,
                 flags: Sequence[object], on_wake: Callable[[], object],
                 rounds_max: int = 16) -> None: ...
    def start(self) -> None: ...
    def kick(self) -> None: ...
    def stop(self) -> None: ...
    def run(self) -> None: ...
    def __call__(self) -> None: ...
