# A push consumer's pull loop: one long-polling pull task per assigned queue (Java's
# PullMessageService and the push consumer's pullMessage).
"""Per assigned queue one pull task (long polling: the broker holds an empty pull up to
``broker_suspend_max_time_ms``) feeds the queue's :class:`~pybroker.client.process_queue.
ProcessQueue` and hands what arrived to the consumer's consume service; flow control pauses the
pull while a queue holds more than ``pull_threshold_for_queue`` unconsumed messages (or
``pull_threshold_size_for_queue_bytes``). The client checks a TAG subscription's tags again (the
broker filters by hash code only), and a message of the group's retry topic is consumed under
its real topic.
"""
import asyncio
import logging
import time
from typing import Protocol

from pybroker.client.consume_service import ConsumeService, PushConsumerView
from pybroker.client.errors import BrokerResponseError, ClientError
from pybroker.client.message import MessageExt
from pybroker.client.process_queue import ProcessQueue
from pybroker.client.pulling import PullResult, pull_message
from pybroker.client.selector import matches
from pybroker.protocol.bodies import MessageQueue, SubscriptionData
from pybroker.protocol.constants import MessageModel, Property, RETRY_GROUP_TOPIC_PREFIX
from pybroker.tasks import Rounds

__all__ = ["PullingConsumer", "pull_loop", "restore_retry_topic"]

LOGGER = logging.getLogger("pybroker.client")

PULL_FLOW_CONTROL_DELAY_MS = 50
_RETRIABLE_ERRORS = (ConnectionError, TimeoutError, OSError, BrokerResponseError, ClientError)


class PullingConsumer(PushConsumerView, Protocol):
    """What the pull loop uses of its push consumer besides a consume service's view."""
    message_model: MessageModel
    subscriptions: dict[str, SubscriptionData]
    pull_batch_size: int
    pull_threshold_for_queue: int
    pull_threshold_size_for_queue_bytes: int
    pull_time_delay_ms_when_exception: int
    broker_suspend_max_time_ms: int
    consumer_timeout_ms_when_suspend: int

    @property
    def consume_service(self) -> ConsumeService:
        """Where pulled messages go."""


def restore_retry_topic(message: MessageExt, group: str) -> None:
    """A message of ``group``'s retry topic is consumed under its real topic."""
    if message.topic == RETRY_GROUP_TOPIC_PREFIX + group:
        original = message.properties.get(Property.RETRY_TOPIC)
        if original:
            message.topic = original


async def pull_loop(consumer: PullingConsumer, queue: MessageQueue,
                    process_queue: ProcessQueue) -> None:
    """Pull ``queue`` until it is dropped or the consumer stops."""
    delay_s = consumer.pull_time_delay_ms_when_exception / 1000
    # Anything unexpected is logged and the queue pulled again after the delay, as Java's
    # executePullRequestLater (pybroker/tasks.py, never giving up).
    rounds = Rounds(f"{consumer.group}: pulling {queue}", failures_max=None, logger=LOGGER)
    while not process_queue.dropped and consumer.running:
        if rounds.failures:
            await asyncio.sleep(delay_s)
        if (process_queue.count > consumer.pull_threshold_for_queue
                or process_queue.body_bytes > consumer.pull_threshold_size_for_queue_bytes):
            await asyncio.sleep(PULL_FLOW_CONTROL_DELAY_MS / 1000)
            continue
        subscription = consumer.subscriptions.get(queue.topic)
        if subscription is None:
            return
        with rounds:
            try:
                result = await _pull(consumer, queue, process_queue.next_offset, subscription)
            except _RETRIABLE_ERRORS as error:
                LOGGER.info("pull %s failed: %s", queue, error)
                await asyncio.sleep(delay_s)
                continue
            if process_queue.dropped:
                return
            _on_pulled(consumer, queue, process_queue, subscription, result)


async def _pull(consumer: PullingConsumer, queue: MessageQueue, queue_offset: int,
                subscription: SubscriptionData) -> PullResult:
    commit_offset = 0
    if consumer.message_model == MessageModel.CLUSTERING:
        commit_offset = max(consumer.offsets.cached_offset(queue), 0)
    started = time.monotonic_ns()
    result = await pull_message(
        consumer.instance, consumer.group, queue, queue_offset, subscription,
        max_nums=consumer.pull_batch_size, commit_offset=commit_offset,
        suspend_timeout_ms=consumer.broker_suspend_max_time_ms,
        timeout_ms=consumer.consumer_timeout_ms_when_suspend)
    if result.messages:      # Java counts pulls that found messages
        consumer.stats.pulled(queue.topic, (time.monotonic_ns() - started) // 1_000_000,
                              len(result.messages))
    return result


def _on_pulled(consumer: PullingConsumer, queue: MessageQueue, process_queue: ProcessQueue,
               subscription: SubscriptionData, result: PullResult) -> None:
    process_queue.next_offset = result.next_begin_offset
    process_queue.last_pull_timestamp_ms = time.time_ns() // 1_000_000
    if result.offset_moved:
        LOGGER.warning("%s: offset of %s moved to %d", consumer.group, queue,
                       result.next_begin_offset)
        consumer.offsets.update_offset(queue, result.next_begin_offset)
        return
    messages = [m for m in result.messages if matches(subscription, m)]
    if not messages:
        if process_queue.count == 0 and result.messages:
            # Everything pulled was filtered out: the offset may move past it now.
            consumer.offsets.update_offset(queue, result.next_begin_offset, True)
        return
    for message in messages:
        restore_retry_topic(message, consumer.group)
    process_queue.put(messages)
    consumer.consume_service.consume(queue, process_queue, messages)
