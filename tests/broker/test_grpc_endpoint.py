"""Goal: a pybroker standalone with grpcWorkers=1 serves RocketMQ 5's MessagingService on its
gRPC port as the Java 5.3.3 proxy answers it: routes, client settings over Telemetry,
heartbeats, sends stored through the remoting send path, the proxy's refusals with their codes
and messages, transactions ended by the client and by a server check-back, termination.

Method: one real broker process (free ports, short transaction checks) and grpcio's own
client with the vendored stubs, speaking as an SDK does (its metadata headers, a Telemetry
stream); what was stored is read back with raw remoting pulls of the broker's queues. The module
runs twice: grpcio serving the port, and the C++ front (grpcNativeFront) relaying every call to
it, which must not change one answer and must pass on the caller's address.
"""
import json
import queue
import re
import threading
import time

import grpc
import pytest
from google.protobuf import duration_pb2
from google.protobuf.message import DecodeError

from pybroker._testbase.cluster import StandaloneBroker, free_port, read_log
from pybroker.grpc_service import front as grpc_front
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb
from pybroker.protocol.rocketmq_v2 import service_pb2_grpc
from tests.ha_support import client_for, pull, records_of, wait_for
from tests.peers import unavailable

pytestmark = [pytest.mark.timeout(180)]

TOPIC = "GrpcTopic"
TX_TOPIC = "GrpcTxTopic"
CLIENT_ID = "test-client@1"
# The proxy's ProxyException refusals carry the exception's name (as SDKs behind it show).
PROXY_EXCEPTION = "org.apache.rocketmq.proxy.common.ProxyException: "
METADATA = (("x-mq-client-id", CLIENT_ID), ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "GRPC_V2"), ("x-mq-client-version", "5.1.2"))


# The line a gRPC worker logs when the C++ front serves its port (grpc_service/front.py).
FRONT_SERVING = "(plain, C++ front)"


@pytest.fixture(scope="module", params=["grpcio", "front"])
def endpoint(request, tmp_path_factory):
    front = request.param == "front"
    if front and not grpc_front.built():
        unavailable("the gRPC front is not built (libgrpc++-dev missing at build time)")
    port = free_port()
    broker = StandaloneBroker(tmp_path_factory.mktemp("grpc"), {
        "grpcWorkers": "1", "grpcServerPort": str(port), "transactionCheckInterval": "1000",
        "transactionTimeOut": "1000", "grpcClientConsumerMinLongPollingTimeoutMillis": "1000",
        "grpcClientConsumerMaxLongPollingTimeoutMillis": "10000",
        "grpcNativeFront": str(front).lower()})
    broker.start()
    try:
        wait_for(lambda: "gRPC worker 0 serving" in read_log(broker.log_path), 30,
                 "the gRPC worker's serving line")
        assert (FRONT_SERVING in read_log(broker.log_path)) == front
        remoting = client_for(broker.broker_addr)
        for topic, message_type in ((TOPIC, "NORMAL"), (TX_TOPIC, "TRANSACTION")):
            answer = remoting.invoke(create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
                "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "4",
                "writeQueueNums": "4", "perm": "6", "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": "0", "order": "false",
                "attributes": f"+message.type={message_type}"}), 5000)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=30)
        yield broker, remoting, service_pb2_grpc.MessagingServiceStub(channel), port
        channel.close()
        remoting.close()
    finally:
        broker.stop()
    if front:     # the sends were answered from the front's hand-off, not through grpcio
        took = re.search(r"the front took (\d+) calls, (\d+) of them handed off",
                         read_log(broker.log_path))
        assert took is not None and int(took.group(2)) >= 10, took


def _endpoints(port: int) -> pb.Endpoints:
    return pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=port)])


def _message(topic: str, body: bytes, message_id: str, **system) -> pb.Message:
    return pb.Message(topic=pb.Resource(name=topic), body=body, user_properties={"color": "blue"},
                      system_properties=pb.SystemProperties(message_id=message_id, **system))


def _stored(remoting, topic: str) -> list:
    found = []
    for queue_id in range(4):
        answer = pull(remoting, topic, queue_id, 0)
        if answer.code == ResponseCode.SUCCESS:
            found += records_of(answer.body)
    return found


