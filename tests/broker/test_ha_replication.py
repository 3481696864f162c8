"""A pybroker slave replicates its pybroker master byte for byte and behaves as a Java slave.

Method: real NameServer and broker processes (pybroker/_testbase/ha_cluster.py) on 127.0.0.1
with 1 MiB CommitLog files, raw remoting requests (tests/ha_support.py). Each test drives one
behaviour of protocol.md §6.2 / issue #10 and checks it on the other side: the slave's CommitLog
files against the master's, the slave's pull answers, response codes of both roles, the
slave's metadata documents, and the master's HA port against bad input. Every wait is bounded
and fails the test.
"""
import json
import os
import signal
import socket
import struct
import time

import pytest

from pybroker._testbase.ha_cluster import BrokerProcess, HACluster, NameServerProcess
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.protocol import fastjson
from tests.ha_support import (assert_commitlogs_identical, client_for, position, pull,
                              read_queue, send, wait_for, wait_topic_synced)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "HaTopic"
QUEUES = 4
FILE_SIZE = 1024 * 1024


def _fill(client, count: int, rand, prefix: str = "m") -> dict[tuple[int, int], bytes]:
    """Send ``count`` messages round robin; {(queue id, queue offset): body} of the acks."""
    acked = {}
    for sequence in range(count):
        body = f"{prefix}{sequence}:".encode() + rand.randbytes(rand.randint(200, 1500))
        response = send(client, TOPIC, body, sequence % QUEUES, f"{prefix}{sequence}")
        assert response.code == ResponseCode.SUCCESS, (response.code, response.remark)
        acked[(int(response.ext_fields["queueId"]),
               int(response.ext_fields["queueOffset"]))] = body
    return acked


def _caught_up(master: BrokerProcess, slave: BrokerProcess, timeout_s: float = 30) -> int:
    end = position(master.store_dir, "written_position")
    wait_for(lambda: position(slave.store_dir, "written_position") == end, timeout_s,
             f"slave written position {end}")
    return end


@pytest.mark.parametrize("role", ["ASYNC_MASTER", "SYNC_MASTER"])
def test_slave_commitlog_is_byte_identical_and_serves_every_message(tmp_path, rand, role):
    with HACluster(tmp_path, role=role) as cluster:
        master, slave = cluster.masters[0], cluster.slaves[0][0]
        with client_for(master.address) as client:
            acked = _fill(client, 2500, rand)
        end = _caught_up(master, slave)
        assert end > 2 * FILE_SIZE, "the load must roll CommitLog files"
        assert_commitlogs_identical(master.commitlog_dir, slave.commitlog_dir, end, FILE_SIZE)
        # The slave's dispatcher built the consume queues from the replicated bytes.
        wait_for(lambda: position(slave.store_dir, "dispatched_position") == end, 20,
                 "slave dispatch")
        with client_for(slave.address) as client:
            wait_topic_synced(client, TOPIC)
            for queue_id in range(QUEUES):
                bodies = read_queue(client, TOPIC, queue_id)
                expected = [body for (q, _), body in sorted(acked.items()) if q == queue_id]
                assert bodies == expected
            # Without slaveReadEnable a slave suggests the master for the next pull.
            answer = pull(client, TOPIC, 0, 0)
            assert answer.ext_fields["suggestWhichBrokerId"] == "0"
        assert "request offset 0" in master.log_text()


