# ACL 1.0 with the real clients: the Java client's AclClientRPCHook and the Go client's
# credentials against a pybroker with aclEnable=true.
"""Goal: the official Java (4.9.8, 5.3.3) and Go (v2.1.2) clients, signing with their own ACL
code, produce and push-consume through a pybroker whose every request is checked; a wrong
secret or a topic the account may not use gets Java 4.x's answer (SYSTEM_ERROR with the
AclException remark), which the clients surface as a broker error.

Method: one `pybroker standalone` with aclEnable=true and a plain_acl.yml of three accounts
(producer: PUB on its topics; consumer: SUB on the topics and its groups; admin). The Java side
runs tools/java_compat/SecureClient.java (AclClientRPCHook + DefaultMQProducer /
DefaultMQPushConsumer), the Go side the rmqgo harness with --access-key/--secret-key. Counts
and bodies are compared exactly. Missing peers skip (fail under PYBROKER_REQUIRE_PEERS=1).
"""
import os
import pathlib
import subprocess
import urllib.parse
import uuid

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from tests import peers

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tools" / "java_compat" / "SecureClient.java"
PRODUCER = ("producerKey", "producer-secret-java-go")
CONSUMER = ("consumerKey", "consumer-secret-java-go")
OUTSIDER = ("outsiderKey", "outsider-secret-java-go")     # SUB on BBAclRead only
ACL_TEXT = f"""
accounts:
  - accessKey: {PRODUCER[0]}
    secretKey: {PRODUCER[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [AclJava48=PUB, AclJava53=PUB, AclGo=PUB, TBW102=PUB, AaAclRead=PUB,
                 BBAclRead=PUB]
  - accessKey: {CONSUMER[0]}
    secretKey: {CONSUMER[1]}
    defaultTopicPerm: SUB
    defaultGroupPerm: DENY
    groupPerms: [acl_java_c=SUB, acl_go_c=SUB]
  - accessKey: {OUTSIDER[0]}
    secretKey: {OUTSIDER[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [BBAclRead=SUB]
"""
ACL_REMARK = "org.apache.rocketmq.acl.common.AclException: "
COUNT = 12


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    work = tmp_path_factory.mktemp("acl-clients")
    acl_file = work / "plain_acl.yml"
    acl_file.write_text(ACL_TEXT)
    with StandaloneBroker(work, {"aclEnable": "true",
                                 "rocketmq.acl.plain.file": str(acl_file)}) as running:
        yield running


def _results(stdout: str) -> list[dict]:
    return [peers.parse_result_line(line) for line in stdout.splitlines()
            if line.startswith("RESULT ")]


def run_secure_client(install, work_dir, broker, mode: str, system_properties=None,
                      **options) -> tuple[int, list[dict], str]:
    """Run SecureClient (compiled for ``install``) against ``broker``."""
    classes = peers.compiled_java(install, SOURCE)
    rmq = peers.java_rocketmq.JavaRocketMQ(work_dir, install, namesrv_port=broker.namesrv_port)
    args = [mode, broker.namesrv_addr, *(f"{key}={value}" for key, value in options.items())]
    run = rmq.run_class("SecureClient", args, timeout_s=180, extra_classpath=[classes],
                        system_properties=system_properties)
    return run.returncode, _results(run.stdout), run.stdout[-3000:] + run.stderr[-3000:]


@pytest.mark.parametrize("version", ["4.9.8", "5.3.3"])
def test_java_client_with_acl_hook(broker, tmp_path, version):
    install = peers.java_install(version)
    topic = "AclJava48" if version == "4.9.8" else "AclJava53"
    code, results, output = run_secure_client(
        install, tmp_path, broker, "produce", topic=topic, count=COUNT, group="acl_java_p",
        ak=PRODUCER[0], sk=PRODUCER[1])
    assert code == 0, output
    assert [r["status"] for r in results if r["op"] == "send"] == ["SEND_OK"] * COUNT
    code, results, output = run_secure_client(
        install, tmp_path, broker, "consume", topic=topic, count=COUNT, group="acl_java_c",
        ak=CONSUMER[0], sk=CONSUMER[1], timeout=120)
    assert code == 0, output
    assert sorted(r["body"] for r in results if r["op"] == "recv") == \
        sorted(f"secure-{i}" for i in range(COUNT))


@pytest.mark.parametrize("version", ["4.9.8", "5.3.3"])
def test_java_client_refused_like_a_java_broker(broker, tmp_path, version):
    install = peers.java_install(version)
    cases = [(dict(ak=PRODUCER[0], sk="not-the-right-secret"),
              f"Check signature failed for accessKey={PRODUCER[0]}"),
             (dict(ak=CONSUMER[0], sk=CONSUMER[1]), "No default permission for topic:AclJava48"),
             ({}, "No accessKey is configured")]
    for credentials, message in cases:
        code, results, output = run_secure_client(
            install, tmp_path, broker, "produce", topic="AclJava48", count=1,
            group="acl_java_p", **credentials)
        errors = [r for r in results if r["op"] == "send_error"]
        assert code == 1 and len(errors) == 1, output
        assert errors[0]["code"] == "1" and errors[0]["remark"] == ACL_REMARK + message


