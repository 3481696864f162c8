"""Goal: AckMessage calls the C++ front hands off, put on the ACK fast path in one take per
wake-up without the servicer (grpc_service/front_acks.py), answer exactly as the Python servicer
behind grpcio does, and what they acked never comes back.

Method: two real brokers, one with the front and one serving grpcio alone, get the same seeded
sends (one queue, so the same offsets) and the same receives: group A (invisible 6 s), group B
with auto-renew (its handles are kept: those calls are the servicer's), group C (invisible 1 s,
so its handles have expired when acked). Then the same seeded AckMessage calls, all in flight
together (so the front takes several per wake-up): one to three entries, and calls mutated into
each refusal (malformed handles, an unknown group, a bad or unknown topic, no entries, no
client id, an entry twice). Every answer must be the same but for the handles themselves (a
handle's pop time differs between brokers). Then, on each broker, group A's messages come back
after their invisible time but for those acked OK, which never do; and the front's stop logs
that it put AckMessage calls itself.
"""
import random
import re
import time

import pytest

from pybroker._testbase.cluster import read_log
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb
from tests.broker.test_grpc_front_receive import (METADATA, TOPIC, _join_and_send, _Telemetry,
                                                  both_brokers)
from tests.ha_support import wait_for

pytestmark = [pytest.mark.timeout(300)]

SEED = 20261208
SENDS = 40
CALLS = 120
GROUP_A, GROUP_B, GROUP_C = "FrontAckA", "FrontAckB", "FrontAckC"
INVISIBLE_MS = {GROUP_A: 6_000, GROUP_B: 60_000, GROUP_C: 1_000}
SETTINGS = {"minInvisibleTimeMillsForRecv": "1000"}
NO_CLIENT_METADATA = METADATA[1:]


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    yield from both_brokers(tmp_path_factory, SETTINGS)


def _receive(stub, group: str, count: int) -> dict[str, str]:
    """message id -> handle of ``count`` messages of ``group`` (fewer after 10 tries)."""
    handles: dict[str, str] = {}
    for _ in range(10):
        if len(handles) >= count:
            break
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name=group), batch_size=min(32, count - len(handles)),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=-1),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            auto_renew=group == GROUP_B)
        request.invisible_duration.FromMilliseconds(INVISIBLE_MS[group])
        request.long_polling_timeout.FromMilliseconds(400)
        for response in stub.ReceiveMessage(request, metadata=METADATA, timeout=20):
            if response.HasField("message"):
                system = response.message.system_properties
                handles[system.message_id] = system.receipt_handle
    return handles


def _calls(rng: random.Random, ids: dict[str, list[str]]) -> list[tuple]:
    """Seeded calls: (group, topic, [(message id, handle's group or a bad handle)], no id)."""
    calls = []
    for _ in range(CALLS):
        group = rng.choice([GROUP_A] * 6 + [GROUP_B, GROUP_C, GROUP_C])
        entries = [(rng.choice(ids[group]), group) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
        topic, no_client = TOPIC, False
        choice = rng.randrange(14)
        if choice == 0:
            entries[-1] = (entries[-1][0], rng.choice(["1 2 3", "x y z 1 2 b 0 5 7", ""]))
        elif choice == 1:
            group = "NoSuchAckGroup"
        elif choice == 2:
            topic = rng.choice(["bad topic!", "NoSuchAckTopic"])
        elif choice == 3:
            entries = []
        elif choice == 4:
            no_client = True
        elif choice == 5:
            entries.append(entries[0])
        calls.append((group, topic, entries, no_client))
    return calls


def _send_calls(stub, calls: list, handles: dict[str, dict[str, str]]) -> list:
    """All calls in flight together; their answers, in order."""
    futures = []
    for group, topic, entries, no_client in calls:
        request = spb.AckMessageRequest(group=pb.Resource(name=group),
                                        topic=pb.Resource(name=topic), entries=[
            spb.AckMessageEntry(message_id=message_id,
                                receipt_handle=handles[source][message_id]
                                if source in handles else source)
            for message_id, source in entries])
        futures.append(stub.AckMessage.future(
            request, metadata=NO_CLIENT_METADATA if no_client else METADATA, timeout=30))
    return [future.result() for future in futures]


def _normal(answer: spb.AckMessageResponse) -> bytes:
    """The answer without its handles (a handle's pop time differs between brokers)."""
    copy = spb.AckMessageResponse()
    copy.CopyFrom(answer)
    for entry in copy.entries:
        entry.receipt_handle = ""
    return copy.SerializeToString()


def _come_back(stub, expected: set[str], refused: set[str]) -> set[str]:
    """Group A's messages received again within 30 s (until ``expected`` are all back)."""
    seen: set[str] = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not expected <= seen:
        seen |= set(_receive(stub, GROUP_A, 32))
        assert not seen & refused, sorted(seen & refused)
    return seen


def test_front_acks_answer_as_the_servicer(brokers):
    rng = random.Random(SEED)
    telemetries = [_Telemetry(stub, GROUP_A) for _, stub in brokers]
    try:
        _join_and_send(brokers, INVISIBLE_MS, rng, SENDS)
        handles = [{group: _receive(stub, group, SENDS) for group in INVISIBLE_MS}
                   for _, stub in brokers]
        assert all(len(kept) == SENDS for side in handles for kept in side.values()), \
            [{group: len(kept) for group, kept in side.items()} for side in handles]
        assert handles[0][GROUP_A].keys() == handles[1][GROUP_A].keys()
        time.sleep(1.5)                 # group C's handles expire
        calls = _calls(rng, {group: sorted(kept) for group, kept in handles[0].items()})
        answers = [_send_calls(stub, calls, side)
                   for (_, stub), side in zip(brokers, handles, strict=True)]
        for index, (front, servicer) in enumerate(zip(*answers, strict=True)):
            assert _normal(front) == _normal(servicer), (index, calls[index], front, servicer)
        codes = {pb.Code.Name(entry.status.code) + ": " + entry.status.message[:20]
                 for answer in answers[0] for entry in answer.entries}
        codes |= {pb.Code.Name(answer.status.code) for answer in answers[0]}
        for code in ("OK: ", "INVALID_RECEIPT_HANDLE: ",
                     "INTERNAL_SERVER_ERROR: Parse failed", "INTERNAL_SERVER_ERROR: ack failed",
                     "ILLEGAL_TOPIC", "CLIENT_ID_REQUIRED", "MULTIPLE_RESULTS"):
            assert any(kind.startswith(code) for kind in codes), (code, codes)
        # Group A: what was acked OK never comes back, the rest does after 6 s.
        acked_a = {message_id for call, answer in zip(calls, answers[0], strict=True)
                   if call[0] == GROUP_A
                   for (message_id, _), entry in zip(call[2], answer.entries, strict=False)
                   if entry.status.code == pb.OK}
        assert acked_a, "no group A ack answered OK"
        expected = set(handles[0][GROUP_A]) - acked_a
        for _, stub in brokers:
            assert _come_back(stub, expected, acked_a) == expected
    finally:
        for telemetry in telemetries:
            telemetry.close()
    broker = brokers[0][0]
    broker.stop()
    wait_for(lambda: "AckMessage calls put by" in read_log(broker.log_path), 30,
             "the front's ack counts")
    put = re.search(r"\((\d+) AckMessage calls put by", read_log(broker.log_path))
    assert put is not None and int(put.group(1)) > 10, put
