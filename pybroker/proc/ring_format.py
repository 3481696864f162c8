# The put-request ring format: written once, used by the producer (RingPutter) and the appender.
"""Layout of one put request in a send ring, and of its answer in the completion ring.

One ring record is one put request (header fields native-endian; the ring never leaves the
host)::

    off       size  field
    0         8     request_id   int64, unique per worker; echoed in the completion
    8         4     queue_id     int32
    12        4     count        int32, records in the run
    16        4     sys_flag     int32, sysFlag of the run (transaction type bits are used)
    20        4     flags        int32, PUT_FLAG_WAIT_STORE
    24        2     topic_length int16, bytes of the UTF-8 topic (1..layout.TOPIC_MAX_BYTES)
    26        n     topic        UTF-8
    26+n      pad   to a multiple of 8 (put_header_size)
    header    ...   the whole encoded CommitLog records (one copy, patched by the appender)

The appender answers with one completion slot per request (``pybroker._fast.ring.CompletionRing``:
request_id, status code, count, physical offset, queue offset). The status code is the index of
the PutStatus in :data:`PUT_STATUSES` (every process runs the same code); :func:`status_code`
and :func:`status_of` convert.

Producer: the puts of both send paths are written in C with ``pybroker/_fast/put_request.pxd``
by ``SendPath`` (``pybroker/_fast/send/take.pyx``; ``proc/ring_putter.py`` asserts its header
size and wait flag against this module at import; RingPutter sizes a put with
:func:`put_request_size` first); :func:`write_put_request` is the same layout in Python, for the
tests that fill a ring themselves. Consumer: :func:`read_put_request` validates the header and
returns the topic and where the records start; the appender's hot loop reads the same layout in
C from put_request.pxd, checked against :data:`PUT_HEADER` at import
(tests/unit/broker/test_send_fast.py reads what SendPath wrote with :func:`read_put_request`).
Whoever changes this layout changes it here and in put_request.pxd
(docs/architecture/data-plane.md).
"""
import struct
from typing import NamedTuple

from pybroker._fast.append import PUT_REQUEST_LAYOUT
from pybroker.store import layout
from pybroker.store.status import PutStatus

__all__ = ["PUT_HEADER", "PUT_FLAG_WAIT_STORE", "PUT_STATUSES", "PutRequest", "put_header_size",
           "put_request_size", "write_put_request", "read_put_request", "status_code",
           "status_of"]

PUT_HEADER = struct.Struct("=qiiiih")
assert PUT_HEADER.size == 8 + 4 + 4 + 4 + 4 + 2
PUT_FLAG_WAIT_STORE = 1
_RECORD_ALIGN_BYTES = 8
# The C side (pybroker/_fast/put_request.pxd: the appender's drain loop reads it) must agree.
assert [PUT_REQUEST_LAYOUT[name] for name in ("request_id", "queue_id", "count", "sys_flag",
                                              "flags", "topic_length", "topic")] == \
    [0, 8, 12, 16, 20, 24, PUT_HEADER.size]
assert PUT_REQUEST_LAYOUT["align"] == _RECORD_ALIGN_BYTES
assert PUT_REQUEST_LAYOUT["topic_max_bytes"] == layout.TOPIC_MAX_BYTES
# Completion status codes: the index in this tuple.
PUT_STATUSES = tuple(PutStatus)
_STATUS_CODES = {status: code for code, status in enumerate(PUT_STATUSES)}


class PutRequest(NamedTuple):
    """A put request read from a ring; ``topic`` is None when the header is invalid."""
    request_id: int
    queue_id: int
    record_count: int
    sys_flag: int
    flags: int
    topic: str | None
    records_offset: int       # where the encoded records start in the ring's data
    records_end: int          # end of the request in the ring's data


def put_header_size(topic_length: int) -> int:
    """Bytes of a request header carrying a topic of ``topic_length`` UTF-8 bytes."""
    return (PUT_HEADER.size + topic_length + _RECORD_ALIGN_BYTES - 1) & -_RECORD_ALIGN_BYTES


def put_request_size(topic_length: int, records_bytes: int) -> int:
    """Ring bytes of a whole request: header, topic, padding, records."""
    return put_header_size(topic_length) + records_bytes


def write_put_request(data, offset: int, request_id: int, queue_id: int, count: int,
                      sys_flag: int, wait_store: bool, topic: bytes, records) -> None:
    """Write one request at ``offset`` of the ring's ``data`` (space reserved by the caller for
    :func:`put_request_size` bytes). ``records`` is any buffer of whole encoded records."""
    header_size = put_header_size(len(topic))
    PUT_HEADER.pack_into(data, offset, request_id, queue_id, count, sys_flag,
                         PUT_FLAG_WAIT_STORE if wait_store else 0, len(topic))
    data[offset + PUT_HEADER.size:offset + PUT_HEADER.size + len(topic)] = topic
    data[offset + header_size:offset + header_size + len(records)] = records


def read_put_request(data, offset: int, length: int) -> PutRequest:
    """Read the request of ``length`` ring bytes at ``offset``. An invalid header (topic
    length out of range, no records, topic not UTF-8) gives ``topic=None``: the appender
    answers MESSAGE_ILLEGAL."""
    request_id, queue_id, count, sys_flag, flags, topic_length = \
        PUT_HEADER.unpack_from(data, offset)
    header_size = put_header_size(topic_length)
    end = offset + length
    topic = None
    if 0 < topic_length <= layout.TOPIC_MAX_BYTES and header_size < length:
        topic_start = offset + PUT_HEADER.size
        try:
            topic = str(data[topic_start:topic_start + topic_length], "utf-8")
        except UnicodeDecodeError:
            topic = None
    return PutRequest(request_id, queue_id, count, sys_flag, flags, topic,
                      offset + header_size, end)


def status_code(status: PutStatus) -> int:
    """The completion slot's code of ``status``."""
    return _STATUS_CODES[status]


def status_of(code: int) -> PutStatus:
    """The PutStatus of a completion code; UNKNOWN_ERROR for a code no PutStatus has."""
    return PUT_STATUSES[code] if 0 <= code < len(PUT_STATUSES) else PutStatus.UNKNOWN_ERROR
