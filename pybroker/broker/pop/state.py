# What the POP handlers of one process share: the mapped POP table, its slot cache, held POPs.
"""A process's handle on the shared POP state (docs/architecture/pop.md).

:class:`PopState` is ``ctx.pop`` of the POP handlers: the mapped table
(``store/pop_table.py``), the slots this process knows (:class:`SlotCache`: asked of the
metadata service once per topic@group@queue, then cached), the lock tag of this process, the
held POPs (``long_poll``, remoting workers only) and how to wake the processes that hold POPs
when an order queue's head is freed (``wake_workers``).
"""
import itertools
from collections.abc import Awaitable, Callable, Sequence

from pybroker.broker.pop.long_poll import PopLongPoll
from pybroker.store.pop_table import PopTable, SlotKey

__all__ = ["PopState", "SlotCache", "PopStateError"]


class PopStateError(Exception):
    """The POP state cannot serve (no slot left, the metadata service did not answer)."""


class SlotCache:
    """Slot indexes by key; a miss asks ``fetch(keys) -> slots`` (PopStateError on refusal)
    once for all the keys a request needs."""

    def __init__(self, fetch: Callable[[Sequence[SlotKey]], Awaitable[list[int]]]):
        self._fetch = fetch
        self._slots: dict[tuple[str, str, int], int] = {}     # SlotKey keys
        # The slot of a key already known, or None, without a Python frame (every fast ack
        # asks; a plain (topic, group, queue id) tuple finds the SlotKey's entry).
        self.cached: Callable[[SlotKey], int | None] = self._slots.get

    async def slots(self, keys: Sequence[SlotKey]) -> list[int]:
        missing = [key for key in keys if key not in self._slots]
        if missing:
            fetched = await self._fetch(missing)
            if len(fetched) != len(missing):
                raise PopStateError(f"asked {len(missing)} POP slots, got {len(fetched)}")
            self._slots.update(zip(missing, fetched, strict=True))
        return [self._slots[key] for key in keys]

    async def slots_of(self, topic: str, group: str, queue_ids: Sequence[int]) -> list[int]:
        """The slots of ``queue_ids`` of topic@group (a POP's queues): when all are known,
        found by plain (topic, group, queue id) tuples, no SlotKey made."""
        try:
            return list(map(self._slots.__getitem__,
                            zip(itertools.repeat(topic), itertools.repeat(group), queue_ids)))
        except KeyError:
            return await self.slots([SlotKey(topic, group, queue_id) for queue_id in queue_ids])

    async def slot(self, topic: str, group: str, queue_id: int) -> int:
        key = SlotKey(topic, group, queue_id)
        cached = self._slots.get(key)       # an ACK's case: no list, no inner await
        if cached is not None:
            return cached
        return (await self.slots([key]))[0]


class PopState:
    """See the module docstring. ``lock_tag`` (> 0) names this process in slot locks;
    ``worker_slot``: its data-plane slot (waiter bit of held POPs), None outside workers;
    ``wake_workers(mask)`` signals the worker slots of ``mask``."""

    def __init__(self, table: PopTable, slots: SlotCache, lock_tag: int,
                 worker_slot: int | None = None,
                 wake_workers: Callable[[int], None] = lambda mask: None,
                 long_poll: PopLongPoll | None = None,
                 notification_poll: PopLongPoll | None = None):
        assert lock_tag > 0, "a POP lock tag is never 0"
        self.table = table
        self.slots = slots
        self.lock_tag = lock_tag
        self.worker_slot = worker_slot
        self.wake_workers = wake_workers
        self.long_poll = long_poll                  # held POPs (remoting workers)
        self.notification_poll = notification_poll  # held NOTIFICATIONs (Java's second set)
        self._check_points = itertools.count()

    def next_revive_queue(self, revive_queue_num: int) -> int:
        """The revive queue of the next check-point: round robin (Java ckMessageNumber)."""
        return next(self._check_points) % revive_queue_num

    def notify_held(self) -> None:
        """A held POP anywhere may now find something (an order queue's head was freed):
        wake every process that holds POPs, this one included."""
        mask = self.table.notify()
        if mask:
            self.wake_workers(mask)
        for held in (self.long_poll, self.notification_poll):
            if held is not None:
                held.check_held()
