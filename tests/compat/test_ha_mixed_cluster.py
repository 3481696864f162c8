"""A 2-master/2-slave cluster mixed with Java: broker-a is a pybroker SYNC_MASTER with a Java
4.9.8 slave, broker-b a Java SYNC_MASTER with a pybroker slave, one pybroker NameServer.

Method: the Python client produces to a topic created on both masters (every SEND_OK under
SYNC_MASTER means the other-language slave acknowledged it); each pair's CommitLogs must then
be byte-identical; both masters are killed (kill -9) and the official Java client (JavaCompat
dump) must read every acknowledged message from the two slaves.
"""
import asyncio

import pytest

from pybroker._testbase.ha_cluster import BrokerProcess, NameServerProcess
from pybroker.client.admin import Admin
from pybroker.client.message import Message, SendStatus
from pybroker.client.producer import Producer
from tests import peers
from tests.compat.test_ha_java import (TOPIC, _identical_when_caught_up, _java_broker,
                                       _java_reads_everything, _kill, _slave_has_topic)
from tests.ha_support import wait_for

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(600)]

COUNT = 2000             # about 1.2 MiB per broker: each pair rolls a CommitLog file


def test_mixed_two_by_two_cluster(tmp_path):
    install = peers.java_install("4.9.8")
    namesrv = NameServerProcess(tmp_path / "namesrv").start()
    a_master = BrokerProcess(tmp_path / "a-m", namesrv.address,
                             {"brokerName": "broker-a", "brokerRole": "SYNC_MASTER"})
    b_slave = BrokerProcess(tmp_path / "b-s", namesrv.address,
                            {"brokerName": "broker-b", "brokerRole": "SLAVE", "brokerId": "1"})
    a_slave = _java_broker(tmp_path / "a-s", install, namesrv, "SLAVE", 1)
    b_master = _java_broker(tmp_path / "b-m", install, namesrv, "SYNC_MASTER", 0)
    a_slave.broker_overrides["brokerName"] = "broker-a"
    b_master.broker_overrides["brokerName"] = "broker-b"
    try:
        a_master.start()
        b_master.start(detach=True)
        a_slave.start(detach=True)
        b_slave.start()
        a_master.wait_slaves(1, 60)
        b_slave.wait_log("HAClient connect to master", 60)

        async def produce() -> set[bytes]:
            async with Admin(namesrv.address) as admin:
                for address in (a_master.address, b_master.broker_addr):
                    await admin.create_topic(TOPIC, 4, broker_addr=address)
            acked, brokers = set(), set()
            async with Producer("ha_mixed_producer", namesrv.address,
                                poll_name_server_interval_ms=1000) as producer:
                for index in range(COUNT):
                    body = b"mixed-%05d-" % index + b"x" * 1200
                    result = await producer.send(Message(TOPIC, body))
                    assert result.status is SendStatus.SEND_OK, result
                    acked.add(body)
                    brokers.add(result.message_queue.broker_name)
            assert brokers == {"broker-a", "broker-b"}
            return acked
        acked = asyncio.run(produce())
        _identical_when_caught_up(a_master.commitlog_dir, a_slave.store_dir / "commitlog")
        _identical_when_caught_up(b_master.store_dir / "commitlog", b_slave.commitlog_dir)
        wait_for(lambda: _slave_has_topic(a_slave.broker_addr)
                 and _slave_has_topic(b_slave.address), 60, "slave topic syncs", interval_s=1)
        a_master.kill()
        _kill(b_master)
        _java_reads_everything(tmp_path, install, namesrv, acked)
    finally:
        _kill(a_slave)
        _kill(b_master)
        for process in (a_master, b_slave, namesrv):
            process.kill()
