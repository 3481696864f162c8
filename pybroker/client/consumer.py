# Push consumer: subscriptions, life cycle, rebalance; its parts consume (Java's
# DefaultMQPushConsumerImpl).
"""The asyncio push consumer (the blocking facade is :mod:`pybroker.client.sync`).

Split as Java splits its push consumer: per assigned queue a
:class:`~pybroker.client.process_queue.ProcessQueue` fed by one long-polling pull task
(:mod:`pybroker.client.pull_loop`), consumed by the consume service of the listener's kind,
:mod:`pybroker.client.concurrently` (batches, send-back of failed ones) or
:mod:`pybroker.client.orderly` (broker queue locks, one in-order consumer per queue); the
listener's contract is :mod:`pybroker.client.listener`. The services and the pull loop see this
class through small protocols (:class:`pybroker.client.consume_service.PushConsumerView`,
:class:`pybroker.client.pull_loop.PullingConsumer`) of its public members.

Clustering: the group's clients split the queues (``allocate_strategy``), offsets live on the
broker. Broadcasting: every client gets every queue, offsets live in a local file, failures are
not retried. Rebalance runs every 20 s and at once on NOTIFY_CONSUMER_IDS_CHANGED.
"""
import asyncio
import concurrent.futures
import inspect
import logging
import os
import time
from typing import Any, Optional

from pybroker.client.concurrently import ConcurrentlyService
from pybroker.client.consume_service import ConsumeService
from pybroker.client.consume_stats import ConsumerStats
from pybroker.client.errors import BrokerResponseError, ClientError, ClientStateError
from pybroker.client.instance import ClientInstance, check_response, request
from pybroker.client.listener import (ConsumeContext, ConsumeOrderlyContext,
                                      ConsumeOrderlyStatus, ConsumeStatus, Listener)
from pybroker.client.member import ConsumerMember, member_instance
from pybroker.client.message import MessageExt
from pybroker.client.offset_store import (OFFSET_UNKNOWN, LocalFileOffsetStore,
                                          RemoteOffsetStore)
from pybroker.client.orderly import OrderlyService
from pybroker.client.process_queue import ProcessQueue
from pybroker.client.producer import Producer
from pybroker.client.pull_loop import pull_loop, restore_retry_topic
from pybroker.client.pulling import queue_offset_query
from pybroker.client.rebalance import Strategy, allocate_average
from pybroker.client.route import subscribe_queues
from pybroker.client.selector import MessageSelector, subscription_of
from pybroker.protocol import bodies, headers
from pybroker.protocol.bodies import MessageQueue, SubscriptionData
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.constants import (EXPRESSION_TYPE_TAG, ConsumeFromWhere, ConsumeType,
                                         MessageModel, RETRY_GROUP_TOPIC_PREFIX, SUBSCRIBE_ALL,
                                         SystemGroup)
from pybroker.tasks import start_task

__all__ = ["PushConsumer"]

LOGGER = logging.getLogger("pybroker.client")

_RETRIABLE_ERRORS = (ConnectionError, TimeoutError, OSError, BrokerResponseError, ClientError)


