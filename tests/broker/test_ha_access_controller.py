"""Controller mode's HA port (AutoSwitchHA) admits peers as the classic one does: with
haAllowedSlaveAddresses, haTlsEnable and haSharedSecret on both members of a broker set, the
slave replicates (allAckInSyncStateSet: a SEND_OK needs its acknowledgement); a peer from an
address outside the list is closed before a byte is sent; a plain-TCP peer from an allowed
address speaking the AutoSwitchHA handshake gets no transfer and is never a member.

Method: Apache's controller (Java 5.3.3, one node), a pybroker NameServer and two pybroker
brokers in controller mode with real certificates (pybroker/_testbase/certs.py); rogues are
raw sockets of this test bound to 127.0.0.2 or 127.0.0.1.
"""
import pytest

from pybroker._testbase import certs
from pybroker._testbase import controller_cluster as cc
from pybroker._testbase.ha_cluster import BrokerProcess, NameServerProcess
from pybroker.protocol import autoswitch_ha as wire
from pybroker.protocol import ha as ha_protocol
from pybroker.protocol.codes import ResponseCode
from tests import peers
from tests.ha_support import (client_for, position, received_until_closed, rogue_peer,
                              send, wait_for)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300),
              pytest.mark.skipif(certs.openssl_missing() is not None,
                                 reason=str(certs.openssl_missing()))]

TOPIC = "CtrlAccessTopic"
GROUP = "broker-acl"
SECRET = "the-controller-pair-secret-12345"


def test_controller_mode_ha_port_applies_the_admission_settings(tmp_path):
    made = certs.make_certificates(tmp_path / "certs")
    install = peers.java_install("5.3.3")
    controller = peers.java_rocketmq.JavaController(tmp_path / "controller", install,
                                                    overrides=cc.CONTROLLER_CONF).start()
    namesrv = NameServerProcess(tmp_path / "namesrv").start()
    access = {"haAllowedSlaveAddresses": "127.0.0.1", "haListenAddress": "127.0.0.1",
              "haTlsEnable": "true", "haSharedSecret": SECRET,
              "tls.server.certPath": str(made.server_cert),
              "tls.server.keyPath": str(made.server_key),
              "tls.client.authServer": "true", "tls.client.trustCertPath": str(made.ca_cert)}
    brokers = [BrokerProcess(tmp_path / f"b{index}", namesrv.address,
                             dict(cc.CONTROLLER_TEST_PROFILE, brokerName=GROUP,
                                  controllerAddr=controller.address, **access))
               for index in (1, 2)]
    try:
        brokers[0].start()
        cc.wait_for_master(controller.address, GROUP, 60)
        brokers[1].start()
        info = cc.wait_for_master(controller.address, GROUP, 60, members={1, 2})
        master = next(b for b in brokers if b.address == info["master_address"])
        slave = next(b for b in brokers if b is not master)
        with client_for(master.address) as client:
            # allAckInSyncStateSet: SUCCESS means the slave, over TLS and the challenge,
            # acknowledged it.
            assert send(client, TOPIC, b"over-tls", 0, "t").code == ResponseCode.SUCCESS
        end = position(master.store_dir, "written_position")
        wait_for(lambda: position(slave.store_dir, "written_position") >= end, 20, "replica")
        outsider = rogue_peer(master.ha_address, "127.0.0.2")
        outsider.sendall(wire.encode_slave_handshake(9, False, False))
        assert received_until_closed(outsider, 5) == b""
        outsider.close()
        wait_for(lambda: "127.0.0.2 is not in haAllowedSlaveAddresses" in master.log_text(),
                 5, "the refusal logged")
        plain = rogue_peer(master.ha_address, "127.0.0.1")
        plain.sendall(wire.encode_slave_handshake(9, False, False) + ha_protocol.encode_report(0))
        received = received_until_closed(plain, 15)
        plain.close()
        assert len(received) < ha_protocol.TRANSFER_HEADER_BYTES, received   # a TLS alert
        assert cc.replica_info(controller.address, GROUP)["members"] == frozenset({1, 2})
        with client_for(master.address) as client:
            assert send(client, TOPIC, b"after", 0, "a").code == ResponseCode.SUCCESS
    finally:
        for broker in brokers:
            broker.kill()
        namesrv.kill()
        controller.stop()
