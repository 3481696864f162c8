"""How much the Cython frame codec buys over plain struct Python, per request and per read.

Method: pytest-benchmark runs pybroker's codec and the plain-struct baseline (plain_frame.py)
on the same SEND_MESSAGE_V2-like request (Java's short ext keys a..n) with 128 B and 4 KiB
bodies, JSON and ROCKETMQ headers, one benchmark.group per case so the ratio is side by side;
plus splitting a 64 KiB read full of 128 B frames. Each run first checks both give equal results.
"""
import importlib.util
import pathlib

import pytest

from pybroker._fast import frame
from pybroker.protocol import command
from pybroker.protocol.command import RemotingCommand

_spec = importlib.util.spec_from_file_location(
    "plain_frame", pathlib.Path(__file__).with_name("plain_frame.py"))
plain = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plain)

SEND_V2_EXT_FIELDS = {
    "a": "please_rename_unique_group_name", "b": "TopicTest", "c": "TBW102", "d": "4",
    "e": "3", "f": "0", "g": "1700000000123", "h": "0",
    "i": "KEYS\x01OrderID188\x02UNIQ_KEY\x017F0000010B3C18B4AAC2713A67E90000\x02WAIT\x01true"
         "\x02TAGS\x01TagA",
    "j": "0", "k": "false", "l": "16", "m": "false", "n": "broker-a",
}
BODY_SIZES = {"128B": 128, "4KiB": 4096}
SERIALIZE_TYPES = {"json": 0, "rocketmq": 1}


def send_request(body_bytes: int) -> RemotingCommand:
    return RemotingCommand(310, 0, 409, 12345, 0, None, dict(SEND_V2_EXT_FIELDS),
                           b"\xab" * body_bytes)


def ours_encode(request, serialize_type):
    return command.encode(request, serialize_type)


def plain_encode(request, serialize_type):
    return plain.encode_binary(request) if serialize_type else plain.encode_json(request)


@pytest.mark.parametrize("implementation", ["pybroker", "plain"])
@pytest.mark.parametrize("body", sorted(BODY_SIZES))
@pytest.mark.parametrize("encoding", sorted(SERIALIZE_TYPES))
def test_decode(benchmark, encoding, body, implementation):
    data = command.encode(send_request(BODY_SIZES[body]), SERIALIZE_TYPES[encoding])
    decoder = command.decode if implementation == "pybroker" else plain.decode
    assert decoder(data, 0, len(data)) == send_request(BODY_SIZES[body])
    benchmark.group = f"decode {encoding} {body}"
    benchmark(decoder, data, 0, len(data))


@pytest.mark.parametrize("implementation", ["pybroker", "plain"])
@pytest.mark.parametrize("body", sorted(BODY_SIZES))
@pytest.mark.parametrize("encoding", sorted(SERIALIZE_TYPES))
def test_encode(benchmark, encoding, body, implementation):
    request = send_request(BODY_SIZES[body])
    serialize_type = SERIALIZE_TYPES[encoding]
    encoder = ours_encode if implementation == "pybroker" else plain_encode
    assert encoder(request, serialize_type) == command.encode(request, serialize_type)
    benchmark.group = f"encode {encoding} {body}"
    benchmark(encoder, request, serialize_type)


def _read_of_128_byte_frames() -> bytes:
    one = frame.encode_frame(1, b"h" * 21, b"b" * (128 - 8 - 21))
    assert len(one) == 128
    return one * (65536 // 128)


@pytest.mark.parametrize("implementation", ["pybroker", "pybroker_into", "plain"])
def test_split_64k_read(benchmark, implementation):
    import array
    data = _read_of_128_byte_frames()
    expected = ([(i * 128, 128) for i in range(512)], 65536)
    benchmark.group = "split 64 KiB of 128 B frames"
    if implementation == "pybroker_into":
        positions = array.array("q", bytes(8 * 2 * 512))
        assert frame.split_frames_into(data, 0, len(data), positions) == (512, 65536)
        benchmark(frame.split_frames_into, data, 0, len(data), positions)
        return
    splitter = frame.split_frames if implementation == "pybroker" else plain.split_frames
    assert splitter(data, 0, len(data)) == expected
    benchmark(splitter, data, 0, len(data))
