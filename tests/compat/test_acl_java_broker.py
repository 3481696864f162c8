# ACL refusals of pybroker compared with a real Java 4.9.8 broker's (aclEnable=true).
"""Goal: "Java's code and remark" is a measured fact: the Java client gets the same response
code and the same remark (up to the stack frame Java appends) from pybroker as from the Java
4.9.8 broker, for a wrong secret, a missing permission and a missing access key.

Method: the Java 4.9.8 NameServer + broker (tools/java_rocketmq.py) with aclEnable=true and
the same plain_acl.yml as tests/compat/test_acl_clients.py in its ROCKETMQ_HOME/conf, and a
pybroker standalone with that file; tools/java_compat/SecureClient.java sends one message per
case to each and reports the broker error the Java client received.
"""
import pytest

from pybroker._testbase.cluster import StandaloneBroker
from tests import peers
from tests.compat.test_acl_clients import ACL_TEXT, CONSUMER, PRODUCER, run_secure_client

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(600)]

CASES = {"wrong_secret": dict(ak=PRODUCER[0], sk="not-the-right-secret"),
         "no_permission": dict(ak=CONSUMER[0], sk=CONSUMER[1]),
         "no_access_key": {}}
JAVA_FRAME = ", org.apache.rocketmq."   # Java's remark goes on with the first stack frame


def _answers(install, work_dir, broker) -> dict:
    answers = {}
    for name, credentials in CASES.items():
        code, results, output = run_secure_client(install, work_dir, broker, "produce",
                                                  topic="AclJava48", count=1,
                                                  group="acl_java_p", **credentials)
        errors = [r for r in results if r["op"] == "send_error"]
        assert code == 1 and len(errors) == 1, output
        remark = errors[0]["remark"]
        answers[name] = (errors[0]["code"], remark.split(JAVA_FRAME)[0])
    return answers


def test_refusals_match_the_java_broker(tmp_path):
    install = peers.java_install("4.9.8")
    java_work = tmp_path / "java"
    (java_work / "home" / "conf").mkdir(parents=True)
    (java_work / "home" / "conf" / "plain_acl.yml").write_text(ACL_TEXT)
    with peers.java_broker(java_work, install, broker_overrides={"aclEnable": "true"}) as java:
        java_answers = _answers(install, tmp_path / "java-client", java)
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_TEXT)
    with StandaloneBroker(tmp_path / "pybroker", {
            "aclEnable": "true", "rocketmq.acl.plain.file": str(acl_file)}) as ours:
        our_answers = _answers(install, tmp_path / "py-client", ours)
    assert our_answers == java_answers
    assert java_answers["wrong_secret"][1].startswith("org.apache.rocketmq.acl.common."
                                                      "AclException: Check signature failed")