class Telemetry:
    """A client's Telemetry stream: commands sent from a queue, answers collected."""

    def __init__(self, stub):
        self.outgoing: queue.Queue = queue.Queue()
        self.received: queue.Queue = queue.Queue()
        self.call = stub.Telemetry(iter(self.outgoing.get, None), metadata=METADATA)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        try:
            for command in self.call:
                self.received.put(command)
        except grpc.RpcError as error:
            self.received.put(error)

    def send(self, command) -> None:
        self.outgoing.put(command)

    def next(self, timeout_s: float = 30):
        return self.received.get(timeout=timeout_s)

    def close(self) -> None:
        self.outgoing.put(None)


def test_routes_and_name_refusals(endpoint):
    _, _, stub, port = endpoint
    answer = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC),
                                                   endpoints=_endpoints(port)),
                             metadata=METADATA)
    assert answer.status.code == pb.OK and answer.status.message == "OK"
    assert [queue.id for queue in answer.message_queues] == [0, 1, 2, 3]
    first = answer.message_queues[0]
    assert first.permission == pb.READ_WRITE and list(first.accept_message_types) == [pb.NORMAL]
    assert (first.broker.name, first.broker.id) == ("broker-a", 0)
    assert [(a.host, a.port) for a in first.broker.endpoints.addresses] == [("127.0.0.1", port)]
    refusals = {
        "NoSuchTopic": (pb.TOPIC_NOT_FOUND,
                        "CODE: 17  DESC: No topic route info in name server for the topic: "
                        "NoSuchTopic\nFor more information, please visit the url, "
                        "https://rocketmq.apache.org/docs/bestPractice/06FAQ"),
        "bad topic!": (pb.ILLEGAL_TOPIC, "The specified topic[bad topic!] contains illegal "
                       "characters, allowing only ^[%|a-zA-Z0-9_-]+$"),
        "RMQ_SYS_TRANS_HALF_TOPIC": (pb.ILLEGAL_TOPIC, "cannot access system topic"),
        " ": (pb.ILLEGAL_TOPIC, "The specified topic is blank")}
    for topic, expected in refusals.items():
        answer = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic),
                                                       endpoints=_endpoints(port)),
                                 metadata=METADATA)
        assert (answer.status.code, answer.status.message) == expected, topic
    anonymous = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)),
                                metadata=(("x-mq-language", "PYTHON"),))
    assert (anonymous.status.code, anonymous.status.message) == (pb.CLIENT_ID_REQUIRED,
                                                                 "client id cannot be empty")
    unknown = stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.PRODUCER),
                             metadata=(("x-mq-client-id", "never-said-hello"),))
    assert (unknown.status.code, unknown.status.message) == (
        pb.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client")


def _producer_settings(topics) -> spb.TelemetryCommand:
    return spb.TelemetryCommand(settings=pb.Settings(
        client_type=pb.PRODUCER, publishing=pb.Publishing(
            topics=[pb.Resource(name=topic) for topic in topics])))


def test_producer_sends_and_refusals(endpoint):
    broker, remoting, stub, port = endpoint
    telemetry = Telemetry(stub)
    try:
        telemetry.send(_producer_settings([TOPIC]))
        settings = telemetry.next()
        assert settings.status.code == pb.OK
        backoff = settings.settings.backoff_policy
        assert backoff.max_attempts == 3
        assert backoff.exponential_backoff.initial.ToMilliseconds() == 10
        assert settings.settings.publishing.validate_message_type
        assert settings.settings.publishing.max_body_size == 1024 * 1024   # TEST_PROFILE
        heartbeat = stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.PRODUCER),
                                   metadata=METADATA)
        assert heartbeat.status.code == pb.OK
        _sends(stub, remoting)
        _refusals(stub)
        _unparsable(port)
        end = stub.NotifyClientTermination(spb.NotifyClientTerminationRequest(),
                                           metadata=METADATA)
        assert end.status.code == pb.OK
    finally:
        telemetry.close()


