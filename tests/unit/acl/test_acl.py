# ACL 1.0 pieces on their own: signatures, plain_acl.yml parsing, address patterns, the check.
"""Goal: the signature, file format and check rules match Java's ACL 1.0
(security-and-faults.md §3.3, PlainAccessValidator / PlainPermissionManager) and refuse what
they must.

Method: the signature is compared with an independent restatement (stdlib hmac over the
sorted values) and with hand-written byte strings; files are parsed from text; the check runs
on real RemotingCommand objects against a table read from a temporary file, and every refusal
is compared with Java's remark text. Reload is driven by rewriting the file and a fake clock.
"""
import base64
import hashlib
import hmac
import os

import orjson
import pytest

from pybroker.acl import signature
from pybroker.acl.addresses import AddressPatternError, compile_pattern, host_of
from pybroker.acl.plain_config import AclConfigError, Perm, parse_acl_text, perm_allows
from pybroker.acl.resources import ADMIN_CODES, AUTHENTICATED_CODES, RESOURCE_CODES, Rule, rule_of
from pybroker.acl.validator import RELOAD_CHECK_INTERVAL_S, AccessValidator, AclDenied
from pybroker.broker.routing import DATA_CODES, METADATA_CODES
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.errors import ProtocolError
from pybroker.protocol.command import create_request, decode
from pybroker.protocol.constants import MQVersion

