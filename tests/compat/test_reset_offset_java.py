# Compat: `mqadmin resetOffsetByTime` (Java 4.9.8) against pybroker, live and offline group.
"""Goal: prove that mqadmin's resetOffsetByTime works against pybroker: with a live Python
push consumer it goes through INVOKE_BROKER_TO_RESET_OFFSET (222), prints every queue at the
offset of the time, and the consumer delivers every message again; with the group offline the
broker answers CONSUMER_NOT_ONLINE and mqadmin's fallback (consume stats, search by time,
UPDATE_CONSUMER_OFFSET) rewinds the committed offsets.

Method: one `pybroker standalone` (StandaloneBroker) per module; the consumer and producer are
pybroker.client in this process; mqadmin is the real Java 4.9.8 MQAdminStartup run by
tools/java_rocketmq.py against pybroker's NameServer, in a thread so the consumer keeps
running. Its output is checked for errors and for the table rows. Missing Java skips (fails
under PYBROKER_REQUIRE_PEERS=1).
"""
import asyncio
import time
import uuid

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.client.admin import Admin
from pybroker.client.consumer import ConsumeStatus, PushConsumer
from pybroker.client.message import Message, SendStatus
from pybroker.client.producer import Producer
from pybroker.protocol.constants import ConsumeFromWhere
from tests import peers

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(300)]
harness = peers.java_rocketmq
QUEUES = 4
COUNT = 20


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with StandaloneBroker(tmp_path_factory.mktemp("pybroker-reset-java")) as running:
        yield running


@pytest.fixture(scope="module")
def rmq(broker, tmp_path_factory):
    install = peers.java_install("4.9.8")
    value = harness.JavaRocketMQ(tmp_path_factory.mktemp("java-reset"), install,
                                 namesrv_port=broker.namesrv_port)
    value.write_files()
    return value


def mqadmin(rmq, *args) -> str:
    """mqadmin's stdout; fails on a non-zero exit or an error printed on either stream."""
    args = [*map(str, args), "-n", rmq.namesrv_addr]
    run = rmq.run_class(harness.MQADMIN_CLASS, args, timeout_s=90)
    text = run.stdout + run.stderr
    assert run.returncode == 0 and "Exception" not in text and "CODE:" not in text, (
        f"mqadmin {args} exit {run.returncode}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return run.stdout


def offset_rows(output: str) -> dict[int, int]:
    """{queue id: offset} of the "brokerName queueId offset" rows mqadmin printed."""
    rows = [line.split() for line in output.splitlines()]
    return {int(row[1]): int(row[2]) for row in rows
            if len(row) == 3 and row[0] == "broker-a" and row[1].isdigit()}


async def _wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def _committed(admin: Admin, group: str, topic: str) -> dict[int, int]:
    progress = await admin.consumer_progress(group, topic)
    return {queue.queue_id: p.consumer_offset for queue, p in progress.items()}


async def _send(broker, topic: str) -> set[tuple[int, int]]:
    sent = set()
    async with Producer(f"pg_{uuid.uuid4().hex[:8]}", broker.namesrv_addr) as producer:
        for index in range(COUNT):
            result = await producer.send(Message(topic, b"m%d" % index))
            assert result.status == SendStatus.SEND_OK
            sent.add((result.message_queue.queue_id, result.queue_offset))
    return sent


def test_mqadmin_reset_offset_by_time(broker, rmq):
    async def scenario():
        topic, group = f"reset_{uuid.uuid4().hex[:8]}", f"cg_{uuid.uuid4().hex[:8]}"
        seen: list[tuple[int, int]] = []

        async def listener(messages, context):
            seen.extend((m.queue_id, m.queue_offset) for m in messages)
            return ConsumeStatus.CONSUME_SUCCESS

        async def consumed_all(start: int, sent) -> bool:
            return set(seen[start:]) >= sent
        async with Admin(broker.namesrv_addr) as admin:
            await admin.create_topic(topic, QUEUES, broker_addr=broker.broker_addr)
            consumer = PushConsumer(group, broker.namesrv_addr, instance_name="reset-java",
                                    consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                    rebalance_interval_ms=1000,
                                    persist_consumer_offset_interval_ms=1000)
            consumer.subscribe(topic)
            consumer.register_message_listener(listener)
            await consumer.start()
            try:
                before_ms = time.time_ns() // 1_000_000 - 1
                sent = await _send(broker, topic)
                ends = {queue_id: 1 + max(o for q, o in sent if q == queue_id)
                        for queue_id in {q for q, _ in sent}}
                await _wait_until(lambda: consumed_all(0, sent), 30, "the first delivery")

                async def committed_ends() -> bool:
                    committed = await _committed(admin, group, topic)
                    return all(committed.get(q) == end for q, end in ends.items())
                await _wait_until(committed_ends, 30, "the commits")
                first = len(seen)
                output = await asyncio.to_thread(
                    mqadmin, rmq, "resetOffsetByTime", "-g", group, "-t", topic,
                    "-s", before_ms)
                assert offset_rows(output) == {queue_id: 0 for queue_id in range(QUEUES)}, \
                    output
                await _wait_until(lambda: consumed_all(first, sent), 30, "the redelivery")
                await _wait_until(committed_ends, 30, "the commits after the reset")
                assert set(seen[first:]) == sent
            finally:
                await consumer.shutdown()
            # Offline group: CONSUMER_NOT_ONLINE, then mqadmin rewinds the offsets itself.
            output = await asyncio.to_thread(
                mqadmin, rmq, "resetOffsetByTime", "-g", group, "-t", topic, "-s", before_ms)
            committed = await _committed(admin, group, topic)
            assert {q: committed[q] for q in ends} == {q: 0 for q in ends}, output
    asyncio.run(scenario())
