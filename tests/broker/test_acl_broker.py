# ACL 1.0 on a running pybroker: signed requests served, every bad one refused, file reloads.
"""Goal: with aclEnable=true every client request is checked before it runs, in the remoting
worker for local (send, pull) and forwarded (heartbeat, offsets, admin) codes alike, with
Java 4.x's answer (SYSTEM_ERROR, "org.apache.rocketmq.acl.common.AclException: ...") for each
bad case of security-and-faults.md S2/S6, and plain_acl.yml changes take effect without a restart.

Method: one `pybroker standalone` with aclEnable=true and a plain_acl.yml in the test's temp
dir. Requests are signed by pybroker.acl.signature (the restatement of Java's
AclClientRPCHook; the real Java and Go clients are in tests/compat/test_acl_clients.py) and
sent with pybroker's remoting client, or as raw frames where the case needs bytes no client
would write. Refused sends must store nothing (CommitLog max offset unchanged).
"""
import asyncio
import json
import socket
import struct
import subprocess
import sys
import time

import orjson
import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.acl.signature import Credentials, sign_request
from pybroker.client import Message, Producer
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_request, decode, encode
from pybroker.protocol.constants import SerializeType
from pybroker.remoting.client import SyncRemotingClient
from tests.ha_support import position, wait_for

pytestmark = [pytest.mark.slow]

TIMEOUT_MS = 10_000
RELOAD_WAIT_S = 20.0
PRODUCER = ("producer-acct", "producer-secret-1")
CONSUMER = ("consumer-acct", "consumer-secret-1")
ADMIN = ("admin-account", "admin-secret-99")
ACL_TEXT = f"""
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {PRODUCER[0]}
    secretKey: {PRODUCER[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [acl_orders=PUB]
  - accessKey: {CONSUMER[0]}
    secretKey: {CONSUMER[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [acl_orders=SUB]
    groupPerms: [acl_readers=SUB]
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
"""
ACL_PREFIX = "org.apache.rocketmq.acl.common.AclException: "
SECRETS = [PRODUCER[1], CONSUMER[1], ADMIN[1]]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    work = tmp_path_factory.mktemp("acl")
    acl_file = work / "plain_acl.yml"
    acl_file.write_text(ACL_TEXT)
    instance = StandaloneBroker(work, {"aclEnable": "true",
                                       "rocketmq.acl.plain.file": str(acl_file)})
    instance.acl_file = acl_file
    instance.start()
    yield instance
    assert instance.stop() == 0


@pytest.fixture
def client(broker):
    with SyncRemotingClient() as connected:
        connected.connect(broker.broker_addr)
        yield connected


def _send_fields(topic: str, queue_id: int = 0) -> dict:
    return {"a": "acl_producer", "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id),
            "f": "0", "g": str(int(time.time() * 1000)), "h": "0",
            "i": props.encode_properties({"TAGS": "π-tag", "WAIT": "true"}), "j": "0",
            "k": "false", "m": "false"}


def _signed(code, fields, body=None, account=PRODUCER) -> RemotingCommand:
    request = create_request(code, dict(fields), body)
    sign_request(request.ext_fields, body, *account)
    return request


def _refused(response: RemotingCommand, message: str) -> None:
    assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, ACL_PREFIX + message)


def _max_offset(broker, client, topic="acl_orders") -> int:
    """GET_MAX_OFFSET of queue 0 once the dispatcher caught up with the CommitLog: the answer
    counts consume-queue entries, which follow a SEND_OK (the reput is asynchronous, as in
    Java), so a count taken at once may miss a send just answered."""
    written = position(broker.store_dir, "written_position")
    wait_for(lambda: position(broker.store_dir, "dispatched_position") >= written, 30,
             "the dispatcher caught up with the CommitLog")
    response = client.invoke(_signed(RequestCode.GET_MAX_OFFSET,
                                     {"topic": topic, "queueId": "0"}), TIMEOUT_MS)
    assert response.code == ResponseCode.SUCCESS, response.remark
    return int(response.ext_fields["offset"])


