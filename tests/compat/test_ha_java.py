"""Replication interoperates with the real Java brokers, both ways, ASYNC and SYNC.

Method: one pybroker NameServer; a pybroker master (its HA port on 127.0.0.1, admitting only
haAllowedSlaveAddresses=127.0.0.1) with a Java slave (4.9.8 and 5.3.3, the
brokers .ci/run installs from Maven Central), and a Java master with a pybroker slave; the
master runs with brokerRole ASYNC_MASTER, then restarts on its store as SYNC_MASTER (one JVM
start fewer than a fresh pair per role), with 1 MiB CommitLog files on both sides. Raw
SEND_MESSAGE_V2 requests from four threads go to the master (under SYNC_MASTER every SUCCESS
means the slave acknowledged). After each catch-up the two CommitLogs must be byte-identical
(Java's BLANK fillers included); then the master is killed (kill -9) and the official Java
client (JavaCompat dump, a DefaultMQPullConsumer) must read every acknowledged message from
the slave. With 5.3.3 the slave also syncs the master's 5.x timer: timer messages parked on
the master (due in 10 minutes) reach the slave's own timer checkpoint (GET_TIMER_CHECK_POINT
every 3 s: the master's enqueue offset) and timer metrics (GET_TIMER_METRICS), and a Java slave
of a pybroker master logs no unsupported request 60 or 61.
"""
import concurrent.futures
import json
import os
import pathlib
import random
import re
import time

import pytest

from pybroker._testbase.ha_cluster import BrokerProcess, NameServerProcess
from pybroker.protocol import fastjson
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.store.timer_checkpoint import read_checkpoint
from pybroker.store.timer_metrics import load_timer_metrics
from tests import peers
from tests.compat.test_java_client_pybroker import JavaClient, _ops
from tests.ha_support import assert_commitlogs_identical, client_for, send, wait_for

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(600)]

harness = peers.java_rocketmq
TOPIC = "HaJavaTopic"
QUEUES = 4
COUNT = 1200             # per role: about 1 MiB, so each run rolls a CommitLog file
PRODUCERS = 4
BUSY_RETRIES = 20
FILE_SIZE = 1024 * 1024
VERSIONS = ("4.9.8", "5.3.3")
MODE_GROUP = "ha_pop_group"
ROLES = ("ASYNC_MASTER", "SYNC_MASTER")


def _java_broker(work_dir, install, namesrv: NameServerProcess, role: str, broker_id: int):
    """A Java broker of broker-a registering with the pybroker NameServer."""
    overrides = {"brokerName": "broker-a", "brokerId": str(broker_id), "brokerRole": role,
                 "brokerIP2": "127.0.0.1", "mappedFileSizeCommitLog": str(FILE_SIZE),
                 "maxMessageSize": str(256 * 1024), "haSendHeartbeatInterval": "1000",
                 "haHousekeepingInterval": "5000", "slaveReadEnable": "true",
                 "flushDiskType": "ASYNC_FLUSH", "waitTimeMillsInSendQueue": "1000"}
    return harness.JavaRocketMQ(work_dir, install, namesrv_port=namesrv.port,
                                broker_port=harness.free_port(offsets=(-2, 0, 1)),
                                broker_overrides=overrides, own_namesrv=False)


def _kill(java) -> None:
    """kill -9 of a Java broker (a graceful 5.x stop takes ~10 s; nothing here needs it)."""
    if "broker" in java.processes:
        java.kill("broker")
    java.stop()


def _pybroker(work_dir, namesrv: NameServerProcess, role: str, broker_id: int,
              port: int | None = None):
    # A pybroker master admits HA peers by address only (haAllowedSlaveAddresses): a Java
    # slave speaks neither TLS nor the shared-secret challenge on the HA port.
    return BrokerProcess(work_dir, namesrv.address, {"brokerName": "broker-a",
                                                     "brokerRole": role,
                                                     "brokerId": str(broker_id),
                                                     "haListenAddress": "127.0.0.1",
                                                     "haAllowedSlaveAddresses": "127.0.0.1"},
                         port)


