"""Goal: what a push consumer receives with auto-renew stays invisible while it works, as the
Java 5.3.3 proxy keeps it (its receipt-handle renewal): no other consumer of the group gets
it after the receive's invisible time, an ack with the handle the client got still acks it
after the handle was renewed, and the unacked messages of a client that terminates come back
to the group within about a second.

Method: one real broker (grpcWorkers=1) with the proxy's renewal keys shortened
(defaultInvisibleTimeMills 3 s, renewAheadTimeMillis 2 s, a scan every 300 ms) and grpcio's
client with the vendored stubs as two SDK clients of one group; times are bounded waits.
Without the renewal the second client would get both messages after 3 s and the late ack
would be refused "receipt handle is expired". Runs twice: grpcio serving the port
(grpcNativeFront=false) and the C++ front (the default where it is built).
"""
import queue
import threading
import time

import grpc
import pytest
from google.protobuf import duration_pb2

from pybroker._testbase.cluster import StandaloneBroker, free_port, read_log
from pybroker.grpc_service import front as grpc_front
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb
from pybroker.protocol.rocketmq_v2 import service_pb2_grpc
from tests.ha_support import client_for, wait_for
from tests.peers import unavailable

pytestmark = [pytest.mark.timeout(120)]

TOPIC, GROUP = "RenewTopic", "RenewGroup"
DEFAULT_INVISIBLE_MS = 3000


def _metadata(client_id: str):
    return (("x-mq-client-id", client_id), ("x-mq-language", "JAVA"),
            ("x-mq-protocol", "GRPC_V2"), ("x-mq-client-version", "5.0.8"))


class _Client:
    """One SDK-like client: its Telemetry stream with push-consumer settings, a heartbeat."""

    def __init__(self, stub, client_id: str):
        self.stub, self.metadata = stub, _metadata(client_id)
        self.outgoing: queue.Queue = queue.Queue()
        self.answers: queue.Queue = queue.Queue()
        self.call = stub.Telemetry(iter(self.outgoing.get, None), metadata=self.metadata)
        threading.Thread(target=self._read, daemon=True).start()
        self.outgoing.put(spb.TelemetryCommand(settings=pb.Settings(
            client_type=pb.PUSH_CONSUMER, request_timeout=duration_pb2.Duration(seconds=3),
            subscription=pb.Subscription(group=pb.Resource(name=GROUP), subscriptions=[
                pb.SubscriptionEntry(topic=pb.Resource(name=TOPIC), expression=pb.FilterExpression(
                    type=pb.TAG, expression="*"))]))))
        assert self.answers.get(timeout=30).status.code == pb.OK
        beat = stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.PUSH_CONSUMER,
                                                   group=pb.Resource(name=GROUP)),
                              metadata=self.metadata)
        assert beat.status.code == pb.OK

    def _read(self):
        try:
            for command in self.call:
                self.answers.put(command)
        except grpc.RpcError as error:
            self.answers.put(error)

    def receive(self, *, auto_renew: bool, polling_ms: int = 1000) -> list[pb.Message]:
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name=GROUP), message_queue=pb.MessageQueue(
                topic=pb.Resource(name=TOPIC), id=-1), batch_size=32, auto_renew=auto_renew,
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
        request.long_polling_timeout.FromMilliseconds(polling_ms)
        if not auto_renew:
            request.invisible_duration.FromMilliseconds(20000)
        answers = list(self.stub.ReceiveMessage(request, metadata=self.metadata, timeout=30))
        return [a.message for a in answers if a.WhichOneof("content") == "message"]

    def ack(self, message: pb.Message) -> spb.AckMessageResponse:
        return self.stub.AckMessage(spb.AckMessageRequest(
            group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC),
            entries=[spb.AckMessageEntry(
                message_id=message.system_properties.message_id,
                receipt_handle=message.system_properties.receipt_handle)]),
            metadata=self.metadata)

    def terminate(self) -> None:
        end = self.stub.NotifyClientTermination(spb.NotifyClientTerminationRequest(
            group=pb.Resource(name=GROUP)), metadata=self.metadata)
        assert end.status.code == pb.OK
        self.outgoing.put(None)


@pytest.fixture(params=["grpcio", "front"])
def endpoint(request, tmp_path):
    front = request.param == "front"
    if front and not grpc_front.built():
        unavailable("the gRPC front is not built (libgrpc++-dev missing at build time)")
    port = free_port()
    broker = StandaloneBroker(tmp_path / "b", {
        "grpcWorkers": "1", "grpcServerPort": str(port), "grpcNativeFront": str(front).lower(),
        "grpcClientConsumerMinLongPollingTimeoutMillis": "500",
        "defaultInvisibleTimeMills": str(DEFAULT_INVISIBLE_MS),
        "renewAheadTimeMillis": "2000", "renewSchedulePeriodMillis": "300",
        "invisibleTimeMillisWhenClear": "1000"})
    broker.start()
    try:
        wait_for(lambda: "gRPC worker 0 serving" in read_log(broker.log_path), 30,
                 "the gRPC worker's serving line")
        assert ("C++ front)" in read_log(broker.log_path)) == front
        remoting = client_for(broker.broker_addr)
        answer = remoting.invoke(create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "2",
            "writeQueueNums": "2", "perm": "6", "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0", "order": "false", "attributes": "+message.type=NORMAL"}), 5000)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=30)
        yield service_pb2_grpc.MessagingServiceStub(channel)
        channel.close()
        remoting.close()
    finally:
        broker.stop()


def _send(stub, body: str) -> None:
    answer = stub.SendMessage(spb.SendMessageRequest(messages=[pb.Message(
        topic=pb.Resource(name=TOPIC), body=body.encode(),
        system_properties=pb.SystemProperties(message_id=f"ID-{body}"))]),
        metadata=_metadata("producer@1"))
    assert answer.status.code == pb.OK, answer.status


def _receive_all(client: _Client, count: int, deadline_s: float, **options) -> list:
    found: list = []
    deadline = time.monotonic() + deadline_s
    while len(found) < count:
        assert time.monotonic() < deadline, [m.body for m in found]
        found += client.receive(**options)
    return found


def test_auto_renew_keeps_messages_until_acked_and_a_gone_client_gives_them_back(endpoint):
    stub = endpoint
    worker, other = _Client(stub, "worker@1"), _Client(stub, "other@1")
    for body in ("r-0", "r-1"):
        _send(stub, body)
    held = {m.body.decode(): m for m in _receive_all(worker, 2, 20, auto_renew=True)}
    assert sorted(held) == ["r-0", "r-1"]
    # Two default invisible times: without renewals both would be visible again by now.
    deadline = time.monotonic() + 2.5 * DEFAULT_INVISIBLE_MS / 1000
    while time.monotonic() < deadline:
        assert other.receive(auto_renew=False, polling_ms=500) == []
    # The ack with the first handle (the one the client knows) reaches the renewed one: the
    # first expired 3 s after the receive, and acking with it would be refused as expired.
    acked = worker.ack(held["r-0"])
    assert acked.status.code == pb.OK, acked.status
    # The worker goes away without acking r-1: visible again 1 s later, the revive puts it
    # in the group's retry topic ~2 s after that (about 3 s in all here); a new retry topic
    # reaches the worker's POP at once (it waited for the next periodic push, up to 10 s).
    started = time.monotonic()
    worker.terminate()
    (back,) = _receive_all(other, 1, 20, auto_renew=False)
    assert back.body == b"r-1" and back.system_properties.delivery_attempt == 2
    assert time.monotonic() - started < 7
    assert other.ack(back).status.code == pb.OK
    other.terminate()
