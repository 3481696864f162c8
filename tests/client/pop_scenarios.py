# POP scenarios (Python client, Java push consumer), run against pybroker and Java 5.3.3 alike.
"""Scenario functions taking a ``rocketmq_peer`` (tests/client/conftest.py): collected by
tests/client/test_pop_pybroker.py (pybroker) and tests/client/test_pop_java.py (the real Java
5.3.3 broker), so both brokers must give the same results. Each counts exactly: every message
once unless it is meant to come back, every wait bounded.

The Java scenario runs tools/java_compat/PopPush.java (the official Java 5.3.3
DefaultMQPushConsumer with clientRebalance=false) through the module's ``java_pop_client``
fixture: (a JavaRocketMQ harness whose class path has the 5.3.3 client, that install), after
the groups were set to POP on the topics with SET_MESSAGE_REQUEST_MODE (401, what
``pybroker admin setConsumeMode`` and mqadmin's setConsumeMode send).
"""
import asyncio
import hashlib
import pathlib
import time
import urllib.parse
import uuid
from collections import Counter, defaultdict

import orjson

from pybroker.client import Admin, ConsumeStatus, Message, PopConsumer, PopPushConsumer, Producer
from pybroker.client import PushConsumer
from pybroker.client.message import MessageExt
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.protocol.constants import ConsumeFromWhere
from tests import peers

WAIT_S = 45.0
_POP_PUSH_SOURCE = pathlib.Path(__file__).resolve().parents[2] / "tools" / "java_compat" / \
    "PopPush.java"
_POP_PUSH_COUNT, _FAIL_EVERY, _KEYS = 40, 10, 4


def _name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


async def _topic(peer, queues: int) -> str:
    topic = _name("PopTopic")
    admin = Admin(peer.namesrv_addr)
    await admin.start()
    try:
        await admin.create_topic(topic, queues, broker_addr=peer.broker_addr)
    finally:
        await admin.shutdown()
    return topic


async def _send(peer, topic: str, bodies: list[bytes], **message_options) -> None:
    async with Producer(_name("pop_producer"), peer.namesrv_addr) as producer:
        for body in bodies:
            await producer.send(Message(topic, body, **message_options))


def _consumer(peer, group: str, topic: str, **options) -> PopConsumer:
    consumer = PopConsumer(group, peer.namesrv_addr, poll_time_ms=2000,
                           consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                           **options)
    consumer.subscribe(topic)
    return consumer


async def _collect(consumer: PopConsumer, count: int, ack: bool = True,
                   wait_s: float = WAIT_S) -> list[MessageExt]:
    got: list[MessageExt] = []
    deadline = time.monotonic() + wait_s
    while len(got) < count and time.monotonic() < deadline:
        messages = await consumer.receive()
        if ack and messages:
            await consumer.ack_all(messages)
        got += messages
    return got


def test_pop_hands_each_message_to_one_consumer(rocketmq_peer):
    async def scenario():
        topic = await _topic(rocketmq_peer, 4)
        bodies = [f"m{i}".encode() for i in range(120)]
        await _send(rocketmq_peer, topic, bodies)
        group = _name("pop_group")
        consumers = [_consumer(rocketmq_peer, group, topic, max_nums=8) for _ in range(4)]
        for consumer in consumers:
            await consumer.start()
        got: list[bytes] = []
        deadline = time.monotonic() + WAIT_S

        async def consume(consumer: PopConsumer) -> None:
            while len(got) < len(bodies) and time.monotonic() < deadline:
                messages = await consumer.receive(poll_time_ms=500)
                if messages:
                    await consumer.ack_all(messages)
                    got.extend(message.body for message in messages)
        try:
            await asyncio.gather(*(consume(consumer) for consumer in consumers))
            assert sorted(got) == sorted(bodies), "every message exactly once"
            assert await consumers[1].receive(poll_time_ms=500) == []
        finally:
            for consumer in consumers:
                await consumer.shutdown()
    asyncio.run(scenario())


def test_unacknowledged_messages_come_back_acknowledged_ones_never(rocketmq_peer):
    async def scenario():
        topic = await _topic(rocketmq_peer, 2)
        bodies = [f"m{i}".encode() for i in range(10)]
        await _send(rocketmq_peer, topic, bodies)
        consumer = _consumer(rocketmq_peer, _name("pop_group"), topic, invisible_time_ms=3000)
        await consumer.start()
        try:
            first = await _collect(consumer, 10, ack=False)
            assert sorted(message.body for message in first) == sorted(bodies)
            acked = [message for message in first if int(message.body[1:]) % 2 == 0]
            await consumer.ack_all(acked)
            held = next(message for message in first if message.body == b"m1")
            await consumer.change_invisible_time(held, 120000)
            back = await _collect(consumer, 4, ack=True, wait_s=WAIT_S)
            assert sorted(message.body for message in back) == [b"m3", b"m5", b"m7", b"m9"]
            assert all(message.reconsume_times == 1 for message in back)
            assert await consumer.receive(poll_time_ms=500) == []
        finally:
            await consumer.shutdown()
    asyncio.run(scenario())


