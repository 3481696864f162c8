# Java's mqadmin against an aclEnable pybroker: admin codes need tools.yml's admin account, on the
# broker and on its NameServer, and plain_acl.yml changes reach it without a restart.
"""Goal: Java's own admin tool, signing with AclClientRPCHook from $ROCKETMQ_HOME/conf/tools.yml
as operators use it, (1) changes the KV config of a pybroker NameServer under aclEnable only
with an admin account, (2) creates a topic on the broker (UPDATE_AND_CREATE_TOPIC, an admin
code) only with an admin account; without tools.yml, or with a non-admin account, mqadmin
reports the ACL refusal (Java's AclException remark) and nothing changes; (3) unsigned route
reads (topicList, topicRoute) keep working, so clients without credentials still find brokers;
(4) making the account admin in plain_acl.yml lets the same mqadmin command through without a
restart.

Method: one `pybroker standalone` with aclEnable=true (the embedded NameServer shares the
broker's plain_acl.yml); mqadmin of Java 4.9.8 and 5.3.3 run from ROCKETMQ_HOMEs with an admin
tools.yml, a user tools.yml, or none; the KV value is read back with pybroker's unsigned
GET_KV_CONFIG (an open read) and topics with unsigned route look-ups.
"""
import time
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
RELOAD_WAIT_S = 60.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    work = tmp_path_factory.mktemp("acl-namesrv-java")
    acl_file = work / "plain_acl.yml"
    acl_file.write_text(ACL_TEXT)
    with StandaloneBroker(work, {"aclEnable": "true",
                                 "rocketmq.acl.plain.file": str(acl_file)}) as running:
        running.acl_file = acl_file
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


def _route_code(broker, topic: str) -> int:
    with SyncRemotingClient() as client:
        client.connect(broker.namesrv_addr)
        return client.invoke(create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                            {"topic": topic}), 10_000).code


def _update_topic(broker, work_dir, version, account, topic) -> str:
    return _mqadmin(broker, work_dir, version, account, "updateTopic", "-b",
                    broker.broker_addr, "-t", topic, "-r", "2", "-w", "2")


@pytest.mark.parametrize("version", ["4.9.8", "5.3.3"])
def test_mqadmin_update_topic_needs_an_admin(broker, tmp_path, version):
    topic = f"AdminMade{version.replace('.', '')}{uuid.uuid4().hex[:6]}"
    user = _update_topic(broker, tmp_path / "user", version, USER, topic)
    assert (ACL_REMARK + f"Need admin permission for request code="
            f"{int(RequestCode.UPDATE_AND_CREATE_TOPIC)}, but accessKey={USER[0]} is not") \
        in user, user[-3000:]
    unsigned = _update_topic(broker, tmp_path / "none", version, None, topic)
    assert ACL_REMARK + "No accessKey is configured" in unsigned, unsigned[-3000:]
    assert _route_code(broker, topic) == ResponseCode.TOPIC_NOT_EXIST
    admin = _update_topic(broker, tmp_path / "admin", version, ADMIN, topic)
    assert "create topic to" in admin and "Exception" not in admin, admin[-3000:]
    assert _route_code(broker, topic) == ResponseCode.SUCCESS


def test_an_account_made_admin_in_the_file_works_without_a_restart(broker, tmp_path):
    topic = f"Reloaded{uuid.uuid4().hex[:8]}"
    refused = _update_topic(broker, tmp_path / "user", "4.9.8", USER, topic)
    assert "Need admin permission" in refused, refused[-3000:]
    original = broker.acl_file.read_text()
    promoted = original.replace(f"secretKey: {USER[1]}\n",
                                f"secretKey: {USER[1]}\n    admin: true\n")
    assert promoted != original
    staged = broker.acl_file.with_suffix(".new")
    staged.write_text(promoted)
    staged.replace(broker.acl_file)   # rename over: no reader sees half a file
    try:
        deadline = time.monotonic() + RELOAD_WAIT_S
        while "create topic to" not in (output := _update_topic(
                broker, tmp_path / "user", "4.9.8", USER, topic)):
            assert "Need admin permission" in output, output[-3000:]
            assert time.monotonic() < deadline, "the broker did not reload plain_acl.yml"
        assert _route_code(broker, topic) == ResponseCode.SUCCESS
    finally:
        staged.write_text(original)
        staged.replace(broker.acl_file)
