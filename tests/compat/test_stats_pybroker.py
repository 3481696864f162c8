# Compat tests: the broker's statistics pinned through the real Java mqadmin and our admin API.
"""Goal: the figures operators read (mqadmin brokerStatus, statsAll, consumerProgress,
producerConnection) are measured, not made up: after an independent client (the official Java
client) sends N messages and consumes them, every counter shows exactly N; rates are non-zero
while a load runs; dispatchBehindBytes is the real CommitLog gap while the dispatcher is
stopped (SIGSTOP) and returns to 0 after; counters continue across a worker restart.

Method: one `pybroker standalone` per module; JavaCompat (tools/java_compat) sends and lite-pulls
with the Java 4.9.8 client; mqadmin 4.9.8 reads the figures; the Python admin API reads the
same requests while a Python producer loads the broker. Waits are bounded conditions.
"""
import asyncio
import os
import re
import signal
import time

import psutil
import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.client.admin import Admin
from pybroker.client.message import Message
from pybroker.client.producer import Producer
from tests.compat.test_java_client_pybroker import JavaClient, _create_topic, _table

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(600)]

MINUTE_SAMPLE_WAIT_S = 25     # a 10 s StatsItem sample after the last message, with slack


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with StandaloneBroker(tmp_path_factory.mktemp("pybroker")) as running:
        yield running


@pytest.fixture(scope="module")
def java(broker, tmp_path_factory):
    from tests import peers
    return JavaClient(peers.java_install("4.9.8"), tmp_path_factory.mktemp("java4"), broker)


def _admin_call(broker, call):
    async def run():
        async with Admin(broker.namesrv_addr) as admin:
            return await call(admin)
    return asyncio.run(run())


def _runtime(broker) -> dict[str, str]:
    return _admin_call(broker, lambda admin: admin.broker_runtime_info(broker.broker_addr))


