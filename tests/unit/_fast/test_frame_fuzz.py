"""Hostile bytes never crash, hang or confuse the frame codec: a clean result or ProtocolError.

Method: hypothesis feeds random bytes, truncated valid frames, oversized length fields, lying
header lengths and lying inner (binary header) lengths to split_frames and decode. Splitting is
checked against a plain-Python oracle; any exception other than ProtocolError fails, and the
hypothesis deadline fails a hang.
"""
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker._fast import frame
from pybroker.errors import ProtocolError
from pybroker.protocol import command
from pybroker.protocol.command import RemotingCommand

FUZZ = settings(max_examples=300, deadline=1000, suppress_health_check=[HealthCheck.too_slow])
FRAME_MAX_BYTES = 1 << 16  # small, so random lengths hit both sides of the limit


def oracle_split(data: bytes, frame_max_bytes: int):
    """Plain reference splitter: (frames, tail) or the string 'error'."""
    frames, position = [], 0
    while len(data) - position >= 4:
        length = struct.unpack_from(">i", data, position)[0]
        if length < 4 or length + 4 > frame_max_bytes:
            return "error"
        if len(data) - position < 8:
            break
        word = struct.unpack_from(">I", data, position + 4)[0]
        if word >> 24 > 1 or word & 0xFFFFFF > length - 4:
            return "error"
        if len(data) - position < length + 4:
            break
        frames.append((position, length + 4))
        position += length + 4
    return frames, position


def split_or_error(data: bytes):
    try:
        return frame.split_frames(data, 0, len(data), FRAME_MAX_BYTES)
    except ProtocolError:
        return "error"


def decode_or_error(data: bytes, start: int = 0, length: int = -1):
    try:
        return command.decode(data, start, len(data) if length < 0 else length,
                              frame_max_bytes=FRAME_MAX_BYTES)
    except ProtocolError:
        return "error"


texts = st.text(max_size=20)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-32768, 32767), language=st.integers(0, 13),
    version=st.integers(-32768, 32767), opaque=st.integers(-(1 << 31), (1 << 31) - 1),
    flag=st.integers(-(1 << 31), (1 << 31) - 1), remark=st.none() | texts.filter(bool),
    ext_fields=st.dictionaries(texts.filter(bool), texts.filter(bool), max_size=6),
    body=st.none() | st.binary(min_size=1, max_size=64),
)
serialize_types = st.sampled_from([0, 1])


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes_split_like_the_oracle_and_decode_cleanly(data):
    result = split_or_error(data)
    assert result == oracle_split(data, FRAME_MAX_BYTES)
    if result != "error":
        for start, length in result[0]:
            decode_or_error(data, start, length)


@FUZZ
@given(st.binary(min_size=8, max_size=200), serialize_types)
def test_random_headers_under_a_valid_prefix_decode_cleanly(header_and_body, serialize_type):
    header_length = header_and_body[0] % len(header_and_body)
    data = struct.pack(">iI", 4 + len(header_and_body),
                       (serialize_type << 24) | header_length) + header_and_body
    decoded = decode_or_error(data)
    assert decoded == "error" or isinstance(decoded, RemotingCommand)


@FUZZ
@given(commands, serialize_types, st.data())
def test_truncated_frames_wait_for_more_bytes(original, serialize_type, data):
    encoded = command.encode(original, serialize_type)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    assert frame.split_frames(encoded[:cut], 0, cut) == ([], 0)
    assert decode_or_error(encoded[:cut]) == "error"
    assert decode_or_error(encoded) == original


@FUZZ
@given(commands, serialize_types, st.integers(FRAME_MAX_BYTES - 3, (1 << 31) - 1))
def test_oversized_length_fields_are_refused(original, serialize_type, length):
    encoded = command.encode(original, serialize_type)
    lying = struct.pack(">i", length) + encoded[4:]
    assert split_or_error(lying) == "error"
    assert decode_or_error(lying) == "error"


@FUZZ
@given(commands, serialize_types, st.integers(0, (1 << 32) - 1))
def test_lying_header_words_give_a_clean_result_or_protocol_error(original, serialize_type,
                                                                  header_word):
    encoded = command.encode(original, serialize_type)
    lying = encoded[:4] + struct.pack(">I", header_word) + encoded[8:]
    result = split_or_error(lying)
    assert result == oracle_split(lying, FRAME_MAX_BYTES)
    decoded = decode_or_error(lying)
    assert decoded == "error" or isinstance(decoded, RemotingCommand)


@FUZZ
@given(commands, st.data())
def test_lying_inner_lengths_give_a_clean_result_or_protocol_error(original, data):
    encoded = bytearray(command.encode(original, 1))
    header_length = struct.unpack_from(">I", encoded, 4)[0] & 0xFFFFFF
    # Overwrite a 2- or 4-byte window inside the binary header with a hostile integer.
    width = data.draw(st.sampled_from([2, 4]))
    at = 8 + data.draw(st.integers(0, header_length - width))
    low, high = (-(1 << 15), (1 << 15) - 1) if width == 2 else (-(1 << 31), (1 << 31) - 1)
    value = data.draw(st.integers(low, high) | st.sampled_from([-1, 0, 1, high, low]))
    struct.pack_into(">h" if width == 2 else ">i", encoded, at, value)
    decoded = decode_or_error(bytes(encoded))
    assert decoded == "error" or isinstance(decoded, RemotingCommand)


@FUZZ
@given(commands, st.data())
def test_mutated_json_headers_give_a_clean_result_or_protocol_error(original, data):
    encoded = bytearray(command.encode(original, 0))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(8, len(encoded) - 1))
        encoded[at] = data.draw(st.integers(0, 255))
    decoded = decode_or_error(bytes(encoded))
    assert decoded == "error" or isinstance(decoded, RemotingCommand)
