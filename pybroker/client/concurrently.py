# Concurrent push consumption: batches to the listener, failed ones sent back (Java's
# ConsumeMessageConcurrentlyService).
"""MessageListenerConcurrently semantics for :class:`pybroker.client.consumer.PushConsumer`.

Messages are handed to the listener in batches of ``consume_message_batch_max_size``, at most
``consume_thread_max`` batches at a time. A failed batch (RECONSUME_LATER or an exception) is
sent back with CONSUMER_SEND_MSG_BACK, falling back to a send to ``%RETRY%<group>``; a message
that cannot be sent back either is consumed again locally 5 s later. The consumer offset of a
queue only advances past messages that are done (consumed or sent back). Broadcasting does not
retry: failed messages are dropped with a warning.
"""
import asyncio
import logging
import time

from pybroker.client.consume_service import PushConsumerView, retry_message
from pybroker.client.errors import BrokerResponseError, ClientError, NoRouteError
from pybroker.client.instance import check_response, request
from pybroker.client.listener import ConsumeContext, ConsumeStatus
from pybroker.client.message import MessageExt
from pybroker.client.process_queue import ProcessQueue
from pybroker.protocol import headers
from pybroker.protocol.bodies import MessageQueue
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.constants import MessageModel
from pybroker.tasks import start_task

__all__ = ["ConcurrentlyService", "RECONSUME_LOCALLY_DELAY_MS"]

LOGGER = logging.getLogger("pybroker.client")

RECONSUME_LOCALLY_DELAY_MS = 5000
_RETRIABLE_ERRORS = (ConnectionError, TimeoutError, OSError, BrokerResponseError, ClientError)


class ConcurrentlyService:
    """Concurrent consumption for one push consumer (created by it at start);
    ``consume_thread_max`` batches at a time."""

    def __init__(self, consumer: PushConsumerView, message_model: MessageModel,
                 consume_thread_max: int):
        self.consumer = consumer
        self.message_model = message_model
        self._semaphore = asyncio.Semaphore(consume_thread_max)

    def consume(self, queue: MessageQueue, process_queue: ProcessQueue,
                messages: list[MessageExt]) -> None:
        """Consume ``messages`` in batches of ``consume_message_batch_max_size``."""
        size = self.consumer.consume_message_batch_max_size
        for start in range(0, len(messages), size):
            self._submit(queue, process_queue, messages[start:start + size])

    def _submit(self, queue: MessageQueue, process_queue: ProcessQueue,
                batch: list[MessageExt], delay_ms: int = 0) -> None:
        task = start_task(self._consume(queue, process_queue, batch, delay_ms),
                          f"pybroker-consume-{queue}", None, LOGGER)
        self.consumer.track_consume_task(task)

    async def _consume(self, queue: MessageQueue, process_queue: ProcessQueue,
                       batch: list[MessageExt], delay_ms: int) -> None:
        if delay_ms:
            await asyncio.sleep(delay_ms / 1000)
        consumer = self.consumer
        async with self._semaphore:
            if process_queue.dropped:
                return
            context = ConsumeContext(queue)
            started = time.monotonic_ns()
            status = await self._call_listener(batch, context)
            failed = [] if status == ConsumeStatus.CONSUME_SUCCESS else batch
            consumer.stats.consumed(queue.topic, (time.monotonic_ns() - started) // 1_000_000,
                                    len(batch) - len(failed), len(failed))
            again = await self._send_back_all(failed, context) if failed else []
            done = [m for m in batch if m not in again]
            offset = process_queue.remove(done)
            if offset >= 0 and not process_queue.dropped:
                consumer.offsets.update_offset(queue, offset, increase_only=True)
            if again:
                self._submit(queue, process_queue, again, RECONSUME_LOCALLY_DELAY_MS)

    async def _call_listener(self, batch: list[MessageExt],
                             context: ConsumeContext) -> ConsumeStatus:
        try:
            status = await self.consumer.call_listener(batch, context)
        except Exception:   # a listener's bug must not stop consumption; retry the batch
            LOGGER.exception("%s: listener raised; batch will be consumed again",
                             self.consumer.group)
            return ConsumeStatus.RECONSUME_LATER
        if status is None:
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus(status)

    async def _send_back_all(self, failed: list[MessageExt],
                             context: ConsumeContext) -> list[MessageExt]:
        """Send back each failed message; those that could not be sent back."""
        if self.message_model == MessageModel.BROADCASTING:
            LOGGER.warning("%s: broadcasting does not retry; dropped %d message(s)",
                           self.consumer.group, len(failed))
            return []
        again = []
        for message in failed:
            if not await self._send_back(message, context.delay_level_when_next_consume):
                message.reconsume_times += 1
                again.append(message)
        return again

    async def _send_back(self, message: MessageExt, delay_level: int) -> bool:
        consumer = self.consumer
        try:
            address = await consumer.instance.find_master(message.broker_name, message.topic)
            fields = headers.encode_header(headers.CONSUMER_SEND_MSG_BACK_REQUEST, {
                "physical_offset": message.physical_offset, "group": consumer.group,
                "delay_level": delay_level, "origin_msg_id": message.msg_id,
                "origin_topic": message.topic,
                "max_reconsume_times": consumer.max_reconsume_times})
            response = await consumer.instance.invoke(
                address, request(RequestCode.CONSUMER_SEND_MSG_BACK, fields))
            check_response(response, address)
            return True
        except (*_RETRIABLE_ERRORS, NoRouteError) as error:
            LOGGER.info("send-back of %s failed (%s); sending to the retry topic",
                        message.msg_id, error)
        return await self._send_to_retry_topic(message)

    async def _send_to_retry_topic(self, message: MessageExt) -> bool:
        consumer = self.consumer
        retry = retry_message(message, consumer.group, message.reconsume_times + 1,
                              consumer.max_reconsume_times)
        try:
            producer = await consumer.retry_producer()
            await producer.send(retry)
            return True
        except (*_RETRIABLE_ERRORS, NoRouteError, ValueError) as error:
            LOGGER.warning("retry send of %s failed (%s); consuming it again locally",
                           message.msg_id, error)
            return False
