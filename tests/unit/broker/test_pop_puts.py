"""Goal: a POP's check-point puts are awaited by the request's one coroutine (run_pop), and what
a POP answers, stores and leaves in its queues' slots around those puts is what it was when each
layer of the run awaited the put itself: a failed put (its messages stay, counted as left; the
queue unlocked), puts of two POPs completing in the other order, a POP cancelled while its put
is pending (nothing handed out, the queue unlocked, the messages popped again).

Method: tests/unit/broker/pop_harness.py's one-process broker; the check-point put
(``revive_log.put_revive_record``) wrapped so a test decides when and how each completes; the
slots' words read from the POP table. The resumption test counts, with a profile hook, the
coroutine frames of pop_message.py a check-point's completion resumes.
"""
import asyncio
import collections
import importlib.util
import inspect
import logging
import pathlib
import sys

import pytest

from pybroker.broker.pop import pop_message, revive_log
from pybroker.protocol import pop
from pybroker.protocol.codes import ResponseCode
from pybroker.store.config_docs import SubscriptionGroupConfig
from pybroker.store.pop_checkpoint import decode_checkpoint
from pybroker.store.message_store import PutResult
from pybroker.store.status import PutStatus

_spec = importlib.util.spec_from_file_location(
    "pop_harness", pathlib.Path(__file__).with_name("pop_harness.py"))
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)
TOPIC, GROUP = harness.TOPIC, harness.GROUP
QUEUES = 4
_REAL_PUT = revive_log.put_revive_record


@pytest.fixture
def broker(tmp_path):
    created = harness.PopBroker(tmp_path, {"autoCreateSubscriptionGroup": "false",
                                           "popFromRetryProbability": "0"}, queues=QUEUES)
    created.metadata.groups.update_subscription_group(SubscriptionGroupConfig(GROUP))
    yield created
    created.close()


class HeldPuts:
    """``revive_log.put_revive_record`` replaced: each put is made (stored or refused as the
    real one does) and its waiter gets a future the test completes: ``(real, waiter)``
    each, in put order."""

    def __init__(self, monkeypatch):
        self.puts: list[tuple[asyncio.Future, asyncio.Future]] = []
        monkeypatch.setattr(revive_log, "put_revive_record", self._put)

    def _put(self, putter, record):
        waiter = asyncio.get_running_loop().create_future()
        self.puts.append((_REAL_PUT(putter, record), waiter))
        return waiter

    async def made(self, count: int) -> None:
        while len(self.puts) < count:
            await asyncio.sleep(0)


def slot_words(broker, queue_id: int) -> tuple:
    """(pop offset, in-flight count, lockable) of the group's slot of ``queue_id``."""
    table = broker.table
    slot = broker.pop_state.slots.cached((TOPIC, GROUP, queue_id))
    lockable = table.try_lock(slot, 99)
    if lockable:
        table.unlock(slot, 99)
    return table.pop_offset(slot), table.in_flight(slot), lockable


def test_a_failed_check_point_put_leaves_its_messages_and_the_run_goes_on(broker, monkeypatch,
                                                                         caplog):
    for index in range(2 * QUEUES):
        broker.send(f"m{index}".encode(), queue_id=index % QUEUES)
    calls = []

    def first_fails(putter, record):
        calls.append(record)
        if len(calls) == 1:
            future = asyncio.get_running_loop().create_future()
            future.set_result(PutResult(PutStatus.SERVICE_NOT_AVAILABLE))
            return future
        return _REAL_PUT(putter, record)
    monkeypatch.setattr(revive_log, "put_revive_record", first_fails)
    with caplog.at_level(logging.ERROR, "pybroker.broker.pop"):
        response = asyncio.run(broker.pop(queue_id=-1, max_nums=32))
    assert (response.code, response.remark) == (ResponseCode.SUCCESS, "FOUND")
    assert len(calls) == QUEUES
    assert "put ck to store fail" in caplog.text and "SERVICE_NOT_AVAILABLE" in caplog.text
    header = response.ext_fields
    handed = pop.parse_msg_offset_info(header["msgOffsetInfo"])
    failed = [q for q in range(QUEUES) if f"0@{q}" not in handed]
    assert len(failed) == 1
    assert handed == {f"0@{q}": [0, 1] for q in range(QUEUES) if q != failed[0]}
    assert header["restNum"] == "2"              # the failed queue's two, left
    assert len(harness.popped(response)) == 2 * (QUEUES - 1)
    for queue_id in range(QUEUES):
        assert slot_words(broker, queue_id) == ((0, 0, True) if queue_id == failed[0]
                                                else (2, 2, True)), queue_id
    stored = [decode_checkpoint(body) for tag, body, *_ in broker.revive_records()
              if tag == "ck"]
    assert sorted(ck.queue_id for ck in stored) == \
        [q for q in range(QUEUES) if q != failed[0]]
    # The failed queue's messages are popped again.
    response = asyncio.run(broker.pop(queue_id=-1, max_nums=32))
    assert pop.parse_msg_offset_info(response.ext_fields["msgOffsetInfo"]) == \
        {f"0@{failed[0]}": [0, 1]}
    assert slot_words(broker, failed[0]) == (2, 2, True)


