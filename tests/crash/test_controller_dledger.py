"""Controller mode under a three-node DLedger controller group (Apache's controller 5.3.3) with
pybroker brokers: the broker set keeps electing correctly when the controller leader is killed
-9; a syncFromLastFile slave starts replication at the master's last CommitLog file, not at 0;
an asyncLearner slave replicates but never joins the SyncStateSet nor holds a send (Java 5.3.3's
AutoSwitchHAConnection / AutoSwitchHAService meaning of both keys).

Method: three Java controllers (controllerDLegerPeers n0..n2 on 127.0.0.1, Java's defaults
otherwise), a pybroker NameServer and broker set broker-a with allAckInSyncStateSet=true: b1
(started first: master) and b2; once the master's CommitLog has rolled into its second file,
b3 joins with an empty store, syncFromLastFile=true and asyncLearner=true. b3's CommitLog must
begin at the master's last file and hold the master's bytes from there; after it caught up
the controller's SyncStateSet must stay {b1, b2} over several shrink/expand periods, and with
b3's ha worker stopped (SIGSTOP) sends must still be answered SEND_OK at once. Then the
controller leader is killed -9: the master must go on answering SEND_OK, the two controllers
left must name a new leader within DLedger's detection and election time, which keeps the
master and its epoch. Then the master is killed -9: the new controller leader must elect b2
(the SyncStateSet's only live member; never the learner), b2 answers SEND_OK and serves every
acknowledged message, and b3 follows it, still outside the set. Waits are bounded.
"""
import os
import signal
import time

import pytest

from pybroker._testbase import controller_cluster as cc
from pybroker._testbase.ha_cluster import BrokerProcess, NameServerProcess
from pybroker.protocol.codes import ResponseCode
from tests import peers
from tests.ha_support import client_for, position, send, wait_for

pytestmark = [pytest.mark.crash, pytest.mark.slow, pytest.mark.timeout(420)]

TOPIC = "CtrlDLedgerTopic"
QUEUES = 4
FILE_SIZE = 1024 * 1024        # the HA test profile's mappedFileSizeCommitLog
GROUP = "broker-a"
BODY_BYTES = 60 * 1024
CONTROLLER_ELECTION_BOUND_S = 60.0   # DLedger: 3 missed heartbeats of 2 s, then a vote
ELECTION_BOUND_S = 15.0              # channel close seen by the leader, elect, one restart
LEARNER_WATCH_S = 4.0                # 20 expansion rounds (0.2 s), 4 checkSyncStateSetPeriod


class _Sender:
    """Numbered sends in SendLoad's body format (``key|padding``); every SEND_OK recorded."""

    def __init__(self):
        self.acked: list[str] = []
        self.number = 0

    def send(self, address: str, count: int, body_bytes: int = 256) -> None:
        with client_for(address) as client:
            for _ in range(count):
                key = f"d-{self.number}"
                body = key.encode() + b"|" + b"x" * body_bytes
                response = send(client, TOPIC, body, self.number % QUEUES, key)
                assert response.code == ResponseCode.SUCCESS, (key, response)
                self.acked.append(key)
                self.number += 1


def _broker(tmp_path, name, namesrv, controllers, **extra) -> BrokerProcess:
    return BrokerProcess(tmp_path / name, namesrv.address,
                         dict(cc.CONTROLLER_TEST_PROFILE, brokerName=GROUP,
                              controllerAddr=";".join(c.address for c in controllers), **extra))


def _start_controllers(controllers) -> str:
    for controller in controllers:
        controller.start()
    return cc.controller_leader([c.address for c in controllers], CONTROLLER_ELECTION_BOUND_S)


def _fill_first_file(master, sender) -> int:
    """Send until the master's CommitLog is in its second file; the last file's start."""
    while position(master.store_dir, "written_position") <= FILE_SIZE:
        sender.send(master.address, 4, BODY_BYTES)
    written = position(master.store_dir, "written_position")
    return written - written % FILE_SIZE


def _from_last_file(master, learner, last_start: int) -> None:
    """The syncFromLastFile slave's log begins at the master's last file, with its bytes."""
    end = wait_for(lambda: (position(learner.store_dir, "written_position")
                            >= position(master.store_dir, "written_position") > 0)
                   and position(master.store_dir, "written_position"), 60,
                   "the learner at the master's end")
    names = sorted(os.listdir(learner.commitlog_dir))
    assert names[0] == f"{last_start:020d}", (names, last_start)
    name = os.path.join(master.commitlog_dir, names[0])
    with open(name, "rb") as theirs, \
            open(os.path.join(learner.commitlog_dir, names[0]), "rb") as ours:
        assert theirs.read(end - last_start) == ours.read(end - last_start)


