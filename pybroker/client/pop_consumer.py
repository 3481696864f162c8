# POP consumers (5.x): receive/ack/change-invisible-time, and a push consumer driven by POP.
"""Consumers of RocketMQ 5's POP mode: the broker keeps the assignment and the in-flight state,
so any number of clients of a group may consume the same queues, and a message a client does
not acknowledge within its invisible time comes back (to the group's POP retry topic) for any
client of the group.

:class:`PopConsumer` is the simple form (the 5.x SimpleConsumer's model): :meth:`PopConsumer.
receive` pops from the next broker of a subscribed topic (every queue of it, long polling up to
``poll_time_ms``), and the caller acknowledges (:meth:`~PopConsumer.ack`, :meth:`~PopConsumer.
ack_all`: one BATCH_ACK_MESSAGE per broker) or changes the invisible time of each message.
``order=True`` pops order runs: a queue's next messages only after the run is acknowledged or
invisible (the broker holds the head); a receive that times out repeats its attempt id, so a
lost answer does not hold the queue until the run's invisible time.

:class:`PopPushConsumer` feeds a listener (the push consumer's contract: ConsumeStatus, batches
of ``consume_message_batch_max_size``, at most ``consume_thread_max`` at a time, and up to
``pop_threshold_for_queue`` messages waiting per topic and broker). A consumed message is
acked; a failed one comes back after the delay of its reconsume count (the 5.x POP delay
levels, CHANGE_MESSAGE_INVISIBLETIME); one that failed ``max_reconsume_times`` times is sent
to the group's dead-letter queue (CONSUMER_SEND_MSG_BACK, delay level -1) and acked, as the
5.x proxy does for its clients.

Both register the group with the brokers as a POP consumer (heartbeat CONSUME_POP).
"""
import asyncio
import concurrent.futures
import inspect
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, Optional

from pybroker.client.errors import BrokerResponseError, ClientError, ClientStateError
from pybroker.client.instance import ClientInstance, check_response, request
from pybroker.client.listener import ConsumeContext, ConsumeStatus
from pybroker.client.member import ConsumerMember, member_instance
from pybroker.client.message import MessageExt
from pybroker.client.popping import (PopStatus, ack_message, batch_ack_messages,
                                     change_invisible_time, pop_messages, receipt_handle)
from pybroker.client.selector import MessageSelector, matches, subscription_of
from pybroker.protocol import headers, pop
from pybroker.protocol.bodies import SubscriptionData
from pybroker.protocol.codes import RequestCode
from pybroker.tasks import start_task
from pybroker.protocol.constants import (EXPRESSION_TYPE_TAG, SUBSCRIBE_ALL, ConsumeFromWhere,
                                         ConsumeType, MessageModel, PopConstants)

__all__ = ["PopConsumer", "PopPushConsumer", "POP_DELAY_LEVELS_S"]

LOGGER = logging.getLogger("pybroker.client")
# Java DefaultMQPushConsumerImpl.popDelayLevel: seconds before a failed POP message comes
# back, by its reconsume count.
POP_DELAY_LEVELS_S = (10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800,
                      3600, 7200)
_RETRY_ERRORS = (ConnectionError, TimeoutError, OSError, BrokerResponseError, ClientError)
_ERROR_BACKOFF_S = 1.0
_POLLING_FULL_BACKOFF_S = 0.5


