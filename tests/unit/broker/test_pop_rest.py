"""Goal: a POP whose queues the table finds plain (PopTable.take_plain: no offset set by the
metadata service waiting, the pop offset set, the in-flight count within the threshold) answers,
counts restNum, retries and leaves the POP table exactly as the POP's own rules do queue by queue
(the steps every queue took before take_plain: lock, pending offset, threshold, pop offset or
initial offset). Method: two one-process brokers (tests/unit/broker/pop_harness.py) given the
same seeded history (sends to random queues, POPs of every queue and of one queue with small
batches, offsets reset or committed by the metadata service, in-flight counts around the
threshold, queues locked by another process, acks); in one, take_plain is made to find no queue
plain, so every queue goes through the rules; answers (code, header, body), the run's restNum and
retry time, and every slot's words compared after each POP. And a full run whose visit of a
queue raises leaves no queue locked.
"""
import asyncio
import importlib.util
import pathlib
import random

import pytest

from pybroker.broker.pop import pop_message
from pybroker.store.config_docs import SubscriptionGroupConfig
from pybroker.store.pop_table import LOCKED_ELSEWHERE, NOT_PLAIN

_spec = importlib.util.spec_from_file_location(
    "pop_harness", pathlib.Path(__file__).with_name("pop_harness.py"))
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)
QUEUES = 8
OTHER_TAG = 77


def _broker(path, threshold: bool):
    overrides = {"autoCreateSubscriptionGroup": "false", "popFromRetryProbability": "0"}
    if threshold:
        overrides.update(enablePopMessageThreshold="true", popInflightMessageThreshold="3")
    broker = harness.PopBroker(path, overrides, queues=QUEUES)
    broker.metadata.groups.update_subscription_group(SubscriptionGroupConfig(harness.GROUP))
    return broker


def _by_rules(table) -> None:
    """take_plain finding no queue plain: each goes through the POP's rules under its lock."""
    def take_plain(slots, tag, in_flight_max, release):
        return [NOT_PLAIN if table.try_lock(slot, tag) else LOCKED_ELSEWHERE for slot in slots]
    table.take_plain = take_plain


def _slot_words(broker) -> bytes:
    table = broker.table
    return b"".join(bytes(table._words()[table._base(slot):table._base(slot) + 128])
                    for slot in range(16))


def _record_runs(monkeypatch) -> dict:
    """``["runs"]``: (restNum, retry time) of every run answered, in order."""
    seen = {"runs": []}
    answer = pop_message._answer

    def recording(ctx, channel, request, header, run, held_slot):
        seen["runs"].append((run.rest_num, run.retry_at_ms))
        return answer(ctx, channel, request, header, run, held_slot)
    monkeypatch.setattr(pop_message, "_answer", recording)
    return seen


async def _history(broker, seed: int) -> list:
    rng = random.Random(seed)
    random.seed(seed)               # the run's first queue (_PopRun.random_q)
    answers, popped = [], []
    table = broker.table
    for step in range(30):
        for _ in range(rng.randrange(4)):
            await broker.asend(f"m{step}".encode(), rng.randrange(QUEUES))
        known = [slot for slot in range(16) if table.assigned(slot)]
        for slot in known:
            roll = rng.random()
            if roll < 0.1:
                table.set_offset(slot, rng.randrange(6), rng.random() < 0.5)
            elif roll < 0.2 and table.try_lock(slot, OTHER_TAG):
                broker.clock.advance(1)
            elif roll < 0.3 and table._load(slot, 8) == OTHER_TAG:
                table.unlock(slot, OTHER_TAG)
        if popped and rng.random() < 0.4:
            for message in rng.sample(popped, rng.randrange(1, len(popped) + 1)):
                await broker.ack(message)
                popped.remove(message)
        queue_id = -1 if rng.random() < 0.8 else rng.randrange(QUEUES)
        response = await broker.pop(queue_id=queue_id, max_nums=rng.randrange(1, 4))
        answers.append((response.code, response.remark, response.ext_fields,
                        bytes(response.body or b""), _slot_words(broker)))
        popped += harness.popped(response)
        broker.clock.advance(rng.randrange(50))
    return answers


@pytest.mark.parametrize("seed", range(6))
def test_plain_queues_count_and_answer_as_the_rules_do(tmp_path, monkeypatch, seed):
    threshold = seed % 2 == 1
    plain, ruled = _broker(tmp_path / "plain", threshold), _broker(tmp_path / "ruled", threshold)
    seen = _record_runs(monkeypatch)
    try:
        _by_rules(ruled.table)
        plain_answers = asyncio.run(_history(plain, seed))
        plain_runs, seen["runs"] = seen["runs"], []
        ruled_answers = asyncio.run(_history(ruled, seed))
        ruled_runs = seen["runs"]
    finally:
        plain.close()
        ruled.close()
    assert sum(1 for code, *_ in plain_answers if code == 0) > 5      # messages handed out
    assert any(rest for rest, _ in plain_runs) and any(at for _, at in plain_runs)
    assert plain_runs == ruled_runs
    assert plain_answers == ruled_answers


def test_an_error_in_a_full_run_leaves_no_queue_locked(tmp_path, monkeypatch):
    """A full run's visit that raises (here the rules of the first queue take_plain left
    locked) ends the POP with that error, and no queue stays locked: those not visited yet
    give back the locks take_plain took for them."""
    broker = _broker(tmp_path, False)
    try:
        for queue_id in range(QUEUES):
            broker.send(b"m", queue_id)

        def failing(self, now_ms, max_offset=None, offset=None):
            if max_offset is not None:          # a queue the full run does not read
                raise OSError("store read failed")
            return prepare(self, now_ms, max_offset, offset)
        prepare = pop_message._QueuePop._prepare
        monkeypatch.setattr(pop_message._QueuePop, "_prepare", failing)
        with pytest.raises(OSError):
            asyncio.run(broker.pop(queue_id=-1, max_nums=1))   # every pop offset unset
        table = broker.table
        slots = [slot for slot in range(16) if table.assigned(slot)]
        assert len(slots) == QUEUES
        assert [table._load(slot, 8) for slot in slots] == [0] * QUEUES     # the lock word
    finally:
        broker.close()
