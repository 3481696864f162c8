"""Controller mode, three pybroker brokers under Apache's controller (Java 5.3.3): kill -9 of the
master under 64 concurrent senders, the old master's return with a cut log, and a partition of
the master from the controller - nothing acknowledged is lost, no two masters accept writes and
no consumer is served a message the SyncStateSet has not confirmed.

Method: one Java controller (one-node DLedger group), a pybroker NameServer and three pybroker
brokers with allAckInSyncStateSet=true; each broker reaches the controller through its own
LinkProxy (a userspace link that can be partitioned). SendLoad's 64 senders write to whichever
broker the controller names master, retrying elsewhere as a client does, and record every
SEND_OK. A worker of the master is killed first: only its data plane restarts (no election).
With the master's ha worker stopped, a message sent to it must not be pulled until the worker
goes on and the slaves confirm it (Java 5.3.3 holds dispatch at the confirm offset).
Then the master is killed with -9 mid-load: a new master must answer SEND_OK within the
controller's detection plus one data-plane restart, and the senders go on. The old master is
started again: it must cut the tail it had not replicated (its ha worker asks for the cut and
the broker is killed -9 as soon as it does, then started once more), and catch up byte for byte.
Then the master's link to the controller is partitioned while a prober keeps writing to it
directly: once another broker has answered SEND_OK as master, the old one must answer nothing
but errors. After the partition heals, every message ever acknowledged must be counted back on
the final master, and all three CommitLogs must agree. Failover times are printed.
"""
import os
import re
import signal
import time

import pytest

from pybroker._testbase import controller_cluster as cc
from pybroker._testbase.fault_proxy import LinkProxy, leader_rewrite
from pybroker._testbase.ha_cluster import BrokerProcess, NameServerProcess
from pybroker.protocol.codes import ResponseCode
from tests import peers
from tests.ha_support import (assert_commitlogs_identical, client_for, position, read_queue,
                              send, wait_for)

pytestmark = [pytest.mark.crash, pytest.mark.slow, pytest.mark.timeout(420)]

TOPIC = "CtrlFailoverTopic"
QUEUES = 4
FILE_SIZE = 1024 * 1024
GROUP = "broker-a"
ELECTION_BOUND_S = 10.0   # detection (a closed channel: at once) + election + one restart


def _start(tmp_path):
    install = peers.java_install("5.3.3")
    controller = peers.java_rocketmq.JavaController(tmp_path / "controller", install,
                                                    overrides=cc.CONTROLLER_CONF).start()
    namesrv = NameServerProcess(tmp_path / "namesrv").start()
    proxies, brokers = [], []
    for index in range(3):
        proxy = LinkProxy(controller.address)
        proxies.append(proxy)
        address = proxy.start()
        # The controller names its own address as leader: rewritten, so that every request
        # of this broker to the controller crosses its link.
        proxy.rewrite = leader_rewrite(controller.address, address)
        brokers.append(BrokerProcess(tmp_path / f"b{index + 1}", namesrv.address,
                                     dict(cc.CONTROLLER_TEST_PROFILE, brokerName=GROUP,
                                          controllerAddr=address)))
    brokers[0].start()            # the first to ask is elected (epoch 1)
    cc.wait_for_master(controller.address, GROUP, 60)
    for broker in brokers[1:]:
        broker.start()
    cc.wait_for_master(controller.address, GROUP, 60, members={1, 2, 3})
    with client_for(brokers[1].address) as client:     # a slave refuses writes, as Java's
        refused = send(client, TOPIC, b"to-a-slave|", 0, "to-a-slave")
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE, refused
    assert refused.remark.startswith("service not available now"), refused.remark
    return controller, namesrv, proxies, brokers


def _by_address(brokers, address):
    return next(broker for broker in brokers if broker.address == address)


def _worker_death_keeps_master(controller, brokers) -> None:
    """kill -9 of a master's worker restarts its data plane only: its heartbeat connection
    outlives the generation, so the controller elects nobody and the epoch stays."""
    before = cc.wait_for_master(controller.address, GROUP, 10, members={1, 2, 3})
    master = _by_address(brokers, before["master_address"])
    workers = master.supervisor_children()
    os.kill(workers["pb-dispatcher"], signal.SIGKILL)
    wait_for(lambda: master.supervisor_children().get("pb-dispatcher") not in
             (None, workers["pb-dispatcher"]), 30, "the master's next generation")
    assert cc.first_send_ok(master.address, TOPIC, 30) < 30
    after = cc.wait_for_master(controller.address, GROUP, 30, members={1, 2, 3})
    assert (after["master_address"], after["master_epoch"]) == \
        (before["master_address"], before["master_epoch"])


