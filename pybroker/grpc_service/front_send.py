# grpcNativeFront's fast sends: SendMessage calls the C++ front puts on the send ring itself.
"""The worker's side of the front's fast sends (docs/architecture/grpc.md, "The C++ front").

The front (``_fast/grpc_front/send.cc``) turns a SendMessage call it can take into the remoting
SEND_MESSAGE frame the servicer would build for it (producer.py ``_send_request``) and leaves
it on its send list, per caller; every other call is handed off as before. Here, on the
worker's loop, each caller's frames go through the send fast path's port of that caller
(``RingPutter.open_fast_port``, the remoting connection's door: the record written into the
ring by ``_fast/send/``, its durability rule, its answer frame); a frame the fast path does
not take (a topic not in its table, page cache busy, ...) goes back to the servicer as a
handed-off call, so its answer is the servicer's. The fast path's answer frames go back to
the front, which answers SUCCESS and the result-entry codes itself (send.h SendAnswer); an
answer with any other code comes back here and is answered as the servicer answers it
(``producer.refused_answer``).

:func:`send_rules` is what the front needs to decide (the table the worker publishes): the
topics a NORMAL, FIFO or DELAY message may be sent to without a refusal (a valid name, not a
retry or DLQ topic, the message type check passing, writable queues), with their write queue
counts and the types they take, and the servicer's limits and constants.
"""
import logging

from pybroker._fast.frame import TAKE_END, TAKE_FULL
from pybroker.broker import send
from pybroker.broker.attributes import TopicMessageType
from pybroker.grpc_service import checks, producer, route
from pybroker.grpc_service.request_context import CLIENT_ID, peer_address
from pybroker.grpc_service.status import GrpcRefused
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import decode
from pybroker.protocol.constants import (DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX,
                                         SYSTEM_PROPERTY_NAMES, MessageSysFlag, Property)

log = logging.getLogger("pybroker.grpc.front")

PORTS_MAX = 1024        # callers with a port; past it the idle ones are closed
# Where a frame's opaque lies: length word, header word, code (2), language (1), version (2).
_OPAQUE_AT = 4 + 4 + 2 + 1 + 2
_LENGTH_BYTES = 4
# send.h PropertyName order.
PROPERTY_NAMES = (Property.TAGS, Property.KEYS, Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
                  Property.TIMER_DELIVER_MS, Property.RECONSUME_TIME, Property.PRODUCER_GROUP,
                  Property.SHARDING_KEY, Property.TRACE_CONTEXT, Property.BORN_HOST,
                  Property.BORN_TIMESTAMP)


def _takes(host, topic: str, topic_config, message_type: str) -> bool:
    try:
        producer.check_message_type(host, topic, topic_config, message_type)
    except GrpcRefused:
        return False
    return True


def fast_topics(host) -> dict[str, tuple[int, bool, bool, bool]]:
    """topic -> (writable queues, takes NORMAL, FIFO, DELAY messages) of the topics a message
    of one of those types goes to as the servicer would take it (the front hands off sends to
    any other)."""
    topics = {}
    for topic, topic_config in host.replica.topic_configs().items():
        if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            continue
        try:
            checks.validate_topic(topic)
        except GrpcRefused:
            continue
        normal, fifo, delay = (_takes(host, topic, topic_config, message_type)
                               for message_type in (TopicMessageType.NORMAL,
                                                    TopicMessageType.FIFO,
                                                    TopicMessageType.DELAY))
        writes = producer.writable_queues(topic_config, route.topic_perm(host, topic_config))
        if writes > 0 and (normal or fifo or delay):
            topics[topic] = (writes, normal, fifo, delay)
    return topics


