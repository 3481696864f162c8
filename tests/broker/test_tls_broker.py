# TLS on a running pybroker's remoting ports: permissive, enforcing, disabled, client certs.
"""Goal: tls.server.mode works as Java's TlsModeHandler does (security-and-faults.md S3): permissive
serves TLS and plain TCP on the same port (told apart by the first byte), enforcing closes
plain TCP with a log line, a port without TLS closes a ClientHello with a log line; frames of
any size travel through TLS (asyncio's SSL transport feeding the buffered receive path), client
certificates are checked when asked for, and no key password is ever answered.

Method: certificates made at test time by openssl (pybroker._testbase.certs); one
`pybroker standalone` per mode on free loopback ports; pybroker's remoting client with and
without an SSL context, and raw sockets for the bytes no client would send. Sends are pulled
back and compared byte for byte.
"""
import socket
import ssl
import time

import pytest

from pybroker._testbase import certs
from pybroker._testbase.cluster import StandaloneBroker
from pybroker.config import TlsConfig, load_broker_config
from pybroker.errors import ConfigError
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request, encode
from pybroker.remoting.client import SyncRemotingClient
from pybroker.remoting.tls import client_context

pytestmark = [pytest.mark.slow]

TIMEOUT_MS = 15_000
LOG_WAIT_S = 10.0


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    missing = certs.openssl_missing()
    if missing:
        pytest.skip(missing)
    return certs.make_certificates(tmp_path_factory.mktemp("certs"))


def _start(tmp_path_factory, name, **settings) -> StandaloneBroker:
    conf = {key.replace("_", "."): str(value) for key, value in settings.items()}
    return StandaloneBroker(tmp_path_factory.mktemp(name), conf).start()


@pytest.fixture(scope="module")
def permissive(tmp_path_factory, certificates):
    broker = _start(tmp_path_factory, "tls-permissive", tls_server_mode="permissive",
                    tls_server_certPath=certificates.server_cert,
                    tls_server_keyPath=certificates.server_key_encrypted,
                    tls_server_keyPassword=certificates.key_password)
    yield broker
    assert broker.stop() == 0


def _tls_context(certificates, with_client_cert=False) -> ssl.SSLContext:
    settings = dict(tls_client_auth_server=True,
                    tls_client_trust_cert_path=str(certificates.ca_cert))
    if with_client_cert:
        settings.update(tls_client_cert_path=str(certificates.client_cert),
                        tls_client_key_path=str(certificates.client_key))
    return client_context(TlsConfig(**settings))


def _send_fields(topic: str) -> dict:
    return {"a": "tls_producer", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
            "g": str(int(time.time() * 1000)), "h": "0",
            "i": props.encode_properties({"WAIT": "true"}), "j": "0", "k": "false",
            "m": "false"}


def _round_trip(address: str, context, body: bytes, topic: str) -> None:
    with SyncRemotingClient(ssl_context=context) as client:
        client.connect(address)
        sent = client.invoke(create_request(RequestCode.SEND_MESSAGE_V2, _send_fields(topic),
                                            body), TIMEOUT_MS)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        # sysFlag 6 = suspend|subscription: the pull waits for the dispatcher (a plain pull
        # right after the send can race the consume queue and get NO_MESSAGE_IN_QUEUE).
        pull = {"consumerGroup": "tls_reader", "topic": topic, "queueId": "0",
                "queueOffset": sent.ext_fields["queueOffset"], "maxMsgNums": "1",
                "sysFlag": "6", "commitOffset": "0", "suspendTimeoutMillis": "5000",
                "subscription": "*", "subVersion": "0", "expressionType": "TAG"}
        pulled = client.invoke(create_request(RequestCode.PULL_MESSAGE, pull), TIMEOUT_MS)
        assert pulled.code == ResponseCode.SUCCESS, pulled.remark
        assert body in bytes(pulled.body)


def _log_line(broker, offset: int, needle: str) -> str:
    deadline = time.monotonic() + LOG_WAIT_S
    while True:
        for line in broker._log_text()[offset:].splitlines():
            if needle in line:
                return line
        assert time.monotonic() < deadline, broker._log_text()[offset:][-2000:]
        time.sleep(0.05)


def _closed_without_answer(sock: socket.socket) -> bool:
    sock.settimeout(LOG_WAIT_S)
    try:
        return sock.recv(65536) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True


