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
* :func:`answer_pieces` / :func:`answer_frame` - the answer, SUCCESS with no fields whatever
  the put's outcome (as Java), cut from the same ``create_response`` and encoder as the
  handler's answer;
* :class:`FastAck` - one ack taken, from its put to its answer: the put's outcome is counted,
  logged and taken out of the in-flight count by the handler's own functions (``ack.ack_put``,
  ``PopTable.take_acked``), and the request is counted as proc/remoting.py counts a handled one.
"""
from collections.abc import Callable
from typing import Protocol

from pybroker.broker.pop import ack as ack_handler
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response, encode_json_header
from pybroker.store.status import PutStatus

__all__ = ["queue_lookup", "answer_pieces", "answer_frame", "FastAck", "AnswerQueue"]

_OPAQUE = 2_000_000_001
_ANSWERED = (int(RequestCode.ACK_MESSAGE), int(ResponseCode.SUCCESS), False)


def queue_lookup(ctx) -> Callable[[str, str, int, int], int]:
    """``lookup(topic, group, queue_id, queue_offset)`` for ``AckTaker``: the POP slot of the
    queue when the handler's checks pass, else -1 (the handler answers)."""
    def lookup(topic: str, group: str, queue_id: int, queue_offset: int) -> int:
        try:
            topic_config = ctx.metadata.topic_config(topic)
            if topic_config is None or not 0 <= queue_id < topic_config.read_queue_nums:
                return -1
            min_offset, max_offset = ctx.store.get_offset_bounds_in_queue(topic, queue_id)
            if not min_offset <= queue_offset <= max_offset:
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


def answer_frame(pieces: tuple[bytes, bytes], opaque: int) -> bytes:
    """The whole answer frame (JSON header, no body) to the request of ``opaque``."""
    header = b"%s%d%s" % (pieces[0], opaque, pieces[1])
    length = len(header)
    return (length + 4).to_bytes(4, "big") + length.to_bytes(4, "big") + header


class AnswerQueue(Protocol):
    """Where a FastAck's answer goes (proc/ack_port.py FastAckPort: written per batch)."""

    def answer(self, connection: object, frame: bytes) -> None:
        """Queue ``frame`` for ``connection``."""


class FastAck:
    """One ack the fast path put (``AckTaker.take``'s entry) until its outcome: the putter's
    pending put (proc/ring_putter.py FastPut: it calls :meth:`settled`)."""

    __slots__ = ("ctx", "answers", "connection", "pieces", "entry", "token", "started_ns")

    def __init__(self, ctx, answers: "AnswerQueue", connection: object,
                 pieces: tuple[bytes, bytes], entry: tuple, token: int, started_ns: int):
        self.ctx = ctx
        self.answers = answers
        self.connection = connection
        self.pieces = pieces
        self.entry = entry
        self.token = token
        self.started_ns = started_ns

    def settled(self, status: PutStatus) -> None:
        """The put's outcome: the handler's end of an ack (counted, logged, in-flight), then
        its answer and the request's figures."""
        ctx = self.ctx
        _, opaque, topic, group, _, _, slot, pop_time = self.entry
        ack_handler.ack_put(ctx, topic, group, 1, status, self)
        ctx.pop.table.take_acked(slot, pop_time, 1)
        self.answers.answer(self.connection, answer_frame(self.pieces, opaque))
        stats = ctx.stats
        if stats is not None:
            stats.request_finished("ack", self.token,
                                   (stats.now_ns() - self.started_ns) // 1000, _ANSWERED)

    def __str__(self) -> str:
        """What the handler's log lines say of the ack."""
        _, _, topic, group, queue_id, queue_offset, _, pop_time = self.entry
        return (f"AckMsg(topic={topic!r}, consumer_group={group!r}, queue_id={queue_id}, "
                f"pop_time={pop_time}, ack_offset={queue_offset})")
