# ACL on the NameServer (a pybroker extension): writes need a signed admin, reads stay open.
"""Goal: with aclEnable=true the NameServer (standalone's embedded one, and `pybroker namesrv`
with its own namesrv.conf) refuses KV writes, WIPE_WRITE_PERM_OF_BROKER and
DELETE_TOPIC_IN_NAMESRV unless a signed admin account sends them, with the broker's ACL
answer (SYSTEM_ERROR + Java's AclException remark) and no state change, while route reads stay
open to unsigned peers (clients without credentials). A broker's REGISTER_BROKER /
UNREGISTER_BROKER comes from an address of brokerRegistrationAllowedAddresses (the embedded
NameServer's own loopback; Java 4.x brokers never sign) or is signed by an admin account;
from another address (127.0.0.2) unsigned or signed by a plain account it is refused and the
route is not changed. A broken plain_acl.yml stops the NameServer at start with a log line,
never a traceback.

Method: real processes on free ports: one `pybroker standalone` with aclEnable=true (its broker
registers with the embedded NameServer unsigned), requests from pybroker's remoting client
signed by pybroker.acl.signature (Java's AclClientRPCHook restated; Java's mqadmin is in
tests/compat/test_acl_mqadmin.py); state read back with open GET_KV_CONFIG and route
look-ups. Then `pybroker namesrv -c` with aclEnable and a file that does not parse.
"""
import asyncio
import socket
import subprocess
import sys
import time

import pytest

from pybroker._testbase.cluster import StandaloneBroker, free_port
from pybroker.acl.signature import Credentials, sign_request
from pybroker.broker.registration import NamesrvRegistration
from pybroker.client import Admin
from pybroker.config import load_broker_config
from pybroker.protocol import command
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_request
from pybroker.remoting.client import SyncRemotingClient
from pybroker.store.config_docs import TopicConfig, TopicConfigDocument

pytestmark = [pytest.mark.slow]

TIMEOUT_MS = 10_000
USER = ("plain-user", "plain-user-secret")
ADMIN = ("admin-account", "admin-secret-99")
ACL_TEXT = f"""
accounts:
  - accessKey: {USER[0]}
    secretKey: {USER[1]}
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
"""
ACL_PREFIX = "org.apache.rocketmq.acl.common.AclException: "
TOPIC = "acl_ns_topic"
REGISTER_WAIT_S = 40.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    work = tmp_path_factory.mktemp("acl-namesrv")
    acl_file = work / "plain_acl.yml"
    acl_file.write_text(ACL_TEXT)
    with StandaloneBroker(work, {"aclEnable": "true", "rocketmq.acl.plain.file": str(acl_file),
                                 "autoCreateTopicEnable": "false"}) as running:
        yield running


@pytest.fixture
def namesrv(broker):
    with SyncRemotingClient() as connected:
        connected.connect(broker.namesrv_addr)
        yield connected


def _request(code, fields, account=None) -> RemotingCommand:
    request = create_request(code, dict(fields))
    if account is not None:
        sign_request(request.ext_fields, None, *account)
    return request


def _kv_value(namesrv, key: str) -> str | None:
    response = namesrv.invoke(_request(RequestCode.GET_KV_CONFIG,
                                       {"namespace": "acl_ns", "key": key}), TIMEOUT_MS)
    if response.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    assert response.code == ResponseCode.SUCCESS, response.remark
    return response.ext_fields["value"]


def _put_kv(namesrv, key: str, value: str, account=None) -> RemotingCommand:
    return namesrv.invoke(_request(RequestCode.PUT_KV_CONFIG,
                                   {"namespace": "acl_ns", "key": key, "value": value}, account),
                          TIMEOUT_MS)


def _refused(response: RemotingCommand, message: str) -> None:
    assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, ACL_PREFIX + message)


def _create_topic(broker) -> None:
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        response = client.invoke(_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "4",
            "writeQueueNums": "4", "perm": "6", "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0", "order": "false"}, ADMIN), TIMEOUT_MS)
        assert response.code == ResponseCode.SUCCESS, response.remark


