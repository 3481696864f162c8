"""The fast paths' header reader takes a request only as the Python decoder reads it.

Method: ``request_read.read_fields`` (the C reader the send and pull fast paths share) reads
every send frame of tests/unit/broker/test_send_fast.py's table (binary and JSON headers, real
clients' spacing and escapes) and 3,000 seeded mutations of them (bytes of the header changed,
cut or doubled) with the send field table; whenever it takes a frame, protocol/command.py's
decode must take it too with the same code, opaque, flag, non-empty fields and body. A pull
header's fields are read in both encodings, and a duplicate key is refused.
"""
import pytest

from pybroker._fast import request_read
from pybroker.errors import ProtocolError
from pybroker.protocol import command, headers
from pybroker.protocol.command import RemotingCommand

from tests.unit.broker.test_send_fast import ROWS, duplicate_key_frame
from tests.unit._fast.header_mutation import mutated

SEND_FIELDS = headers.SEND_MESSAGE_REQUEST.fields
SEND_NAMES = [field.wire_name for field in SEND_FIELDS]


def read_send_fields(frame: bytes):
    return request_read.read_fields(frame, SEND_NAMES, short_names=True, long_names_code=10)


def check(frame: bytes) -> bool:
    """True when the reader takes the frame; then the decoder agrees on every value."""
    read = read_send_fields(frame)
    if read is None:
        return False
    try:
        decoded = command.decode(frame, 0, len(frame))
    except ProtocolError:
        raise AssertionError(f"the reader took a frame the decoder refuses: {frame!r}") from None
    assert (read["code"], read["opaque"], read["flag"]) == (
        decoded.code, decoded.opaque, decoded.flag), frame
    assert not decoded.flag & 1, frame
    wire = {field.wire_name: field.wire_name if decoded.code == 10 else field.short_name
            for field in SEND_FIELDS}
    expected = {name: decoded.ext_fields[key] for name, key in wire.items()
                if decoded.ext_fields.get(key)}
    assert {name: value for name, value in read["fields"].items() if value} == expected, frame
    assert read["body"] == bytes(decoded.body or b""), frame
    return True


@pytest.mark.parametrize("name,frame", [(row[0], row[1]) for row in ROWS])
def test_the_send_table_reads_as_decoded(name, frame):
    check(frame)


def test_a_duplicate_key_is_refused():
    assert read_send_fields(duplicate_key_frame()) is None


def test_mutated_headers_read_as_decoded(rand):
    frames = [row[1] for row in ROWS]
    taken = 0
    for _ in range(3000):
        taken += check(mutated(rand.choice(frames), rand, b'"{}:,\\ 0a\x00\x7f\x80'))
    assert taken > 100


def test_a_pull_header_reads_its_fields():
    names = [field.wire_name for field in headers.PULL_MESSAGE_REQUEST.fields]
    values = {"consumerGroup": "G", "topic": "T", "queueId": "3", "queueOffset": "99",
              "maxMsgNums": "32", "sysFlag": "3", "commitOffset": "98",
              "suspendTimeoutMillis": "15000", "subVersion": "1", "expressionType": "TAG",
              "bname": "b"}
    for serialize in (0, 1):
        frame = command.encode(RemotingCommand(11, 0, 395, 7, 0, None, values), serialize)
        read = request_read.read_fields(frame, names)
        assert read is not None and read["code"] == 11 and read["opaque"] == 7
        assert read["fields"] == {k: v for k, v in values.items() if k != "bname"}