def _sends(stub, remoting):
    born = pb.SystemProperties().born_timestamp
    born.FromMilliseconds(1_700_000_000_123)
    message = _message(TOPIC, b"hello grpc", "MSGID-0001", tag="TagA", keys=["k1", "k2"],
                       born_timestamp=born, born_host="10.1.2.3")
    answer = stub.SendMessage(spb.SendMessageRequest(messages=[message]), metadata=METADATA)
    assert answer.status.code == pb.OK, answer.status
    (entry,) = answer.entries
    assert (entry.status.code, entry.message_id, entry.transaction_id) == (pb.OK, "MSGID-0001",
                                                                         "")
    stored: list = []

    def dispatched() -> bool:
        stored[:] = [r for r in _stored(remoting, TOPIC) if bytes(r.body) == b"hello grpc"]
        return bool(stored)
    wait_for(dispatched, 10, "the sent message in its consume queue")
    assert len(stored) == 1 and stored[0].queue_offset == entry.offset
    properties = props.decode_properties(stored[0].properties)
    assert properties["UNIQ_KEY"] == "MSGID-0001" and properties["TAGS"] == "TagA"
    assert properties["KEYS"] == "k1 k2" and properties["color"] == "blue"
    assert properties["PGROUP"] == TOPIC and properties["__BORNHOST"] == "10.1.2.3"
    assert properties["BORN_TIMESTAMP"] == "1700000000123"
    assert stored[0].born_timestamp == 1_700_000_000_123
    # Without a born host the message's is the caller's address, also behind the front.
    answer = stub.SendMessage(spb.SendMessageRequest(messages=[
        _message(TOPIC, b"hello peer", "MSGID-0002")]), metadata=METADATA)
    assert answer.status.code == pb.OK, answer.status

    def peer_stored() -> bool:
        stored[:] = [r for r in _stored(remoting, TOPIC) if bytes(r.body) == b"hello peer"]
        return bool(stored)
    wait_for(peer_stored, 10, "the message without a born host")
    host, _, port = props.decode_properties(stored[0].properties)["__BORNHOST"].partition(":")
    assert host == "127.0.0.1" and int(port) > 0


def _refusals(stub):
    cases = [
        (_message(TOPIC, b"", "M1"), pb.MESSAGE_BODY_EMPTY, "message body cannot be empty"),
        (_message(TOPIC, b"x" * (1024 * 1024 + 1), "M2"), pb.MESSAGE_BODY_TOO_LARGE,
         "message body cannot exceed the max 1048576"),
        (_message(TOPIC, b"x", ""), pb.ILLEGAL_MESSAGE_ID, "message id cannot be empty"),
        (_message(TOPIC, b"x", "M3", tag="a|b"), pb.ILLEGAL_MESSAGE_TAG,
         "tag cannot contain '|'"),
        (pb.Message(topic=pb.Resource(name=TOPIC), body=b"x", user_properties={"TAGS": "t"},
                    system_properties=pb.SystemProperties(message_id="M4")),
         pb.ILLEGAL_MESSAGE_PROPERTY_KEY, "property is used by system: TAGS"),
        (_message(TOPIC, b"x", "M5", message_group="g1"), pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
         PROXY_EXCEPTION + "TopicMessageType validate failed, the expected type is NORMAL, but "
         "actual type is FIFO"),
        (_message("NoSuchTopic", b"x", "M6"), pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
         PROXY_EXCEPTION + "TopicMessageType validate failed, the expected type is "
         "UNSPECIFIED, but actual type is NORMAL"),
    ]
    for message, code, text in cases:
        answer = stub.SendMessage(spb.SendMessageRequest(messages=[message]), metadata=METADATA)
        assert (answer.status.code, answer.status.message) == (code, text), text
    empty = stub.SendMessage(spb.SendMessageRequest(), metadata=METADATA)
    assert (empty.status.code, empty.status.message) == (pb.MESSAGE_CORRUPTED,
                                                         "no message to send")


