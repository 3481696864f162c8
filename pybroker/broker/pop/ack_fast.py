# What the ACK_MESSAGE fast path may take on its own, its answer, and its end (the handler's).
"""The Python side of the ACK_MESSAGE fast path (docs/architecture/pop.md, "ACK_MESSAGE on the
frame-taker path").

:mod:`pybroker._fast.pop.ack_take` takes an ACK_MESSAGE without the handler
(:mod:`pybroker.broker.pop.ack`) only when the handler would write exactly the record C writes
and answer SUCCESS. This module states the rest of that contract, derived from the handler:

* :func:`queue_lookup` - the handler's checks before the put, in its order: the topic is known
  (else TOPIC_NOT_EXIST), the queue id in its readQueueNums (else MESSAGE_ILLEGAL), the offset in
  the queue's bounds (else NO_MESSAGE), with the queue's POP slot known to this worker (a miss
  is the handler's, which asks the metadata service); the same calls as the handler's;
* :func:`answer_pieces` - the answer, SUCCESS with no fields whatever the put's outcome (as
  Java), cut from the same ``create_response`` and encoder as the handler's answer;
* :func:`ack_end` - the end of each ack taken, from its put's outcome to its answer
  (``ack_take.AckEnd``, C): counted as ``Recorder.pop_ack`` counts it when stored, else by
  the handler's ``ack.ack_put`` (counted and logged); taken out of the in-flight count by
  ``PopTable.take_acked``; answered; the request counted as proc/remoting.py counts a
  handled one.
"""
from collections.abc import Callable
from typing import Protocol

from pybroker._fast.pop.ack_take import AckEnd
from pybroker.broker.pop import ack as ack_handler
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response, encode_json_header
from pybroker.store.status import STORED_STATUSES

__all__ = ["queue_lookup", "answer_pieces", "ack_end", "AnswerQueue", "STORED"]

_OPAQUE = 2_000_000_001
# The outcomes whose record is stored (PutStatus.stored), for the C end of an ack: a tuple,
# found by identity (a set would call the enum's Python __hash__ per ack).
STORED = STORED_STATUSES


def queue_lookup(ctx) -> Callable[[str, str, int, int], int]:
    """``lookup(topic, group, queue_id, queue_offset)`` for ``AckTaker``: the POP slot of the
    queue when the handler's checks pass, else -1 (the handler answers)."""
    def lookup(topic: str, group: str, queue_id: int, queue_offset: int) -> int:
        try:
            topic_config = ctx.metadata.topic_config(topic)
            if topic_config is None or not 0 <= queue_id < topic_config.read_queue_nums:
                return -1
            if ctx.store.offset_outside_queue(topic, queue_id, queue_offset) is not None:
                return -1
        except Exception:   # the handler makes the same calls and answers as it does
            return -1
        slot = ctx.pop.slots.cached((topic, group, queue_id))       # SlotKey's hash and equality
        return -1 if slot is None else slot
    return lookup


def answer_pieces() -> tuple[bytes, bytes]:
    """The handler's SUCCESS answer header around its opaque: ``(before, after)``."""
    header = encode_json_header(create_response(
        RemotingCommand(RequestCode.ACK_MESSAGE, opaque=_OPAQUE), ResponseCode.SUCCESS))
    marker = str(_OPAQUE).encode()
    if header.count(marker) != 1:
        raise ValueError(f"the ack answer's opaque marker is not unique in {header!r}")
    before, _, after = header.partition(marker)
    return before, after


class AnswerQueue(Protocol):
    """Where a FastAck's answer goes (proc/ack_port.py FastAckPort: written per batch)."""

    def answer(self, connection: object, frame: bytes) -> None:
        """Queue ``frame`` for ``connection``."""


def ack_end(ctx, answers: AnswerQueue):
    """The worker's :class:`~pybroker._fast.pop.ack_take.AckEnd`: the end of its fast acks,
    with the handler's own ``ack.ack_put`` for what C does not count (a put not stored, the
    POP log on) and its answer cut from the handler's encoder."""
    return AckEnd(ctx, answers, answer_pieces(), ack_handler.ack_put, STORED,
                  int(RequestCode.ACK_MESSAGE), int(ResponseCode.SUCCESS))
