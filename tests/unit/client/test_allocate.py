"""Allocation strategies split a topic's queues among a group's clients exactly once each.

Method: for many seeded random (queue count, client count) shapes, run each strategy once per
client and check the union is every queue, the parts are disjoint, and the sizes are as even as
the strategy promises; compare the average strategy with a plain-Python oracle written from its
definition (contiguous blocks, the first ``queues % clients`` clients get one more).
"""
import pytest

from pybroker.client.rebalance import (AllocateConsistentHash, allocate_average,
                                       allocate_average_by_circle)
from pybroker.protocol.bodies import MessageQueue

STRATEGIES = [allocate_average, allocate_average_by_circle, AllocateConsistentHash(),
              AllocateConsistentHash(3)]


def _queues(count: int, brokers: int = 2) -> list[MessageQueue]:
    return [MessageQueue("T", f"broker-{i % brokers}", i // brokers) for i in range(count)]


def _average_oracle(queues, client_ids, client_id):
    queues = sorted(queues, key=lambda q: (q.topic, q.broker_name, q.queue_id))
    client_ids = sorted(client_ids)
    n, c = len(queues), len(client_ids)
    parts, start = [], 0
    for index in range(c):
        size = n // c + (1 if index < n % c else 0)
        parts.append(queues[start:start + size])
        start += size
    return parts[client_ids.index(client_id)]


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: getattr(s, "__name__", "hash"))
def test_every_queue_goes_to_exactly_one_client(strategy, rand):
    for _ in range(200):
        queues = _queues(rand.randrange(0, 40), rand.randrange(1, 4))
        client_ids = [f"10.0.0.{i}@{rand.randrange(1 << 20)}" for i in range(rand.randrange(1, 9))]
        shuffled = list(queues)
        rand.shuffle(shuffled)
        parts = [strategy("G", cid, shuffled, client_ids) for cid in client_ids]
        flat = [q for part in parts for q in part]
        assert sorted(flat, key=str) == sorted(queues, key=str)
        assert len(set(flat)) == len(flat)


@pytest.mark.parametrize("strategy", [allocate_average, allocate_average_by_circle])
def test_even_strategies_are_balanced(strategy, rand):
    for _ in range(200):
        queues = _queues(rand.randrange(1, 50))
        client_ids = [f"c{i}" for i in range(rand.randrange(1, 12))]
        sizes = [len(strategy("G", cid, queues, client_ids)) for cid in client_ids]
        assert max(sizes) - min(sizes) <= 1


def test_average_matches_its_definition(rand):
    for _ in range(300):
        queues = _queues(rand.randrange(0, 33), rand.randrange(1, 3))
        client_ids = [f"c{rand.randrange(1000)}" for _ in range(rand.randrange(1, 9))]
        client_ids = sorted(set(client_ids))
        for cid in client_ids:
            assert allocate_average("G", cid, queues, client_ids) == \
                _average_oracle(queues, client_ids, cid)


def test_average_known_split():
    queues = _queues(8, 1)
    ids = ["a", "b", "c"]
    got = [[q.queue_id for q in allocate_average("G", cid, queues, ids)] for cid in ids]
    assert got == [[0, 1, 2], [3, 4, 5], [6, 7]]
    got = [[q.queue_id for q in allocate_average_by_circle("G", cid, queues, ids)] for cid in ids]
    assert got == [[0, 3, 6], [1, 4, 7], [2, 5]]


def test_unknown_client_gets_nothing_and_empty_id_is_refused():
    queues = _queues(4)
    for strategy in STRATEGIES:
        assert strategy("G", "stranger", queues, ["a", "b"]) == []
        with pytest.raises(ValueError):
            strategy("G", "", queues, ["a"])


def test_consistent_hash_moves_few_queues_when_a_client_joins():
    queues = _queues(64, 2)
    strategy = AllocateConsistentHash()
    before_ids = [f"client-{i}" for i in range(4)]
    after_ids = before_ids + ["client-new"]
    before = {q: cid for cid in before_ids for q in strategy("G", cid, queues, before_ids)}
    after = {q: cid for cid in after_ids for q in strategy("G", cid, queues, after_ids)}
    moved = [q for q in queues if before[q] != after[q]]
    # Only queues taken by the newcomer move; nothing shuffles among the old clients.
    assert all(after[q] == "client-new" for q in moved)
    assert len(moved) < len(queues) // 2
    with pytest.raises(ValueError):
        AllocateConsistentHash(0)