def _route(namesrv) -> RemotingCommand:
    return namesrv.invoke(_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}),
                          TIMEOUT_MS)


def test_kv_writes_need_a_signed_admin(namesrv):
    _refused(_put_kv(namesrv, "k1", "unsigned"), "No accessKey is configured")
    _refused(_put_kv(namesrv, "k1", "user", USER),
             f"Need admin permission for request code={int(RequestCode.PUT_KV_CONFIG)}, but "
             f"accessKey={USER[0]} is not")
    forged = _request(RequestCode.PUT_KV_CONFIG, {"namespace": "acl_ns", "key": "k1",
                                                  "value": "x"}, ADMIN)
    forged.ext_fields["value"] = "tampered"
    _refused(namesrv.invoke(forged, TIMEOUT_MS),
             f"Check signature failed for accessKey={ADMIN[0]}")
    assert _kv_value(namesrv, "k1") is None
    assert _put_kv(namesrv, "k1", "by-admin", ADMIN).code == ResponseCode.SUCCESS
    assert _kv_value(namesrv, "k1") == "by-admin"
    delete = {"namespace": "acl_ns", "key": "k1"}
    _refused(namesrv.invoke(_request(RequestCode.DELETE_KV_CONFIG, delete), TIMEOUT_MS),
             "No accessKey is configured")
    assert _kv_value(namesrv, "k1") == "by-admin"
    response = namesrv.invoke(_request(RequestCode.DELETE_KV_CONFIG, delete, ADMIN), TIMEOUT_MS)
    assert response.code == ResponseCode.SUCCESS, response.remark
    assert _kv_value(namesrv, "k1") is None


