# Client-side topic routes: publish/subscribe queues, queue selectors, broker fault avoidance.
"""What a client derives from a topic's TopicRouteData (protocol.md §7.1).

* :class:`TopicPublishInfo` - writable queues of brokers that have a master, in route order,
  with a round-robin cursor; :meth:`TopicPublishInfo.select_queue` skips the last failed broker
  and brokers the :class:`LatencyFaultTolerance` keeps isolated.
* :func:`subscribe_queues` - readable queues of a route.
* Selectors for ordered sends: :class:`SelectByHash`, :class:`SelectRoundRobin`,
  :class:`SelectManual` (any callable ``(queues, message, arg) -> MessageQueue`` works).
"""
import itertools
import time
from typing import Any, Callable, Optional, Sequence

from pybroker._fast.jhash import java_hash
from pybroker.protocol.bodies import MessageQueue, TopicRouteData
from pybroker.protocol.constants import Perm

MASTER_ID = 0
# Send latency (ms) at or above each step isolates the broker for the paired duration (ms);
# RocketMQ's default latency-fault table.
LATENCY_STEPS_MS = (50, 100, 550, 1000, 2000, 3000, 15000)
ISOLATION_STEPS_MS = (0, 0, 30000, 60000, 120000, 180000, 600000)
assert len(LATENCY_STEPS_MS) == len(ISOLATION_STEPS_MS)
# A broker that failed outright counts as this slow.
FAILED_SEND_LATENCY_MS = 30000

Selector = Callable[[Sequence[MessageQueue], Any, Any], MessageQueue]


def _now_ms() -> float:
    return time.monotonic() * 1000


def master_address(route: TopicRouteData, broker_name: str) -> Optional[str]:
    """The master (brokerId 0) address of ``broker_name`` in ``route``, or None."""
    for broker in route.broker_datas:
        if broker.broker_name == broker_name:
            return broker.broker_addrs.get(MASTER_ID)
    return None


def publish_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """Writable queues of ``topic``: brokers with write permission and a live master."""
    queues = []
    for queue_data in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if not queue_data.perm & Perm.WRITE:
            continue
        if master_address(route, queue_data.broker_name) is None:
            continue
        queues += [MessageQueue(topic, queue_data.broker_name, queue_id)
                   for queue_id in range(queue_data.write_queue_nums)]
    return queues


def subscribe_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """Readable queues of ``topic`` (brokers with read permission)."""
    queues = []
    for queue_data in route.queue_datas:
        if queue_data.perm & Perm.READ:
            queues += [MessageQueue(topic, queue_data.broker_name, queue_id)
                       for queue_id in range(queue_data.read_queue_nums)]
    return sorted(queues, key=_queue_sort_key)


def _queue_sort_key(queue: MessageQueue) -> tuple:
    # RocketMQ's MessageQueue order: topic, broker name, queue id.
    return (queue.topic, queue.broker_name, queue.queue_id)


def sort_queues(queues) -> list[MessageQueue]:
    """Queues in RocketMQ's order (topic, broker name, queue id)."""
    return sorted(queues, key=_queue_sort_key)


class LatencyFaultTolerance:
    """Per-broker isolation after slow or failed sends (send latency fault avoidance).

    :meth:`update` records a send's latency in ms; a latency at or above a step in
    :data:`LATENCY_STEPS_MS` keeps the broker out of rotation for the paired duration.
    """

    def __init__(self) -> None:
        self._available_at_ms: dict[str, float] = {}

    def update(self, broker_name: str, latency_ms: float, failed: bool = False) -> None:
        """Record one send to ``broker_name`` taking ``latency_ms`` (``failed``: no answer)."""
        if failed:
            latency_ms = max(latency_ms, FAILED_SEND_LATENCY_MS)
        isolation_ms = 0
        for step_ms, duration_ms in zip(LATENCY_STEPS_MS, ISOLATION_STEPS_MS, strict=True):
            if latency_ms >= step_ms:
                isolation_ms = duration_ms
        if isolation_ms:
            self._available_at_ms[broker_name] = _now_ms() + isolation_ms
        else:
            self._available_at_ms.pop(broker_name, None)

    def is_available(self, broker_name: str) -> bool:
        """True unless ``broker_name`` is isolated right now."""
        available_at_ms = self._available_at_ms.get(broker_name)
        return available_at_ms is None or _now_ms() >= available_at_ms

    def least_bad(self) -> Optional[str]:
        """The isolated broker that becomes available first, or None when none is isolated."""
        if not self._available_at_ms:
            return None
        return min(self._available_at_ms, key=self._available_at_ms.__getitem__)


class TopicPublishInfo:
    """Where a topic can be written: its route and writable queues, with a rotating cursor."""

    def __init__(self, topic: str, route: TopicRouteData):
        self.topic = topic
        self.route = route
        self.message_queues = publish_queues(topic, route)
        self._cursor = itertools.count()

    @property
    def ok(self) -> bool:
        """True when at least one queue is writable."""
        return bool(self.message_queues)

    def select_queue(self, last_broker_name: Optional[str] = None,
                     faults: Optional[LatencyFaultTolerance] = None) -> MessageQueue:
        """The next queue round-robin, avoiding ``last_broker_name`` and isolated brokers.

        Falls back to any queue when every broker is excluded. IndexError when there are no
        queues at all.
        """
        queues = self.message_queues
        if not queues:
            raise IndexError(f"topic {self.topic} has no writable queue")
        start = next(self._cursor)
        for step in range(len(queues)):
            queue = queues[(start + step) % len(queues)]
            if queue.broker_name == last_broker_name:
                continue
            if faults is not None and not faults.is_available(queue.broker_name):
                continue
            return queue
        return queues[start % len(queues)]


class SelectByHash:
    """Pick ``queues[|hash(arg)| % len]``: Java's String.hashCode for str, the value for int.

    Stable across processes and languages, so one key always lands on one queue (ordered
    messages per key).
    """

    def __call__(self, queues: Sequence[MessageQueue], message: Any, arg: Any) -> MessageQueue:
        if isinstance(arg, str):
            code = java_hash(arg)
        elif isinstance(arg, int):
            code = arg
        else:
            raise TypeError(f"SelectByHash needs a str or int arg, got {type(arg).__name__}")
        return queues[abs(code) % len(queues)]


class SelectRoundRobin:
    """Rotate over the queues, one per call (``arg`` is ignored)."""

    def __init__(self) -> None:
        self._cursor = itertools.count()

    def __call__(self, queues: Sequence[MessageQueue], message: Any, arg: Any) -> MessageQueue:
        return queues[next(self._cursor) % len(queues)]


class SelectManual:
    """``arg`` names the queue: a MessageQueue of the topic, or an index into the queue list."""

    def __call__(self, queues: Sequence[MessageQueue], message: Any, arg: Any) -> MessageQueue:
        if isinstance(arg, MessageQueue):
            if arg not in queues:
                raise ValueError(f"{arg} is not a writable queue of the topic")
            return arg
        if isinstance(arg, int) and not isinstance(arg, bool) and 0 <= arg < len(queues):
            return queues[arg]
        raise ValueError(f"manual queue selection needs a MessageQueue or an index in "
                         f"[0, {len(queues)}), got {arg!r}")