def _pull_fields(offset: int) -> dict:
    # sysFlag 6 = suspend|subscription: the pull waits for the dispatcher (a plain pull
    # right after the send can race the consume queue and get NO_MESSAGE_IN_QUEUE).
    return {"consumerGroup": "acl_readers", "topic": "acl_orders", "queueId": "0",
            "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": "6",
            "commitOffset": "0", "suspendTimeoutMillis": "5000", "subscription": "*",
            "subVersion": "0", "expressionType": "TAG"}


def test_signed_send_and_pull_are_served(client):
    sent = client.invoke(_signed(RequestCode.SEND_MESSAGE_V2, _send_fields("acl_orders"),
                                 b"signed body"), TIMEOUT_MS)
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    offset = int(sent.ext_fields["queueOffset"])
    pulled = client.invoke(_signed(RequestCode.PULL_MESSAGE, _pull_fields(offset),
                                   account=CONSUMER), TIMEOUT_MS)
    assert pulled.code == ResponseCode.SUCCESS, pulled.remark
    assert b"signed body" in bytes(pulled.body)


@pytest.mark.parametrize("case", ["no_access_key", "no_signature", "unknown_key",
                                  "wrong_secret", "body_tampered", "field_tampered",
                                  "access_key_case", "no_topic_permission"])
def test_bad_sends_are_refused_and_store_nothing(broker, client, case):
    before = _max_offset(broker, client)
    fields = _send_fields("acl_orders")
    request = _signed(RequestCode.SEND_MESSAGE_V2, fields, b"body")
    expected = f"Check signature failed for accessKey={PRODUCER[0]}"
    if case == "no_access_key":
        request = create_request(RequestCode.SEND_MESSAGE_V2, fields, b"body")
        expected = "No accessKey is configured"
    elif case == "no_signature":
        del request.ext_fields["Signature"]
    elif case == "unknown_key":
        request = _signed(RequestCode.SEND_MESSAGE_V2, fields, b"body", ("stranger1", "x" * 9))
        expected = "No acl config for stranger1"
    elif case == "wrong_secret":
        request = _signed(RequestCode.SEND_MESSAGE_V2, fields, b"body", (PRODUCER[0], "x" * 9))
    elif case == "body_tampered":
        request.body = b"bodY"
    elif case == "field_tampered":
        request.ext_fields["e"] = "1"
    elif case == "access_key_case":
        request.ext_fields["accesskey"] = request.ext_fields.pop("AccessKey")
        expected = "No accessKey is configured"
    elif case == "no_topic_permission":
        request = _signed(RequestCode.SEND_MESSAGE_V2, _send_fields("acl_other"), b"body")
        expected = "No default permission for topic:acl_other"
    _refused(client.invoke(request, TIMEOUT_MS), expected)
    assert _max_offset(broker, client) == before


def test_pipelined_sends_to_a_known_topic_are_checked_in_both_encodings(broker, client):
    """The send fast path (docs/architecture/send-fast-path.md) takes sends to known topics
    straight from the receive buffer; on an ACL broker every one must still meet the signature
    check. Bad sends in the JSON and ROCKETMQ (Java benchmark's) header encodings, written in one
    burst after the topic exists, are all refused; the one signed send among them is the only
    one stored."""
    warm = client.invoke(_signed(RequestCode.SEND_MESSAGE_V2, _send_fields("acl_orders"),
                                 b"topic known"), TIMEOUT_MS)
    assert warm.code == ResponseCode.SUCCESS, warm.remark
    before = _max_offset(broker, client)
    # ASCII properties, as the Java benchmark's: what the fast path would take without ACL.
    ascii_fields = {**_send_fields("acl_orders"),
                    "i": props.encode_properties({"TAGS": "t", "WAIT": "true"})}
    bad = []
    for serialize in (SerializeType.JSON, SerializeType.ROCKETMQ):
        for code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE):
            fields = ascii_fields if code == RequestCode.SEND_MESSAGE_V2 else \
                _v1_fields(ascii_fields)
            unsigned = create_request(code, fields, b"unsigned")
            wrong = _signed(code, fields, b"wrong", (PRODUCER[0], "x" * 9))
            tampered = _signed(code, fields, b"tampered")
            tampered.body = b"tampereD"
            bad += [(encode(request, serialize), request.opaque)
                    for request in (unsigned, wrong, tampered)]
    good = _signed(RequestCode.SEND_MESSAGE_V2, ascii_fields, b"good")
    frames = [frame for frame, _ in bad] + [encode(good, SerializeType.ROCKETMQ)]
    with socket.create_connection(("127.0.0.1", broker.broker_port)) as sock:
        sock.sendall(b"".join(frames))
        answers = {answer.opaque: answer for answer in _read_frames(sock, len(frames))}
    for _, opaque in bad:
        assert answers[opaque].code == ResponseCode.SYSTEM_ERROR, answers[opaque].remark
        assert answers[opaque].remark.startswith(ACL_PREFIX)
    assert answers[good.opaque].code == ResponseCode.SUCCESS, answers[good.opaque].remark
    assert _max_offset(broker, client) == before + 1


