# Background asyncio tasks and the rounds of periodic services: no failure ends one silently.
"""How every long-lived asyncio task of pybroker is started and every periodic round guarded
(docs/architecture/services.md).

Two rules, one implementation each:

* :func:`start_task` starts every task nobody awaits at once (a service loop, a keeper, a
  heartbeat, a held pull's answer). Its done-callback logs an end by an exception with the
  traceback and calls the owner's ``on_failure(error)``: the supervisor ends the generation,
  a worker stops with exit status 1, a client only logs. Cancellation is the normal end and
  is not reported. The task is referenced until it ends (the event loop keeps only weak
  references).
* :func:`start_thread` is the same for the few threads (the flusher's file allocator, the
  supervisor's scrubber): an end by an exception is logged with its traceback and handed to
  the owner's ``on_failure(error)`` instead of the interpreter's stderr hook.
* :func:`within` bounds one await in time (every timed wait of pybroker/, tools/tidy.py bans
  ``asyncio.wait_for`` and ``asyncio.timeout`` there): on Python 3.11 ``wait_for`` loses a
  cancellation that meets its awaitable's end (a supervisor's generation outlived a role
  change), and ``asyncio.timeout`` refuses to run outside a task - a remoting handler's first
  step runs before any task (remoting/server.py, eager handlers).
* :func:`unless_set` awaits one step of a start unless a stop comes first (a worker that is
  told to stop while it waits for the metadata service's hello stops at once, not at the
  hello's timeout).
* :class:`Rounds` guards each round of a periodic service loop. A failing round is logged
  with its cause and the loop goes on after the service's retry delay; the
  ``failures_max``-th failing round in a row ends the loop with :class:`ServiceFailedError`,
  and an invariant violation (:data:`pybroker.errors.FAIL_STOP_ERRORS`) ends it at once, each
  reported by its task's done-callback (style.md §8.6: crash on the rest). A client's loops
  pass ``failures_max=None``: a client never gives up by itself (Java's clients retry
  forever).
"""
import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any

from pybroker.errors import FAIL_STOP_ERRORS, ServiceFailedError

__all__ = ["start_task", "start_thread", "within", "unless_set", "Rounds",
           "ROUND_FAILURES_MAX"]

log = logging.getLogger("pybroker.tasks")

# Failing rounds in a row after which a broker service gives up (and fail-stops).
ROUND_FAILURES_MAX = 10

_running: set[asyncio.Task] = set()


def start_task(coroutine: Coroutine[Any, Any, Any], name: str,
               on_failure: Callable[[BaseException], None] | None = None,
               logger: logging.Logger = log) -> asyncio.Task:
    """Run ``coroutine`` as a task named ``name`` in the running loop. When it ends by an
    exception, ``logger`` logs it with its traceback and ``on_failure(error)`` runs."""
    task = asyncio.get_running_loop().create_task(coroutine, name=name)  # tidy: allow
    _running.add(task)

    def done(ended: asyncio.Task) -> None:
        _running.discard(ended)
        if ended.cancelled():
            return
        error = ended.exception()
        if error is None:
            return
        logger.error("%s ended by an error: %s", name, error or type(error).__name__,
                     exc_info=error)
        if on_failure is not None:
            on_failure(error)
    task.add_done_callback(done)
    return task


async def within(awaitable, timeout_s: float | None):
    """``await awaitable``, ended by TimeoutError after ``timeout_s`` seconds (None: no
    bound; 0 or less: one turn of the loop). The awaitable runs as its own task, cancelled
    when the time is up; a cancellation of the caller always ends it by CancelledError, also
    when the awaitable ended in the same turn (see the module docstring)."""
    if timeout_s is None:
        return await awaitable
    inner = asyncio.ensure_future(awaitable)  # tidy: allow (awaited)
    expired = False
    caller = asyncio.current_task()
    cancelling_before = caller.cancelling() if caller is not None else 0

    def expire() -> None:
        nonlocal expired
        expired = True
        inner.cancel()
    timer = asyncio.get_running_loop().call_later(max(timeout_s, 0.0), expire)
    try:
        return await inner
    except asyncio.CancelledError:
        # A cancellation of the caller since the entry (its count grew; one from before, that
        # an outer bound like this one caught and goes on with, does not count): not ours.
        if expired and inner.cancelled() and (caller is None or
                                              caller.cancelling() <= cancelling_before):
            raise TimeoutError(f"not done within {timeout_s} s") from None
        raise
    finally:
        timer.cancel()
        if not inner.done():
            inner.cancel()        # the caller was cancelled: its awaitable goes with it