class PushConsumer(ConsumerMember):
    """Consumes the subscribed topics of one consumer group with a listener.

    ``group``: consumer group. ``namesrv_addr`` or a shared ``instance``. ``message_model``:
    CLUSTERING or BROADCASTING. ``consume_from_where``/``consume_timestamp_ms`` (ms since the
    epoch): where a queue without a stored offset starts. ``allocate_strategy``: see
    :mod:`pybroker.client.rebalance`. Sizes are message counts unless named ``_bytes``; times
    in ms. ``offset_store_dir``: where broadcasting offsets are kept.
    """

    CONSUME_TYPE = ConsumeType.CONSUME_PASSIVELY

    def __init__(self, group: str, namesrv_addr: Optional[str] = None, *,
                 instance: Optional[ClientInstance] = None,
                 message_model: MessageModel = MessageModel.CLUSTERING,
                 consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                 consume_timestamp_ms: Optional[int] = None,
                 allocate_strategy: Strategy = allocate_average,
                 consume_message_batch_max_size: int = 1, pull_batch_size: int = 32,
                 pull_threshold_for_queue: int = 1000,
                 pull_threshold_size_for_queue_bytes: int = 100 << 20,
                 consume_thread_max: int = 20, max_reconsume_times: int = 16,
                 broker_suspend_max_time_ms: int = 15000,
                 consumer_timeout_ms_when_suspend: int = 30000,
                 pull_time_delay_ms_when_exception: int = 3000,
                 shutdown_timeout_ms: int = 10000, offset_store_dir: Optional[str] = None,
                 **instance_options: Any):
        remark = headers.validate_group(group)
        if remark is not None:
            raise ValueError(remark)
        if not 1 <= consume_message_batch_max_size <= 1024:
            raise ValueError("consume_message_batch_max_size must be in [1, 1024]")
        if not 1 <= pull_batch_size <= 1024:
            raise ValueError("pull_batch_size must be in [1, 1024]")
        instance = member_instance(namesrv_addr, instance, instance_options)
        self.group = group
        self.instance = instance
        self.message_model = MessageModel(message_model)
        self.consume_from_where = ConsumeFromWhere(consume_from_where)
        self.consume_timestamp_ms = consume_timestamp_ms
        self.allocate_strategy = allocate_strategy
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.pull_batch_size = pull_batch_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue_bytes = pull_threshold_size_for_queue_bytes
        self.consume_thread_max = consume_thread_max
        self.max_reconsume_times = max_reconsume_times
        self.broker_suspend_max_time_ms = broker_suspend_max_time_ms
        self.consumer_timeout_ms_when_suspend = consumer_timeout_ms_when_suspend
        self.pull_time_delay_ms_when_exception = pull_time_delay_ms_when_exception
        self.shutdown_timeout_ms = shutdown_timeout_ms
        self.offset_store_dir = offset_store_dir or os.path.join(
            os.path.expanduser("~"), ".rocketmq_offsets")
        self.subscriptions: dict[str, SubscriptionData] = {}
        self.listener: Optional[Listener] = None
        self.offset_store: RemoteOffsetStore | LocalFileOffsetStore | None = None
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        self._pull_tasks: dict[MessageQueue, asyncio.Task] = {}
        self._consume_tasks: set[asyncio.Task] = set()
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._rebalance_lock: Optional[asyncio.Lock] = None
        self._inner_producer: Optional[Producer] = None
        self._started = False
        self.orderly = False
        self._consume_service: Optional[ConsumeService] = None
        self._orderly_service: Optional[OrderlyService] = None
        self.start_timestamp_ms = 0
        self.stats = ConsumerStats()          # GET_CONSUMER_RUNNING_INFO's statusTable

    # --- what start() creates, as the consume services and the pull loop see it --------------
    @property
    def running(self) -> bool:
        """True from start until shutdown."""
        return self._started

    @property
    def offsets(self) -> RemoteOffsetStore | LocalFileOffsetStore:
        """The offset store (ClientStateError before start)."""
        store = self.offset_store
        if store is None:
            raise ClientStateError(f"consumer {self.group} is not started")
        return store

    @property
    def consume_service(self) -> ConsumeService:
        """Where the pull loop hands what it pulled (ClientStateError before start)."""
        if self._consume_service is None:
            raise ClientStateError(f"consumer {self.group} is not started")
        return self._consume_service

    def _started_lock(self) -> asyncio.Lock:
        if self._rebalance_lock is None:
            raise ClientStateError(f"consumer {self.group} is not started")
        return self._rebalance_lock

    async def call_listener(self, messages: list[MessageExt], context: Any) -> Any:
        """The listener's answer for ``messages``: a coroutine listener awaited on the loop,
        a plain one run in the consumer's thread pool; raises what the listener raises."""
        listener = self.listener
        if listener is None:
            raise ClientStateError(f"consumer {self.group} has no message listener")
        if self._executor is None:
            return await listener(messages, context)
        return await asyncio.get_running_loop().run_in_executor(self._executor, listener,
                                                                messages, context)

    async def retry_producer(self) -> Producer:
        """The producer that sends to the retry topic: the instance's inner producer (started
        here, once, unless the instance has one)."""
        if self._inner_producer is None:
            producer = Producer(SystemGroup.CLIENT_INNER_PRODUCER, instance=self.instance)
            if SystemGroup.CLIENT_INNER_PRODUCER in self.instance.producers:
                producer = self.instance.producers[SystemGroup.CLIENT_INNER_PRODUCER]
            else:
                await producer.start()
                self._inner_producer = producer
            return producer
        return self._inner_producer

    def track_consume_task(self, task: asyncio.Task) -> None:
        """A consume task (a batch, an orderly queue) shutdown waits for."""
        self._consume_tasks.add(task)
        task.add_done_callback(self._consume_tasks.discard)

    # --- configuration -----------------------------------------------------------------------

    def subscribe(self, topic: str, expression: "str | MessageSelector" = SUBSCRIBE_ALL) -> None:
        """Consume ``topic`` filtered by a tag expression (``"*"``, ``"TagA || TagB"``) or a
        :class:`MessageSelector` (``MessageSelector.by_sql("a > 5")``; the broker checks an
        SQL92 selector when the consumer starts)."""
        remark = headers.validate_topic(topic)
        if remark is not None:
            raise ValueError(remark)
        self.subscriptions[topic] = subscription_of(topic, expression,
                                                    time.time_ns() // 1_000_000)

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic`` (takes effect at the next rebalance)."""
        self.subscriptions.pop(topic, None)

    def register_message_listener(self, listener: Listener) -> None:
        """``listener(messages, context) -> ConsumeStatus``: a coroutine function (run on the
        loop) or a plain function (run in the consumer's thread pool)."""
        self.listener = listener
        self.orderly = False

    def register_message_listener_orderly(self, listener) -> None:
        """``listener(messages, ConsumeOrderlyContext) -> ConsumeOrderlyStatus``: each queue is
        consumed in queue-offset order by one call at a time; clustering consumers hold the
        queue's broker lock while they consume it (see :mod:`pybroker.client.orderly`)."""
        self.listener = listener
        self.orderly = True

    # --- life cycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Register the group, start the instance, heartbeat and rebalance once."""
        if self._started:
            raise ClientStateError(f"consumer {self.group} already started")
        if self.listener is None or not self.subscriptions:
            raise ClientStateError("subscribe and register a message listener before start")
        if self.message_model == MessageModel.CLUSTERING:
            self.subscribe(RETRY_GROUP_TOPIC_PREFIX + self.group)
            self.offset_store = RemoteOffsetStore(self.instance, self.group)
        else:
            self.offset_store = LocalFileOffsetStore(self.offset_store_dir,
                                                     self.instance.client_id, self.group)
        self._rebalance_lock = asyncio.Lock()
        if not inspect.iscoroutinefunction(self.listener):
            self._executor = concurrent.futures.ThreadPoolExecutor(
                self.consume_thread_max, thread_name_prefix=f"pybroker-consume-{self.group}")
        if self.orderly:
            self._consume_service = self._orderly_service = OrderlyService(
                self, self.message_model == MessageModel.CLUSTERING)
        else:
            self._consume_service = ConcurrentlyService(self, self.message_model,
                                                        self.consume_thread_max)
        self.instance.register_consumer(self.group, self)
        await self.instance.start()
        self._started = True
        self.start_timestamp_ms = time.time_ns() // 1_000_000
        if self._orderly_service is not None:
            self._orderly_service.start()
        for topic in self.subscriptions:
            await self.instance.update_route(topic)
        try:
            await self._check_subscriptions()
        except ClientError:
            await self.shutdown()
            raise
        await self.instance.send_heartbeat()
        await self.rebalance()

    async def _check_subscriptions(self) -> None:
        """CHECK_CLIENT_CONFIG for every non-TAG subscription at one master of its topic, as
        the Java consumer does at start: a selector the broker refuses fails the start."""
        for topic, subscription in self.subscriptions.items():
            if subscription.expression_type == EXPRESSION_TYPE_TAG:
                continue
            route = self.instance.routes.get(topic)
            if route is None or not route.broker_datas:
                continue
            broker_name = route.broker_datas[0].broker_name
            address = await self.instance.find_master(broker_name, topic)
            body = bodies.encode_check_client_request(bodies.CheckClientRequest(
                self.instance.client_id, self.group, subscription))
            response = await self.instance.invoke(
                address, request(RequestCode.CHECK_CLIENT_CONFIG, body=body))
            check_response(response, address)

    async def shutdown(self) -> None:
        """Stop pulling, let running batches finish (at most ``shutdown_timeout_ms``),
        persist offsets, unregister and stop the instance. No task or thread is left."""
        if not self._started:
            return
        self._started = False
        pulls = list(self._pull_tasks.values())
        for task in pulls:
            task.cancel()
        await asyncio.gather(*pulls, return_exceptions=True)
        self._pull_tasks.clear()
        if self._consume_tasks:
            await asyncio.wait(set(self._consume_tasks), timeout=self.shutdown_timeout_ms / 1000)
            for task in set(self._consume_tasks):
                task.cancel()
            await asyncio.gather(*self._consume_tasks, return_exceptions=True)
        await self.persist_offsets()
        if self._orderly_service is not None:
            await self._orderly_service.stop()
        self.instance.consumers.pop(self.group, None)
        await self.instance.unregister_client(consumer_group=self.group)
        if self._inner_producer is not None:
            await self._inner_producer.shutdown()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        await self.instance.shutdown()

    # --- what the instance asks --------------------------------------------------------------

    def notify_consumer_ids_changed(self) -> None:
        """The broker says the group changed: rebalance now."""
        if self._started:
            self.instance.spawn(self.rebalance())

    async def persist_offsets(self) -> None:
        """Write the offsets of the assigned queues to their store."""
        if self.offset_store is not None:
            await self.offset_store.persist_all()

    # --- rebalance -----------------------------------------------------------------------------

    async def rebalance(self) -> None:
        """Recompute this client's queues for every subscribed topic and start/stop pulls."""
        if not self._started:
            return
        async with self._started_lock():
            for topic in list(self.subscriptions):
                try:
                    await self._rebalance_topic(topic)
                except _RETRIABLE_ERRORS as error:
                    LOGGER.info("rebalance of %s/%s failed: %s", self.group, topic, error)

    async def _rebalance_topic(self, topic: str) -> None:
        route = self.instance.routes.get(topic) or await self.instance.update_route(topic)
        if route is None:
            return
        queues = subscribe_queues(topic, route)
        if self.message_model == MessageModel.BROADCASTING:
            mine = set(queues)
        else:
            client_ids = await self._find_consumer_ids(topic)
            if not client_ids:
                return
            mine = set(self.allocate_strategy(self.group, self.instance.client_id, queues,
                                              client_ids))
        for queue in [q for q in self.process_queues if q.topic == topic and q not in mine]:
            await self._drop_queue(queue)
        for queue in sorted(mine - set(self.process_queues),
                            key=lambda q: (q.broker_name, q.queue_id)):
            process_queue = ProcessQueue(0)
            service = self._orderly_service
            if service is not None and service.clustering and \
                    not await service.lock(queue, process_queue):
                continue   # another client still holds it: try again next rebalance
            offset = await self._compute_pull_from_where(queue)
            if offset < 0:
                continue
            process_queue.next_offset = offset
            self.process_queues[queue] = process_queue
            self._pull_tasks[queue] = start_task(
                pull_loop(self, queue, process_queue), f"pybroker-pull-{queue}", None, LOGGER)
            LOGGER.info("%s: consume %s from offset %d", self.group, queue, offset)

    async def _find_consumer_ids(self, topic: str) -> list[str]:
        route = self.instance.routes[topic]
        for broker in route.broker_datas:
            address = broker.broker_addrs.get(0) or next(iter(broker.broker_addrs.values()), None)
            if address is None:
                continue
            fields = headers.encode_header(headers.CONSUMER_GROUP_REQUEST,
                                           {"consumer_group": self.group})
            response = await self.instance.invoke(
                address, request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, fields))
            check_response(response, address)
            return bodies.decode_consumer_list(response.body or b'{"consumerIdList":[]}')
        return []

    async def _drop_queue(self, queue: MessageQueue) -> None:
        process_queue = self.process_queues.pop(queue)
        service = self._orderly_service
        # Orderly: let the running batch finish and commit before the queue is let go.
        held = service is not None and await service.wait_batch(queue, process_queue)
        process_queue.dropped = True
        try:
            task = self._pull_tasks.pop(queue, None)
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            await self.offsets.persist(queue)
            self.offsets.remove(queue)
            if service is not None and service.clustering:
                await service.unlock([queue])
        finally:
            if held:
                process_queue.consume_lock.release()
        LOGGER.info("%s: no longer consumes %s", self.group, queue)

    async def _compute_pull_from_where(self, queue: MessageQueue) -> int:
        offset = await self.offsets.read_offset(queue, from_store=True)
        if offset >= 0:
            return offset
        where = self.consume_from_where
        if queue.topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or where in (
                ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                ConsumeFromWhere.CONSUME_FROM_MIN_OFFSET):
            return 0
        if where == ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
            timestamp_ms = self.consume_timestamp_ms
            if timestamp_ms is None:
                timestamp_ms = time.time_ns() // 1_000_000 - 30 * 60 * 1000
            return await queue_offset_query(self.instance, queue,
                                            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, timestamp_ms)
        return await queue_offset_query(self.instance, queue, RequestCode.GET_MAX_OFFSET)

    # --- what the broker asks (pybroker.client.client_calls) --------------------------------

    async def reset_offset(self, offsets: dict[MessageQueue, int]) -> None:
        """Continue each queue of ``offsets`` from its queue offset (RESET_CONSUMER_CLIENT_OFFSET):
        its process queue is dropped, the offset stored, and a rebalance starts it again."""
        if not self._started or not offsets:
            return
        async with self._started_lock():
            for queue, queue_offset in offsets.items():
                if queue in self.process_queues:
                    await self._drop_queue(queue)
                self.offsets.update_offset(queue, queue_offset)
                try:
                    await self.offsets.persist(queue, oneway=False)
                except _RETRIABLE_ERRORS as error:
                    LOGGER.warning("%s: reset offset of %s not stored: %s", self.group, queue,
                                   error)
        LOGGER.info("%s: offsets reset for %d queue(s)", self.group, len(offsets))
        await self.rebalance()

    async def consume_directly(self, message: MessageExt) -> tuple[str, Optional[str]]:
        """Hand ``message`` to the listener once (CONSUME_MESSAGE_DIRECTLY); returns Java's
        CMResult name and a remark. No offset moves and nothing is sent back."""
        restore_retry_topic(message, self.group)
        context: ConsumeContext | ConsumeOrderlyContext
        names: dict[Any, str]
        status_type: type[ConsumeStatus] | type[ConsumeOrderlyStatus]
        if self.orderly:
            context = ConsumeOrderlyContext(message.message_queue)
            names = {ConsumeOrderlyStatus.SUCCESS: "CR_SUCCESS",
                     ConsumeOrderlyStatus.COMMIT: "CR_COMMIT",
                     ConsumeOrderlyStatus.ROLLBACK: "CR_ROLLBACK",
                     ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT: "CR_LATER"}
            status_type = ConsumeOrderlyStatus
        else:
            context = ConsumeContext(message.message_queue)
            names = {ConsumeStatus.CONSUME_SUCCESS: "CR_SUCCESS",
                     ConsumeStatus.RECONSUME_LATER: "CR_LATER"}
            status_type = ConsumeStatus
        try:
            status = await self.call_listener([message], context)
        except Exception as error:   # reported to the admin, as Java does
            return "CR_THROW_EXCEPTION", repr(error)
        if status is None:
            return "CR_RETURN_NULL", None
        try:
            return names[status_type(status)], None
        except ValueError:
            return "CR_THROW_EXCEPTION", f"listener returned {status!r}"

    # --- inspection ---------------------------------------------------------------------------

    def assigned_queues(self) -> list[MessageQueue]:
        """Queues this client consumes now."""
        return sorted(self.process_queues, key=lambda q: (q.topic, q.broker_name, q.queue_id))

    async def consumer_offset(self, queue: MessageQueue) -> int:
        """The consumer offset of ``queue`` held in memory (-1 when none)."""
        if self.offset_store is None:
            return OFFSET_UNKNOWN
        return self.offsets.cached_offset(queue)