def _unparsable(port: int) -> None:
    """A request that does not parse: grpc.aio's status, also from the front's hand-off."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        raw = channel.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage")
        with pytest.raises(grpc.RpcError) as unparsable:
            raw(b"\xff\xff\xff", metadata=METADATA, timeout=10)
    with pytest.raises(DecodeError) as parse_error:
        spb.SendMessageRequest.FromString(b"\xff\xff\xff")
    assert (unparsable.value.code(), unparsable.value.details()) == (
        grpc.StatusCode.UNKNOWN, f"Unexpected {DecodeError}: {parse_error.value}")


def _half(stub, body: bytes, message_id: str):
    message = _message(TX_TOPIC, body, message_id, message_type=pb.TRANSACTION)
    answer = stub.SendMessage(spb.SendMessageRequest(messages=[message]), metadata=METADATA)
    assert answer.status.code == pb.OK, answer.status
    (entry,) = answer.entries
    assert entry.transaction_id == message_id
    return entry


def _end(stub, message_id: str, transaction_id: str, source=pb.SOURCE_CLIENT):
    return stub.EndTransaction(spb.EndTransactionRequest(
        topic=pb.Resource(name=TX_TOPIC), message_id=message_id, transaction_id=transaction_id,
        resolution=pb.COMMIT, source=source), metadata=METADATA)


def test_transactions_client_end_and_check_back(endpoint):
    _, remoting, stub, _ = endpoint
    telemetry = Telemetry(stub)
    try:
        telemetry.send(_producer_settings([TX_TOPIC]))
        assert telemetry.next().status.code == pb.OK
        committed = _half(stub, b"committed by the client", "TX-1")
        assert _end(stub, "TX-1", committed.transaction_id).status.code == pb.OK
        again = _end(stub, "TX-1", committed.transaction_id)
        assert (again.status.code, again.status.message) == (
            pb.INTERNAL_SERVER_ERROR, PROXY_EXCEPTION + "cannot found transaction data")
        blank = _end(stub, "TX-1", " ")
        assert (blank.status.code, blank.status.message) == (pb.INVALID_TRANSACTION_ID,
                                                             "transaction id cannot be empty")
        _half(stub, b"left to the check-back", "TX-2")
        command = telemetry.next(timeout_s=60)
        check = command.recover_orphaned_transaction_command
        assert check.transaction_id == "TX-2", command
        assert check.message.body == b"left to the check-back"
        # The check-back shows the half message as Java's proxy does: its REAL_TOPIC and
        # REAL_QID restored, the producer's own properties kept (and TRANSACTION_CHECK_TIMES,
        # which is not in Java's MessageConst.STRING_HASH_SET, as a user property).
        assert check.message.topic.name == TX_TOPIC
        assert check.message.system_properties.message_type == pb.TRANSACTION
        assert dict(check.message.user_properties) == {"color": "blue",
                                                       "TRANSACTION_CHECK_TIMES": "1"}
        shown_queue_id = check.message.system_properties.queue_id
        ended = _end(stub, "TX-2", check.transaction_id, pb.SOURCE_SERVER_CHECK)
        assert ended.status.code == pb.OK
        wanted = {b"committed by the client", b"left to the check-back"}
        wait_for(lambda: wanted <= {bytes(r.body) for r in _stored(remoting, TX_TOPIC)}, 30,
                 "both transactional messages committed into their topic")
        [committed_queue_id] = [r.queue_id for r in _stored(remoting, TX_TOPIC)
                                if bytes(r.body) == b"left to the check-back"]
        assert shown_queue_id == committed_queue_id
    finally:
        telemetry.close()


def test_consumer_settings_registration_and_assignment(endpoint):
    _, remoting, stub, port = endpoint
    telemetry = Telemetry(stub)
    try:
        telemetry.send(spb.TelemetryCommand(settings=pb.Settings(
            client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(
                group=pb.Resource(name="GrpcGroup"), subscriptions=[pb.SubscriptionEntry(
                    topic=pb.Resource(name=TOPIC),
                    expression=pb.FilterExpression(type=pb.TAG, expression="TagA||TagB"))]))))
        answer = telemetry.next()
        assert answer.status.code == pb.OK
        settings = answer.settings
        assert settings.subscription.receive_batch_size == 32
        assert settings.subscription.long_polling_timeout.ToMilliseconds() == 10000
        assert not settings.subscription.fifo
        assert settings.backoff_policy.max_attempts == 17          # retryMaxTimes 16 + 1
        steps = [step.ToMilliseconds() for step in settings.backoff_policy.customized_backoff.next]
        assert steps[:3] == [1000, 5000, 10000] and len(steps) == 18
        heartbeat = stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER,
                                                        group=pb.Resource(name="GrpcGroup")),
                                   metadata=METADATA)
        assert heartbeat.status.code == pb.OK
        members = remoting.invoke(create_request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                 {"consumerGroup": "GrpcGroup"}), 5000)
        assert members.code == ResponseCode.SUCCESS and CLIENT_ID.encode() in members.body
        assignment = stub.QueryAssignment(spb.QueryAssignmentRequest(
            topic=pb.Resource(name=TOPIC), group=pb.Resource(name="GrpcGroup"),
            endpoints=_endpoints(port)), metadata=METADATA)
        assert assignment.status.code == pb.OK
        assert [a.message_queue.id for a in assignment.assignments] == [-1]
        end = stub.NotifyClientTermination(spb.NotifyClientTerminationRequest(
            group=pb.Resource(name="GrpcGroup")), metadata=METADATA)
        assert end.status.code == pb.OK
        wait_for(lambda: CLIENT_ID.encode() not in (remoting.invoke(create_request(
            RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "GrpcGroup"}),
            5000).body or b""), 10, "the consumer unregistered")
        telemetry.send(spb.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER)))
        ended = telemetry.next()
        assert isinstance(ended, grpc.RpcError)
        assert ended.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert ended.details() == "there is no publishing or subscription data in settings"
    finally:
        telemetry.close()


def test_recall_needs_a_delay_topic_and_timer_messages(endpoint):
    _, _, stub, _ = endpoint
    wrong = stub.RecallMessage(spb.RecallMessageRequest(topic=pb.Resource(name=TOPIC),
                                                        recall_handle="h"), metadata=METADATA)
    assert (wrong.status.code, wrong.status.message) == (
        pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, PROXY_EXCEPTION + "TopicMessageType validate "
        "failed, the expected type is NORMAL, but actual type is DELAY")


# --- consumers: ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDLQ ---------

CONSUME_TOPIC = "GrpcConsumeTopic"
CONSUME_GROUP = "GrpcConsumeGroup"        # retryMaxTimes 1: two deliveries, then the DLQ
FIFO_TOPIC = "GrpcFifoTopic"
FIFO_GROUP = "GrpcFifoGroup"              # consumeMessageOrderly


def _create(remoting, topic: str, message_type: str, group: str, **group_settings) -> None:
    answer = remoting.invoke(create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "2", "writeQueueNums": "2",
        "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false",
        "attributes": f"+message.type={message_type}"}), 5000)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    config = {"groupName": group, "consumeEnable": True, "consumeFromMinEnable": True,
              "consumeBroadcastEnable": True, "retryQueueNums": 1, "retryMaxTimes": 16,
              "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
              "notifyConsumerIdsChangedEnable": True, **group_settings}
    answer = remoting.invoke(create_request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                                            json.dumps(config).encode()), 5000)
    assert answer.code == ResponseCode.SUCCESS, answer.remark


def _consumer(stub, group: str, topic: str, expression: str = "*") -> Telemetry:
    telemetry = Telemetry(stub)
    telemetry.send(spb.TelemetryCommand(settings=pb.Settings(
        client_type=pb.SIMPLE_CONSUMER, request_timeout=duration_pb2.Duration(seconds=3),
        subscription=pb.Subscription(group=pb.Resource(name=group), subscriptions=[
            pb.SubscriptionEntry(topic=pb.Resource(name=topic), expression=pb.FilterExpression(
                type=pb.TAG, expression=expression))]))))
    assert telemetry.next().status.code == pb.OK
    return telemetry


def _receive(stub, group: str, topic: str, *, invisible_ms: int | None = 20000,
             polling_ms: int = 2000, batch: int = 32, expression=None, attempt_id=None,
             deadline_s: float = 30):
    """(status, messages, the last response) of one ReceiveMessage."""
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), message_queue=pb.MessageQueue(
            topic=pb.Resource(name=topic), id=-1), batch_size=batch,
        filter_expression=expression or pb.FilterExpression(type=pb.TAG, expression="*"))
    request.long_polling_timeout.FromMilliseconds(polling_ms)
    if invisible_ms is not None:
        request.invisible_duration.FromMilliseconds(invisible_ms)
    else:
        request.auto_renew = True
    if attempt_id is not None:
        request.attempt_id = attempt_id
    answers = list(stub.ReceiveMessage(request, metadata=METADATA, timeout=deadline_s))
    assert answers[-1].WhichOneof("content") == "delivery_timestamp", answers
    assert answers[0].WhichOneof("content") == "status", answers
    return answers[0].status, [a.message for a in answers[1:-1]], answers[-1]


def _send(stub, topic: str, body: str, **system) -> None:
    answer = stub.SendMessage(spb.SendMessageRequest(messages=[_message(
        topic, body.encode(), f"ID-{body}", **system)]), metadata=METADATA)
    assert answer.status.code == pb.OK, answer.status


def _ack(stub, group: str, topic: str, *messages_or_handles):
    entries = [spb.AckMessageEntry(message_id=getattr(m, "system_properties", None) and
                                   m.system_properties.message_id or "x",
                                   receipt_handle=m if isinstance(m, str) else
                                   m.system_properties.receipt_handle)
               for m in messages_or_handles]
    return stub.AckMessage(spb.AckMessageRequest(group=pb.Resource(name=group),
                                                 topic=pb.Resource(name=topic), entries=entries),
                           metadata=METADATA)


def _change(stub, group: str, topic: str, handle: str, invisible_ms: int):
    request = spb.ChangeInvisibleDurationRequest(group=pb.Resource(name=group),
                                                 topic=pb.Resource(name=topic),
                                                 receipt_handle=handle, message_id="m")
    request.invisible_duration.FromMilliseconds(invisible_ms)
    return stub.ChangeInvisibleDuration(request, metadata=METADATA)


def _bodies(found) -> list[str]:
    return sorted(message.body.decode() for message in found)


def test_simple_consumer_receive_ack_change_and_dlq(endpoint):
    """Long polling woken by a send, tag filters, handles with the CommitLog offset, acks,
    a new handle that brings the message back (attempt 2), the DLQ by the group's attempts
    and by ForwardMessageToDeadLetterQueue, the proxy's refusals."""
    _, remoting, stub, _ = endpoint
    _create(remoting, CONSUME_TOPIC, "NORMAL", CONSUME_GROUP, retryMaxTimes=1)
    telemetry = _consumer(stub, CONSUME_GROUP, CONSUME_TOPIC)
    try:
        started = time.monotonic()
        status, found, _ = _receive(stub, CONSUME_GROUP, CONSUME_TOPIC, polling_ms=1500)
        assert (status.code, status.message, found) == (pb.MESSAGE_NOT_FOUND, "no new message",
                                                         [])
        assert 1.3 < time.monotonic() - started < 10
        held = threading.Thread(target=lambda: woken.append(_receive(
            stub, CONSUME_GROUP, CONSUME_TOPIC, polling_ms=10000,
            expression=pb.FilterExpression(type=pb.TAG, expression="TagA"))))
        woken: list = []
        held.start()
        time.sleep(0.5)
        started = time.monotonic()
        for body, tag in (("c-0", "TagA"), ("c-1", "TagA"), ("c-2", "TagA"), ("c-b", "TagB")):
            _send(stub, CONSUME_TOPIC, body, tag=tag)
        held.join(20)
        ((status, first, _),) = woken
        # Answered on arrival, long before its 10 s poll ends.
        assert status.code == pb.OK and time.monotonic() - started < 5
        found = list(first)
        while len(found) < 3:
            more = _receive(stub, CONSUME_GROUP, CONSUME_TOPIC,
                            expression=pb.FilterExpression(type=pb.TAG, expression="TagA"))[1]
            assert more, _bodies(found)
            found += more
        assert _bodies(found) == ["c-0", "c-1", "c-2"]
        by_body = {message.body.decode(): message for message in found}
        _check_received(remoting, by_body["c-0"])
        _acks_and_refusals(stub, by_body)
        _redelivery_and_dlq(stub, remoting, by_body)
    finally:
        telemetry.close()


