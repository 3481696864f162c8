"""Admission to the HA port: address allow-list, the shared-secret challenge (both ways) and
TLS, as a master and a slave run them.

Method: the master's ``HAAccess.admit`` and the slave's ``open_to_master`` on the two ends of
real TCP connections on 127.0.0.1 in one event loop, with real certificates (openssl), a wrong
secret, a peer that speaks the classic protocol (a Java slave's 8-byte report), a silent peer
and a slave that does not speak TLS; the classic protocol then runs over the admitted sockets.
"""
import asyncio
import socket

import pytest

from pybroker._testbase import certs
from pybroker.config import load_broker_config
from pybroker.errors import ConfigError
from pybroker.proc import ha_access
from pybroker.proc.ha_access import HAAccess, HAAccessRefused, parse_networks
from pybroker.protocol import ha as ha_protocol

SECRET = "a-shared-secret-of-32-characters"


def _config(tmp_path, role: str, **extra):
    return load_broker_config(None, dict({"brokerRole": role, "brokerId": "1" if role ==
                                          "SLAVE" else "0",
                                          "storePathRootDir": str(tmp_path / role)}, **extra))


def test_allow_list_admits_listed_addresses_and_networks():
    access = HAAccess(parse_networks("127.0.0.1, 10.1.0.0/16 ,::1"))
    assert access.refusal("127.0.0.1") is None
    assert access.refusal("10.1.200.7") is None
    assert access.refusal("::1") is None
    assert access.refusal("::ffff:10.1.2.3") is None        # an IPv4 peer on a v6 socket
    assert "not in haAllowedSlaveAddresses" in access.refusal("127.0.0.2")
    assert "not in haAllowedSlaveAddresses" in access.refusal("10.2.0.1")
    assert HAAccess().refusal("192.0.2.1") is None           # no list: Java's open port
    assert HAAccess().open and not access.open


def test_settings_are_checked_at_load(tmp_path):
    with pytest.raises(ConfigError, match="haAllowedSlaveAddresses"):
        _config(tmp_path, "SYNC_MASTER", haAllowedSlaveAddresses="127.0.0.1,not-an-ip")
    with pytest.raises(ConfigError, match="haSharedSecret"):
        _config(tmp_path, "SYNC_MASTER", haSharedSecret="short")
    with pytest.raises(ConfigError, match="haTlsEnable"):
        _config(tmp_path, "SYNC_MASTER", haTlsEnable="true")
    config = _config(tmp_path, "SYNC_MASTER", haSharedSecret=SECRET)
    assert SECRET not in repr(config)


async def _pair():
    """Both ends of one TCP connection on 127.0.0.1, non-blocking: (master's, slave's)."""
    loop = asyncio.get_running_loop()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        slave = socket.socket()
        slave.setblocking(False)
        accepted = loop.create_task(loop.sock_accept(listener))
        await loop.sock_connect(slave, listener.getsockname())
        master, _ = await accepted
    master.setblocking(False)
    return master, slave


async def _handshake(master_access: HAAccess, slave_access: HAAccess):
    """Run both sides, each closing its socket when it refuses (as the ha worker does);
    (master's outcome, slave's outcome): a socket or the exception."""
    master, slave = await _pair()

    async def side(call, sock):
        try:
            return await call
        except BaseException:
            sock.close()
            raise
    outcomes = await asyncio.gather(side(master_access.admit(master), master),
                                    side(slave_access.open_to_master(slave, "127.0.0.1"), slave),
                                    return_exceptions=True)
    return outcomes, (master, slave)


async def _classic_round_trip(master_side, slave_side) -> tuple[int, bytes]:
    """A report one way and a transfer unit back, over the admitted sockets."""
    loop = asyncio.get_running_loop()
    slave_side.send(ha_protocol.encode_report(4096))
    report = await _receive(loop, master_side, ha_protocol.REPORT_BYTES)
    unit = ha_protocol.encode_transfer_header(4096, 5) + b"hello"
    assert master_side.sendmsg([unit[:12], memoryview(unit)[12:]]) == len(unit)
    received = await _receive(loop, slave_side, len(unit))
    return ha_protocol.REPORT.unpack(report)[0], received[12:]


