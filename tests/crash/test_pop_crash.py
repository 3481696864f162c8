"""kill -9 of the broker between pop, ack and revive: nothing acknowledged comes back, nothing
unacknowledged is lost.

Method: a real `pybroker standalone` (two remoting workers) stores 300 messages with unique
bodies; a POP consumer (invisible time 4 s) pops and acknowledges a seeded random half of what
it gets, and the whole broker is killed with SIGKILL at a seeded moment of that phase; after the
restart on the same store a new consumer pops and acknowledges everything it gets, and the
broker is killed once more after the first invisible times have passed (revive running). After
the second restart the consumer drains until every message not acknowledged before the first
kill has come (bounded wait). Checked: no message acknowledged before a kill is ever received
again; every message is received at least once. Prints its seed.
"""
import asyncio
import random
import time

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.client import Admin, Message, PopConsumer, Producer
from pybroker.protocol.constants import ConsumeFromWhere

pytestmark = [pytest.mark.crash, pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "PopCrashTopic"
GROUP = "pop_crash_group"
MESSAGES = 300
INVISIBLE_MS = 4000
DRAIN_TIMEOUT_S = 90


async def _produce(broker: StandaloneBroker) -> set[bytes]:
    admin = Admin(broker.namesrv_addr)
    await admin.start()
    try:
        await admin.create_topic(TOPIC, 4, broker_addr=broker.broker_addr)
    finally:
        await admin.shutdown()
    bodies = {f"pop-crash-{i:04d}".encode() for i in range(MESSAGES)}
    async with Producer("pop_crash_producer", broker.namesrv_addr) as producer:
        for body in sorted(bodies):
            await producer.send(Message(TOPIC, body))
    return bodies


def _consumer(broker: StandaloneBroker) -> PopConsumer:
    consumer = PopConsumer(GROUP, broker.namesrv_addr, invisible_time_ms=INVISIBLE_MS,
                           poll_time_ms=1000, max_nums=16,
                           consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(TOPIC)
    return consumer


async def _pop_phase(broker, rand: random.Random, acked: set[bytes], received: list[bytes],
                     rounds: int, ack_share: float) -> None:
    """``rounds`` receives; each message acked with probability ``ack_share`` (the acks
    answered SUCCESS are recorded)."""
    consumer = _consumer(broker)
    await consumer.start()
    try:
        for _ in range(rounds):
            messages = await consumer.receive()
            received.extend(message.body for message in messages)
            for message in messages:
                if message.body in acked:
                    continue
                if rand.random() < ack_share:
                    await consumer.ack(message)
                    acked.add(message.body)
    finally:
        await consumer.shutdown()


def test_kill_9_between_pop_ack_and_revive(tmp_path):
    seed = random.randrange(1 << 30)
    print(f"seed={seed}")
    rand = random.Random(seed)
    broker = StandaloneBroker(tmp_path).start()
    try:
        bodies = asyncio.run(_produce(broker))
        acked_before_kill: set[bytes] = set()
        received: list[bytes] = []
        asyncio.run(_pop_phase(broker, rand, acked_before_kill, received,
                               rand.randrange(4, 12), 0.5))
        broker.kill()
        broker.start()
        acked: set[bytes] = set(acked_before_kill)
        after: list[bytes] = []
        asyncio.run(_pop_phase(broker, rand, acked, after, rand.randrange(3, 8), 1.0))
        time.sleep(INVISIBLE_MS / 1000 + rand.random() * 3)   # revive is at work now
        acked_before_second_kill = set(acked)
        broker.kill()
        broker.start()

        drained: list[bytes] = []

        async def drain():
            consumer = _consumer(broker)
            await consumer.start()
            deadline = time.monotonic() + DRAIN_TIMEOUT_S
            try:
                while not bodies <= acked and time.monotonic() < deadline:
                    messages = await consumer.receive()
                    drained.extend(message.body for message in messages)
                    if messages:
                        await consumer.ack_all(messages)
                        acked.update(message.body for message in messages)
            finally:
                await consumer.shutdown()
        asyncio.run(drain())
    finally:
        broker.stop()
        broker.kill()
    assert received, f"the first phase popped nothing (seed {seed})"
    assert not set(after + drained) & acked_before_kill, \
        f"acknowledged before the first kill, received again (seed {seed})"
    assert not set(drained) & acked_before_second_kill, \
        f"acknowledged before the second kill, received again (seed {seed})"
    assert bodies <= acked, f"{len(bodies - acked)} messages never came (seed {seed})"