def _wait(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _broker_status(java, broker) -> dict[str, str]:
    text = java.mqadmin("brokerStatus", "-b", broker.broker_addr)
    return dict(re.findall(r"^(\S+)\s*: (.*)$", text, re.MULTILINE))


def _stats_sum(broker, name: str, key: str) -> int:
    async def view(admin):
        try:
            return await admin.broker_stats(broker.broker_addr, name, key)
        except Exception:       # not sampled yet: "The stats <...> not exist"
            return None
    data = _admin_call(broker, view)
    return -1 if data is None else int(data["statsMinute"]["sum"])


def test_sent_and_consumed_counts_are_exact(java, broker):
    topic, group, per_kind = "StatsCountTopic", "stats_count_group", 25
    _create_topic(java, topic, queues=4)
    before = _runtime(broker)
    java.run("send", topic=topic, count=per_kind, run="sc")
    sent = 4 * per_kind          # sync, async, oneway and batch, per_kind each
    java.run("litepull", topic=topic, group=group, take=sent)
    put_before = int(before["msgPutTotalTodayNow"])
    get_before = int(before["msgGetTotalTodayNow"])
    _wait(lambda: _stats_sum(broker, "TOPIC_PUT_NUMS", topic) == sent
          and _stats_sum(broker, "GROUP_GET_NUMS", f"{topic}@{group}") == sent,
          MINUTE_SAMPLE_WAIT_S, "the minute windows to hold every message")
    status = _broker_status(java, broker)
    assert int(status["msgPutTotalTodayNow"]) - put_before == sent
    assert int(status["putMessageTimesTotal"]) - put_before == sent
    assert int(status["msgGetTotalTodayNow"]) - get_before == sent
    assert int(status["getMessageTransferedMsgCount"]) - get_before == sent
    assert int(status["getMessageTimesTotalFound"]) > int(before["getMessageTimesTotalFound"])
    assert status["putMessageFailedTimes"] == "0"
    assert status["dispatchBehindBytes"] == "0"
    assert int(status["commitLogMaxOffset"]) > int(before["commitLogMaxOffset"])
    assert float(status["commitLogDiskRatio"]) > 0
    assert status["putMessageDistributeTime"].startswith("[<=0ms]:")
    assert status["sendThreadPoolQueueSize"] == "0"
    assert status["sendThreadPoolQueueHeadWaitTimeMills"] == "0"
    # clusterList prints "<tps>(<send queue size>,<head wait>ms)" from those two keys.
    (cluster_row,) = _table(java.mqadmin("clusterList"), "DefaultCluster")
    assert cluster_row[5].endswith("(0,0ms)"), cluster_row
    (row,) = _table(java.mqadmin("statsAll", "-t", topic), topic)
    # topic, group, accumulation, inTPS, outTPS, inMsg24Hour, outMsg24Hour
    assert row[1] == group and row[2] == "0"
    assert float(row[3]) > 0 and float(row[4]) > 0
    assert (int(row[5]), int(row[6])) == (sent, sent)
    progress = java.mqadmin("consumerProgress", "-g", group)
    # Consume TPS is GROUP_GET_NUMS tps over the last minute: all N messages within it.
    consume_tps = float(re.search(r"Consume TPS:\s*(\S+)", progress).group(1))
    assert consume_tps > 0
    stats = _admin_call(broker, lambda admin: admin.consume_stats(broker.broker_addr, group,
                                                                  topic))
    assert stats["consumeTps"] > 0


def test_rates_under_load_and_producer_connection(java, broker):
    topic, group = "StatsLoadTopic", "stats_load_producer"
    _create_topic(java, topic, queues=4)

    async def load():
        producer = Producer(group, broker.namesrv_addr)
        await producer.start()
        figures = []
        try:
            async with Admin(broker.namesrv_addr) as admin:
                deadline = time.monotonic() + 14
                while time.monotonic() < deadline:
                    for _ in range(20):
                        await producer.send(Message(topic, b"m" * 128))
                    info = await admin.broker_runtime_info(broker.broker_addr)
                    figures.append(info["putTps"])
                await producer.instance.send_heartbeat()
                connections = await admin.producer_connection(broker.broker_addr, group)
                return figures, connections, producer.instance.client_id
        finally:
            await producer.shutdown()
    figures, connections, client_id = asyncio.run(load())
    ten_second = [float(text.split(" ")[0]) for text in figures if text.split(" ")[0]]
    assert ten_second and ten_second[-1] > 0, figures
    assert [connection["clientId"] for connection in connections] == [client_id]
    assert connections[0]["language"] == "PYTHON"


def _worker_pid(broker, name: str) -> int:
    children = psutil.Process(broker.process.pid).children(recursive=True)
    (pid,) = [child.pid for child in children if child.name() == f"pb-{name}"]
    return pid


def test_dispatch_behind_bytes_is_the_real_gap(java, broker):
    topic = "StatsDispatchTopic"
    _create_topic(java, topic, queues=2)
    _wait(lambda: _runtime(broker)["dispatchBehindBytes"] == "0", 10, "dispatch to catch up")
    start = int(_runtime(broker)["commitLogMaxOffset"])
    dispatcher = _worker_pid(broker, "dispatcher")
    os.kill(dispatcher, signal.SIGSTOP)
    try:
        java.run("send", topic=topic, count=5, run="sd")
        info = _runtime(broker)
        gap = int(info["commitLogMaxOffset"]) - start
        assert gap > 0
        assert int(info["dispatchBehindBytes"]) == gap
        assert int(_broker_status(java, broker)["dispatchBehindBytes"]) == gap
    finally:
        os.kill(dispatcher, signal.SIGCONT)
    _wait(lambda: _runtime(broker)["dispatchBehindBytes"] == "0", 20,
          "dispatchBehindBytes back to 0")


def test_counters_continue_across_a_worker_restart(java, broker):
    topic = "StatsRestartTopic"
    _create_topic(java, topic, queues=2)
    java.run("send", topic=topic, count=5, run="sr1")
    before = int(_runtime(broker)["msgPutTotalTodayNow"])
    os.kill(_worker_pid(broker, "remoting-0"), signal.SIGKILL)
    # The supervisor starts a new generation (abnormal recovery); wait for it to serve.
    _wait(lambda: _try_runtime(broker), 60, "the new generation to serve")
    java.run("send", topic=topic, count=5, run="sr2")
    after = int(_runtime(broker)["msgPutTotalTodayNow"])
    assert after - before == 20


def _try_runtime(broker):
    try:
        return _runtime(broker)
    except Exception:
        return None
