"""The Cython frame codec splits streams exactly and refuses every must-refuse framing input.

Method: frames are built with struct in this file (an independent oracle), split whole and in
random chunk sizes, and corrupted field by field; binary headers are built by hand with lying
lengths. Every refusal must be a ProtocolError naming the problem.
"""
import array
import mmap
import struct

import pytest

from pybroker._fast import frame
from pybroker.errors import ProtocolError


def plain_frame(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    """Reference frame builder: length, header word, header, body."""
    return (struct.pack(">ii", 4 + len(header) + len(body),
                        (serialize_type << 24) | len(header)) + header + body)


def plain_binary_header(code=310, language=0, version=409, opaque=7, flag=0, remark=b"",
                        entries=(), remark_length=None, ext_length=None) -> bytes:
    """Reference ROCKETMQ header; entries are raw (key, value) bytes; lengths may lie."""
    block = b"".join(struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v
                     for k, v in entries)
    return (struct.pack(">hbhii", code, language, version, opaque, flag)
            + struct.pack(">i", len(remark) if remark_length is None else remark_length) + remark
            + struct.pack(">i", len(block) if ext_length is None else ext_length) + block)


def random_frames(rand, count):
    frames = []
    for _ in range(count):
        header = bytes(rand.randrange(256) for _ in range(rand.randrange(1, 40)))
        body = bytes(rand.randrange(256) for _ in range(rand.randrange(0, 300)))
        frames.append(plain_frame(header, body, rand.randrange(2)))
    return frames


# --- splitting ----------------------------------------------------------------------------------

def test_split_reports_every_complete_frame_and_the_tail():
    first = plain_frame(b'{"code":1}', b"abc")
    second = plain_frame(b"x" * 21, b"", 1)
    stream = first + second + first[:7]
    frames, tail = frame.split_frames(stream, 0, len(stream))
    assert frames == [(0, len(first)), (len(first), len(second))]
    assert tail == len(first) + len(second)


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_split_accepts_any_buffer_and_a_window(kind):
    one = plain_frame(b"h", b"body")
    data = kind(b"\xff" * 5 + one * 3 + b"\xff" * 5)
    frames, tail = frame.split_frames(data, 5, 5 + 3 * len(one))
    assert frames == [(5 + i * len(one), len(one)) for i in range(3)]
    assert tail == 5 + 3 * len(one)


def test_split_reads_an_mmap(tmp_path):
    one = plain_frame(b"h", b"x" * 100)
    path = tmp_path / "frames"
    path.write_bytes(one * 10)
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as m:
        frames, tail = frame.split_frames(m, 0, len(m))
    assert len(frames) == 10 and tail == len(one) * 10


def test_split_more_frames_than_one_internal_batch():
    one = plain_frame(b"h")
    stream = one * 1000
    frames, tail = frame.split_frames(stream, 0, len(stream))
    assert len(frames) == 1000 and frames[-1] == (999 * len(one), len(one))
    assert tail == len(stream)


def test_split_random_chunks_yields_exactly_the_frames(rand):
    originals = random_frames(rand, 200)
    stream = b"".join(originals)
    buffer = bytearray()
    received = []
    position = 0
    while position < len(stream):
        chunk = rand.randrange(1, 700)
        buffer += stream[position:position + chunk]
        position += chunk
        frames, tail = frame.split_frames(buffer, 0, len(buffer))
        received += [bytes(buffer[start:start + length]) for start, length in frames]
        del buffer[:tail]
    assert received == originals
    assert not buffer


def test_split_into_fills_positions_and_stops_when_full():
    one = plain_frame(b"hdr", b"b")
    stream = one * 5
    positions = array.array("q", [0] * 6)  # room for 3 frames
    count, tail = frame.split_frames_into(stream, 0, len(stream), positions)
    assert count == 3 and tail == 3 * len(one)
    assert list(positions) == [0, len(one), len(one), len(one), 2 * len(one), len(one)]
    count, tail = frame.split_frames_into(stream, tail, len(stream), positions)
    assert count == 2 and tail == len(stream)


def test_next_frame_is_the_taker_that_takes_nothing(rand):
    """next_frame (remoting.frame_taker.WholeFrames) walks a stream frame by frame to the
    same frames as split_frames, says TAKE_END for every partial tail, and refuses what
    split_frames refuses with the same message."""
    frames = random_frames(rand, 20)
    stream = b"".join(frames)
    position, seen = 0, []
    while True:
        at, outcome, length = frame.next_frame(stream, position, len(stream))
        assert at == position
        if outcome == frame.TAKE_END:
            assert length == 0
            break
        assert outcome == frame.TAKE_OTHER
        seen.append((at, length))
        position += length
    assert seen == frame.split_frames(stream, 0, len(stream))[0] and position == len(stream)
    for cut in range(len(frames[0])):
        assert frame.next_frame(frames[0][:cut], 0, cut) == (0, frame.TAKE_END, 0)
    bad = struct.pack(">i", 2) + b"\0" * 8
    with pytest.raises(ProtocolError) as taken:
        frame.next_frame(bad, 0, len(bad))
    with pytest.raises(ProtocolError) as split:
        frame.split_frames(bad, 0, len(bad))
    assert str(taken.value) == str(split.value)
    with pytest.raises(ValueError):
        frame.next_frame(stream, 5, 4)


def test_split_empty_and_partial_input_report_no_frames():
    assert frame.split_frames(b"", 0, 0) == ([], 0)
    one = plain_frame(b"h", b"body")
    for cut in range(len(one)):
        assert frame.split_frames(one[:cut], 0, cut) == ([], 0)


@pytest.mark.parametrize("start,end", [(-1, 3), (0, 11), (5, 4), (11, 11)])
def test_split_rejects_a_range_outside_the_buffer(start, end):
    with pytest.raises(ValueError):
        frame.split_frames(b"0123456789", start, end)


def test_split_rejects_a_non_buffer():
    with pytest.raises(TypeError):
        frame.split_frames("text", 0, 4)


# --- must-refuse framing ------------------------------------------------------------------------

@pytest.mark.parametrize("length", [-1, -(1 << 31), 0, 3])
def test_length_below_the_header_word_is_refused(length):
    with pytest.raises(ProtocolError, match=f"length field {length} is below 4"):
        frame.split_frames(struct.pack(">i", length), 0, 4)


def test_length_above_frame_max_is_refused_as_soon_as_the_length_arrives():
    with pytest.raises(ProtocolError, match="over frame_max_bytes 16777216"):
        frame.split_frames(struct.pack(">i", 16777216 - 4 + 1), 0, 4)
    # Exactly at the limit is a legal (incomplete) frame.
    assert frame.split_frames(struct.pack(">ii", 16777216 - 4, 0), 0, 8) == ([], 0)
    with pytest.raises(ProtocolError, match="over frame_max_bytes 100"):
        frame.split_frames(plain_frame(b"x" * 100), 0, 108, frame_max_bytes=100)


def test_header_length_beyond_the_frame_is_refused():
    data = struct.pack(">ii", 10, 7)  # 10 - 4 = 6 bytes left for a 7-byte header
    with pytest.raises(ProtocolError, match="header length 7 exceeds frame length 10 - 4"):
        frame.split_frames(data, 0, len(data))


@pytest.mark.parametrize("serialize_type", [2, 0x7F, 0xFF])
def test_unknown_serialize_type_is_refused(serialize_type):
    data = struct.pack(">iI", 8, (serialize_type << 24) | 4) + b"abcd"
    with pytest.raises(ProtocolError, match=f"serialize type {serialize_type} is neither"):
        frame.split_frames(data, 0, len(data))


def test_a_bad_frame_after_good_ones_is_refused_with_its_position():
    good = plain_frame(b"h")
    data = good + struct.pack(">i", 2)
    with pytest.raises(ProtocolError, match=f"frame at byte {len(good)}:"):
        frame.split_frames(data, 0, len(data))


@pytest.mark.parametrize("first_bytes,hint", [
    (bytes.fromhex("16030100c4010000c003"), "TLS ClientHello"),
    (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "HTTP/2 preface"),
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "looks like HTTP"),
    (b"POST /send HTTP/1.1\r\n", "looks like HTTP"),
    (b"HTTP/1.1 200 OK\r\n", "looks like HTTP"),
])
def test_foreign_protocols_at_connection_start_get_a_hint(first_bytes, hint):
    with pytest.raises(ProtocolError, match=hint):
        frame.split_frames(first_bytes, 0, len(first_bytes))


