"""The fast paths' header reader takes a request only as the Python decoder reads it.

Method: ``request_read.read_fields`` (the C reader the send and pull fast paths share) reads
every send frame of tests/unit/broker/test_send_fast.py's table (binary and JSON headers, real
clients' spacing and escapes) and 3,000 seeded mutations of them (bytes of the header changed,
cut or doubled) with the send field table; whenever it takes a frame, protocol/command.py's
decode must take it too with the same code, opaque, flag, non-empty fields and body. A pull
header's fields are read in both encodings, and a duplicate key is refused.
"""
import pytest

from pybroker._fast import frame as frame_codec
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


def test_a_duplicate_key_outside_the_table_is_refused():
    """CI at 8497893: a mutation named "," twice; the decoder refuses any repeated key."""
    frame = command.encode(RemotingCommand(310, 0, 409, 5, 0, None, {
        "a": "PG", "b": "TopicTest", "zz": "1"}), 0)
    assert read_send_fields(frame) is not None
    header_length = int.from_bytes(frame[4:8], "big") & 0xFFFFFF
    header = frame[8:8 + header_length].replace(b'"zz":"1"', b'"zz":"1","zz":"2"')
    body = frame[8 + header_length:]
    doubled = (4 + len(header) + len(body)).to_bytes(4, "big") + len(header).to_bytes(
        4, "big") + header + body
    assert b'"zz":"1","zz":"2"' in doubled
    with pytest.raises(ProtocolError):
        command.decode(doubled, 0, len(doubled))
    assert read_send_fields(doubled) is None


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


ANSWER_NAMES = ["queueOffset", "recallHandle"]


def _filled(pieces: tuple, stored: bool, recall: bool, opaque: int) -> bytes:
    """A send fast path answer header from its template (send_fast.response_template)."""
    if not stored:
        return pieces[0] + str(opaque).encode() + pieces[4]
    values = [b"C0A8000100002A9F0000000000000001", b"2", b"777"]
    header = pieces[0] + values[0] + pieces[1] + values[1] + pieces[2] + values[2] + pieces[3]
    if recall:
        return header + b"rmq_sys_wheel_timer 5 0" + pieces[5] + str(opaque).encode() + pieces[4]
    return header + str(opaque).encode() + pieces[4]


def test_the_send_answers_read_as_responses():
    """The gRPC front reads the send fast path's answers (every status, recall or not) with
    read_response: code, opaque, queueOffset and recallHandle as the decoder reads them; a
    request is not a response, and an answer is not a request."""
    from pybroker.broker.send_fast import response_template
    from pybroker.store.status import PutStatus

    fields = {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
    for status in PutStatus:
        for recall in (False, True):
            stored, pieces, code = response_template(status, fields, 4 << 20, recall)
            header = _filled(pieces, stored, recall and stored, -5)
            frame = frame_codec.encode_frame(0, header, None)
            read = request_read.read_fields(frame, ANSWER_NAMES, response=True)
            decoded = command.decode(frame, 0, len(frame))
            assert read is not None, (status, recall)
            assert (read["code"], read["opaque"]) == (decoded.code, decoded.opaque) == (code, -5)
            expected = {name: decoded.ext_fields[name] for name in ANSWER_NAMES
                        if name in (decoded.ext_fields or {})}
            assert read["fields"] == expected
            assert request_read.read_fields(frame, ANSWER_NAMES) is None
    refusal = command.encode(command.create_response(RemotingCommand(10, opaque=9), 1,
                                                     'busy "now"', {"x": "y"}))
    read = request_read.read_fields(refusal, ANSWER_NAMES, response=True)
    assert read is not None and (read["code"], read["opaque"], read["fields"]) == (1, 9, {})
    for _, frame, *_ in ROWS:
        assert request_read.read_fields(frame, ANSWER_NAMES, response=True) is None
