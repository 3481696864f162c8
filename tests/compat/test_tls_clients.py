# TLS with the real clients: the Java client with -Dtls.enable=true (and its ACL hook) against a
# pybroker whose ports accept TLS only.
"""Goal: the official Java client (4.9.8, 5.3.3), switched to TLS the way Java users do it
(``-Dtls.enable=true``), produces and push-consumes through a pybroker standalone whose
NameServer and broker ports are tls.server.mode=enforcing, with ACL 1.0 on as well; and the
same client without TLS is turned away (its plain connections are closed and logged). With
tls.server.need.client.auth=require the Java client, verifying the broker's certificate against
the CA, is served only when it shows its own certificate (Java's tls.client.* properties).
A permissive broker serves the Java and Go clients with and without TLS on the same ports.

Method: certificates made by openssl at test time; one `pybroker standalone` with
tls.server.mode=enforcing, a server certificate, aclEnable=true; the Java side runs
tools/java_compat/SecureClient.java (see tests/compat/test_acl_clients.py). The Java client
trusts any server certificate in its default test mode, as it does with a Java broker. The Go
client has TLS (WithTls, never verifying the server) only after v2.1.2: tests/compat/gotls
(rmqgotls, built by tools/go_client.py --tls) pins the later pseudo-version the module proxy
serves and sends and push-consumes with credentials over TLS.
"""
import json
import os
import subprocess

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


@pytest.fixture(scope="module")
def mutual(tmp_path_factory):
    """An enforcing standalone that requires a client certificate signed by the test CA."""
    missing = certs.openssl_missing()
    if missing:
        pytest.skip(missing)
    work = tmp_path_factory.mktemp("tls-mutual-clients")
    made = certs.make_certificates(work / "certs")
    acl_file = work / "plain_acl.yml"
    acl_file.write_text(ACL_TEXT)
    settings = {"aclEnable": "true", "rocketmq.acl.plain.file": str(acl_file),
                "tls.server.mode": "enforcing", "tls.server.certPath": str(made.server_cert),
                "tls.server.keyPath": str(made.server_key),
                "tls.server.need.client.auth": "require",
                "tls.server.trustCertPath": str(made.ca_cert),
                # the broker's own registration with its NameServer shows one too
                "tls.client.certPath": str(made.client_cert),
                "tls.client.keyPath": str(made.client_key)}
    with StandaloneBroker(work, settings) as running:
        running.certificates = made
        yield running


@pytest.mark.parametrize("version", ["4.9.8", "5.3.3"])
def test_java_client_with_a_client_certificate(mutual, tmp_path, version):
    """need.client.auth=require: the Java client's own TLS settings (test mode off, verifying
    the broker against the CA, showing its certificate) produce; without the certificate the
    handshake fails and nothing is sent."""
    install = peers.java_install(version)
    made = mutual.certificates
    verified = {"tls.enable": "true", "tls.test.mode.enable": "false",
                "tls.client.authServer": "true", "tls.client.trustCertPath": made.ca_cert}
    offset = len(mutual._log_text())
    code, results, output = run_secure_client(
        install, tmp_path / "without", mutual, "produce", system_properties=verified,
        topic="AclJava48", count=1, group="acl_java_p", ak=PRODUCER[0], sk=PRODUCER[1])
    assert code == 1 and not [r for r in results if r["op"] == "send"], output
    assert "TLS handshake failed" in mutual._log_text()[offset:]
    with_cert = {**verified, "tls.client.certPath": made.client_cert,
                 "tls.client.keyPath": made.client_key}
    topic = "AclJava48" if version == "4.9.8" else "AclJava53"
    code, results, output = run_secure_client(
        install, tmp_path / "with", mutual, "produce", system_properties=with_cert,
        topic=topic, count=COUNT, group="acl_java_p", ak=PRODUCER[0], sk=PRODUCER[1])
    assert code == 0, output
    assert [r["status"] for r in results if r["op"] == "send"] == ["SEND_OK"] * COUNT


@pytest.fixture(scope="module")
def permissive(tmp_path_factory):
    """A permissive standalone (TLS and plain TCP on the same ports), ACL on."""
    missing = certs.openssl_missing()
    if missing:
        pytest.skip(missing)
    work = tmp_path_factory.mktemp("tls-permissive-clients")
    made = certs.make_certificates(work / "certs")
    acl_file = work / "plain_acl.yml"
    acl_file.write_text(ACL_TEXT)
    settings = {"aclEnable": "true", "rocketmq.acl.plain.file": str(acl_file),
                "tls.server.mode": "permissive", "tls.server.certPath": str(made.server_cert),
                "tls.server.keyPath": str(made.server_key)}
    with StandaloneBroker(work, settings) as running:
        yield running


@pytest.mark.parametrize("tls", [True, False], ids=["tls", "plain"])
def test_permissive_serves_java_and_go_clients_with_and_without_tls(permissive, tmp_path, tls):
    """Java's TlsModeHandler behaviour: one port, the client decides (first-byte detection)."""
    install = peers.java_install("4.9.8")
    code, results, output = run_secure_client(
        install, tmp_path / "java", permissive, "produce",
        system_properties={"tls.enable": str(tls).lower()}, topic="AclJava48", count=3,
        group="acl_java_p", ak=PRODUCER[0], sk=PRODUCER[1])
    assert code == 0, output
    assert [r["status"] for r in results if r["op"] == "send"] == ["SEND_OK"] * 3
    code, records, output = _rmqgotls(
        peers.rmqgotls_path(), tmp_path / "go", "send", "--namesrv", permissive.namesrv_addr,
        "--topic", "AclGo", "--count", 3, "--group", "acl_go_p", "--access-key", PRODUCER[0],
        "--secret-key", PRODUCER[1], f"--tls={str(tls).lower()}")
    assert code == 0, output
    assert [r["type"] for r in records].count("send") == 3 and records[-1]["sent"] == 3


def _rmqgotls(binary, tmp_path, *args) -> tuple[int, list[dict], str]:
    env = dict(os.environ, HOME=str(tmp_path))
    result = subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True,
                            timeout=200, env=env, stdin=subprocess.DEVNULL)
    records = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    return result.returncode, records, result.stdout[-2000:] + result.stderr[-2000:]


def test_go_client_over_tls_with_credentials(broker, tmp_path):
    binary = peers.rmqgotls_path()
    common = ["--namesrv", broker.namesrv_addr, "--topic", "AclGo", "--count", COUNT]
    code, records, output = _rmqgotls(binary, tmp_path, "send", *common, "--group", "acl_go_p",
                                      "--access-key", PRODUCER[0], "--secret-key", PRODUCER[1])
    assert code == 0, output
    assert [r["type"] for r in records].count("send") == COUNT and records[-1]["sent"] == COUNT
    code, records, output = _rmqgotls(binary, tmp_path, "consume", *common, "--group",
                                      "acl_go_c", "--access-key", CONSUMER[0], "--secret-key",
                                      CONSUMER[1], "--timeout", "120s")
    assert code == 0, output
    assert sorted(r["body"] for r in records if r["type"] == "message") == \
        sorted(f"gotls-{i}" for i in range(COUNT))


def test_go_client_without_tls_is_turned_away(broker, tmp_path):
    binary = peers.rmqgotls_path()
    code, records, output = _rmqgotls(binary, tmp_path, "send", "--namesrv",
                                      broker.namesrv_addr, "--topic", "AclGo", "--count", 1,
                                      "--tls=false", "--timeout", "20s")
    assert code != 0 and not any(r.get("status") == 0 for r in records), output
