# What a push consumer's consume services (concurrently, orderly) may use of their consumer.
"""The seam between :class:`pybroker.client.consumer.PushConsumer` and its consume services
(:mod:`pybroker.client.concurrently`, :mod:`pybroker.client.orderly`), as Java's
ConsumeMessageService: the consumer's pull loop hands each queue's new messages to
:meth:`ConsumeService.consume`; a service sees its consumer only through
:class:`PushConsumerView` (public members, no private attribute), so neither side imports the
other. :func:`retry_message` is the message both services send to the group's retry topic
when the broker's send-back is not an option.
"""
import asyncio
from typing import Any, Protocol

from pybroker.client.consume_stats import ConsumerStats
from pybroker.client.instance import ClientInstance
from pybroker.client.message import Message, MessageExt
from pybroker.client.offset_store import LocalFileOffsetStore, RemoteOffsetStore
from pybroker.client.process_queue import ProcessQueue
from pybroker.client.producer import Producer
from pybroker.protocol.bodies import MessageQueue
from pybroker.protocol.constants import Property, RETRY_GROUP_TOPIC_PREFIX

__all__ = ["ConsumeService", "PushConsumerView", "RETRY_DELAY_LEVEL_BASE", "retry_message"]

# Delay level of a message sent to the retry topic by the client: 3 + its reconsume times.
RETRY_DELAY_LEVEL_BASE = 3


class PushConsumerView(Protocol):
    """What a consume service uses of its push consumer."""
    group: str
    instance: ClientInstance
    process_queues: dict[MessageQueue, ProcessQueue]
    consume_message_batch_max_size: int
    max_reconsume_times: int
    stats: ConsumerStats

    @property
    def running(self) -> bool:
        """False once the consumer shuts down."""

    @property
    def offsets(self) -> RemoteOffsetStore | LocalFileOffsetStore:
        """The consumer's offset store (it is started)."""

    async def call_listener(self, messages: list[MessageExt], context: Any) -> Any:
        """The listener's answer for ``messages`` (on the loop or in the consumer's thread
        pool); raises what the listener raises."""

    async def retry_producer(self) -> Producer:
        """The producer that sends to the retry topic."""

    def track_consume_task(self, task: asyncio.Task) -> None:
        """A consume task shutdown waits for."""


class ConsumeService(Protocol):
    """How a push consumer consumes what its pull loop pulled."""

    def consume(self, queue: MessageQueue, process_queue: ProcessQueue,
                messages: list[MessageExt]) -> None:
        """``messages`` (already in ``process_queue``) arrived for ``queue``."""


def retry_message(message: MessageExt, group: str, reconsume_time: int,
                  max_reconsume_times: int) -> Message:
    """``message`` again, for ``group``'s retry topic (the broker moves it to the dead-letter
    queue past ``max_reconsume_times``): its properties with the origin id, the real topic,
    RECONSUME_TIME ``reconsume_time`` and MAX_RECONSUME_TIMES; delay level 3 + its reconsume
    times."""
    retry = Message(RETRY_GROUP_TOPIC_PREFIX + group, message.body, flag=message.flag)
    retry.properties = dict(message.properties)
    retry.properties.setdefault(Property.ORIGIN_MESSAGE_ID, message.msg_id)
    retry.properties.setdefault(Property.RETRY_TOPIC, message.topic)
    retry.properties[Property.RECONSUME_TIME] = str(reconsume_time)
    retry.properties[Property.MAX_RECONSUME_TIMES] = str(max_reconsume_times)
    retry.delay_level = RETRY_DELAY_LEVEL_BASE + message.reconsume_times
    return retry
