"""The pull fast path's header reader accepts a header only as the send fast path's reader does.

Method: ``request_read.read_request`` (the pull fast path's reader) is the twin of the header
part of ``send_read.read_send_request`` until the send reader is ported onto it. Both read
every send frame of tests/unit/broker/test_send_fast.py's table (binary and JSON headers, real
clients' spacing and escapes, duplicates) and 3,000 seeded mutations of them (bytes of the
header changed, cut or doubled); whenever the send reader takes a frame, the general reader
with the send table must take it with the same code, opaque, flag, fields and body, and
whenever the general reader refuses one, so must the send reader.
"""
import pytest

from pybroker._fast import request_read, send_read
from pybroker.protocol import command, headers
from pybroker.protocol.command import RemotingCommand

from tests.unit.broker.test_send_fast import ROWS, duplicate_key_frame

SEND_NAMES = [field.wire_name for field in headers.SEND_MESSAGE_REQUEST.fields]


def both(frame: bytes):
    sent = send_read.read_send(frame)
    general = request_read.read_fields(frame, SEND_NAMES, short_names=True, long_names_code=10)
    return sent, general


def check(frame: bytes) -> bool:
    sent, general = both(frame)
    if general is None:
        assert sent is None, frame
    if sent is not None:
        assert general is not None, frame
        # An empty value is an absent optional field (headers.py): the send reader drops it.
        read = {name: value for name, value in general["fields"].items() if value != ""}
        assert (general["code"], general["opaque"], general["flag"], read,
                general["body"]) == (sent["code"], sent["opaque"], sent["rpc_flag"],
                                     sent["fields"], sent["body"]), frame
    return sent is not None


@pytest.mark.parametrize("name,frame", [(row[0], row[1]) for row in ROWS])
def test_the_send_table_reads_alike(name, frame):
    check(frame)


def test_a_duplicate_key_is_refused_by_both():
    assert both(duplicate_key_frame()) == (None, None)


def test_mutated_headers_read_alike(rand):
    frames = [row[1] for row in ROWS]
    taken = 0
    for _ in range(3000):
        frame = bytearray(rand.choice(frames))
        header_length = int.from_bytes(frame[4:8], "big") & 0xFFFFFF
        for _ in range(rand.randrange(1, 4)):
            at = 8 + rand.randrange(header_length)
            choice = rand.randrange(3)
            if choice == 0:
                frame[at] = rand.randrange(256)
            elif choice == 1:
                frame[at] = rand.choice(b'"{}:,\\ 0a\x00\x7f\x80')
            else:
                frame[at] = frame[8 + rand.randrange(header_length)]
        taken += check(bytes(frame))
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

