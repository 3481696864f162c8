# Bodies of the revive log's records: check-points, acks and batch acks (Java store/pop).
"""The JSON bodies of the records POP writes to ``rmq_sys_REVIVE_LOG_<cluster>``.

A **check-point** (tag ``ck``, Java ``PopCheckPoint``) names the messages one POP handed out of
one queue: ``so`` start offset, ``d`` each message's offset minus ``so``, ``n`` how many,
``pt`` pop time and ``it`` invisible time (ms; revive time = pt + it), ``t``/``c``/``q``/``bn``
topic, group, queue and broker. An **ack** (tag ``ack``, ``AckMsg``) marks one of them
acknowledged (``ao``); a **batch ack** (tag ``bAck``, ``BatchAckMsg``) several (``aol``). They
find their check-point by the *merge key* topic + group + queue + start offset + pop time +
broker name.

Encoded byte for byte as Java's fastjson writes them (fields sorted by name, nulls left out, the
check-point's ``reviveTime`` getter included); decoded leniently, with the long field names
fastjson also accepts for acks. Checked against Java-written bodies in tests/unit/store/.
"""
import dataclasses
from typing import Any

import orjson

from pybroker.protocol import fastjson

__all__ = ["PopCheckPoint", "checkpoint_body", "AckMsg", "BatchAckMsg", "decode_checkpoint",
           "decode_ack", "decode_batch_ack", "merge_key"]

_BODY_SIZE_MAX_BYTES = 64 * 1024
# Java stores ``n`` as a byte and ``bm`` as an int: a check-point names at most 32 messages.
CHECKPOINT_MESSAGES_MAX = 32


def merge_key(topic: str, group: str, queue_id: int, start_offset: int, pop_time: int,
              broker_name: str | None) -> str:
    """How an ack finds its check-point (Java's concatenation, ``null`` for no broker name)."""
    return f"{topic}{group}{queue_id}{start_offset}{pop_time}" \
           f"{'null' if broker_name is None else broker_name}"


@dataclasses.dataclass
class PopCheckPoint:
    """One check-point (see the module docstring); ``revive_offset`` is where it was read from
    the revive queue (set by the reader, 0 when written)."""
    topic: str
    cid: str
    queue_id: int
    start_offset: int
    pop_time: int
    invisible_time: int
    num: int = 0
    bit_map: int = 0
    queue_offset_diff: list[int] | None = None
    broker_name: str | None = None
    revive_offset: int = 0
    re_put_times: str | None = None

    @property
    def revive_time(self) -> int:
        """When its unacknowledged messages come back (ms)."""
        return self.pop_time + self.invisible_time

    @property
    def key(self) -> str:
        """Its merge key."""
        return merge_key(self.topic, self.cid, self.queue_id, self.start_offset, self.pop_time,
                         self.broker_name)

    def add_diff(self, diff: int) -> None:
        if self.queue_offset_diff is None:
            self.queue_offset_diff = []
        self.queue_offset_diff.append(diff)

    def index_of_ack(self, ack_offset: int) -> int:
        """The message index ``ack_offset`` names, or -1 (Java indexOfAck: without diffs the
        messages are ``so .. so + n - 1``)."""
        if ack_offset < self.start_offset:
            return -1
        delta = ack_offset - self.start_offset
        if not self.queue_offset_diff:
            return delta if delta < self.num else -1
        try:
            return self.queue_offset_diff.index(delta)
        except ValueError:
            return -1

    def ack_offset_by_index(self, index: int) -> int:
        """The queue offset of message ``index``."""
        if not self.queue_offset_diff:
            return self.start_offset + index
        return self.start_offset + self.queue_offset_diff[index]

    def is_acked(self, index: int) -> bool:
        return bool(self.bit_map >> index & 1)

    def mark_acked(self, index: int) -> None:
        self.bit_map |= 1 << index

    def re_put_count(self) -> int:
        """Times it was re-written after a failed revive (Java parseRePutTimes: 127 when
        unreadable)."""
        if self.re_put_times is None:
            return 0
        try:
            return int(self.re_put_times)
        except ValueError:
            return 127

    def encode(self) -> bytes:
        """The body as Java's fastjson writes it."""
        return checkpoint_body(self.topic, self.cid, self.queue_id, self.start_offset,
                               self.pop_time, self.invisible_time, self.num,
                               self.queue_offset_diff, self.broker_name, self.bit_map,
                               self.revive_offset, self.re_put_times)


def checkpoint_body(topic: str, cid: str, queue_id: int, start_offset: int, pop_time: int,
                    invisible_time: int, num: int, queue_offset_diff: list[int] | None,
                    broker_name: str | None, bit_map: int = 0, revive_offset: int = 0,
                    re_put_times: str | None = None) -> bytes:
    """The body of a check-point of these fields (:class:`PopCheckPoint`'s) as Java's fastjson
    writes it: fields by name, nulls left out, ``reviveTime`` (its getter) included. A POP
    writes its check-points from the fields without making the object."""
    fields: dict[str, Any] = {"bm": _int32(bit_map) if bit_map else 0}
    if broker_name is not None:
        fields["bn"] = broker_name
    fields["c"] = cid
    if queue_offset_diff is not None:
        fields["d"] = queue_offset_diff
    fields["it"] = invisible_time
    fields["n"] = num
    fields["pt"] = pop_time
    fields["q"] = queue_id
    fields["reviveTime"] = pop_time + invisible_time
    fields["ro"] = revive_offset
    if re_put_times is not None:
        fields["rp"] = re_put_times
    fields["so"] = start_offset
    fields["t"] = topic
    return orjson.dumps(fields)


