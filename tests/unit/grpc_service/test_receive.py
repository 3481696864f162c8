"""The gRPC receive rules that need no broker: how long a receive's POP is held (the proxy's
polling time from the request, the client's request timeout and the call's deadline) and how
a receipt handle parses, with the proxy's refusals.

Method: table-driven cases written from Java 5.3.3's ReceiveMessageActivity and
ReceiptHandle.decode; the refusal texts are those rocketmq-proxy 5.3.3 answered for the same
handles (seen once against it, Java 17).
"""
import dataclasses

import pytest
from google.protobuf import duration_pb2

from pybroker.config import GrpcConfig
from pybroker.grpc_service import consumer
from pybroker.grpc_service.receive import polling_time_ms
from pybroker.grpc_service.status import GrpcRefused
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb

GRPC = GrpcConfig()          # min 5000, max 20000 (the proxy's defaults)


@dataclasses.dataclass
class _Client:
    client_version: str


def _request(long_polling_ms: int | None) -> spb.ReceiveMessageRequest:
    request = spb.ReceiveMessageRequest()
    if long_polling_ms is not None:
        request.long_polling_timeout.FromMilliseconds(long_polling_ms)
    return request


SETTINGS = pb.Settings(request_timeout=duration_pb2.Duration(seconds=3))


@pytest.mark.parametrize("long_polling_ms, remaining_ms, expected", [
    (15000, 60000, 15000),          # the request's
    (1000, 60000, 5000),            # at least the minimum
    (60000, 90000, 20000),          # at most the maximum
    (None, 30000, 20000),           # deadline - request timeout / 2, capped
    (None, 12000, 10500),
    (None, 6000, 5000),             # the minimum (the call still outlives it)
    (15000, 8000, 8000),            # the call ends first: what is left
    (15000, None, 15000),           # no deadline
    (None, None, 20000),
])
def test_polling_time(long_polling_ms, remaining_ms, expected):
    assert polling_time_ms(GRPC, _Client("5.0.8"), _request(long_polling_ms), SETTINGS,
                           remaining_ms) == expected


@pytest.mark.parametrize("version, code", [("5.0.8", pb.ILLEGAL_POLLING_TIME),
                                           ("5.0.3", pb.ILLEGAL_POLLING_TIME),
                                           ("5.0.2", pb.BAD_REQUEST), ("", pb.BAD_REQUEST)])
def test_polling_time_refused_when_the_call_ends_too_soon(version, code):
    with pytest.raises(GrpcRefused) as refused:
        polling_time_ms(GRPC, _Client(version), _request(15000), SETTINGS, 3000)
    assert (refused.value.code, refused.value.message) == (
        code, "The deadline time remaining is not enough for polling, please check network "
        "condition")


def test_receipt_handle_parses_as_the_proxy_reads_it():
    handle = consumer.decode_handle("12 1700000000000 30000 3 1 broker-a 2 14 5678")
    assert (handle.start_offset, handle.retrieve_time, handle.invisible_time,
            handle.revive_queue_id, handle.retry, handle.broker_name, handle.queue_id,
            handle.offset, handle.commit_log_offset) == (12, 1700000000000, 30000, 3, "1",
                                                         "broker-a", 2, 14, 5678)
    assert handle.expired
    assert handle.real_topic("T", "G") == "%RETRY%G_T"
    assert consumer.decode_handle("12 1 2 3 0 b 2 14").commit_log_offset == -1
    assert consumer.grpc_handle("12 1 2 3 0 b 2 14", 99) == "12 1 2 3 0 b 2 14 99"


@pytest.mark.parametrize("text, message", [
    ("", "Parse failed, dataList size 0. IllegalArgumentException. "
         "org.apache.rocketmq.common.consumer.ReceiptHandle.decode(ReceiptHandle.java:56)"),
    ("1 2 3 4 0 b 0", "Parse failed, dataList size 7. IllegalArgumentException. "
                      "org.apache.rocketmq.common.consumer.ReceiptHandle.decode("
                      "ReceiptHandle.java:56)"),
    ("1 2 3 4 0 b 0 x 9", 'For input string: "x". NumberFormatException. java.base/'
                          'java.lang.NumberFormatException.forInputString('
                          'NumberFormatException.java:67)'),
])
def test_receipt_handle_refusals(text, message):
    with pytest.raises(Exception) as refused:
        consumer.decode_handle(text)
    assert str(refused.value) == message


def test_invisible_time_limits():
    consumer.validate_invisible_time(GRPC, 10000, 10000)
    with pytest.raises(GrpcRefused) as small:
        consumer.validate_invisible_time(GRPC, 9999, 10000)
    assert (small.value.code, small.value.message) == (
        pb.ILLEGAL_INVISIBLE_TIME, "the invisibleTime is too small. min is 10000")
    with pytest.raises(GrpcRefused) as large:
        consumer.validate_invisible_time(GRPC, 43200001)
    assert (large.value.code, large.value.message) == (
        pb.ILLEGAL_INVISIBLE_TIME, "the invisibleTime is too large. max is 43200000")
