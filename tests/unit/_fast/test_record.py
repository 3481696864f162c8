"""pybroker._fast.record writes, patches, verifies, scans and decodes RocketMQ CommitLog records.

Method: a record assembled by hand with struct from the reference table (protocol.md §4.2) is
compared byte for byte with encode_into; offsets are cross-checked with pybroker.store.layout; round
trips cover v1, v2 (long topic) and IPv6 hosts; scans run over records, a BLANK marker and a zero
tail; torn tails cut the last record at every byte; one byte is flipped in every field.
"""
import mmap
import struct
import zlib

import pytest

from pybroker._fast import record
from pybroker._fast.record import (RECORD_BLANK, RECORD_CORRUPT, RECORD_END, RECORD_OK,
                                   RECORD_TRUNCATED)
from pybroker.store import layout

BORN_V6, STORE_V6 = 0x10, 0x20
IPV4_BORN, IPV4_STORE = bytes([192, 168, 0, 7]), bytes([10, 0, 0, 2])
IPV6_BORN, IPV6_STORE = bytes(range(1, 17)), bytes(range(101, 117))


def message(**overrides):
    """Keyword arguments of encode_into for one message, with distinct values in every field."""
    fields = dict(topic=b"TopicTest", queue_id=3, flag=0x55, body=b"Hello RocketMQ",
                  properties=b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02", sys_flag=0,
                  born_timestamp=1_700_000_000_123, born_host=IPV4_BORN, born_port=52011,
                  store_host=IPV4_STORE, store_port=10911, reconsume_times=2,
                  prepared_transaction_offset=0x0102030405060708, queue_offset=77,
                  physical_offset=1 << 33, store_timestamp=1_700_000_000_456)
    fields.update(overrides)
    return fields


def hand_built(m) -> bytes:
    """The record for message m, assembled from the reference table with struct."""
    topic, body, props = m["topic"], m["body"], m["properties"]
    v2 = len(topic) > 127
    topic_field = struct.pack(">h" if v2 else ">b", len(topic)) + topic
    tail = (struct.pack(">i", len(body)) + body + topic_field
            + struct.pack(">h", len(props)) + props)
    head_without_size = (
        struct.pack(">I", 0xDAA320AB if v2 else 0xDAA320A7)
        + struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF)
        + struct.pack(">iiqqiq", m["queue_id"], m["flag"], m["queue_offset"],
                      m["physical_offset"], m["sys_flag"], m["born_timestamp"])
        + m["born_host"] + struct.pack(">i", m["born_port"])
        + struct.pack(">q", m["store_timestamp"])
        + m["store_host"] + struct.pack(">i", m["store_port"])
        + struct.pack(">iq", m["reconsume_times"], m["prepared_transaction_offset"]))
    return struct.pack(">i", 4 + len(head_without_size) + len(tail)) + head_without_size + tail


def encode(m, offset=0, room=0) -> bytearray:
    buf = bytearray(offset + record.encoded_size(len(m["body"]), len(m["topic"]),
                                                 len(m["properties"]), m["sys_flag"]) + room)
    written = record.encode_into(buf, offset, **m)
    assert written == len(buf) - offset - room
    return buf


# --- layout agreement ------------------------------------------------------------------------

def test_field_positions_match_layout():
    positions = record.FIELD_POSITIONS
    assert positions["total_size"] == layout.RECORD_TOTAL_SIZE_POSITION
    assert positions["magic"] == layout.RECORD_MAGIC_POSITION
    assert positions["body_crc"] == layout.RECORD_BODY_CRC_POSITION
    assert positions["queue_id"] == layout.RECORD_QUEUE_ID_POSITION
    assert positions["flag"] == layout.RECORD_FLAG_POSITION
    assert positions["queue_offset"] == layout.RECORD_QUEUE_OFFSET_POSITION
    assert positions["physical_offset"] == layout.RECORD_PHYSICAL_OFFSET_POSITION
    assert positions["sys_flag"] == layout.RECORD_SYS_FLAG_POSITION
    assert positions["born_timestamp"] == layout.RECORD_BORN_TIMESTAMP_POSITION
    assert positions["born_host"] == layout.RECORD_BORN_HOST_POSITION


def test_variable_positions_match_layout():
    m = message()
    buf = encode(m)
    decoded = record.decode(buf, 0)
    assert decoded.body_position == layout.RECORD_BODY_LENGTH_POSITION_V4 + 4
    assert struct.unpack_from(">q", buf, layout.RECORD_STORE_TIMESTAMP_POSITION_V4)[0] \
        == m["store_timestamp"]
    assert buf[layout.RECORD_STORE_HOST_POSITION_V4:][:4] == m["store_host"]
    assert struct.unpack_from(">i", buf, layout.RECORD_RECONSUME_TIMES_POSITION_V4)[0] == 2
    assert struct.unpack_from(">q", buf, layout.RECORD_PREPARED_OFFSET_POSITION_V4)[0] \
        == m["prepared_transaction_offset"]


