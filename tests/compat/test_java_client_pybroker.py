# Compat tests: the official Java RocketMQ client (4.9.8, 5.3.3) and mqadmin against pybroker.
"""Goal: prove that the official Java client and mqadmin work against a real pybroker, with exact
counts: every message sent is received once, nothing is lost, nothing is duplicated.

Method: start one `pybroker standalone` per module (free 127.0.0.1 ports, store in a temp dir),
compile tools/java_compat/JavaCompat.java against the harness's client jars (cached by source
digest), and run it as a real client JVM: sync/async/oneway/batch sends, a pull dump, push
consumers (clustering with two instances, broadcasting), a lite pull consumer that commits and
resumes, orderly consumers holding broker queue locks, and look-ups by key and id. Its
"RESULT op=... k=v" lines are compared field by field with what was sent. mqadmin runs against
pybroker's NameServer and each command's output is checked for the expected values. Missing
java/javac or jars skip with the reason (fail under PYBROKER_REQUIRE_PEERS=1).
"""
import hashlib
import pathlib
import re
import urllib.parse
from collections import Counter, defaultdict

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from tests import peers

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tools" / "java_compat" / "JavaCompat.java"
KINDS = ("sync", "async", "oneway", "batch")
UNICODE_VALUE = "π≈3.14"


harness = peers.java_rocketmq
_install = peers.java_install


def _compiled(install) -> pathlib.Path:
    """JavaCompat classes for this client version, compiled once per source digest."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    out_dir = install.cache_dir / "java_compat" / digest
    if not (out_dir / "JavaCompat.class").is_file():
        staging = out_dir.with_name(digest + ".partial")
        peers.compile_java(install, [SOURCE], staging)
        staging.rename(out_dir)
    return out_dir


class JavaClient:
    """Runs JavaCompat modes and mqadmin with one client version against pybroker."""

    def __init__(self, install, work_dir, broker: StandaloneBroker):
        self.classes = _compiled(install)
        self.rmq = harness.JavaRocketMQ(work_dir, install, namesrv_port=broker.namesrv_port)
        self.rmq.write_files()
        self.version = install.version

    def run(self, mode: str, expect_ok: bool = True, timeout_s: float = 150,
            system_properties=None, **options) -> list[dict]:
        args = [mode, self.rmq.namesrv_addr, *(f"{key}={value}" for key, value in
                                               options.items())]
        run = self.rmq.run_class("JavaCompat", args, timeout_s=timeout_s,
                                 extra_classpath=[self.classes],
                                 system_properties=system_properties)
        results = [_parse_result(line) for line in run.stdout.splitlines()
                   if line.startswith("RESULT ")]
        if expect_ok:
            assert run.returncode == 0, (f"JavaCompat {args} exit {run.returncode}:\n"
                                         f"{run.stdout[-4000:]}\n{run.stderr[-3000:]}")
        return results

    def mqadmin(self, *args, markers=("Exception", "not supported", "CODE:")) -> str:
        """mqadmin's stdout; fails on a non-zero exit or an error printed to either stream."""
        args = [*map(str, args), "-n", self.rmq.namesrv_addr]
        run = self.rmq.run_class(harness.MQADMIN_CLASS, args, timeout_s=90)
        # mqadmin prints a broker's error (or a stack trace) and often still exits 0.
        text = run.stdout + run.stderr
        assert run.returncode == 0 and not any(
            marker in text for marker in markers), (
            f"mqadmin {args} exit {run.returncode}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
        return run.stdout


def _parse_result(line: str) -> dict:
    fields = {}
    for pair in line.split()[1:]:
        key, _, value = pair.partition("=")
        fields[key] = urllib.parse.unquote_plus(value)
    return fields


def _ops(results, op: str) -> list[dict]:
    return [result for result in results if result["op"] == op]


def _queues(text: str) -> set[int]:
    return {int(part) for part in re.findall(r"\d+", text)}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with StandaloneBroker(tmp_path_factory.mktemp("pybroker")) as running:
        yield running


@pytest.fixture(scope="module")
def java(broker, tmp_path_factory):
    return JavaClient(_install("4.9.8"), tmp_path_factory.mktemp("java4"), broker)


@pytest.fixture(scope="module")
def java5(broker, tmp_path_factory):
    return JavaClient(_install("5.3.3"), tmp_path_factory.mktemp("java5"), broker)


def _create_topic(java, topic: str, queues: int = 4) -> str:
    output = java.mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic,
                          "-r", queues, "-w", queues)
    return output


