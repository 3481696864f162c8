# JSON bodies of the 5.x POP codes: BATCH_ACK_MESSAGE's acks and QUERY_ASSIGNMENT's question/answer.
"""Bodies of BATCH_ACK_MESSAGE (200151) and QUERY_ASSIGNMENT (400), as Java's fastjson writes them.

A **batch ack** (``BatchAck``) acknowledges several messages of one popped queue: ``so`` the
check-point's start offset and ``b`` a bit set of acknowledged offsets relative to it, written as
Java's ``BitSet.toByteArray()`` (little-endian bytes) in base64. ``r`` is the retry flag of the
topic popped (``"0"``/``"1"``/``"2"``), ``rq`` the revive queue, ``pt``/``it`` pop and invisible
time. Decoding raises ValueError for what fastjson would not bind.
"""
import base64
import binascii
import dataclasses
from typing import Any

import orjson

from pybroker.protocol import fastjson
from pybroker.protocol.bodies import MessageQueue, message_queue_from_json, message_queue_to_json

__all__ = ["BatchAck", "encode_batch_ack_body", "decode_batch_ack_body",
           "QueryAssignmentRequest", "encode_query_assignment_request",
           "decode_query_assignment_request", "QueueAssignment",
           "encode_query_assignment_response", "decode_query_assignment_response"]

_BODY_SIZE_MAX_BYTES = 16 * 1024 * 1024
_BIT_SET_BITS_MAX = 1 << 20      # offsets one batch ack may name relative to its start


@dataclasses.dataclass
class BatchAck:
    """One queue's acks of one POP (see the module docstring)."""
    consumer_group: str
    topic: str
    retry: str
    start_offset: int
    queue_id: int
    revive_queue_id: int
    pop_time: int
    invisible_time: int
    bits: list[int]            # indexes set in the bit set, ascending

    def to_json(self) -> dict[str, Any]:
        return {"b": _encode_bits(self.bits), "c": self.consumer_group,
                "it": self.invisible_time, "pt": self.pop_time, "q": self.queue_id,
                "r": self.retry, "rq": self.revive_queue_id, "so": self.start_offset,
                "t": self.topic}