async def unless_set(awaitable, event: asyncio.Event) -> bool:
    """``await awaitable`` unless ``event`` is set first: True when the awaitable ended (its
    exception, if any, is raised), False when the event was set first (the awaitable is then
    cancelled and its end awaited, whatever it is). A cancellation of the caller cancels
    both and ends by CancelledError."""
    inner = asyncio.ensure_future(awaitable)  # tidy: allow (awaited)
    if event.is_set():
        inner.cancel()
    else:
        waiter = asyncio.ensure_future(event.wait())  # tidy: allow (awaited)
        try:
            await asyncio.wait((inner, waiter), return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            if not inner.done():
                inner.cancel()    # the stop came first, or the caller was cancelled
        if inner.done():
            inner.result()
            return True
    caller = asyncio.current_task()
    cancelling_before = caller.cancelling() if caller is not None else 0
    try:
        await inner
    except asyncio.CancelledError:
        if caller is not None and caller.cancelling() > cancelling_before:
            raise                 # the caller's own cancellation, while its awaitable ended
    except Exception:             # the awaitable's end after the stop: nobody wants it
        log.debug("ended after a stop", exc_info=True)
    return False


def start_thread(target: Callable[[], None], name: str,
                 on_failure: Callable[[BaseException], None] | None = None,
                 logger: logging.Logger = log) -> threading.Thread:
    """Run ``target()`` in a daemon thread named ``name``. When it ends by an exception,
    ``logger`` logs it with its traceback and ``on_failure(error)`` runs in that thread."""
    def run() -> None:
        try:
            target()
        except BaseException as error:   # the thread's end: reported, never lost on stderr
            logger.error("%s ended by an error: %s", name, error or type(error).__name__,
                         exc_info=error)
            if on_failure is not None:
                on_failure(error)
    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


class Rounds:
    """The guard of one periodic loop's rounds::

        rounds = Rounds("delay delivery", retry_delay_s=10.0)
        while True:
            await asyncio.sleep(rounds.next_delay_s(interval_s))
            with rounds:
                await service.run_once()

    ``retry_delay_s``: the wait after a failing round (None: the loop's own interval).
    ``failures_max``: failing rounds in a row that end the loop (None: never).
    """

    def __init__(self, name: str, *, retry_delay_s: float | None = None,
                 failures_max: int | None = ROUND_FAILURES_MAX,
                 logger: logging.Logger = log):
        assert failures_max is None or failures_max >= 1, failures_max
        self.name = name
        self.retry_delay_s = retry_delay_s
        self.failures_max = failures_max
        self.logger = logger
        self.failures = 0             # failing rounds in a row
        self.failures_total = 0

    def next_delay_s(self, interval_s: float) -> float:
        """How long to wait before the next round: ``interval_s``, or the retry delay after a
        failing round."""
        if self.failures and self.retry_delay_s is not None:
            return self.retry_delay_s
        return interval_s

    def __enter__(self) -> "Rounds":
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> bool:
        if error is None:
            self.failures = 0
            return False
        if not isinstance(error, Exception) or isinstance(error, FAIL_STOP_ERRORS):
            return False          # cancellation and exits pass; invariants fail-stop
        self.failures += 1
        self.failures_total += 1
        if self.failures_max is not None and self.failures >= self.failures_max:
            raise ServiceFailedError(
                f"{self.name}: {self.failures} rounds in a row failed, the last with "
                f"{type(error).__name__}: {error}") from error
        self.logger.error("%s: a round failed (%d in a row%s): %s", self.name, self.failures,
                          "" if self.failures_max is None
                          else f", the service stops at {self.failures_max}",
                          error or type(error).__name__, exc_info=error)
        return True
