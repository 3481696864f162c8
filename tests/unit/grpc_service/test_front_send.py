"""The C++ front's own SendMessage (send.cc) builds the remoting request the servicer builds and
answers each send answer as the servicer does; what it cannot judge it hands off.

Method: the real front (pybroker._fast.grpc_front) with fast sends on, rules from
front_send.send_rules over a table of topics (types, a retry topic, a read-only one), called by
grpcio's client with the seeded valid and mutated messages of tests/broker/test_grpc_front_send.py.
A send the front takes must be one the servicer's checks pass, and its frame must decode to the
servicer's own request (producer._send_request over messages.outgoing: code, header fields,
body; the queue as the servicer's selector picks it for the same sends, a message group's by its
hash); the valid ones, FIFO sends of seeded groups and DELAY sends (answered with their recall
handle) among them, must all be taken. Each taken send is then answered with a remoting answer
of every kind (SUCCESS, the result-entry codes, refusals): the call's answer must be the
servicer's (producer._entry, refused_answer) byte for byte, refusals left to the worker.
"""
import contextlib
import os
import random
import time
import types

import grpc
import pytest

from pybroker._testbase.cluster import free_port
from pybroker.config import load_broker_config
from pybroker.grpc_service import front as grpc_front
from pybroker.grpc_service import front_send, messages, producer, route
from pybroker.grpc_service.status import GrpcRefused, status
from pybroker.protocol.codes import ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response, decode, encode
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb
from pybroker.store.config_docs import TopicConfig

from tests.broker.test_grpc_front_send import METADATA, TOPIC, _mutate, _valid
from tests.unit.grpc_service.test_front import WAIT_S, Backend

if not grpc_front.built():
    pytest.skip("the gRPC front is not built (libgrpc++-dev missing at build time)",
                allow_module_level=True)

from pybroker._fast.grpc_front.front import Front  # noqa: E402

