# Tests of QUERY_MESSAGE, VIEW_MESSAGE_BY_ID and the queue offset / store time handlers.
"""Goal: query by key (plain and unique-key), view by physical offset and the four queue look-ups
answer with Java's codes, remarks, header fields and raw records. Method: a real MessageStore
on tmp_path filled through put_messages with a controlled store clock, handlers called directly
with requests built as clients send them; bodies decoded and compared with what was put.
"""
import asyncio

import pytest

from pybroker._fast import record as record_codec
from pybroker.broker import query
from pybroker.errors import HeaderError
from pybroker.protocol import constants
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand
from pybroker.protocol.headers import QUERY_MESSAGE_RESPONSE
from pybroker.protocol.properties import decode_properties, encode_properties
from tests.unit.broker.test_pull import HOST, TOPIC, Broker, bodies_of

STORE_TIMES_MS = [1000, 2000, 2000, 3000]


class Clock:
    """Store clock handing out STORE_TIMES_MS, then the last one forever."""

    def __init__(self, times):
        self.times = list(times)

    def __call__(self) -> int:
        return self.times.pop(0) if len(self.times) > 1 else self.times[0]


@pytest.fixture
def broker(tmp_path):
    # The store reads its clock once at construction (boot time) and once per put.
    created = Broker(tmp_path, clock_ms=Clock([0] + STORE_TIMES_MS))
    yield created
    created.close()


def put(broker, body: bytes, keys: str | None = None, uniq_key: str | None = None,
        queue_id: int = 0) -> int:
    """Put one record with KEYS / UNIQ_KEY; returns its physical offset."""
    properties = encode_properties({constants.Property.KEYS: keys,
                                    constants.Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq_key})
    encoded = properties.encode()
    buffer = bytearray(record_codec.encoded_size(len(body), len(TOPIC), len(encoded), 0))
    record_codec.encode_into(buffer, 0, TOPIC.encode(), queue_id, 0, body, encoded, 0,
                             1_700_000_000_000, HOST, 40000, HOST, 10911)
    result = broker.store.put_messages(buffer, TOPIC, queue_id, 1, 0)
    assert result.status.stored
    return result.physical_offset


def call(broker, handler, code: int, ext_fields: dict[str, str]) -> RemotingCommand:
    request = RemotingCommand(code, opaque=11, ext_fields=ext_fields)
    response = asyncio.run(handler(broker.ctx, broker.channel, request))
    assert response.opaque == 11 and response.is_response
    return response


def query_by_key(broker, key: str, max_num: int = 32, begin_ms: int = 0,
                 end_ms: int = 1 << 62, **extra: str) -> RemotingCommand:
    ext_fields = {"topic": TOPIC, "key": key, "maxNum": str(max_num),
                  "beginTimestamp": str(begin_ms), "endTimestamp": str(end_ms), **extra}
    return call(broker, query.handle_query_message, RequestCode.QUERY_MESSAGE, ext_fields)


# --- QUERY_MESSAGE ------------------------------------------------------------------------------
def test_query_by_key_returns_every_record_with_that_key(broker):
    put(broker, b"one", keys="order-1 shared")
    put(broker, b"two", keys="order-2")
    put(broker, b"three", keys="shared")
    response = query_by_key(broker, "shared")
    assert response.code == ResponseCode.SUCCESS and response.remark is None
    assert sorted(bodies_of(response.body)) == [b"one", b"three"]
    header = QUERY_MESSAGE_RESPONSE.parse(response.ext_fields)
    assert header.index_last_update_timestamp == 2000
    assert header.index_last_update_physical_offset > 0


def test_query_respects_the_time_range(broker):
    put(broker, b"at-1000", keys="k")
    put(broker, b"at-2000", keys="k")
    put(broker, b"at-2000b", keys="k")
    response = query_by_key(broker, "k", begin_ms=1500, end_ms=2500)
    assert sorted(bodies_of(response.body)) == [b"at-2000", b"at-2000b"]


def test_query_not_found_keeps_the_index_header(broker):
    put(broker, b"one", keys="present")
    response = query_by_key(broker, "absent")
    assert response.code == ResponseCode.QUERY_NOT_FOUND
    assert response.remark == "can not find message, maybe time range not correct"
    assert response.body is None
    assert set(response.ext_fields) == {"indexLastUpdateTimestamp", "indexLastUpdatePhyoffset"}


def test_unique_key_query_overrides_max_num_with_default_query_max_num(broker):
    for body in (b"a", b"b", b"c"):
        put(broker, body, uniq_key="7F0000010001ABCD")
    assert len(bodies_of(query_by_key(broker, "7F0000010001ABCD", max_num=1).body)) == 1
    response = query_by_key(broker, "7F0000010001ABCD", max_num=1, _UNIQUE_KEY_QUERY="true")
    records = bodies_of(response.body)
    assert sorted(records) == [b"a", b"b", b"c"]


def test_query_body_records_carry_their_properties(broker):
    put(broker, b"x", keys="kk", uniq_key="UNIQ1")
    response = query_by_key(broker, "UNIQ1", _UNIQUE_KEY_QUERY="true")
    record = record_codec.decode(response.body, 0)
    assert decode_properties(record.properties)[constants.Property.KEYS] == "kk"


