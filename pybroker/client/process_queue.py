# The pulled, not yet finished messages of one queue of a push consumer (Java's ProcessQueue).
"""A push consumer's :class:`ProcessQueue` per assigned queue: what the pull loop put there and
the consume service has not finished, keyed by queue offset, so the consumer offset only moves
past messages that are done; and the orderly state of the queue (its broker lock, its one
consume task, the lock of the batch in flight)."""
import asyncio
from typing import Optional

from pybroker.client.message import MessageExt

__all__ = ["ProcessQueue"]


class ProcessQueue:
    """Pulled, not yet finished messages of one queue, keyed by queue offset."""

    def __init__(self, next_offset: int):
        self.messages: dict[int, MessageExt] = {}
        self.next_offset = next_offset
        self.max_offset = -1
        self.body_bytes = 0
        self.dropped = False
        # Orderly consumption: the broker lock, one consume task, the batch-in-flight lock.
        self.locked = False
        self.last_lock_timestamp_ms = 0
        self.try_unlock_times = 0
        self.orderly_task: Optional[asyncio.Task] = None
        self.consume_lock = asyncio.Lock()
        # For GET_CONSUMER_RUNNING_INFO; ms since the epoch.
        self.last_pull_timestamp_ms = 0
        self.last_consume_timestamp_ms = 0

    @property
    def count(self) -> int:
        """Messages held."""
        return len(self.messages)

    def put(self, messages: list[MessageExt]) -> None:
        """Hold ``messages`` (a message already held is ignored)."""
        for message in messages:
            if message.queue_offset not in self.messages:
                self.messages[message.queue_offset] = message
                self.body_bytes += len(message.body)
            self.max_offset = max(self.max_offset, message.queue_offset)

    def remove(self, messages: list[MessageExt]) -> int:
        """Release finished ``messages``; the consumer offset that is now safe to commit
        (the lowest offset still held, or one past the highest seen), -1 if none yet."""
        for message in messages:
            if self.messages.pop(message.queue_offset, None) is not None:
                self.body_bytes -= len(message.body)
        if self.messages:
            return min(self.messages)
        return self.max_offset + 1 if self.max_offset >= 0 else -1