SEND_PATH = grpc_front.SERVICE_PATH + "SendMessage"
SENDS = 400
TOPICS = {
    TOPIC: TopicConfig(TOPIC, read_queue_nums=1, write_queue_nums=1,
                       attributes={"message.type": "NORMAL"}),
    "Mixed": TopicConfig("Mixed", write_queue_nums=3, attributes={"message.type": "MIXED"}),
    "FrontSendFifo": TopicConfig("FrontSendFifo", attributes={"message.type": "FIFO"}),
    "Delayed": TopicConfig("Delayed", write_queue_nums=2, attributes={"message.type": "DELAY"}),
    "ReadOnly": TopicConfig("ReadOnly", perm=4),
    "%RETRY%g": TopicConfig("%RETRY%g"),
}
GROUP_CHARACTERS = "abcXYZ019-_ .:~"
# What every send answer of the handler carries (send.send_response_fields_of).
ANSWER_FIELDS = {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
# (remoting code, remark) of the answers a taken send is given, in turn.
ANSWERS = ((ResponseCode.SUCCESS, None), (ResponseCode.FLUSH_DISK_TIMEOUT, None),
           (ResponseCode.FLUSH_SLAVE_TIMEOUT, None), (ResponseCode.SLAVE_NOT_AVAILABLE, None),
           (ResponseCode.SYSTEM_BUSY, "[PC_SYNCHRONIZED]broker busy"),
           (ResponseCode.MESSAGE_ILLEGAL, None))


def _host(config):
    return types.SimpleNamespace(ctx=types.SimpleNamespace(config=config),
                                 replica=types.SimpleNamespace(topic_configs=lambda: TOPICS))


def test_the_published_topics_are_those_a_normal_message_may_go_to():
    host = _host(load_broker_config())
    assert front_send.fast_topics(host) == {
        TOPIC: (1, True, False, False), "Mixed": (3, True, True, True),
        "FrontSendFifo": (16, False, True, False), "Delayed": (2, False, False, True)}


def _servicer_request(config, selector, message, peer: str):
    """The servicer's remoting request for ``message`` (None: it refuses or hands it on), its
    queue picked by the servicer's ``selector``."""
    topic = message.topic.name
    host = _host(config)
    try:
        outgoing = messages.outgoing(message, topic, peer.partition(":")[2], config.grpc,
                                     config.store.max_message_size)
        producer.check_message_type(host, topic, TOPICS.get(topic),
                                    messages.message_type_of_properties(outgoing.properties))
        queue_id = selector.select(topic, TOPICS[topic], route.topic_perm(host, TOPICS[topic]),
                                   outgoing.message_group)
    except GrpcRefused:
        return None, None
    return producer._send_request(topic, queue_id, [outgoing],
                                  messages.sys_flag_of(message)), outgoing


def _taken(front, eventfd: int) -> tuple[list, list]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            os.eventfd_read(eventfd)
        except BlockingIOError:
            time.sleep(0.002)
            continue
        sends, handed = front.take_sends(), front.take()
        if sends or handed:
            return sends, handed
    raise AssertionError("the front took nothing")


@contextlib.contextmanager
def _started(config):
    """A front with fast sends and the rules of ``config``: (front, its eventfd, its port)."""
    backend = Backend()
    port = free_port()
    eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    front = Front([f"127.0.0.1:{port}"], [], backend.address, handoff_methods=[SEND_PATH],
                  handoff_eventfd=eventfd, fast_sends=True)
    front.set_send_rules(**front_send.send_rules(_host(config)))
    try:
        yield front, eventfd, port
    finally:
        front.stop(1.0)
        os.close(eventfd)
        backend.server.stop(1).wait(WAIT_S)


def _seeded(rng: random.Random, index: int):
    """(message, valid): a valid send (NORMAL, FIFO of a seeded group, DELAY) or a mutated one."""
    message = _valid(rng, index)
    kind = rng.random()
    if kind < 0.25:             # FIFO: the group's queue, as the servicer hashes it
        message.topic.name = rng.choice(["FrontSendFifo", "Mixed"])
        message.system_properties.message_group = rng.choice("gG7") + "".join(
            rng.choice(GROUP_CHARACTERS) for _ in range(rng.randrange(0, 40)))
    elif kind < 0.4:            # DELAY: within maxDelayTimeMills (a day) by a second
        message.topic.name = rng.choice(["Delayed", "Mixed"])
        message.system_properties.delivery_timestamp.FromMilliseconds(
            int(time.time() * 1000) + rng.randrange(-5000, 86_000_000))
        if rng.random() < 0.3:
            message.system_properties.message_group = "g-delayed"
    elif kind >= 0.55:
        _mutate(rng, message)
        if rng.random() < 0.5:
            message.topic.name = rng.choice(list(TOPICS))
    return message, kind < 0.55


def _answered_as_the_servicer(front, frame, message, outgoing, answer_number: int) -> bytes:
    """Answer the taken send of ``frame`` with the answer_number-th kind of ANSWERS (the
    worker's part of a refusal done as FastSends does); the servicer's answer to expect."""
    code, remark = ANSWERS[answer_number % len(ANSWERS)]
    fields = dict(ANSWER_FIELDS)
    if code == ResponseCode.SUCCESS:
        fields.update(msgId="C0A8000100002A9F0000000000000001", queueId="0",
                      queueOffset=str(answer_number))
        if message.system_properties.HasField("delivery_timestamp"):
            fields["recallHandle"] = f"recall-{answer_number}"
    answer = create_response(RemotingCommand(10, opaque=frame.opaque), code, remark, fields)
    answered, left = front.answer_sends(encode(answer))
    assert answered == 1
    if code in (ResponseCode.SUCCESS, *producer._ENTRY_CODES):
        assert left == []
        entry = producer._entry(answer, [outgoing], False)
        return spb.SendMessageResponse(status=status(entry.status.code),
                                       entries=[entry]).SerializeToString()
    ((handle, _),) = left
    assert handle != 0
    servicer = producer.refused_answer(code, remark).SerializeToString()
    front.answer(handle, servicer)
    return servicer


def test_taken_sends_are_the_servicer_request_and_answer():
    config = load_broker_config()
    rng = random.Random(20261207)
    selector = producer.QueueSelector()     # the servicer's turns, for the sends taken only
    taken = valid_sends = 0
    with _started(config) as (front, eventfd, port):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary(SEND_PATH)
            for index in range(SENDS):
                message, valid = _seeded(rng, index)
                valid_sends += valid
                request = spb.SendMessageRequest(messages=[message])
                future = call.future(request.SerializeToString(), metadata=METADATA,
                                     timeout=WAIT_S)
                sends, handed = _taken(front, eventfd)
                if handed:
                    assert not valid, message
                    ((handle, *_),) = handed
                    front.answer(handle, b"")
                    future.result(timeout=WAIT_S)
                    continue
                ((peer, frames, count),) = sends
                assert count == 1 and peer.startswith("ipv4:127.0.0.1:")
                expected, outgoing = _servicer_request(config, selector, message, peer)
                assert expected is not None, message        # the servicer would take it too
                frame = decode(frames, 0, len(frames))
                assert (frame.code, frame.flag, frame.ext_fields) == (
                    expected.code, expected.flag, expected.ext_fields), message
                assert bytes(frame.body or b"") == bytes(expected.body or b"")
                servicer = _answered_as_the_servicer(front, frame, message, outgoing, taken)
                assert future.result(timeout=WAIT_S) == servicer
                taken += 1
        assert taken >= valid_sends > 0
        assert front.calls_sent_fast == taken
        assert front.take_fallback(12345) is None


def test_a_send_the_ring_refuses_goes_back_to_the_hand_off():
    with _started(load_broker_config()) as (front, eventfd, port):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            request = spb.SendMessageRequest(messages=[_valid(random.Random(1), 1)])
            future = channel.unary_unary(SEND_PATH).future(request.SerializeToString(),
                                                           metadata=METADATA, timeout=WAIT_S)
            ((_, frames, _),), _ = _taken(front, eventfd)
            opaque = decode(frames, 0, len(frames)).opaque
            handle, method, body, metadata, peer = front.take_fallback(opaque)
            assert (method, body) == (SEND_PATH, request.SerializeToString())
            assert METADATA[0] in metadata and peer.startswith("ipv4:127.0.0.1:")
            assert front.take_fallback(opaque) is None
            assert front.answer_send(opaque, ResponseCode.SUCCESS) == 0     # no longer waits
            front.answer(handle, b"from the servicer")
            assert future.result(timeout=WAIT_S) == b"from the servicer"
        assert front.calls_handed_off == 1 and front.calls_sent_fast == 1
