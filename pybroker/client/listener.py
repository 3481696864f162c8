# What a push consumer's listener is given and returns (Java's consumer.listener package).
"""The listener contract of the push consumers (:mod:`pybroker.client.consumer` and the POP
push consumer): a concurrently listener gets a :class:`ConsumeContext` and returns a
:class:`ConsumeStatus`; an orderly one gets a :class:`ConsumeOrderlyContext` and returns a
:class:`ConsumeOrderlyStatus`. A listener is a coroutine function (run on the loop) or a plain
function (run in the consumer's thread pool)."""
import dataclasses
import enum
from typing import Any, Callable

from pybroker.client.message import MessageExt
from pybroker.protocol.bodies import MessageQueue

__all__ = ["ConsumeContext", "ConsumeOrderlyContext", "ConsumeOrderlyStatus", "ConsumeStatus",
           "Listener"]


class ConsumeStatus(enum.Enum):
    """What a concurrently listener returns for a batch."""
    CONSUME_SUCCESS = 0
    RECONSUME_LATER = 1


@dataclasses.dataclass
class ConsumeContext:
    """Per-batch context handed to a concurrently listener.

    ``delay_level_when_next_consume``: delay level for sending back a failed batch (0 = the
    broker's choice, 3 + reconsume times; -1 = straight to the dead-letter queue).
    """
    message_queue: MessageQueue
    delay_level_when_next_consume: int = 0


class ConsumeOrderlyStatus(enum.Enum):
    """What an orderly listener returns for a batch."""
    SUCCESS = 0
    ROLLBACK = 1          # with auto-commit (the only mode here) treated as SUCCESS, as Java
    COMMIT = 2
    SUSPEND_CURRENT_QUEUE_A_MOMENT = 3


@dataclasses.dataclass
class ConsumeOrderlyContext:
    """Per-batch context of an orderly listener.

    ``suspend_current_queue_time_ms``: how long to pause the queue after a failed batch
    (-1: the consumer's default, 1000 ms).
    """
    message_queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_ms: int = -1


# A concurrently listener gets a ConsumeContext, an orderly one a ConsumeOrderlyContext.
Listener = Callable[[list[MessageExt], Any], Any]