def test_sync_master_answers_slave_not_available_then_success(tmp_path, rand):
    namesrv = NameServerProcess(tmp_path / "namesrv").start()
    master = BrokerProcess(tmp_path / "m", namesrv.address,
                           {"brokerName": "broker-a", "brokerRole": "SYNC_MASTER"})
    slave = BrokerProcess(tmp_path / "s", namesrv.address,
                          {"brokerName": "broker-a", "brokerRole": "SLAVE", "brokerId": "1"})
    try:
        master.start()
        with client_for(master.address) as client:
            response = send(client, TOPIC, b"alone", 0, "alone")
            # Java: stored, but no slave is connected.
            assert response.code == ResponseCode.SLAVE_NOT_AVAILABLE
            # The first send created the topic (the handler's path); the topic is now in the
            # send fast path's table, which answers the same (red if it does not hold).
            assert send(client, TOPIC, b"fast", 0, "fast").code == \
                ResponseCode.SLAVE_NOT_AVAILABLE
            # A send that does not wait for the store is answered at once, as in Java.
            assert send(client, TOPIC, b"nowait", 0, "nowait", wait=False).code == \
                ResponseCode.SUCCESS
            slave.start()
            wait_for(lambda: position(master.store_dir, "ha_slaves_connected") == 1, 20,
                     "slave connected")
            assert send(client, TOPIC, b"paired", 0, "paired").code == ResponseCode.SUCCESS
            with client_for(slave.address) as slave_client:
                wait_for(lambda: len(read_queue(slave_client, TOPIC, 0)) == 4, 10, "replica")
                assert read_queue(slave_client, TOPIC, 0) == [b"alone", b"fast", b"nowait",
                                                              b"paired"]
    finally:
        for process in (slave, master, namesrv):
            process.kill()


def test_sync_master_answers_flush_slave_timeout_while_the_slave_is_stalled(tmp_path, rand):
    overrides = {"slaveTimeout": "1000"}
    with HACluster(tmp_path, role="SYNC_MASTER", overrides=overrides) as cluster:
        master, slave = cluster.masters[0], cluster.slaves[0][0]
        with client_for(master.address) as client:
            _fill(client, 20, rand)
            ha_pid = slave.supervisor_children()["pb-ha"]
            os.kill(ha_pid, signal.SIGSTOP)
            try:
                started = time.monotonic()
                response = send(client, TOPIC, b"stalled", 1, "stalled")
                waited = time.monotonic() - started
                assert response.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, response.code
                assert 0.9 <= waited < 4, waited
            finally:
                os.kill(ha_pid, signal.SIGCONT)
            # The stalled message is stored and reaches the slave once it runs again.
            assert send(client, TOPIC, b"after", 1, "after").code == ResponseCode.SUCCESS
        end = _caught_up(master, slave)
        assert_commitlogs_identical(master.commitlog_dir, slave.commitlog_dir, end, FILE_SIZE)


def _admin(client, code: int, ext: dict | None = None, body: bytes | None = None):
    return client.invoke(create_request(code, ext or {}, body), 5000)


def test_slave_refuses_what_a_java_slave_refuses(tmp_path, rand):
    with HACluster(tmp_path) as cluster:
        slave = cluster.slaves[0][0]
        with client_for(slave.address) as client:
            refused = send(client, "SlaveOnlyTopic", b"x", 0, "x")
            assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert "messages are put to the slave" in refused.remark
            topic_body = (b'{"topicName":"SlaveMade","readQueueNums":4,"writeQueueNums":4,'
                          b'"perm":6,"topicFilterType":"SINGLE_TAG","topicSysFlag":0,'
                          b'"order":false}')
            created = _admin(client, RequestCode.UPDATE_AND_CREATE_TOPIC,
                             {"topic": "SlaveMade", "defaultTopic": "TBW102",
                              "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
                              "topicFilterType": "SINGLE_TAG"}, topic_body)
            assert created.code == ResponseCode.SYSTEM_ERROR
            assert "from slave broker" in created.remark
            ended = _admin(client, RequestCode.END_TRANSACTION, {
                "producerGroup": "g", "tranStateTableOffset": "0", "commitLogOffset": "0",
                "commitOrRollback": "8", "fromTransactionCheck": "false", "msgId": "x"})
            assert ended.code == ResponseCode.SLAVE_NOT_AVAILABLE
            back = _admin(client, RequestCode.CONSUMER_SEND_MSG_BACK, {
                "offset": "0", "group": "g", "delayLevel": "0", "originMsgId": "x",
                "originTopic": TOPIC, "unitMode": "false", "maxReconsumeTimes": "16"})
            assert (back.code, back.remark) == (ResponseCode.SYSTEM_ERROR,
                                                "SERVICE_NOT_AVAILABLE")
            topics = fastjson.loads(_admin(client, RequestCode.GET_ALL_TOPIC_CONFIG).body)
            assert not {"SlaveOnlyTopic", "SlaveMade"} & set(topics["topicConfigTable"])
        assert not os.path.exists(slave.commitlog_dir) or \
            position(slave.store_dir, "written_position") == 0


