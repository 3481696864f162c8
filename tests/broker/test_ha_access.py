"""A rogue peer of the HA port neither receives CommitLog data nor releases a SYNC_MASTER
acknowledgement; real slaves replicate with the protections on.

Method: real SYNC_MASTER/slave pairs (pybroker/_testbase/ha_cluster.py) and rogue peers that
are raw TCP sockets speaking the classic HA protocol (8-byte reports) from this test.
* ``haAllowedSlaveAddresses=127.0.0.1`` and ``haListenAddress=127.0.0.1``: the slave
  replicates; a rogue connecting from 127.0.0.2 is closed before it is sent a byte. A rogue
  from the allowed address (an impersonator) with the real slave's ha worker frozen: a send is
  held, the rogue's first report claims the master's whole log (its request), and the send is
  still answered FLUSH_SLAVE_TIMEOUT after slaveTimeout (Java would count the claim).
* ``haTlsEnable`` + ``haSharedSecret`` with real certificates on both brokers: the slave
  replicates (a SYNC_MASTER SEND_OK needs its acknowledgement); rogues in plain TCP - a Java
  slave's first report, a hello without the secret - are closed without a byte of data and
  are never counted as slaves.
"""
import os
import signal
import threading
import time

import pytest

from pybroker._testbase import certs
from pybroker._testbase.ha_cluster import HACluster
from pybroker.protocol import ha as ha_protocol
from pybroker.protocol import ha_auth
from pybroker.protocol.codes import ResponseCode
from tests.ha_support import (client_for, position, received_until_closed, rogue_peer,
                              send, wait_for)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "HaAccessTopic"
SLAVE_TIMEOUT_MS = 1500
SECRET = "the-pair-secret-of-this-test-1234"


def test_allow_list_and_acknowledgements_only_for_bytes_sent(tmp_path):
    overrides = {"haAllowedSlaveAddresses": "127.0.0.1", "haListenAddress": "127.0.0.1",
                 "slaveTimeout": str(SLAVE_TIMEOUT_MS)}
    with HACluster(tmp_path, role="SYNC_MASTER", overrides=overrides) as cluster:
        master, slave = cluster.masters[0], cluster.slaves[0][0]
        with client_for(master.address) as client:
            assert send(client, TOPIC, b"replicated", 0, "r").code == ResponseCode.SUCCESS
            outsider = rogue_peer(master.ha_address, "127.0.0.2")
            outsider.sendall(ha_protocol.encode_report(0))
            assert received_until_closed(outsider) == b""
            outsider.close()
            wait_for(lambda: "127.0.0.2 is not in haAllowedSlaveAddresses" in master.log_text(),
                     5, "the refusal logged")
            ha_pid = slave.supervisor_children()["pb-ha"]
            os.kill(ha_pid, signal.SIGSTOP)
            try:
                _impersonator_cannot_acknowledge(master, client)
            finally:
                os.kill(ha_pid, signal.SIGCONT)
            assert send(client, TOPIC, b"after", 0, "a").code == ResponseCode.SUCCESS


def _impersonator_cannot_acknowledge(master, client) -> None:
    """The real slave is frozen: a send is held; a peer from the allowed address claims the
    master's whole log as its request; the send still times out."""
    written = position(master.store_dir, "written_position")
    answers: list = []
    sender = threading.Thread(target=lambda: answers.append(
        send(client, TOPIC, b"held", 1, "held")))
    started = time.monotonic()
    sender.start()
    end = wait_for(lambda: max(position(master.store_dir, "written_position") - written, 0),
                   5, "the held send appended") + written
    impersonator = rogue_peer(master.ha_address)
    try:
        impersonator.sendall(ha_protocol.encode_report(end))
        sender.join(10)
        waited = time.monotonic() - started
        assert answers[0].code == ResponseCode.FLUSH_SLAVE_TIMEOUT, answers[0].code
        assert waited >= SLAVE_TIMEOUT_MS / 1000
        assert position(master.store_dir, "replicated_position") < end
    finally:
        impersonator.close()


@pytest.mark.skipif(certs.openssl_missing() is not None, reason=str(certs.openssl_missing()))
def test_tls_and_shared_secret_pair_replicates_and_refuses_rogues(tmp_path):
    made = certs.make_certificates(tmp_path / "certs")
    overrides = {"haTlsEnable": "true", "haSharedSecret": SECRET,
                 "tls.server.certPath": str(made.server_cert),
                 "tls.server.keyPath": str(made.server_key),
                 "tls.client.authServer": "true", "tls.client.trustCertPath": str(made.ca_cert)}
    with HACluster(tmp_path, role="SYNC_MASTER", overrides=overrides) as cluster:
        master, slave = cluster.masters[0], cluster.slaves[0][0]
        with client_for(master.address) as client:
            # SYNC_MASTER: SUCCESS means the authenticated slave acknowledged it.
            assert send(client, TOPIC, b"over-tls", 0, "t").code == ResponseCode.SUCCESS
        wait_for(lambda: slave.published("written_position")
                 == master.published("written_position"), 10, "replica")
        for greeting in (ha_protocol.encode_report(0),                 # a Java slave
                         ha_auth.encode_hello(bytes(ha_auth.NONCE_BYTES))):  # no secret, no TLS
            rogue = rogue_peer(master.ha_address)
            rogue.sendall(greeting)
            received = received_until_closed(rogue, 15)
            rogue.close()
            # At most a TLS alert record (7 bytes), never a transfer unit.
            assert len(received) < ha_protocol.TRANSFER_HEADER_BYTES, received
        assert master.published("ha_slaves_connected") == 1

        def refused() -> list:
            return [line for line in master.log_text().splitlines()
                    if "HA connection from" in line and "refused" in line]
        # The refusal is logged right after the connection is closed.
        wait_for(lambda: len(refused()) == 2, 5, f"two refusals logged, {refused()}")
