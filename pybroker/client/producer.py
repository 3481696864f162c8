# Producer: sync/async/oneway/batch sends with routes, selectors, retries and compression.
"""The asyncio producer (the blocking facade is :mod:`pybroker.client.sync`).

A send picks a writable queue of the topic (round-robin, or a selector for ordered sends),
sends SEND_MESSAGE_V2 (310) - or SEND_BATCH_MESSAGE (320) for a batch - to that broker's master
and turns the answer into a :class:`SendResult`. A failure that RocketMQ retries (connection
loss, timeout, or a code in :data:`pybroker.protocol.codes.SEND_RETRY_RESPONSE_CODES`) moves to
a queue of another broker, up to ``retry_times_when_send_failed`` more times, all within the
one ``send_timeout_ms``. Bodies of at least ``compress_msg_body_over_howmuch`` bytes travel
zlib-compressed (batches never are, as in Java and Go).
"""
import asyncio
import dataclasses
import logging
import time
from typing import Any, Callable, Iterable, Optional

from pybroker.client.errors import (BrokerResponseError, ClientStateError, MessageTooLargeError,
                                    RequestTimeoutError)
from pybroker.client.instance import ClientInstance, check_response, request
from pybroker.client.member import InstanceMember, member_instance
from pybroker.client.message import (BODY_COMPRESS_OVER_BYTES_DEFAULT, Message, SendResult,
                                     SendStatus, compress_body, encode_batch)
from pybroker.client.route import LatencyFaultTolerance, Selector
from pybroker.errors import HeaderError, ProtocolError
from pybroker.protocol import headers
from pybroker.protocol.bodies import MessageQueue
from pybroker.protocol.codes import SEND_STORED_RESPONSE_CODES, RequestCode
from pybroker.protocol.constants import (DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX,
                                         Property, SystemTopic)
from pybroker.protocol.message_id import create_uniq_id
from pybroker.protocol.properties import encode_properties

LOGGER = logging.getLogger("pybroker.client")

SEND_TIMEOUT_MS_DEFAULT = 3000
RETRY_TIMES_DEFAULT = 2
MESSAGE_SIZE_MAX_BYTES_DEFAULT = 4 << 20
DEFAULT_TOPIC_QUEUE_NUMS = 4
Callback = Callable[[Optional[SendResult], Optional[BaseException]], None]


@dataclasses.dataclass
class _Payload:
    """One send's wire parts, prepared once and reused by every retry."""
    topic: str
    body: bytes
    properties: str
    sys_flag: int
    flag: int
    batch: bool
    uniq_id: str
    reconsume_times: Optional[int] = None
    max_reconsume_times: Optional[int] = None


def _validate(message: Message, size_max_bytes: int) -> None:
    remark = headers.validate_topic(message.topic)
    if remark is None:
        remark = headers.topic_not_allowed_to_send(message.topic)
    if remark is not None:
        raise ValueError(remark)
    if not message.body:
        raise ValueError("the message body is empty")
    if len(message.body) > size_max_bytes:
        raise MessageTooLargeError("the message body", len(message.body), size_max_bytes)


