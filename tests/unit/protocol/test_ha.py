"""The HA wire codec reads and writes Java's classic HA bytes and refuses what cannot be them.

Method: table-driven vectors written from the protocol reference (protocol.md §6.2) - big-endian
longs and ints at fixed offsets - round-tripped through the codec, plus the partial-report and
bad-value cases a real socket delivers (split reads, garbage such as an HTTP greeting).
"""
import struct

import pytest

from pybroker.protocol import ha


def test_layout_vectors():
    assert ha.encode_report(0x0102030405060708) == bytes(range(1, 9))
    assert ha.encode_transfer_header(1 << 30, 32768) == \
        b"\x00\x00\x00\x00\x40\x00\x00\x00" + b"\x00\x00\x80\x00"
    assert ha.encode_transfer_header(7, 0) == struct.pack(">qi", 7, 0)   # heartbeat
    with pytest.raises(ValueError):
        ha.encode_report(-1)
    with pytest.raises(ValueError):
        ha.encode_transfer_header(0, ha.TRANSFER_BODY_MAX_BYTES + 1)


def test_last_whole_report_wins_and_partial_bytes_stay():
    data = ha.encode_report(10) + ha.encode_report(20) + ha.encode_report(30)[:5]
    offset, consumed = ha.last_report(data, 0, len(data))
    assert (offset, consumed) == (20, 16)
    assert ha.last_report(data, consumed, len(data)) == (None, consumed)
    assert ha.last_report(b"", 0, 0) == (None, 0)


def test_garbage_reports():
    # An HTTP greeting reads as a huge positive offset (the master refuses it as beyond its
    # max); bytes with the top bit set read as a negative one: not a report.
    offset, _ = ha.last_report(b"GET / HTTP/1.1\r\n", 0, 16)
    assert offset > 1 << 60
    with pytest.raises(ha.HAProtocolError):
        ha.last_report(b"\xff" * 8, 0, 8)


def test_transfer_header_parsing():
    buffer = b"xx" + ha.encode_transfer_header(4096, 100)
    assert ha.parse_transfer_header(buffer, 2) == (4096, 100)
    with pytest.raises(ha.HAProtocolError, match="negative offset"):
        ha.parse_transfer_header(struct.pack(">qi", -5, 0), 0)
    with pytest.raises(ha.HAProtocolError, match="transfer of"):
        ha.parse_transfer_header(struct.pack(">qi", 0, -1), 0)
    with pytest.raises(ha.HAProtocolError, match="transfer of"):
        ha.parse_transfer_header(struct.pack(">qi", 0, ha.SLAVE_READ_BUFFER_BYTES), 0)
