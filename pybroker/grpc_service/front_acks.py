# AckMessage calls handed off by the C++ front, put on the ACK fast path in one take per wake-up.
"""The AckMessage calls the C++ front hands off (grpc_service/front.py), answered without a task,
a call context or a future per call when the servicer's answer needs nothing but the ACK fast
path's (docs/architecture/grpc.md, "AckMessage calls in one take").

:meth:`FrontAcks.answer` gets every call of one hand-off wake-up and keeps the AckMessage calls
whose every step before the broker's answer is known to pass, by the servicer's own functions:
the request parses and has entries, the context has a client id (``context_of``), no ACL, the
topic and group names pass ``checks``, the client has no message of the group kept for
auto-renew (``Renewals.keeps``: the handle given is the one acked), and each entry's handle
decodes and has not expired (``consumer.handle_expired``). The names' checks are kept per
(topic, group) once they pass (they are functions of the names alone). Each entry's handle is
read and its ACK_MESSAGE frame written in C (``_fast/pop/grpc_ack.pyx``: the fields
``consumer.decode_handle`` reads, the frame ``consumer.ack_request`` and ``command.encode``
make, from a template cut from them, :func:`ack_frame_template`; a handle it does not write is
left to the servicer with its call); the frames of one wake-up go to the fast path in one take
(``FastAcks.put_frames``); the fast path's answer codes make each entry's result
(``consumer.acked_entry``) and, with the last, the call's answer (``consumer.ack_response``),
which the front writes. An entry the fast path does not take goes to the worker's handler
(``consumer.ack_one``'s other way). Every other call - a refusal, an auto-renewed handle, ACL -
is left to the servicer, so the answers are the servicer's (tests/broker/
test_grpc_front_acks.py compares both ways).
"""
import functools
import logging

from google.protobuf.message import DecodeError

from pybroker import clock
from pybroker._fast.pop import grpc_ack
from pybroker.grpc_service import checks, consumer
from pybroker.grpc_service.request_context import context_of
from pybroker.grpc_service.service import unexpected_status
from pybroker.grpc_service.status import GrpcRefused
from pybroker.protocol import command, pop
from pybroker.protocol.codes import ResponseCode
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb
from pybroker.tasks import start_task

__all__ = ["FrontAcks", "ACK_METHOD", "ack_frame_template"]

log = logging.getLogger("pybroker.grpc.front_acks")

ACK_METHOD = "/apache.rocketmq.v2.MessagingService/AckMessage"


class _Call:
    """One AckMessage call until its last entry's answer."""

    __slots__ = ("handle", "results", "left")

    def __init__(self, handle: int, entries) -> None:
        self.handle = handle
        self.results = [spb.AckMessageResultEntry(message_id=entry.message_id,
                                                  receipt_handle=entry.receipt_handle)
                        for entry in entries]
        self.left = len(entries)


# Marker values of ack_frame_template: text and numbers no other part of the header holds.
_GROUP_MARKER, _TOPIC_MARKER = "pybrokerMarkerGroup", "pybrokerMarkerTopic"
_EXTRA_INFO_MARKER = "pybrokerMarkerExtraInfo"
_QUEUE_ID_MARKER, _OFFSET_MARKER = 2_000_000_003, 9_000_000_000_000_000_005
_OPAQUE_MARKER = 2_000_000_007
_MARKERS: dict[str, str | int] = {
    "group": _GROUP_MARKER, "topic": _TOPIC_MARKER, "extra_info": _EXTRA_INFO_MARKER,
    "queue_id": _QUEUE_ID_MARKER, "offset": _OFFSET_MARKER, "opaque": _OPAQUE_MARKER}
_FRAME_HEAD_BYTES = 8               # the frame's length word, then the header's
# Name pairs kept as passing the checks; past it the table starts again (names a client made up).
_NAMES_KEPT_MAX = 4096


def ack_frame_template() -> tuple[tuple[bytes, ...], tuple[int, ...]]:
    """``(pieces, order)`` of ``grpc_ack.AckFrames``: the frame ``command.encode`` makes of
    ``consumer.ack_request``'s request (its opaque set) cut around its values, ``order[i]`` the
    value (``grpc_ack.FRAME_VALUES`` index) after ``pieces[i]``."""
    handle = consumer.ReceiptHandle(0, 0, 0, 0, pop.RETRY_FLAG_NORMAL, "", _QUEUE_ID_MARKER,
                                    _OFFSET_MARKER, -1, _EXTRA_INFO_MARKER)
    request = consumer.ack_request(handle, _GROUP_MARKER, _TOPIC_MARKER)
    request.opaque = _OPAQUE_MARKER
    frame = command.encode(request)
    header = frame[_FRAME_HEAD_BYTES:]
    if int.from_bytes(frame[4:_FRAME_HEAD_BYTES], "big") != len(header):
        raise ValueError(f"not a JSON header without a body: {frame!r}")
    found = []
    for index, name in enumerate(grpc_ack.FRAME_VALUES):
        marker = str(_MARKERS[name]).encode()
        if header.count(marker) != 1:
            raise ValueError(f"the marker {marker!r} is not once in {header!r}")
        found.append((header.index(marker), index, len(marker)))
    pieces, order, at = [], [], 0
    for position, index, length in sorted(found):
        pieces.append(header[at:position])
        order.append(index)
        at = position + length
    pieces.append(header[at:])
    return tuple(pieces), tuple(order)


