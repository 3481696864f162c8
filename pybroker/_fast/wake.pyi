# What Python sees of pybroker._fast.wake (a worker's sleep-flag round, in C).
import asyncio
from typing import Callable, Sequence

class WakeFd:
    """A non-blocking eventfd: signal() from any process, wait() in its owner."""
    fd: int
    signals_sent: int
    wakeups: int
    def __init__(self, fd: int | None = None) -> None: ...
    def fileno(self) -> int: ...
    def signal(self) -> None:
        """Add 1 to the eventfd counter."""
    def consume(self) -> int:
        """Read and reset the counter without blocking; the number of signals, or 0."""
    def wait(self, timeout_ms: float | None) -> bool:
        """Block until signalled or timeout_ms (None: no limit); True if signalled."""
    def close(self) -> None: ...

class DeferredSignal:
    """The appender's wake-up after commits, deferred to the end of the loop's turn."""
    wake_fd: WakeFd
    deferred_max: int
    pending: bool
    deferred: int
    def __init__(self, wake_fd: WakeFd, deferred_max: int) -> None: ...
    def after_commit(self, loop: asyncio.AbstractEventLoop, appender_asleep: bool,
                     puts: int) -> None: ...
    def wake_at_once(self, appender_asleep: bool) -> None: ...
    def __call__(self) -> None: ...

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

def sleep_on(flags: list, wake_fd: WakeFd, timeout_ms: float | None) -> bool:
    """Arm the flags; True at once when one reports work, else wait and clear them."""

class AsyncWakeReader:
    """The event loop's reader of a worker's eventfd, running the sleep-flag round."""
    loop: asyncio.AbstractEventLoop
    wake_fd: WakeFd
    flags: list
    on_wake: Callable[[], object]
    rounds_max: int
    rounds: int
    def __init__(self, loop: asyncio.AbstractEventLoop, wake_fd: WakeFd,
                 flags: Sequence[object], on_wake: Callable[[], object],
                 rounds_max: int = 16) -> None: ...
    def start(self) -> None: ...
    def kick(self) -> None: ...
    def stop(self) -> None: ...
    def run(self) -> None: ...
    def __call__(self) -> None: ...