def _encode_bits(bits: list[int]) -> str:
    size = (max(bits) // 8 + 1) if bits else 0
    data = bytearray(size)
    for bit in bits:
        data[bit // 8] |= 1 << (bit % 8)
    return base64.b64encode(bytes(data)).decode("ascii")


def _decode_bits(text: Any) -> list[int]:
    if text is None:
        return []
    if isinstance(text, list):        # fastjson also binds a JSON array of byte values
        raw = bytes(item & 0xFF for item in text if isinstance(item, int))
    elif isinstance(text, str):
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("b is not base64") from None
    else:
        raise ValueError("b is not a byte array")
    if len(raw) * 8 > _BIT_SET_BITS_MAX:
        raise ValueError(f"b names more than {_BIT_SET_BITS_MAX} offsets")
    return [index * 8 + bit for index, byte in enumerate(raw) for bit in range(8)
            if byte >> bit & 1]


def _get(value: dict, short: str, long: str) -> Any:
    return value[short] if short in value else value.get(long)


def _int(value: Any, name: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{name} is not a number")
    return int(value)


def _str(value: Any, name: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{name} is not a string")


def _batch_ack(value: Any) -> BatchAck:
    if not isinstance(value, dict):
        raise ValueError("an ack must be an object")
    return BatchAck(
        consumer_group=_str(_get(value, "c", "consumerGroup"), "c") or "",
        topic=_str(_get(value, "t", "topic"), "t") or "",
        retry=_str(_get(value, "r", "retry"), "r") or "",
        start_offset=_int(_get(value, "so", "startOffset"), "so"),
        queue_id=_int(_get(value, "q", "queueId"), "q"),
        revive_queue_id=_int(_get(value, "rq", "reviveQueueId"), "rq"),
        pop_time=_int(_get(value, "pt", "popTime"), "pt"),
        invisible_time=_int(_get(value, "it", "invisibleTime"), "it"),
        bits=_decode_bits(_get(value, "b", "bitSet")))


def encode_batch_ack_body(broker_name: str | None, acks: list[BatchAck]) -> bytes:
    """A BatchAckMessageRequestBody."""
    value: dict[str, Any] = {"acks": [ack.to_json() for ack in acks]}
    if broker_name is not None:
        value["brokerName"] = broker_name
    return orjson.dumps(value)


def decode_batch_ack_body(data) -> tuple[str | None, list[BatchAck] | None]:
    """(brokerName, acks or None when absent) of a BatchAckMessageRequestBody."""
    value = fastjson.loads(data, size_max_bytes=_BODY_SIZE_MAX_BYTES)
    if not isinstance(value, dict):
        raise ValueError("a batch ack body must be an object")
    acks = value.get("acks")
    if acks is not None and not isinstance(acks, list):
        raise ValueError("acks must be a list")
    return (_str(value.get("brokerName"), "brokerName"),
            None if acks is None else [_batch_ack(item) for item in acks])


# --- QUERY_ASSIGNMENT ----------------------------------------------------------------------------

@dataclasses.dataclass
class QueryAssignmentRequest:
    topic: str
    consumer_group: str
    client_id: str
    strategy_name: str
    message_model: str        # CLUSTERING or BROADCASTING


def encode_query_assignment_request(request: QueryAssignmentRequest) -> bytes:
    return orjson.dumps({"clientId": request.client_id,
                         "consumerGroup": request.consumer_group,
                         "messageModel": request.message_model,
                         "strategyName": request.strategy_name, "topic": request.topic})


def decode_query_assignment_request(data) -> QueryAssignmentRequest:
    value = fastjson.loads(data, size_max_bytes=_BODY_SIZE_MAX_BYTES)
    if not isinstance(value, dict):
        raise ValueError("a QueryAssignmentRequestBody must be an object")
    model = value.get("messageModel")
    if isinstance(model, int) and not isinstance(model, bool):
        model = ("BROADCASTING", "CLUSTERING")[model] if model in (0, 1) else None
    return QueryAssignmentRequest(
        topic=_str(value.get("topic"), "topic") or "",
        consumer_group=_str(value.get("consumerGroup"), "consumerGroup") or "",
        client_id=_str(value.get("clientId"), "clientId") or "",
        strategy_name=_str(value.get("strategyName"), "strategyName") or "",
        message_model=_str(model, "messageModel") or "")


@dataclasses.dataclass(frozen=True)
class QueueAssignment:
    """A MessageQueueAssignment: a queue (queue id -1: every queue, POP) and its mode."""
    queue: MessageQueue
    mode: str                  # PULL or POP


def encode_query_assignment_response(assignments: list[QueueAssignment] | None) -> bytes:
    """A QueryAssignmentResponseBody; None leaves the set out (Java: no assignment)."""
    if assignments is None:
        return b"{}"
    return orjson.dumps({"messageQueueAssignments": [
        {"messageQueue": message_queue_to_json(item.queue), "mode": item.mode}
        for item in assignments]})


def decode_query_assignment_response(data) -> list[QueueAssignment] | None:
    value = fastjson.loads(data, size_max_bytes=_BODY_SIZE_MAX_BYTES)
    if not isinstance(value, dict):
        raise ValueError("a QueryAssignmentResponseBody must be an object")
    items = value.get("messageQueueAssignments")
    if items is None:
        return None
    if not isinstance(items, list):
        raise ValueError("messageQueueAssignments must be a list")
    result = []
    for item in items:
        if not isinstance(item, dict):
            raise ValueError("an assignment must be an object")
        queue = message_queue_from_json(item.get("messageQueue"), "messageQueue")
        result.append(QueueAssignment(queue, _str(item.get("mode"), "mode") or "PULL"))
    return result
