"""Every request code pybroker serves accepts the fields 5.x clients add to their headers
(RpcRequestHeader's ``ns``, ``nsd``, ``bname``, ``oway`` and TopicRequestHeader's ``lo``) and
answers as it answers without them.

Java 5.3.3's broker reads none of these for itself: ``bname`` names the broker the client
means (only the broker container and static topics route by it; a plain broker never compares
it with its own name), ``ns``/``nsd`` belong to the client's namespace handling, ``oway`` to its
RPC layer, ``lo`` asks for a static topic's queue mapping (pybroker has no static topics). So a
request naming another broker, a namespace and both hints must be answered exactly as the same
request without them.

Method: one standalone broker (real process, real sockets). For each code of the routing
table a request is built from the code's header schema (required fields filled with values
that reach the handler), sent with the 5.x fields and then without; code and remark must match.
Sends go through the C fast path and the Python path alike (SEND_MESSAGE_V2 and
SEND_MESSAGE), with the 5.x fields in both header encodings.
"""
import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.broker.routing import DATA_CODES, METADATA_CODES
from pybroker.protocol import headers
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from tests.ha_support import client_for, send

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "HeaderFieldsTopic"
SEND_TOPIC = "HeaderFieldsSend"     # the loop above deletes TOPIC (and may re-create it empty)
GROUP = "header_fields_group"
FIELDS_5X = {"ns": "some-namespace", "nsd": "true", "bname": "another-broker", "oway": "true",
             "lo": "true"}
# Values that reach the handler; a name-like field gets a name.
_VALUES = {"topic": TOPIC, "defaultTopic": "TBW102", "consumerGroup": GROUP, "group": GROUP,
           "producerGroup": GROUP, "groupName": GROUP, "topicFilterType": "SINGLE_TAG",
           "readQueueNums": "4", "writeQueueNums": "4", "perm": "6", "maxMsgNums": "8",
           "key": "some-key", "statsName": "TOPIC_PUT_NUMS", "statsKey": TOPIC,
           "clientID": "client-1", "clientId": "client-1",
           "commitOrRollback": "8"}   # a commit (NOT_TYPE is not answered, as in Java)
_BY_TYPE = {headers.STR: "x", headers.INT: "0", headers.LONG: "0", headers.BOOL: "false",
            headers.FLOAT: "0"}


def request_fields(code: int) -> dict[str, str]:
    entry = headers.REQUEST_SCHEMAS.get(code)
    if entry is None:
        return {}
    schema, short_names = entry
    fields = {}
    for field in schema.fields:
        if field.required or field.wire_name in _VALUES:
            key = field.short_name if short_names and field.short_name else field.wire_name
            fields[key] = _VALUES.get(field.wire_name, _BY_TYPE[field.type])
    return fields


def answered(client, code: int, fields: dict[str, str]) -> tuple:
    response = client.invoke(create_request(code, dict(fields)), 10_000)
    return response.code, response.remark


def test_every_code_answers_as_without_the_5x_fields(tmp_path):
    with StandaloneBroker(tmp_path) as broker, client_for(broker.broker_addr) as client:
        assert send(client, TOPIC, b"first", 0, "k1").code == ResponseCode.SUCCESS
        compared = 0
        for code in sorted(DATA_CODES | METADATA_CODES):
            fields = request_fields(code)
            with_5x = answered(client, code, {**fields, **FIELDS_5X})
            without = answered(client, code, fields)
            assert with_5x == without, (RequestCode(code).name, fields, with_5x, without)
            compared += 1
        assert compared == len(DATA_CODES | METADATA_CODES)
        # A send of either header encoding is stored: the first creates the topic (Python
        # path), the second of the same topic takes the C fast path.
        for code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE_V2,
                     RequestCode.SEND_MESSAGE):
            short = code == RequestCode.SEND_MESSAGE_V2
            fields = headers.encode_header(headers.SEND_MESSAGE_REQUEST, {
                "producer_group": GROUP, "topic": SEND_TOPIC, "default_topic": "TBW102",
                "default_topic_queue_nums": 4, "queue_id": 1, "sys_flag": 0,
                "born_timestamp": 1_700_000_000_000, "flag": 0, "properties": "",
                "broker_name": "another-broker"}, short_names=short)
            response = client.invoke(create_request(code, {**fields, **FIELDS_5X}, b"body"),
                                     10_000)
            assert response.code == ResponseCode.SUCCESS, (code, response.remark)