def _expected_bodies(run: str, count: int) -> set[str]:
    return {f"{run}-{kind}-{index}" for kind in KINDS for index in range(count)}


def _check_message_fields(message: dict, broker) -> None:
    body = message["body"]
    kind, seq = message["kind"], message["seq"]
    assert body.endswith(f"-{kind}-{seq}"), message
    assert message["tags"] == f"Tag{kind}", message
    assert message["keys"] == f"key-{body} alt-{body}", message
    assert message["unicode"] == UNICODE_VALUE, message
    assert message["reconsume"] == "0", message
    assert message["storeHost"] == "/" + broker.broker_addr, message


def _sent_records(results) -> dict[str, dict]:
    """body -> send result, for sync/async (one each) and batch (ids split per message)."""
    sent = {}
    for op in ("sync", "async"):
        for result in _ops(results, op):
            assert result["status"] == "SEND_OK", result
            sent[result["body"]] = result
    (batch,) = _ops(results, "batch")
    assert batch["status"] == "SEND_OK", batch
    ids, offset_ids = batch["msgId"].split(","), batch["offsetMsgId"].split(",")
    run = next(iter(sent)).split("-")[0]
    for index, (msg_id, offset_id) in enumerate(zip(ids, offset_ids, strict=True)):
        sent[f"{run}-batch-{index}"] = {"msgId": msg_id, "offsetMsgId": offset_id,
                                        "queueId": batch["queueId"],
                                        "queueOffset": str(int(batch["queueOffset"]) + index)}
    return sent


def test_send_kinds_round_trip_with_keys_tags_properties(java, broker):
    topic, count = "JavaSendKinds", 6
    _create_topic(java, topic)
    sent = _sent_records(java.run("send", topic=topic, count=count, run="sk"))
    assert len(sent) == 3 * count
    dumped = java.run("dump", topic=topic, group="java_dump_sk")
    messages = _ops(dumped, "dump")
    bodies = Counter(message["body"] for message in messages)
    assert set(bodies) == _expected_bodies("sk", count)
    assert all(seen == 1 for seen in bodies.values()), bodies.most_common(3)
    for message in messages:
        _check_message_fields(message, broker)
        assert message["topic"] == topic
        expected = sent.get(message["body"])
        if expected is not None:        # oneway sends report no ids
            for field in ("msgId", "offsetMsgId", "queueId", "queueOffset"):
                assert message[field] == expected[field], (field, message, expected)
    # Queue offsets are dense from 0 and the pull's max offset counts them.
    per_queue = defaultdict(list)
    for message in messages:
        per_queue[int(message["queueId"])].append(int(message["queueOffset"]))
    for queue in _ops(dumped, "dump-queue"):
        offsets = per_queue[int(queue["queueId"])]
        assert offsets == list(range(len(offsets)))
        assert int(queue["maxOffset"]) == len(offsets)
    assert sum(len(offsets) for offsets in per_queue.values()) == 4 * count


def _received(results, op: str) -> dict[str, list[dict]]:
    by_instance = defaultdict(list)
    for result in _ops(results, op):
        by_instance[result["instance"]].append(result)
    return by_instance