@pytest.mark.parametrize("sys_flag", [0, BORN_V6, STORE_V6, BORN_V6 | STORE_V6, 0x301])
@pytest.mark.parametrize("topic_length", [0, 1, 127, 128, 255, 32767])
@pytest.mark.parametrize("body_length,properties_length", [(0, 0), (128, 40), (4096, 32767)])
def test_encoded_size_matches_layout(sys_flag, topic_length, body_length, properties_length):
    expected = layout.record_size(
        body_length, topic_length, properties_length, bool(sys_flag & BORN_V6),
        bool(sys_flag & STORE_V6),
        layout.TOPIC_LENGTH_BYTES_V2 if topic_length > 127 else layout.TOPIC_LENGTH_BYTES_V1)
    assert record.encoded_size(body_length, topic_length, properties_length, sys_flag) \
        == expected


@pytest.mark.parametrize("lengths", [(-1, 0, 0), (0, -1, 0), (0, 0, -1), (0, 32768, 0),
                                     (0, 0, 32768), (2**31 - 91, 0, 0)])
def test_encoded_size_rejects_impossible(lengths):
    with pytest.raises(ValueError):
        record.encoded_size(*lengths, 0)


# --- golden bytes ----------------------------------------------------------------------------

def test_golden_v1_ipv4_byte_for_byte():
    m = message()
    buf = encode(m)
    assert bytes(buf) == hand_built(m)
    # Spot checks straight from the reference table.
    assert len(buf) == 91 + len(m["body"]) + len(m["topic"]) + len(m["properties"])
    assert buf[4:8] == bytes.fromhex("DAA320A7")
    assert buf[84:88] == struct.pack(">i", len(m["body"]))
    assert buf[88 + len(m["body"])] == len(m["topic"])


@pytest.mark.parametrize("sys_flag,born,store", [
    (BORN_V6, IPV6_BORN, IPV4_STORE), (STORE_V6, IPV4_BORN, IPV6_STORE),
    (BORN_V6 | STORE_V6, IPV6_BORN, IPV6_STORE)])
def test_golden_ipv6_hosts(sys_flag, born, store):
    m = message(sys_flag=sys_flag, born_host=born, store_host=store)
    assert bytes(encode(m)) == hand_built(m)


@pytest.mark.parametrize("topic_length", [127, 128, 300])
def test_golden_long_topic_switches_magic(topic_length):
    m = message(topic=b"T" * topic_length)
    buf = encode(m)
    assert bytes(buf) == hand_built(m)
    assert buf[4:8] == bytes.fromhex("DAA320AB" if topic_length > 127 else "DAA320A7")


# --- round trips ---------------------------------------------------------------------------

@pytest.mark.parametrize("overrides", [
    {}, {"topic": "主题".encode() * 30}, {"sys_flag": BORN_V6 | STORE_V6, "born_host": IPV6_BORN,
                                         "store_host": IPV6_STORE},
    {"body": b"", "properties": b"", "topic": b""}, {"body": bytes(70_000)},
    {"queue_id": -1, "flag": -2**31, "born_port": 2**31 - 1, "queue_offset": -1}])
def test_round_trip(overrides):
    m = message(**overrides)
    buf = encode(m, offset=13, room=9)
    assert record.check(buf, 13, -1, True) == (RECORD_OK, len(buf) - 22)
    decoded = record.decode(buf, 13)
    assert decoded.record_offset == 13
    assert decoded.total_size == len(buf) - 22
    assert bytes(decoded.body) == m["body"]
    assert decoded.topic == m["topic"].decode()
    assert decoded.properties == m["properties"].decode()
    assert decoded.body_crc == zlib.crc32(m["body"]) & 0x7FFFFFFF
    for name in ("queue_id", "flag", "sys_flag", "born_timestamp", "born_host", "born_port",
                 "store_host", "store_port", "reconsume_times", "prepared_transaction_offset",
                 "queue_offset", "physical_offset", "store_timestamp"):
        assert getattr(decoded, name) == m[name], name


def test_decode_body_is_a_view_not_a_copy():
    buf = encode(message())
    decoded = record.decode(buf, 0)
    buf[decoded.body_position] = ord("J")
    assert bytes(decoded.body[:1]) == b"J"
    with pytest.raises(BufferError):
        buf.extend(b"x")      # the view keeps the buffer exported
    del decoded


