"""Goal: a RocketMQ 5 SDK's delay message sent to pybroker's gRPC endpoint is a timer message:
held until its delivery timestamp (never early, at most one timerPrecisionMs plus the broker's
latency late), its send answer carries a recall handle, and RecallMessage with that handle
cancels it (the proxy's RecallMessageActivity forwards to the broker's RECALL_MESSAGE).

Method: one `pybroker standalone` with grpcWorkers=1 and recallMessageEnable=true, a DELAY
topic, grpcio's client with the vendored stubs (as tests/broker/test_grpc_endpoint.py speaks);
the stored messages are read back with raw remoting pulls. Short delays (2 and 3 s).
"""
import time

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

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TOPIC = "GrpcTimerTopic"
METADATA = (("x-mq-client-id", "timer-client@1"), ("x-mq-language", "JAVA"),
            ("x-mq-protocol", "GRPC_V2"), ("x-mq-client-version", "5.0.7"))
PRECISION_MS = 1000
BROKER_LATENCY_MS = 400       # the wake-up and re-put on a loaded 2-core box (test_timer_broker)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _delay_message(body: bytes, message_id: str, deliver_ms: int) -> pb.Message:
    delivery = pb.SystemProperties().delivery_timestamp
    delivery.FromMilliseconds(deliver_ms)
    system = pb.SystemProperties(message_id=message_id, message_type=pb.DELAY,
                                 delivery_timestamp=delivery)
    return pb.Message(topic=pb.Resource(name=TOPIC), body=body, system_properties=system)


def _stored(remoting) -> dict[bytes, list]:
    found: dict[bytes, list] = {}
    for queue_id in range(4):
        answer = pull(remoting, TOPIC, queue_id, 0)
        if answer.code == ResponseCode.SUCCESS:
            for record in records_of(answer.body):
                found.setdefault(bytes(record.body), []).append(record)
    return found


def test_grpc_delay_messages_are_timer_messages(tmp_path):
    port = free_port()
    with StandaloneBroker(tmp_path / "b", {"grpcWorkers": "1", "grpcServerPort": str(port),
                                           "recallMessageEnable": "true"}) as broker:
        remoting = client_for(broker.broker_addr)
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        try:
            created = remoting.invoke(create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
                "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "4",
                "writeQueueNums": "4", "perm": "6", "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": "0", "order": "false", "attributes": "+message.type=DELAY"}),
                5000)
            assert created.code == ResponseCode.SUCCESS, created.remark
            grpc.channel_ready_future(channel).result(timeout=30)
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            deliver_ms = _now_ms() + 2000
            kept = stub.SendMessage(spb.SendMessageRequest(messages=[_delay_message(
                b"kept", "TIMER-GRPC-1", deliver_ms)]), metadata=METADATA)
            assert kept.status.code == pb.OK, kept.status
            recalled = stub.SendMessage(spb.SendMessageRequest(messages=[_delay_message(
                b"recalled", "TIMER-GRPC-2", _now_ms() + 3000)]), metadata=METADATA)
            (entry,) = recalled.entries
            assert entry.status.code == pb.OK and entry.recall_handle, recalled
            assert kept.entries[0].recall_handle
            recall = stub.RecallMessage(spb.RecallMessageRequest(
                topic=pb.Resource(name=TOPIC), recall_handle=entry.recall_handle),
                metadata=METADATA)
            assert (recall.status.code, recall.message_id) == (pb.OK, "TIMER-GRPC-2"), recall
            assert b"kept" not in _stored(remoting)          # parked, not in the topic yet
            found = wait_for(lambda: _stored(remoting).get(b"kept"), 15, "the delay message")
            (record,) = found
            assert deliver_ms <= record.store_timestamp <= \
                deliver_ms + PRECISION_MS + BROKER_LATENCY_MS, (deliver_ms,
                                                                record.store_timestamp)
            properties = props.decode_properties(record.properties)
            assert properties["REAL_TOPIC"] == TOPIC and "TIMER_DEQUEUE_MS" in properties
            # The recalled message's slot passes: it never comes.
            time.sleep(max(deliver_ms + 1000 + PRECISION_MS + BROKER_LATENCY_MS - _now_ms(),
                           0) / 1000)
            assert b"recalled" not in _stored(remoting)
        finally:
            channel.close()
            remoting.close()
