# ACL on the NameServer (a pybroker extension): writes need a signed admin, reads stay open.
"""Goal: with aclEnable=true the NameServer (standalone's embedded one, and `pybroker namesrv`
with its own namesrv.conf) refuses KV writes, WIPE_WRITE_PERM_OF_BROKER and
DELETE_TOPIC_IN_NAMESRV unless a signed admin account sends them, with the broker's ACL
answer (SYSTEM_ERROR + Java's AclException remark) and no state change, while route reads and
broker registration stay open to unsigned peers (clients without credentials, Java brokers).
A broken plain_acl.yml stops the NameServer at start with a log line, never a traceback.

Method: real processes on free ports: one `pybroker standalone` with aclEnable=true (its broker
registers with the embedded NameServer unsigned), requests from pybroker's remoting client
signed by pybroker.acl.signature (Java's AclClientRPCHook restated; Java's mqadmin is in
tests/compat/test_acl_mqadmin.py); state read back with open GET_KV_CONFIG and route
look-ups. Then `pybroker namesrv -c` with aclEnable and a file that does not parse.
"""
import asyncio
import subprocess
import sys
import time

import pytest

from pybroker._testbase.cluster import StandaloneBroker, free_port
from pybroker.acl.signature import Credentials, sign_request
from pybroker.client import Admin
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_request
from pybroker.remoting.client import SyncRemotingClient

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


def test_unknown_codes_are_closed_to_unsigned_peers(namesrv):
    # UPDATE_NAMESRV_CONFIG (318) is not served; under ACL an unsigned peer learns nothing more.
    _refused(namesrv.invoke(_request(318, {}), TIMEOUT_MS), "No accessKey is configured")


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
