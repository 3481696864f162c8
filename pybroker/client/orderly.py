# Orderly push consumption: broker queue locks and one in-order consume task per queue.
"""MessageListenerOrderly semantics for :class:`pybroker.client.consumer.PushConsumer`
(protocol.md §2.9).

Clustering: a queue is consumed only while this client holds its lock at the broker
(LOCK_BATCH_MQ, a 60 s lease on the broker; renewed every ``LOCK_RENEW_INTERVAL_MS``; this
client stops trusting a lock not renewed for ``LOCK_MAX_LIVE_MS``). Queues that rebalance moves
away and all queues at shutdown are unlocked (UNLOCK_BATCH_MQ) after their running batch ends.
Broadcasting needs no locks.

Per queue at most one task consumes, in queue-offset order, ``consume_message_batch_max_size``
messages at a time. SUCCESS commits the offset past the batch. SUSPEND_CURRENT_QUEUE_A_MOMENT
(or an exception) consumes the same batch again after the suspend time; a message that already
failed ``max_reconsume_times`` times is sent to the retry topic with its reconsume count (the
broker moves it to the dead-letter queue) and the queue goes on.
"""
import asyncio
import logging
import time
from typing import Iterable

from pybroker.client.consume_service import PushConsumerView, retry_message
from pybroker.client.errors import ClientError
from pybroker.client.instance import check_response, request
from pybroker.client.listener import ConsumeOrderlyContext, ConsumeOrderlyStatus
from pybroker.client.message import MessageExt
from pybroker.client.process_queue import ProcessQueue
from pybroker.protocol import bodies
from pybroker.protocol.bodies import LockBatchRequest, MessageQueue
from pybroker.protocol.constants import Property
from pybroker.protocol.codes import RequestCode
from pybroker.tasks import Rounds, start_task, within

__all__ = ["OrderlyService"]

LOGGER = logging.getLogger("pybroker.client")

