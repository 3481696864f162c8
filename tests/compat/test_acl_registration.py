"""Under aclEnable a pybroker NameServer takes a broker's registration from an allowed address
(a Java 4.9.8 broker, which never signs it) or signed by an admin account (a pybroker broker
with innerClientAuthenticationCredentials), and from nobody else.

Method: two pybroker NameServer processes with aclEnable=true and one plain_acl.yml: A lists
127.0.0.1 in brokerRegistrationAllowedAddresses, B lists nothing. A real Java 4.9.8 broker
(tools/java_rocketmq.py) and a real pybroker broker register with both (namesrvAddr
"A;B"). The Java broker must be in A's cluster info (the harness waits for it) and refused by
B (its log names the refusal; B's cluster info lacks it after the Java broker's first
registrations); the pybroker broker, signing with an admin account, must be in both. Then the
official Java client (SecureClient, signed with a plain account) produces through A's routes to
the Java broker.
"""
import time
import types

import pytest

from pybroker._testbase.ha_cluster import BrokerProcess, NameServerProcess
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.command import create_request
from tests import peers
from tests.compat.test_acl_clients import run_secure_client
from tests.ha_support import client_for, wait_for

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(400)]

harness = peers.java_rocketmq
ADMIN = ("brokerAdmin", "broker-admin-secret")
PRODUCER = ("producerKey", "producer-secret-registration")
ACL_TEXT = f"""
accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
  - accessKey: {PRODUCER[0]}
    secretKey: {PRODUCER[1]}
    defaultTopicPerm: PUB
    defaultGroupPerm: SUB
"""
TOPIC = "AclRegistered"
REFUSAL = "ACL refused request code 103"


def _cluster_info(namesrv: NameServerProcess) -> bytes:
    with client_for(namesrv.address) as client:
        return bytes(client.invoke(create_request(RequestCode.GET_BROKER_CLUSTER_INFO, {}),
                                   5000).body or b"")


def test_java_broker_by_address_pybroker_broker_signed(tmp_path):
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_TEXT)
    common = {"aclEnable": "true", "rocketmq.acl.plain.file": str(acl_file)}
    allowing = NameServerProcess(tmp_path / "namesrv-a", overrides=dict(
        common, brokerRegistrationAllowedAddresses="127.0.0.1"))
    strict = NameServerProcess(tmp_path / "namesrv-b", overrides=common)
    both = f"{allowing.address};{strict.address}"
    java = harness.JavaRocketMQ(
        tmp_path / "java", peers.java_install("4.9.8"), namesrv_port=allowing.port,
        broker_port=harness.free_port(offsets=(-2, 0, 1)), broker_namesrv_addr=both,
        own_namesrv=False, broker_overrides={"brokerName": "java-broker",
                                             "aclEnable": "false"})
    signed = BrokerProcess(tmp_path / "pybroker", both, {
        "brokerName": "py-broker", "innerClientAuthenticationCredentials":
        f'{{"accessKey":"{ADMIN[0]}","secretKey":"{ADMIN[1]}"}}'})
    try:
        for namesrv in (allowing, strict):
            namesrv.start()
        signed.start()
        java.start(detach=True)          # returns once A lists the Java broker
        started = time.monotonic()
        wait_for(lambda: REFUSAL in strict.log_text(), 30, "B refusing the Java broker")
        for namesrv in (allowing, strict):
            wait_for(lambda n=namesrv: b"py-broker" in _cluster_info(n), 30,
                     f"the signed pybroker broker in {namesrv.address}")
        assert b"java-broker" in _cluster_info(allowing)
        assert b"java-broker" not in _cluster_info(strict)
        assert time.monotonic() - started < 60
        names = types.SimpleNamespace(namesrv_port=allowing.port, namesrv_addr=allowing.address)
        code, results, output = run_secure_client(
            peers.java_install("4.9.8"), tmp_path / "client", names, "produce", topic=TOPIC,
            count=3, group="acl_registration_p", ak=PRODUCER[0], sk=PRODUCER[1])
        assert code == 0, output
        assert {r["status"] for r in results if r["op"] == "send"} == {"SEND_OK"}
    finally:
        java.stop()
        signed.kill()
        for namesrv in (allowing, strict):
            namesrv.kill()
