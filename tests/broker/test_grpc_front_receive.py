"""Goal: a ReceiveMessage stream the C++ front serves itself (grpcNativeFront: the call handed
to the worker with its deadline, the servicer's responses written by the front, its cancel and
the responses it could not write reported back: _fast/grpc_front/relay.cc,
grpc_service/front.py) answers exactly as the Python servicer behind grpcio does, drops a held
POP its client cancelled and NACKs the messages it could not write.

Method: two real brokers, one with the front and one serving grpcio alone, get the same seeded
sends (one queue, so the same offsets) and then the same seeded receives one after the other:
valid ones (groups, tag filters, batch sizes, invisible durations, auto-renew, attempt ids,
with and without a long-polling time) and ones mutated into each refusal (unknown topic, bad
names, an SQL filter that does not parse, invisible durations out of range, a client that sent
no settings) or into a long poll that ends with nothing. Every stream's responses must be the
same, message by message, but for what differs between two brokers by nature (a handle's pop
time, the store's host and time). Then, on each broker: the deadline sets the polling time (no
long-polling time and nothing to take: the answer comes before the deadline), a cancelled held
receive takes nothing a later send brings, and a client that reads one message of a receive of
big messages and cancels gets the others back about a second later (the NACK), not after their
invisible time.
"""
import random
import threading
import time

import grpc
import pytest
from google.protobuf import duration_pb2, text_format

from pybroker._testbase.cluster import StandaloneBroker, free_port, read_log
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb
from pybroker.protocol.rocketmq_v2 import service_pb2_grpc
from tests import proxy_support
from tests.ha_support import wait_for

pytestmark = [pytest.mark.timeout(300)]

SEED = 20261207
SENDS = 240
RECEIVES = 90
TOPIC = "FrontRecvTopic"
BIG_TOPIC = "FrontRecvBig"
GROUPS = ("FrontRecvA", "FrontRecvB", "FrontRecvC")
CLIENT = "front-recv@1"
METADATA = (("x-mq-client-id", CLIENT), ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "GRPC_V2"), ("x-mq-client-version", "5.1.2"))
NO_SETTINGS_METADATA = (("x-mq-client-id", "front-recv-nobody@1"),) + METADATA[1:]
# Empty long polls end fast (the proxy's minimum is 5 s).
SETTINGS = {"grpcClientConsumerMinLongPollingTimeoutMillis": "200"}
TAGS = ("", "TagA", "TagB")
BIG = 16                # messages of 1,000 KiB (the body limit is 1 MiB): beyond HTTP/2's windows
# ... all in one POP answer (256 KiB by default).
BIG_SETTINGS = {"maxTransferBytesOnMessageInMemory": str(64 << 20),
                "maxTransferBytesOnMessageInDisk": str(64 << 20)}


class _Telemetry:
    """A client's settings on its Telemetry stream, kept open for the test."""

    def __init__(self, stub, group: str):
        self.commands: list = [spb.TelemetryCommand(settings=pb.Settings(
            client_type=pb.SIMPLE_CONSUMER, request_timeout=duration_pb2.Duration(seconds=3),
            subscription=pb.Subscription(group=pb.Resource(name=group), subscriptions=[
                pb.SubscriptionEntry(topic=pb.Resource(name=TOPIC), expression=pb.FilterExpression(
                    type=pb.TAG, expression="*"))])))]
        self.done = threading.Event()

        def commands():
            yield self.commands[0]
            self.done.wait()

        self.call = stub.Telemetry(commands(), metadata=METADATA)
        assert next(self.call).status.code == pb.OK

    def close(self) -> None:
        self.done.set()
        self.call.cancel()


def _broker(tmp_path_factory, front: bool, settings: dict | None = None):
    port = free_port()
    broker = StandaloneBroker(tmp_path_factory.mktemp("front-recv" if front else "servicer"), {
        "grpcWorkers": "1", "grpcServerPort": str(port),
        "grpcNativeFront": str(front).lower(), **SETTINGS, **(settings or {})})
    broker.start()
    wait_for(lambda: "gRPC worker 0 serving" in read_log(broker.log_path), 30,
             "the gRPC worker's serving line")
    assert ("C++ front" in read_log(broker.log_path)) == front
    proxy_support.create_topic(broker.broker_addr, TOPIC, "NORMAL", queues=1)
    proxy_support.create_topic(broker.broker_addr, BIG_TOPIC, "NORMAL", queues=1)
    # No BDP probing: the client's HTTP/2 windows stay at their 64 KiB, so a stream of big
    # messages the client stops reading leaves most of them unwritten (with probing the
    # windows grew, on a busy box, until the 16 MB of test_deadline_cancel_and_nack's stream
    # could all be written before its cancel, and nothing came back).
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[
        ("grpc.max_receive_message_length", 8 << 20), ("grpc.http2.bdp_probe", 0)])
    grpc.channel_ready_future(channel).result(timeout=30)
    return broker, channel