class Producer(InstanceMember):
    """Sends messages for one producer group.

    ``group``: producer group. ``namesrv_addr``: name servers (``"ip:port;ip:port"``), unless an
    existing ``instance`` is shared. Times in ms. ``retry_times_when_send_failed``: extra
    attempts of a sync send on another broker (async: ``retry_times_when_send_async_failed``).
    ``compress_msg_body_over_howmuch``: bodies of at least this many bytes are zlib-compressed.
    ``send_latency_fault_enable``: keep slow or failing brokers out of rotation for a while.
    """

    def __init__(self, group: str, namesrv_addr: Optional[str] = None, *,
                 instance: Optional[ClientInstance] = None,
                 send_timeout_ms: int = SEND_TIMEOUT_MS_DEFAULT,
                 retry_times_when_send_failed: int = RETRY_TIMES_DEFAULT,
                 retry_times_when_send_async_failed: int = RETRY_TIMES_DEFAULT,
                 compress_msg_body_over_howmuch: int = BODY_COMPRESS_OVER_BYTES_DEFAULT,
                 max_message_size: int = MESSAGE_SIZE_MAX_BYTES_DEFAULT,
                 default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS,
                 create_topic_key: str = SystemTopic.AUTO_CREATE_TEMPLATE,
                 send_latency_fault_enable: bool = False, **instance_options: Any):
        remark = headers.validate_group(group)
        if remark is not None:
            raise ValueError(remark)
        instance = member_instance(namesrv_addr, instance, instance_options)
        self.group = group
        self.instance = instance
        self.send_timeout_ms = send_timeout_ms
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.retry_times_when_send_async_failed = retry_times_when_send_async_failed
        self.compress_msg_body_over_howmuch = compress_msg_body_over_howmuch
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self.create_topic_key = create_topic_key
        self.faults = LatencyFaultTolerance() if send_latency_fault_enable else None
        self._started = False
        self._pending: set[asyncio.Task] = set()

    # --- life cycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Register the group and start the shared instance (heartbeats, route refresh)."""
        if self._started:
            raise ClientStateError(f"producer {self.group} already started")
        self.instance.register_producer(self.group, self)
        await self.instance.start()
        self._started = True

    async def shutdown(self) -> None:
        """Wait (bounded by the send timeout) for async sends, unregister, stop the instance."""
        if not self._started:
            return
        self._started = False
        if self._pending:
            await asyncio.wait(set(self._pending), timeout=self.send_timeout_ms / 1000)
            for task in set(self._pending):
                task.cancel()
            await asyncio.gather(*self._pending, return_exceptions=True)
        self.instance.producers.pop(self.group, None)
        await self.instance.unregister_client(producer_group=self.group)
        await self.instance.shutdown()

    def _require_started(self) -> None:
        if not self._started:
            raise ClientStateError(f"producer {self.group} is not started")

    # --- public sends --------------------------------------------------------------------------

    async def send(self, message: Message, *, queue: Optional[MessageQueue] = None,
                   selector: Optional[Selector] = None, arg: Any = None,
                   timeout_ms: Optional[int] = None) -> SendResult:
        """Send and wait for the broker's answer (at most ``timeout_ms``, default the
        producer's send timeout, for all attempts together).

        ``queue`` or ``selector(queues, message, arg)`` fixes the queue (no retry elsewhere).
        Raises ValueError for an invalid message, a BrokerResponseError subclass for a
        refused send, RequestTimeoutError / ConnectionError when no broker answered.
        """
        self._require_started()
        payload = self._prepare(message)
        return await self._send(payload, queue, selector, arg, message, timeout_ms,
                                self.retry_times_when_send_failed)

    def send_async(self, message: Message, callback: Optional[Callback] = None, *,
                   queue: Optional[MessageQueue] = None, selector: Optional[Selector] = None,
                   arg: Any = None, timeout_ms: Optional[int] = None) -> "asyncio.Task":
        """Start a send and return its task (await it for the SendResult).

        ``callback(result, error)`` runs when it finishes; exactly one of them is None.
        Validation errors raise here, before anything is sent.
        """
        self._require_started()
        payload = self._prepare(message)
        # Returned: the caller awaits it, or its callback takes the result.
        task = asyncio.create_task(self._send(  # tidy: allow (awaited)
            payload, queue, selector, arg, message, timeout_ms,
            self.retry_times_when_send_async_failed))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        if callback is not None:
            task.add_done_callback(lambda done: _run_callback(done, callback))
        return task

    async def send_oneway(self, message: Message, *, queue: Optional[MessageQueue] = None,
                          selector: Optional[Selector] = None, arg: Any = None) -> None:
        """Send without waiting for (or getting) an answer: no result, no retry."""
        self._require_started()
        payload = self._prepare(message)
        info = await self._publish_info(payload.topic)
        target = self._fixed_queue(info.message_queues, queue, selector, message, arg)
        if target is None:
            target = info.select_queue(None, self.faults)
        await self._send_to_queue(target, payload, self.send_timeout_ms, oneway=True)

    async def send_batch(self, messages: Iterable[Message], *,
                         queue: Optional[MessageQueue] = None,
                         timeout_ms: Optional[int] = None) -> SendResult:
        """Send messages of one topic as one SEND_BATCH_MESSAGE; they land consecutively in
        one queue. ValueError for an empty batch, mixed topics, delay levels or retry topics."""
        self._require_started()
        payload = self._prepare_batch(list(messages))
        return await self._send(payload, queue, None, None, None, timeout_ms,
                                self.retry_times_when_send_failed)

    # --- preparation -------------------------------------------------------------------------

    def _prepare(self, message: Message, sys_flag: int = 0) -> _Payload:
        _validate(message, self.max_message_size)
        if message.uniq_id is None:
            message.properties[Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = create_uniq_id()
        body, compression_flag = compress_body(message.body, self.compress_msg_body_over_howmuch)
        properties = dict(message.properties)
        reconsume_times = max_reconsume_times = None
        if message.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            # The retry counters travel in the header; Java strips them from the properties.
            reconsume_times = int(properties.pop(Property.RECONSUME_TIME, "0") or 0)
            max_text = properties.pop(Property.MAX_RECONSUME_TIMES, None)
            max_reconsume_times = int(max_text) if max_text else None
        return _Payload(message.topic, body, encode_properties(properties),
                        sys_flag | compression_flag, message.flag, False, message.uniq_id or "",
                        reconsume_times, max_reconsume_times)

    def _prepare_batch(self, messages: list[Message]) -> _Payload:
        if not messages:
            raise ValueError("a batch needs at least one message")
        topic = messages[0].topic
        for message in messages:
            _validate(message, self.max_message_size)
            if message.topic != topic:
                raise ValueError(f"a batch goes to one topic: {topic} != {message.topic}")
            if message.delay_level:
                raise ValueError("messages of a batch cannot have a delay level")
            if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
                raise ValueError("a batch cannot go to a retry or dead-letter topic")
            if message.uniq_id is None:
                message.properties[Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = create_uniq_id()
        body = encode_batch(messages)
        if len(body) > self.max_message_size:
            raise MessageTooLargeError("the batch", len(body), self.max_message_size)
        wait = messages[0].properties.get(Property.WAIT_STORE_MSG_OK, "true")
        return _Payload(topic, body, encode_properties({Property.WAIT_STORE_MSG_OK: wait}), 0,
                        0, True, ",".join(m.uniq_id or "" for m in messages))

    # --- the send loop -----------------------------------------------------------------------

    async def _publish_info(self, topic: str):
        return await self.instance.publish_info(topic, self.default_topic_queue_nums,
                                                self.create_topic_key)

    @staticmethod
    def _fixed_queue(queues, queue, selector, message, arg) -> Optional[MessageQueue]:
        if queue is not None:
            return queue
        if selector is not None:
            if not queues:
                raise IndexError("the topic has no writable queue")
            return selector(queues, message, arg)
        return None

    async def _send(self, payload: _Payload, queue, selector, arg, message, timeout_ms,
                    retry_times: int) -> SendResult:
        timeout_ms = self.send_timeout_ms if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000
        info = await self._publish_info(payload.topic)
        fixed = self._fixed_queue(info.message_queues, queue, selector, message, arg)
        attempts = 1 if fixed is not None else 1 + retry_times
        last_broker: Optional[str] = None
        last_error: Optional[BaseException] = None
        for _ in range(attempts):
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                break
            target = fixed or info.select_queue(last_broker, self.faults)
            last_broker = target.broker_name
            started = time.monotonic()
            try:
                result = await self._send_to_queue(target, payload, remaining_ms)
            except BrokerResponseError as error:
                self._record_latency(target, started, failed=True)
                if not error.retriable:
                    raise
                last_error = error
            except (ConnectionError, TimeoutError, OSError) as error:
                self._record_latency(target, started, failed=True)
                last_error = error
            else:
                self._record_latency(target, started, failed=False)
                assert result is not None       # None only for oneway sends
                return result
            LOGGER.info("send to %s failed (%s); retrying elsewhere", target, last_error)
            info = await self._publish_info(payload.topic)
        if last_error is None:
            raise RequestTimeoutError(f"send to {payload.topic} timed out after {timeout_ms} ms")
        raise last_error

    def _record_latency(self, queue: MessageQueue, started: float, failed: bool) -> None:
        if self.faults is not None:
            self.faults.update(queue.broker_name, (time.monotonic() - started) * 1000, failed)

    async def _send_to_queue(self, queue: MessageQueue, payload: _Payload, timeout_ms: int,
                             oneway: bool = False) -> Optional[SendResult]:
        address = await self.instance.find_master(queue.broker_name, payload.topic)
        fields = headers.encode_header(headers.SEND_MESSAGE_REQUEST, {
            "producer_group": self.group, "topic": payload.topic,
            "default_topic": self.create_topic_key,
            "default_topic_queue_nums": self.default_topic_queue_nums,
            "queue_id": queue.queue_id, "sys_flag": payload.sys_flag,
            "born_timestamp": time.time_ns() // 1_000_000, "flag": payload.flag,
            "properties": payload.properties,
            "reconsume_times": payload.reconsume_times or 0, "unit_mode": False,
            "max_reconsume_times": payload.max_reconsume_times, "batch": payload.batch,
            "broker_name": queue.broker_name}, short_names=True)
        code = RequestCode.SEND_BATCH_MESSAGE if payload.batch else RequestCode.SEND_MESSAGE_V2
        command = request(code, fields, payload.body, oneway=oneway)
        if oneway:
            await self.instance.invoke_oneway(address, command)
            return None
        response = await self.instance.invoke(address, command, timeout_ms)
        return _send_result(response, queue, payload, address)


def _send_result(response, queue: MessageQueue, payload: _Payload, address: str) -> SendResult:
    check_response(response, address, SEND_STORED_RESPONSE_CODES)
    try:
        header = headers.SEND_MESSAGE_RESPONSE.parse(response.ext_fields)
    except HeaderError as error:
        raise ProtocolError(f"send response from {address}: {error.remark}") from None
    return SendResult(
        status=SendStatus(response.code), msg_id=payload.uniq_id, offset_msg_id=header.msg_id,
        message_queue=MessageQueue(queue.topic, queue.broker_name, header.queue_id),
        queue_offset=header.queue_offset, transaction_id=header.transaction_id,
        region_id=header.msg_region,
        trace_on=header.trace_on if header.trace_on is not None else True,
        recall_handle=header.recall_handle)


def _run_callback(task: "asyncio.Task", callback: Callback) -> None:
    if task.cancelled():
        callback(None, asyncio.CancelledError())
        return
    error = task.exception()
    try:
        if error is not None:
            callback(None, error)
        else:
            callback(task.result(), None)
    except Exception:   # a user callback must not break the event loop
        LOGGER.exception("send callback raised")