def _check_received(remoting, message) -> None:
    system = message.system_properties
    assert (system.tag, system.message_id, system.delivery_attempt) == ("TagA", "ID-c-0", 1)
    assert message.topic.name == CONSUME_TOPIC and message.user_properties == {"color": "blue"}
    handle = system.receipt_handle.split(" ")
    assert len(handle) == 9 and handle[4:7] == ["0", "broker-a", str(system.queue_id)]
    assert int(handle[7]) == system.queue_offset
    (stored,) = [r for r in _stored(remoting, CONSUME_TOPIC) if bytes(r.body) == b"c-0"]
    assert int(handle[8]) == stored.physical_offset


def _acks_and_refusals(stub, by_body) -> None:
    answer = _ack(stub, CONSUME_GROUP, CONSUME_TOPIC, by_body["c-0"])
    assert answer.status.code == pb.OK and [e.status.code for e in answer.entries] == [pb.OK]
    mixed = _ack(stub, CONSUME_GROUP, CONSUME_TOPIC, "not-a-handle", "1 2 3 4 0 b 0 x 9")
    assert (mixed.status.code, mixed.status.message) == (pb.INTERNAL_SERVER_ERROR,
                                                         "INTERNAL_SERVER_ERROR")
    # The proxy's messages name the top Java stack frame (5.3.3 on Java 17, checked against it).
    assert [(e.status.code, e.status.message) for e in mixed.entries] == [
        (pb.INTERNAL_SERVER_ERROR, "Parse failed, dataList size 1. IllegalArgumentException. "
         "org.apache.rocketmq.common.consumer.ReceiptHandle.decode(ReceiptHandle.java:56)"),
        (pb.INTERNAL_SERVER_ERROR, 'For input string: "x". NumberFormatException. java.base/'
         'java.lang.NumberFormatException.forInputString(NumberFormatException.java:67)')]
    expired = _ack(stub, CONSUME_GROUP, CONSUME_TOPIC, "0 1000 1000 0 0 broker-a 0 0 0")
    assert (expired.entries[0].status.code, expired.entries[0].status.message) == (
        pb.INVALID_RECEIPT_HANDLE, PROXY_EXCEPTION + "receipt handle is expired")
    both = _ack(stub, CONSUME_GROUP, CONSUME_TOPIC, by_body["c-1"], "not-a-handle")
    assert both.status.code == pb.MULTIPLE_RESULTS
    empty = _ack(stub, CONSUME_GROUP, CONSUME_TOPIC)
    assert (empty.status.code, empty.status.message) == (pb.INTERNAL_SERVER_ERROR,
                                                         "ack message result is empty")
    small = _receive(stub, CONSUME_GROUP, CONSUME_TOPIC, invisible_ms=5000)[0]
    assert (small.code, small.message) == (pb.ILLEGAL_INVISIBLE_TIME,
                                           "the invisibleTime is too small. min is 10000")
    large = _change(stub, CONSUME_GROUP, CONSUME_TOPIC, "h", 13 * 3600 * 1000)
    assert (large.status.code, large.status.message) == (
        pb.ILLEGAL_INVISIBLE_TIME, "the invisibleTime is too large. max is 43200000")
    bad_sql = _receive(stub, CONSUME_GROUP, CONSUME_TOPIC,
                       expression=pb.FilterExpression(type=pb.SQL, expression="a >"))[0]
    assert (bad_sql.code, bad_sql.message) == (pb.INTERNAL_SERVER_ERROR,
                                               "parse the consumer's subscription failed")
    empty_sql = _receive(stub, CONSUME_GROUP, CONSUME_TOPIC,
                         expression=pb.FilterExpression(type=pb.SQL, expression=""))[0]
    assert (empty_sql.code, empty_sql.message) == (pb.ILLEGAL_FILTER_EXPRESSION,
                                                   "Expression can't be null! SQL92")
    unknown = _change(stub, CONSUME_GROUP, CONSUME_TOPIC,
                      f"0 {int(time.time() * 1000)} 60000 0 0 broker-a 0 99 0", 20000)
    assert (unknown.status.code, unknown.status.message) == (
        pb.INTERNAL_SERVER_ERROR, "changeInvisibleDuration failed: status is abnormal")
    no_offset = stub.ForwardMessageToDeadLetterQueue(spb.ForwardMessageToDeadLetterQueueRequest(
        group=pb.Resource(name=CONSUME_GROUP), topic=pb.Resource(name=CONSUME_TOPIC),
        receipt_handle="0 1000 1000 0 0 broker-a 0 0", message_id="m"), metadata=METADATA)
    assert (no_offset.status.code, no_offset.status.message) == (
        pb.INVALID_RECEIPT_HANDLE, PROXY_EXCEPTION + "commit log offset is empty")
    no_settings = stub.ReceiveMessage(spb.ReceiveMessageRequest(
        group=pb.Resource(name=CONSUME_GROUP),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=CONSUME_TOPIC))),
        metadata=(("x-mq-client-id", "nobody"),))
    no_settings = list(no_settings)
    assert [a.WhichOneof("content") for a in no_settings] == ["status", "delivery_timestamp"]
    assert no_settings[0].status.code == pb.INTERNAL_SERVER_ERROR
    assert "NullPointerException" in no_settings[0].status.message