def test_slave_syncs_metadata_from_the_master_and_serves_it_after_a_restart(tmp_path, rand):
    with HACluster(tmp_path) as cluster:
        master, slave = cluster.masters[0], cluster.slaves[0][0]
        with client_for(master.address) as client:
            _fill(client, 8, rand)
            group_body = b'{"groupName":"SyncedGroup","consumeEnable":true,"retryMaxTimes":7}'
            assert _admin(client, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                          group_body).code == ResponseCode.SUCCESS
            committed = _admin(client, RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": "SyncedGroup", "topic": TOPIC, "queueId": "2",
                "commitOffset": "2"})
            assert committed.code == ResponseCode.SUCCESS
            mode = _admin(client, RequestCode.SET_MESSAGE_REQUEST_MODE, {}, json.dumps(
                {"topic": TOPIC, "consumerGroup": "SyncedGroup", "mode": "POP"}).encode())
            assert mode.code == ResponseCode.SUCCESS

        def synced(client) -> bool:
            topics = fastjson.loads(_admin(client, RequestCode.GET_ALL_TOPIC_CONFIG).body)
            groups = fastjson.loads(_admin(
                client, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).body)
            offsets = fastjson.loads(_admin(client, RequestCode.GET_ALL_CONSUMER_OFFSET).body)
            modes = fastjson.loads(_admin(client, RequestCode.GET_ALL_MESSAGE_REQUEST_MODE).body)
            return (TOPIC in topics["topicConfigTable"]
                    and modes["messageRequestModeMap"].get(TOPIC, {}).get(
                        "SyncedGroup", {}).get("mode") == "POP"
                    and groups["subscriptionGroupTable"].get("SyncedGroup", {})
                    .get("retryMaxTimes") == 7
                    and offsets["offsetTable"].get(f"{TOPIC}@SyncedGroup", {}).get("2") == 2)
        with client_for(slave.address) as client:
            wait_for(lambda: synced(client), 30, "slave metadata sync", interval_s=0.5)
        assert os.path.exists(os.path.join(slave.store_dir, "config", "delayOffset.json"))
        # A restarted slave serves the synced documents at once, with its master down.
        master.kill()
        slave.stop()
        slave.start()
        with client_for(slave.address) as client:
            assert synced(client)


def _closed_within(sock: socket.socket, timeout_s: float) -> bool:
    sock.settimeout(timeout_s)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (socket.timeout, ConnectionResetError):
        return False


def test_ha_port_closes_bad_input_with_a_log_line(tmp_path, rand):
    namesrv = NameServerProcess(tmp_path / "namesrv").start()
    master = BrokerProcess(tmp_path / "m", namesrv.address, {"brokerName": "broker-a"})
    try:
        master.start()
        with client_for(master.address) as client:
            _fill(client, 10, rand)
        end = position(master.store_dir, "written_position")
        ha = ("127.0.0.1", master.port + 1)
        cases = [(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "beyond the master's max offset"),
                 (b"\x16\x03\x01\x02\x00\x01\x00\x01", "beyond the master's max offset"),
                 (struct.pack(">q", -7), "negative offset"),
                 (struct.pack(">q", end + 1), "beyond the master's max offset"),
                 # Two reads: the master takes the last whole report of each read.
                 ([struct.pack(">q", end), struct.pack(">q", end - 10)], "went back")]
        for data, line in cases:
            offset = len(master.log_text())
            with socket.create_connection(ha, 3) as sock:
                for part in data if isinstance(data, list) else [data]:
                    sock.sendall(part)
                    time.sleep(0.3)        # separate reads on the master's side
                assert _closed_within(sock, 5), data
            master.wait_log(line, 5, offset)
        # A well-behaved peer still gets the CommitLog from its offset.
        with socket.create_connection(ha, 3) as sock:
            sock.sendall(struct.pack(">q", 0))
            header = b""
            while len(header) < 12:
                header += sock.recv(12 - len(header))
            assert struct.unpack(">qi", header)[0] == 0
    finally:
        master.kill()
        namesrv.kill()
