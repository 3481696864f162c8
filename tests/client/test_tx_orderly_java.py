"""Transactions with check-back, orderly consumption with queue locks, and the broker's calls
into a client (running info, direct consume, offset reset), against a real broker.

Method: one name server + broker per module (``rocketmq_peer``: here Java RocketMQ 4.9.8 with a
1 s transaction timeout and check interval; test_tx_orderly_pybroker.py runs the same functions
against pybroker), a fresh topic and group per test. Counts are exact: every committed message
is consumed once, rolled-back ones never; orderly consumption keeps per-key queue-offset order
through injected failures and a second consumer taking queues over. Broker -> client calls
go through the broker exactly as mqadmin sends them. Waits are bounded and fail the test.
"""
import asyncio
import threading
import time
from collections import defaultdict

import orjson
import pytest

from pybroker.client.admin import Admin
from pybroker.client.consumer import PushConsumer
from pybroker.client.instance import ClientInstance, request
from pybroker.client.listener import ConsumeOrderlyStatus, ConsumeStatus
from pybroker.client.message import Message
from pybroker.client.producer import Producer
from pybroker.client.route import SelectByHash
from pybroker.client.transaction import LocalTransactionState, TransactionProducer
from pybroker.protocol import fastjson
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.constants import ConsumeFromWhere
from tests import peers
from tests.client.conftest import Peer
from tests.client.scenario import (
    create_topic as _create_topic,
    unique_name as _name,
    wait_until as _wait_until,
    run_scenario as run,
)

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(300)]
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
FAST = {"rebalance_interval_ms": 1000, "persist_consumer_offset_interval_ms": 1000}
# Half messages are checked 1 s after they were stored, every second.
TRANSACTION_OVERRIDES = {"transactionTimeOut": "1000", "transactionCheckInterval": "1000"}


@pytest.fixture(scope="module")
def rocketmq_peer(tmp_path_factory):
    """Java RocketMQ 4.9.8 with fast transaction checks (skips without Java)."""
    install = peers.java_install()
    with peers.java_broker(tmp_path_factory.mktemp("rmq-tx"), install,
                           broker_overrides=TRANSACTION_OVERRIDES) as rmq:
        yield Peer(rmq.namesrv_addr, rmq.broker_addr)


class _Listener:
    """Local transactions decided by the body's prefix; checks decided by a table."""

    def __init__(self):
        self.executed: list[str] = []
        self.checked: dict[str, int] = defaultdict(int)
        self.check_verdicts: dict[str, LocalTransactionState] = {}

    def execute_local_transaction(self, message, arg):
        body = message.body.decode()
        self.executed.append(body)
        assert message.transaction_id
        if body.startswith("raise"):
            raise RuntimeError("local transaction failed")
        return {"commit": LocalTransactionState.COMMIT_MESSAGE,
                "rollback": LocalTransactionState.ROLLBACK_MESSAGE}.get(
                    body.split("-")[0], LocalTransactionState.UNKNOW)

    async def check_local_transaction(self, message):
        body = message.body.decode()
        self.checked[body] += 1
        return self.check_verdicts.get(body, LocalTransactionState.UNKNOW)


def test_transaction_commit_rollback_and_check_back(rocketmq_peer):
    async def scenario():
        topic, group = _name("tx"), _name("tpg")
        await _create_topic(rocketmq_peer, topic)
        listener = _Listener()
        bodies = [f"{kind}-{i}" for i in range(4)
                  for kind in ("commit", "rollback", "unknown", "raise")]
        # Unknown outcomes are settled by the checker: even ones commit, odd ones roll back.
        for body in bodies:
            if body.startswith(("unknown", "raise")):
                listener.check_verdicts[body] = (
                    LocalTransactionState.COMMIT_MESSAGE if int(body[-1]) % 2 == 0
                    else LocalTransactionState.ROLLBACK_MESSAGE)
        expected = {b for b in bodies if b.startswith("commit")
                    or listener.check_verdicts.get(b) == LocalTransactionState.COMMIT_MESSAGE}
        received = []

        async def consume(messages, context):
            received.extend(m.body.decode() for m in messages)
            assert all(m.topic == topic for m in messages)
            return ConsumeStatus.CONSUME_SUCCESS
        consumer = PushConsumer(_name("cg"), rocketmq_peer.namesrv_addr,
                                consume_from_where=FIRST, **FAST)
        consumer.subscribe(topic)
        consumer.register_message_listener(consume)
        producer = TransactionProducer(group, rocketmq_peer.namesrv_addr,
                                       transaction_listener=listener,
                                       heartbeat_broker_interval_ms=1000)
        await consumer.start()
        await producer.start()
        try:
            results = [await producer.send_message_in_transaction(Message(topic, b), arg=i)
                       for i, b in enumerate(bodies)]
            verdicts = {"commit": LocalTransactionState.COMMIT_MESSAGE,
                        "rollback": LocalTransactionState.ROLLBACK_MESSAGE}
            assert [r.local_transaction_state for r in results] == [
                verdicts.get(b.split("-")[0], LocalTransactionState.UNKNOW) for b in bodies]
            assert [r.transaction_id for r in results] == [r.msg_id for r in results]
            assert sorted(listener.executed) == sorted(bodies)
            await _wait_until(lambda: len(received) >= len(expected), 90, "committed messages")
            await _wait_until(lambda: all(listener.checked[b] for b in listener.check_verdicts),
                              30, "check-back of every unknown transaction")
            await asyncio.sleep(2.5)   # a late commit of a rolled-back message would show now
        finally:
            await producer.shutdown()
            await consumer.shutdown()
        assert sorted(received) == sorted(expected)
        assert not any(listener.checked[b] for b in bodies if b.startswith(("commit",
                                                                            "rollback")))
    run(scenario())


