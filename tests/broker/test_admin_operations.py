"""`pybroker admin`'s operations commands change what they say they change on real pybroker
processes (no Java needed; tests/compat/test_admin_operations.py compares the output with
mqadmin's): deleteExpiredCommitLog deletes expired CommitLog files outside the deleteWhen
hours, cleanExpiredCQ reaches the dispatcher, haStatus reads a master's slave and a slave's
master, brokerConsumeStats sums every group's lag.

Method: `pybroker standalone` with 256 KiB CommitLog files, fileReservedTime=0 and a deleteWhen
hour twelve hours away (so nothing expires by itself) and cleanResourceInterval=500 ms; a
pybroker master and slave (HACluster); `python -m pybroker admin` as a subprocess; the broker's
own figures (brokerStatus commitLogMinOffset) and log lines as the evidence.
"""
import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker._testbase.ha_cluster import HACluster
from pybroker.client.message import Message
from pybroker.client.producer import Producer

pytestmark = [pytest.mark.timeout(300)]
FILE_BYTES = 256 * 1024


def admin(namesrv_addr: str, *args, json_out: bool = True):
    run = subprocess.run([sys.executable, "-m", "pybroker", "admin", *map(str, args), "-n",
                          namesrv_addr, *(["--json"] if json_out else [])],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, (args, run.stdout, run.stderr)
    return json.loads(run.stdout) if json_out else run.stdout


def send(namesrv_addr: str, topic: str, count: int, size: int) -> None:
    async def run():
        async with Producer("ops_test_producer", namesrv_addr) as producer:
            for _ in range(count):
                # Random bytes: the client compresses bodies over 4 KiB.
                await producer.send(Message(topic, os.urandom(size)))
    asyncio.run(run())


def wait(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return value


def test_delete_expired_commitlog_and_clean_expired_cq(tmp_path):
    other_hour = (time.localtime().tm_hour + 12) % 24
    overrides = {"mappedFileSizeCommitLog": str(FILE_BYTES), "maxMessageSize": str(64 * 1024),
                 "fileReservedTime": "0", "deleteWhen": f"{other_hour:02d}",
                 "cleanResourceInterval": "500", "diskMaxUsedSpaceRatio": "95"}
    with StandaloneBroker(tmp_path, overrides) as broker:
        send(broker.namesrv_addr, "OpsCleanTopic", 48, 16 * 1024)
        status = admin(broker.namesrv_addr, "brokerStatus", "-b", broker.broker_addr)
        files = int(status["commitLogMaxOffset"]) // FILE_BYTES + 1
        assert files >= 3
        time.sleep(1.5)             # three passes: none deletes (not the hour, disk not full)
        assert admin(broker.namesrv_addr, "brokerStatus", "-b", broker.broker_addr)[
            "commitLogMinOffset"] == "0"
        out = admin(broker.namesrv_addr, "deleteExpiredCommitLog", "-b", broker.broker_addr,
                    json_out=False)
        assert out == "success\n"
        minimum = wait(lambda: int(admin(broker.namesrv_addr, "brokerStatus", "-b",
                                         broker.broker_addr)["commitLogMinOffset"]), 20,
                       "the expired files to go")
        assert minimum == (files - 1) * FILE_BYTES     # every full file; never the last one
        log = wait(lambda: "deleteExpiredCommitLog requested" in broker._log_text()
                   and broker._log_text(), 10, "the dispatcher's log line")
        assert f"deleted {files - 1} expired CommitLog file(s)" in log
        assert admin(broker.namesrv_addr, "cleanExpiredCQ", "-c", "DefaultCluster",
                     json_out=False) == "success\n"
        wait(lambda: "cleanExpiredCQ requested" in broker._log_text(), 10,
             "the dispatcher to take cleanExpiredCQ")


def test_ha_status_of_master_and_slave(tmp_path):
    with HACluster(tmp_path) as cluster:
        master, (slave,) = cluster.masters[0], cluster.slaves[0]
        namesrv = cluster.namesrv.address
        send(namesrv, "OpsHaTopic", 10, 1024)

        def caught_up():
            document = admin(namesrv, "haStatus", "-b", master.address)[master.address]
            connections = document["haConnectionInfo"]
            return document if connections and connections[0]["diff"] == 0 else None
        document = wait(caught_up, 30, "the slave to catch up")
        assert document["master"] and document["inSyncSlaveNums"] == 1
        (connection,) = document["haConnectionInfo"]
        assert connection["slaveAckOffset"] == document["masterCommitLogMaxOffset"] > 10 * 1024
        assert connection["inSync"] and connection["addr"].startswith("127.0.0.1:")
        table = admin(namesrv, "haStatus", "-b", master.address, json_out=False)
        assert "#SlaveNum\t1" in table and "#InSyncSlaveNum\t1" in table
        view = admin(namesrv, "haStatus", "-b", slave.address)[slave.address]
        assert not view["master"]
        assert view["haClientRuntimeInfo"]["masterAddr"] == master.ha_address
        assert view["haClientRuntimeInfo"]["maxOffset"] == document["masterCommitLogMaxOffset"]
        # -c: every master of the cluster (the slave is not asked).
        assert list(admin(namesrv, "haStatus", "-c", "DefaultCluster")) == [master.address]


def test_a_created_topic_is_routable_when_the_answer_comes(tmp_path):
    """UPDATE_AND_CREATE_TOPIC is answered after the NameServer has the topic (Java registers
    before it answers): a route lookup right after the answer finds it, every time."""
    from pybroker.client.admin import Admin

    async def scenario(namesrv_addr: str, broker_addr: str) -> list[str]:
        client = Admin(namesrv_addr)
        await client.start()
        unknown = []
        try:
            for n in range(30):
                topic = f"RoutableAtOnce{n}"
                await client.create_topic(topic, 2, broker_addr=broker_addr)
                if await client.topic_route(topic) is None:
                    unknown.append(topic)
        finally:
            await client.shutdown()
        return unknown

    with StandaloneBroker(tmp_path) as broker:
        assert asyncio.run(scenario(broker.namesrv_addr, broker.broker_addr)) == []