def test_encode_into_mmap_and_body_from_same_buffer(tmp_path):
    m = message()
    size = len(encode(m))
    path = tmp_path / "00000000000000000000"
    path.write_bytes(bytes(4 * size))
    with open(path, "r+b") as handle, mmap.mmap(handle.fileno(), 0) as mm:
        mm[3 * size:3 * size + len(m["body"])] = m["body"]
        body_view = memoryview(mm)[3 * size:3 * size + len(m["body"])]
        assert record.encode_into(mm, size, **dict(m, body=body_view)) == size
        body_view.release()
        assert record.scan(mm, size, 2 * size, True) == (RECORD_END, 2 * size, 1)
        mm.flush()
    assert path.read_bytes()[size:2 * size] == hand_built(m)


# --- encode errors -------------------------------------------------------------------------

@pytest.mark.parametrize("overrides,error", [
    ({"properties": b"p" * 32768}, ValueError), ({"topic": b"t" * 32768}, ValueError),
    ({"born_host": IPV6_BORN}, ValueError), ({"store_host": b"\x01\x02\x03"}, ValueError),
    ({"sys_flag": BORN_V6}, ValueError), ({"sys_flag": STORE_V6}, ValueError),
    ({"topic": "TopicTest"}, TypeError), ({"queue_id": 2**31}, OverflowError)])
def test_encode_rejects_bad_input(overrides, error):
    buf = bytearray(70_000)
    with pytest.raises(error):
        record.encode_into(buf, 0, **message(**overrides))
    assert buf == bytearray(70_000)


def test_encode_rejects_small_or_readonly_buffer():
    m = message()
    size = len(encode(m))
    for buf, offset in ((bytearray(size - 1), 0), (bytearray(size), 1), (bytearray(size), -1)):
        with pytest.raises(ValueError):
            record.encode_into(buf, offset, **m)
    with pytest.raises((TypeError, BufferError)):
        record.encode_into(bytes(size), 0, **m)


# --- patch -----------------------------------------------------------------------------------

@pytest.mark.parametrize("sys_flag,born,store", [
    (0, IPV4_BORN, IPV4_STORE), (BORN_V6, IPV6_BORN, IPV4_STORE),
    (BORN_V6 | STORE_V6, IPV6_BORN, IPV6_STORE)])
def test_patch_sets_append_time_fields(sys_flag, born, store):
    m = message(sys_flag=sys_flag, born_host=born, store_host=store, queue_offset=0,
                physical_offset=0, store_timestamp=0)
    buf = encode(m, offset=5)
    record.patch(buf, 5, 1234, 5678, 1_700_000_009_999)
    expected = hand_built(dict(m, queue_offset=1234, physical_offset=5678,
                               store_timestamp=1_700_000_009_999))
    assert bytes(buf[5:]) == expected
    assert record.read_store_timestamp(buf, 5) == 1_700_000_009_999
    assert record.read_timestamps(buf, 5) == (m["born_timestamp"], 1_700_000_009_999)
    assert record.check(buf, 5, -1, True) == (RECORD_OK, len(expected))


def test_patch_rejects_non_record():
    buf = encode(message())
    for offset in (1, len(buf), -1):
        with pytest.raises(ValueError):
            record.patch(buf, offset, 1, 2, 3)
        with pytest.raises(ValueError):
            record.read_store_timestamp(buf, offset)
        with pytest.raises(ValueError):
            record.read_timestamps(buf, offset)


def batch_of(messages) -> tuple[bytearray, list[int]]:
    parts = [bytes(encode(m)) for m in messages]
    positions = [sum(len(p) for p in parts[:i]) for i in range(len(parts))]
    return bytearray(b"".join(parts)), positions


def test_patch_run(rand):
    messages = [message(body=rand.randbytes(rand.randrange(300)),
                        sys_flag=rand.choice([0, BORN_V6]),
                        born_host=None) for _ in range(20)]
    for m in messages:
        m["born_host"] = IPV6_BORN if m["sys_flag"] & BORN_V6 else IPV4_BORN
    buf, positions = batch_of(messages)
    buf = bytearray(7) + buf + bytearray(11)
    end = len(buf) - 11
    assert record.patch_run(buf, 7, end, 10_000, 500, 42) == 20
    for i, position in enumerate(positions):
        decoded = record.decode(buf, 7 + position)
        assert (decoded.queue_offset, decoded.physical_offset, decoded.store_timestamp) \
            == (500 + i, 10_000 + position, 42)
    assert record.scan(buf, 7, end, True) == (RECORD_END, end, 20)