def test_frame_max_argument_is_checked():
    with pytest.raises(ValueError):
        frame.split_frames(b"", 0, 0, frame_max_bytes=7)


# --- frame_parts --------------------------------------------------------------------------------

def test_frame_parts_locates_header_and_body():
    data = b"zz" + plain_frame(b"HEADER", b"BODY!", 1)
    assert frame.frame_parts(data, 2, len(data) - 2) == (1, 10, 6, 16, 5)


def test_frame_parts_refuses_a_frame_length_that_disagrees():
    one = plain_frame(b"HEADER", b"BODY!")
    with pytest.raises(ProtocolError, match="length field announces"):
        frame.frame_parts(one + b"x", 0, len(one) + 1)
    with pytest.raises(ProtocolError, match="do not hold"):
        frame.frame_parts(one, 0, len(one) - 1)
    with pytest.raises(ValueError):
        frame.frame_parts(one, 0, len(one) + 1)


# --- ROCKETMQ binary header decode ---------------------------------------------------------------

def decode_header(header: bytes, **kwargs):
    return frame.decode_binary_header(header, 0, len(header), **kwargs)


def test_binary_header_fields_decode():
    header = plain_binary_header(code=-2, language=9, version=317, opaque=-5, flag=3,
                                 remark="héllo".encode(), entries=[(b"k", "v€".encode())])
    assert decode_header(header) == (-2, 9, 317, -5, 3, "héllo", {"k": "v€"})