def _real_topics(topic: str, group: str) -> tuple[bytes | None, ...]:
    """The real topic's bytes of each one-digit retry flag (None where ``pop.real_topic``
    refuses the flag)."""
    topics: list[bytes | None] = []
    for digit in range(10):
        try:
            topics.append(pop.real_topic(topic, group, str(digit)).encode())
        except ValueError:
            topics.append(None)
    return tuple(topics)


class FrontAcks:
    """See the module docstring; ``host`` is the gRPC worker (``fast_acks``, ``renewals``,
    ``access``, ``peer_key``, ``ctx``), ``front`` the started front."""

    def __init__(self, host, front) -> None:
        self._host = host
        self._front = front
        self._frames = grpc_ack.AckFrames(*ack_frame_template(),
                                          host.ctx.config.remoting.frame_max_bytes)
        # (topic, group) -> (group's bytes, real topics by retry flag) of the names the
        # servicer's checks pass (functions of the names alone).
        self._names: dict = {}
        self.calls_total = 0                # calls answered this way (the stop's log)

    def answer(self, calls: list) -> list:
        """Take the AckMessage calls of ``calls`` (the front's hand-off tuples) this way;
        returns the others, for the servicer."""
        rest = []
        frames = bytearray()
        starts: list[int] = []
        opaques: list[int] = []
        answered: list = []
        owners: list = []
        now_ms = clock.now_ms()
        for call in calls:
            prepared = self._prepare(call, frames, starts, opaques, now_ms) \
                if call[1] == ACK_METHOD else None
            if prepared is None:
                rest.append(call)
                continue
            parsed, rctx = prepared
            taken = _Call(call[0], parsed.entries)
            group, topic = parsed.group.name, parsed.topic.name
            for index, entry in enumerate(parsed.entries):
                answered.append(functools.partial(self._answered, taken, index))
                owners.append((rctx, taken, index, entry.receipt_handle, group, topic))
            self.calls_total += 1
        if starts:
            for index in self._host.fast_acks.put_frames(frames, starts, opaques, answered):
                start_task(self._by_handler(*owners[index]),
                           "an ack the fast path did not take", None, log)
        return rest

    def _prepare(self, call: tuple, frames: bytearray, starts: list, opaques: list,
                 now_ms: int):
        """(request, context) of a call whose answer is the fast path's alone, its entries'
        ACK_MESSAGE frames appended to ``frames`` (where each starts and its opaque to
        ``starts`` and ``opaques``), else None (nothing appended)."""
        _, _, request, metadata, peer = call
        host = self._host
        if host.access is not None:
            return None
        try:
            parsed = spb.AckMessageRequest.FromString(request)
        except DecodeError:
            return None
        entries = parsed.entries
        if not entries:
            return None
        rctx = context_of(metadata, peer, host.peer_key)
        group, topic = parsed.group.name, parsed.topic.name
        names = self._names.get((topic, group))
        if names is None:
            names = self._checked_names(topic, group)
            if names is None:
                return None
        try:
            rctx.require_client_id()
        except GrpcRefused:
            return None
        if host.renewals.keeps(rctx.client_id, group):
            return None
        group_bytes, topics = names
        mark, count = len(frames), len(starts)
        next_opaque, add = host.fast_acks.next_opaque, self._frames.add
        for entry in entries:
            opaque = next_opaque()
            starts.append(len(frames))
            opaques.append(opaque)
            # The handle's fields and frame in C (None: a handle decode_handle refuses, a
            # retry flag without a real topic, text JSON escapes), its expiry the servicer's.
            times = add(frames, entry.receipt_handle, topics, group_bytes, opaque)
            if times is None or consumer.handle_expired(times[0], times[1], now_ms):
                del frames[mark:], starts[count:], opaques[count:]
                return None
        return parsed, rctx

    def _checked_names(self, topic: str, group: str):
        """The names' entry of ``_names`` when ``checks`` passes them, else None."""
        try:
            checks.validate_topic(topic)
            checks.validate_group(group)
        except GrpcRefused:
            return None
        if len(self._names) >= _NAMES_KEPT_MAX:
            self._names.clear()
        names = self._names[(topic, group)] = (group.encode(), _real_topics(topic, group))
        return names

    def _answered(self, taken: _Call, entry: int, code: int) -> None:
        consumer.acked_entry(taken.results[entry], code == ResponseCode.SUCCESS)
        taken.left -= 1
        if taken.left == 0:
            self._front.answer(taken.handle,
                               consumer.ack_response(taken.results).SerializeToString())

    async def _by_handler(self, rctx, taken: _Call, entry: int, text: str, group: str,
                          topic: str) -> None:
        """An entry the fast path did not take, by the handler (as ``consumer.ack_one``)."""
        try:
            request = consumer.ack_request(consumer.decode_handle(text), group, topic)
            answer = await consumer.handle_request(self._host, rctx, request)
        except Exception as error:  # noqa: BLE001 (answered as the servicer answers it)
            if taken.left > 0:
                taken.left = 0
                self._front.answer(taken.handle, spb.AckMessageResponse(
                    status=unexpected_status(error)).SerializeToString())
            return
        if taken.left > 0:
            self._answered(taken, entry, answer.code)