async def _send_keyed(peer, topic: str, keys: list[str], per_key: int) -> dict[str, list[str]]:
    """Send ``per_key`` messages for each key, a key always to one queue; bodies per key."""
    sent = defaultdict(list)
    async with Producer(_name("pg"), peer.namesrv_addr) as producer:
        for i in range(per_key):
            for key in keys:
                body = f"{key}:{i}"
                await producer.send(Message(topic, body, keys=key), selector=SelectByHash(),
                                    arg=key)
                sent[key].append(body)
    return sent


def _orderly_listener(log: list, fail_first: set, concurrent_calls: dict, lock: threading.Lock):
    def listener(messages, context):
        queue = context.message_queue
        with lock:
            concurrent_calls[queue] = concurrent_calls.get(queue, 0) + 1
            overlapping = concurrent_calls[queue] > 1
        try:
            assert not overlapping, f"two batches of {queue} at once"
            for message in messages:
                body = message.body.decode()
                if body in fail_first:
                    fail_first.discard(body)   # fails once, then succeeds in place
                    return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            with lock:
                log.extend((m.body.decode(), m.queue_offset, queue) for m in messages)
            return ConsumeOrderlyStatus.SUCCESS
        finally:
            with lock:
                concurrent_calls[queue] -= 1
    return listener


def _queues_of(consumer, topic: str) -> list:
    """The consumer's queues of ``topic`` (not those of its retry topic)."""
    return [queue for queue in consumer.process_queues if queue.topic == topic]


def _check_order(log, sent: dict[str, list[str]]) -> None:
    bodies = [entry[0] for entry in log]
    assert sorted(bodies) == sorted(b for values in sent.values() for b in values)
    per_key = defaultdict(list)
    for body in bodies:
        per_key[body.split(":")[0]].append(body)
    assert dict(per_key) == dict(sent)   # each key's messages exactly in send order


def test_orderly_locks_order_and_takeover(rocketmq_peer):
    async def scenario():
        topic, group = _name("ord"), _name("ocg")
        await _create_topic(rocketmq_peer, topic)
        keys = [f"key{k}" for k in range(8)]
        sent = await _send_keyed(rocketmq_peer, topic, keys, 15)
        log, calls, lock = [], {}, threading.Lock()
        fail_first = {f"key{k}:{i}" for k in range(0, 8, 3) for i in (0, 7)}
        first = PushConsumer(group, rocketmq_peer.namesrv_addr, consume_from_where=FIRST,
                             consume_message_batch_max_size=3, **FAST)
        first.subscribe(topic)
        first.register_message_listener_orderly(_orderly_listener(log, fail_first, calls, lock))
        second = PushConsumer(group, rocketmq_peer.namesrv_addr, consume_from_where=FIRST,
                              consume_message_batch_max_size=3, **FAST)
        second.subscribe(topic)
        second.register_message_listener_orderly(_orderly_listener(log, fail_first, calls,
                                                                   lock))
        await first.start()
        try:
            await _wait_until(lambda: len(log) >= 40, 60, "the first consumer's messages")
            assert all(pq.locked for pq in first.process_queues.values())
            assert len(_queues_of(first, topic)) == 4
            await second.start()
            more = await _send_keyed(rocketmq_peer, topic, keys, 10)
            for key, values in more.items():
                sent[key] += values
            total = sum(len(v) for v in sent.values())
            await _wait_until(lambda: len(_queues_of(first, topic)) == 2
                              and len(_queues_of(second, topic)) == 2, 60, "the queues to split")
            await _wait_until(lambda: len(log) >= total, 90, "every message")
            await asyncio.sleep(1.5)   # a duplicate would show up now
            assert all(pq.locked for c in (first, second) for pq in c.process_queues.values())
        finally:
            await second.shutdown()
            await first.shutdown()
        assert not fail_first   # every injected failure happened and was consumed again
        _check_order(log, sent)
    run(scenario())


