# AckMessage calls handed off by the C++ front, put on the ACK fast path in one take per wake-up.
"""The AckMessage calls the C++ front hands off (grpc_service/front.py), answered without a task,
a call context or a future per call when the servicer's answer needs nothing but the ACK fast
path's (docs/architecture/grpc.md, "AckMessage calls in one take").

:meth:`FrontAcks.answer` gets every call of one hand-off wake-up and keeps the AckMessage calls
whose every step before the broker's answer is known to pass, by the servicer's own functions:
the request parses and has entries, the context has a client id (``context_of``), no ACL, the
topic and group names pass ``checks``, the client has no message of the group kept for
auto-renew (``Renewals.keeps``: the handle given is the one acked), and each entry's handle
decodes (``consumer.decode_handle``) and has not expired. Their ACK_MESSAGE requests
(``consumer.ack_request``) go to the fast path in one take (``FastAcks.put_many``); the fast
path's answer codes make each entry's result (``consumer.acked_entry``) and, with the last, the
call's answer (``consumer.ack_response``), which the front writes. An entry the fast path does
not take goes to the worker's handler (``consumer.ack_one``'s other way). Every other call -
a refusal, an auto-renewed handle, ACL - is left to the servicer, so the answers are the
servicer's (tests/broker/test_grpc_front_acks.py compares both ways).
"""
import functools
import logging

from google.protobuf.message import DecodeError

from pybroker.grpc_service import checks, consumer
from pybroker.grpc_service.request_context import context_of
from pybroker.grpc_service.service import unexpected_status
from pybroker.grpc_service.status import GrpcRefused
from pybroker.protocol.codes import ResponseCode
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb
from pybroker.tasks import start_task

__all__ = ["FrontAcks", "ACK_METHOD"]

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


class FrontAcks:
    """See the module docstring; ``host`` is the gRPC worker (``fast_acks``, ``renewals``,
    ``access``, ``peer_key``), ``front`` the started front."""

    def __init__(self, host, front) -> None:
        self._host = host
        self._front = front
        self.calls_total = 0                # calls answered this way (the stop's log)

    def answer(self, calls: list) -> list:
        """Take the AckMessage calls of ``calls`` (the front's hand-off tuples) this way;
        returns the others, for the servicer."""
        rest = []
        requests, answered, owners = [], [], []
        for call in calls:
            prepared = self._prepare(call) if call[1] == ACK_METHOD else None
            if prepared is None:
                rest.append(call)
                continue
            parsed, rctx, acks = prepared
            taken = _Call(call[0], parsed.entries)
            for index, request in enumerate(acks):
                requests.append(request)
                answered.append(functools.partial(self._answered, taken, index))
                owners.append((rctx, taken, index))
            self.calls_total += 1
        if requests:
            for index in self._host.fast_acks.put_many(requests, answered):
                start_task(self._by_handler(requests[index], *owners[index]),
                           "an ack the fast path did not take", None, log)
        return rest

    def _prepare(self, call: tuple):
        """(request, context, ACK_MESSAGE requests) of a call whose answer is the fast path's
        alone, else None."""
        _, _, request, metadata, peer = call
        host = self._host
        if host.access is not None:
            return None
        try:
            parsed = spb.AckMessageRequest.FromString(request)
        except DecodeError:
            return None
        if not parsed.entries:
            return None
        rctx = context_of(metadata, peer, host.peer_key)
        group, topic = parsed.group.name, parsed.topic.name
        try:
            rctx.require_client_id()
            checks.validate_topic(topic)
            checks.validate_group(group)
        except GrpcRefused:
            return None
        if host.renewals.keeps(rctx.client_id, group):
            return None
        acks = []
        for entry in parsed.entries:
            try:
                handle = consumer.decode_handle(entry.receipt_handle)
            except consumer.BadHandle:
                return None
            if handle.expired:
                return None
            acks.append(consumer.ack_request(handle, group, topic))
        return parsed, rctx, acks

    def _answered(self, taken: _Call, entry: int, code: int) -> None:
        self._settle(taken, entry, code == ResponseCode.SUCCESS)

    def _settle(self, taken: _Call, entry: int, acked: bool) -> None:
        consumer.acked_entry(taken.results[entry], acked)
        taken.left -= 1
        if taken.left == 0:
            self._front.answer(taken.handle,
                               consumer.ack_response(taken.results).SerializeToString())

    async def _by_handler(self, request, rctx, taken: _Call, entry: int) -> None:
        """An entry the fast path did not take, by the handler (as ``consumer.ack_one``)."""
        try:
            answer = await consumer.handle_request(self._host, rctx, request)
        except Exception as error:  # noqa: BLE001 (answered as the servicer answers it)
            if taken.left > 0:
                taken.left = 0
                self._front.answer(taken.handle, spb.AckMessageResponse(
                    status=unexpected_status(error)).SerializeToString())
            return
        if taken.left > 0:
            self._settle(taken, entry, answer.code == ResponseCode.SUCCESS)
