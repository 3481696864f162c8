# TLS with the real clients: the Java client with -Dtls.enable=true (and its ACL hook) against a
# pybroker whose ports accept TLS only.
"""Goal: the official Java client (4.9.8, 5.3.3), switched to TLS the way Java users do it
(``-Dtls.enable=true``), produces and push-consumes through a pybroker standalone whose
NameServer and broker ports are tls.server.mode=enforcing, with ACL 1.0 on as well; and the
same client without TLS is turned away (its plain connections are closed and logged).

Method: certificates made by openssl at test time; one `pybroker standalone` with
tls.server.mode=enforcing, a server certificate, aclEnable=true; the Java side runs
tools/java_compat/SecureClient.java (see tests/compat/test_acl_clients.py). The Java client
trusts any server certificate in its default test mode, as it does with a Java broker. The Go
client v2.1.2 has no TLS (WithTls exists only after that tag): not tested here.
"""
import pytest

from pybroker._testbase import certs
from pybroker._testbase.cluster import StandaloneBroker
from tests import peers
from tests.compat.test_acl_clients import ACL_TEXT, CONSUMER, PRODUCER, run_secure_client

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(600)]
COUNT = 10


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    missing = certs.openssl_missing()
    if missing:
        pytest.skip(missing)
    work = tmp_path_factory.mktemp("tls-clients")
    made = certs.make_certificates(work / "certs")
    acl_file = work / "plain_acl.yml"
    acl_file.write_text(ACL_TEXT)
    settings = {"aclEnable": "true", "rocketmq.acl.plain.file": str(acl_file),
                "tls.server.mode": "enforcing", "tls.server.certPath": str(made.server_cert),
                "tls.server.keyPath": str(made.server_key)}
    with StandaloneBroker(work, settings) as running:
        yield running


@pytest.mark.parametrize("version", ["4.9.8", "5.3.3"])
def test_java_client_over_tls_with_acl(broker, tmp_path, version):
    install = peers.java_install(version)
    topic = "AclJava48" if version == "4.9.8" else "AclJava53"
    tls = {"tls.enable": "true"}
    code, results, output = run_secure_client(
        install, tmp_path, broker, "produce", system_properties=tls, topic=topic, count=COUNT,
        group="acl_java_p", ak=PRODUCER[0], sk=PRODUCER[1])
    assert code == 0, output
    assert [r["status"] for r in results if r["op"] == "send"] == ["SEND_OK"] * COUNT
    code, results, output = run_secure_client(
        install, tmp_path, broker, "consume", system_properties=tls, topic=topic, count=COUNT,
        group="acl_java_c", ak=CONSUMER[0], sk=CONSUMER[1], timeout=120)
    assert code == 0, output
    assert sorted(r["body"] for r in results if r["op"] == "recv") == \
        sorted(f"secure-{i}" for i in range(COUNT))


def test_java_client_without_tls_is_turned_away(broker, tmp_path):
    install = peers.java_install("4.9.8")
    offset = len(broker._log_text())
    code, results, output = run_secure_client(
        install, tmp_path, broker, "produce", topic="AclJava48", count=1, group="acl_java_p",
        ak=PRODUCER[0], sk=PRODUCER[1])
    assert code == 1 and not [r for r in results if r["op"] == "send"], output
    assert "closing plain TCP connection from 127.0.0.1" in broker._log_text()[offset:]