def both_brokers(tmp_path_factory, settings: dict | None = None):
    """A broker with the front and one with grpcio alone, each with its stub; stopped after."""
    made = []
    try:
        for front in (True, False):
            made.append(_broker(tmp_path_factory, front, settings))
        yield [(broker, service_pb2_grpc.MessagingServiceStub(channel))
               for broker, channel in made]
    finally:
        for broker, channel in made:
            channel.close()
            broker.stop()


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    yield from both_brokers(tmp_path_factory)


def _message(rng: random.Random, index: int, topic: str = TOPIC,
             body: bytes | None = None) -> pb.Message:
    system = pb.SystemProperties(message_id=f"RECV-{topic}-{index:05d}", tag=rng.choice(TAGS),
                                 keys=rng.choice([[], ["k1"], ["k1", "k2"]]),
                                 born_host="10.0.0.7")
    system.born_timestamp.FromMilliseconds(1_700_000_000_000 + index)
    return pb.Message(topic=pb.Resource(name=topic),
                      user_properties=rng.choice([{}, {"color": "blue"}]),
                      system_properties=system,
                      body=body if body is not None else rng.randbytes(rng.randrange(1, 200)))


def _send(stub, message: pb.Message) -> None:
    answer = stub.SendMessage(spb.SendMessageRequest(messages=[message]), metadata=METADATA)
    assert answer.status.code == pb.OK, answer.status


def _request(rng: random.Random) -> tuple[spb.ReceiveMessageRequest, tuple, float]:
    """A seeded receive: (request, metadata, deadline in seconds)."""
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=rng.choice(GROUPS)),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=-1),
        batch_size=rng.choice([1, 3, 8, 32]),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression=rng.choice(
            ["*", "TagA", "TagA||TagB", "TagB"])))
    request.invisible_duration.FromMilliseconds(rng.choice([60_000, 90_000, 3_600_000]))
    request.long_polling_timeout.FromMilliseconds(rng.choice([300, 400]))
    metadata, deadline = METADATA, 20.0
    choice = rng.randrange(16)
    if choice == 0:
        request.message_queue.topic.name = rng.choice(["NoSuchRecvTopic", "bad topic!"])
    elif choice == 1:
        request.group.name = rng.choice(["bad group!", "", "NoSuchRecvGroup"])
    elif choice == 2:
        request.filter_expression.CopyFrom(pb.FilterExpression(
            type=pb.SQL, expression=rng.choice(["", "a >", "(((", "color = 'blue'"])))
    elif choice == 3:
        request.invisible_duration.FromMilliseconds(rng.choice([5_000, 13 * 3600 * 1000]))
    elif choice == 4:
        request.group.name = "FrontRecvEmpty"           # a group with nothing left: long poll
        request.filter_expression.expression = "TagNone"
    elif choice == 5:
        metadata = NO_SETTINGS_METADATA
    elif choice == 6:
        request.auto_renew = True
    elif choice == 7:
        request.attempt_id = f"attempt-{rng.randrange(1000)}"
    elif choice == 8:
        request.ClearField("long_polling_timeout")      # the deadline's polling time
        deadline = rng.choice([5.0, 20.0])
    return request, metadata, deadline


def _normal(responses: list) -> list[bytes]:
    """The responses but for what two brokers differ in by nature: a handle's pop time and
    revive queue (its second and fourth fields: the broker picks a revive queue at random), the
    store's host and time, the stream's delivery timestamp."""
    normal = []
    for response in responses:
        response = spb.ReceiveMessageResponse.FromString(response.SerializeToString())
        if response.HasField("message"):
            system = response.message.system_properties
            fields = system.receipt_handle.split(" ")
            system.receipt_handle = " ".join(fields[:1] + fields[2:3] + fields[4:])
            system.ClearField("store_timestamp")
            system.ClearField("store_host")
        elif response.HasField("delivery_timestamp"):
            response.ClearField("delivery_timestamp")
        normal.append(response.SerializeToString(deterministic=True))
    return normal


def _first_difference(front: list[bytes], servicer: list[bytes]) -> tuple:
    for index, (one, other) in enumerate(zip(front, servicer, strict=False)):
        if one != other:
            return index, *(spb.ReceiveMessageResponse.FromString(response)
                            for response in (one, other))
    return len(front), len(servicer)


def _receive(stub, request, metadata, deadline: float) -> list:
    try:
        return list(stub.ReceiveMessage(request, metadata=metadata, timeout=deadline))
    except grpc.RpcError as error:
        return [("rpc error", error.code(), error.details())]


def _join_and_send(brokers: list, groups, rng: random.Random, sends: int) -> None:
    """The client in ``groups`` on every broker (what auto-renew keeps stays kept), then the
    same ``sends`` seeded messages to each."""
    for _, stub in brokers:
        for group in groups:
            answer = stub.Heartbeat(spb.HeartbeatRequest(
                group=pb.Resource(name=group), client_type=pb.SIMPLE_CONSUMER),
                metadata=METADATA)
            assert answer.status.code == pb.OK, answer.status
    for index in range(sends):
        message = _message(rng, index)
        for _, stub in brokers:
            _send(stub, message)


