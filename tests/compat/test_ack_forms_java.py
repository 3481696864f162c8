"""The Java 4.9.8 broker answers every send form FLUSH_SLAVE_TIMEOUT when its only slave is
frozen under SYNC_MASTER - the answer tests/broker/test_ack_when_durable.py requires of
pybroker.

Method: a pybroker NameServer, a Java 4.9.8 master (SYNC_MASTER, slaveTimeout 600 ms) and
a Java 4.9.8 slave; the same table (tests/send_forms.py: codes 10, 310 and 320 with one and
three messages, JSON and ROCKETMQ headers) goes through the same scenario: each form as the
first send after SIGSTOP of the slave JVM, then SIGCONT and the form again. Every form must be
answered FLUSH_SLAVE_TIMEOUT (12) no sooner than slaveTimeout, then SUCCESS. (Java's
SYNC_FLUSH flusher is a thread of the broker JVM: it cannot be frozen from outside, so the
SYNC_FLUSH half is compared with Java's source only: FLUSH_DISK_TIMEOUT, 10.)
"""
import pytest

from pybroker._testbase.ha_cluster import NameServerProcess
from pybroker.protocol.codes import ResponseCode
from tests import peers
from tests.broker.test_ack_when_durable import LATE_S, TIMEOUT_MS
from tests.ha_support import client_for, send, wait_for
from tests.send_forms import ALL_FORMS, answers_while_stopped, freeze, thaw

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(400)]

harness = peers.java_rocketmq
TOPIC = "DurableFormsJava"
# The path a form takes is pybroker's distinction; Java gets each request shape once.
FORMS = [form for form in ALL_FORMS if form.path == "fast"]


def _java_broker(work_dir, install, namesrv: NameServerProcess, role: str, broker_id: int):
    overrides = {"brokerName": "broker-a", "brokerId": str(broker_id), "brokerRole": role,
                 "brokerIP2": "127.0.0.1", "haSendHeartbeatInterval": "1000",
                 "haHousekeepingInterval": "5000", "slaveTimeout": str(TIMEOUT_MS),
                 "flushDiskType": "ASYNC_FLUSH", "waitTimeMillsInSendQueue": "1000"}
    return harness.JavaRocketMQ(work_dir, install, namesrv_port=namesrv.port,
                                broker_port=harness.free_port(offsets=(-2, 0, 1)),
                                broker_overrides=overrides, own_namesrv=False)


def test_java_sync_master_answers_every_form_flush_slave_timeout(tmp_path):
    install = peers.java_install("4.9.8")
    namesrv = NameServerProcess(tmp_path / "namesrv").start()
    master = _java_broker(tmp_path / "master", install, namesrv, "SYNC_MASTER", 0)
    slave = _java_broker(tmp_path / "slave", install, namesrv, "SLAVE", 1)
    try:
        master.start(detach=True)
        slave.start(detach=True)
        with client_for(master.broker_addr) as client:
            # SUCCESS once the slave has connected (SLAVE_NOT_AVAILABLE before).
            wait_for(lambda: send(client, TOPIC, b"warm-up", 0, "warm-up").code
                     == ResponseCode.SUCCESS, 90, "the Java slave's first acknowledgement",
                     interval_s=0.5)
        jvm = [slave.processes["broker"].pid]
        answers = answers_while_stopped(master.broker_addr, TOPIC, FORMS, lambda: freeze(jvm),
                                        lambda: thaw(jvm), lambda: True, TIMEOUT_MS)
        found = [(answer.form.name, answer.code, round(answer.waited_s, 2), answer.code_after)
                 for answer in answers]
        assert all(code == ResponseCode.FLUSH_SLAVE_TIMEOUT and after == ResponseCode.SUCCESS
                   and TIMEOUT_MS / 1000 <= waited < TIMEOUT_MS / 1000 + LATE_S
                   for _, code, waited, after in found), found
    finally:
        for java in (slave, master):
            java.stop()
        namesrv.kill()