LOCK_RENEW_INTERVAL_MS = 20_000     # Java: rebalance lock interval
LOCK_MAX_LIVE_MS = 30_000           # Java client: rocketmq.client.rebalance.lockMaxLiveTime
RELOCK_DELAY_MS = 100               # retry a lock the queue lost, this much later
SUSPEND_CURRENT_QUEUE_TIME_MS_DEFAULT = 1000
UNLOCK_WAIT_MS = 1000               # how long an unlock waits for the running batch
_ERRORS = (ConnectionError, TimeoutError, OSError, ClientError)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class OrderlyService:
    """Locks and in-order consumption for one push consumer (created by it at start);
    ``clustering``: queues need broker locks (not when broadcasting)."""

    def __init__(self, consumer: PushConsumerView, clustering: bool):
        self.consumer = consumer
        self.clustering = clustering
        self._renew_task: asyncio.Task | None = None

    def start(self) -> None:
        """Start renewing the locks of the consumer's queues periodically."""
        if self.clustering:
            self._renew_task = start_task(self._renew_loop(),
                                          f"pybroker-lock-{self.consumer.group}", None, LOGGER)

    async def stop(self) -> None:
        """Stop renewing and unlock every queue still held (errors are only logged)."""
        if self._renew_task is not None:
            self._renew_task.cancel()
            await asyncio.gather(self._renew_task, return_exceptions=True)
            self._renew_task = None
        if self.clustering:
            await self.unlock(list(self.consumer.process_queues))

    async def _renew_loop(self) -> None:
        # Renewal survives every bad round (pybroker/tasks.py, never giving up).
        rounds = Rounds(f"{self.consumer.group}: lock renewal", failures_max=None,
                        logger=LOGGER)
        while True:
            await asyncio.sleep(LOCK_RENEW_INTERVAL_MS / 1000)
            with rounds:
                try:
                    await self.lock_all()
                except _ERRORS as error:
                    LOGGER.info("%s: lock renewal failed: %s", self.consumer.group, error)

    # --- broker locks --------------------------------------------------------------------------

    async def _lock_at_broker(self, broker_name: str, queues: list[MessageQueue]
                              ) -> set[MessageQueue]:
        consumer = self.consumer
        address = await consumer.instance.find_master(broker_name, queues[0].topic)
        body = bodies.encode_lock_batch_request(LockBatchRequest(
            consumer.group, consumer.instance.client_id, queues))
        response = await consumer.instance.invoke(address, request(RequestCode.LOCK_BATCH_MQ,
                                                                   body=body))
        check_response(response, address)
        return set(bodies.decode_lock_batch_response(response.body or b'{"lockOKMQSet":[]}'))

    async def lock(self, queue: MessageQueue, process_queue: ProcessQueue | None = None
                   ) -> bool:
        """Lock ``queue`` at its broker; True when this client holds it now."""
        try:
            locked = queue in await self._lock_at_broker(queue.broker_name, [queue])
        except _ERRORS as error:
            LOGGER.info("%s: lock of %s failed: %s", self.consumer.group, queue, error)
            locked = False
        if process_queue is not None:
            _mark(process_queue, locked)
        return locked

    async def lock_all(self) -> None:
        """Renew the locks of every queue the consumer holds, one request per broker."""
        by_broker: dict[str, list[MessageQueue]] = {}
        for queue in self.consumer.process_queues:
            by_broker.setdefault(queue.broker_name, []).append(queue)
        for broker_name, queues in by_broker.items():
            locked = await self._lock_at_broker(broker_name, queues)
            for queue in queues:
                process_queue = self.consumer.process_queues.get(queue)
                if process_queue is not None:
                    _mark(process_queue, queue in locked)

    async def unlock(self, queues: Iterable[MessageQueue]) -> None:
        """UNLOCK_BATCH_MQ for ``queues``, one request per broker (errors are only logged)."""
        by_broker: dict[str, list[MessageQueue]] = {}
        for queue in queues:
            by_broker.setdefault(queue.broker_name, []).append(queue)
        consumer = self.consumer
        for broker_name, group_queues in by_broker.items():
            body = bodies.encode_lock_batch_request(LockBatchRequest(
                consumer.group, consumer.instance.client_id, group_queues))
            try:
                address = await consumer.instance.find_master(broker_name,
                                                              group_queues[0].topic)
                response = await consumer.instance.invoke(
                    address, request(RequestCode.UNLOCK_BATCH_MQ, body=body))
                check_response(response, address)
            except _ERRORS as error:
                LOGGER.info("%s: unlock at %s failed: %s", consumer.group, broker_name, error)
        for queue in queues:
            process_queue = consumer.process_queues.get(queue)
            if process_queue is not None:
                process_queue.locked = False

    async def wait_batch(self, queue: MessageQueue, process_queue: ProcessQueue) -> bool:
        """Take ``queue``'s consume lock, waiting at most UNLOCK_WAIT_MS for a running batch;
        True when taken (the caller releases it)."""
        try:
            await within(process_queue.consume_lock.acquire(), UNLOCK_WAIT_MS / 1000)
        except asyncio.TimeoutError:
            process_queue.try_unlock_times += 1
            LOGGER.info("%s: %s still consuming; letting it go anyway", self.consumer.group,
                        queue)
            return False
        return True

    # --- consuming -----------------------------------------------------------------------------

    def consume(self, queue: MessageQueue, process_queue: ProcessQueue,
                messages: list[MessageExt]) -> None:
        """New messages arrived (held by ``process_queue``): make sure one task consumes
        ``queue``."""
        task = process_queue.orderly_task
        if task is not None and not task.done():
            return
        task = start_task(self._consume_queue(queue, process_queue),
                          f"pybroker-orderly-{queue}", None, LOGGER)
        process_queue.orderly_task = task
        self.consumer.track_consume_task(task)

    def _may_consume(self, process_queue: ProcessQueue) -> bool:
        if not self.clustering:
            return True
        return process_queue.locked and \
            _now_ms() - process_queue.last_lock_timestamp_ms <= LOCK_MAX_LIVE_MS

    async def _consume_queue(self, queue: MessageQueue, process_queue: ProcessQueue) -> None:
        consumer = self.consumer
        while consumer.running and not process_queue.dropped and process_queue.messages:
            if not self._may_consume(process_queue):
                if not await self.lock(queue, process_queue):
                    await asyncio.sleep(RELOCK_DELAY_MS / 1000)
                continue
            async with process_queue.consume_lock:
                if process_queue.dropped:
                    return
                batch = [process_queue.messages[offset] for offset in
                         sorted(process_queue.messages)[:consumer.consume_message_batch_max_size]]
                context = ConsumeOrderlyContext(queue)
                started = time.monotonic_ns()
                status = await self._call_listener(batch, context)
                ok = status != ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                consumer.stats.consumed(queue.topic, (time.monotonic_ns() - started) // 1_000_000,
                                        len(batch) if ok else 0, 0 if ok else len(batch))
                if status != ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT or \
                        not await self._retry_needed(batch):
                    offset = process_queue.remove(batch)
                    if offset >= 0 and not process_queue.dropped:
                        consumer.offsets.update_offset(queue, offset)
                    process_queue.last_consume_timestamp_ms = _now_ms()
                    continue
            suspend_ms = context.suspend_current_queue_time_ms
            if suspend_ms < 0:
                suspend_ms = SUSPEND_CURRENT_QUEUE_TIME_MS_DEFAULT
            await asyncio.sleep(suspend_ms / 1000)

    async def _call_listener(self, batch: list[MessageExt],
                             context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        consumer = self.consumer
        try:
            status = await consumer.call_listener(batch, context)
        except Exception:   # a listener's bug suspends the queue; the batch is consumed again
            LOGGER.exception("%s: orderly listener raised; suspending %s", consumer.group,
                             context.message_queue)
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        if status is None:
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyStatus(status)

    async def _retry_needed(self, batch: list[MessageExt]) -> bool:
        """After a failed batch: send messages over their reconsume limit to the retry topic
        (the broker dead-letters them); True when any message must be consumed again."""
        consumer = self.consumer
        again = False
        for message in batch:
            if message.reconsume_times >= consumer.max_reconsume_times and \
                    await self._send_to_dead_letter(message):
                continue
            message.reconsume_times += 1
            again = True
        return again

    async def _send_to_dead_letter(self, message: MessageExt) -> bool:
        consumer = self.consumer
        retry = retry_message(message, consumer.group, message.reconsume_times,
                              consumer.max_reconsume_times)
        retry.properties.pop(Property.TRANSACTION_PREPARED, None)
        try:
            producer = await consumer.retry_producer()
            await producer.send(retry)
            return True
        except (ConnectionError, TimeoutError, OSError, ValueError, ClientError) as error:
            LOGGER.warning("%s: %s not sent to the dead-letter queue (%s); consuming it again",
                           consumer.group, message.msg_id, error)
            return False


def _mark(process_queue: ProcessQueue, locked: bool) -> None:
    process_queue.locked = locked
    if locked:
        process_queue.last_lock_timestamp_ms = _now_ms()