def test_streams_answer_as_the_servicer(brokers):
    rng = random.Random(SEED)
    telemetries = [_Telemetry(stub, GROUPS[0]) for _, stub in brokers]
    try:
        _join_and_send(brokers, GROUPS, rng, SENDS)
        kinds: dict[str, int] = {}
        history = []
        for number in range(RECEIVES):
            request, metadata, deadline = _request(rng)
            answers = [_receive(stub, request, metadata, deadline) for _, stub in brokers]
            assert not isinstance(answers[0][0], tuple), (number, request, answers[0])
            front, servicer = (_normal(answer) for answer in answers)
            history.append((number, text_format.MessageToString(request, as_one_line=True),
                            metadata[0][1], [len(answer) for answer in answers]))
            assert front == servicer, (history[-10:], _first_difference(front, servicer))
            first = answers[0][0].status
            kind = f"{pb.Code.Name(first.code)}: {first.message[:60]}"
            kinds[kind] = kinds.get(kind, 0) + 1
        # The seeds reach every kind of answer.
        for code in ("OK", "MESSAGE_NOT_FOUND: no new",
                     "ILLEGAL_FILTER_EXPRESSION", "ILLEGAL_INVISIBLE_TIME", "TOPIC_NOT_FOUND",
                     "ILLEGAL_TOPIC", "ILLEGAL_CONSUMER_GROUP", "INTERNAL_SERVER_ERROR: Cannot",
                     "INTERNAL_SERVER_ERROR: parse the consumer's subscription"):
            assert any(kind.startswith(code) for kind in kinds), (code, kinds)
    finally:
        for telemetry in telemetries:
            telemetry.close()
    broker = brokers[0][0]
    broker.stop()
    wait_for(lambda: "handed off" in read_log(broker.log_path), 30, "the front's counts")
    assert " streams served (" in read_log(broker.log_path)


@pytest.fixture(params=["front", "grpcio"])
def endpoint(request, tmp_path_factory):
    broker, channel = _broker(tmp_path_factory, request.param == "front", BIG_SETTINGS)
    try:
        yield broker, service_pb2_grpc.MessagingServiceStub(channel)
    finally:
        channel.close()
        broker.stop()


def _plain(group: str, topic: str = TOPIC, *, batch: int = 32,
           polling_ms: int | None = 300) -> spb.ReceiveMessageRequest:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), batch_size=batch,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
    request.invisible_duration.FromMilliseconds(60_000)
    if polling_ms is not None:
        request.long_polling_timeout.FromMilliseconds(polling_ms)
    return request


def _ids(responses) -> list[str]:
    return [r.message.system_properties.message_id for r in responses if r.HasField("message")]


def test_deadline_cancel_and_nack(endpoint):
    _, stub = endpoint
    rng = random.Random(SEED + 1)
    telemetry = _Telemetry(stub, GROUPS[1])
    try:
        # No long-polling time: the deadline's time left less half the request timeout (3 s).
        started = time.monotonic()
        answer = _receive(stub, _plain(GROUPS[1], polling_ms=None), METADATA, 4.0)
        assert answer[0].status.code == pb.MESSAGE_NOT_FOUND, answer
        assert time.monotonic() - started < 4.0
        # A held receive cancelled by its client takes nothing a later send brings.
        held = stub.ReceiveMessage(_plain(GROUPS[1], polling_ms=15_000), metadata=METADATA,
                                   timeout=30)
        time.sleep(1.0)
        held.cancel()
        time.sleep(0.5)
        _send(stub, _message(rng, 1))
        answer = _receive(stub, _plain(GROUPS[1], polling_ms=2000), METADATA, 10)
        assert _ids(answer) == [f"RECV-{TOPIC}-00001"], answer
        # Big messages: the client reads one and cancels; the ones not written (flow control:
        # 16 MB in one stream) come back about a second later, not after their 60 s. Those
        # written but unread are the client's (its transport took them), as behind grpcio.
        sent = [f"RECV-{BIG_TOPIC}-{index:05d}" for index in range(BIG)]
        for index in range(BIG):
            _send(stub, _message(rng, index, BIG_TOPIC, body=rng.randbytes(1000 << 10)))
        stream = stub.ReceiveMessage(_plain(GROUPS[1], BIG_TOPIC, batch=BIG),
                                     metadata=METADATA, timeout=30)
        first = [next(stream), next(stream)]
        assert first[0].status.code == pb.OK and first[1].HasField("message"), first
        stream.cancel()
        again: list = []
        deadline = time.monotonic() + 20
        while not again and time.monotonic() < deadline:
            again = [r.message for r in _receive(stub, _plain(
                GROUPS[1], BIG_TOPIC, batch=BIG, polling_ms=1000), METADATA, 30)
                if r.HasField("message")]
        assert again, "no unwritten message came back within 20 s"
        assert {m.system_properties.message_id for m in again} <= set(sent) - {
            first[1].message.system_properties.message_id}
        assert all(m.system_properties.delivery_attempt == 2 for m in again), again
    finally:
        telemetry.close()