def test_patch_run_leaves_a_bad_run_untouched():
    buf, positions = batch_of([message(), message(), message()])
    before = bytes(buf)
    for start, end in ((0, len(buf) - 1), (1, len(buf)), (0, positions[2] + 8)):
        with pytest.raises(ValueError):
            record.patch_run(buf, start, end, 1, 1, 1)
        assert bytes(buf) == before
    assert record.patch_run(buf, 0, 0, 1, 1, 1) == 0
    # A zero TOTALSIZE inside the range (found by fuzzing: it once patched garbage positions).
    gapped = buf[:positions[1]] + bytearray(8) + buf[positions[1]:]
    before = bytes(gapped)
    with pytest.raises(ValueError):
        record.patch_run(gapped, 0, len(gapped), 1, 1, 1)
    assert bytes(gapped) == before


# --- scan, BLANK, zero tail ---------------------------------------------------------------

def test_scan_records_blank_and_zero_tail():
    buf, positions = batch_of([message(topic=b"T" * n) for n in (1, 50, 200)])
    records_end = len(buf)
    file_size = records_end + 64
    buf += bytearray(64)
    record.write_blank(buf, records_end, file_size - records_end)
    assert record.scan(buf, 0, -1, True) == (RECORD_BLANK, records_end, 3)
    assert record.check(buf, records_end, -1, True) == (RECORD_BLANK, 64)
    assert record.check(buf, positions[1], -1, True)[0] == RECORD_OK
    # Without the BLANK the zero tail ends the data.
    buf[records_end:records_end + 8] = bytes(8)
    assert record.scan(buf, 0, -1, True) == (RECORD_END, records_end, 3)
    assert record.check(buf, records_end, -1, True) == (RECORD_END, 0)
    assert record.scan(buf, 0, records_end, True) == (RECORD_END, records_end, 3)
    assert record.scan(buf, positions[1], positions[1], False) == (RECORD_END, positions[1], 0)


def test_write_blank_rejects_bad_input():
    with pytest.raises(ValueError):
        record.write_blank(bytearray(16), 9, 8)
    with pytest.raises(ValueError):
        record.write_blank(bytearray(16), 0, 7)
    buf = bytearray(16)
    buf[0:4] = struct.pack(">i", 7)
    buf[4:8] = bytes.fromhex("CBD43194")
    assert record.check(buf, 0, -1, False) == (RECORD_CORRUPT, 7)


def test_check_rejects_bad_ranges():
    buf = encode(message())
    for offset, end in ((-1, 10), (5, 4), (0, len(buf) + 1)):
        with pytest.raises(ValueError):
            record.check(buf, offset, end, False)
        with pytest.raises(ValueError):
            record.scan(buf, offset, end, False)


def test_torn_tail_at_every_byte():
    buf, positions = batch_of([message(), message(topic=b"T" * 130), message(body=b"x" * 77)])
    last = positions[-1]
    last_record = record.decode(buf, last)
    topic_start = last_record.body_position + len(last_record.body) + 1
    del last_record
    for cut in range(last, len(buf)):
        status, position, count = record.scan(buf[:cut], 0, -1, True)
        assert (position, count) == (last, 2), cut
        expected = RECORD_END if cut == last else RECORD_TRUNCATED
        assert status == expected, cut
        # The same cut followed by zeros (a torn write in a pre-allocated file).
        zero_tailed = buf[:cut] + bytearray(len(buf) - cut + 16)
        status, position, count = record.scan(zero_tailed, 0, -1, True)
        if count == 3:
            # Zeros only in topic/properties bytes pass: no CRC covers them (format limit).
            assert cut > topic_start and position == len(buf), cut
            continue
        assert (position, count) == (last, 2), cut
        assert status in (RECORD_END, RECORD_TRUNCATED, RECORD_CORRUPT), cut
    assert record.scan(buf, 0, -1, True) == (RECORD_END, len(buf), 3)


def field_spans(m):
    """(name, start, end) of every field of message m's record, in record order."""
    born, store = len(m["born_host"]) + 4, len(m["store_host"]) + 4
    topic_length_bytes = 2 if len(m["topic"]) > 127 else 1
    sizes = [("total_size", 4), ("magic", 4), ("body_crc", 4), ("queue_id", 4), ("flag", 4),
             ("queue_offset", 8), ("physical_offset", 8), ("sys_flag", 4),
             ("born_timestamp", 8), ("born_host", born), ("store_timestamp", 8),
             ("store_host", store), ("reconsume_times", 4), ("prepared_offset", 8),
             ("body_length", 4), ("body", len(m["body"])), ("topic_length", topic_length_bytes),
             ("topic", len(m["topic"])), ("properties_length", 2),
             ("properties", len(m["properties"]))]
    at = 0
    for name, size in sizes:
        yield name, at, at + size
        at += size