def test_push_clustering_two_instances_share_the_queues(java, broker):
    topic, group, count = "JavaPushCluster", "java_push_cluster", 40
    _create_topic(java, topic)
    results = java.run("push", topic=topic, group=group, count=count, instances=2, send=1,
                       model="CLUSTERING", timeout=90)
    assigned = {result["instance"]: _queues(result["queues"])
                for result in _ops(results, "assigned")}
    assert set(assigned) == {"c0", "c1"}
    assert assigned["c0"] and assigned["c1"] and not assigned["c0"] & assigned["c1"]
    assert assigned["c0"] | assigned["c1"] == {0, 1, 2, 3}
    sent = {result["body"]: result for result in _ops(results, "sent")}
    assert len(sent) == count
    received = _received(results, "push")
    shares = {instance: [m["body"] for m in messages] for instance, messages in received.items()}
    assert set(shares) == {"c0", "c1"}, "each instance gets a non-empty share"
    assert not set(shares["c0"]) & set(shares["c1"])
    all_bodies = shares["c0"] + shares["c1"]
    assert len(all_bodies) == count and set(all_bodies) == set(sent)
    for instance, messages in received.items():
        for message in messages:
            assert int(message["queueId"]) in assigned[instance], message
            assert message["msgId"] == sent[message["body"]]["msgId"]


def test_push_broadcasting_every_instance_gets_everything(java, broker):
    topic, group, count = "JavaPushBroadcast", "java_push_broadcast", 20
    _create_topic(java, topic)
    results = java.run("push", topic=topic, group=group, count=count, instances=2, send=1,
                       model="BROADCASTING", timeout=90)
    sent = {result["body"] for result in _ops(results, "sent")}
    assert len(sent) == count
    received = _received(results, "push")
    assert set(received) == {"c0", "c1"}
    for instance, messages in received.items():
        bodies = [message["body"] for message in messages]
        assert len(bodies) == count and set(bodies) == sent, instance


@pytest.mark.parametrize("client", ["java", "java5"])
def test_lite_pull_commits_and_resumes_after_restart(java, broker, request, client):
    # The 4.9.8 client pulls with PULL_MESSAGE (11), the 5.3.3 client with LITE_PULL_MESSAGE
    # (361: MQClientAPIImpl.pullMessage picks it when the pull carries the lite-pull flag).
    puller = request.getfixturevalue(client)
    topic, group, count = f"JavaLitePull_{client}", f"java_lite_pull_{client}", 6
    _create_topic(java, topic)
    java.run("send", topic=topic, count=count, run="lp")
    everything = _expected_bodies("lp", count)
    first = puller.run("litepull", topic=topic, group=group, take=9, batch=3)
    first_bodies = [message["body"] for message in _ops(first, "poll")]
    assert 9 <= len(first_bodies) < len(everything)
    committed = {int(r["queueId"]): int(r["offset"]) for r in _ops(first, "committed")}
    # The committed offset of each queue is one past the last message polled from it.
    polled_per_queue = Counter(int(message["queueId"]) for message in _ops(first, "poll"))
    assert committed == {queue: polled_per_queue.get(queue, 0) for queue in range(4)}
    progress = java.mqadmin("consumerProgress", "-g", group)
    rows = {int(row[2]): (int(row[3]), int(row[4])) for row in
            (line.split() for line in progress.splitlines()) if row and row[0] == topic}
    assert {queue: consumer for queue, (_, consumer) in rows.items()} == committed
    # A new consumer in the same group resumes exactly where the first one committed.
    rest = len(everything) - len(first_bodies)
    second = puller.run("litepull", topic=topic, group=group, take=rest, batch=3, timeout=40)
    second_messages = _ops(second, "poll")
    second_bodies = [message["body"] for message in second_messages]
    assert not set(first_bodies) & set(second_bodies)
    assert sorted(first_bodies + second_bodies) == sorted(everything)
    for queue in range(4):
        offsets = sorted(int(m["queueOffset"]) for m in second_messages
                         if int(m["queueId"]) == queue)
        assert offsets == list(range(committed[queue], committed[queue] + len(offsets)))
    final = {int(r["queueId"]): int(r["offset"]) for r in _ops(second, "committed")}
    assert final == {queue: broker_max for queue, (broker_max, _) in rows.items()}


