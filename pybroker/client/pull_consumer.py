# Lite pull consumer: subscribe or assign, then poll; seek, commit, offsets by time.
"""The asyncio lite-pull consumer (RocketMQ's ``DefaultLitePullConsumer`` model).

Either :meth:`LitePullConsumer.subscribe` (the group's clients split the queues, rebalanced
every 20 s and on NOTIFY_CONSUMER_IDS_CHANGED) or :meth:`LitePullConsumer.assign` (fixed
queues). Background tasks pull each queue into one bounded buffer; :meth:`poll` hands out what
is buffered. With ``auto_commit`` the consumer offset of a queue moves past every message
:meth:`poll` returned; otherwise :meth:`commit` does it. Offsets reach the broker every 5 s and
at shutdown.
"""
import asyncio
import logging
import time
from typing import Any, Optional

from pybroker.client.errors import BrokerResponseError, ClientError, ClientStateError
from pybroker.client.instance import ClientInstance, check_response, request
from pybroker.client.member import ConsumerMember, member_instance
from pybroker.client.message import MessageExt
from pybroker.client.offset_store import OFFSET_UNKNOWN, RemoteOffsetStore
from pybroker.client.pulling import pull_message, queue_offset_query
from pybroker.client.rebalance import Strategy, allocate_average
from pybroker.client.route import subscribe_queues
from pybroker.client.selector import MessageSelector, subscription_of
from pybroker.protocol import bodies, headers
from pybroker.protocol.bodies import MessageQueue, SubscriptionData
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.constants import (ConsumeFromWhere, ConsumeType, SUBSCRIBE_ALL)
from pybroker.tasks import Rounds, start_task, within

LOGGER = logging.getLogger("pybroker.client")
_RETRIABLE_ERRORS = (ConnectionError, TimeoutError, OSError, BrokerResponseError, ClientError)
_BUFFER_FULL_DELAY_MS = 50


class _QueueState:
    def __init__(self, next_offset: int):
        self.next_offset = next_offset    # next queue offset to pull
        self.consumed_offset = next_offset   # one past the last message handed out
        self.epoch = 0                    # bumped by seek: buffered batches of older epochs die
        self.task: Optional[asyncio.Task] = None


