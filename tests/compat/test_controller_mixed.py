"""Controller mode mixed with Java 5.3.3: a Java broker and a pybroker broker in one broker set
under Apache's controller replicate to each other with AutoSwitchHA in both directions, fail
over to each other, and a pybroker store moves to a Java broker.

Method: Java controller, pybroker NameServer, broker set ``broker-a`` of a Java 5.3.3 broker
(started first: elected master) and a pybroker broker, allAckInSyncStateSet=true. SendLoad's 64
senders write through the controller's master while (1) the Java master is killed -9: the
pybroker broker must be elected and answer SEND_OK, (2) the Java broker is started again: it
must cut its log to the consistent point with the pybroker master, join the SyncStateSet and
hold a byte-identical CommitLog, (3) the pybroker broker is stopped: the Java broker is master
again, and a second Java broker started on the pybroker broker's store directory must come back
with the broker id pybroker applied for (its brokerIdentity file) and the epochs pybroker
recorded (its epochFileCheckpoint), rejoin and catch up. Every acknowledged message is then
counted back on the Java master.
"""
import os
import subprocess
import sys
import time

import pytest

from pybroker._testbase import controller_cluster as cc
from pybroker._testbase.ha_cluster import BrokerProcess, NameServerProcess
from pybroker.store import broker_identity
from pybroker.store.epoch_file import EpochFile
from tests import peers
from tests.ha_support import assert_commitlogs_identical, position, wait_for

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(600)]

TOPIC = "CtrlMixedTopic"
QUEUES = 4
GROUP = "broker-a"
FILE_SIZE = 1024 * 1024


def _java_broker(work_dir, install, controller, namesrv, **overrides):
    java = peers.java_rocketmq.JavaRocketMQ(
        work_dir, install, free_ports=True, own_namesrv=False, broker_heap_mb=384,
        broker_overrides=peers.java_rocketmq.controller_broker_overrides(
            controller.address, brokerName=GROUP, **cc.JAVA_CONTROLLER_TEST_PROFILE,
            **overrides))
    java.namesrv_port = namesrv.port
    java.broker_namesrv_addr = namesrv.address
    return java


def _restart(java) -> None:
    """Start a killed (-9) Java broker again on the same store."""
    killed = java.processes.pop("broker", None)
    if killed is not None:
        killed.wait(30)
    java.start(detach=True)


def _java_written(java) -> int:
    """The Java broker's CommitLog end: the last file's name plus its non-zero prefix."""
    commitlog = java.store_dir / "commitlog"
    last = sorted(os.listdir(commitlog))[-1]
    data = (commitlog / last).read_bytes().rstrip(b"\0")
    return int(last) + len(data)


def _admin(namesrv, *args) -> str:
    run = subprocess.run([sys.executable, "-m", "pybroker", "admin", *args, "-n",
                          namesrv.address], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout


def _printed(text: str) -> list[str]:
    """The data lines of mqadmin's output, in order (brokers come in any order)."""
    return sorted(line for line in text.splitlines()
                  if line.startswith("#") or "Replica:" in line)


def _admin_agrees_with_mqadmin(controller, namesrv, java) -> None:
    """pybroker admin and mqadmin 5.3.3 print the same for the controller-mode commands;
    mqadmin decodes the pybroker broker's GET_BROKER_EPOCH_CACHE answer."""
    for args in (("getSyncStateSet", "-a", controller.address, "-b", GROUP),
                 ("getControllerMetaData", "-a", controller.address),
                 ("getBrokerEpoch", "-b", GROUP)):
        ours = _admin(namesrv, *args)
        theirs = java.mqadmin(*args, "-n", namesrv.address)
        assert _printed(ours) == _printed(theirs), (ours, theirs)


def test_mixed_failover_and_store_move(tmp_path):
    install = peers.java_install("5.3.3")
    controller = peers.java_rocketmq.JavaController(tmp_path / "controller", install,
                                                    overrides=cc.CONTROLLER_CONF).start()
    namesrv = NameServerProcess(tmp_path / "namesrv").start()
    java = _java_broker(tmp_path / "java", install, controller, namesrv)
    py = BrokerProcess(tmp_path / "py", namesrv.address,
                       dict(cc.CONTROLLER_TEST_PROFILE, brokerName=GROUP,
                            controllerAddr=controller.address))
    moved = None
    load = cc.SendLoad(controller.address, GROUP, TOPIC, QUEUES, senders=64, pace_s=0.02)
    try:
        java.start(detach=True)
        assert cc.wait_for_master(controller.address, GROUP, 60)["master_address"] == \
            java.broker_addr
        py.start()
        cc.wait_for_master(controller.address, GROUP, 60, members={1, 2})
        load.start()
        load.wait_acked(1500, 120)                           # Java master -> pybroker slave
        killed_at = time.monotonic()
        java.kill("broker")
        info = cc.wait_for_master(controller.address, GROUP, 10, not_address=java.broker_addr)
        assert info["master_address"] == py.address
        print(f"\nfailover Java -> pybroker: master elected {time.monotonic() - killed_at:.2f} s "
              "after the kill")
        load.wait_acked(load.acked_count() + 1000, 60)
        _restart(java)                                       # pybroker master -> Java slave
        cc.wait_for_master(controller.address, GROUP, 90, members={1, 2})
        load.wait_acked(load.acked_count() + 1000, 60)
        load.stop()
        _admin_agrees_with_mqadmin(controller, namesrv, java)
        end = position(py.store_dir, "written_position")
        wait_for(lambda: _java_written(java) >= end, 60, "the Java slave at the master's end")
        assert_commitlogs_identical(os.path.join(py.store_dir, "commitlog"),
                                    str(java.store_dir / "commitlog"), end, FILE_SIZE)
        identity = broker_identity.read_identity(os.path.join(py.store_dir, "brokerIdentity"))
        epochs = [entry.epoch for entry in
                  EpochFile.load(os.path.join(py.store_dir, "epochFileCheckpoint")).entries]
        assert py.stop() == 0                                # the store moves to Java
        cc.wait_for_master(controller.address, GROUP, 30, not_address=py.address)
        # The store's own geometry (pybroker's HA test profile), as any broker opening it.
        geometry = {key: py.values[key] for key in ("mappedFileSizeCommitLog",
                                                    "mappedFileSizeConsumeQueue",
                                                    "maxHashSlotNum", "maxIndexNum")}
        moved = _java_broker(tmp_path / "moved", install, controller, namesrv,
                             storePathRootDir=py.store_dir,
                             storePathCommitLog=os.path.join(py.store_dir, "commitlog"),
                             **geometry)
        moved.start(detach=True)
        cc.wait_for_master(controller.address, GROUP, 90, members={1, identity.broker_id})
        assert epochs[:2] == [1, 2]
        counted = cc.count_back(java.broker_addr, TOPIC, QUEUES, load.acked)
        print(counted.line())
        assert not counted.missing, counted.missing[:20]
    finally:
        if load.error is None:
            load.stop()
        py.kill()
        for broker in (java, moved):
            if broker is not None:
                broker.stop()
        namesrv.kill()
        controller.stop()
