# Java's mqadmin against the NameServer of an aclEnable pybroker: KV writes need tools.yml's admin.
"""Goal: Java's own admin tool, signing with AclClientRPCHook from $ROCKETMQ_HOME/conf/tools.yml
as operators use it, changes the KV config of a pybroker NameServer under aclEnable only with an
admin account; without tools.yml, or with a non-admin account, mqadmin reports the ACL refusal
(Java's AclException remark) and nothing changes; unsigned route reads (topicList,
topicRoute) keep working, so clients without credentials still find brokers.

Method: one `pybroker standalone` with aclEnable=true (the embedded NameServer shares the
broker's plain_acl.yml); mqadmin of Java 4.9.8 and 5.3.3 run three times per version from
three ROCKETMQ_HOMEs (admin tools.yml, user tools.yml, none); the KV value is read back with
pybroker's unsigned GET_KV_CONFIG (an open read).
"""
import uuid

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.remoting.client import SyncRemotingClient
from tests import peers

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(600)]

harness = peers.java_rocketmq
USER = ("plainUserKey", "plain-user-secret-j")
ADMIN = ("adminKeyJava", "admin-secret-java-9")
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
ACL_REMARK = "org.apache.rocketmq.acl.common.AclException: "
NAMESPACE = "acl_java_ns"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    work = tmp_path_factory.mktemp("acl-namesrv-java")
    acl_file = work / "plain_acl.yml"
    acl_file.write_text(ACL_TEXT)
    with StandaloneBroker(work, {"aclEnable": "true",
                                 "rocketmq.acl.plain.file": str(acl_file)}) as running:
        yield running


def _mqadmin(broker, work_dir, version: str, account, *args) -> str:
    """mqadmin's stdout+stderr, run from a ROCKETMQ_HOME whose conf/tools.yml holds
    ``account`` (None: no tools.yml, so mqadmin signs nothing)."""
    rmq = harness.JavaRocketMQ(work_dir, peers.java_install(version),
                               namesrv_port=broker.namesrv_port)
    rmq.write_files()
    if account is not None:
        (rmq.home_dir / "conf" / "tools.yml").write_text(
            f"accessKey: {account[0]}\nsecretKey: {account[1]}\n")
    run = rmq.run_class(harness.MQADMIN_CLASS, [*map(str, args), "-n", broker.namesrv_addr],
                        timeout_s=120)
    assert not run.timed_out, run.stdout[-3000:]
    return run.stdout + run.stderr


def _kv_value(broker, key: str) -> str | None:
    with SyncRemotingClient() as client:
        client.connect(broker.namesrv_addr)
        response = client.invoke(create_request(RequestCode.GET_KV_CONFIG, {
            "namespace": NAMESPACE, "key": key}), 10_000)
    if response.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    assert response.code == ResponseCode.SUCCESS, response.remark
    return response.ext_fields["value"]


@pytest.mark.parametrize("version", ["4.9.8", "5.3.3"])
def test_mqadmin_kv_writes_need_an_admin_tools_yml(broker, tmp_path, version):
    key = f"k_{uuid.uuid4().hex[:8]}"
    put = ("updateKvConfig", "-s", NAMESPACE, "-k", key, "-v")
    unsigned = _mqadmin(broker, tmp_path / "none", version, None, *put, "unsigned")
    assert ACL_REMARK + "No accessKey is configured" in unsigned, unsigned[-3000:]
    user = _mqadmin(broker, tmp_path / "user", version, USER, *put, "user")
    assert (ACL_REMARK + f"Need admin permission for request code="
            f"{int(RequestCode.PUT_KV_CONFIG)}, but accessKey={USER[0]} is not") in user, \
        user[-3000:]
    assert _kv_value(broker, key) is None
    admin = _mqadmin(broker, tmp_path / "admin", version, ADMIN, *put, "by-admin")
    assert "Exception" not in admin, admin[-3000:]
    assert _kv_value(broker, key) == "by-admin"
    delete = ("deleteKvConfig", "-s", NAMESPACE, "-k", key)
    refused = _mqadmin(broker, tmp_path / "none", version, None, *delete)
    assert ACL_REMARK + "No accessKey is configured" in refused, refused[-3000:]
    assert _kv_value(broker, key) == "by-admin"
    deleted = _mqadmin(broker, tmp_path / "admin", version, ADMIN, *delete)
    assert "Exception" not in deleted, deleted[-3000:]
    assert _kv_value(broker, key) is None


def test_mqadmin_route_reads_work_unsigned(broker, tmp_path):
    # topicList and topicRoute ask the NameServer only (clusterList would go on to the
    # broker's runtime info, which the broker's ACL refuses without credentials).
    topics = _mqadmin(broker, tmp_path / "none", "4.9.8", None, "topicList")
    assert "broker-a" in topics.split() and "Exception" not in topics, topics[-3000:]
    route = _mqadmin(broker, tmp_path / "none", "4.9.8", None, "topicRoute", "-t", "broker-a")
    assert '"brokerName":"broker-a"' in route.replace(" ", "") and "Exception" not in route, \
        route[-3000:]