def test_puts_of_two_pops_completing_in_the_other_order(broker, monkeypatch):
    for index in range(4):
        broker.send(f"m{index}".encode(), queue_id=index % 2)
    held = HeldPuts(monkeypatch)

    async def scenario():
        first = asyncio.ensure_future(broker.pop(queue_id=0, max_nums=32))
        second = asyncio.ensure_future(broker.pop(queue_id=1, max_nums=1))
        await held.made(2)
        results = [await real for real, _ in held.puts]
        assert all(result.status.stored for result in results)
        held.puts[1][1].set_result(results[1])
        answered_second = await second
        assert not first.done()
        assert slot_words(broker, 0)[2] is False        # still locked by the first POP
        held.puts[0][1].set_result(results[0])
        return await first, answered_second
    first, second = asyncio.run(scenario())
    assert pop.parse_msg_offset_info(first.ext_fields["msgOffsetInfo"]) == {"0@0": [0, 1]}
    assert pop.parse_msg_offset_info(second.ext_fields["msgOffsetInfo"]) == {"0@1": [0]}
    assert (first.ext_fields["restNum"], second.ext_fields["restNum"]) == ("0", "1")
    assert [message.body for message in harness.popped(first)] == [b"m0", b"m2"]
    assert [message.body for message in harness.popped(second)] == [b"m1"]
    assert slot_words(broker, 0) == (2, 2, True)
    assert slot_words(broker, 1) == (1, 1, True)


def test_a_pop_cancelled_while_its_put_is_pending_hands_nothing_out(broker, monkeypatch):
    for index in range(2):
        broker.send(f"m{index}".encode(), queue_id=0)
    held = HeldPuts(monkeypatch)

    async def scenario():
        task = asyncio.ensure_future(broker.pop(queue_id=0, max_nums=32))
        await held.made(1)
        assert slot_words(broker, 0)[2] is False
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await held.puts[0][0]
    asyncio.run(scenario())
    assert slot_words(broker, 0) == (0, 0, True)
    monkeypatch.setattr(revive_log, "put_revive_record", _REAL_PUT)
    response = asyncio.run(broker.pop(queue_id=0, max_nums=32))
    assert pop.parse_msg_offset_info(response.ext_fields["msgOffsetInfo"]) == {"0@0": [0, 1]}
    assert slot_words(broker, 0) == (2, 2, True)


@pytest.mark.parametrize("queue_id", [0, -1])
def test_a_check_point_s_completion_resumes_the_request_s_one_coroutine(broker, monkeypatch,
                                                                       queue_id):
    """Of pop_message.py's coroutines, the put's completion resumes run_pop alone (each layer
    of the run awaiting the put was a resumption of its own)."""
    broker.send(b"m", queue_id=0)
    held = HeldPuts(monkeypatch)
    resumed: collections.Counter = collections.Counter()
    module_file = pop_message.__file__

    def hook(frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_filename == module_file and \
                code.co_flags & inspect.CO_COROUTINE:
            resumed[code.co_name] += 1

    async def scenario():
        task = asyncio.ensure_future(broker.pop(queue_id=queue_id, max_nums=1))
        await held.made(1)
        real, waiter = held.puts[0]
        stored = await real
        sys.setprofile(hook)
        try:
            waiter.set_result(stored)
            return await task
        finally:
            sys.setprofile(None)
    response = asyncio.run(scenario())
    assert pop.parse_msg_offset_info(response.ext_fields["msgOffsetInfo"]) == {"0@0": [0]}
    assert resumed == {"run_pop": 1}
