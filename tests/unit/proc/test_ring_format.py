"""The put-request ring format reads back what it wrote and refuses invalid headers.

Method: write requests into a plain bytearray with ring_format.write_put_request and read them
with read_put_request (the appender's side), then corrupt single header fields; completion
status codes round-trip through status_code/status_of for every PutStatus.
"""
import pytest

from pybroker.proc import ring_format
from pybroker.store import layout
from pybroker.store.status import PutStatus

RECORDS = bytes(range(200))


def written(topic: bytes, records: bytes = RECORDS, offset: int = 8, **fields) -> bytearray:
    size = ring_format.put_request_size(len(topic), len(records))
    data = bytearray(offset + size + 8)
    values = dict(request_id=7, queue_id=3, count=2, sys_flag=4, wait_store=True) | fields
    ring_format.write_put_request(data, offset, values["request_id"], values["queue_id"],
                                  values["count"], values["sys_flag"], values["wait_store"],
                                  topic, records)
    return data


@pytest.mark.parametrize("topic", [b"T", b"TopicTest", "Tópico".encode(), b"x" * 127,
                                   b"%RETRY%" + b"g" * 248])
def test_round_trip(topic):
    data = written(topic)
    length = ring_format.put_request_size(len(topic), len(RECORDS))
    request = ring_format.read_put_request(data, 8, length)
    assert (request.request_id, request.queue_id, request.record_count,
            request.sys_flag) == (7, 3, 2, 4)
    assert request.flags == ring_format.PUT_FLAG_WAIT_STORE
    assert request.topic == topic.decode()
    assert (request.records_offset - 8) % 8 == 0
    assert bytes(data[request.records_offset:request.records_end]) == RECORDS


def test_no_wait_store_flag():
    data = written(b"T", wait_store=False)
    request = ring_format.read_put_request(data, 8, ring_format.put_request_size(1, len(RECORDS)))
    assert request.flags == 0


def test_header_size_is_aligned_and_covers_the_topic():
    for topic_length in range(0, 300):
        size = ring_format.put_header_size(topic_length)
        assert size % 8 == 0
        assert ring_format.PUT_HEADER.size + topic_length <= size < \
            ring_format.PUT_HEADER.size + topic_length + 8


def _with_topic_length(data: bytearray, topic_length: int) -> bytearray:
    ring_format.PUT_HEADER.pack_into(data, 8, 7, 3, 2, 4, 0, topic_length)
    return data


@pytest.mark.parametrize("topic_length", [0, -1, layout.TOPIC_MAX_BYTES + 1])
def test_topic_length_out_of_range_is_invalid(topic_length):
    data = _with_topic_length(written(b"TopicTest"), topic_length)
    length = ring_format.put_request_size(len(b"TopicTest"), len(RECORDS))
    assert ring_format.read_put_request(data, 8, length).topic is None


def test_request_without_records_is_invalid():
    data = written(b"TopicTest", records=b"")
    length = ring_format.put_request_size(len(b"TopicTest"), 0)
    request = ring_format.read_put_request(data, 8, length)
    assert request.topic is None
    assert request.request_id == 7      # the completion still names the request


def test_topic_not_utf8_is_invalid():
    data = written(b"\xff\xfe\xfd")
    length = ring_format.put_request_size(3, len(RECORDS))
    assert ring_format.read_put_request(data, 8, length).topic is None


def test_status_codes_round_trip():
    codes = [ring_format.status_code(status) for status in PutStatus]
    assert sorted(codes) == list(range(len(PutStatus)))
    for status in PutStatus:
        assert ring_format.status_of(ring_format.status_code(status)) is status
    assert ring_format.status_of(len(PutStatus)) is PutStatus.UNKNOWN_ERROR
    assert ring_format.status_of(-1) is PutStatus.UNKNOWN_ERROR