def test_routes_are_open_and_route_changes_need_an_admin(broker, namesrv):
    _create_topic(broker)   # the broker registers the topic with the NameServer, unsigned
    deadline = time.monotonic() + REGISTER_WAIT_S
    while (route := _route(namesrv)).code != ResponseCode.SUCCESS:
        assert time.monotonic() < deadline, f"no route for {TOPIC}: {route.remark}"
        time.sleep(0.1)
    for code, fields in ((RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}),
                         (RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": TOPIC})):
        _refused(namesrv.invoke(_request(code, fields), TIMEOUT_MS),
                 "No accessKey is configured")
        _refused(namesrv.invoke(_request(code, fields, USER), TIMEOUT_MS),
                 f"Need admin permission for request code={int(code)}, but "
                 f"accessKey={USER[0]} is not")
    after = _route(namesrv)
    assert (after.code, after.body) == (ResponseCode.SUCCESS, route.body)
    cluster = namesrv.invoke(_request(RequestCode.GET_BROKER_CLUSTER_INFO, {}), TIMEOUT_MS)
    assert cluster.code == ResponseCode.SUCCESS and b"broker-a" in cluster.body


def test_pybroker_admin_signs_its_namesrv_requests(broker, namesrv):
    """Admin.delete_topic sends DELETE_TOPIC_IN_BROKER to the broker and
    DELETE_TOPIC_IN_NAMESRV to the NameServer, both signed by its credentials (a refusal of
    either raises): the admin's succeeds, a user's is refused (by the broker, first)."""
    async def delete(account) -> None:
        async with Admin(broker.namesrv_addr, credentials=Credentials(*account)) as admin:
            await admin.delete_topic(TOPIC)
    _create_topic(broker)
    wait_until = time.monotonic() + REGISTER_WAIT_S
    while _route(namesrv).code != ResponseCode.SUCCESS:
        assert time.monotonic() < wait_until, f"no route for {TOPIC}"
        time.sleep(0.1)
    with pytest.raises(Exception, match="Need admin permission"):
        asyncio.run(delete(USER))
    assert _route(namesrv).code == ResponseCode.SUCCESS
    asyncio.run(delete(ADMIN))
    assert _route(namesrv).code == ResponseCode.TOPIC_NOT_EXIST


class _Peer:
    """A remoting connection from ``source`` (a 127.0.0.0/8 address): the NameServer drops a
    broker when the connection it registered on closes, as Java's does."""

    def __init__(self, source: str, address: str):
        host, port = address.rsplit(":", 1)
        self.sock = socket.socket()
        self.sock.bind((source, 0))
        self.sock.settimeout(TIMEOUT_MS / 1000)
        self.sock.connect((host, int(port)))

    def invoke(self, request: RemotingCommand) -> RemotingCommand:
        self.sock.sendall(command.encode(request))
        data = b""
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            chunk = self.sock.recv(65536)
            assert chunk, "the NameServer closed the connection"
            data += chunk
        return command.decode(data, 0, len(data), copy_body=True)

    def close(self) -> None:
        self.sock.close()


def _registration(code: int, broker_name: str, topic: str, account=None) -> RemotingCommand:
    """A broker's REGISTER_BROKER (or UNREGISTER_BROKER) as pybroker's broker builds it."""
    config = load_broker_config(None, {"brokerName": broker_name, "brokerIP1": "127.0.0.2",
                                       "listenPort": "30911"})
    registration = NamesrvRegistration(config, lambda: TopicConfigDocument(
        {topic: TopicConfig(topic, 4, 4)}))
    request = registration.register_request()
    registration.close()
    if code == RequestCode.UNREGISTER_BROKER:
        request = create_request(code, {"brokerName": broker_name, "brokerAddr":
                                        config.derived.broker_addr,
                                        "clusterName": "DefaultCluster", "brokerId": "0"})
    if account is not None:
        sign_request(request.ext_fields, request.body, *account)
    return request


def test_broker_registration_needs_an_allowed_address_or_a_signed_admin(broker, namesrv):
    topic = "acl_rogue_route"

    def routed() -> bool:
        return namesrv.invoke(_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}),
                              TIMEOUT_MS).code == ResponseCode.SUCCESS
    register, unregister = RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER
    outsider, local = _Peer("127.0.0.2", broker.namesrv_addr), \
        _Peer("127.0.0.1", broker.namesrv_addr)
    try:
        _refused(outsider.invoke(_registration(register, "rogue", topic)),
                 "No accessKey is configured")
        _refused(outsider.invoke(_registration(register, "rogue", topic, USER)),
                 f"Need admin permission for request code={int(register)}, but "
                 f"accessKey={USER[0]} is not")
        assert not routed()
        signed = outsider.invoke(_registration(register, "signed", topic, ADMIN))
        assert signed.code == ResponseCode.SUCCESS, signed.remark
        assert routed()
        _refused(outsider.invoke(_registration(unregister, "signed", topic)),
                 "No accessKey is configured")
        assert routed()
        # The allowed address (the embedded NameServer's loopback) needs no signature.
        dropped = local.invoke(_registration(unregister, "signed", topic))
        assert dropped.code == ResponseCode.SUCCESS, dropped.remark
        assert not routed()
    finally:
        outsider.close()
        local.close()


def test_unknown_and_settings_codes_are_closed_to_unsigned_peers(namesrv):
    # A code the NameServer does not serve, and GET/UPDATE_NAMESRV_CONFIG (319/318): under ACL
    # an unsigned peer learns nothing (they need an admin account).
    for code in (399, 318, 319):
        _refused(namesrv.invoke(_request(code, {}), TIMEOUT_MS), "No accessKey is configured")


def test_namesrv_process_with_acl_and_a_broken_file(tmp_path):
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text("accounts:\n  - accessKey: short\n    secretKey: x\n")
    conf = tmp_path / "namesrv.conf"
    conf.write_text(f"listenPort={free_port()}\nkvConfigPath={tmp_path / 'kv.json'}\n"
                    f"aclEnable=true\nrocketmq.acl.plain.file={acl_file}\n")
    run = subprocess.run([sys.executable, "-m", "pybroker", "namesrv", "-c", str(conf)],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    output = run.stdout + run.stderr
    assert run.returncode == 1, output
    assert "cannot start" in output and str(acl_file) in output, output
    assert "Traceback" not in output, output
