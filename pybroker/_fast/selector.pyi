# What Python sees of pybroker._fast.selector (the worker loop's epoll selector, in C).
import asyncio
import selectors

ROUNDS: int

class FastSelector(selectors.EpollSelector):
    """An epoll selector that calls the loop's C readers (SocketReader, AsyncWakeReader) in
    its select, without a loop turn."""
    def bind(self, loop: asyncio.AbstractEventLoop) -> None: ...
    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        """EpollSelector.select's answer, the C readers of the polls called."""

def new_event_loop() -> asyncio.SelectorEventLoop:
    """A SelectorEventLoop over a bound FastSelector."""