def test_orderly_consumers_keep_per_key_order_under_queue_locks(java, broker):
    topic, group, keys, per_key = "JavaOrderly", "java_orderly", 6, 10
    _create_topic(java, topic)
    # A lock refused during a rebalance is retried at the next one (20 s by default).
    results = java.run("orderly", topic=topic, group=group, keys=keys, perkey=per_key,
                       instances=2, timeout=120,
                       system_properties={"rocketmq.client.rebalance.waitInterval": "2000"})
    locked = {result["instance"]: _queues(result["queues"])
              for result in _ops(results, "assigned")}
    assert locked["c0"] and locked["c1"] and not locked["c0"] & locked["c1"]
    assert locked["c0"] | locked["c1"] == {0, 1, 2, 3}
    sent = _ops(results, "sent")
    assert len(sent) == keys * per_key
    for result in sent:
        key = int(result["body"].split("-")[1])
        assert int(result["queueId"]) == key % 4, result
    received = _ops(results, "orderly")
    assert Counter(message["body"] for message in received) == Counter(
        result["body"] for result in sent)
    for key in range(keys):
        mine = [m for m in received if m["kind"] == f"order{key}"]
        assert len({m["instance"] for m in mine}) == 1, f"key {key} consumed by one instance"
        assert [int(m["seq"]) for m in mine] == list(range(per_key)), f"key {key} in order"
        assert int(mine[0]["queueId"]) in locked[mine[0]["instance"]]


def test_query_by_key_and_view_by_id(java, broker):
    topic = "JavaQuery"
    _create_topic(java, topic)
    sent = _sent_records(java.run("send", topic=topic, count=3, run="qy"))
    target = sent["qy-batch-1"]
    other = sent["qy-sync-2"]
    results = java.run("query", topic=topic, key="key-qy-batch-1", msgid=other["msgId"],
                       offsetmsgid=target["offsetMsgId"])
    (found,) = _ops(results, "query-key")
    assert found["body"] == "qy-batch-1" and found["msgId"] == target["msgId"]
    _check_message_fields(found, broker)
    (by_offset_id,) = _ops(results, "view-offset-id")
    assert by_offset_id["body"] == "qy-batch-1"
    assert by_offset_id["queueOffset"] == target["queueOffset"]
    (by_uniq_id,) = _ops(results, "view-uniq-id")
    assert by_uniq_id["body"] == "qy-sync-2" and by_uniq_id["msgId"] == other["msgId"]
    # Every key of a message is indexed, not only the first.
    again = java.run("query", topic=topic, key="alt-qy-async-0", msgid=other["msgId"],
                     offsetmsgid=target["offsetMsgId"])
    assert [m["body"] for m in _ops(again, "query-key")] == ["qy-async-0"]


def _table(output: str, first_column: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines()
            if line.split() and line.split()[0] == first_column]