def test_query_without_key_is_a_header_error(broker):
    with pytest.raises(HeaderError, match="key"):
        call(broker, query.handle_query_message, RequestCode.QUERY_MESSAGE,
             {"topic": TOPIC, "maxNum": "32", "beginTimestamp": "0", "endTimestamp": "1"})


# --- VIEW_MESSAGE_BY_ID -------------------------------------------------------------------------
def view(broker, physical_offset) -> RemotingCommand:
    return call(broker, query.handle_view_message_by_id, RequestCode.VIEW_MESSAGE_BY_ID,
                {"offset": str(physical_offset), "topic": TOPIC})


def test_view_by_physical_offset_returns_the_one_record(broker):
    put(broker, b"first")
    second = put(broker, b"second")
    put(broker, b"third")
    response = view(broker, second)
    assert response.code == ResponseCode.SUCCESS and response.remark is None
    assert bodies_of(response.body) == [b"second"]
    assert record_codec.decode(response.body, 0).physical_offset == second


@pytest.mark.parametrize("where", ["past_end", "inside_record", "negative"])
def test_view_where_no_record_starts_is_system_error(broker, where):
    second = put(broker, b"first") + put(broker, b"second")
    physical_offset = {"past_end": broker.store.max_physical_offset + 1000,
                       "inside_record": second + 3, "negative": -5}[where]
    response = view(broker, physical_offset)
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark == f"can not find message by the offset, {physical_offset}"
    assert response.body is None


# --- queue offsets and store times --------------------------------------------------------------
def offset_of(response: RemotingCommand) -> int:
    assert response.code == ResponseCode.SUCCESS
    return int(response.ext_fields["offset"])


def fill(broker) -> None:
    for number in range(len(STORE_TIMES_MS)):
        put(broker, b"m%d" % number)


def test_max_and_min_offset(broker):
    fill(broker)
    queue = {"topic": TOPIC, "queueId": "0"}
    assert offset_of(call(broker, query.handle_get_max_offset, RequestCode.GET_MAX_OFFSET,
                          queue)) == 4
    assert offset_of(call(broker, query.handle_get_max_offset, RequestCode.GET_MAX_OFFSET,
                          dict(queue, committed="false"))) == 4
    assert offset_of(call(broker, query.handle_get_min_offset, RequestCode.GET_MIN_OFFSET,
                          queue)) == 0


def test_offsets_of_an_unknown_queue_are_zero(broker):
    queue = {"topic": "Unknown", "queueId": "3"}
    assert offset_of(call(broker, query.handle_get_max_offset, RequestCode.GET_MAX_OFFSET,
                          queue)) == 0
    assert offset_of(call(broker, query.handle_get_min_offset, RequestCode.GET_MIN_OFFSET,
                          queue)) == 0


@pytest.mark.parametrize("timestamp_ms, boundary, expected", [
    (2000, None, 1), (2000, "LOWER", 1), (2000, "lower", 1), (2000, "bogus", 1),
    # No boundaryType (4.x clients): Java 4.9's nearest store time, ties to the earlier.
    (2400, None, 2), (2500, None, 2), (2600, None, 3), (0, None, 0), (9000, None, 3),
    (2000, "UPPER", 2), (2000, "upper", 2), (2000, "Upper", 2),
    (2500, "LOWER", 3), (2500, "UPPER", 2),
    (0, "LOWER", 0), (9000, "LOWER", 4),
])
def test_search_offset_by_timestamp(broker, timestamp_ms, boundary, expected):
    fill(broker)
    ext_fields = {"topic": TOPIC, "queueId": "0", "timestamp": str(timestamp_ms)}
    if boundary is not None:
        ext_fields["boundaryType"] = boundary
    response = call(broker, query.handle_search_offset_by_timestamp,
                    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, ext_fields)
    assert offset_of(response) == expected


def test_earliest_message_store_time(broker):
    fill(broker)
    response = call(broker, query.handle_get_earliest_msg_storetime,
                    RequestCode.GET_EARLIEST_MSG_STORETIME, {"topic": TOPIC, "queueId": "0"})
    assert response.code == ResponseCode.SUCCESS
    assert response.ext_fields == {"timestamp": str(STORE_TIMES_MS[0])}
    unknown = call(broker, query.handle_get_earliest_msg_storetime,
                   RequestCode.GET_EARLIEST_MSG_STORETIME, {"topic": TOPIC, "queueId": "2"})
    assert unknown.ext_fields == {"timestamp": "-1"}


def test_bad_queue_id_is_a_header_error(broker):
    with pytest.raises(HeaderError, match="queueId"):
        call(broker, query.handle_get_max_offset, RequestCode.GET_MAX_OFFSET,
             {"topic": TOPIC, "queueId": "zero"})


def test_handlers_table():
    assert set(query.HANDLERS) == {RequestCode.QUERY_MESSAGE, RequestCode.VIEW_MESSAGE_BY_ID,
                                   RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
                                   RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                                   RequestCode.GET_EARLIEST_MSG_STORETIME}