class PopConsumer(ConsumerMember):
    """Pops, acks and changes invisible times for one consumer group (see the module doc).

    ``invisible_time_ms``: how long a popped message stays with this client; ``poll_time_ms``:
    how long the broker holds an empty POP; ``max_nums``: messages per POP (at most 32);
    ``consume_from_where``: LAST (a queue never popped starts at its last message) or FIRST.
    """

    CONSUME_TYPE = ConsumeType.CONSUME_POP

    def __init__(self, group: str, namesrv_addr: Optional[str] = None, *,
                 instance: Optional[ClientInstance] = None, invisible_time_ms: int = 60000,
                 poll_time_ms: int = 15000, max_nums: int = 32,
                 consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                 **instance_options: Any):
        remark = headers.validate_group(group)
        if remark is not None:
            raise ValueError(remark)
        if not 1 <= max_nums <= PopConstants.MAX_MSG_NUMS:
            raise ValueError(f"max_nums must be in [1, {PopConstants.MAX_MSG_NUMS}]")
        instance = member_instance(namesrv_addr, instance, instance_options)
        self.group = group
        self.instance = instance
        self.invisible_time_ms = invisible_time_ms
        self.poll_time_ms = poll_time_ms
        self.max_nums = max_nums
        self.consume_from_where = ConsumeFromWhere(consume_from_where)
        self.subscriptions: dict[str, SubscriptionData] = {}
        self.started = False
        self.start_timestamp_ms = 0
        self._next = 0
        # What GET_CONSUMER_RUNNING_INFO reads of every consumer (client_calls.py).
        self.message_model = MessageModel.CLUSTERING
        self.process_queues: dict = {}
        self.orderly = False
        self.consume_thread_max = 1
        self.consume_message_batch_max_size = 1
        self.pull_batch_size = max_nums
        self.pull_threshold_for_queue = 0
        self.max_reconsume_times = 16

    @property
    def init_mode(self) -> int:
        first = (ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                 ConsumeFromWhere.CONSUME_FROM_MIN_OFFSET)
        return PopConstants.INIT_MODE_MIN if self.consume_from_where in first else \
            PopConstants.INIT_MODE_MAX

    def subscribe(self, topic: str, expression: "str | MessageSelector" = SUBSCRIBE_ALL) -> None:
        """Pop ``topic`` filtered by a tag expression or a :class:`MessageSelector` (the
        broker filters both; SQL92 needs no enablePropertyFilter for POP)."""
        remark = headers.validate_topic(topic)
        if remark is not None:
            raise ValueError(remark)
        self.subscriptions[topic] = subscription_of(topic, expression,
                                                    time.time_ns() // 1_000_000)

    # --- life cycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        if self.started:
            raise ClientStateError(f"consumer {self.group} already started")
        if not self.subscriptions:
            raise ClientStateError("subscribe before start")
        self.instance.register_consumer(self.group, self)
        await self.instance.start()
        self.started = True
        self.start_timestamp_ms = time.time_ns() // 1_000_000
        for topic in self.subscriptions:
            await self.instance.update_route(topic)
        await self.instance.send_heartbeat()

    async def shutdown(self) -> None:
        if not self.started:
            return
        self.started = False
        self.instance.consumers.pop(self.group, None)
        await self.instance.unregister_client(consumer_group=self.group)
        await self.instance.shutdown()

    # --- what the instance asks ------------------------------------------------------------
    def notify_consumer_ids_changed(self) -> None:
        """POP needs no rebalance: the broker hands out."""

    async def persist_offsets(self) -> None:
        """The broker keeps POP offsets."""

    async def rebalance(self) -> None:
        """The broker assigns."""

    # --- receiving and acknowledging -----------------------------------------------------------
    def _targets(self, topic: Optional[str]) -> list[tuple[str, str]]:
        """(topic, broker name) pairs to pop, readable brokers of the subscribed topics."""
        targets = []
        for name in ([topic] if topic is not None else sorted(self.subscriptions)):
            route = self.instance.routes.get(name)
            if route is None:
                continue
            for queue_data in sorted(route.queue_datas, key=lambda data: data.broker_name):
                if queue_data.perm & 4:
                    targets.append((name, queue_data.broker_name))
        return targets

    async def receive(self, max_nums: Optional[int] = None, *, topic: Optional[str] = None,
                      invisible_time_ms: Optional[int] = None,
                      poll_time_ms: Optional[int] = None, order: bool = False,
                      attempt_id: Optional[str] = None) -> list[MessageExt]:
        """Pop from the next broker of the subscribed topics (or of ``topic``); the messages
        (possibly none after the poll time). Each carries its receipt handle."""
        self._require_started()
        targets = self._targets(topic)
        if not targets:
            for name in ([topic] if topic else list(self.subscriptions)):
                await self.instance.update_route(name)
            targets = self._targets(topic)
            if not targets:
                raise ClientError(f"no readable route of {topic or sorted(self.subscriptions)}")
        name, broker_name = targets[self._next % len(targets)]
        self._next += 1
        return await self.receive_from(name, broker_name, max_nums=max_nums,
                                       invisible_time_ms=invisible_time_ms,
                                       poll_time_ms=poll_time_ms, order=order,
                                       attempt_id=attempt_id)

    async def receive_from(self, topic: str, broker_name: str, *, queue_id: int = -1,
                           max_nums: Optional[int] = None,
                           invisible_time_ms: Optional[int] = None,
                           poll_time_ms: Optional[int] = None, order: bool = False,
                           attempt_id: Optional[str] = None) -> list[MessageExt]:
        """Pop ``topic`` at ``broker_name`` (``queue_id`` -1: every queue)."""
        self._require_started()
        subscription = self.subscriptions[topic]
        address = await self.instance.find_master(broker_name, topic)
        expression_type = subscription.expression_type
        expression = subscription.sub_string if subscription.sub_string != SUBSCRIBE_ALL \
            else None
        result = await pop_messages(
            self.instance, address, broker_name, self.group, topic, queue_id=queue_id,
            max_nums=max_nums or self.max_nums,
            invisible_time_ms=invisible_time_ms or self.invisible_time_ms,
            poll_time_ms=self.poll_time_ms if poll_time_ms is None else poll_time_ms,
            init_mode=self.init_mode,
            expression_type=expression_type if expression else None, expression=expression,
            order=order, attempt_id=attempt_id)
        if result.status is PopStatus.POLLING_FULL:
            LOGGER.info("%s: POP of %s at %s: polling full", self.group, topic, broker_name)
        if expression_type == EXPRESSION_TYPE_TAG:
            return [message for message in result.messages if matches(subscription, message)]
        return result.messages

    async def _address_of(self, message: MessageExt) -> str:
        info = pop.parse_extra_info(receipt_handle(message))
        return await self.instance.find_master(info.broker_name, message.topic)

    async def ack(self, message: MessageExt) -> None:
        """ACK_MESSAGE: the message is done; it never comes back."""
        self._require_started()
        await ack_message(self.instance, await self._address_of(message), self.group, message)

    async def ack_all(self, messages: list[MessageExt]) -> None:
        """BATCH_ACK_MESSAGE, one per broker."""
        self._require_started()
        by_address: dict[str, list[MessageExt]] = {}
        for message in messages:
            by_address.setdefault(await self._address_of(message), []).append(message)
        for address, batch in by_address.items():
            await batch_ack_messages(self.instance, address, self.group, batch)

    async def change_invisible_time(self, message: MessageExt, invisible_time_ms: int) -> None:
        """CHANGE_MESSAGE_INVISIBLETIME: the message comes back ``invisible_time_ms`` from now
        unless acked; its receipt handle is updated."""
        self._require_started()
        await change_invisible_time(self.instance, await self._address_of(message), self.group,
                                    message, invisible_time_ms)

    def _require_started(self) -> None:
        if not self.started:
            raise ClientStateError(f"consumer {self.group} is not started")


class PopPushConsumer(PopConsumer):
    """A listener fed by POP (see the module docstring). ``order=True``: order POP, one run
    of a topic and broker at a time, consumed in queue order. ``pop_delay_levels_s``: seconds
    a failed message stays invisible, by its reconsume count (Java's by default)."""

    def __init__(self, group: str, namesrv_addr: Optional[str] = None, *,
                 consume_thread_max: int = 20, consume_message_batch_max_size: int = 1,
                 pop_threshold_for_queue: int = 96, max_reconsume_times: int = 16,
                 order: bool = False,
                 pop_delay_levels_s: tuple[int, ...] = POP_DELAY_LEVELS_S, **options: Any):
        super().__init__(group, namesrv_addr, **options)
        if not pop_delay_levels_s:
            raise ValueError("pop_delay_levels_s must name at least one delay")
        self.pop_delay_levels_s = tuple(pop_delay_levels_s)
        self.consume_thread_max = consume_thread_max
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.pull_threshold_for_queue = pop_threshold_for_queue
        self.max_reconsume_times = max_reconsume_times
        self.orderly = order
        self.listener: Optional[Callable[[list[MessageExt], ConsumeContext], Any]] = None
        self._tasks: set[asyncio.Task] = set()
        self._loops: list[asyncio.Task] = []
        self._semaphore: Optional[asyncio.Semaphore] = None
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None

    def register_message_listener(self, listener) -> None:
        """``listener(messages, ConsumeContext) -> ConsumeStatus``: a coroutine function or a
        plain function (run in the consumer's thread pool)."""
        self.listener = listener

    async def start(self) -> None:
        if self.listener is None:
            raise ClientStateError("register a message listener before start")
        await super().start()
        self._semaphore = asyncio.Semaphore(self.consume_thread_max)
        if not inspect.iscoroutinefunction(self.listener):
            self._executor = concurrent.futures.ThreadPoolExecutor(
                self.consume_thread_max, thread_name_prefix=f"pybroker-pop-{self.group}")
        for topic, broker_name in self._targets(None):
            self._loops.append(start_task(self._pop_loop(topic, broker_name),
                                          f"pybroker-pop-{topic}-{broker_name}", None, LOGGER))

    async def shutdown(self) -> None:
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        self._loops.clear()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=10)
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        await super().shutdown()

    async def _pop_loop(self, topic: str, broker_name: str) -> None:
        waiting = [0]             # messages popped, not yet acked or changed (flow control)
        attempt_id: Optional[str] = None
        while self.started:
            if waiting[0] > self.pull_threshold_for_queue or (self.orderly and waiting[0]):
                await asyncio.sleep(0.05)
                continue
            attempt_id = attempt_id or (uuid.uuid4().hex if self.orderly else None)
            try:
                messages = await self.receive_from(topic, broker_name, order=self.orderly,
                                                   attempt_id=attempt_id)
            except asyncio.TimeoutError:
                continue          # an order POP repeats its attempt id after a timeout
            except _RETRY_ERRORS as error:
                LOGGER.info("%s: POP of %s at %s failed: %s", self.group, topic, broker_name,
                            error)
                await asyncio.sleep(_ERROR_BACKOFF_S)
                continue
            attempt_id = None
            if not messages:
                continue
            waiting[0] += len(messages)
            step = self.consume_message_batch_max_size
            for start in range(0, len(messages), step):
                batch = messages[start:start + step]
                if self.orderly:
                    await self._consume(batch, waiting)
                else:
                    await self._semaphore_acquire()
                    task = start_task(self._consume(batch, waiting, release=True),
                                      f"pybroker-pop-consume-{self.group}", None, LOGGER)
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)

    async def _semaphore_acquire(self) -> None:
        assert self._semaphore is not None
        await self._semaphore.acquire()

    async def _consume(self, batch: list[MessageExt], waiting: list[int],
                       release: bool = False) -> None:
        try:
            status = await self._call_listener(batch)
            for message in batch:
                try:
                    if status is ConsumeStatus.CONSUME_SUCCESS:
                        await self.ack(message)
                    else:
                        await self._later(message)
                except _RETRY_ERRORS as error:
                    LOGGER.warning("%s: finishing %s failed (it comes back): %s", self.group,
                                   message.msg_id, error)
        finally:
            waiting[0] -= len(batch)
            if release and self._semaphore is not None:
                self._semaphore.release()

    async def _call_listener(self, batch: list[MessageExt]) -> ConsumeStatus:
        listener = self.listener
        assert listener is not None, "start() checks there is one"
        context = ConsumeContext(batch[0].message_queue)
        try:
            if inspect.iscoroutinefunction(listener):
                status = await listener(batch, context)
            else:
                loop = asyncio.get_running_loop()
                status = await loop.run_in_executor(self._executor, listener, batch, context)
        except Exception:
            LOGGER.exception("%s: the listener failed", self.group)
            return ConsumeStatus.RECONSUME_LATER
        return status if isinstance(status, ConsumeStatus) else ConsumeStatus.RECONSUME_LATER

    async def _later(self, message: MessageExt) -> None:
        """A failed message: to the dead-letter queue past max_reconsume_times, else back
        after its POP delay level."""
        if message.reconsume_times >= self.max_reconsume_times:
            await self._to_dead_letter_queue(message)
            await self.ack(message)
            return
        levels = self.pop_delay_levels_s
        await self.change_invisible_time(
            message, levels[min(message.reconsume_times, len(levels) - 1)] * 1000)

    async def _to_dead_letter_queue(self, message: MessageExt) -> None:
        info = pop.parse_extra_info(receipt_handle(message))
        address = await self._address_of(message)
        fields = headers.encode_header(headers.CONSUMER_SEND_MSG_BACK_REQUEST, {
            "physical_offset": message.physical_offset, "group": self.group,
            "delay_level": -1, "origin_msg_id": message.msg_id,
            "origin_topic": pop.real_topic(message.topic, self.group, info.retry),
            "max_reconsume_times": 0})
        response = await self.instance.invoke(address, request(
            RequestCode.CONSUMER_SEND_MSG_BACK, fields))
        check_response(response, address)
