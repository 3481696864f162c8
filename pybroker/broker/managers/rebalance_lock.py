# Ordered-consume queue locks with a lease (Java RebalanceLockManager).
"""Queue locks of ordered consumers: a client holds a queue for ``lease_ms`` (Java's
``rocketmq.broker.rebalance.lockMaxLiveTime``, 60 s) and renews it by locking again."""
import dataclasses
import logging
from collections.abc import Callable, Iterable

from pybroker.protocol.bodies import MessageQueue

__all__ = ["RebalanceLockManager", "REBALANCE_LOCK_LEASE_MS"]

log = logging.getLogger("pybroker.broker.metadata")

REBALANCE_LOCK_LEASE_MS = 60_000       # rocketmq.broker.rebalance.lockMaxLiveTime default


@dataclasses.dataclass
class _LockEntry:
    client_id: str
    last_update_ms: int


class RebalanceLockManager:
    """Group -> queue -> holder; ``now_ms`` is the clock (ms)."""

    def __init__(self, now_ms: Callable[[], int], lease_ms: int = REBALANCE_LOCK_LEASE_MS):
        self.now_ms = now_ms
        self.lease_ms = lease_ms
        self._locks: dict[str, dict[MessageQueue, _LockEntry]] = {}

    def try_lock_batch(self, group: str, queues: Iterable[MessageQueue], client_id: str,
                       only_this_broker: bool = True) -> list[MessageQueue]:
        """Lock ``queues`` for ``client_id`` (lease); returns those now held by it.

        A queue is granted when unlocked, when its lease expired, or when ``client_id``
        already holds it (the lease is renewed). ``only_this_broker`` asks Java 5.x brokers
        to also lock on the other replicas of the broker set; pybroker has no replicas that
        lock, so both values give the same answer.
        """
        now_ms = self.now_ms()
        table = self._locks.setdefault(group, {})
        locked = []
        for queue in queues:
            entry = table.get(queue)
            if entry is None or entry.client_id == client_id or \
                    now_ms - entry.last_update_ms > self.lease_ms:
                if entry is not None and entry.client_id != client_id:
                    log.warning("lock %s of %s: expired lease of %s taken over by %s", queue,
                                group, entry.client_id, client_id)
                table[queue] = _LockEntry(client_id, now_ms)
                locked.append(queue)
        return locked

    def unlock_batch(self, group: str, queues: Iterable[MessageQueue], client_id: str) -> None:
        """Release the queues ``client_id`` holds; others' locks are left alone."""
        table = self._locks.get(group)
        if table is None:
            return
        for queue in queues:
            entry = table.get(queue)
            if entry is not None and entry.client_id == client_id:
                del table[queue]
        if not table:
            del self._locks[group]

    def is_locked(self, group: str, queue: MessageQueue, client_id: str) -> bool:
        """True when ``client_id`` holds an unexpired lock of ``queue`` (renews it)."""
        entry = self._locks.get(group, {}).get(queue)
        now_ms = self.now_ms()
        if entry is None or entry.client_id != client_id or \
                now_ms - entry.last_update_ms > self.lease_ms:
            return False
        entry.last_update_ms = now_ms
        return True
