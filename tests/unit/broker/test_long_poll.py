# Tests of long polling: held pulls woken by arrivals, by their timers, dropped with their channel.
"""Goal: a pull that finds nothing is held and answered later through channel.send exactly when
Java would answer it (a matching arrival before the timeout, or the timeout), never for a
closed channel, within the per-broker bound, without blocking other requests. Method: the real
pull handler, MessageStore and MetadataState on tmp_path with a LongPollService in the context,
one asyncio loop per test, and bounded waits (asyncio.wait_for) that fail the test.
"""
import asyncio
import time

import pytest

from pybroker._fast.jhash import java_hash
from pybroker.broker import pull, query
from pybroker.broker.channel import Channel
from pybroker.broker.long_poll import HeldPull, LongPollService
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand
from tests.unit.broker.test_pull import (GROUP, TOPIC, Broker, bodies_of, header_longs,
                                         java_pull)

WAIT_S = 5.0   # bound on any wait; a held pull in these tests resolves far sooner


class Polling(Broker):
    """A Broker whose context has a LongPollService and whose sends wake a waiter."""

    def __init__(self, tmp_path, overrides=None, held_pulls_max=100):
        super().__init__(tmp_path, overrides)
        self.service = LongPollService(self.store.get_max_offset_in_queue,
                                       held_pulls_max=held_pulls_max)
        self.ctx.long_poll = self.service
        self.channel.send = self._send
        self._arrived: asyncio.Event | None = None

    def _send(self, command: RemotingCommand) -> None:
        self.sent.append(command)
        if self._arrived is not None:
            self._arrived.set()

    async def start_pull(self, request: RemotingCommand):
        self._arrived = asyncio.Event()
        return await pull.handle_pull_message(self.ctx, self.channel, request)

    async def next_sent(self) -> RemotingCommand:
        await asyncio.wait_for(self._arrived.wait(), WAIT_S)
        self._arrived.clear()
        return self.sent.pop(0)


@pytest.fixture
def broker(tmp_path):
    created = Polling(tmp_path)
    created.register()
    yield created
    created.service.close()
    created.close()


def suspended(queue_offset: int, timeout_ms: int = 15000, sys_flag: int = 0x3,
              **extra) -> RemotingCommand:
    return java_pull(queue_offset, sys_flag=sys_flag, suspendTimeoutMillis=str(timeout_ms),
                     **extra)


def test_held_pull_woken_by_arrival_before_its_timeout(broker):
    async def scenario():
        assert await broker.start_pull(suspended(0, commit_offset=0)) is None
        assert broker.service.held_count == 1 and broker.sent == []
        started = time.monotonic()
        broker.put(b"arrived")
        assert broker.service.notify_message_arriving(TOPIC, 0, 1) == 1
        response = await broker.next_sent()
        assert time.monotonic() - started < 5.0   # far below the 15 s hold
        assert response.code == ResponseCode.SUCCESS and response.opaque == 7
        assert bodies_of(response.body) == [b"arrived"]
        assert header_longs(response)["next"] == 1
        assert broker.service.held_count == 0
    asyncio.run(scenario())


def test_dispatcher_queue_list_wakes_only_grown_queues(broker):
    async def scenario():
        await broker.start_pull(suspended(0, queue_id=0))
        await broker.start_pull(suspended(0, queue_id=1))
        broker.put(b"q1", queue_id=1)
        assert broker.service.notify_queues([(TOPIC, 0), (TOPIC, 1), ("Other", 0)]) == 1
        response = await broker.next_sent()
        assert bodies_of(response.body) == [b"q1"]
        assert broker.service.held_count == 1
    asyncio.run(scenario())


def test_timeout_answers_not_found_and_commits_only_on_first_attempt(broker):
    async def scenario():
        started = time.monotonic()
        assert await broker.start_pull(suspended(0, timeout_ms=100, commit_offset=0)) is None
        assert broker.metadata.offsets.query(GROUP, TOPIC, 0) == 0
        broker.metadata.offsets.commit(GROUP, TOPIC, 0, 42)
        response = await broker.next_sent()
        assert time.monotonic() - started >= 0.09
        assert response.code == ResponseCode.PULL_NOT_FOUND
        assert header_longs(response) == {"suggest": 0, "next": 0, "min": 0, "max": 0}
        assert broker.metadata.offsets.query(GROUP, TOPIC, 0) == 42   # the re-run committed nothing
    asyncio.run(scenario())


def test_short_polling_when_long_polling_is_off(tmp_path):
    broker = Polling(tmp_path, {"longPollingEnable": "false", "shortPollingTimeMills": "50"})
    broker.register()

    async def scenario():
        started = time.monotonic()
        assert await broker.start_pull(suspended(0, timeout_ms=60000)) is None
        response = await broker.next_sent()
        assert time.monotonic() - started < 5.0
        assert response.code == ResponseCode.PULL_NOT_FOUND
    try:
        asyncio.run(scenario())
    finally:
        broker.service.close()
        broker.close()


