# Long polling of pulls: held PULL_MESSAGE requests per topic@queue, woken by arrivals or timers.
"""The broker side of RocketMQ long polling (Java ``PullRequestHoldService``, protocol.md §2.3).

A pull that finds nothing new (PULL_NOT_FOUND) with the SUSPEND flag is parked here instead of
answered. It is run again, without suspension, when

* a message arrives for its topic/queue beyond its queue offset and matches its tag filter
  (:meth:`LongPollService.notify_message_arriving`, or :meth:`~LongPollService.notify_queues`
  with the queues the dispatcher reports as grown), or
* its hold time ends (one asyncio timer per held pull instead of Java's 5 s sweep; the sweep
  itself is :meth:`~LongPollService.check_held`, a safety net against a lost notification).

The answer of that second run goes out through the held channel's ``send``, unless the run
found only messages its filter refuses (tags or SQL92) and the deadline is still ahead: then
it parks again (:meth:`~LongPollService.hold_again`) beyond what it scanned, as Java wakes a
held pull only for a matching arrival. Pulls held for a
closed channel are dropped (:meth:`~LongPollService.channel_closed`). Holding costs the
connection nothing: the handler returned None, so the transport keeps serving that channel.
"""
import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from pybroker.protocol.command import RemotingCommand
from pybroker.tasks import start_task

__all__ = ["HeldPull", "LongPollService", "HELD_PULLS_MAX_DEFAULT"]

log = logging.getLogger(__name__)

# Bound on pulls held per broker process: each one is a pending client request and a timer.
HELD_PULLS_MAX_DEFAULT = 100_000
_INT32_MASK = 0xFFFFFFFF


def _as_int32(tags_code: int) -> int:
    # Java compares (int) tagsCode with the subscription's Integer codes.
    value = tags_code & _INT32_MASK
    return value - (1 << 32) if value >= 1 << 31 else value


@dataclasses.dataclass(eq=False, slots=True)
class HeldPull:
    """One parked pull.

    ``queue_offset``: where the pull reads from (it waits for the queue to grow past it).
    ``tag_codes``: the subscription's tag hash codes, None when it takes every tag.
    ``timeout_ms``: how long to hold it. ``rerun``: runs the pull again without suspension and
    returns its response (None: nothing to send).
    """
    topic: str
    queue_id: int
    queue_offset: int
    tag_codes: frozenset[int] | None
    timeout_ms: int
    channel: Any                      # pybroker.broker.channel.Channel
    rerun: Callable[[], Awaitable[RemotingCommand | None]]
    deadline_ms: int = 0
    timer: asyncio.TimerHandle | None = None
    # Called with the response once it was sent (the rpc_latency of a long-polling pull).
    answered: Callable[[RemotingCommand], None] | None = None

    def matches(self, tags_code: int | None) -> bool:
        """Whether a message with ``tags_code`` (None: unknown) would be taken by this pull."""
        if tags_code is None or self.tag_codes is None:
            return True
        return _as_int32(tags_code) in self.tag_codes


