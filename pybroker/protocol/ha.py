# The classic master/slave HA wire format (protocol.md §6.2): byte layouts and parsing.
"""RocketMQ's classic HA protocol, as the 4.9.x ``HAService`` / 5.x ``DefaultHAService`` speak
it on the master's HA port. Raw TCP, no handshake, no framing beyond this::

    slave -> master: report   off 0  size 8  slave's max CommitLog offset (long, big-endian)
    master -> slave: transfer off 0  size 8  physical offset of the chunk (long)
                              off 8  size 4  body size (int), 0 for a heartbeat
                              off 12 size n  raw CommitLog bytes

A report is both the slave's request (the first one: where to start) and its acknowledgement
(every later one). The master reads only whole 8-byte reports and takes the last one in what
it read. A chunk never crosses a CommitLog file end (both sides use the same file size).

Parsing lives here (bytes only); the processes that speak it are in ``pybroker/proc/ha*.py``.
"""
import struct

REPORT = struct.Struct(">q")
TRANSFER_HEADER = struct.Struct(">qi")
REPORT_BYTES = REPORT.size
TRANSFER_HEADER_BYTES = TRANSFER_HEADER.size
assert REPORT_BYTES == 8
assert TRANSFER_HEADER_BYTES == 8 + 4
# Java's receive buffers: the master reads reports into 1 MiB, the slave chunks into 4 MiB.
SLAVE_READ_BUFFER_BYTES = 4 << 20
# A transfer unit larger than this cannot be a Java master's (haTransferBatchSize is an int
# of at most the read buffer): the slave closes the connection instead of waiting forever.
TRANSFER_BODY_MAX_BYTES = SLAVE_READ_BUFFER_BYTES - TRANSFER_HEADER_BYTES


class HAProtocolError(Exception):
    """The peer sent something that is not the HA protocol; close the connection."""


def encode_report(physical_offset: int) -> bytes:
    """A slave report of ``physical_offset`` (bytes)."""
    if physical_offset < 0:
        raise ValueError(f"a report offset must be >= 0, got {physical_offset}")
    return REPORT.pack(physical_offset)


def encode_transfer_header(physical_offset: int, body_bytes: int) -> bytes:
    """The 12-byte header of a transfer unit (``body_bytes`` 0 = heartbeat)."""
    if physical_offset < 0 or not 0 <= body_bytes <= TRANSFER_BODY_MAX_BYTES:
        raise ValueError(f"bad transfer header ({physical_offset}, {body_bytes})")
    return TRANSFER_HEADER.pack(physical_offset, body_bytes)


def last_report(buffer, start: int, end: int) -> tuple[int | None, int]:
    """The last whole report in ``buffer[start:end]`` and the position after it.

    Returns ``(offset or None, consumed_to)``: bytes of an incomplete report stay unconsumed.
    A negative offset is not a report (HAProtocolError).
    """
    whole = (end - start) // REPORT_BYTES * REPORT_BYTES
    if whole == 0:
        return None, start
    consumed_to = start + whole
    (offset,) = REPORT.unpack_from(buffer, consumed_to - REPORT_BYTES)
    if offset < 0:
        raise HAProtocolError(f"slave reported a negative offset {offset}")
    return offset, consumed_to


def parse_transfer_header(buffer, position: int) -> tuple[int, int]:
    """(physical offset, body size) of the header at ``position``; HAProtocolError when
    either is negative or the body cannot be a Java master's."""
    physical_offset, body_bytes = TRANSFER_HEADER.unpack_from(buffer, position)
    if physical_offset < 0:
        raise HAProtocolError(f"master sent a negative offset {physical_offset}")
    if not 0 <= body_bytes <= TRANSFER_BODY_MAX_BYTES:
        raise HAProtocolError(f"master sent a transfer of {body_bytes} bytes (limit "
                              f"{TRANSFER_BODY_MAX_BYTES})")
    return physical_offset, body_bytes
