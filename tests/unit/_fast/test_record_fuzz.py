"""Random and lying buffers never crash pybroker._fast.record; verdicts match a Python oracle.

Method: hypothesis feeds random bytes, valid records with lengths overwritten by random values,
and random cuts into check/scan/decode/patch_run/split_batch. Each call must return a status or
raise ValueError (never crash or read out of bounds; the sanitizer build catches the latter), and
check's status must equal the plain-Python parser below written from the reference table.
"""
import struct
import zlib

from hypothesis import HealthCheck, given, settings, strategies as st

from pybroker._fast import record
from pybroker._fast.record import (RECORD_BLANK, RECORD_CORRUPT, RECORD_END, RECORD_OK,
                                   RECORD_TRUNCATED)

MAGIC_V1, MAGIC_V2, MAGIC_BLANK = 0xDAA320A7, 0xDAA320AB, 0xCBD43194
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def oracle_check(buf: bytes, offset: int, check_crc: bool) -> int:
    """The status of the record at buf[offset:], from the reference's rules, in plain Python."""
    data = buf[offset:]
    if len(data) < 4:
        return RECORD_TRUNCATED
    (total,) = struct.unpack_from(">i", data, 0)
    if total == 0:
        return RECORD_END
    if len(data) < 8:
        return RECORD_TRUNCATED
    (magic,) = struct.unpack_from(">I", data, 4)
    if magic == MAGIC_BLANK:
        return RECORD_BLANK if total >= 8 else RECORD_CORRUPT
    if magic not in (MAGIC_V1, MAGIC_V2):
        return RECORD_CORRUPT
    topic_field = 2 if magic == MAGIC_V2 else 1
    if total < 90 + topic_field:
        return RECORD_CORRUPT
    if total > len(data):
        return RECORD_TRUNCATED
    (sys_flag,) = struct.unpack_from(">i", data, 36)
    born, store = (20 if sys_flag & 0x10 else 8), (20 if sys_flag & 0x20 else 8)
    at = 48 + born + 8 + store + 12
    if total < at + 4 + topic_field + 2:
        return RECORD_CORRUPT
    (body_length,) = struct.unpack_from(">i", data, at)
    if body_length < 0 or at + 4 + body_length + topic_field + 2 > total:
        return RECORD_CORRUPT
    body = data[at + 4:at + 4 + body_length]
    at += 4 + body_length
    (topic_length,) = struct.unpack_from(">h" if topic_field == 2 else ">b", data, at)
    if topic_length < 0 or at + topic_field + topic_length + 2 > total:
        return RECORD_CORRUPT
    at += topic_field + topic_length
    (properties_length,) = struct.unpack_from(">h", data, at)
    if properties_length < 0 or at + 2 + properties_length != total:
        return RECORD_CORRUPT
    (crc,) = struct.unpack_from(">i", data, 8)
    if check_crc and crc != zlib.crc32(body) & 0x7FFFFFFF:
        return RECORD_CORRUPT
    return RECORD_OK


def valid_record(body: bytes, topic: bytes, properties: bytes, sys_flag: int) -> bytearray:
    born = bytes(16 if sys_flag & 0x10 else 4)
    store = bytes(16 if sys_flag & 0x20 else 4)
    buf = bytearray(record.encoded_size(len(body), len(topic), len(properties), sys_flag))
    record.encode_into(buf, 0, topic, 1, 0, body, properties, sys_flag, 0, born, 1, store, 2)
    return buf


records = st.builds(valid_record, st.binary(max_size=64), st.binary(max_size=140),
                    st.binary(max_size=32), st.sampled_from([0, 0x10, 0x20, 0x30, 0x7FFFFFCF]))


@st.composite
def lying_records(draw):
    """A valid record with 1-3 random 1/2/4-byte overwrites, perhaps cut short or extended."""
    buf = draw(records)
    for _ in range(draw(st.integers(1, 3))):
        width = draw(st.sampled_from([1, 2, 4]))
        at = draw(st.integers(0, len(buf) - width))
        buf[at:at + width] = draw(st.binary(min_size=width, max_size=width))
    cut = draw(st.integers(0, len(buf) + 8))
    return bytes(buf[:cut] + bytes(max(0, cut - len(buf))))


def exercise(buf: bytes, offset: int) -> None:
    for check_crc in (False, True):
        status, _ = record.check(buf, offset, -1, check_crc)
        assert status == oracle_check(buf, offset, check_crc)
        status, position, count = record.scan(buf, offset, len(buf), check_crc)
        assert offset <= position <= len(buf)
        assert status != RECORD_OK
    try:
        decoded = record.decode(buf, offset)
    except ValueError:
        assert oracle_check(buf, offset, False) != RECORD_OK
    else:
        assert decoded.record_offset == offset
        assert len(decoded.body) <= len(buf)
    writable = bytearray(buf)
    try:
        record.patch_run(writable, offset, len(buf), 0, 0, 0)
    except ValueError:
        assert writable == bytearray(buf)


@given(st.binary(max_size=300), st.data())
@FUZZ
def test_random_bytes(buf, data):
    exercise(buf, data.draw(st.integers(0, len(buf))))


@given(lying_records())
@FUZZ
def test_lying_records(buf):
    exercise(buf, 0)


@given(st.lists(records, min_size=1, max_size=4), st.data())
@FUZZ
def test_scan_counts_whole_records(parts, data):
    buf = b"".join(bytes(part) for part in parts)
    cut = data.draw(st.integers(0, len(buf)))
    whole = 0
    while whole < len(parts) and sum(map(len, parts[:whole + 1])) <= cut:
        whole += 1
    status, position, count = record.scan(buf[:cut], 0, -1, True)
    assert (position, count) == (sum(map(len, parts[:whole])), whole)
    assert status == (RECORD_END if position == cut else RECORD_TRUNCATED)


@st.composite
def lying_batches(draw):
    inner = []
    for _ in range(draw(st.integers(0, 3))):
        body, props = draw(st.binary(max_size=20)), draw(st.binary(max_size=20))
        inner.append(struct.pack(">iiiii", 22 + len(body) + len(props), 0, 0, 9, len(body))
                     + body + struct.pack(">h", len(props)) + props)
    buf = bytearray(b"".join(inner))
    if buf and draw(st.booleans()):
        width = draw(st.sampled_from([1, 2, 4]))
        at = draw(st.integers(0, max(0, len(buf) - width)))
        buf[at:at + width] = draw(st.binary(min_size=width, max_size=width))
    return bytes(buf[:draw(st.integers(0, len(buf)))])


@given(st.one_of(lying_batches(), st.binary(max_size=120)))
@FUZZ
def test_split_batch_never_reads_out_of_bounds(buf):
    try:
        entries = record.split_batch(buf)
    except ValueError:
        return
    for _flag, body_start, body_length, properties in entries:
        assert 0 <= body_start and body_start + body_length <= len(buf)
        assert isinstance(properties, str)
