# `pybroker admin`'s operations commands against pybroker and Java 4.9.8 / 5.3.3 brokers,
# compared with what the real mqadmin 4.9.8 / 5.3.3 prints against the same broker.
"""Goal: the mqadmin commands operators use that `pybroker admin` lacked (issue #30 item 4:
updateTopicPerm, topicClusterList, cloneGroupOffset, skipAccumulatedMessage, brokerConsumeStats,
consumerStatus, queryMsgByOffset, queryMsgTraceById, getNamesrvConfig, updateNamesrvConfig,
updateKvConfig, deleteKvConfig, exportMetadata, sendMsgStatus, clusterRT, haStatus,
deleteExpiredCommitLog, cleanExpiredCQ) take mqadmin's option letters, work against every
broker, print what mqadmin prints, and leave the broker in the state mqadmin leaves it in;
mqadmin itself works against pybroker for each of them (the broker and NameServer requests
they use: 305, 306, 317, 318, 319, 329, 907).

Method: one peer per parameter (a `pybroker standalone` with mqadmin 4.9.8 and 5.3.3 pointed at
it, a Java 4.9.8 NameServer and broker with its mqadmin, the same for 5.3.3); `python -m
pybroker admin ...` as a subprocess and mqadmin on the same broker, their lines parsed and
compared; the Python client to send and consume, the official Java 4.9.8 client with message
trace on (tools/java_compat/Features.java) for traces. haStatus of a real master and slave:
pybroker's HA cluster read by both tools.
"""
import asyncio
import json
import pathlib
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker._testbase.ha_cluster import HACluster
from pybroker.client.consumer import ConsumeStatus, PushConsumer
from pybroker.client.instance import ClientInstance, request
from pybroker.client.message import Message
from pybroker.client.producer import Producer
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.constants import ConsumeFromWhere
from tests import peers

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(900)]

harness = peers.java_rocketmq
ROOT = pathlib.Path(__file__).resolve().parents[2]
FEATURES = ROOT / "tools" / "java_compat" / "Features.java"
TOPIC, GROUP, SENT = "OpsTopic", "ops_group", 20


@dataclass
class Peer:
    """A running broker and NameServer, and the mqadmin versions pointed at them."""
    kind: str
    namesrv_addr: str
    broker_addr: str
    mqadmins: dict[str, object]             # version -> JavaRocketMQ harness
    work: pathlib.Path
    sent: list = field(default_factory=list)

    def admin(self, *args, expect: int = 0) -> str:
        run = subprocess.run([sys.executable, "-m", "pybroker", "admin", *map(str, args),
                              "-n", self.namesrv_addr], capture_output=True, text=True,
                             timeout=180, cwd=self.work)
        assert run.returncode == expect, (args, run.returncode, run.stdout, run.stderr)
        return run.stdout if expect == 0 else run.stderr

    def admin_json(self, *args):
        return json.loads(self.admin(*args, "--json"))

    def mqadmin(self, version: str, *args, timeout_s: float = 90) -> str:
        """stdout + stderr of mqadmin ``version`` (a failed command prints on stderr)."""
        run = self.mqadmins[version].run_class(
            harness.MQADMIN_CLASS, [*map(str, args), "-n", self.namesrv_addr],
            timeout_s=timeout_s)
        return run.stdout + run.stderr


def _mqadmin_harness(work, version: str, namesrv_port: int):
    rmq = harness.JavaRocketMQ(work / f"mqadmin-{version}", peers.java_install(version),
                               namesrv_port=namesrv_port)
    rmq.write_files()
    return rmq


@pytest.fixture(scope="module", params=["pybroker", "java-4.9.8", "java-5.3.3"])
def peer(request, tmp_path_factory):
    work = tmp_path_factory.mktemp(request.param)
    if request.param == "pybroker":
        with StandaloneBroker(work / "broker") as broker:
            mqadmins = {version: _mqadmin_harness(work, version, broker.namesrv_port)
                        for version in ("4.9.8", "5.3.3")}
            yield _prepared(Peer("pybroker", broker.namesrv_addr, broker.broker_addr,
                                 mqadmins, work))
    else:
        version = request.param.split("-", 1)[1]
        with peers.java_broker(work / "rmq", peers.java_install(version)) as rmq:
            yield _prepared(Peer(request.param, rmq.namesrv_addr, rmq.broker_addr,
                                 {version: rmq}, work))


