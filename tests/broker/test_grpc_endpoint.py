"""Goal: a pybroker standalone with grpcWorkers=1 serves RocketMQ 5's MessagingService on its
gRPC port as the Java 5.3.3 proxy answers it: routes, client settings over Telemetry,
heartbeats, sends stored through the remoting send path, the proxy's refusals with their codes
and messages, transactions ended by the client and by a server check-back, termination.

Method: one real broker process (free ports, short transaction checks) and grpcio's own
client with the vendored stubs, speaking as an SDK does (its metadata headers, a Telemetry
stream); what was stored is read back with raw remoting pulls of the broker's queues.
"""
import queue
import threading

import grpc
import pytest

from pybroker._testbase.cluster import StandaloneBroker, free_port
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb
from pybroker.protocol.rocketmq_v2 import service_pb2_grpc
from tests.ha_support import client_for, pull, records_of, wait_for

pytestmark = [pytest.mark.timeout(180)]

TOPIC = "GrpcTopic"
TX_TOPIC = "GrpcTxTopic"
CLIENT_ID = "test-client@1"
# The proxy's ProxyException refusals carry the exception's name (as SDKs behind it show).
PROXY_EXCEPTION = "org.apache.rocketmq.proxy.common.ProxyException: "
METADATA = (("x-mq-client-id", CLIENT_ID), ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "GRPC_V2"), ("x-mq-client-version", "5.1.2"))


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    port = free_port()
    broker = StandaloneBroker(tmp_path_factory.mktemp("grpc"), {
        "grpcWorkers": "1", "grpcServerPort": str(port), "transactionCheckInterval": "1000",
        "transactionTimeOut": "1000"})
    broker.start()
    try:
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
                        "No topic route info in name server for the topic: NoSuchTopic"),
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
    broker, remoting, stub, _ = endpoint
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


def test_consumer_rpcs_wait_for_pop(endpoint):
    _, _, stub, _ = endpoint
    answers = list(stub.ReceiveMessage(spb.ReceiveMessageRequest(
        group=pb.Resource(name="GrpcGroup"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC))), metadata=METADATA))
    assert [a.status.code for a in answers] == [pb.NOT_IMPLEMENTED]


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
        assert settings.subscription.long_polling_timeout.ToMilliseconds() == 20000
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
