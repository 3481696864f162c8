"""POP messages in flight move with the store between Java RocketMQ 5.3.3 and pybroker, both
ways: what was acknowledged (on either broker) never comes back, what was not comes back once,
through the retry topic, after its invisible time and not before, nothing popped is handed out
again by the other broker while it is invisible, and an order POP run holds its queue on the
other broker until its invisible time (consumerOrderInfo.json).

Method: one scenario over three brokers on one store, with the store-moving harness and settings
of tests/compat/test_timer_java.py (POP's check-points and acks are timer messages, so they
move parked in the timer files). (1) A Java 5.3.3 broker: 8 messages popped by pybroker's POP
consumer (invisible 45 s); one acked, two batch-acked, one given a 10-minute invisible time; an
order POP takes a run of 2 messages of another topic; the broker stops. (2) pybroker opens a
copy of the store: a POP gets nothing, an order POP with another attemptId neither (offsets,
in-flight state and the order run came along); two more of Java's messages are acked on
pybroker with Java's receipt handles; after the invisible time exactly the other two come back
(reconsume count 1, 1ST_POP_TIME the Java pop's, stored after revive time + 2 s) and the order
run is handed out again (reconsume count 1), then acked; pybroker does step (1) with 8 + 2
messages of its own and stops. (3) Java 5.3.3 opens a copy of pybroker's store
and does step (2) with pybroker's messages. Skips without Java (fails under
PYBROKER_REQUIRE_PEERS=1).
"""
import asyncio
import time

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.client import Admin, Message, PopConsumer, Producer
from pybroker.client.popping import receipt_handle
from pybroker.protocol import pop
from pybroker.protocol.constants import ConsumeFromWhere, Property
from tests import peers
from tests.compat.test_timer_java import SETTINGS, _copy_store, _start_java

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(600)]

TOPIC = "PopStoreTopic"
ORDER_TOPIC = "PopStoreOrderTopic"
GROUP = "PopStoreGroup"
# Long enough for a Java broker to stop (~15 s here) or start and the other to take over.
INVISIBLE_MS = 45_000
CHANGED_INVISIBLE_MS = 600_000
DUE_MARGIN_MS = 2000            # a check-point is revived after its revive time + 2 s
REVIVE_LATE_S = 30              # the revive rounds and the timer under CI load
QUIET_S = 3.0                   # POPs that must find nothing more