def _produce(address: str, rand, prefix: str) -> set[bytes]:
    """COUNT sends from PRODUCERS threads; the set of acknowledged bodies (hex text: the Java
    client prints them)."""
    acked: set[bytes] = set()

    def produce(index: int) -> None:
        generator = random.Random(rand.random())
        with client_for(address) as client:
            for sequence in range(index, COUNT, PRODUCERS):
                body = (f"{prefix}-{sequence}:".encode()
                        + generator.randbytes(generator.randint(100, 700)).hex().encode())
                for _ in range(BUSY_RETRIES):
                    response = send(client, TOPIC, body, sequence % QUEUES,
                                    f"{prefix}{sequence}")
                    # A loaded Java broker sheds sends (SYSTEM_BUSY, nothing stored); its
                    # producer retries them, so does this one.
                    if response.code != ResponseCode.SYSTEM_BUSY:
                        break
                    time.sleep(0.05)
                assert response.code == ResponseCode.SUCCESS, (sequence, response.code,
                                                               response.remark)
                acked.add(body)
    with concurrent.futures.ThreadPoolExecutor(PRODUCERS) as pool:
        for done in [pool.submit(produce, index) for index in range(PRODUCERS)]:
            done.result()
    return acked


def _identical_when_caught_up(master_dir, slave_dir) -> None:
    """Wait until the slave's files hold the master's bytes (the master has stopped writing)."""
    def end_of(directory) -> int:
        names = sorted(os.listdir(directory))
        data = pathlib.Path(directory, names[-1]).read_bytes()
        used = len(data.rstrip(b"\0"))
        return int(names[-1]) + used
    end = wait_for(lambda: end_of(master_dir), 10, "master CommitLog")

    def caught_up() -> bool:
        try:
            assert_commitlogs_identical(master_dir, slave_dir, end, FILE_SIZE)
            return True
        except (AssertionError, FileNotFoundError, IndexError):
            return False
    wait_for(caught_up, 60, "byte-identical CommitLogs", interval_s=0.5)
    assert end > FILE_SIZE, "the load must roll a CommitLog file"


def _slave_has_topic(address: str) -> bool:
    """The slave took the auto-created topic from its master (slave sync, every 10 s)."""
    with client_for(address) as client:
        response = client.invoke(create_request(RequestCode.GET_ALL_TOPIC_CONFIG, {}), 5000)
    return TOPIC in fastjson.loads(response.body)["topicConfigTable"]


def _set_pop_mode(address: str) -> None:
    """SET_MESSAGE_REQUEST_MODE (401, 5.x) on a master: the slave's sync must carry it."""
    body = json.dumps({"topic": TOPIC, "consumerGroup": MODE_GROUP, "mode": "POP"}).encode()
    with client_for(address) as client:
        response = client.invoke(create_request(RequestCode.SET_MESSAGE_REQUEST_MODE, {},
                                                body), 5000)
    assert response.code == ResponseCode.SUCCESS, response.remark


def _slave_has_pop_mode(address: str) -> bool:
    with client_for(address) as client:
        response = client.invoke(create_request(RequestCode.GET_ALL_MESSAGE_REQUEST_MODE, {}),
                                 5000)
    modes = fastjson.loads(response.body)["messageRequestModeMap"]
    return modes.get(TOPIC, {}).get(MODE_GROUP, {}).get("mode") == "POP"


def _not_supported_lines(java) -> list[str]:
    """The Java slave's log lines about requests its pybroker master does not serve (the 5.x
    timer's 60 and 61 included)."""
    lines = []
    for path in (java.home_dir / "logs" / "rocketmqlogs").glob("*.log"):
        lines += [line for line in path.read_text(errors="replace").splitlines()
                  if "not supported" in line]
    return lines


TIMER_PARKED = 12


