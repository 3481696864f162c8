# What Python sees of pybroker._fast.send.round (a worker's completion wake-up, in C).
from typing import Callable, Iterable, Sized

from pybroker._fast.send.take import SendPath

class HeldRequests:
    """Whether any of the worker's long polls holds a request, asked without a frame."""
    holders: list
    def __init__(self, holders: Iterable[object]) -> None: ...
    def __call__(self) -> bool: ...

class CompletionRound:
    """A worker's completion wake-up: Python only when there is Python work."""
    core: SendPath | None
    dispatched_seen: int
    held: HeldRequests | None
    answers: list
    python: Callable[[list | None, list | None, bool], object]
    c_rounds: int
    python_rounds: int
    def __init__(self, core: SendPath | None, load_dispatched: Callable[[], int],
                 dispatched_seen: int, held: HeldRequests | None, answers: list[Sized],
                 python: Callable[[list | None, list | None, bool], object]) -> None: ...
    def python_first_now(self) -> bool: ...
    def __call__(self) -> None: ...