@pytest.mark.parametrize("body_bytes", [10, 300_000])
def test_permissive_serves_tls_and_plain_on_one_port(permissive, certificates, body_bytes):
    body = bytes(range(256)) * (body_bytes // 256) + b"end"
    _round_trip(permissive.broker_addr, _tls_context(certificates), body, "TlsTopic")
    _round_trip(permissive.broker_addr, None, body, "TlsTopic")


def test_namesrv_of_a_standalone_broker_speaks_tls_too(permissive, certificates):
    with SyncRemotingClient(ssl_context=_tls_context(certificates)) as client:
        client.connect(permissive.namesrv_addr)
        answer = client.invoke(create_request(RequestCode.GET_BROKER_CLUSTER_INFO), TIMEOUT_MS)
        assert answer.code == ResponseCode.SUCCESS
        assert permissive.broker_addr.encode() in bytes(answer.body)


def test_the_key_password_is_never_answered(permissive, certificates):
    with SyncRemotingClient() as client:
        client.connect(permissive.broker_addr)
        answer = client.invoke(create_request(RequestCode.GET_BROKER_CONFIG), TIMEOUT_MS)
        assert answer.code == ResponseCode.SUCCESS
        text = bytes(answer.body).decode()
        assert "tls.server.certPath=" in text
        assert certificates.key_password not in text and "keyPassword" not in text
    assert certificates.key_password not in permissive._log_text()


def test_enforcing_closes_plain_tcp_with_a_log_line(tmp_path_factory, certificates):
    broker = _start(tmp_path_factory, "tls-enforcing", tls_server_mode="enforcing",
                    tls_server_certPath=certificates.server_cert,
                    tls_server_keyPath=certificates.server_key)
    try:
        offset = len(broker._log_text())
        with socket.create_connection(("127.0.0.1", broker.broker_port)) as sock:
            sock.sendall(encode(create_request(RequestCode.GET_BROKER_CLUSTER_INFO)))
            assert _closed_without_answer(sock)
        line = _log_line(broker, offset, "closing plain TCP connection from 127.0.0.1")
        assert "tls.server.mode=enforcing" in line
        _round_trip(broker.broker_addr, _tls_context(certificates), b"enforced", "TlsOnly")
    finally:
        assert broker.stop() == 0


def test_a_port_without_tls_closes_a_client_hello_with_a_log_line(tmp_path_factory,
                                                                   certificates):
    broker = _start(tmp_path_factory, "tls-disabled", tls_server_mode="disabled",
                    tls_server_certPath=certificates.server_cert,
                    tls_server_keyPath=certificates.server_key)
    try:
        offset = len(broker._log_text())
        raw = socket.create_connection(("127.0.0.1", broker.broker_port))
        context = _tls_context(certificates)
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as wrapped:
                wrapped.recv(1)
        raw.close()
        line = _log_line(broker, offset, "TLS ClientHello")
        assert "tls.server.mode=disabled" in line
        _round_trip(broker.broker_addr, None, b"plain still works", "PlainTopic")
    finally:
        assert broker.stop() == 0


def test_client_certificates_when_required(tmp_path_factory, certificates):
    broker = _start(tmp_path_factory, "tls-mutual", tls_server_mode="enforcing",
                    tls_server_certPath=certificates.server_cert,
                    tls_server_keyPath=certificates.server_key,
                    tls_server_need_client_auth="require",
                    tls_server_trustCertPath=certificates.ca_cert,
                    # the broker's own registration with its NameServer shows one too
                    tls_client_certPath=certificates.client_cert,
                    tls_client_keyPath=certificates.client_key)
    try:
        offset = len(broker._log_text())
        with pytest.raises((ssl.SSLError, ConnectionError, OSError, TimeoutError)):
            _round_trip(broker.broker_addr, _tls_context(certificates), b"x", "Mutual")
        _log_line(broker, offset, "TLS handshake failed")
        _round_trip(broker.broker_addr, _tls_context(certificates, with_client_cert=True),
                    b"mutual", "Mutual")
    finally:
        assert broker.stop() == 0


@pytest.mark.parametrize("settings, message", [
    ({"tls.server.mode": "enforcing"}, "enforcing needs tls.server.certPath"),
    ({"tls.server.certPath": "/x.pem"}, "go together"),
    ({"tls.server.certPath": "/x.pem", "tls.server.keyPath": "/x.key",
      "tls.server.need.client.auth": "require"}, "tls.server.trustCertPath"),
    ({"tls.client.authServer": "true"}, "needs tls.client.trustCertPath"),
])
def test_settings_that_cannot_work_stop_start_up(settings, message):
    with pytest.raises(ConfigError) as caught:
        load_broker_config(overrides={"brokerName": "b", **settings})
    assert message in str(caught.value)


def test_tls_config_file_is_read_like_java(tmp_path, certificates):
    tls_file = tmp_path / "tls.properties"
    tls_file.write_text(f"tls.server.certPath={certificates.server_cert}\n"
                        f"tls.server.keyPath={certificates.server_key}\n"
                        "tls.server.mode=disabled\n")
    loaded = load_broker_config(overrides={"brokerName": "b", "tls.config.file": str(tls_file),
                                           "tls.server.mode": "enforcing"})
    # The file sets the key paths; the mode is not a key Java reads from it.
    assert loaded.tls.tls_server_cert_path == str(certificates.server_cert)
    assert loaded.tls.tls_server_mode == "enforcing"