def test_mqadmin_against_pybroker(java, broker):
    topic, group = "JavaAdminTopic", "java_admin_group"
    created = _create_topic(java, topic, queues=3)
    assert f"create topic to {broker.broker_addr} success" in created
    assert f"topicName={topic}, readQueueNums=3, writeQueueNums=3, perm=RW-" in created
    assert topic in java.mqadmin("topicList").split()
    route = java.mqadmin("topicRoute", "-t", topic)
    assert f'0:"{broker.broker_addr}"' in route and '"brokerName":"broker-a"' in route
    for fragment in ('"readQueueNums":3', '"writeQueueNums":3', '"perm":6'):
        assert fragment in route, route
    sent = _sent_records(java.run("send", topic=topic, count=2, run="ad"))
    per_queue = Counter(int(result["queueId"]) for result in sent.values())
    status = _table(java.mqadmin("topicStatus", "-t", topic), "broker-a")
    maxima = {int(row[1]): int(row[3]) for row in status}
    assert set(maxima) == {0, 1, 2} and sum(maxima.values()) == 8
    assert all(maxima[queue] >= seen for queue, seen in per_queue.items())
    assert all(int(row[2]) == 0 for row in status)
    (cluster_row,) = _table(java.mqadmin("clusterList"), "DefaultCluster")
    assert cluster_row[1:5] == ["broker-a", "0", broker.broker_addr, "V4_9_8"]
    broker_status = dict(re.findall(r"^(\w+)\s*: (.*)$",
                                    java.mqadmin("brokerStatus", "-b", broker.broker_addr),
                                    re.MULTILINE))
    assert broker_status["brokerVersionDesc"] == "V4_9_8"
    assert int(broker_status["commitLogMaxOffset"]) > 0
    # "<10 s> <60 s> <600 s>": Java leaves a window's field empty until it has filled.
    assert len(broker_status["putTps"].split(" ")) == 3, broker_status["putTps"]
    java.run("litepull", topic=topic, group=group, take=8)
    progress = _table(java.mqadmin("consumerProgress", "-g", group), topic)
    assert {int(row[2]): (int(row[3]), int(row[4]), int(row[5])) for row in progress} == {
        queue: (maxima[queue], maxima[queue], 0) for queue in maxima}
    target = sent["ad-sync-1"]
    # The group consumed the topic (QUERY_TOPIC_CONSUME_BY_WHO) and is offline now.
    by_id = java.mqadmin("queryMsgById", "-i", target["offsetMsgId"],
                         markers=("Exception", "not supported"))
    assert (f"MessageTrack [consumerGroup={group}, trackType=NOT_ONLINE, exceptionDesc="
            f"CODE:206 DESC:the consumer group[{group}] not online]") in by_id
    assert re.search(rf"^Topic:\s+{topic}$", by_id, re.MULTILINE), by_id
    assert re.search(r"^Tags:\s+\[Tagsync\]$", by_id, re.MULTILINE), by_id
    assert re.search(r"^Keys:\s+\[key-ad-sync-1 alt-ad-sync-1\]$", by_id, re.MULTILINE)
    assert re.search(rf"^Queue Offset:\s+{target['queueOffset']}$", by_id, re.MULTILINE)
    assert f"UNIQ_KEY={target['msgId']}" in by_id
    by_key = _table(java.mqadmin("queryMsgByKey", "-t", topic, "-k", "key-ad-batch-0"),
                    sent["ad-batch-0"]["msgId"])
    assert [row[1:3] for row in by_key] == [[sent["ad-batch-0"]["queueId"],
                                             sent["ad-batch-0"]["queueOffset"]]]


def test_java5_client_sends_and_push_consumes(java, java5, broker):
    topic, group, count = "Java5Push", "java5_push", 12
    _create_topic(java, topic)
    # Every kind of send (3 each) once both consumers own their queues, then 12 numbered ones.
    # Messages already in the topic when the second consumer joins can be delivered twice in
    # the rebalance (at-least-once, as against the Java broker): an exact count needs this order.
    results = java5.run("push", topic=topic, group=group, count=count, instances=2, send=1,
                        kinds=3, run="j5", model="CLUSTERING", timeout=90, expect=2 * count)
    sent = _sent_records(results)
    assert len(sent) == 9
    pushed = {result["body"] for result in _ops(results, "sent")}
    assert len(pushed) == count
    received = _received(results, "push")
    assert set(received) == {"c0", "c1"}
    bodies = [m["body"] for messages in received.values() for m in messages]
    # The 12 messages of every kind and the 12 numbered ones, each once.
    assert len(bodies) == len(set(bodies)) == 2 * count
    assert set(bodies) == pushed | _expected_bodies("j5", 3)
    for messages in received.values():
        for message in messages:
            if not message["body"].startswith(topic):
                _check_message_fields(message, broker)