async def _receive(loop, sock, size: int) -> bytes:
    data = b""
    deadline = loop.time() + 5
    while len(data) < size:
        assert loop.time() < deadline, "nothing received in 5 s"
        try:
            data += sock.recv(size - len(data))
        except BlockingIOError:
            await asyncio.sleep(0.005)
    return data


def test_the_shared_secret_admits_both_ways_and_refuses_a_wrong_one():
    async def main():
        right = HAAccess(secret=SECRET.encode())
        (master, slave), sockets = await _handshake(right, right)
        assert await _classic_round_trip(master, slave) == (4096, b"hello")
        for sock in sockets:
            sock.close()
        wrong = HAAccess(secret=b"another-secret-of-32-characters!")
        (master_error, slave_error), sockets = await _handshake(right, wrong)
        for sock in sockets:
            sock.close()
        return master_error, slave_error
    master_error, slave_error = asyncio.run(main())
    # The slave sees the master's proof is wrong first and leaves; the master sees it go.
    assert isinstance(slave_error, HAAccessRefused) and "another secret" in str(slave_error)
    assert isinstance(master_error, HAAccessRefused)


def test_a_classic_or_silent_peer_is_refused_by_a_master_with_a_secret(monkeypatch):
    monkeypatch.setattr(ha_access, "HANDSHAKE_TIMEOUT_S", 0.3)
    access = HAAccess(secret=SECRET.encode())

    async def main():
        master, slave = await _pair()
        slave.send(ha_protocol.encode_report(0))        # what a Java slave sends first
        with pytest.raises(HAAccessRefused, match="did not open with the haSharedSecret"):
            await access.admit(master)
        assert await asyncio.get_running_loop().sock_recv(slave, 64) in (b"",), \
            "a refused peer is sent nothing"
        master.close()
        slave.close()
        master, slave = await _pair()
        with pytest.raises(TimeoutError):
            await access.admit(master)                  # a port scanner
        master.close()
        slave.close()
    asyncio.run(main())


@pytest.mark.skipif(certs.openssl_missing() is not None, reason=str(certs.openssl_missing()))
def test_tls_with_the_secret_and_a_plain_slave_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(ha_access, "HANDSHAKE_TIMEOUT_S", 2.0)
    made = certs.make_certificates(tmp_path / "certs")
    tls_keys = {"tls.server.certPath": str(made.server_cert),
                "tls.server.keyPath": str(made.server_key),
                "tls.client.authServer": "true",
                "tls.client.trustCertPath": str(made.ca_cert), "haTlsEnable": "true",
                "haSharedSecret": SECRET}
    master_access = HAAccess.from_config(_config(tmp_path, "SYNC_MASTER", **tls_keys), True)
    slave_access = HAAccess.from_config(_config(tmp_path, "SLAVE", **tls_keys), False)
    assert master_access.describe() == "any peer address, TLS, haSharedSecret challenge"

    async def main():
        (master, slave), sockets = await _handshake(master_access, slave_access)
        assert isinstance(master, ha_access.TlsSocket), master
        assert await _classic_round_trip(master, slave) == (4096, b"hello")
        master.close()
        slave.close()
        plain_secret_only = HAAccess(secret=SECRET.encode())
        (master_error, slave_error), sockets = await _handshake(master_access,
                                                                plain_secret_only)
        for sock in sockets:
            sock.close()
        return master_error, slave_error
    master_error, slave_error = asyncio.run(main())
    assert isinstance(master_error, OSError | TimeoutError), master_error   # no TLS hello
    assert isinstance(slave_error, Exception)
