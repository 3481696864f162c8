# The reset-offset scenario's parts, shared by the pybroker (222 over the wire) and mqadmin tests.
"""A live Python push consumer that records what it was given, a producer run that returns
where every message landed, the group's committed offsets, and a bounded wait on async
conditions. tests/client/test_reset_offset_pybroker.py resets with a raw request 222;
tests/compat/test_reset_offset_java.py with the real ``mqadmin resetOffsetByTime``.
"""
import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable

from pybroker.client.admin import Admin
from pybroker.client.consumer import PushConsumer
from pybroker.client.listener import ConsumeStatus
from pybroker.client.message import Message, SendStatus
from pybroker.client.producer import Producer
from pybroker.protocol.constants import ConsumeFromWhere

QUEUES = 4
Placed = set[tuple[int, int]]          # (queue id, queue offset) of messages


async def wait_until(predicate: Callable[[], Awaitable[bool]], timeout_s: float,
                     what: str) -> None:
    """Await ``predicate()`` until true; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def send_numbered(namesrv_addr: str, topic: str, count: int) -> Placed:
    """Send ``count`` messages ``m<i>``; where each one was stored."""
    placed = set()
    async with Producer(f"pg_{uuid.uuid4().hex[:8]}", namesrv_addr) as producer:
        for index in range(count):
            result = await producer.send(Message(topic, b"m%d" % index))
            assert result.status == SendStatus.SEND_OK
            placed.add((result.message_queue.queue_id, result.queue_offset))
    return placed


def queue_ends(placed: Placed) -> dict[int, int]:
    """{queue id: the offset after its last placed message}."""
    return {queue_id: 1 + max(offset for queue, offset in placed if queue == queue_id)
            for queue_id in {queue for queue, _ in placed}}


async def committed_offsets(admin: Admin, group: str, topic: str) -> dict[int, int]:
    """{queue id: the group's committed consumer offset} as the broker reports it."""
    progress = await admin.consumer_progress(group, topic)
    return {queue.queue_id: p.consumer_offset for queue, p in progress.items()}


class RecordingConsumer:
    """A push consumer of ``group`` on ``topic`` from the first offset, rebalancing and
    committing every second, that records (queue id, queue offset) of what it consumed.
    ``async with`` starts and shuts it down."""

    def __init__(self, namesrv_addr: str, group: str, topic: str, instance_name: str):
        self.seen: list[tuple[int, int]] = []
        self.consumer = PushConsumer(group, namesrv_addr, instance_name=instance_name,
                                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                     rebalance_interval_ms=1000,
                                     persist_consumer_offset_interval_ms=1000)
        self.consumer.subscribe(topic)
        self.consumer.register_message_listener(self._listener)

    async def _listener(self, messages, context) -> ConsumeStatus:
        self.seen.extend((m.queue_id, m.queue_offset) for m in messages)
        return ConsumeStatus.CONSUME_SUCCESS

    def delivered(self, since: int, placed: Placed) -> Callable[[], Awaitable[bool]]:
        """A wait_until predicate: every placed message consumed after the first ``since``."""
        async def check() -> bool:
            return set(self.seen[since:]) >= placed
        return check

    async def __aenter__(self) -> "RecordingConsumer":
        await self.consumer.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.consumer.shutdown()