def _v1_fields(v2: dict) -> dict:
    """SEND_MESSAGE (10) names the same header fields in full (SendMessageRequestHeader)."""
    names = {"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums",
             "e": "queueId", "f": "sysFlag", "g": "bornTimestamp", "h": "flag",
             "i": "properties", "j": "reconsumeTimes", "k": "unitMode", "m": "batch"}
    return {names[key]: value for key, value in v2.items()}


def _read_frames(sock: socket.socket, count: int) -> list[RemotingCommand]:
    """``count`` whole response frames (the test fails on a close or a 10 s silence)."""
    sock.settimeout(10.0)
    data, frames, at = b"", [], 0
    while len(frames) < count:
        while len(data) - at >= 4 and len(data) - at >= 4 + struct.unpack_from(">I", data, at)[0]:
            length = 4 + struct.unpack_from(">I", data, at)[0]
            frames.append(decode(data, at, length, copy_body=True))
            at += length
        if len(frames) < count:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {len(frames)} of {count} answers"
            data += chunk
    return frames


def test_forwarded_requests_are_checked_too(client):
    heartbeat = orjson.dumps({"clientID": "acl-client", "producerDataSet": [],
                              "consumerDataSet": [{
                                  "groupName": "acl_writers", "consumeType": "CONSUME_PASSIVELY",
                                  "messageModel": "CLUSTERING", "unitMode": False,
                                  "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                                  "subscriptionDataSet": [{"topic": "acl_orders"}]}]})
    unsigned = create_request(RequestCode.HEART_BEAT, {}, heartbeat)
    _refused(client.invoke(unsigned, TIMEOUT_MS), "No accessKey is configured")
    _refused(client.invoke(_signed(RequestCode.HEART_BEAT, {}, heartbeat, CONSUMER),
                           TIMEOUT_MS), "No default permission for group:acl_writers")
    offset = {"consumerGroup": "acl_readers", "topic": "acl_orders", "queueId": "0",
              "commitOffset": "1"}
    _refused(client.invoke(_signed(RequestCode.UPDATE_CONSUMER_OFFSET, offset), TIMEOUT_MS),
             "No default permission for topic:acl_orders")
    updated = client.invoke(_signed(RequestCode.UPDATE_CONSUMER_OFFSET, offset, None, CONSUMER),
                            TIMEOUT_MS)
    assert updated.code == ResponseCode.SUCCESS, updated.remark


def test_admin_codes_need_an_admin_account(client):
    topic = {"topic": "acl_admin_made", "defaultTopic": "TBW102", "readQueueNums": "2",
             "writeQueueNums": "2", "perm": "6", "topicFilterType": "SINGLE_TAG"}
    _refused(client.invoke(_signed(RequestCode.UPDATE_AND_CREATE_TOPIC, topic), TIMEOUT_MS),
             f"Need admin permission for request code=17, but accessKey={PRODUCER[0]} is not")
    _refused(client.invoke(_signed(RequestCode.GET_BROKER_CONFIG, {}), TIMEOUT_MS),
             f"Need admin permission for request code=26, but accessKey={PRODUCER[0]} is not")
    _refused(client.invoke(_signed(4242, {}), TIMEOUT_MS),
             f"Need admin permission for request code=4242, but accessKey={PRODUCER[0]} is not")
    # UPDATE_AND_CREATE_ACL_CONFIG (50) could make an account admin (the CVE-2024-23321 class)
    self_promotion = _signed(50, {"accessKey": PRODUCER[0], "secretKey": PRODUCER[1],
                                  "admin": "true"})
    _refused(client.invoke(self_promotion, TIMEOUT_MS),
             f"Need admin permission for request code=50, but accessKey={PRODUCER[0]} is not")
    created = client.invoke(_signed(RequestCode.UPDATE_AND_CREATE_TOPIC, topic, None, ADMIN),
                            TIMEOUT_MS)
    assert created.code == ResponseCode.SUCCESS, created.remark
    unknown = client.invoke(_signed(4242, {}, None, ADMIN), TIMEOUT_MS)
    assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


READ_CODES = [RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.GET_BROKER_RUNTIME_INFO,
              RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, RequestCode.GET_ALL_CONSUMER_OFFSET,
              RequestCode.GET_ALL_DELAY_OFFSET, RequestCode.VIEW_BROKER_STATS_DATA,
              RequestCode.GET_BROKER_CONFIG]


def test_no_response_carries_a_secret(client):
    for account in (PRODUCER, ADMIN):
        for code in READ_CODES:
            response = client.invoke(_signed(code, {"statsName": "TOPIC_PUT_NUMS",
                                                    "statsKey": "acl_orders"}, None, account),
                                     TIMEOUT_MS)
            text = (response.remark or "") + json.dumps(response.ext_fields) + \
                bytes(response.body or b"").decode("utf-8", "replace")
            assert not any(secret in text for secret in SECRETS), (code, account[0])


def test_oneway_refusals_get_no_answer_and_the_connection_stays(broker, client):
    sock = socket.create_connection(("127.0.0.1", broker.broker_port))
    try:
        oneway = create_request(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g",
                                "topic": "acl_orders", "queueId": "0", "commitOffset": "1"},
                                oneway=True)
        probe = create_request(RequestCode.GET_MAX_OFFSET, {"topic": "acl_orders",
                                                            "queueId": "0"})
        sock.sendall(encode(oneway) + encode(probe))
        answer = _read_frame(sock)
        assert answer is not None and answer.opaque == probe.opaque
        assert answer.remark == ACL_PREFIX + "No accessKey is configured"
    finally:
        sock.close()


def _read_frame(sock: socket.socket) -> RemotingCommand | None:
    sock.settimeout(10.0)
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        data += chunk
    return decode(data, 0, 4 + struct.unpack(">I", data[:4])[0], copy_body=True)


def _until_served(client, topic: str, what: str) -> None:
    deadline = time.monotonic() + RELOAD_WAIT_S
    while True:
        response = client.invoke(_signed(RequestCode.SEND_MESSAGE_V2, _send_fields(topic),
                                         b"late"), TIMEOUT_MS)
        if response.code == ResponseCode.SUCCESS:
            return
        assert time.monotonic() < deadline, f"{what} within {RELOAD_WAIT_S} s: {response.remark}"
        time.sleep(0.2)


def test_file_changes_take_effect_without_a_restart(broker, client):
    request = _signed(RequestCode.SEND_MESSAGE_V2, _send_fields("acl_late"), b"late")
    _refused(client.invoke(request, TIMEOUT_MS), "No default permission for topic:acl_late")
    log_offset = len(broker._log_text())
    replacement = broker.acl_file.with_suffix(".tmp")
    replacement.write_text("accounts: [not: valid\n")
    replacement.replace(broker.acl_file)
    deadline = time.monotonic() + RELOAD_WAIT_S
    while "changed but cannot be used" not in broker._log_text()[log_offset:]:
        client.invoke(_signed(RequestCode.GET_MAX_OFFSET, {"topic": "acl_orders",
                                                           "queueId": "0"}), TIMEOUT_MS)
        assert time.monotonic() < deadline, "a broken ACL file was not reported"
        time.sleep(0.2)
    _until_served(client, "acl_orders", "the accounts loaded before stayed")
    replacement.write_text(ACL_TEXT.replace("[acl_orders=PUB]", "[acl_orders=PUB, acl_late=PUB]"))
    replacement.replace(broker.acl_file)
    _until_served(client, "acl_late", "a changed ACL file took effect")
    assert "reloaded: 3 accounts" in broker._log_text()[log_offset:]


def test_a_header_with_a_key_twice_is_refused(broker, client):
    """A signature over one topic must not carry a second one: such a header closes the
    connection (orjson, like fastjson, would keep the last) and stores nothing."""
    before = _max_offset(broker, client)
    request = _signed(RequestCode.SEND_MESSAGE_V2, _send_fields("acl_orders"), b"dup")
    header = encode(request)[8:-3].decode()
    smuggled = header.replace('"b":"acl_orders"', '"b":"acl_orders","b":"acl_other"', 1)
    assert smuggled != header
    data = smuggled.encode()
    offset = len(broker._log_text())
    with socket.create_connection(("127.0.0.1", broker.broker_port)) as sock:
        sock.sendall(struct.pack(">II", 4 + len(data) + 3, len(data)) + data + b"dup")
        assert _read_frame(sock) is None
    deadline = time.monotonic() + 10
    while "a key appears twice" not in broker._log_text()[offset:]:
        assert time.monotonic() < deadline, broker._log_text()[offset:][-2000:]
        time.sleep(0.05)
    assert _max_offset(broker, client) == before


def test_the_python_client_signs_with_credentials(broker):
    """pybroker.client with credentials= signs every request like AclClientRPCHook: its
    producer (heartbeat, send, unregister) is served; with a wrong secret the send fails."""
    async def produce(secret: str):
        async with Producer("acl_py_producer", broker.namesrv_addr,
                            credentials=Credentials(PRODUCER[0], secret),
                            retry_times_when_send_failed=0) as producer:
            return await producer.send(Message("acl_orders", "from the python client"))
    result = asyncio.run(produce(PRODUCER[1]))
    assert result.status.name == "SEND_OK"
    with pytest.raises(Exception) as caught:
        asyncio.run(produce("a-wrong-secret"))
    assert "Check signature failed" in str(caught.value)


def test_pybroker_admin_signs_with_an_acl_file(broker, tmp_path):
    """`pybroker admin updateTopic` (an admin code) works with the admin account's tools.yml
    and is refused with a producer's; the refusal text reaches the operator."""
    def admin(account, topic):
        tools = tmp_path / f"{account[0]}.yml"
        tools.write_text(f"accessKey: {account[0]}\nsecretKey: {account[1]}\n")
        return subprocess.run([sys.executable, "-m", "pybroker", "admin", "updateTopic",
                               "-n", broker.namesrv_addr, "-b", broker.broker_addr, "-t", topic,
                               "--acl-file", str(tools)], capture_output=True, text=True,
                              timeout=120)
    refused = admin(PRODUCER, "acl_cli_topic")
    assert refused.returncode == 1 and "Need admin permission for request code=17" in \
        refused.stderr, refused.stdout + refused.stderr
    created = admin(ADMIN, "acl_cli_topic")
    assert created.returncode == 0, created.stdout + created.stderr


def test_the_vip_port_checks_sends_too(broker, client):
    """Java 4.x clients send through the VIP port (listenPort - 2, vipChannelEnabled): the same
    check guards it; an unsigned and a tampered send are refused there and store nothing, a
    signed one is stored. ASCII properties, so the send fast path would take these frames if it
    were open on an ACL broker."""
    before = _max_offset(broker, client)
    fields = {**_send_fields("acl_orders"),
              "i": props.encode_properties({"TAGS": "t", "WAIT": "true"})}
    tampered = _signed(RequestCode.SEND_MESSAGE_V2, fields, b"vip body")
    tampered.body = b"vip bodY"
    with SyncRemotingClient() as vip:
        vip.connect(f"127.0.0.1:{broker.broker_port - 2}")
        _refused(vip.invoke(create_request(RequestCode.SEND_MESSAGE_V2, fields, b"vip"),
                            TIMEOUT_MS), "No accessKey is configured")
        _refused(vip.invoke(tampered, TIMEOUT_MS),
                 f"Check signature failed for accessKey={PRODUCER[0]}")
        assert _max_offset(broker, client) == before
        sent = vip.invoke(_signed(RequestCode.SEND_MESSAGE_V2, fields, b"vip signed"),
                          TIMEOUT_MS)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
    assert _max_offset(broker, client) == before + 1