def _learner_outside(leader: str, master, learner, sender) -> None:
    """The caught-up learner never joins the SyncStateSet, and no send waits for it."""
    deadline = time.monotonic() + LEARNER_WATCH_S
    while time.monotonic() < deadline:
        sender.send(master.address, 1)
        assert cc.replica_info(leader, GROUP)["members"] == {1, 2}
        time.sleep(0.2)
    ha = learner.supervisor_children()["pb-ha"]
    os.kill(ha, signal.SIGSTOP)
    try:
        started = time.monotonic()
        sender.send(master.address, 5)
        elapsed = time.monotonic() - started
    finally:
        os.kill(ha, signal.SIGCONT)
    # syncFlushTimeout is 3 s: a send held for the learner would take that long and fail.
    assert elapsed < 2.0, f"5 sends took {elapsed:.2f} s with the learner stopped"


def _kill_controller_leader(controllers, leader: str, master, sender) -> str:
    before = cc.wait_for_master(leader, GROUP, 10, members={1, 2})
    by_address = {c.address: c for c in controllers}
    killed_at = time.monotonic()
    by_address[leader].kill("controller")
    sender.send(master.address, 10)       # the master does not need the controller to write
    rest = [c.address for c in controllers if c.address != leader]
    new_leader = cc.controller_leader(rest, CONTROLLER_ELECTION_BOUND_S, not_address=leader)
    print(f"\ncontroller leader {leader} killed -9; {new_leader} leads "
          f"{time.monotonic() - killed_at:.2f} s later")
    after = cc.wait_for_master(new_leader, GROUP, 30, members={1, 2})
    assert (after["master_address"], after["master_epoch"]) == \
        (before["master_address"], before["master_epoch"]), (before, after)
    sender.send(master.address, 10)
    return new_leader


def _kill_master(leader: str, master, slave, sender) -> None:
    epoch = cc.replica_info(leader, GROUP)["master_epoch"]
    killed_at = time.monotonic()
    master.kill()
    info = cc.wait_for_master(leader, GROUP, ELECTION_BOUND_S, not_address=master.address)
    assert info["master_address"] == slave.address, info
    assert info["master_epoch"] > epoch, info
    failover_s = time.monotonic() - killed_at + cc.first_send_ok(slave.address, TOPIC, 10)
    print(f"master {master.address} killed -9; {slave.address} answers SEND_OK "
          f"{failover_s:.2f} s later")
    sender.send(slave.address, 20)


def test_dledger_controller_leader_kill_and_slave_options(tmp_path):
    install, java = peers.java_install("5.3.3"), peers.java_rocketmq
    ports = [java.free_port() for _ in range(3)]     # one DLedger group: n0, n1, n2
    controllers = [java.JavaController(tmp_path / f"controller{index}", install, port=port,
                                       peers=ports, overrides=cc.CONTROLLER_CONF)
                   for index, port in enumerate(ports)]
    namesrv = NameServerProcess(tmp_path / "namesrv")
    b1, b2 = (_broker(tmp_path, name, namesrv, controllers) for name in ("b1", "b2"))
    b3 = _broker(tmp_path, "b3", namesrv, controllers, syncFromLastFile="true",
                 asyncLearner="true")
    sender = _Sender()
    try:
        leader = _start_controllers(controllers)
        namesrv.start()
        b1.start()
        cc.wait_for_master(leader, GROUP, 60)
        b2.start()
        cc.wait_for_master(leader, GROUP, 60, members={1, 2})
        last_start = _fill_first_file(b1, sender)
        assert last_start >= FILE_SIZE
        b3.start()
        _from_last_file(b1, b3, last_start)
        _learner_outside(leader, b1, b3, sender)
        leader = _kill_controller_leader(controllers, leader, b1, sender)
        _kill_master(leader, b1, b2, sender)
        counted = cc.count_back(b2.address, TOPIC, QUEUES, sender.acked)
        print(counted.line())
        assert not counted.missing, counted.missing[:20]
        end = position(b2.store_dir, "written_position")
        wait_for(lambda: position(b3.store_dir, "written_position") >= end, 60,
                 "the learner following the new master")
        assert 3 not in cc.replica_info(leader, GROUP)["members"]
    finally:
        for broker in (b1, b2, b3):
            broker.kill()
        namesrv.kill()
        for controller in controllers:
            controller.stop()