def test_pull_without_suspend_flag_is_not_held(broker):
    async def scenario():
        response = await broker.start_pull(suspended(0, sys_flag=0x1))
        assert response.code == ResponseCode.PULL_NOT_FOUND
        assert broker.service.held_count == 0
    asyncio.run(scenario())


def test_only_not_found_is_held(broker):
    async def scenario():
        broker.put(b"m")
        response = await broker.start_pull(suspended(5))
        assert response.code == ResponseCode.PULL_OFFSET_MOVED
        assert broker.service.held_count == 0
    asyncio.run(scenario())


def test_channel_closed_while_held_drops_the_pull(broker):
    async def scenario():
        await broker.start_pull(suspended(0, timeout_ms=50))
        assert broker.service.channel_closed(broker.channel.channel_id) == 1
        broker.put(b"late")
        assert broker.service.notify_message_arriving(TOPIC, 0, 1) == 0
        await asyncio.sleep(0.15)   # past the dropped pull's deadline
        assert broker.sent == [] and broker.service.held_count == 0
    asyncio.run(scenario())


def test_send_failure_of_a_vanished_channel_is_contained(broker):
    def closed_send(command):
        raise ConnectionError("connection reset")

    async def scenario():
        await broker.start_pull(suspended(0, timeout_ms=20))
        broker.channel.send = closed_send
        await asyncio.sleep(0.2)
        assert broker.service.held_count == 0
    asyncio.run(scenario())


def test_arrival_with_another_tag_keeps_the_pull_held(broker):
    broker.register("TagA", sub_version=1_800_000_000_000)   # newer than the fixture's "*"

    async def scenario():
        await broker.start_pull(suspended(0))
        broker.put(b"b", "TagB")
        assert broker.service.notify_message_arriving(TOPIC, 0, 1, tags_code=java_hash("TagB")) == 0
        assert broker.service.held_count == 1
        broker.put(b"a", "TagA")
        assert broker.service.notify_message_arriving(TOPIC, 0, 2, tags_code=java_hash("TagA")) == 1
        response = await broker.next_sent()
        assert bodies_of(response.body) == [b"a"]
    asyncio.run(scenario())


def test_check_held_finds_an_arrival_nobody_reported(broker):
    async def scenario():
        await broker.start_pull(suspended(0))
        assert broker.service.check_held() == 0
        broker.put(b"quiet")
        assert broker.service.check_held() == 1
        assert bodies_of((await broker.next_sent()).body) == [b"quiet"]
    asyncio.run(scenario())


def test_bound_on_held_pulls_answers_the_excess_at_once(tmp_path):
    broker = Polling(tmp_path, held_pulls_max=1)
    broker.register()

    async def scenario():
        assert await broker.start_pull(suspended(0)) is None
        excess = await broker.start_pull(suspended(0))
        assert excess.code == ResponseCode.PULL_NOT_FOUND
        assert broker.service.held_count == 1
    try:
        asyncio.run(scenario())
    finally:
        broker.service.close()
        broker.close()


def test_other_requests_on_the_channel_are_served_while_a_pull_is_held(broker):
    async def scenario():
        await broker.start_pull(suspended(0))
        request = RemotingCommand(RequestCode.GET_MAX_OFFSET, opaque=8,
                                  ext_fields={"topic": TOPIC, "queueId": "0"})
        response = await asyncio.wait_for(
            query.handle_get_max_offset(broker.ctx, broker.channel, request), WAIT_S)
        assert response.code == ResponseCode.SUCCESS and response.opaque == 8
        assert broker.service.held_count == 1
    asyncio.run(scenario())


def test_close_drops_everything_and_refuses_new_holds(broker):
    async def scenario():
        await broker.start_pull(suspended(0, timeout_ms=30))
        broker.service.close()
        assert broker.service.held_count == 0
        response = await broker.start_pull(suspended(0))
        assert response.code == ResponseCode.PULL_NOT_FOUND
        await asyncio.sleep(0.1)
        assert broker.sent == []
    asyncio.run(scenario())


def test_service_alone_runs_the_rerun_and_sends_its_answer():
    sent = []
    channel = Channel("0:9", "127.0.0.1:1", send=sent.append)

    async def scenario():
        service = LongPollService(lambda topic, queue_id: 3)
        answer = RemotingCommand(ResponseCode.SUCCESS)

        async def rerun():
            return answer
        held = HeldPull("T", 0, 2, None, 10_000, channel, rerun)
        assert service.hold(held)
        assert service.notify_message_arriving("T", 0, None) == 1   # store max 3 > 2
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert sent == [answer]
    asyncio.run(scenario())


def test_negative_bound_is_rejected():
    with pytest.raises(ValueError):
        LongPollService(lambda topic, queue_id: 0, held_pulls_max=-1)