def test_zero_length_remark_and_value_are_null():
    header = plain_binary_header(entries=[(b"a", b""), (b"b", b"x")])
    code, _, _, _, _, remark, ext_fields = decode_header(header)
    assert remark is None and ext_fields == {"b": "x"}


@pytest.mark.parametrize("header,message", [
    (b"\x00" * 20, "shorter than its 21-byte fixed part"),
    (plain_binary_header(remark=b"ab", remark_length=-1), "remark length -1"),
    (plain_binary_header(remark=b"ab", remark_length=3), "remark length 3"),
    (plain_binary_header(remark=b"ab", remark_length=0x7FFFFFFF), "remark length 2147483647"),
    (plain_binary_header(entries=[(b"k", b"v")], ext_length=-8), "ext block length -8"),
    (plain_binary_header(entries=[(b"k", b"v")], ext_length=9), "ext block length 9"),
    (plain_binary_header(entries=[(b"k", b"v")], ext_length=7), "stray bytes after"),
    (plain_binary_header(entries=[(b"k", b"v")]) + b"\x00", "1 stray bytes"),
    (plain_binary_header(entries=[(b"", b"v")]), "ext key length 0"),
    (plain_binary_header(entries=[(b"k" * 10, b"v")])[:-1], "ext block length 17 is not .*16"),
    (plain_binary_header(entries=[(b"a", b"1"), (b"a", b"2")]), "duplicate ext key 'a'"),
    (plain_binary_header(entries=[(b"a", b""), (b"a", b"2")]), "duplicate ext key 'a'"),
    (plain_binary_header(remark=b"\xff\xfe"), "remark at header byte 17 is not valid UTF-8"),
    (plain_binary_header(entries=[(b"\xc3", b"v")]), "ext key at header byte .* UTF-8"),
    (plain_binary_header(entries=[(b"k", b"\xed\xa0\x80")]), "ext value .* UTF-8"),
])
def test_binary_header_must_refuse(header, message):
    with pytest.raises(ProtocolError, match=message):
        decode_header(header)


def test_lying_inner_lengths_are_refused():
    ok = plain_binary_header(entries=[(b"key", b"value")])
    entry_at = 21
    for key_length in (-1, -32768, 4, 200, 32767):
        lying = ok[:entry_at] + struct.pack(">h", key_length) + ok[entry_at + 2:]
        # A key that claims one byte too many shifts the value length: either refusal is right.
        with pytest.raises(ProtocolError, match="ext (key|value) length"):
            decode_header(lying)
    value_at = entry_at + 2 + 3
    for value_length in (-1, 6, 0x7FFFFFFF, -(1 << 31)):
        lying = ok[:value_at] + struct.pack(">i", value_length) + ok[value_at + 4:]
        with pytest.raises(ProtocolError, match="ext value length"):
            decode_header(lying)
    cut = plain_binary_header(entries=[(b"k", b"v")], ext_length=9) + b"\x00"
    with pytest.raises(ProtocolError, match="cut before its key length"):
        decode_header(cut)


