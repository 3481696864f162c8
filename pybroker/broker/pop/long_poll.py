# Long polling of POP and NOTIFICATION: requests held until their queues may have something.
"""Held POP and NOTIFICATION requests of one remoting worker (Java PopLongPollingService).

A POP (or NOTIFICATION) that finds nothing and has a poll time is held here, keyed by
topic@group@queueId (queueId -1: every queue), and run again - the whole request, as Java does -
when

* the dispatcher reports new messages (``check_held``, on the data-plane wake-up): each held
  request whose watched queues (its topic's and its group's retry topics') have messages past
  the group's pop offset is run again, one per key and check (the run that finds messages with
  more left wakes the next one, ``notify``);
* a POP of this process took messages and left some (``notify``);
* another process freed an order queue's head (the POP table's version; ``check_held``);
* its own timer fires: the deadline (bornTime + pollTime - 50 ms, Java's isTimeout), a queue
  it could not lock (retried after LOCK_RETRY_MS), an order queue's head that frees at a known
  time (enableNotifyAfterPopOrderLockRelease).

A run again that still finds nothing parks once more until its deadline (the handler calls
:meth:`hold` again); once the deadline has passed the handler answers POLLING_TIMEOUT. Limits:
maxPopPollingSize held per process, popPollingSize per key and popPollingMapSize keys, beyond
which POLLING_FULL.
Requests of a closed channel are dropped.
"""
import asyncio
import dataclasses
import enum
import logging
from collections.abc import Awaitable, Callable

from pybroker.protocol.command import RemotingCommand
from pybroker.tasks import start_task

__all__ = ["PopLongPoll", "HeldPop", "PollingResult", "LOCK_RETRY_MS", "TIMEOUT_SLACK_MS"]

log = logging.getLogger("pybroker.broker.pop")

LOCK_RETRY_MS = 5             # a queue another process had locked is tried again this soon
TIMEOUT_SLACK_MS = 50         # Java's PopRequest.isTimeout: expired - 50


class PollingResult(enum.Enum):
    POLLING_SUC = "POLLING_SUC"
    POLLING_FULL = "POLLING_FULL"
    POLLING_TIMEOUT = "POLLING_TIMEOUT"
    NOT_POLLING = "NOT_POLLING"


@dataclasses.dataclass(eq=False)
class HeldPop:
    """One held request. ``key``: topic@group@queueId; ``deadline_ms``: bornTime + pollTime;
    ``has_work()``: whether its queues may have something now (cheap, no store read of
    records); ``rerun()``: runs the request again and returns its answer (None: held again or
    nothing to send); ``retry_at_ms``: an earlier moment to run again (lock missed, order head
    freed), or None."""
    key: str
    channel: object                     # pybroker.broker.channel.Channel
    deadline_ms: int
    has_work: Callable[[], bool]
    rerun: Callable[[], Awaitable[RemotingCommand | None]]
    retry_at_ms: int | None = None
    held_slot: int | None = None        # the POP table slot counting the key's held requests
    timer: asyncio.TimerHandle | None = None