def _redelivery_and_dlq(stub, remoting, by_body) -> None:
    changed = _change(stub, CONSUME_GROUP, CONSUME_TOPIC,
                      by_body["c-2"].system_properties.receipt_handle, 0)
    assert changed.status.code == pb.OK and changed.receipt_handle.count(" ") == 8
    forwarded = stub.ForwardMessageToDeadLetterQueue(spb.ForwardMessageToDeadLetterQueueRequest(
        group=pb.Resource(name=CONSUME_GROUP), topic=pb.Resource(name=CONSUME_TOPIC),
        receipt_handle=by_body["c-1"].system_properties.receipt_handle, message_id="ID-c-1",
        delivery_attempt=1, max_delivery_attempts=2), metadata=METADATA)
    assert forwarded.status.code == pb.OK, forwarded.status
    # TagA, as the first receives: whether those stepped past c-b (TagB) depends on when the
    # dispatcher wrote its queue entry; a receive of every tag could get it here.
    tag_a = pb.FilterExpression(type=pb.TAG, expression="TagA")
    again = []
    wait_for(lambda: again.extend(_receive(stub, CONSUME_GROUP, CONSUME_TOPIC,
                                           expression=tag_a)[1]) or again,
             30, "c-2 back after its invisible time")
    assert [(m.body, m.system_properties.delivery_attempt) for m in again] == [(b"c-2", 2)]
    assert again[0].topic.name == CONSUME_TOPIC
    # Its second delivery was the group's last: back once more, it goes to the DLQ.
    assert _change(stub, CONSUME_GROUP, CONSUME_TOPIC,
                   again[0].system_properties.receipt_handle, 0).status.code == pb.OK
    dlq = f"%DLQ%{CONSUME_GROUP}"
    wait_for(lambda: _receive(stub, CONSUME_GROUP, CONSUME_TOPIC, expression=tag_a)[1] == [] and
             len(_dlq_records(remoting, dlq)) == 2, 30, "c-1 and c-2 in the DLQ")
    assert sorted(bytes(r.body) for r in _dlq_records(remoting, dlq)) == [b"c-1", b"c-2"]