def test_ext_fields_max_is_enforced():
    entries = [(f"k{i}".encode(), b"v") for i in range(5)]
    assert len(decode_header(plain_binary_header(entries=entries), ext_fields_max=5)[6]) == 5
    with pytest.raises(ProtocolError, match="more than ext_fields_max 4"):
        decode_header(plain_binary_header(entries=entries), ext_fields_max=4)
    many = [(f"k{i}".encode(), b"v") for i in range(1025)]
    with pytest.raises(ProtocolError, match="more than ext_fields_max 1024"):
        decode_header(plain_binary_header(entries=many))


def test_decode_header_range_is_checked():
    header = plain_binary_header()
    with pytest.raises(ValueError):
        frame.decode_binary_header(header, 1, len(header))


# --- ROCKETMQ binary header and frame encode ----------------------------------------------------

def test_encoded_header_matches_the_reference_builder():
    remark = "rémark"
    ext_fields = {"a": "PG", "queueId": "3", "ü": "€"}
    expected = plain_binary_header(
        code=310, language=0, version=409, opaque=-7, flag=2, remark=remark.encode(),
        entries=[(k.encode(), v.encode()) for k, v in ext_fields.items()])
    assert frame.encode_binary_header(310, 0, 409, -7, 2, remark, ext_fields) == expected


def test_encode_skips_none_keys_and_values_but_writes_empty_strings():
    header = frame.encode_binary_header(1, 0, 1, 1, 0, None, {"a": None, None: "x", "b": ""})
    assert header == plain_binary_header(code=1, version=1, opaque=1, entries=[(b"b", b"")])


@pytest.mark.parametrize("field,value", [
    ("code", 32768), ("code", -32769), ("version", 40000), ("language", 256),
    ("language", -1), ("opaque", 1 << 31), ("flag", -(1 << 31) - 1),
])
def test_fields_that_cannot_travel_raise_value_error(field, value):
    fields = dict(code=1, language=0, version=1, opaque=1, flag=0)
    fields[field] = value
    with pytest.raises(ValueError, match=field):
        frame.encode_binary_header(*fields.values(), None, None)
    with pytest.raises(ValueError, match=field):
        frame.encode_binary_frame(*fields.values(), None, None, b"")


def test_encode_rejects_non_text_and_oversized_keys():
    with pytest.raises(TypeError, match="ext value"):
        frame.encode_binary_header(1, 0, 1, 1, 0, None, {"a": 1})
    with pytest.raises(TypeError, match="remark"):
        frame.encode_binary_header(1, 0, 1, 1, 0, b"r", None)
    with pytest.raises(ValueError, match="32767"):
        frame.encode_binary_header(1, 0, 1, 1, 0, None, {"k" * 32768: "v"})


def test_binary_frame_is_prefix_plus_header_plus_body():
    body = bytearray(b"\x00\x01" * 50)
    header = frame.encode_binary_header(11, 9, 317, 4, 0, "r", {"topic": "T"})
    built = frame.encode_binary_frame(11, 9, 317, 4, 0, "r", {"topic": "T"}, memoryview(body))
    assert built == plain_frame(header, bytes(body), 1)
    assert frame.encode_frame(1, header, body) == built
    assert frame.encode_frame(0, b"{}") == plain_frame(b"{}")


def test_encode_frame_limits():
    with pytest.raises(ValueError, match="frame_max_bytes 100"):
        frame.encode_frame(0, b"{}", b"x" * 100, frame_max_bytes=100)
    with pytest.raises(ValueError, match="serialize type 2"):
        frame.encode_frame(2, b"{}")
    with pytest.raises(ValueError, match="24-bit"):
        frame.encode_frame(0, bytes(1 << 24), frame_max_bytes=1 << 25)
