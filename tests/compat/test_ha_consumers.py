"""The official Java and Go consumers keep consuming from a pybroker slave when its master is
killed.

Method: a pybroker NameServer, master and slave (pybroker/_testbase/ha_cluster.py). A Java push
consumer (JavaCompat, the 4.9.8 client) and a Go push consumer (rmqgo, client v2.1.2) run as
subprocesses whose per-message output lines are read as they come. They consume a first batch
from the master; the test waits until the slave has the topic from its master's config (a
slave, Java's too, learns topics every 10 s and answers TOPIC_NOT_EXIST before); then both
consumers are frozen (SIGSTOP), a second batch is sent and replicated, the master is killed
with SIGKILL and the consumers are thawed: from then on only the slave has the data, and each
consumer must end with every message of both batches (by msgId), having found the slave
through the NameServer's route as the real clients do. A failure names each consumer's count,
the steps' times and the slave's, NameServer's and Java client's logs.
"""
import json
import os
import signal
import subprocess
import threading
import time
import urllib.parse

import pytest

from pybroker._testbase.ha_cluster import HACluster
from pybroker.protocol.codes import ResponseCode
from tests import peers
from tests.compat.test_java_client_pybroker import _compiled
from tests.ha_support import client_for, send, wait_for, wait_topic_synced

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(400)]

TOPIC = "HaConsumeTopic"
QUEUES = 4
BATCH = 100


class _Streamed:
    """A consumer subprocess whose stdout lines are parsed as they arrive."""

    def __init__(self, argv, parse, env=None):
        self.ids: set[str] = set()
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        stdin=subprocess.DEVNULL, text=True, env=env,
                                        start_new_session=True)
        self.parse = parse
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)
            found = self.parse(line)
            if found:
                self.ids.add(found)

    def signal(self, number: int) -> None:
        os.killpg(self.process.pid, number)

    def stop(self) -> str:
        if self.process.poll() is None:
            self.signal(signal.SIGKILL)
        self.process.wait(30)
        self.reader.join(10)
        errors = self.process.stderr.read()[-3000:]
        self.process.stdout.close()
        self.process.stderr.close()
        return errors


def _java_id(line: str) -> str | None:
    if not line.startswith("RESULT op=push "):
        return None
    fields = dict(pair.partition("=")[::2] for pair in line.split()[1:])
    return urllib.parse.unquote_plus(fields.get("msgId", "")) or None


def _go_id(line: str) -> str | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record.get("msgId") if record.get("type") == "message" else None


def _send_batch(address: str, start: int) -> set[str]:
    keys = set()
    with client_for(address) as client:
        for sequence in range(start, start + BATCH):
            key = f"ha-consume-{sequence}"
            response = send(client, TOPIC, key.encode(), sequence % QUEUES, key)
            assert response.code == ResponseCode.SUCCESS
            keys.add(key)
    return keys


class _Timeline:
    """Wall-clock marks of the test's steps, to set beside the brokers' log lines."""

    def __init__(self):
        self.marks: list[str] = []

    def mark(self, what: str) -> None:
        self.marks.append(f"{time.strftime('%H:%M:%S')}.{int(time.time() * 1000) % 1000:03d} "
                          f"{what}")


def _wait_all(consumers: dict, expected: set, timeout_s: float, timeline: _Timeline) -> bool:
    """Wait until every consumer has ``expected`` (one deadline for all); False on timeout."""
    deadline = time.monotonic() + timeout_s
    pending = dict(consumers)
    while pending:
        for name in [n for n, c in pending.items() if c.ids >= expected]:
            timeline.mark(f"{name} has both batches")
            del pending[name]
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def _tail(path, needles=("WARN", "ERROR", "Exception"), count=12) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as source:
            lines = [line for line in source if any(n in line for n in needles)]
    except FileNotFoundError:
        return f"(no {path})"
    return "".join(lines[-count:])


def _report(consumers, expected, errors, timeline, cluster, tmp_path) -> str:
    """Each consumer's outcome, the steps' times and the logs that say why."""
    parts = ["consumers did not get both batches after the master's kill -9 within 150 s:"]
    for name, consumer in consumers.items():
        missing = sorted(expected - consumer.ids)
        parts.append(f"{name}: {len(consumer.ids & expected)}/{len(expected)} messages, "
                     f"missing e.g. {missing[:5]}; stderr tail: {errors[name][-1500:]!r}")
    parts.append("timeline:\n" + "\n".join(timeline.marks))
    slave = cluster.slaves[0][0]
    parts.append("slave log (metadata sync, errors):\n" + _tail(
        slave.log_path, ("slave sync", "Update slave", "ERROR"), 16))
    parts.append("NameServer log:\n" + _tail(cluster.namesrv.log_path,
                                              ("destroyed", "remove", "WARN", "ERROR")))
    parts.append("Java client log:\n" + _tail(
        tmp_path / "java" / "home" / "logs" / "rocketmqlogs" / "rocketmq_client.log"))
    return "\n".join(parts)


def test_java_and_go_consumers_continue_on_the_slave_after_kill_9(tmp_path):
    install = peers.java_install("4.9.8")
    rmqgo = peers.rmqgo_path()
    harness = peers.java_rocketmq
    with HACluster(tmp_path / "cluster") as cluster:
        master, slave = cluster.masters[0], cluster.slaves[0][0]
        timeline = _Timeline()
        expected = _send_batch(master.address, 0)
        timeline.mark("first batch sent (the master created the topic)")
        # The slave learns the topic from its master's config (3 s after start, then every
        # 10 s, as Java's SlaveSynchronize). Killed before that, the slave answers
        # TOPIC_NOT_EXIST to every pull, as a Java slave does, until the master returns.
        with client_for(slave.address) as client:
            wait_topic_synced(client, TOPIC)
        timeline.mark("the slave knows the topic")
        java_home = harness.JavaRocketMQ(tmp_path / "java", install,
                                         namesrv_port=cluster.namesrv.port)
        java_home.write_files()
        java = _Streamed(java_home.client_argv(
            "JavaCompat", ["push", cluster.namesrv.address, f"topic={TOPIC}",
                           "group=ha_java_consumer", "instances=1", "count=0",
                           f"expect={10 * BATCH}", "timeout=300"],
            extra_classpath=[_compiled(install)]), _java_id)
        env = dict(os.environ, **{"rocketmq.client.localOffsetStoreDir": str(tmp_path / "go")})
        go = _Streamed([str(rmqgo), "consume", "--namesrv", cluster.namesrv.address,
                        "--topic", TOPIC, "--group", "ha_go_consumer", "--timeout", "300s"],
                       _go_id, env)
        consumers = {"java": java, "go": go}
        try:
            for name, consumer in consumers.items():
                wait_for(lambda c=consumer: c.ids >= expected, 120, f"{name} first batch")
                consumer.signal(signal.SIGSTOP)
                timeline.mark(f"{name} consumed the first batch, frozen")
            expected |= _send_batch(master.address, BATCH)
            end = master.published("written_position")
            wait_for(lambda: slave.published("dispatched_position") == end, 30, "replication")
            timeline.mark("second batch replicated")
            master.kill()
            timeline.mark("master killed")
            for consumer in consumers.values():
                consumer.signal(signal.SIGCONT)
            done = _wait_all(consumers, expected, 150, timeline)
        finally:
            errors = {name: consumer.stop() for name, consumer in consumers.items()}
        if not done:
            raise AssertionError(_report(consumers, expected, errors, timeline, cluster,
                                         tmp_path))
        for name, consumer in consumers.items():
            assert consumer.ids == expected, (name, len(consumer.ids), errors[name])