def _rmqgo(rmqgo, tmp_path, *args) -> tuple[int, str, str]:
    env = dict(os.environ, **{"rocketmq.client.localOffsetStoreDir": str(tmp_path / "offsets")})
    result = subprocess.run([str(rmqgo), *map(str, args)], capture_output=True, text=True,
                            timeout=200, env=env, stdin=subprocess.DEVNULL)
    return result.returncode, result.stdout, result.stderr


def test_go_client_with_credentials(broker, tmp_path):
    rmqgo = peers.rmqgo_path()
    body = f"go-acl-{uuid.uuid4().hex[:8]}"
    code, stdout, stderr = _rmqgo(rmqgo, tmp_path, "send", "--namesrv", broker.namesrv_addr,
                                  "--topic", "AclGo", "--count", COUNT, "--group", "acl_go_p",
                                  "--body", body + "-{i}", "--retry", 0,
                                  "--access-key", PRODUCER[0], "--secret-key", PRODUCER[1])
    assert code == 0, stdout + stderr
    code, stdout, stderr = _rmqgo(rmqgo, tmp_path, "consume", "--namesrv", broker.namesrv_addr,
                                  "--topic", "AclGo", "--count", COUNT, "--group", "acl_go_c",
                                  "--from", "first", "--timeout", "120s",
                                  "--access-key", CONSUMER[0], "--secret-key", CONSUMER[1])
    assert code == 0, stdout[-2000:] + stderr[-2000:]
    assert sum(f'"{body}-' in line for line in stdout.splitlines()) >= COUNT or \
        stdout.count('"type":"message"') >= COUNT, stdout[-2000:]


def test_go_client_refused_with_a_wrong_secret(broker, tmp_path):
    rmqgo = peers.rmqgo_path()
    code, stdout, stderr = _rmqgo(rmqgo, tmp_path, "send", "--namesrv", broker.namesrv_addr,
                                  "--topic", "AclGo", "--count", 1, "--group", "acl_go_p",
                                  "--retry", 0, "--access-key", PRODUCER[0],
                                  "--secret-key", "a-wrong-secret")
    assert code != 0
    text = urllib.parse.unquote(stdout + stderr)
    assert f"Check signature failed for accessKey={PRODUCER[0]}" in text, text[-2000:]


# "Aa" and "BB" have one Java hashCode, so "AaAclRead#<key>" and "BBAclRead#<key>" share an
# IndexFile slot and hash: a key query on BBAclRead finds AaAclRead's record too.
READ_TOPIC, COLLIDING_TOPIC = "AaAclRead", "BBAclRead"


@pytest.mark.parametrize("version", ["4.9.8", "5.3.3"])
def test_java_client_reads_records_only_of_topics_it_may_sub(broker, tmp_path, version):
    """viewMessage (VIEW_MESSAGE_BY_ID: an offset, no topic) and queryMessage (a key whose
    hash another topic shares) answer a record only to an account with SUB on the record's
    own topic: Java 4.9.8's plain ACL checks neither (any signed account reads any topic by
    walking offsets)."""
    from pybroker._fast.jhash import java_hash
    from tests.ha_support import position, wait_for
    install = peers.java_install(version)
    key = f"k-{version}"
    assert java_hash(f"{READ_TOPIC}#{key}") == java_hash(f"{COLLIDING_TOPIC}#{key}")
    # The outsider's own topic exists too (a key query needs its route).
    code, _, output = run_secure_client(
        install, tmp_path, broker, "produce", topic=COLLIDING_TOPIC, count=1,
        group="acl_read_p", ak=PRODUCER[0], sk=PRODUCER[1], keys="other")
    assert code == 0, output
    code, results, output = run_secure_client(
        install, tmp_path, broker, "produce", topic=READ_TOPIC, count=1, group="acl_read_p",
        ak=PRODUCER[0], sk=PRODUCER[1], keys=key)
    assert code == 0, output
    message_id = next(r["msgid"] for r in results if r["op"] == "send")
    # Indexed (dispatched) before it is looked up; the broker's published positions.
    wait_for(lambda: position(broker.store_dir, "dispatched_position")
             >= position(broker.store_dir, "written_position") > 0, 30, "dispatch")
    seen = {}
    for name, (access_key, secret_key), topic in (
            ("consumer", CONSUMER, READ_TOPIC), ("outsider", OUTSIDER, COLLIDING_TOPIC)):
        code, results, output = run_secure_client(
            install, tmp_path, broker, "lookup", topic=topic, msgid=message_id, key=key,
            group="acl_read_l", ak=access_key, sk=secret_key)
        assert code == 0, output
        seen[name] = {r["op"]: r for r in results}
    assert seen["consumer"]["view"]["topic"] == READ_TOPIC
    assert seen["consumer"]["query_done"]["found"] == "1"
    assert "view" not in seen["outsider"] and "query" not in seen["outsider"], seen["outsider"]
    log = broker._log_text()
    assert f"ACL refused a record of topic {READ_TOPIC} to request code 33" in log
    assert f"ACL refused a record of topic {READ_TOPIC} to request code 12" in log