def _consumer(namesrv: str) -> PopConsumer:
    consumer = PopConsumer(GROUP, namesrv, max_nums=8, poll_time_ms=1000,
                           consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(TOPIC)
    consumer.subscribe(ORDER_TOPIC)
    return consumer


async def _receive(consumer: PopConsumer, count: int, wait_s: float,
                   invisible_ms: int | None = None) -> dict:
    """{body: message} of what POPs hand out within ``wait_s`` (until ``count`` came)."""
    got: dict = {}
    deadline = time.monotonic() + wait_s
    while len(got) < count and time.monotonic() < deadline:
        for message in await consumer.receive(topic=TOPIC, invisible_time_ms=invisible_ms):
            body = bytes(message.body).decode()
            assert body not in got, f"{body} handed out twice"
            got[body] = message
    return got


def _revive_ms(message) -> int:
    info = pop.parse_extra_info(receipt_handle(message))
    return info.pop_time + info.invisible_time


async def _order_pop(consumer: PopConsumer, attempt_id: str, invisible_ms: int | None = None):
    return [(bytes(message.body).decode(), message) for message in await consumer.receive(
        topic=ORDER_TOPIC, order=True, attempt_id=attempt_id, invisible_time_ms=invisible_ms)]


async def _in_flight(namesrv: str, run: str, invisible_ms: int) -> dict:
    """Send ``run``-0..7 and pop them; ack 0, batch-ack 1 and 2, give 3 ten minutes; an
    order POP of ``run``-o0 and o1; the popped messages by body."""
    async with Producer(f"pop_store_{run}", namesrv) as producer:
        for number in range(8):
            await producer.send(Message(TOPIC, f"{run}-{number}".encode()))
        for number in range(2):
            await producer.send(Message(ORDER_TOPIC, f"{run}-o{number}".encode()))
    consumer = _consumer(namesrv)
    await consumer.start()
    try:
        popped = await _receive(consumer, 8, 30, invisible_ms)
        assert sorted(popped) == [f"{run}-{number}" for number in range(8)]
        await consumer.ack(popped[f"{run}-0"])
        await consumer.ack_all([popped[f"{run}-1"], popped[f"{run}-2"]])
        await consumer.change_invisible_time(popped[f"{run}-3"], CHANGED_INVISIBLE_MS)
        order_run = await _order_pop(consumer, f"{run}-attempt", invisible_ms)
        assert [body for body, _ in order_run] == [f"{run}-o0", f"{run}-o1"]
        popped.update(order_run)
    finally:
        await consumer.shutdown()
    return popped


async def _take_over(namesrv: str, source: dict, run: str) -> None:
    """The broker now on the store: nothing handed out again, 4 and 5 acked here with the
    other broker's handles, exactly 6 and 7 back after their invisible time."""
    consumer = _consumer(namesrv)
    await consumer.start()
    try:
        due_ms = min(_revive_ms(source[f"{run}-{number}"]) for number in range(4, 8))
        assert await _receive(consumer, 1, 1.0) == {}
        assert await _order_pop(consumer, f"{run}-other") == []     # the run holds its queue
        await consumer.ack(source[f"{run}-4"])
        await consumer.ack_all([source[f"{run}-5"]])
        assert time.time() * 1000 < due_ms, "the broker took over after the invisible time"
        back = await _receive(consumer, 2, due_ms / 1000 - time.time() + REVIVE_LATE_S)
        assert sorted(back) == [f"{run}-6", f"{run}-7"]
        for body, message in back.items():
            popped = pop.parse_extra_info(receipt_handle(source[body]))
            assert message.reconsume_times == 1, body
            assert message.properties[Property.FIRST_POP_TIME] == str(popped.pop_time), body
            assert message.store_timestamp > _revive_ms(source[body]) + DUE_MARGIN_MS, body
        await consumer.ack_all(list(back.values()))
        # Acknowledged on either broker, or given ten more minutes: none comes back.
        assert await _receive(consumer, 1, QUIET_S) == {}
        order_due_ms = max(_revive_ms(source[f"{run}-o{number}"]) for number in range(2))
        await asyncio.sleep(max(0.0, order_due_ms / 1000 - time.time()) + 0.2)
        again = await _order_pop(consumer, f"{run}-later")
        assert [(body, message.reconsume_times) for body, message in again] == \
            [(f"{run}-o0", 1), (f"{run}-o1", 1)]
        for _, message in again:
            await consumer.ack(message)
        assert await _order_pop(consumer, f"{run}-last") == []
    finally:
        await consumer.shutdown()


async def _create_topic(namesrv: str, broker_addr: str) -> None:
    admin = Admin(namesrv)
    await admin.start()
    try:
        for topic in (TOPIC, ORDER_TOPIC):
            await admin.create_topic(topic, 1, broker_addr=broker_addr)
    finally:
        await admin.shutdown()


def test_pop_messages_in_flight_move_between_java_and_pybroker(tmp_path):
    install = peers.java_install("5.3.3")
    java = _start_java(install, tmp_path / "java1", None)
    try:
        asyncio.run(_create_topic(java.namesrv_addr, java.broker_addr))
        java_popped = asyncio.run(_in_flight(java.namesrv_addr, "java", INVISIBLE_MS))
    finally:
        java.stop()
    _copy_store(java.store_dir, tmp_path / "py" / "store")
    with StandaloneBroker(tmp_path / "py", SETTINGS) as broker:
        asyncio.run(_take_over(broker.namesrv_addr, java_popped, "java"))
        py_popped = asyncio.run(_in_flight(broker.namesrv_addr, "py", INVISIBLE_MS))
    assert broker.process.returncode == 0
    java_again = _start_java(install, tmp_path / "java2", tmp_path / "py" / "store")
    try:
        asyncio.run(_take_over(java_again.namesrv_addr, py_popped, "py"))
    finally:
        java_again.stop()
