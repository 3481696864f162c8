"""Malformed SQL92 selectors never hurt a running broker: every one gets a RocketMQ answer.

Method: a real `pybroker standalone` with enablePropertyFilter=true on free 127.0.0.1 ports and
a few messages in a topic. Seeded random selectors (grammar-driven, mutated, token soup) plus
extremes (a 1 MiB selector, 10,000 nested parentheses, a 5,000-term OR chain, control and
astral characters) go in as CHECK_CLIENT_CONFIG bodies, as pulls carrying the selector, and as
heartbeat subscriptions followed by pulls. Each answer must carry one of the codes Java uses
for that request; afterwards the broker still sends and pulls normally and its log holds no
traceback.
"""
import orjson
import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.protocol import bodies
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.remoting.client import SyncRemotingClient
from tests import sql92_cases

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
TIMEOUT_MS = 30_000
TOPIC = "SqlFuzz"
RANDOM_SELECTORS = 400
CHECK_CODES = {ResponseCode.SUCCESS, ResponseCode.SUBSCRIPTION_PARSE_FAILED}
PULL_CODES = {ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND,
              ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.SUBSCRIPTION_PARSE_FAILED}
HEARTBEAT_PULL_CODES = PULL_CODES - {ResponseCode.SUBSCRIPTION_PARSE_FAILED} | {
    ResponseCode.FILTER_DATA_NOT_EXIST}
# Raw CHECK_CLIENT_CONFIG bodies no client would send (answered SYSTEM_ERROR or as Java).
RAW_CHECK_BODIES = (b'{"subscriptionData":{"topic":"SqlFuzz","subString":"\\ud800",'
                    b'"expressionType":"SQL92"}}', b"{", b"[]", b'{"subscriptionData":5}',
                    b'{"subscriptionData":{"expressionType":"SQL92"}}', b"\xff\xfe")
EXTREMES = ("a = 1 OR " * 5000 + "a = 2", "(" * 10_000 + "a = 1" + ")" * 10_000,
            "NOT " * 10_000 + "a", "a = '" + "x" * (1 << 20) + "'", "a = 1\x00", "\x01\x02",
            "a = '\U0001f600'", "- " * 3000 + "1 = a", "a IN (" + "'x'," * 5000 + "'y')")


def _send(client, body: bytes, properties: dict):
    ext = {"a": "fuzz_producer", "b": TOPIC, "c": "TBW102", "d": "1", "e": "0", "f": "0",
           "g": "1700000000000", "h": "0", "i": props.encode_properties(properties), "j": "0",
           "k": "false", "m": "false"}
    return client.invoke(create_request(RequestCode.SEND_MESSAGE_V2, ext, body), TIMEOUT_MS)


def _pull(client, group: str, expression: str | None, sys_flag: int):
    ext = {"consumerGroup": group, "topic": TOPIC, "queueId": "0", "queueOffset": "0",
           "maxMsgNums": "32", "sysFlag": str(sys_flag), "commitOffset": "0",
           "suspendTimeoutMillis": "0", "subVersion": "0", "expressionType": "SQL92"}
    if expression is not None:
        ext["subscription"] = expression
    return client.invoke(create_request(RequestCode.PULL_MESSAGE, ext), TIMEOUT_MS)


def _check(client, expression: str):
    subscription = bodies.SubscriptionData(topic=TOPIC, sub_string=expression,
                                           expression_type="SQL92", sub_version=1)
    body = bodies.encode_check_client_request(
        bodies.CheckClientRequest("127.0.0.1@fuzz", "fuzz", subscription))
    return client.invoke(create_request(RequestCode.CHECK_CLIENT_CONFIG, None, body),
                         TIMEOUT_MS)


def _heartbeat(client, group: str, expression: str):
    body = orjson.dumps({"clientID": "127.0.0.1@fuzz", "producerDataSet": [],
                         "consumerDataSet": [{
                             "groupName": group, "consumeType": "CONSUME_PASSIVELY",
                             "messageModel": "CLUSTERING",
                             "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
                             "subscriptionDataSet": [{
                                 "topic": TOPIC, "subString": expression,
                                 "expressionType": "SQL92", "classFilterMode": False,
                                 "tagsSet": [], "codeSet": [], "subVersion": 1}]}]})
    return client.invoke(create_request(RequestCode.HEART_BEAT, None, body), TIMEOUT_MS)


def _selectors(rand) -> list[str]:
    return list(EXTREMES) + [sql92_cases.random_expression(rand)
                             for _ in range(RANDOM_SELECTORS)]


def test_random_and_extreme_selectors_get_answers_and_leave_the_broker_healthy(tmp_path, rand):
    with StandaloneBroker(tmp_path, {"enablePropertyFilter": "true",
                                     "maxMessageSize": str(4 << 20)}) as broker:
        with SyncRemotingClient() as client:
            client.connect(broker.broker_addr)
            for index, properties in enumerate(sql92_cases.TABLE_MESSAGES):
                assert _send(client, b"m%d" % index, properties).code == ResponseCode.SUCCESS
            for number, expression in enumerate(_selectors(rand)):
                checked = _check(client, expression)
                assert checked.code in CHECK_CODES, (expression[:200], checked)
                pulled = _pull(client, "fuzz_pull", expression, 0x4)
                assert pulled.code in PULL_CODES, (expression[:200], pulled.code, pulled.remark)
                group = f"fuzz_hb_{number}"
                assert _heartbeat(client, group, expression).code == ResponseCode.SUCCESS
                pulled = _pull(client, group, None, 0x0)
                assert pulled.code in HEARTBEAT_PULL_CODES, (expression[:200], pulled.code)
            for body in RAW_CHECK_BODIES:
                checked = client.invoke(create_request(RequestCode.CHECK_CLIENT_CONFIG, None,
                                                       body), TIMEOUT_MS)
                assert checked.code in CHECK_CODES | {ResponseCode.SYSTEM_ERROR}, (body, checked)
            assert _send(client, b"after", {"a": "1"}).code == ResponseCode.SUCCESS
            assert _pull(client, "fuzz_after", "a = 1", 0x4).code == ResponseCode.SUCCESS
        log = broker._log_text()
    assert "Traceback" not in log, log[-3000:]