class LongPollService:
    """Held pulls of one remoting worker (one asyncio loop).

    ``max_offset_of(topic, queue_id) -> int``: the queue's next offset to be written (normally
    ``store.get_max_offset_in_queue``). ``held_pulls_max``: beyond it :meth:`hold` refuses and
    the pull is answered at once. ``now_ms``: clock for deadlines (ms). ``on_park()``: called
    after each pull is parked (the worker then asks the dispatcher for its wake-ups).
    """

    def __init__(self, max_offset_of: Callable[[str, int], int], *,
                 held_pulls_max: int = HELD_PULLS_MAX_DEFAULT,
                 now_ms: Callable[[], int] | None = None,
                 on_park: Callable[[], object] | None = None):
        if held_pulls_max < 0:
            raise ValueError(f"held_pulls_max must be >= 0, got {held_pulls_max}")
        self._max_offset_of = max_offset_of
        self.held_pulls_max = held_pulls_max
        self._now_ms = now_ms
        self._on_park = on_park
        self._by_queue: dict[tuple[str, int], dict[HeldPull, None]] = {}
        self._by_channel: dict[str, dict[HeldPull, None]] = {}
        # Pulls currently held (read-only outside this class: a plain attribute, the worker
        # asks it on every loop turn that arms its wake-up flags).
        self.held_count = 0
        self._tasks: set[asyncio.Task] = set()
        self.closed = False

    def _now(self, loop: asyncio.AbstractEventLoop) -> int:
        return self._now_ms() if self._now_ms is not None else int(loop.time() * 1000)

    # --- holding --------------------------------------------------------------------------------
    def hold(self, held: HeldPull) -> bool:
        """Park ``held`` until a matching arrival or its timeout; False (not held) when the
        service is closed or already holds ``held_pulls_max`` pulls. Needs a running loop."""
        if self.closed or self.held_count >= self.held_pulls_max:
            return False
        loop = asyncio.get_running_loop()
        timeout_ms = max(held.timeout_ms, 0)
        held.deadline_ms = self._now(loop) + timeout_ms
        self._park(loop, held, timeout_ms)
        return True

    def hold_again(self, held: HeldPull, queue_offset: int) -> bool:
        """Park a woken pull again until its first deadline, waiting for messages beyond
        ``queue_offset`` (its re-run scanned up to there and nothing matched its filter).
        False when the deadline has passed or the service cannot hold it: answer it then."""
        if self.closed or self.held_count >= self.held_pulls_max:
            return False
        loop = asyncio.get_running_loop()
        remaining_ms = held.deadline_ms - self._now(loop)
        if remaining_ms <= 0:
            return False
        held.queue_offset = queue_offset
        self._park(loop, held, remaining_ms)
        return True

    def _park(self, loop: asyncio.AbstractEventLoop, held: HeldPull, timeout_ms: int) -> None:
        held.timer = loop.call_later(timeout_ms / 1000.0, self._expire, held)
        self._by_queue.setdefault((held.topic, held.queue_id), {})[held] = None
        self._by_channel.setdefault(held.channel.channel_id, {})[held] = None
        self.held_count += 1
        if self._on_park is not None:
            self._on_park()

    def _forget(self, held: HeldPull) -> bool:
        """Remove ``held`` from the tables; False when it was not held any more."""
        queue_key = (held.topic, held.queue_id)
        waiting = self._by_queue.get(queue_key)
        if waiting is None or held not in waiting:
            return False
        del waiting[held]
        if not waiting:
            del self._by_queue[queue_key]
        of_channel = self._by_channel.get(held.channel.channel_id)
        if of_channel is not None:
            of_channel.pop(held, None)
            if not of_channel:
                del self._by_channel[held.channel.channel_id]
        if held.timer is not None:
            held.timer.cancel()
            held.timer = None
        self.held_count -= 1
        return True

    def _expire(self, held: HeldPull) -> None:
        held.timer = None
        self._wake(held)

    def _wake(self, held: HeldPull) -> None:
        if not self._forget(held):
            return
        task = start_task(self._respond(held), "a held pull's answer", None, log)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _respond(held: HeldPull) -> None:
        try:
            response = await held.rerun()
        except Exception:
            # A re-run has passed every check once; failing now is a bug worth a trace, and
            # the client's own pull timeout recovers it.
            log.exception("re-running a held pull of %s@%d failed", held.topic, held.queue_id)
            return
        if response is None:
            return
        try:
            held.channel.send(response)
        except (ConnectionError, OSError) as error:
            log.debug("held pull answer to %s dropped: %s", held.channel.remote_address, error)
            return
        if held.answered is not None:
            held.answered(response)

    # --- waking ---------------------------------------------------------------------------------
    def notify_message_arriving(self, topic: str, queue_id: int, max_offset: int | None = None,
                                tags_code: int | None = None) -> int:
        """A message (tags hash ``tags_code``, None when unknown) reached ``topic``/``queue_id``
        whose next offset is now ``max_offset`` (None: ask the store). Wakes every held pull
        of that queue that reads below the new max and matches; also those past their
        deadline. Returns how many were woken. Needs a running loop."""
        waiting = self._by_queue.get((topic, queue_id))
        if not waiting:
            return 0
        loop = asyncio.get_running_loop()
        now_ms = self._now(loop)
        store_max_offset: int | None = None
        woken = 0
        for held in list(waiting):
            newest_offset = max_offset
            if newest_offset is None or newest_offset <= held.queue_offset:
                if store_max_offset is None:
                    store_max_offset = self._max_offset_of(topic, queue_id)
                newest_offset = store_max_offset
            arrived = newest_offset > held.queue_offset and held.matches(tags_code)
            if arrived or now_ms >= held.deadline_ms:
                self._wake(held)
                woken += 1
        return woken

    def notify_queues(self, queues: Iterable[tuple[str, int]]) -> int:
        """The dispatcher's report: these (topic, queue_id) grew. Wakes their held pulls that
        are now behind the queue's max offset (read from the store). Returns how many."""
        woken = 0
        for topic, queue_id in queues:
            if (topic, queue_id) in self._by_queue:
                woken += self.notify_message_arriving(topic, queue_id)
        return woken

    def check_held(self) -> int:
        """Java's periodic sweep: re-check every queue with held pulls against the store and
        the deadlines (a safety net; arrivals and timers normally do this). Returns woken."""
        return self.notify_queues(list(self._by_queue))

    # --- dropping -------------------------------------------------------------------------------
    def channel_closed(self, channel_id: str) -> int:
        """Drop, unanswered, every pull held for a closed channel; returns how many."""
        of_channel = self._by_channel.get(channel_id)
        if not of_channel:
            return 0
        dropped = 0
        for held in list(of_channel):
            dropped += self._forget(held)
        return dropped

    def close(self) -> None:
        """Drop every held pull unanswered (worker shutdown) and refuse new ones."""
        self.closed = True
        for waiting in list(self._by_queue.values()):
            for held in list(waiting):
                self._forget(held)
        for task in list(self._tasks):
            task.cancel()