def _dlq_records(remoting, topic: str) -> list:
    answer = pull(remoting, topic, 0, 0)
    return records_of(answer.body) if answer.code == ResponseCode.SUCCESS else []


def test_fifo_consumer_receives_in_order(endpoint):
    """A consumeMessageOrderly group receives each message group in order (order POP): the
    next message waits until the one before is acked; a retried receive with its attempt id
    gets the same messages."""
    _, remoting, stub, _ = endpoint
    _create(remoting, FIFO_TOPIC, "FIFO", FIFO_GROUP, consumeMessageOrderly=True)
    telemetry = _consumer(stub, FIFO_GROUP, FIFO_TOPIC)
    try:
        for index in range(4):
            _send(stub, FIFO_TOPIC, f"f-{index}", message_group="g1")
        received: list[str] = []
        for _ in range(10):
            status, found, _ = _receive(stub, FIFO_GROUP, FIFO_TOPIC, batch=2,
                                        attempt_id=f"attempt-{len(received)}")
            if not found:
                continue
            retried = _receive(stub, FIFO_GROUP, FIFO_TOPIC, batch=2,
                               attempt_id=f"attempt-{len(received)}")[1]
            assert [m.body for m in retried] == [m.body for m in found]
            assert all(m.system_properties.message_group == "g1" for m in found)
            blocked = _receive(stub, FIFO_GROUP, FIFO_TOPIC, batch=2, polling_ms=1000)[1]
            assert blocked == [], "the queue's next messages wait for the ack"
            received += [m.body.decode() for m in found]
            assert _ack(stub, FIFO_GROUP, FIFO_TOPIC, *retried).status.code == pb.OK
            if len(received) == 4:
                break
        assert received == [f"f-{index}" for index in range(4)]
    finally:
        telemetry.close()
