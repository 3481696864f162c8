"""pybroker.protocol.message_id builds and parses RocketMQ's offset and unique message ids
(protocol.md §3.5).

Method: a hand-computed offset id, round trips for IPv4/IPv6, rejection of bad strings, and
unique ids checked field by field (IP, pid, time since the local month start, counter).
"""
import datetime
import os
import struct
import time

import pytest

from pybroker.protocol.message_id import (create_uniq_id, decode_offset_message_id,
                                          decode_uniq_id_timestamp, offset_message_id)


def test_offset_id_golden():
    # 10.0.0.1 : 10911 (0x2A9F), physical offset 123456 (0x1E240).
    assert offset_message_id(bytes([10, 0, 0, 1]), 10911, 123456) == \
        "0A000001" "00002A9F" "000000000001E240"


@pytest.mark.parametrize("ip", [bytes([127, 0, 0, 1]), bytes(range(16))])
@pytest.mark.parametrize("port,offset", [(0, 0), (10911, 2**40 + 5), (65535, 2**63 - 1)])
def test_offset_id_round_trip(ip, port, offset):
    message_id = offset_message_id(ip, port, offset)
    assert len(message_id) == (32 if len(ip) == 4 else 56)
    assert message_id == message_id.upper()
    assert decode_offset_message_id(message_id) == (ip, port, offset)
    assert decode_offset_message_id(message_id.lower()) == (ip, port, offset)


@pytest.mark.parametrize("bad", ["", "0A00", "Z" * 32, "0A000001 0002A9F000000000001E240",
                                 "0" * 33, "0" * 55, None])
def test_decode_offset_id_rejects(bad):
    with pytest.raises(ValueError):
        decode_offset_message_id(bad)


def test_offset_id_rejects_bad_parts():
    with pytest.raises(ValueError):
        offset_message_id(b"\x01\x02", 1, 1)
    with pytest.raises(ValueError):
        offset_message_id(bytes(4), 2**31, 1)


def month_start_ms(now_ms: int) -> int:
    local = datetime.datetime.fromtimestamp(now_ms / 1000)
    start = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(start.timestamp() * 1000)


def test_uniq_id_fields():
    before_ms = time.time_ns() // 1_000_000
    first, second = create_uniq_id(), create_uniq_id()
    after_ms = time.time_ns() // 1_000_000
    assert len(first) == 32 and first == first.upper() and first != second
    raw_first, raw_second = bytes.fromhex(first), bytes.fromhex(second)
    assert raw_first[:10] == raw_second[:10]                    # ip + pid + hash prefix
    pid, = struct.unpack_from(">h", raw_first, 4)
    assert pid & 0xFFFF == os.getpid() & 0xFFFF
    span_ms, counter = struct.unpack_from(">iH", raw_first, 10)
    assert before_ms - month_start_ms(before_ms) <= span_ms <= after_ms - month_start_ms(after_ms)
    assert struct.unpack_from(">H", raw_second, 14)[0] == (counter + 1) & 0xFFFF


def test_uniq_id_timestamp():
    created_ms = time.time_ns() // 1_000_000
    uniq_id = create_uniq_id()
    later_ms = created_ms + 5000
    assert abs(decode_uniq_id_timestamp(uniq_id, now_ms=later_ms) - created_ms) < 2000
    # Java assumes the previous month when the time would not be in the past.
    this_month_ms = month_start_ms(later_ms)
    span_ms = int(uniq_id[20:28], 16)
    decoded = decode_uniq_id_timestamp(uniq_id, now_ms=this_month_ms + 1)
    assert decoded == month_start_ms(this_month_ms - 1) + span_ms
    with pytest.raises(ValueError):
        decode_uniq_id_timestamp("XYZ")
