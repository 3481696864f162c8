"""The gRPC send rules that need no broker: the proxy's queue choice for a message group
(Guava's consistentHash of the group's Java hashCode), the checks and stored properties of a
gRPC message, and a stored record shown as a gRPC message.

Method: table-driven vectors; the consistent-hash table was printed by Guava 32.0.1 (the
proxy's) for these keys and bucket counts.
"""
import pytest

from pybroker._fast import record
from pybroker._fast.jhash import java_hash
from pybroker.config import GrpcConfig
from pybroker.grpc_service import messages
from pybroker.grpc_service.producer import consistent_hash
from pybroker.grpc_service.status import GrpcRefused
from pybroker.protocol.properties import encode_properties
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb

GUAVA = [
    ('group-0', 1, 0),
    ('group-0', 4, 1),
    ('group-0', 8, 1),
    ('group-0', 16, 1),
    ('group-0', 7, 1),
    ('group-1', 1, 0),
    ('group-1', 4, 1),
    ('group-1', 8, 7),
    ('group-1', 16, 15),
    ('group-1', 7, 1),
    ('order-42', 1, 0),
    ('order-42', 4, 3),
    ('order-42', 8, 3),
    ('order-42', 16, 10),
    ('order-42', 7, 3),
    ('', 1, 0),
    ('', 4, 0),
    ('', 8, 0),
    ('', 16, 0),
    ('', 7, 0),
    ('x', 1, 0),
    ('x', 4, 1),
    ('x', 8, 4),
    ('x', 16, 12),
    ('x', 7, 4),
    ('长消息组', 1, 0),
    ('长消息组', 4, 0),
    ('长消息组', 8, 5),
    ('长消息组', 16, 11),
    ('长消息组', 7, 5),
]


@pytest.mark.parametrize("key, buckets, expected", GUAVA)
def test_message_group_queue_is_guavas_consistent_hash(key, buckets, expected):
    assert consistent_hash(java_hash(key), buckets) == expected


def _message(**system) -> pb.Message:
    system.setdefault("message_id", "ID-1")
    return pb.Message(topic=pb.Resource(name="T"), body=b"body",
                      system_properties=pb.SystemProperties(**system))


def test_outgoing_properties_as_the_proxy_stores_them():
    delivery = pb.SystemProperties().delivery_timestamp
    delivery.FromMilliseconds(1_000_000 + 5000)
    out = messages.outgoing(_message(tag="A", keys=["k1"], message_group="g",
                                     delivery_timestamp=delivery, delivery_attempt=2),
                            "T", "10.0.0.1:5", GrpcConfig(), 1 << 20, now_ms=1_000_000)
    assert out.properties == {"TAGS": "A", "KEYS": "k1", "UNIQ_KEY": "ID-1",
                              "TIMER_DELIVER_MS": "1005000", "RECONSUME_TIME": "2",
                              "PGROUP": "T", "__SHARDINGKEY": "g", "__BORNHOST": "10.0.0.1:5"}
    assert messages.message_type_of_properties(out.properties) == "DELAY"


@pytest.mark.parametrize("system, code, text", [
    ({"message_group": " "}, pb.ILLEGAL_MESSAGE_GROUP,
     "message group cannot be the char sequence of whitespace"),
    ({"message_group": "g" * 64}, pb.ILLEGAL_MESSAGE_GROUP,
     "message group exceed the max size 64"),
    ({"keys": ["a\x01"]}, pb.ILLEGAL_MESSAGE_KEY, "key cannot contain control character"),
    ({"tag": " "}, pb.ILLEGAL_MESSAGE_TAG, "tag cannot be the char sequence of whitespace"),
])
def test_refusals_with_the_proxys_codes(system, code, text):
    with pytest.raises(GrpcRefused) as refused:
        messages.outgoing(_message(**system), "T", "1.2.3.4:5", GrpcConfig(), 1 << 20)
    assert (refused.value.code, refused.value.message) == (code, text)


def test_stored_record_as_a_grpc_message():
    properties = encode_properties({"TAGS": "A", "KEYS": "k1 k2", "UNIQ_KEY": "ID-9",
                                    "__SHARDINGKEY": "g", "color": "red", "PGROUP": "T"})
    host = bytes([127, 0, 0, 1])
    size = record.encoded_size(4, 1, len(properties.encode()), 0)
    buffer = bytearray(size)
    record.encode_into(buffer, 0, b"T", 3, 0, b"body", properties.encode(), 0, 1234, host, 9,
                       host, 10911, 1, 0, 7, 100, 5678)
    shown = messages.from_record(record.decode(buffer, 0), now_ms=0)
    system = shown.system_properties
    assert (shown.topic.name, shown.body, dict(shown.user_properties)) == (
        "T", b"body", {"color": "red", "__SHARDINGKEY": "g"})
    assert (system.tag, list(system.keys), system.message_id) == ("A", ["k1", "k2"], "ID-9")
    assert (system.message_type, system.message_group) == (pb.FIFO, "g")
    assert (system.queue_id, system.queue_offset, system.delivery_attempt) == (3, 7, 2)
    assert system.body_digest.checksum == "841A2D689AD86BD1611447453C22C6FC"   # MD5("body")
    assert system.store_host == "127.0.0.1:10911" and system.born_host == "127.0.0.1:9"


def test_timestamps_as_protobuf_makes_them_from_milliseconds(rand):
    """messages._timestamp builds a Timestamp in one call: the same as FromMilliseconds for
    seeded times and the range's edges, and the same ValueError past them."""
    from google.protobuf import timestamp_pb2
    edges = [0, -1, 999, -1000, -62_135_596_800_000, 253_402_300_799_999]
    for milliseconds in edges + [rand.randrange(-1 << 45, 1 << 45) for _ in range(500)]:
        expected = timestamp_pb2.Timestamp()
        expected.FromMilliseconds(milliseconds)
        assert messages._timestamp(milliseconds) == expected, milliseconds
    for milliseconds in (-62_135_596_800_001, 253_402_300_800_000, 1 << 62):
        with pytest.raises(ValueError, match="Timestamp is not valid"):
            messages._timestamp(milliseconds)
