# Client resilience against a real pybroker: consumer kill -9 + restart, group takeover.
"""Goal: prove the Python push consumer resumes from its committed offset after a kill -9 and
that a surviving group member takes over every queue when the other leaves (gracefully or by
kill -9), losing nothing.

Method: one `pybroker standalone` per module (StandaloneBroker); consumers that get killed run
in a subprocess (tests/client/resilience_consumer.py) reporting each consumed message as a JSON
line; broker-side committed offsets are read with QUERY_CONSUMER_OFFSET (Admin). Counts are
exact per (queue, queue offset); every wait is bounded and fails the test.
"""
import asyncio
import json
import os
import pathlib
import subprocess
import sys
import threading
import time

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.client.admin import Admin
from pybroker.client.consumer import PushConsumer
from pybroker.client.listener import ConsumeStatus
from pybroker.client.message import Message, SendStatus
from pybroker.client.producer import Producer
from pybroker.protocol.constants import ConsumeFromWhere
from tests.client.conftest import Peer
from tests.client.scenario import (
    create_topic as _create_topic,
    unique_name as _name,
    wait_until as _wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
SCRIPT = pathlib.Path(__file__).with_name("resilience_consumer.py")
ROOT = pathlib.Path(__file__).resolve().parents[2]
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
FAST = {"rebalance_interval_ms": 1000, "persist_consumer_offset_interval_ms": 1000}
QUEUES = 4


@pytest.fixture(scope="module")
def peer(tmp_path_factory):
    with StandaloneBroker(tmp_path_factory.mktemp("pybroker-resilience")) as broker:
        yield Peer(broker.namesrv_addr, broker.broker_addr)


class ConsumerProcess:
    """resilience_consumer.py in a subprocess; its JSON lines collected by a reader thread."""

    def __init__(self, peer: Peer, group: str, topic: str, instance: str, delay_ms: int):
        self.process = subprocess.Popen(
            [sys.executable, str(SCRIPT), peer.namesrv_addr, group, topic, instance,
             str(delay_ms)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)))
        self.records: list[dict] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        with self.process.stdout:
            for line in self.process.stdout:
                self.records.append(json.loads(line))

    def consumed(self) -> list[tuple[int, int]]:
        return [(r["queue_id"], r["queue_offset"]) for r in list(self.records)
                if r["event"] == "consumed"]

    def queue_ids(self) -> list[int]:
        latest = [r["queue_ids"] for r in list(self.records) if r["event"] == "queues"]
        return latest[-1] if latest else []

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)
        self.reader.join(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.reader.join(10)


async def _send(peer: Peer, topic: str, count: int) -> set[tuple[int, int]]:
    """Send ``count`` messages; their (queue id, queue offset) pairs."""
    sent = set()
    async with Producer(_name("pg"), peer.namesrv_addr) as producer:
        for i in range(count):
            result = await producer.send(Message(topic, f"{topic}-{i}".encode()))
            assert result.status == SendStatus.SEND_OK
            sent.add((result.message_queue.queue_id, result.queue_offset))
    return sent


async def _committed(peer: Peer, group: str, topic: str) -> dict[int, int]:
    """Broker-side consumer offsets (QUERY_CONSUMER_OFFSET) per queue id; -1 = none."""
    async with Admin(peer.namesrv_addr) as admin:
        progress = await admin.consumer_progress(group, topic)
    return {queue.queue_id: p.consumer_offset if p.consumer_offset >= 0 else -1
            for queue, p in progress.items()}


def test_killed_consumer_resumes_from_committed_offset(peer):
    async def scenario():
        topic, group = _name("resume"), _name("cg")
        await _create_topic(peer, topic)
        sent = await _send(peer, topic, 400)
        first = ConsumerProcess(peer, group, topic, "resume-1", delay_ms=500)
        try:
            # Mid-stream: some consumed and some committed on the broker, far from done.
            await _wait_until(lambda: len(first.consumed()) >= 60, 60, "first consumption")
            deadline = time.monotonic() + 20
            while sum(max(v, 0) for v in (await _committed(peer, group, topic)).values()) == 0:
                assert time.monotonic() < deadline, "no offset was ever committed"
                await asyncio.sleep(0.2)
        finally:
            first.kill()
        before_kill = first.consumed()
        assert len(before_kill) < len(sent), "killed too late to be mid-stream"
        await asyncio.sleep(0.5)   # a oneway UPDATE_CONSUMER_OFFSET may still be in flight
        committed = await _committed(peer, group, topic)
        second = ConsumerProcess(peer, group, topic, "resume-2", delay_ms=0)
        try:
            expected_second = {(q, o) for q, o in sent if o >= max(committed[q], 0)}
            await _wait_until(lambda: set(second.consumed()) >= expected_second, 60,
                              "the restarted consumer to catch up")
            await asyncio.sleep(1.5)   # anything extra would show up now
        finally:
            second.stop()
        after = second.consumed()
        # The restart begins each queue exactly at the committed offset, skips nothing after it.
        assert set(after) == expected_second
        for queue_id in range(QUEUES):
            offsets = [o for q, o in after if q == queue_id]
            if offsets:
                assert min(offsets) == max(committed[queue_id], 0)
        # Duplicates only inside the uncommitted window; at-least-once overall.
        duplicates = set(before_kill) & set(after)
        assert all(o >= committed[q] for q, o in duplicates)
        assert set(before_kill) | set(after) == sent
        assert all(o < committed[q] for q, o in set(before_kill) - set(after))
    asyncio.run(scenario())


class InProcessConsumer:
    """A push consumer in this process recording (queue id, queue offset) of each message."""

    def __init__(self, peer: Peer, group: str, topic: str, instance: str):
        self.topic = topic
        self.seen: list[tuple[int, int]] = []

        async def listener(messages, context):
            self.seen.extend((m.queue_id, m.queue_offset) for m in messages)
            return ConsumeStatus.CONSUME_SUCCESS
        self.consumer = PushConsumer(group, peer.namesrv_addr, consume_from_where=FIRST,
                                     instance_name=instance, **FAST)
        self.consumer.subscribe(topic)
        self.consumer.register_message_listener(listener)

    def queue_ids(self) -> set[int]:
        return {q.queue_id for q in self.consumer.assigned_queues() if q.topic == self.topic}


def test_survivor_takes_over_after_graceful_shutdown(peer):
    async def scenario():
        topic, group = _name("leave"), _name("cg")
        await _create_topic(peer, topic)
        survivor = InProcessConsumer(peer, group, topic, "leave-a")
        leaver = InProcessConsumer(peer, group, topic, "leave-b")
        await survivor.consumer.start()
        await leaver.consumer.start()
        try:
            await _wait_until(lambda: len(survivor.queue_ids()) == len(leaver.queue_ids()) == 2
                              and not survivor.queue_ids() & leaver.queue_ids(), 30, "a 2+2 split")
            before = await _send(peer, topic, 40)
            await _wait_until(lambda: set(survivor.seen) | set(leaver.seen) >= before, 30,
                              "the first 40")
            assert survivor.seen and leaver.seen
            await leaver.consumer.shutdown()
            await _wait_until(lambda: len(survivor.queue_ids()) == QUEUES, 30, "the takeover")
            after = await _send(peer, topic, 40)
            await _wait_until(lambda: set(survivor.seen) >= after, 30, "the last 40")
            await asyncio.sleep(1)
        finally:
            await survivor.consumer.shutdown()
            await leaver.consumer.shutdown()
        # Graceful: offsets were persisted on shutdown, so nothing is consumed twice.
        everything = survivor.seen + leaver.seen
        assert sorted(everything) == sorted(before | after)
    asyncio.run(scenario())


def test_survivor_takes_over_after_kill(peer):
    async def scenario():
        topic, group = _name("killed"), _name("cg")
        await _create_topic(peer, topic)
        survivor = InProcessConsumer(peer, group, topic, "killed-a")
        await survivor.consumer.start()
        victim = ConsumerProcess(peer, group, topic, "killed-b", delay_ms=0)
        try:
            await _wait_until(lambda: len(survivor.queue_ids()) == len(victim.queue_ids()) == 2
                              and not survivor.queue_ids() & set(victim.queue_ids()), 30,
                              "a 2+2 split")
            before = await _send(peer, topic, 40)
            await _wait_until(lambda: set(survivor.seen) | set(victim.consumed()) >= before, 30,
                              "the first 40")
            assert victim.consumed(), "the victim never consumed"
            victim.kill()
            # The broker drops the dead client when its channel closes, then notifies the group.
            await _wait_until(lambda: len(survivor.queue_ids()) == QUEUES, 60, "the takeover")
            after = await _send(peer, topic, 40)
            await _wait_until(lambda: set(survivor.seen) >= after, 30, "the last 40")
            await asyncio.sleep(1)
        finally:
            victim.stop()
            await survivor.consumer.shutdown()
        assert set(survivor.seen) | set(victim.consumed()) == before | after
        assert set(survivor.seen) >= after
        # Redelivery is limited to the victim's uncommitted tail of the first 40.
        assert set(survivor.seen) - after <= before
    asyncio.run(scenario())