# Fields no check can see: only the body is covered by a CRC and only lengths must add up.
# A flipped queue/physical offset is caught by the store comparing with the position it expects.
NOT_SELF_CHECKING = {"queue_id", "flag", "queue_offset", "physical_offset", "born_timestamp",
                     "born_host", "store_timestamp", "store_host", "reconsume_times",
                     "prepared_offset", "topic", "properties"}


@pytest.mark.parametrize("m", [message(), message(sys_flag=BORN_V6 | STORE_V6,
                                                  born_host=IPV6_BORN, store_host=IPV6_STORE),
                               message(topic=b"L" * 140)])
def test_flip_one_byte_in_each_field(m):
    buf = encode(m, room=64)
    size = len(buf) - 64
    for name, start, end in field_spans(m):
        for position in sorted({start, end - 1}):
            damaged = bytearray(buf)
            damaged[position] ^= 0x11   # 0x10 is the born-host IPv6 bit of sys_flag
            status, _ = record.check(damaged, 0, -1, True)
            if name in NOT_SELF_CHECKING:
                assert status == RECORD_OK, (name, position)
            elif name == "sys_flag" and position != start + 3:
                assert status == RECORD_OK, (name, position)   # flag bits beyond the host bits
            else:
                assert status in (RECORD_CORRUPT, RECORD_TRUNCATED), (name, position)
                status, position, count = record.scan(damaged, 0, size, True)
                assert status in (RECORD_CORRUPT, RECORD_TRUNCATED), (name, position)
                assert (position, count) == (0, 0), name


def test_crc_checked_only_when_asked():
    buf = encode(message())
    buf[record.decode(buf, 0).body_position] ^= 1
    assert record.check(buf, 0, -1, True)[0] == RECORD_CORRUPT
    assert record.check(buf, 0, -1, False)[0] == RECORD_OK
    record.decode(buf, 0)   # decode does not check the CRC


def test_decode_rejects_non_ok():
    buf = encode(message())
    with pytest.raises(ValueError):
        record.decode(buf[:-1], 0)
    with pytest.raises(ValueError):
        record.decode(bytearray(200), 0)
    with pytest.raises(ValueError):
        record.decode(buf, len(buf) + 1)


# --- SEND_BATCH_MESSAGE bodies --------------------------------------------------------------

def inner_message(flag: int, body: bytes, properties: bytes) -> bytes:
    """One inner message of a batch body, as protocol.md §3.6 lays it out (clients write magic/CRC
    0)."""
    return (struct.pack(">iiiii", 22 + len(body) + len(properties), 0, 0, flag, len(body))
            + body + struct.pack(">h", len(properties)) + properties)


def test_split_batch():
    items = [(1, b"first", b"KEYS\x01a\x02"), (-7, b"", b""), (0, b"third" * 50, "é".encode())]
    body = b"".join(inner_message(*item) for item in items)
    entries = record.split_batch(memoryview(body))
    at = 0
    assert len(entries) == len(items)
    for (flag, inner_body, props), entry in zip(items, entries, strict=True):
        got_flag, start, length, got_props = entry
        assert (got_flag, length, got_props) == (flag, len(inner_body), props.decode())
        assert body[start:start + length] == inner_body
        assert start == at + 20
        at += 22 + len(inner_body) + len(props)
    assert len(entries) == 3
    assert record.split_batch(b"") == []


@pytest.mark.parametrize("damage", ["short", "size_small", "size_large", "body_negative",
                                    "body_large", "props_negative", "props_mismatch", "tail"])
def test_split_batch_rejects_inconsistent_lengths(damage):
    good = inner_message(3, b"body", b"P\x01v\x02")
    bad = bytearray(good)
    if damage == "short":
        bad = bad[:21]
    elif damage == "size_small":
        bad[0:4] = struct.pack(">i", 21)
    elif damage == "size_large":
        bad[0:4] = struct.pack(">i", len(good) + 1)
    elif damage == "body_negative":
        bad[16:20] = struct.pack(">i", -1)
    elif damage == "body_large":
        bad[16:20] = struct.pack(">i", 5)
    elif damage == "props_negative":
        bad[24:26] = struct.pack(">h", -1)
    elif damage == "props_mismatch":
        bad[24:26] = struct.pack(">h", 3)
    else:
        bad += b"\x00\x00\x00"
    with pytest.raises(ValueError):
        record.split_batch(good + bytes(bad))