SECRET = "secret-of-alice"
ACL_TEXT = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: alice-producer
    secretKey: secret-of-alice
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - orders=PUB
      - audit=PUB|SUB
    groupPerms:
      - blocked=DENY
  - accessKey: root-admin
    secretKey: 87654321x
    admin: true
  - accessKey: from-lan-only
    secretKey: 1234567890
    whiteRemoteAddress: 192.168.0.*
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
"""


def reference_signature(ext: dict, body: bytes, secret: str) -> str:
    content = "".join(ext[key] for key in sorted(ext) if key != "Signature").encode()
    return base64.b64encode(hmac.new(secret.encode(), content + body, hashlib.sha1).digest()
                            ).decode()


def signed(code, fields, body=None, key="alice-producer", secret=SECRET, version=None):
    request = create_request(code, dict(fields), body)
    if version is not None:
        request.version = version
    signature.sign_request(request.ext_fields, body, key, secret)
    return request


# --- signatures --------------------------------------------------------------------------------
def test_signature_is_hmac_sha1_over_sorted_values_then_body():
    ext = {"b": "TopicA", "a": "group", "AccessKey": "ak1234567"}
    body = b"hello"
    content = signature.signed_content(ext, body)
    # Upper-case keys sort first (String order), values are concatenated without separators.
    assert content == b"ak1234567grouphello"[:9] + b"groupTopicA" + b"hello"
    assert signature.calculate_signature(content, SECRET) == reference_signature(ext, body,
                                                                                 SECRET)


def test_sign_then_verify_and_every_tampering_fails():
    request = signed(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "orders"}, b"payload")
    fields = request.ext_fields
    assert signature.signature_matches(fields, b"payload", request.version, SECRET)
    assert not signature.signature_matches(fields, b"payloaD", request.version, SECRET)
    assert not signature.signature_matches({**fields, "b": "other"}, b"payload",
                                           request.version, SECRET)
    assert not signature.signature_matches({**fields, "x": "added"}, b"payload",
                                           request.version, SECRET)
    assert not signature.signature_matches(fields, b"payload", request.version, SECRET + "x")
    missing = {key: value for key, value in fields.items() if key != "Signature"}
    assert not signature.signature_matches(missing, b"payload", request.version, SECRET)


def test_non_ascii_values_are_utf8_and_keys_in_utf16_order():
    ext = {"k": "π≈3.14", "\U0001F600": "emoji", "\uFF21": "fullwidth"}
    # Java orders by UTF-16 code units: U+1F600 (D83D DE00) sorts before U+FF21 (code points
    # would put it after).
    assert signature.signed_content(ext, None) == "π≈3.14emojifullwidth".encode()


def test_unique_key_flag_skipped_only_for_old_clients():
    fields = {"topic": "orders", "key": "k", "_UNIQUE_KEY_QUERY": "true"}
    old = int(MQVersion.V4_9_3)
    ext = dict(fields, AccessKey="alice-producer")
    ext["Signature"] = signature.calculate_signature(
        signature.signed_content(ext, None, skip_unique_query_flag=True), SECRET)
    assert signature.signature_matches(ext, None, old, SECRET)
    assert not signature.signature_matches(ext, None, int(MQVersion.V4_9_8), SECRET)


# --- the file ------------------------------------------------------------------------------------
def test_file_is_read_like_java():
    table = parse_acl_text(ACL_TEXT)
    alice = table.accounts["alice-producer"]
    assert alice.topic_perms == {"orders": Perm.PUB, "audit": Perm.PUB | Perm.SUB}
    assert alice.group_perms == {"blocked": Perm.DENY}
    assert alice.default_topic_perm == Perm.DENY and alice.default_group_perm == Perm.SUB
    assert table.accounts["root-admin"].admin
    assert table.accounts["root-admin"].default_topic_perm == Perm.DENY   # missing = DENY
    assert table.accounts["from-lan-only"].secret_key == "1234567890"      # a YAML number
    assert SECRET not in repr(table) and SECRET not in repr(alice)


@pytest.mark.parametrize("text, message", [
    ("accounts:\n  - accessKey: short\n    secretKey: longenough\n", "longer than 6"),
    ("accounts:\n  - accessKey: longenough\n    secretKey: 12345678\n", "sample"),
    ("accounts:\n  - {accessKey: longenough, secretKey: secret99x, defaultTopicPerm: ALL}\n",
     "not PUB, SUB"),
    ("accounts:\n  - {accessKey: longenough, secretKey: secret99x, topicPerms: [a:PUB]}\n",
     "not name=PERM"),
    ("accounts:\n  - {accessKey: longenough, secretKey: secret99x}\n"
     "  - {accessKey: longenough, secretKey: secret99y}\n", "appears twice"),
    ("accounts:\n  - {accessKey: longenough, secretKey: secret99x, admin: yes please}\n",
     "not true or false"),
    ("globalWhiteRemoteAddresses: [300.1.1.*]\n", "outside 0..255"),
    ("accounts: [1, 2\n", "not YAML"),
    ("- just\n- a list\n", "must be a mapping"),
])
def test_bad_files_are_refused(text, message):
    with pytest.raises(AclConfigError) as caught:
        parse_acl_text(text)
    assert message in str(caught.value)


@pytest.mark.parametrize("pattern, inside, outside", [
    ("*", ["1.2.3.4", "::1"], []),
    ("", [], ["1.2.3.4"]),
    ("192.168.0.1", ["192.168.0.1"], ["192.168.0.2"]),
    ("192.168.0.1,10.0.0.1", ["10.0.0.1"], ["10.0.0.2"]),
    ("192.168.1.{1,2,3}", ["192.168.1.2"], ["192.168.1.4"]),
    ("192.168.*.*", ["192.168.7.9"], ["192.169.0.1"]),
    ("10.1.1.1-100", ["10.1.1.100"], ["10.1.1.101", "10.1.2.1"]),
    ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["::2"]),
    ("1050:0:0:0:5:600:300c:*", ["1050::5:600:300c:abcd"], ["1050::5:600:300d:1"]),
])
def test_address_patterns(pattern, inside, outside):
    match = compile_pattern(pattern)
    assert all(match(host) for host in inside)
    assert not any(match(host) for host in outside)


def test_bad_address_patterns_and_hosts():
    for pattern in ("1.2.3", "1.2.3.x", "1.2.3.9-2", "nonsense"):
        with pytest.raises(AddressPatternError):
            compile_pattern(pattern)
    assert host_of("127.0.0.1:5555") == "127.0.0.1" and host_of("::1:5555") == "::1"


def test_permission_bits_like_java():
    assert perm_allows(Perm.PUB, Perm.PUB | Perm.SUB)
    assert not perm_allows(Perm.SUB, Perm.PUB)
    assert not perm_allows(Perm.PUB, Perm.PUB | Perm.DENY)
    assert perm_allows(Perm.ANY, Perm.SUB) and not perm_allows(Perm.ANY, Perm.DENY)


def test_every_code_the_broker_serves_is_classified():
    served = set(DATA_CODES) | set(METADATA_CODES)
    classified = set(RESOURCE_CODES) | AUTHENTICATED_CODES | ADMIN_CODES
    assert served <= classified, sorted(served - classified)
    assert rule_of(99999) is Rule.UNCLASSIFIED


# --- the check -------------------------------------------------------------------------------
@pytest.fixture
def validator(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL_TEXT)
    return AccessValidator(str(path))


def refusal(validator, request, address="127.0.0.1:4000") -> str | None:
    try:
        validator.check(request, address)
    except AclDenied as denied:
        assert denied.code == ResponseCode.SYSTEM_ERROR
        assert denied.remark == "org.apache.rocketmq.acl.common.AclException: " + denied.message
        return denied.message
    return None


def test_check_accepts_and_refuses_with_java_remarks(validator):
    send = {"a": "pg", "b": "orders"}
    assert refusal(validator, signed(RequestCode.SEND_MESSAGE_V2, send, b"x")) is None
    unsigned = create_request(RequestCode.SEND_MESSAGE_V2, dict(send), b"x")
    assert refusal(validator, unsigned) == "No accessKey is configured"
    stranger = signed(RequestCode.SEND_MESSAGE_V2, send, b"x", key="nobody12")
    assert refusal(validator, stranger) == "No acl config for nobody12"
    wrong = signed(RequestCode.SEND_MESSAGE_V2, send, b"x", secret="not-the-secret")
    assert refusal(validator, wrong) == "Check signature failed for accessKey=alice-producer"
    other_topic = signed(RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "payments"}, b"x")
    assert refusal(validator, other_topic) == "No default permission for topic:payments"
    pull = signed(RequestCode.PULL_MESSAGE, {"topic": "orders", "consumerGroup": "cg"})
    assert refusal(validator, pull) == "No default permission for topic:orders"
    pull_audit = signed(RequestCode.PULL_MESSAGE, {"topic": "audit", "consumerGroup": "blocked"})
    assert refusal(validator, pull_audit) == "No default permission for group:blocked"
    create = signed(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "t"})
    assert refusal(validator, create) == ("Need admin permission for request code=17, but "
                                          "accessKey=alice-producer is not")
    unknown = signed(4242, {})
    assert refusal(validator, unknown).startswith("Need admin permission for request code=4242")


def test_batch_heartbeat_and_retry_topics_name_their_resources(validator):
    batch = signed(RequestCode.SEND_BATCH_MESSAGE, {"a": "pg", "b": "payments"}, b"x")
    assert refusal(validator, batch) == "No default permission for topic:payments"
    retry = signed(RequestCode.SEND_MESSAGE, {"topic": "%RETRY%blocked", "producerGroup": "p"})
    assert refusal(validator, retry) == "No default permission for group:blocked"
    heartbeat = orjson.dumps({"clientID": "c", "producerDataSet": [], "consumerDataSet": [{
        "groupName": "cg", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": "orders", "subString": "*"}]}]})
    refused = refusal(validator, signed(RequestCode.HEART_BEAT, {}, heartbeat))
    assert refused == "No default permission for topic:orders"
    garbage = signed(RequestCode.HEART_BEAT, {}, b"{not json")
    assert refusal(validator, garbage)


def test_admin_and_trace_rules(validator):
    admin = dict(key="root-admin", secret="87654321x")
    assert refusal(validator, signed(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "t"},
                                     **admin)) is None
    assert refusal(validator, signed(RequestCode.PULL_MESSAGE, {"topic": "any",
                                                                "consumerGroup": "g"},
                                     **admin)) is None
    assert refusal(validator, signed(4242, {}, **admin)) is None    # then "not supported"
    trace = signed(RequestCode.SEND_MESSAGE_V2, {"a": "p", "b": "RMQ_SYS_TRACE_TOPIC"}, b"t")
    assert refusal(validator, trace) is None


def test_white_addresses_never_open_admin_codes(validator):
    plain_send = create_request(RequestCode.SEND_MESSAGE_V2, {"a": "p", "b": "x"}, b"x")
    assert refusal(validator, plain_send, "10.10.103.7:9999") is None
    create = create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "t"})
    assert refusal(validator, create, "10.10.103.7:9999") == "No accessKey is configured"
    lan = dict(key="from-lan-only", secret="wrong-secret-here")
    pull = signed(RequestCode.PULL_MESSAGE, {"topic": "t", "consumerGroup": "g"}, **lan)
    assert refusal(validator, pull, "192.168.0.5:1") is None        # account white: no sig
    assert refusal(validator, pull, "192.168.1.5:1").startswith("Check signature failed")
    send = signed(RequestCode.SEND_MESSAGE_V2, {"a": "p", "b": "t"}, b"x", **lan)
    assert refusal(validator, send, "192.168.0.5:1") == "No default permission for topic:t"


def test_reload_on_change_keeps_old_table_on_a_broken_file(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL_TEXT)
    now = [0.0]
    validator = AccessValidator(str(path), monotonic=lambda: now[0])
    request = signed(RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "payments"}, b"x")
    assert refusal(validator, request) == "No default permission for topic:payments"
    path.write_text(ACL_TEXT.replace("- orders=PUB", "- payments=PUB"))
    os.utime(path, ns=(1, 10**18))
    assert refusal(validator, request) is not None          # not checked before the interval
    now[0] += RELOAD_CHECK_INTERVAL_S
    assert refusal(validator, request) is None and validator.reloads_total == 1
    path.write_text("accounts: [broken\n")
    os.utime(path, ns=(1, 2 * 10**18))
    now[0] += RELOAD_CHECK_INTERVAL_S
    assert refusal(validator, request) is None and validator.reloads_total == 1


# --- what a signature covers is what the handler reads -------------------------------------------
def _json_frame(header: bytes) -> bytes:
    return (4 + len(header)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header


@pytest.mark.parametrize("header", [
    b'{"code":310,"extFields":{"b":"orders","b":"payments"}}',
    b'{"code":310,"code":17,"extFields":{}}',
    b'{"code":310,"extFields":{"Signature":"x","AccessKey":"a","Signature":"y"}}',
    b'{"code":310,"extFields":{"a":"1"},"extFields":{"a":"2"}}',
])
def test_json_headers_that_say_a_key_twice_are_refused(header):
    frame = _json_frame(header)
    with pytest.raises(ProtocolError, match="a key appears twice"):
        decode(frame, 0, len(frame))


def test_json_headers_with_tricky_strings_still_decode():
    header = orjson.dumps({"code": 310, "remark": '{"b":"x"}:[', "extFields": {
        "b": 'orders","b":"payments', "k\\": "v:{}", "π": "≈"}})
    frame = _json_frame(header)
    command = decode(frame, 0, len(frame))
    assert command.ext_fields["b"] == 'orders","b":"payments' and len(command.ext_fields) == 3


def test_namesrv_rules_open_reads_and_close_writes(tmp_path):
    from pybroker.acl.resources import NAMESRV_BROKER_CODES, NAMESRV_OPEN_CODES, namesrv_rule_of
    from pybroker.namesrv.processor import NamesrvProcessor
    writes = {RequestCode.PUT_KV_CONFIG, RequestCode.DELETE_KV_CONFIG,
              RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.DELETE_TOPIC_IN_NAMESRV}
    served = set(NamesrvProcessor(None, None).handlers)   # type: ignore[arg-type]
    assert served == NAMESRV_OPEN_CODES | NAMESRV_BROKER_CODES | writes, \
        "every NameServer code has its rule here"
    assert all(namesrv_rule_of(code) == Rule.ADMIN for code in writes | {318, 9999})
    assert all(namesrv_rule_of(code) == Rule.BROKER for code in NAMESRV_BROKER_CODES)
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL_TEXT)
    checker = AccessValidator(str(path), rule_of=namesrv_rule_of)
    checker.check(create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "t"}), "1.2.3.4:5")
    with pytest.raises(AclDenied, match="No accessKey is configured"):
        checker.check(create_request(RequestCode.PUT_KV_CONFIG, {"namespace": "n", "key": "k",
                                                                 "value": "v"}), "10.10.103.7:5")