def _park_timers(address: str) -> None:
    """TIMER_PARKED timer messages on the master, due in 10 minutes (they stay parked)."""
    with client_for(address) as client:
        for number in range(TIMER_PARKED):
            response = send(client, TOPIC, b"timer-%d" % number, number % QUEUES,
                            f"timer{number}", extra={"TIMER_DELAY_SEC": "600"})
            assert response.code == ResponseCode.SUCCESS, response.remark
            assert "recallHandle" in response.ext_fields


def _timer_synced(master_store: pathlib.Path, slave_store: pathlib.Path) -> bool:
    """The slave's timer checkpoint names the master's enqueue offset (all parked messages)
    and its metrics are the master's."""
    mine = read_checkpoint(str(slave_store / "config" / "timercheck"))
    master = read_checkpoint(str(master_store / "config" / "timercheck"))
    if mine is None or master is None or master.master_timer_queue_offset < TIMER_PARKED:
        return False
    if mine.master_timer_queue_offset != master.master_timer_queue_offset:
        return False
    metrics = load_timer_metrics(str(slave_store / "config" / "timermetrics"))
    return metrics.count(TOPIC) == TIMER_PARKED


def _only_restart_failures(text: str) -> None:
    """The Java slave's failed timer syncs (each logged with its exception on the next line)
    were polls of a master that was gone: the restart in ROLES' order (its stop to its start)
    may meet one of the 3 s polls (no connection, or a request cut by the stop). An answer the
    slave could not take (a wrong body, a refusal) would be a fault."""
    gone = ("RemotingConnectException", "RemotingSendRequestException",
            "RemotingTimeoutException")
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if "syncTimerCheckPoint Exception" in line or "SyncTimerMetrics Exception" in line:
            cause = lines[index + 1] if index + 1 < len(lines) else ""
            assert any(name in cause for name in gone), (line, cause)


def _java_reads_everything(tmp_path, install, namesrv, acked: set[bytes]) -> None:
    client = JavaClient(install, tmp_path / "client", namesrv)
    results = client.run("dump", topic=TOPIC, group="ha_java_dump", timeout_s=240)
    bodies = {message["body"].encode() for message in _ops(results, "dump")}
    missing = acked - bodies
    assert not missing, f"{len(missing)} acknowledged messages not read from the slave"


@pytest.mark.parametrize("version", VERSIONS)
def test_pybroker_master_java_slave(tmp_path, rand, version):
    """The pybroker master runs ASYNC_MASTER, then restarts as SYNC_MASTER on the same store;
    the Java slave follows both, then is read by the Java client after kill -9 of the master."""
    install = peers.java_install(version)
    namesrv = NameServerProcess(tmp_path / "namesrv").start()
    java = _java_broker(tmp_path / "java-slave", install, namesrv, "SLAVE", 1)
    masters = [_pybroker(tmp_path / "master", namesrv, ROLES[0], 0)]
    masters.append(_pybroker(tmp_path / "master", namesrv, ROLES[1], 0, masters[0].port))
    acked: set[bytes] = set()
    try:
        # Master first: a Java slave learns its master's addresses only from registration
        # answers (every 30 s).
        masters[0].start()
        java.start(detach=True)
        for master in masters:
            if not master.alive:
                master.start()
            master.wait_slaves(1, 60)
            acked |= _produce(master.address, rand, master.values["brokerRole"])
            _identical_when_caught_up(master.commitlog_dir, java.store_dir / "commitlog")
            if master is masters[0]:
                _set_pop_mode(master.address)
                master.stop()
        # Java's slave sync takes the auto-created topic: every 10 s in 4.9.x, every 60 s in
        # 5.x (its first round, 10 s after start, may come before it knows its master).
        wait_for(lambda: _slave_has_topic(java.broker_addr), 90, "Java slave topic sync",
                 interval_s=1)
        if install.major >= 5:   # the same sync round takes the message request modes
            wait_for(lambda: _slave_has_pop_mode(java.broker_addr), 90,
                     "Java slave request mode sync", interval_s=1)
            assert not _not_supported_lines(java)
        if version == "5.3.3":
            _park_timers(masters[-1].address)
            # The metrics come with Java's full sync: every 60 s in 5.x.
            wait_for(lambda: _timer_synced(pathlib.Path(masters[-1].store_dir),
                                           java.store_dir), 90, "Java slave timer sync",
                     interval_s=1)
            # SlaveSynchronize logs to broker.log (RocketmqBroker): its topic sync says so,
            # a failed timer sync would too (before issue #23: every 3 s).
            text = (java.home_dir / "logs" / "rocketmqlogs" / "broker.log").read_text(
                errors="replace")
            assert "Update slave topic config from master" in text
            for failure in ("request type 60 not supported", "request type 61 not supported"):
                assert failure not in text, failure
            _only_restart_failures(text)
        masters[-1].kill()
        _java_reads_everything(tmp_path, install, namesrv, acked)
    finally:
        _kill(java)
        for master in masters:
            master.kill()
        namesrv.kill()


