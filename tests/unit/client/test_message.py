"""Client message codecs: compression, batch bodies, and decoding pull bodies captured from Java.

Method: compress/inflate round trips with zlib as the oracle and a zip bomb that must stop at
the bound; batch bodies re-split by the broker-side ``record.split_batch`` and compared with the
batch body the Java 4.9.8 producer sent; PULL_MESSAGE responses captured from a real 4.9.8 broker
decoded field by field (ids rebuilt from store host and physical offset), then truncated at
every byte and corrupted, which must raise ProtocolError rather than crash or over-read.
"""
import json
import pathlib
import zlib

import pytest

from pybroker._fast import record
from pybroker.client.message import (Message, MessageExt, compress_body, decode_messages,
                                     encode_batch, inflate_body)
from pybroker.errors import ProtocolError
from pybroker.protocol import command
from pybroker.protocol.constants import MessageSysFlag, Property
from pybroker.protocol.properties import decode_properties

GOLDEN = pathlib.Path(__file__).resolve().parents[2] / "golden" / "java-4.9.8"


def _frames(name: str) -> list:
    out = []
    for line in (GOLDEN / f"{name}.jsonl").read_text().splitlines():
        raw = bytes.fromhex(json.loads(line)["hex"])
        out.append(command.decode(raw, 0, len(raw), copy_body=True))
    return out


def test_message_properties_from_arguments():
    message = Message("T", "héllo", tags="TagA", keys=["k1", "k2"], properties={"u": "1"},
                      delay_level=3, wait_store_ok=False)
    assert message.body == "héllo".encode()
    assert (message.tags, message.keys, message.delay_level) == ("TagA", ["k1", "k2"], 3)
    assert message.properties[Property.KEYS] == "k1 k2"
    assert message.properties[Property.WAIT_STORE_MSG_OK] == "false"
    assert message.properties["u"] == "1"
    message.delay_level = 0
    assert Property.DELAY_TIME_LEVEL not in message.properties
    for bad in (-1, "2"):
        with pytest.raises(ValueError):
            message.delay_level = bad
    with pytest.raises(ValueError):
        message.put_user_property("", "x")


def test_compression_threshold_and_round_trip(rand):
    small = bytes(rand.randrange(256) for _ in range(100))
    assert compress_body(small, 4096) == (small, 0)
    text = (b"pybroker " * 1000)[:5000]
    wire, flags = compress_body(text, 4096)
    assert flags == int(MessageSysFlag.COMPRESSED | MessageSysFlag.COMPRESSION_ZLIB_TYPE)
    assert zlib.decompress(wire) == text and len(wire) < len(text)
    assert inflate_body(wire, flags) == text
    assert inflate_body(wire, int(MessageSysFlag.COMPRESSED)) == text   # type 0 = zlib (old)
    noise = bytes(rand.randrange(256) for _ in range(5000))
    assert compress_body(noise, 4096) == (noise, 0)   # would not shrink: sent as is


def test_inflate_refuses_bombs_bad_streams_and_other_algorithms():
    bomb = zlib.compress(b"\0" * (4 << 20), 9)
    with pytest.raises(ProtocolError, match="beyond"):
        inflate_body(bomb, 0x301, inflated_max_bytes=1 << 20)
    with pytest.raises(ProtocolError):
        inflate_body(b"not zlib", 0x301)
    with pytest.raises(ProtocolError, match="only zlib"):
        inflate_body(zlib.compress(b"x"), int(MessageSysFlag.COMPRESSED
                                              | MessageSysFlag.COMPRESSION_LZ4_TYPE))


def test_batch_body_splits_back_and_matches_java_layout():
    java_request = _frames("send_batch_message")[0]
    java_body = bytes(java_request.body)
    java_entries = record.split_batch(java_body)
    messages = []
    for flag, body_start, body_length, properties in java_entries:
        message = Message("CaptureTopic", java_body[body_start:body_start + body_length],
                          flag=flag)
        message.properties = decode_properties(properties)
        messages.append(message)
    ours = encode_batch(messages)
    # Property order is a dict's, Java's is a HashMap's: compare entry by entry.
    ours_entries = record.split_batch(ours)
    assert len(ours_entries) == len(java_entries) == 3
    for (flag_a, start_a, length_a, props_a), (flag_b, start_b, length_b, props_b) in zip(
            ours_entries, java_entries, strict=True):
        assert flag_a == flag_b
        assert ours[start_a:start_a + length_a] == java_body[start_b:start_b + length_b]
        assert decode_properties(props_a) == decode_properties(props_b)
    assert len(ours) == len(java_body)


def test_decode_java_pull_bodies():
    for name in ("pull_message_found", "pull_message_push_consumer"):
        response = _frames(name)[1]
        messages = decode_messages(response.body, "broker-a")
        next_offset = int(response.ext_fields["nextBeginOffset"])
        assert messages and all(isinstance(m, MessageExt) for m in messages)
        for message in messages:
            assert message.topic == "CaptureTopic"
            assert message.broker_name == "broker-a"
            assert message.queue_offset < next_offset
            assert message.msg_id == message.properties[Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
            assert len(message.offset_msg_id) == 32
            assert int(message.offset_msg_id[-16:], 16) == message.physical_offset
            assert message.store_host.startswith("127.0.0.1:")
            assert message.body.startswith(b"hello") or message.body.startswith(b"batch")
            assert message.properties["CLUSTER"] == "DefaultCluster"
        offsets = [m.queue_offset for m in messages]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        first = messages[0]
        assert first.tags in ("TagA", "TagB", "TagC", "TagD")


def test_decode_rejects_truncated_and_corrupt_bodies():
    body = bytes(_frames("pull_message_found")[1].body)
    boundaries, position = [], 0
    while position < len(body):
        position += int.from_bytes(body[position:position + 4], "big")
        boundaries.append(position)
    assert len(decode_messages(body)) == len(boundaries)
    for cut in range(1, len(body)):
        if cut in boundaries:
            assert len(decode_messages(body[:cut])) == boundaries.index(cut) + 1
        else:
            with pytest.raises(ProtocolError):
                decode_messages(body[:cut])
    corrupt = bytearray(body)
    corrupt[4:8] = b"\0\0\0\0"   # magic code
    with pytest.raises(ProtocolError):
        decode_messages(corrupt)
    assert decode_messages(b"") == []
