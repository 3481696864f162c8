# Queue allocation strategies of a consumer group (average, by circle, consistent hash).
"""How a consumer group splits a topic's queues among its clients.

Every client of a group runs the same strategy over the same sorted inputs, so they agree on a
partition without talking to each other: each returns the queues of ``current_client_id``.
Inputs are sorted here (queues by topic, broker name, queue id; client ids as strings), as
RocketMQ does, so mixed Java and Python clients of one group using the same strategy agree.
"""
import bisect
import hashlib
from typing import Callable, Sequence

from pybroker.client.route import sort_queues
from pybroker.protocol.bodies import MessageQueue

Strategy = Callable[[str, str, Sequence[MessageQueue], Sequence[str]], list[MessageQueue]]
CONSISTENT_HASH_VIRTUAL_NODES_DEFAULT = 10


def _checked(current_client_id: str, queues, client_ids) -> tuple[list, list, int]:
    queues = sort_queues(queues)
    client_ids = sorted(set(client_ids))
    if not current_client_id:
        raise ValueError("current client id is empty")
    if current_client_id not in client_ids:
        return queues, client_ids, -1
    return queues, client_ids, client_ids.index(current_client_id)


def allocate_average(consumer_group: str, current_client_id: str,
                     queues: Sequence[MessageQueue], client_ids: Sequence[str]
                     ) -> list[MessageQueue]:
    """Contiguous blocks: the first ``len(queues) % clients`` clients get one extra queue.

    A client not in ``client_ids`` (not yet seen by the broker) gets nothing.
    """
    queues, client_ids, index = _checked(current_client_id, queues, client_ids)
    if index < 0 or not queues:
        return []
    queue_count, client_count = len(queues), len(client_ids)
    remainder = queue_count % client_count
    if queue_count <= client_count:
        block_size = 1
    elif remainder > 0 and index < remainder:
        block_size = queue_count // client_count + 1
    else:
        block_size = queue_count // client_count
    if remainder > 0 and index < remainder:
        start = index * block_size
    else:
        start = index * block_size + remainder
    count = min(block_size, queue_count - start)
    return [queues[(start + step) % queue_count] for step in range(max(count, 0))]


def allocate_average_by_circle(consumer_group: str, current_client_id: str,
                               queues: Sequence[MessageQueue], client_ids: Sequence[str]
                               ) -> list[MessageQueue]:
    """Deal the queues like cards: client i gets queues i, i + n, i + 2n, ..."""
    queues, client_ids, index = _checked(current_client_id, queues, client_ids)
    if index < 0:
        return []
    return queues[index::len(client_ids)]


def _ring_hash(key: str) -> int:
    # First 4 bytes of the key's MD5, big-endian: the hash RocketMQ's consistent-hash ring uses.
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


def _queue_key(queue: MessageQueue) -> str:
    # The text form RocketMQ hashes a queue by (its MessageQueue.toString()).
    return (f"MessageQueue [topic={queue.topic}, brokerName={queue.broker_name}, "
            f"queueId={queue.queue_id}]")


class AllocateConsistentHash:
    """Consistent hashing of queues onto clients, ``virtual_node_count`` points per client.

    Adding or removing one client moves only the queues next to its points on the ring.
    """

    def __init__(self, virtual_node_count: int = CONSISTENT_HASH_VIRTUAL_NODES_DEFAULT):
        if virtual_node_count < 1:
            raise ValueError(f"virtual_node_count must be >= 1, got {virtual_node_count}")
        self.virtual_node_count = virtual_node_count

    def __call__(self, consumer_group: str, current_client_id: str,
                 queues: Sequence[MessageQueue], client_ids: Sequence[str]
                 ) -> list[MessageQueue]:
        queues, client_ids, index = _checked(current_client_id, queues, client_ids)
        if index < 0:
            return []
        ring = sorted((_ring_hash(f"{client_id}-{n}"), client_id) for client_id in client_ids
                      for n in range(self.virtual_node_count))
        points = [point for point, _ in ring]
        owned = []
        for queue in queues:
            slot = bisect.bisect_left(points, _ring_hash(_queue_key(queue)))
            if ring[slot % len(ring)][1] == current_client_id:
                owned.append(queue)
        return owned


STRATEGIES: dict[str, Strategy] = {
    "AVG": allocate_average,
    "AVG_BY_CIRCLE": allocate_average_by_circle,
    "CONSISTENT_HASH": AllocateConsistentHash(),
}