@dataclasses.dataclass
class AckMsg:
    """One acknowledged message of a check-point (``ack_offset``: its queue offset)."""
    topic: str
    consumer_group: str
    queue_id: int
    start_offset: int
    pop_time: int
    ack_offset: int
    broker_name: str | None = None

    def key(self, default_broker_name: str) -> str:
        """The merge key of its check-point (a missing broker name is this broker's, as in
        Java's revive)."""
        return merge_key(self.topic, self.consumer_group, self.queue_id, self.start_offset,
                         self.pop_time, self.broker_name or default_broker_name)

    def encode(self) -> bytes:
        """The body as Java's fastjson writes it."""
        fields: dict[str, Any] = {"ao": self.ack_offset}
        if self.broker_name is not None:
            fields["bn"] = self.broker_name
        fields.update({"c": self.consumer_group, "pt": self.pop_time, "q": self.queue_id,
                       "so": self.start_offset, "t": self.topic})
        return orjson.dumps(fields)


@dataclasses.dataclass
class BatchAckMsg(AckMsg):
    """Several acknowledged messages of one check-point (``ack_offsets``); Java writes
    ``ao`` -1 for it."""
    ack_offsets: list[int] = dataclasses.field(default_factory=list)

    def encode(self) -> bytes:
        fields: dict[str, Any] = {"ao": self.ack_offset, "aol": self.ack_offsets}
        if self.broker_name is not None:
            fields["bn"] = self.broker_name
        fields.update({"c": self.consumer_group, "pt": self.pop_time, "q": self.queue_id,
                       "so": self.start_offset, "t": self.topic})
        return orjson.dumps(fields)


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _load(body) -> dict:
    value = fastjson.loads(body, size_max_bytes=_BODY_SIZE_MAX_BYTES)
    if not isinstance(value, dict):
        raise ValueError("a revive log body must be a JSON object")
    return value


def _field(value: dict, names: tuple[str, ...], kind: type, default: Any = None) -> Any:
    for name in names:
        if name in value and value[name] is not None:
            found = value[name]
            if kind is int:
                if isinstance(found, bool) or not isinstance(found, (int, str)):
                    raise ValueError(f"{name} is not a number")
                return int(found)
            if not isinstance(found, str):
                raise ValueError(f"{name} is not a string")
            return found
    if default is None and kind is int:
        return 0
    return default


def decode_checkpoint(body) -> PopCheckPoint:
    """A check-point body; ValueError when it is not one (also without topic or group, which
    Java's revive skips). The reader sets ``revive_offset``."""
    value = _load(body)
    diff = value.get("d")
    if diff is not None and (not isinstance(diff, list) or
                             not all(isinstance(item, int) for item in diff)):
        raise ValueError("d is not a list of numbers")
    num = _field(value, ("n",), int)
    if not 0 <= num <= CHECKPOINT_MESSAGES_MAX:
        raise ValueError(f"n {num} out of range")
    topic, cid = _field(value, ("t",), str, None), _field(value, ("c",), str, None)
    if topic is None or cid is None:
        # Java's revive skips such a check-point.
        raise ValueError("a check-point without topic or group")
    return PopCheckPoint(
        topic=topic, cid=cid,
        queue_id=_field(value, ("q",), int), start_offset=_field(value, ("so",), int),
        pop_time=_field(value, ("pt",), int), invisible_time=_field(value, ("it",), int),
        num=num, bit_map=_field(value, ("bm",), int) & 0xFFFFFFFF, queue_offset_diff=diff,
        broker_name=_field(value, ("bn",), str, None), revive_offset=0,
        re_put_times=_field(value, ("rp",), str, None))


def _ack_fields(value: dict) -> dict[str, Any]:
    return {"topic": _field(value, ("t", "topic"), str, None),
            "consumer_group": _field(value, ("c", "consumerGroup"), str, None),
            "queue_id": _field(value, ("q", "queueId"), int),
            "start_offset": _field(value, ("so", "startOffset"), int),
            "pop_time": _field(value, ("pt", "popTime"), int),
            "ack_offset": _field(value, ("ao", "ackOffset"), int),
            "broker_name": _field(value, ("bn", "brokerName"), str, None)}


def decode_ack(body) -> AckMsg:
    """An ack body; ValueError when it is not one."""
    fields = _ack_fields(_load(body))
    if fields["topic"] is None or fields["consumer_group"] is None:
        raise ValueError("an ack without topic or group")
    return AckMsg(**fields)


def decode_batch_ack(body) -> BatchAckMsg:
    """A batch ack body; ValueError when it is not one."""
    value = _load(body)
    offsets = value.get("aol", value.get("ackOffsetList")) or []
    if not isinstance(offsets, list) or not all(isinstance(item, int) for item in offsets):
        raise ValueError("aol is not a list of numbers")
    fields = _ack_fields(value)
    if fields["topic"] is None or fields["consumer_group"] is None:
        raise ValueError("a batch ack without topic or group")
    return BatchAckMsg(**fields, ack_offsets=offsets)
