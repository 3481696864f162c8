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
from tests import peers
from tests.reset_offsets import (QUEUES, RecordingConsumer, committed_offsets, queue_ends,
                                 send_numbered, wait_until)

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(300)]
harness = peers.java_rocketmq
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


def test_mqadmin_reset_offset_by_time(broker, rmq):
    async def scenario():
        topic, group = f"reset_{uuid.uuid4().hex[:8]}", f"cg_{uuid.uuid4().hex[:8]}"
        async with Admin(broker.namesrv_addr) as admin:
            await admin.create_topic(topic, QUEUES, broker_addr=broker.broker_addr)
            async with RecordingConsumer(broker.namesrv_addr, group, topic,
                                         "reset-java") as consumer:
                before_ms = time.time_ns() // 1_000_000 - 1
                sent = await send_numbered(broker.namesrv_addr, topic, COUNT)
                ends = queue_ends(sent)
                await wait_until(consumer.delivered(0, sent), 30, "the first delivery")

                async def committed_ends() -> bool:
                    committed = await committed_offsets(admin, group, topic)
                    return all(committed.get(q) == end for q, end in ends.items())
                await wait_until(committed_ends, 30, "the commits")
                first = len(consumer.seen)
                output = await asyncio.to_thread(
                    mqadmin, rmq, "resetOffsetByTime", "-g", group, "-t", topic,
                    "-s", before_ms)
                assert offset_rows(output) == {queue_id: 0 for queue_id in range(QUEUES)}, \
                    output
                await wait_until(consumer.delivered(first, sent), 30, "the redelivery")
                await wait_until(committed_ends, 30, "the commits after the reset")
                assert set(consumer.seen[first:]) == sent
            # Offline group: CONSUMER_NOT_ONLINE, then mqadmin rewinds the offsets itself.
            output = await asyncio.to_thread(
                mqadmin, rmq, "resetOffsetByTime", "-g", group, "-t", topic, "-s", before_ms)
            committed = await committed_offsets(admin, group, topic)
            assert {q: committed[q] for q in ends} == {q: 0 for q in ends}, output
    asyncio.run(scenario())