def _unconfirmed_held_back(controller, brokers) -> None:
    """Java's readUnCommitted=false: the master does not serve a message its SyncStateSet has
    not confirmed, and serves it once confirmed. Its ha worker is stopped (SIGSTOP), so no
    slave receives what is sent meanwhile: a WAIT=false send is answered at once and is in the
    master's CommitLog, but neither dispatched nor pulled until the ha worker goes on."""
    info = cc.wait_for_master(controller.address, GROUP, 10, members={1, 2, 3})
    master = _by_address(brokers, info["master_address"])
    ha = master.supervisor_children()["pb-ha"]
    queue = QUEUES - 1
    with client_for(master.address) as client:
        written = position(master.store_dir, "written_position")
        # All confirmed and dispatched (the dispatcher of the generation started by the worker
        # kill before may still be on its way on a loaded box).
        wait_for(lambda: position(master.store_dir, "dispatched_position") == written, 10,
                 f"dispatched up to {written}")
        served = len(read_queue(client, TOPIC, queue))
        os.kill(ha, signal.SIGSTOP)
        try:
            response = send(client, TOPIC, b"unconfirmed|", queue, "unconfirmed", wait=False)
            assert response.code == ResponseCode.SUCCESS, response
            wait_for(lambda: position(master.store_dir, "written_position") > written, 10,
                     "the unconfirmed message in the master's CommitLog")
            time.sleep(0.5)            # far longer than a dispatch takes
            assert position(master.store_dir, "dispatched_position") == written
            assert len(read_queue(client, TOPIC, queue)) == served, \
                "a message the SyncStateSet did not confirm was served"
        finally:
            os.kill(ha, signal.SIGCONT)
        bodies = wait_for(lambda: read_queue(client, TOPIC, queue)[served:], 10,
                          "the message served once confirmed")
    assert bodies == [b"unconfirmed|"]


def _kill_master_under_load(controller, brokers, load):
    """kill -9 of the master mid-load. Its ha worker is stopped (SIGSTOP) for a moment first
    and a WAIT=false send written to it, so the master surely holds records no slave received
    (each sender has one send in flight: the slaves otherwise have everything). The slave
    elected switches in-process: its remoting workers, dispatcher and flusher keep their pids,
    the ha worker is a new one and an appender runs; a send to it right away is acknowledged
    (and counted back at the end)."""
    info = cc.wait_for_master(controller.address, GROUP, 10)
    old = _by_address(brokers, info["master_address"])
    load.wait_acked(3000, 120)
    slaves_before = {broker.address: broker.supervisor_children() for broker in brokers
                     if broker is not old}
    os.kill(old.supervisor_children()["pb-ha"], signal.SIGSTOP)
    # Whatever is written from here on was not read by the stopped ha worker. The senders may
    # all be waiting for their replication by now (a loaded box), so a WAIT=false send is
    # written for sure; it is answered at once and not counted as acknowledged. The pause
    # stays far below haMaxTimeSlaveNotCatchup: a shrunk SyncStateSet would elect nobody.
    stopped_at = position(old.store_dir, "written_position")
    with client_for(old.address) as client:
        response = send(client, TOPIC, b"unreplicated|", 0, "unreplicated", wait=False)
    assert response.code == ResponseCode.SUCCESS, response
    wait_for(lambda: position(old.store_dir, "written_position") > stopped_at, 2,
             "a record written after the master's ha worker stopped")
    time.sleep(0.3)
    killed_at = time.monotonic()
    old.kill()
    new_info = cc.wait_for_master(controller.address, GROUP, ELECTION_BOUND_S,
                                  not_address=old.address)
    failover_s = time.monotonic() - killed_at + \
        cc.first_send_ok(new_info["master_address"], TOPIC, 10)
    print(f"\nfailover: kill -9 of {old.address} -> first SEND_OK on "
          f"{new_info['master_address']} in {failover_s:.2f} s (epoch "
          f"{new_info['master_epoch']})")
    assert failover_s < ELECTION_BOUND_S
    new = _by_address(brokers, new_info["master_address"])
    with client_for(new.address) as client:
        response = send(client, TOPIC, b"after-promotion|", 0, "after-promotion")
    assert response.code == ResponseCode.SUCCESS, response
    load.acked["after-promotion"] = (new.address, 0.0, 0.0)
    new.wait_log("promoted to master in-process", 10)
    before, after = slaves_before[new.address], new.supervisor_children()
    kept = ("pb-remoting-0", "pb-remoting-1", "pb-dispatcher", "pb-flusher")
    assert {name: after.get(name) for name in kept} == {name: before[name] for name in kept}, \
        (before, after)
    assert "pb-appender" not in before and "pb-appender" in after, (before, after)
    assert after["pb-ha"] != before["pb-ha"], (before, after)
    before = load.acked_count()
    load.wait_acked(before + 2000, 120)           # the senders go on
    return old, new


def _join_lines(text: str, count: int) -> str:
    """The last ``count`` lines of a broker log that tell how a slave (re)joins: its config
    echo left out, the HA and SyncStateSet lines kept."""
    lines = [line for line in text.splitlines(True) if "pybroker.config:" not in line]
    return "".join(lines[-count:])