def send_rules(host) -> dict:
    """The arguments of ``Front.set_send_rules`` for ``host`` (the gRPC worker) now."""
    config = host.ctx.config
    grpc = config.grpc
    return {"topics": fast_topics(host), "system_property_names": sorted(SYSTEM_PROPERTY_NAMES),
            "property_names": PROPERTY_NAMES, "client_id_key": CLIENT_ID,
            "max_message_size": config.store.max_message_size,
            "body_empty_check": grpc.enable_message_body_empty_check,
            "user_property_max_num": grpc.user_property_max_num,
            "max_user_property_size": grpc.max_user_property_size,
            "max_message_group_size": grpc.max_message_group_size,
            "max_delay_ms": grpc.max_delay_time_mills,
            "compressed_flag": int(MessageSysFlag.COMPRESSED),
            "send_message_code": int(RequestCode.SEND_MESSAGE),
            "entry_codes": producer.entry_codes(), "success_code": int(ResponseCode.SUCCESS)}


class _Caller:
    """One caller's (grpc peer's) fast port and its sends in the ring."""

    __slots__ = ("port", "in_flight")

    def __init__(self):
        self.port = None
        self.in_flight = 0


class FastSends:
    """The front's fast sends of one gRPC worker: ``put`` when the front's eventfd fired."""

    def __init__(self, host, putter, front, handoff):
        self._host = host
        self._putter = putter
        self._front = front
        self._handoff = handoff             # front.HandOff: answers a call the ring refused
        self._callers: dict[str, _Caller] = {}

    def refresh(self) -> None:
        """Publish the rules again (the topics or the settings changed)."""
        self._front.set_send_rules(**send_rules(self._host))

    def put(self) -> None:
        """Take the waiting sends into the send ring, caller by caller."""
        for peer, frames, count in self._front.take_sends():
            caller = self._caller(peer)
            caller.in_flight += count
            self._take(caller, frames, 0)

    def close(self) -> None:
        for caller in self._callers.values():
            caller.port.close()
        self._callers.clear()

    def _caller(self, peer: str) -> _Caller:
        caller = self._callers.get(peer)
        if caller is None:
            if len(self._callers) >= PORTS_MAX:
                self._close_idle()
            caller = _Caller()
            caller.port = self._putter.open_fast_port(
                send.born_host_of(peer_address(peer)),
                lambda frames: self._answered(caller, frames))
            self._callers[peer] = caller
        return caller

    def _close_idle(self) -> None:
        for peer, caller in list(self._callers.items()):
            if caller.in_flight == 0:
                caller.port.close()
                del self._callers[peer]

    def _take(self, caller: _Caller, frames: bytearray, position: int) -> None:
        end = len(frames)
        port = caller.port
        while position < end:
            position, outcome, _ = port.take(frames, position, end)
            if outcome == TAKE_END:
                return
            if outcome == TAKE_FULL:
                port.wait_for_space().add_done_callback(
                    lambda _, at=position: self._take(caller, frames, at))
                return
            # TAKE_OTHER (or TAKE_FAULT): the frame at position is the servicer's.
            opaque = int.from_bytes(frames[position + _OPAQUE_AT:position + _OPAQUE_AT + 4],
                                    "big", signed=True)
            position += int.from_bytes(frames[position:position + _LENGTH_BYTES],
                                       "big") + _LENGTH_BYTES
            caller.in_flight -= 1
            call = self._front.take_fallback(opaque)
            if call is not None:
                self._handoff.answer_call(*call)

    def _answered(self, caller: _Caller, frames: bytes) -> None:
        """The fast path's answer frames for ``caller``'s sends (one write per drain)."""
        count, left = self._front.answer_sends(frames)
        caller.in_flight -= count
        for handle, frame in left:
            answer = decode(frame, 0, len(frame))
            if handle == 0:             # not read by the front: its fields from the decoder
                fields = answer.ext_fields or {}
                handle = self._front.answer_send(answer.opaque, answer.code,
                                                 int(fields.get("queueOffset", "0")),
                                                 fields.get("recallHandle", ""))
            if handle != 0:
                self._front.answer(handle, producer.refused_answer(
                    answer.code, answer.remark).SerializeToString())