class LitePullConsumer(ConsumerMember):
    """Poll-style consumer of one consumer group (clustering offsets on the broker).

    ``pull_batch_size``: messages per pull. ``pull_threshold_for_all``: buffered messages
    above which pulling pauses. ``poll_timeout_ms``: default wait of :meth:`poll`.
    ``consume_from_where``: where a queue without a stored offset starts. Times in ms.
    """

    CONSUME_TYPE = ConsumeType.CONSUME_ACTIVELY

    def __init__(self, group: str, namesrv_addr: Optional[str] = None, *,
                 instance: Optional[ClientInstance] = None,
                 consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                 allocate_strategy: Strategy = allocate_average, pull_batch_size: int = 10,
                 pull_threshold_for_all: int = 10000, auto_commit: bool = True,
                 poll_timeout_ms: int = 5000, broker_suspend_max_time_ms: int = 20000,
                 consumer_pull_timeout_ms: int = 30000,
                 pull_time_delay_ms_when_exception: int = 1000, **instance_options: Any):
        remark = headers.validate_group(group)
        if remark is not None:
            raise ValueError(remark)
        instance = member_instance(namesrv_addr, instance, instance_options)
        self.group = group
        self.instance = instance
        self.consume_from_where = ConsumeFromWhere(consume_from_where)
        self.allocate_strategy = allocate_strategy
        self.pull_batch_size = pull_batch_size
        self.pull_threshold_for_all = pull_threshold_for_all
        self.auto_commit = auto_commit
        self.poll_timeout_ms = poll_timeout_ms
        self.broker_suspend_max_time_ms = broker_suspend_max_time_ms
        self.consumer_pull_timeout_ms = consumer_pull_timeout_ms
        self.pull_time_delay_ms_when_exception = pull_time_delay_ms_when_exception
        self.subscriptions: dict[str, SubscriptionData] = {}
        self.assigned: Optional[set[MessageQueue]] = None
        self.offset_store = RemoteOffsetStore(instance, group)
        self.queues: dict[MessageQueue, _QueueState] = {}
        self._buffer: Optional[asyncio.Queue] = None
        self._buffered_count = 0
        self._lock: Optional[asyncio.Lock] = None
        self._started = False

    # --- configuration -----------------------------------------------------------------------

    def subscribe(self, topic: str, expression: "str | MessageSelector" = SUBSCRIBE_ALL) -> None:
        """Consume ``topic`` with the group (queues rebalanced among its clients), filtered by
        a tag expression or a :class:`MessageSelector` (``MessageSelector.by_sql(...)``).
        Call it before :meth:`start`; later calls take effect after the next heartbeat (30 s)."""
        if self.assigned is not None:
            raise ClientStateError("subscribe and assign cannot be mixed")
        self.subscriptions[topic] = subscription_of(topic, expression,
                                                    time.time_ns() // 1_000_000)

    def assign(self, queues) -> None:
        """Consume exactly ``queues`` (no rebalance)."""
        if self.subscriptions and self.assigned is None:
            raise ClientStateError("subscribe and assign cannot be mixed")
        self.assigned = set(queues)
        for queue in self.assigned:
            self.subscriptions.setdefault(queue.topic, bodies.build_subscription(
                queue.topic, SUBSCRIBE_ALL, sub_version=time.time_ns() // 1_000_000))
        if self._started:
            self.instance.spawn(self.rebalance())

    # --- life cycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the instance and the pulls of the first assignment."""
        if self._started:
            raise ClientStateError(f"consumer {self.group} already started")
        self._buffer = asyncio.Queue()
        self._lock = asyncio.Lock()
        self.instance.register_consumer(self.group, self)
        await self.instance.start()
        self._started = True
        for topic in self.subscriptions:
            await self.instance.update_route(topic)
        await self.instance.send_heartbeat()
        await self.rebalance()

    async def shutdown(self) -> None:
        """Stop pulling, persist offsets, unregister, stop the instance."""
        if not self._started:
            return
        self._started = False
        tasks = [state.task for state in self.queues.values() if state.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.persist_offsets()
        self.instance.consumers.pop(self.group, None)
        await self.instance.unregister_client(consumer_group=self.group)
        await self.instance.shutdown()

    # --- what the instance asks ----------------------------------------------------------------

    def notify_consumer_ids_changed(self) -> None:
        """Rebalance now (subscribe mode)."""
        if self._started and self.assigned is None:
            self.instance.spawn(self.rebalance())

    async def persist_offsets(self) -> None:
        """Send the committed offsets to the brokers."""
        await self.offset_store.persist_all()

    async def rebalance(self) -> None:
        """Recompute the queues (subscribe mode) or apply the assignment; start/stop pulls."""
        if not self._started:
            return
        assert self._lock is not None       # created by start()
        async with self._lock:
            try:
                wanted = await self._wanted_queues()
            except _RETRIABLE_ERRORS as error:
                LOGGER.info("rebalance of %s failed: %s", self.group, error)
                return
            for queue in [q for q in self.queues if q not in wanted]:
                state = self.queues.pop(queue)
                if state.task is not None:
                    state.task.cancel()
                    await asyncio.gather(state.task, return_exceptions=True)
                await self.offset_store.persist(queue)
                self.offset_store.remove(queue)
            for queue in sorted(wanted - set(self.queues),
                                key=lambda q: (q.topic, q.broker_name, q.queue_id)):
                state = _QueueState(await self._start_offset(queue))
                self.queues[queue] = state
                state.task = start_task(self._pull_loop(queue, state),
                                        f"pybroker-pull-{queue}", None, LOGGER)

    async def _wanted_queues(self) -> set[MessageQueue]:
        if self.assigned is not None:
            return set(self.assigned)
        wanted: set[MessageQueue] = set()
        for topic in self.subscriptions:
            queues = await self.fetch_message_queues(topic)
            client_ids = await self._find_consumer_ids(queues)
            wanted |= set(self.allocate_strategy(self.group, self.instance.client_id, queues,
                                                 client_ids))
        return wanted

    async def _find_consumer_ids(self, queues: list[MessageQueue]) -> list[str]:
        for queue in queues:
            address = await self.instance.find_broker_for_subscribe(queue.broker_name,
                                                                     topic=queue.topic)
            fields = headers.encode_header(headers.CONSUMER_GROUP_REQUEST,
                                           {"consumer_group": self.group})
            response = await self.instance.invoke(
                address, request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, fields))
            check_response(response, address)
            return bodies.decode_consumer_list(response.body or b'{"consumerIdList":[]}')
        return []

    async def _start_offset(self, queue: MessageQueue) -> int:
        offset = await self.offset_store.read_offset(queue, from_store=True)
        if offset >= 0:
            return offset
        if self.consume_from_where in (ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                       ConsumeFromWhere.CONSUME_FROM_MIN_OFFSET):
            return await queue_offset_query(self.instance, queue, RequestCode.GET_MIN_OFFSET)
        return await queue_offset_query(self.instance, queue, RequestCode.GET_MAX_OFFSET)

    # --- pulling -------------------------------------------------------------------------------

    async def _pull_loop(self, queue: MessageQueue, state: _QueueState) -> None:
        # Anything unexpected is logged and the queue pulled again after the delay
        # (pybroker/tasks.py, never giving up).
        rounds = Rounds(f"{self.group}: pulling {queue}", failures_max=None, logger=LOGGER)
        while self._started:
            if rounds.failures:
                await asyncio.sleep(self.pull_time_delay_ms_when_exception / 1000)
            if self._buffered_count > self.pull_threshold_for_all:
                await asyncio.sleep(_BUFFER_FULL_DELAY_MS / 1000)
                continue
            with rounds:
                await self._pull_once(queue, state)

    async def _pull_once(self, queue: MessageQueue, state: _QueueState) -> None:
        epoch = state.epoch
        try:
            result = await pull_message(
                self.instance, self.group, queue, state.next_offset,
                self.subscriptions[queue.topic], max_nums=self.pull_batch_size,
                suspend_timeout_ms=self.broker_suspend_max_time_ms,
                timeout_ms=self.consumer_pull_timeout_ms, lite=True, post_subscription=True)
        except _RETRIABLE_ERRORS as error:
            LOGGER.info("pull %s failed: %s", queue, error)
            await asyncio.sleep(self.pull_time_delay_ms_when_exception / 1000)
            return
        if epoch != state.epoch:
            return   # a seek happened while the pull was in flight
        state.next_offset = result.next_begin_offset
        subscription = self.subscriptions[queue.topic]
        messages = [m for m in result.messages
                    if not subscription.tags_set or m.tags in subscription.tags_set]
        if messages:
            self._buffered_count += len(messages)
            assert self._buffer is not None     # created by start()
            self._buffer.put_nowait((queue, epoch, messages, result.next_begin_offset))
        elif result.messages and state.consumed_offset < result.next_begin_offset:
            state.consumed_offset = result.next_begin_offset

    # --- the user's side -------------------------------------------------------------------------

    async def poll(self, timeout_ms: Optional[int] = None) -> list[MessageExt]:
        """Buffered messages of one queue pull, waiting up to ``timeout_ms`` (default
        ``poll_timeout_ms``); an empty list when none arrived in time."""
        if not self._started:
            raise ClientStateError(f"consumer {self.group} is not started")
        timeout_ms = self.poll_timeout_ms if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000
        buffer = self._buffer
        assert buffer is not None           # created by start()
        while True:
            remaining_s = deadline - time.monotonic()
            try:
                queue, epoch, messages, next_offset = await within(buffer.get(),
                                                                   max(remaining_s, 0))
            except asyncio.TimeoutError:
                return []
            self._buffered_count -= len(messages)
            state = self.queues.get(queue)
            if state is None or state.epoch != epoch:
                continue   # seeked or reassigned since it was pulled
            state.consumed_offset = next_offset
            if self.auto_commit:
                self.offset_store.update_offset(queue, next_offset)
            return messages

    async def commit(self, queues=None) -> None:
        """Commit the offsets past everything polled (of ``queues``, default all) and send
        them to the brokers now."""
        for queue, state in list(self.queues.items()):
            if queues is None or queue in queues:
                self.offset_store.update_offset(queue, state.consumed_offset)
        await self.offset_store.persist_all()

    def seek(self, queue: MessageQueue, queue_offset: int) -> None:
        """Continue ``queue`` from ``queue_offset`` (buffered messages of it are dropped)."""
        state = self.queues.get(queue)
        if state is None:
            raise ClientStateError(f"{queue} is not assigned to this consumer")
        state.epoch += 1
        state.next_offset = state.consumed_offset = queue_offset
        if state.task is not None and self._started:
            # An in-flight long poll may be held by the broker for seconds: restart the pull.
            state.task.cancel()
            state.task = start_task(self._pull_loop(queue, state), f"pybroker-pull-{queue}",
                                    None, LOGGER)

    async def seek_to_begin(self, queue: MessageQueue) -> None:
        """Continue ``queue`` from its minimum offset."""
        self.seek(queue, await queue_offset_query(self.instance, queue,
                                                  RequestCode.GET_MIN_OFFSET))

    async def seek_to_end(self, queue: MessageQueue) -> None:
        """Continue ``queue`` from its maximum offset (only new messages)."""
        self.seek(queue, await queue_offset_query(self.instance, queue,
                                                  RequestCode.GET_MAX_OFFSET))

    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """Readable queues of ``topic`` (fresh from the name server)."""
        route = await self.instance.update_route(topic)
        return [] if route is None else subscribe_queues(topic, route)

    async def offset_for_timestamp(self, queue: MessageQueue, timestamp_ms: int) -> int:
        """The queue offset of the first message stored at or after ``timestamp_ms``."""
        return await queue_offset_query(self.instance, queue,
                                        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, timestamp_ms)

    async def committed(self, queue: MessageQueue) -> int:
        """The consumer offset the broker holds for ``queue`` (-1 when none)."""
        offset = await self.offset_store.read_offset(queue, from_store=True)
        return OFFSET_UNKNOWN if offset < 0 else offset