def test_a_held_pop_is_answered_when_a_message_arrives(rocketmq_peer):
    async def scenario():
        topic = await _topic(rocketmq_peer, 2)
        consumer = _consumer(rocketmq_peer, _name("pop_group"), topic)
        await consumer.start()
        try:
            receiving = asyncio.create_task(consumer.receive(poll_time_ms=15000))
            await asyncio.sleep(1.0)
            sent_at = time.monotonic()
            await _send(rocketmq_peer, topic, [b"late"])
            messages = await asyncio.wait_for(receiving, 20)
            assert [message.body for message in messages] == [b"late"]
            assert time.monotonic() - sent_at < 5.0, "answered on arrival, not at poll time"
            await consumer.ack_all(messages)
        finally:
            await consumer.shutdown()
    asyncio.run(scenario())


def test_push_over_pop_retries_then_dead_letters(rocketmq_peer):
    async def scenario():
        topic = await _topic(rocketmq_peer, 2)
        bodies = [f"ok{i}".encode() for i in range(20)] + [b"bad0", b"bad1"]
        await _send(rocketmq_peer, topic, bodies)
        group = _name("pop_push")
        seen: dict[bytes, list[int]] = {}

        def listener(messages, context):
            for message in messages:
                seen.setdefault(message.body, []).append(message.reconsume_times)
            failing = any(message.body.startswith(b"bad") for message in messages)
            return ConsumeStatus.RECONSUME_LATER if failing else ConsumeStatus.CONSUME_SUCCESS
        consumer = PopPushConsumer(group, rocketmq_peer.namesrv_addr, max_reconsume_times=1,
                                   pop_delay_levels_s=(1,), poll_time_ms=2000,
                                   consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe(topic)
        consumer.register_message_listener(listener)
        await consumer.start()
        try:
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline and not (
                    len(seen) == len(bodies) and all(len(seen[b]) == 2 for b in seen
                                                     if b.startswith(b"bad"))):
                await asyncio.sleep(0.2)
        finally:
            await consumer.shutdown()
        assert {body: counts for body, counts in seen.items() if body.startswith(b"ok")} == \
            {body: [0] for body in bodies[:20]}
        assert seen[b"bad0"] == [0, 1] and seen[b"bad1"] == [0, 1]
        dead = PushConsumer(_name("dlq_reader"), rocketmq_peer.namesrv_addr,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        dead_letters: list[bytes] = []
        dead.subscribe(f"%DLQ%{group}")
        dead.register_message_listener(
            lambda messages, context: dead_letters.extend(m.body for m in messages)
            or ConsumeStatus.CONSUME_SUCCESS)
        await dead.start()
        try:
            deadline = time.monotonic() + WAIT_S
            while len(dead_letters) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
        finally:
            await dead.shutdown()
        assert sorted(dead_letters) == [b"bad0", b"bad1"]
    asyncio.run(scenario())


def test_order_pop_holds_a_queue_until_its_run_is_acknowledged(rocketmq_peer):
    async def scenario():
        topic = await _topic(rocketmq_peer, 1)
        await _send(rocketmq_peer, topic, [f"o{i}".encode() for i in range(6)])
        group = _name("pop_order")
        first = _consumer(rocketmq_peer, group, topic, max_nums=3)
        second = _consumer(rocketmq_peer, group, topic, max_nums=3)
        await first.start()
        await second.start()
        try:
            run = await first.receive(order=True, attempt_id="attempt-1")
            assert [message.body for message in run] == [b"o0", b"o1", b"o2"]
            assert await second.receive(order=True, attempt_id="attempt-2",
                                        poll_time_ms=1000) == []
            again = await first.receive(order=True, attempt_id="attempt-1")
            assert [message.body for message in again] == [b"o0", b"o1", b"o2"]
            waiting = asyncio.create_task(second.receive(order=True, attempt_id="attempt-3",
                                                         poll_time_ms=15000))
            await asyncio.sleep(1.0)
            acked_at = time.monotonic()
            for message in again:
                await first.ack(message)
            nxt = await asyncio.wait_for(waiting, 20)
            assert [message.body for message in nxt] == [b"o3", b"o4", b"o5"]
            assert time.monotonic() - acked_at < 5.0, "woken by the ack, not the poll time"
            await second.ack_all(nxt)
        finally:
            await first.shutdown()
            await second.shutdown()
    asyncio.run(scenario())


# --- the Java 5.3.3 push consumer in POP mode ----------------------------------------------
def _pop_push_classes(install) -> pathlib.Path:
    digest = hashlib.sha256(_POP_PUSH_SOURCE.read_bytes()).hexdigest()[:16]
    out_dir = install.cache_dir / "java_compat_pop" / digest
    if not (out_dir / "PopPush.class").is_file():
        staging = out_dir.with_name(digest + ".partial")
        peers.compile_java(install, [_POP_PUSH_SOURCE], staging)
        staging.rename(out_dir)
    return out_dir


async def _set_pop_mode(peer, groups: dict[str, str]) -> None:
    """Create each group and set it to POP on its topic (SET_MESSAGE_REQUEST_MODE, 401)."""
    admin = Admin(peer.namesrv_addr)
    await admin.start()
    try:
        for topic, group in groups.items():
            for code, body in (
                    (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {"groupName": group}),
                    (RequestCode.SET_MESSAGE_REQUEST_MODE, {
                        "topic": topic, "consumerGroup": group, "mode": "POP",
                        "popShareQueueNum": 0})):
                answer = await admin.instance.invoke(
                    peer.broker_addr, create_request(code, {}, orjson.dumps(body)))
                assert answer.code == ResponseCode.SUCCESS, (code, answer.remark)
    finally:
        await admin.shutdown()


def _pop_push_run(rmq, install, peer) -> tuple[list[dict], str]:
    """Topics made on ``peer``, PopPush run through ``rmq``'s client class path: its results
    and the concurrently listener's topic."""
    async def topics() -> tuple[str, str]:
        return (await _topic(peer, 4), await _topic(peer, 4))
    topic, order_topic = asyncio.run(topics())
    group = _name("pop_push")
    asyncio.run(_set_pop_mode(peer, {topic: group, order_topic: group + "_order"}))
    run = rmq.run_class("PopPush", [peer.namesrv_addr, f"topic={topic}",
                                    f"order_topic={order_topic}", f"group={group}",
                                    f"count={_POP_PUSH_COUNT}", f"fail_every={_FAIL_EVERY}",
                                    f"keys={_KEYS}", "timeout=120"],
                        timeout_s=200, extra_classpath=[_pop_push_classes(install)])
    assert run.returncode == 0, f"PopPush exit {run.returncode}:\n{run.stdout[-4000:]}\n" \
                                f"{run.stderr[-3000:]}"
    results = []
    for line in run.stdout.splitlines():
        if line.startswith("RESULT "):
            fields = dict(pair.split("=", 1) for pair in line.split()[1:])
            results.append({key: urllib.parse.unquote_plus(value)
                            for key, value in fields.items()})
    return results, topic


def _pop_push_summary(results: list[dict], topic: str) -> dict:
    """The figures both brokers must give, checked against what was sent."""
    modes = {result["group"].endswith("_order"): (int(result["pop"]), int(result["pull"]))
             for result in results if result["op"] == "mode"}
    deliveries = Counter((result["body"], int(result["reconsume"]))
                         for result in results if result["op"] == "concurrently")
    failed = {f"m{i}" for i in range(0, _POP_PUSH_COUNT, _FAIL_EVERY)}
    expected = Counter({(f"m{i}", 0): 1 for i in range(_POP_PUSH_COUNT)})
    expected.update({(body, 1): 1 for body in failed})
    assert deliveries == expected, deliveries - expected or expected - deliveries
    by_key = defaultdict(list)
    for result in results:
        if result["op"] == "orderly":
            key, _, index = result["body"].partition(":")
            by_key[int(key)].append(int(index))
    assert dict(by_key) == {key: list(range(key, _POP_PUSH_COUNT, _KEYS))
                            for key in range(_KEYS)}, "each key once, in order"
    # Retried messages too are delivered under the topic consumed (not its retry topic).
    return {"modes": modes, "deliveries": deliveries,
            "under_topic": {result["topic"] == topic for result in results
                            if result["op"] == "concurrently"}}


def test_java_push_consumer_in_pop_mode(rocketmq_peer, java_pop_client):
    """Both groups set to POP (401): the concurrently listener's queues become POP queues
    (QUERY_ASSIGNMENT: the broker's one queue -1, mode POP); every message is consumed once,
    one answered RECONSUME_LATER comes back once (change of invisible time, revive to the retry
    topic, reconsume count 1) under the topic consumed; the orderly listener, which the 5.3.3
    client always rebalances itself, pulls the topic's four queues and keeps each key's
    order."""
    rmq, install = java_pop_client
    summary = _pop_push_summary(*_pop_push_run(rmq, install, rocketmq_peer))
    assert summary["modes"] == {False: (1, 0), True: (0, 4)}
    assert summary["under_topic"] == {True}