def _rejoin_with_cut(controller, old, master):
    """Start the old master; kill -9 it the moment its ha worker asks for the cut, again."""
    offset = len(old.log_text())
    master_offset = len(master.log_text())
    old.start(wait=False)
    old.wait_log("truncating to", 60, offset)
    old.kill()
    print(f"old master killed -9 while cutting: {old.log_text()[offset:].count('truncat')} "
          "truncation lines logged")
    old.start(wait=False)
    try:
        cc.wait_for_master(controller.address, GROUP, 60, members={1, 2, 3})
    except AssertionError as error:
        joins = [line for line in master.log_text()[master_offset:].splitlines(True)
                 if re.search(r"SyncStateSet|slave\[|AutoSwitchHA|alter|controller", line)]
        raise AssertionError(
            f"{error}\nthe old master's log since its restart (last lines):\n"
            f"{_join_lines(old.log_text()[offset:], 40)}\nthe master's HA and SyncStateSet "
            f"lines since then:\n{''.join(joins[-40:])}") from None
    assert "truncated to physical offset" in old.log_text()
    target = position(master.store_dir, "written_position")
    wait_for(lambda: position(old.store_dir, "written_position") >= target > 0, 60,
             "catch-up")


def _partition_master(controller, proxies, brokers, load):
    info = cc.wait_for_master(controller.address, GROUP, 10, members={1, 2, 3})
    master = _by_address(brokers, info["master_address"])
    proxy = proxies[brokers.index(master)]
    prober = client_for(master.address)
    proxy.partition()
    partitioned_at = time.monotonic()
    new_info = cc.wait_for_master(controller.address, GROUP, 30, not_address=master.address)
    new_first_ok = time.monotonic() + \
        cc.first_send_ok(new_info["master_address"], TOPIC, 10)
    print(f"partition: {new_info['master_address']} answers SEND_OK "
          f"{new_first_ok - partitioned_at:.2f} s after {master.address} was cut off")
    late_ok, answers = 0, {}
    try:
        while time.monotonic() < new_first_ok + 6:
            sent_at = time.monotonic()
            try:
                response = send(prober, TOPIC, b"stale|", 1, f"stale-{sent_at}")
            except (OSError, TimeoutError, ConnectionError):
                prober.close()
                prober = client_for(master.address, 10)
                continue
            answers[response.code] = answers.get(response.code, 0) + 1
            late_ok += sent_at > new_first_ok and response.code == ResponseCode.SUCCESS
    finally:
        prober.close()
    print(f"the cut-off master answered {answers}")
    assert late_ok == 0, f"two masters accepted writes: {late_ok} late SEND_OKs ({answers})"
    proxy.heal()
    cc.wait_for_master(controller.address, GROUP, 60, members={1, 2, 3})
    return _by_address(brokers, new_info["master_address"])


def test_failover_rejoin_and_partition(tmp_path):
    controller, namesrv, proxies, brokers = _start(tmp_path)
    load = cc.SendLoad(controller.address, GROUP, TOPIC, QUEUES, senders=64, pace_s=0.02)
    try:
        _worker_death_keeps_master(controller, brokers)
        _unconfirmed_held_back(controller, brokers)
        load.start()
        old, master = _kill_master_under_load(controller, brokers, load)
        _rejoin_with_cut(controller, old, master)
        master = _partition_master(controller, proxies, brokers, load)
        load.wait_acked(load.acked_count() + 500, 60)
        load.stop()
        counted = cc.count_back(master.address, TOPIC, QUEUES, load.acked)
        print(counted.line())
        assert not counted.missing, counted.missing[:20]
        end = position(master.store_dir, "written_position")
        for broker in brokers:
            wait_for(lambda b=broker: position(b.store_dir, "written_position") >= end, 60,
                     f"{broker.address} at {end}")
            if broker is not master:
                assert_commitlogs_identical(os.path.join(master.store_dir, "commitlog"),
                                            os.path.join(broker.store_dir, "commitlog"), end,
                                            FILE_SIZE)
        # A clean stop of the master leaves its SyncStateSet as it was: its own ha worker stops
        # before the set's upkeep, and those disconnections are no lost slaves (a set shrunk to
        # the stopping master alone would leave the controller nobody to elect).
        members = cc.wait_for_master(controller.address, GROUP, 30)["members"]
        assert len(members) > 1, members
        assert master.stop() == 0
        info = cc.wait_for_master(controller.address, GROUP, 30, not_address=master.address)
        assert info["master_address"] in {b.address for b in brokers if b is not master}
    finally:
        load.stop() if load.error is None else None
        for broker in brokers:
            broker.kill()
        for proxy in proxies:
            proxy.stop()
        namesrv.kill()
        controller.stop()