def test_orderly_dead_letter_after_max_reconsume(rocketmq_peer):
    async def scenario():
        topic, group = _name("ordlq"), _name("ocg")
        await _create_topic(rocketmq_peer, topic, queue_nums=1)
        sent = await _send_keyed(rocketmq_peer, topic, ["k"], 5)
        attempts, log = defaultdict(int), []

        async def listener(messages, context):
            context.suspend_current_queue_time_ms = 100
            for message in messages:
                attempts[message.body.decode()] += 1
                if message.body == b"k:2":   # poison: never succeeds
                    return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            log.extend(m.body.decode() for m in messages)
            return ConsumeOrderlyStatus.SUCCESS
        consumer = PushConsumer(group, rocketmq_peer.namesrv_addr, consume_from_where=FIRST,
                                max_reconsume_times=2, **FAST)
        consumer.subscribe(topic)
        consumer.register_message_listener_orderly(listener)
        await consumer.start()
        try:
            await _wait_until(lambda: len(log) >= 4, 60, "the messages after the poison one")
            await asyncio.sleep(1.0)
        finally:
            await consumer.shutdown()
        assert log == [b for b in sent["k"] if b != "k:2"]
        assert attempts["k:2"] == 3   # first try + max_reconsume_times, then dead-lettered
        # 4.9.8 keeps the retry send's delay level on a dead letter: it waits in the schedule
        # topic (level 3 + reconsume times) with the DLQ as its real topic.
        async with Admin(rocketmq_peer.namesrv_addr) as admin:
            started = time.monotonic()
            dead = []
            while not dead:
                assert time.monotonic() - started < 10, "no dead letter scheduled"
                await asyncio.sleep(0.2)
                dead = await admin.query_message_by_key("SCHEDULE_TOPIC_XXXX", "k")
                dead = [m for m in dead if m.properties.get("REAL_TOPIC") == f"%DLQ%{group}"]
            assert [(m.body, m.properties["DELAY"]) for m in dead] == [(b"k:2", "5")]
    run(scenario())


async def _call_through_broker(peer, code: int, fields: dict, timeout_ms: int = 15000):
    instance = ClientInstance(peer.namesrv_addr)
    await instance.start()
    try:
        return await instance.invoke(peer.broker_addr, request(code, fields), timeout_ms)
    finally:
        await instance.shutdown()


def test_broker_calls_running_info_direct_consume_and_reset(rocketmq_peer):
    async def scenario():
        topic, group = _name("calls"), _name("ccg")
        await _create_topic(rocketmq_peer, topic, queue_nums=2)
        async with Producer(_name("pg"), rocketmq_peer.namesrv_addr) as producer:
            results = [await producer.send(Message(topic, f"m{i}"),
                                           selector=SelectByHash(), arg=i % 2)
                       for i in range(10)]
        received = []

        async def listener(messages, context):
            received.extend(m.body.decode() for m in messages)
            return ConsumeOrderlyStatus.SUCCESS
        consumer = PushConsumer(group, rocketmq_peer.namesrv_addr, consume_from_where=FIRST,
                                **FAST)
        consumer.subscribe(topic, "*")
        consumer.register_message_listener_orderly(listener)
        await consumer.start()
        try:
            await _wait_until(lambda: len(received) >= 10, 60, "all messages")
            client_id = consumer.instance.client_id
            info = await _call_through_broker(rocketmq_peer, RequestCode.GET_CONSUMER_RUNNING_INFO,
                                              {"consumerGroup": group, "clientId": client_id,
                                               "jstackEnable": "false"})
            assert info.code == ResponseCode.SUCCESS, info.remark
            document = fastjson.loads(info.body)
            assert document["properties"]["PROP_CONSUMEORDERLY"] == "true"
            assert document["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
            tables = [table for key, table in document["mqTable"].items()
                      if orjson.loads(key)["topic"] == topic]   # not the retry topic's
            assert len(tables) == 2 and all(t["locked"] for t in tables)
            assert sorted(t["commitOffset"] for t in tables) == [5, 5]
            assert {s["topic"] for s in document["subscriptionSet"]} >= {topic}
            # statusTable: the consumer's own minute windows, sampled every 10 s as in Java.
            deadline = time.monotonic() + 30
            while document["statusTable"][topic]["consumeOKTPS"] == 0:
                assert time.monotonic() < deadline, document["statusTable"]
                await asyncio.sleep(1.0)
                document = fastjson.loads((await _call_through_broker(
                    rocketmq_peer, RequestCode.GET_CONSUMER_RUNNING_INFO,
                    {"consumerGroup": group, "clientId": client_id,
                     "jstackEnable": "false"})).body)
            status = document["statusTable"][topic]
            assert status["pullTPS"] > 0 and status["consumeFailedMsgs"] == 0
            direct = await _call_through_broker(rocketmq_peer,
                                                RequestCode.CONSUME_MESSAGE_DIRECTLY, {
                                                    "consumerGroup": group,
                                                    "clientId": client_id,
                                                    "msgId": results[3].offset_msg_id})
            assert direct.code == ResponseCode.SUCCESS, direct.remark
            outcome = fastjson.loads(direct.body)
            assert outcome["consumeResult"] == "CR_SUCCESS" and outcome["order"] is True
            assert received.count("m3") == 2
            queue = results[0].message_queue
            await consumer.reset_offset({queue: 2})
            await _wait_until(lambda: len(received) >= 14, 30, "messages after the reset")
            await asyncio.sleep(1.0)
        finally:
            await consumer.shutdown()
        expected_again = [f"m{i}" for i in range(10)
                          if results[i].message_queue == queue and results[i].queue_offset >= 2]
        assert received[11:] == expected_again   # in queue order, once each
    run(scenario())