@pytest.mark.parametrize("version", VERSIONS)
def test_java_master_pybroker_slave(tmp_path, rand, version):
    """The Java master runs ASYNC_MASTER, then restarts as SYNC_MASTER on the same store; the
    pybroker slave follows both (its restart-time verification runs against a Java master),
    then the Java client reads everything from it after kill -9 of the Java master."""
    install = peers.java_install(version)
    namesrv = NameServerProcess(tmp_path / "namesrv").start()
    javas = [_java_broker(tmp_path / "java-master", install, namesrv, role, 0)
             for role in ROLES]
    javas[1].broker_port = javas[0].broker_port
    slave = _pybroker(tmp_path / "slave", namesrv, "SLAVE", 1)
    acked: set[bytes] = set()
    try:
        for java in javas:
            offset = len(slave.log_text())
            java.start(detach=True)
            if not slave.alive:
                slave.start()
            # The slave learned the Java master's HA address from the NameServer.
            slave.wait_log("HAClient connect to master", 60, offset)
            acked |= _produce(java.broker_addr, rand, java.broker_overrides["brokerRole"])
            _identical_when_caught_up(java.store_dir / "commitlog", slave.commitlog_dir)
            if java is not javas[-1]:
                _kill(java)
            elif install.major >= 5:
                _set_pop_mode(java.broker_addr)
        assert "matches the master; transferring" in slave.log_text()
        wait_for(lambda: slave.published("dispatched_position")
                 == slave.published("written_position") > 0, 30, "slave dispatch")
        wait_for(lambda: _slave_has_topic(slave.address), 30, "pybroker slave topic sync",
                 interval_s=1)
        if install.major >= 5:
            wait_for(lambda: _slave_has_pop_mode(slave.address), 30,
                     "pybroker slave request mode sync", interval_s=1)
        else:   # a 4.x master does not serve 402: said once, never an error
            assert "does not serve GET_ALL_MESSAGE_REQUEST_MODE" in slave.log_text()
            assert not re.search(r"GET_ALL_MESSAGE_REQUEST_MODE from master \S+ failed: code",
                                 slave.log_text())
        if version == "5.3.3":
            _park_timers(javas[-1].broker_addr)
            wait_for(lambda: _timer_synced(javas[-1].store_dir,
                                           pathlib.Path(slave.store_dir)), 60,
                     "pybroker slave timer sync", interval_s=1)
        else:
            # A 4.x master has no timer: the slave says so once, not every 3 s.
            log_text = slave.log_text()
            assert log_text.count("request type 60 not supported (logged once)") == 1, \
                log_text[-3000:]
        _kill(javas[-1])
        _java_reads_everything(tmp_path, install, namesrv, acked)
    finally:
        for java in javas:
            _kill(java)
        slave.kill()
        namesrv.kill()