class PopLongPoll:
    """See the module docstring. ``now_ms``: the wall clock (ms, the clients' bornTime scale);
    ``limits()``: (maxPopPollingSize, popPollingSize, popPollingMapSize) as the live settings
    say; ``on_park()``: called when a request is parked (the worker then asks for wake-ups);
    ``count_held(slot, delta)``: keeps the broker-wide held count of a key (POLLING_INFO)."""

    def __init__(self, now_ms: Callable[[], int], limits: Callable[[], tuple[int, int, int]],
                 on_park: Callable[[], object] = lambda: None,
                 count_held: Callable[[int, int], None] = lambda slot, delta: None):
        self._now_ms = now_ms
        self._limits = limits
        self._on_park = on_park
        self._count_held = count_held
        self._by_key: dict[str, dict[HeldPop, None]] = {}
        self._by_channel: dict[str, dict[HeldPop, None]] = {}
        # Requests currently held (read-only outside this class: a plain attribute, the
        # worker asks it on every loop turn that arms its wake-up flags).
        self.held_count = 0
        self._tasks: set[asyncio.Task] = set()
        self.closed = False

    def polling_num(self, key: str) -> int:
        """Requests held for ``key`` (POLLING_INFO)."""
        return len(self._by_key.get(key, ()))

    def hold(self, held: HeldPop) -> PollingResult:
        """Park ``held`` (POLLING_SUC), or say why not (Java's polling() order of checks)."""
        if self.closed:
            return PollingResult.NOT_POLLING
        total_max, per_key_max, keys_max = self._limits()
        if self.held_count >= total_max:
            return PollingResult.POLLING_FULL
        now_ms = self._now_ms()
        if now_ms > held.deadline_ms - TIMEOUT_SLACK_MS:
            return PollingResult.POLLING_TIMEOUT
        waiting = self._by_key.get(held.key)
        if waiting is not None and len(waiting) > per_key_max:
            return PollingResult.POLLING_FULL
        if waiting is None and len(self._by_key) >= keys_max:
            return PollingResult.POLLING_FULL
        self._by_key.setdefault(held.key, {})[held] = None
        self._by_channel.setdefault(held.channel.channel_id, {})[held] = None  # type: ignore
        self.held_count += 1
        if held.held_slot is not None:
            self._count_held(held.held_slot, 1)
        wake_ms = held.deadline_ms - TIMEOUT_SLACK_MS
        if held.retry_at_ms is not None:
            wake_ms = min(wake_ms, held.retry_at_ms)
        loop = asyncio.get_running_loop()
        held.timer = loop.call_later(max(0, wake_ms - now_ms) / 1000.0, self._wake, held)
        self._on_park()
        return PollingResult.POLLING_SUC

    def _forget(self, held: HeldPop) -> bool:
        waiting = self._by_key.get(held.key)
        if waiting is None or held not in waiting:
            return False
        del waiting[held]
        if not waiting:
            del self._by_key[held.key]
        channel_id = held.channel.channel_id                     # type: ignore[attr-defined]
        of_channel = self._by_channel.get(channel_id)
        if of_channel is not None:
            of_channel.pop(held, None)
            if not of_channel:
                del self._by_channel[channel_id]
        if held.timer is not None:
            held.timer.cancel()
            held.timer = None
        self.held_count -= 1
        if held.held_slot is not None:
            self._count_held(held.held_slot, -1)
        return True

    def _wake(self, held: HeldPop) -> None:
        held.timer = None
        if not self._forget(held):
            return
        task = start_task(self._respond(held), "a held POP's answer", None, log)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _respond(held: HeldPop) -> None:
        try:
            response = await held.rerun()
        except Exception:
            log.exception("running a held POP of %s again failed", held.key)
            return
        if response is None:
            return
        try:
            held.channel.send(response)                          # type: ignore[attr-defined]
        except (ConnectionError, OSError) as error:
            log.debug("held POP answer dropped: %s", error)

    def notify(self, key: str) -> bool:
        """Run one request held for ``key`` again (messages were left); True if one was."""
        waiting = self._by_key.get(key)
        if not waiting:
            return False
        self._wake(next(iter(waiting)))
        return True

    def check_held(self) -> int:
        """Run again, per key, the first held request whose queues may have something;
        returns how many."""
        woken = 0
        for waiting in list(self._by_key.values()):
            for held in list(waiting):
                try:
                    ready = held.has_work()
                except Exception:
                    log.exception("checking a held POP of %s failed", held.key)
                    ready = True
                if ready:
                    self._wake(held)
                    woken += 1
                    break
        return woken

    def channel_closed(self, channel_id: str) -> int:
        """Drop every request held for a closed channel; returns how many."""
        of_channel = self._by_channel.get(channel_id)
        if not of_channel:
            return 0
        return sum(self._forget(held) for held in list(of_channel))

    def close(self) -> None:
        """Drop every held request unanswered and refuse new ones (shutdown)."""
        self.closed = True
        for waiting in list(self._by_key.values()):
            for held in list(waiting):
                self._forget(held)
        for task in list(self._tasks):
            task.cancel()