def _prepared(peer: Peer) -> Peer:
    """The topic, SENT messages, and GROUP's offsets at the end of them (then offline)."""
    peer.admin("updateTopic", "-t", TOPIC, "-c", "DefaultCluster", "-r", 4, "-w", 4)
    _wait(lambda: TOPIC in peer.admin("topicList").split(), 40, "the topic's route")
    peer.sent = _send(peer, SENT)
    asyncio.run(_consume_all(peer, lambda consumer: asyncio.sleep(0)))
    return peer


def _wait(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _send(peer: Peer, count: int, topic: str = TOPIC) -> list:
    async def run():
        async with Producer("ops_producer", peer.namesrv_addr) as producer:
            return [await producer.send(Message(topic, f"body-{i}", keys=f"ops-key-{i}",
                                                tags="TagA")) for i in range(count)]
    return asyncio.run(run())


async def _consume_all(peer: Peer, while_online):
    """Consume TOPIC with GROUP until its lag is 0, run ``while_online(consumer)``, persist."""
    received = []

    async def listener(messages, context):
        received.extend(messages)
        return ConsumeStatus.CONSUME_SUCCESS
    consumer = PushConsumer(GROUP, peer.namesrv_addr,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(TOPIC, "*")
    consumer.register_message_listener(listener)
    await consumer.start()
    try:
        deadline = time.monotonic() + 60
        while True:
            await consumer.persist_offsets()
            progress = await asyncio.to_thread(peer.admin_json, "consumerProgress", "-g", GROUP,
                                               "-t", TOPIC)
            if progress["diffTotal"] == 0 and progress["queues"]:
                break
            assert time.monotonic() < deadline, "messages not consumed"
            await asyncio.sleep(0.5)
        await while_online(consumer)
    finally:
        await consumer.shutdown()


def _lines(text: str, first: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.split()[:1] == [first]]


def _progress(peer: Peer, group: str) -> dict:
    return {row["QID"]: (row["Broker Offset"], row["Consumer Offset"])
            for row in peer.admin_json("consumerProgress", "-g", group, "-t", TOPIC)["queues"]}


# --- topics ---------------------------------------------------------------------------------
def _topic_perm(peer: Peer) -> int:
    return peer.admin_json("topicRoute", "-t", TOPIC)["queueDatas"][0]["perm"]


def test_topic_cluster_list_and_perm(peer):
    for version in peer.mqadmins:
        ours = peer.admin("topicClusterList", "-t", TOPIC).split()
        assert ours == peer.mqadmin(version, "topicClusterList", "-t", TOPIC).split() \
            == ["DefaultCluster"]
    address = peer.broker_addr
    for version in peer.mqadmins:
        out = peer.admin("updateTopicPerm", "-t", TOPIC, "-p", 4, "-b", address)
        assert out.splitlines() == [
            f"update topic perm from 6 to 4 in {address} success.",
            f"TopicConfig [topicName={TOPIC}, readQueueNums=4, writeQueueNums=4, perm=R--, "
            "topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false]."]
        _wait(lambda: _topic_perm(peer) == 4, 40, "perm 4 in the route")
        same = "new perm equals to the old one!"
        assert peer.admin("updateTopicPerm", "-t", TOPIC, "-p", 4, "-b", address).strip() == same
        assert same in peer.mqadmin(version, "updateTopicPerm", "-t", TOPIC, "-p", 4, "-b",
                                    address)
        theirs = peer.mqadmin(version, "updateTopicPerm", "-t", TOPIC, "-p", 6, "-b", address)
        assert f"update topic perm from 4 to 6 in {address} success." in theirs
        (config,) = [line for line in theirs.splitlines() if line.startswith("TopicConfig")]
        # 5.x's TopicConfig adds its attributes; the rest is 4.9.8's line.
        assert config.replace(", attributes={}", "") == out.splitlines()[1].replace("R--", "RW-")
        _wait(lambda: _topic_perm(peer) == 6, 40, "perm 6 in the route")
    out = peer.admin("updateTopicPerm", "-t", TOPIC, "-p", 6, "-c", "DefaultCluster")
    assert out.strip() == f"update topic perm from 6 to 6 in {address} success."


# --- offsets --------------------------------------------------------------------------------
def test_clone_and_skip_offsets(peer):
    version = next(iter(peer.mqadmins))
    for group in ("ops_clone_py", "ops_clone_java"):
        # Java 5.x commits offsets only for a group it knows (SUBSCRIPTION_GROUP_NOT_EXIST).
        peer.admin("updateSubGroup", "-g", group, "-c", "DefaultCluster")
    ours = peer.admin("cloneGroupOffset", "-s", GROUP, "-d", "ops_clone_py", "-t", TOPIC)
    theirs = peer.mqadmin(version, "cloneGroupOffset", "-s", GROUP, "-d", "ops_clone_java",
                          "-t", TOPIC)
    assert ours.strip() == f"clone group offset success. srcGroup[{GROUP}], " \
                           f"destGroup=[ops_clone_py], topic[{TOPIC}]"
    assert ours.strip().replace("_py", "_java") in theirs
    source = _progress(peer, GROUP)
    assert _progress(peer, "ops_clone_py") == _progress(peer, "ops_clone_java") == source
    assert sum(broker for broker, _ in source.values()) == SENT
    _send(peer, 8)
    rows = {}
    for group, run in (("ops_clone_py", lambda: peer.admin("skipAccumulatedMessage", "-g",
                                                           "ops_clone_py", "-t", TOPIC)),
                       ("ops_clone_java", lambda: peer.mqadmin(
                           version, "skipAccumulatedMessage", "-g", "ops_clone_java", "-t",
                           TOPIC))):
        # Both groups are offline: a 4.x broker answers CONSUMER_NOT_ONLINE and both tools
        # commit the offsets themselves (RollbackStats table); a 5.x broker resets them.
        rows[group] = sorted(tuple(row) for row in _lines(run(), "broker-a"))
    assert rows["ops_clone_py"] == rows["ops_clone_java"] and len(rows["ops_clone_py"]) == 4
    ends = {qid: broker for qid, (broker, _) in _progress(peer, "ops_clone_py").items()}
    assert sum(ends.values()) == SENT + 8
    assert {int(row[1]): int(row[-1]) for row in rows["ops_clone_py"]} == ends
    assert _progress(peer, "ops_clone_java") == {qid: (end, end) for qid, end in ends.items()}
    assert _progress(peer, "ops_clone_py") == _progress(peer, "ops_clone_java")
    _broker_consume_stats(peer)


def _broker_consume_stats(peer: Peer) -> None:
    """Every group's lag on the broker: GROUP lags by the 8 messages sent after it stopped."""
    ours = peer.admin_json("brokerConsumeStats", "-b", peer.broker_addr)
    rows = {(row["Topic"], row["Group"], row["QID"], row["Broker Offset"],
             row["Consumer Offset"]) for row in ours["queues"]}
    assert {row[1] for row in rows} >= {GROUP} and ours["totalDiff"] >= 8
    for version in peer.mqadmins:
        text = peer.mqadmin(version, "brokerConsumeStats", "-b", peer.broker_addr)
        theirs = {(row[0], row[1], int(row[3]), int(row[4]), int(row[5]))
                  for row in _lines(text, TOPIC)}
        assert {row for row in rows if row[0] == TOPIC} == theirs, text
        assert f"Diff Total: {ours['totalDiff']}" in text
    table = peer.admin("brokerConsumeStats", "-b", peer.broker_addr)
    assert f"Diff Total: {ours['totalDiff']}" in table


# --- messages -------------------------------------------------------------------------------
def _mqadmin_fields(text: str) -> dict:
    return dict(re.findall(r"^([A-Za-z][A-Za-z ]*?):\s+(.*?)\s*$", text, re.MULTILINE))


def test_query_msg_by_offset(peer):
    target = peer.sent[7]
    queue = target.message_queue
    ours = peer.admin_json("queryMsgByOffset", "-t", TOPIC, "-b", queue.broker_name, "-i",
                           queue.queue_id, "-o", target.queue_offset)
    assert (ours["Body"], ours["Keys"], ours["Queue Offset"]) == \
        ("body-7", "ops-key-7", target.queue_offset)
    for version in peer.mqadmins:
        theirs = _mqadmin_fields(peer.mqadmin(version, "queryMsgByOffset", "-t", TOPIC, "-b",
                                              queue.broker_name, "-i", queue.queue_id, "-o",
                                              target.queue_offset))
        assert (theirs["OffsetID"], theirs["Topic"], theirs["Keys"], theirs["Queue ID"],
                theirs["Queue Offset"], theirs["CommitLog Offset"]) == \
            (ours["Offset Message ID"], TOPIC, "[ops-key-7]", str(queue.queue_id),
             str(target.queue_offset), str(ours["CommitLog Offset"])), theirs
    error = peer.admin("queryMsgByOffset", "-t", TOPIC, "-b", queue.broker_name, "-i",
                       queue.queue_id, "-o", 10_000, expect=1)
    assert "no message at offset 10000" in error


def test_query_msg_trace_by_id(peer):
    install = peers.java_install("4.9.8")
    client = peer.mqadmins.get("4.9.8") or _mqadmin_harness(peer.work, "4.9.8",
                                                            int(peer.namesrv_addr.split(":")[1]))
    topic = "OpsTracedTopic"
    peer.admin("updateTopic", "-t", topic, "-c", "DefaultCluster", "-r", 2, "-w", 2)
    run = client.run_class("Features", [peer.namesrv_addr, "op=trace", f"topic={topic}",
                                        "run=opstrace"], timeout_s=180,
                           extra_classpath=[peers.compiled_java(install, FEATURES)])
    assert run.returncode == 0 and "RESULT op=trace pub=5" in run.stdout, run.stdout[-3000:]
    msg_id = peer.admin_json("printMsg", "-t", topic)[0]["Message ID"]
    views = peer.admin_json("queryMsgTraceById", "-i", msg_id)
    assert {(view["msg_type"], view["group"], view["status"]) for view in views} >= {
        ("Pub", "opstrace_traced_producer", "success"),
        ("SubAfter", "opstrace_traced_consumer", "success")}, views
    table = peer.admin("queryMsgTraceById", "-i", msg_id)
    for version in peer.mqadmins:
        text = peer.mqadmin(version, "queryMsgTraceById", "-i", msg_id)
        for kind in ("Pub", "Sub"):
            assert sorted(row[:3] + row[5:] for row in _lines(text, kind)) == \
                sorted(row[:3] + row[5:] for row in _lines(table, kind)), (text, table)


def test_send_probes(peer):
    result = re.compile(r"^rt=\d+ms, SendResult=SendResult \[sendStatus=SEND_OK, msgId=\w+, "
                        r"offsetMsgId=\w+, messageQueue=MessageQueue \[topic=broker-a, "
                        r"brokerName=broker-a, queueId=\d+\], queueOffset=\d+")
    ours = peer.admin("sendMsgStatus", "-b", "broker-a", "-c", 3).splitlines()
    assert len(ours) == 3 and all(result.match(line) for line in ours), ours
    for version in peer.mqadmins:
        theirs = [line for line in peer.mqadmin(version, "sendMsgStatus", "-b", "broker-a",
                                                "-c", 3).splitlines() if line.startswith("rt=")]
        assert len(theirs) == 3 and all(result.match(line) for line in theirs), theirs
    rows = _lines(peer.admin("clusterRT", "-a", 4, "-i", 1, "--rounds", 2), "DefaultCluster")
    assert [(row[1], row[3], row[4]) for row in rows] == [("broker-a", "4", "0")] * 2, rows
    for version in peer.mqadmins:
        # mqadmin repeats every -i seconds until stopped: the first round, then the kill.
        text = peer.mqadmin(version, "clusterRT", "-a", 4, "-i", 600, timeout_s=40)
        assert [(row[1], row[3], row[4]) for row in _lines(text, "DefaultCluster")] == \
            [("broker-a", "4", "0")], text
    tlog = peer.admin("clusterRT", "-a", 2, "--rounds", 1, "-p", "true", "-m", "room1")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\|room1\|DefaultCluster\|broker-a\|\d+\n",
                        tlog), tlog


# --- consumers ------------------------------------------------------------------------------
def test_consumer_status(peer):
    async def check(consumer):
        client_id = consumer.instance.client_id
        table = await asyncio.to_thread(peer.admin, "consumerStatus", "-g", GROUP)
        (row,) = _lines(table, "1")
        assert row[1] == client_id and "Same subscription in the same group" in table
        info = await asyncio.to_thread(peer.admin, "consumerStatus", "-g", GROUP, "-i",
                                       client_id)
        for version in peer.mqadmins:
            theirs = await asyncio.to_thread(peer.mqadmin, version, "consumerStatus", "-g",
                                             GROUP, "-i", client_id)
            for section in ("#Consumer Subscription#", "#Consumer Offset#"):
                assert _section(theirs, section) == _section(info, section), (theirs, info)
            listing = await asyncio.to_thread(peer.mqadmin, version, "consumerStatus", "-g",
                                              GROUP)
            assert [row[1] for row in _lines(listing, "1")] == [client_id], listing
    asyncio.run(_consume_all(peer, check))


def _section(text: str, title: str) -> list[list[str]]:
    """The rows of one ConsumerRunningInfo section, split on blanks."""
    lines = text.splitlines()
    start = lines.index(title) + 1
    rows = []
    for line in lines[start:]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


# --- name servers ---------------------------------------------------------------------------
def _namesrv_config(text: str) -> dict:
    return dict(re.findall(r"^(\S+)\s*=  (.*)$", text, re.MULTILINE))


def test_namesrv_config_and_kv(peer):
    ours = peer.admin_json("getNamesrvConfig")[peer.namesrv_addr]
    for version in peer.mqadmins:
        assert _namesrv_config(peer.mqadmin(version, "getNamesrvConfig")) == ours
    out = peer.admin("updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "true")
    assert out == f"update name server config success![{peer.namesrv_addr}]\n" \
                  "orderMessageEnable : true\n"
    assert peer.admin_json("getNamesrvConfig")[peer.namesrv_addr]["orderMessageEnable"] == \
        "true"
    version = next(iter(peer.mqadmins))
    theirs = peer.mqadmin(version, "updateNamesrvConfig", "-k", "orderMessageEnable", "-v",
                          "false")
    assert out.replace("true", "false") in theirs
    assert _namesrv_config(peer.mqadmin(version, "getNamesrvConfig"))[
        "orderMessageEnable"] == "false"
    if peer.kind == "pybroker":
        error = peer.admin("updateNamesrvConfig", "-k", "kvConfigPath", "-v", "/tmp/x",
                           expect=1)
        assert "NO_PERMISSION (16)" in error and "kvConfigPath cannot be changed" in error
        theirs = peer.mqadmin(version, "updateNamesrvConfig", "-k", "configStorePath", "-v",
                              "/tmp/x")
        assert "CODE: 16" in theirs and "configStorePath" in theirs, theirs
    assert peer.admin("updateKvConfig", "-s", "OPS_NS", "-k", "ops-key", "-v", "v1") == \
        "create or update kv config to namespace success.\n"
    assert _kv(peer, "OPS_NS", "ops-key") == "v1"
    assert "delete kv config from namespace success." in peer.mqadmin(
        version, "deleteKvConfig", "-s", "OPS_NS", "-k", "ops-key")
    assert _kv(peer, "OPS_NS", "ops-key") is None
    assert "create or update kv config to namespace success." in peer.mqadmin(
        version, "updateKvConfig", "-s", "OPS_NS", "-k", "ops-key", "-v", "v2")
    assert _kv(peer, "OPS_NS", "ops-key") == "v2"
    assert peer.admin("deleteKvConfig", "-s", "OPS_NS", "-k", "ops-key") == \
        "delete kv config from namespace success.\n"
    assert _kv(peer, "OPS_NS", "ops-key") is None


def _kv(peer: Peer, namespace: str, key: str) -> str | None:
    async def run():
        instance = ClientInstance(peer.namesrv_addr)
        await instance.start()
        try:
            response = await instance.invoke_namesrv(request(
                RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key}))
        finally:
            await instance.shutdown()
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        assert response.code == ResponseCode.SUCCESS, response
        return response.ext_fields["value"]
    return asyncio.run(run())


# --- metadata export ------------------------------------------------------------------------
def test_export_metadata(peer):
    for version in peer.mqadmins:
        ours_dir, their_dir = peer.work / f"export-py-{version}", peer.work / f"export-{version}"
        out = peer.admin("exportMetadata", "-c", "DefaultCluster", "-f", ours_dir)
        assert out == f"export {ours_dir}/metadata.json success\n"
        text = peer.mqadmin(version, "exportMetadata", "-c", "DefaultCluster", "-f", their_dir)
        assert f"export {their_dir}/metadata.json success" in text, text
        ours = json.loads((ours_dir / "metadata.json").read_text())
        theirs = json.loads((their_dir / "metadata.json").read_text())
        assert set(ours["topicConfigTable"]) == set(theirs["topicConfigTable"])
        assert TOPIC in ours["topicConfigTable"] and not any(
            name.startswith("%RETRY%") for name in ours["topicConfigTable"])
        for name, config in ours["topicConfigTable"].items():
            assert {key: config[key] for key in ("readQueueNums", "writeQueueNums", "perm")} == \
                {key: theirs["topicConfigTable"][name][key]
                 for key in ("readQueueNums", "writeQueueNums", "perm")}, name
        assert set(ours["subscriptionGroupTable"]) == set(theirs["subscriptionGroupTable"])
        assert GROUP in ours["subscriptionGroupTable"]
    topics_only = peer.admin("exportMetadata", "-b", peer.broker_addr, "-t", "-s", "-f",
                             peer.work / "export-b")
    assert "topic.json success" in topics_only
    document = json.loads((peer.work / "export-b" / "topic.json").read_text())
    assert f"%RETRY%{GROUP}" in document["topicConfigTable"]


# --- replication and cleanup ----------------------------------------------------------------
def test_ha_status_single_master(peer):
    if peer.kind == "java-4.9.8":
        error = peer.admin("haStatus", "-b", peer.broker_addr, expect=1)
        assert "REQUEST_CODE_NOT_SUPPORTED" in error     # a 5.x request
        return
    ours = peer.admin("haStatus", "-b", peer.broker_addr)
    theirs = peer.mqadmin("5.3.3", "haStatus", "-b", peer.broker_addr)
    for key in ("#MasterAddr", "#SlaveNum", "#InSyncSlaveNum", "#MasterCommitLogMaxOffset"):
        assert _lines(ours, key) == _lines(theirs, key), (ours, theirs)


def test_cleanup_requests(peer):
    for command in ("deleteExpiredCommitLog", "cleanExpiredCQ"):
        assert peer.admin(command, "-b", peer.broker_addr) == "success\n"
        assert peer.admin(command, "-c", "DefaultCluster") == "success\n"
        for version in peer.mqadmins:
            assert "success" in peer.mqadmin(version, command, "-b", peer.broker_addr)


def test_ha_status_master_and_slave(tmp_path):
    """A pybroker master with its slave: pybroker admin and mqadmin 5.3.3 read the same
    replication figures from both."""
    with HACluster(tmp_path / "ha") as cluster:
        master, (slave,) = cluster.masters[0], cluster.slaves[0]
        mqadmin = _mqadmin_harness(tmp_path, "5.3.3", int(cluster.namesrv.address.split(":")[1]))
        peer = Peer("pybroker-ha", cluster.namesrv.address, master.address,
                    {"5.3.3": mqadmin}, tmp_path)
        _send(peer, 10, topic="OpsHaTopic")
        _wait(lambda: _slave_line(peer.admin_json("haStatus", "-b", master.address))[1] == 0,
              30, "the slave to catch up")
        document = peer.admin_json("haStatus", "-b", master.address)[master.address]
        (connection,) = document["haConnectionInfo"]
        assert connection["slaveAckOffset"] == document["masterCommitLogMaxOffset"] > 0
        theirs = peer.mqadmin("5.3.3", "haStatus", "-b", master.address)
        ours = peer.admin("haStatus", "-b", master.address)
        for key in ("#MasterCommitLogMaxOffset", "#SlaveNum", "#InSyncSlaveNum"):
            assert _lines(ours, key) == _lines(theirs, key) and _lines(ours, key)
        (row,) = [line.split() for line in theirs.splitlines() if line.startswith("127.")]
        assert row[1:3] == [str(connection["slaveAckOffset"]), "0"] and row[4] == "OK", theirs
        slave_view = peer.admin_json("haStatus", "-b", slave.address)[slave.address]
        assert not slave_view["master"]
        client = slave_view["haClientRuntimeInfo"]
        assert client["masterAddr"] == master.ha_address
        assert client["maxOffset"] == document["masterCommitLogMaxOffset"]
        theirs = peer.mqadmin("5.3.3", "haStatus", "-b", slave.address)
        assert f"#MasterAddr\t{master.ha_address}" in theirs
        assert f"#CommitLogMaxOffset\t{client['maxOffset']}" in theirs


def _slave_line(document: dict) -> tuple[int, int]:
    (info,) = document.values()
    connections = info["haConnectionInfo"]
    return (len(connections), connections[0]["diff"] if connections else -1)
