# The Go client (rocketmq-client-go v2.1.2, via rmqgo) against a pybroker started by the test.
"""Goal: prove the Go client's producer, push, orderly and pull consumers work against pybroker.

Method: one `pybroker standalone` per module (StandaloneBroker on free loopback ports, store in
a temp directory) and a fresh topic and group per test; drive the `rmqgo` CLI
(tools/go_client.py builds it; skipped when `go` is missing unless PYBROKER_REQUIRE_PEERS=1)
and compare counts, ids, queue offsets, bodies, tags, keys and user properties exactly:
sync / async / oneway / batch send (also zlib-compressed bodies), push clustering with
committed offsets and broker-side tag filtering, two instances sharing the queues after a
rebalance, broadcasting, pull with offset commit and re-read, ordered send by sharding key with
orderly consume (also queue locks handed from one instance to the next), delay level 1 (visible
after >= 1 s, not before) and redelivery of refused messages through the retry topic. Query by
key and view by id are not covered: the Go client v2.1.2 has no API for them (rmqgo's usage
says so too); tests/client and the Java client's tests cover them against pybroker.
"""
import hashlib
import json
import os
import pathlib
import subprocess
import time
import uuid

import orjson
import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.remoting.client import SyncRemotingClient
from tests import peers

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(300)]
ROOT = pathlib.Path(__file__).resolve().parents[2]
TIMEOUT_MS = 10_000


go_client = peers.go_client


@pytest.fixture(scope="module")
def rmqgo() -> pathlib.Path:
    return peers.rmqgo_path()


@pytest.fixture(scope="module")
def broker(rmqgo, tmp_path_factory):
    """One pybroker (NameServer + broker) shared by every test of this module."""
    with StandaloneBroker(tmp_path_factory.mktemp("pybroker-go")) as running:
        yield running


def _parse(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


@pytest.fixture
def run_rmqgo(rmqgo, broker, tmp_path):
    """Run rmqgo against the broker; returns (returncode, JSON records, stderr)."""
    env = dict(os.environ, **{"rocketmq.client.localOffsetStoreDir": str(tmp_path / "offsets")})

    def run(*args, timeout_s: float = 150):
        result = subprocess.run([str(rmqgo), *map(str, args)], capture_output=True, text=True,
                                timeout=timeout_s, env=env, stdin=subprocess.DEVNULL)
        return result.returncode, _parse(result.stdout), result.stderr
    return run


def _popen_rmqgo(rmqgo, env_dir, *args) -> subprocess.Popen:
    env = dict(os.environ, **{"rocketmq.client.localOffsetStoreDir": str(env_dir)})
    return subprocess.Popen([str(rmqgo), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL)


def _finish(process: subprocess.Popen, timeout_s: float = 150) -> tuple[int, list, str]:
    stdout, stderr = process.communicate(timeout=timeout_s)
    return process.returncode, _parse(stdout), stderr


def _records(records, kind: str) -> list[dict]:
    return [record for record in records if record["type"] == kind]


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def _expected_body(index: int, size_bytes: int) -> bytes:
    """rmqgo's body for message `index`: "rmqgo:<index>:" repeated, cut to size_bytes."""
    unit = f"rmqgo:{index}:".encode()
    return (unit * (size_bytes // len(unit) + 1))[:size_bytes]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _create_topic(run_rmqgo, broker, topic: str, queues: int, *extra) -> None:
    code, records, stderr = run_rmqgo(
        "admin", "create-topic", "--namesrv", broker.namesrv_addr, "--topic", topic,
        "--broker-addr", broker.broker_addr, "--read-queues", queues,
        "--write-queues", queues, *extra)
    assert code == 0 and records[-1]["error"] == "", stderr
    deadline = time.monotonic() + 20
    while True:  # the route reaches the NameServer on the broker's next registration
        code, records, stderr = run_rmqgo("admin", "queues", "--namesrv", broker.namesrv_addr,
                                          "--topic", topic)
        found = sorted(q["queueId"] for q in _records(records, "queue"))
        if code == 0 and found == list(range(queues)):
            return
        assert time.monotonic() < deadline, (found, stderr)
        time.sleep(0.3)


def _check_sends(sends, count: int, body_size: int) -> dict:
    """Every send acknowledged once; returns {msgId: send record}."""
    assert [s["status"] for s in sends] == ["SEND_OK"] * len(sends), sends
    assert sum(s["count"] for s in sends) == count
    shas = [sha for s in sorted(sends, key=lambda s: s["index"]) for sha in s["bodySha256"]]
    assert shas == [_sha256(_expected_body(i, body_size)) for i in range(count)]
    positions = [(s["queueId"], s["queueOffset"]) for s in sends]
    assert len(set(positions)) == len(positions)
    return {s["msgId"]: s for s in sends}


def _pull_all(run_rmqgo, broker, topic: str, count: int) -> dict:
    """Pull every queue from offset 0: {(queueId, queueOffset): message record}."""
    code, records, stderr = run_rmqgo("pull", "--namesrv", broker.namesrv_addr, "--topic", topic,
                                      "--offset", 0, "--count", count, "--timeout", "60s")
    assert code == 0, stderr
    messages = _records(records, "message")
    assert len(messages) == count
    return {(m["queueId"], m["queueOffset"]): m for m in messages}


def test_sync_send_push_consume_keys_tags_props_exact(run_rmqgo, broker):
    topic, group, count, body_size = _unique("GoSync"), _unique("go_sync"), 20, 200
    _create_topic(run_rmqgo, broker, topic, 4)
    code, records, stderr = run_rmqgo(
        "send", "--namesrv", broker.namesrv_addr, "--topic", topic, "--count", count,
        "--tag", "Tag{i%2}", "--keys", "key-{i},shared", "--props", "color=c{i%3}",
        "--props", "seq={i}", "--body-size", body_size)
    assert code == 0, stderr
    sent = _check_sends(_records(records, "send"), count, body_size)
    assert len(sent) == count
    for queue_id in range(4):  # a fresh topic: each queue's offsets are 0, 1, 2, ...
        offsets = sorted(s["queueOffset"] for s in sent.values() if s["queueId"] == queue_id)
        assert offsets == list(range(len(offsets)))

    code, records, stderr = run_rmqgo(
        "consume", "--namesrv", broker.namesrv_addr, "--topic", topic, "--group", group,
        "--count", count, "--linger", "2s", "--timeout", "90s")
    assert code == 0, stderr
    messages = _records(records, "message")
    assert len(messages) == count  # nothing extra arrived during the linger
    assert {m["msgId"] for m in messages} == set(sent)
    for message in messages:
        send = sent[message["msgId"]]
        index = send["index"]
        assert message["delivery"] == 1 and message["reconsumeTimes"] == 0
        assert (message["queueId"], message["queueOffset"]) == (send["queueId"],
                                                                send["queueOffset"])
        assert message["offsetMsgId"] == send["offsetMsgId"]
        assert message["bodySha256"] == _sha256(_expected_body(index, body_size))
        assert message["bodySize"] == body_size and message["topic"] == topic
        assert message["tags"] == f"Tag{index % 2}" and message["keys"] == f"key-{index} shared"
        assert message["props"]["color"] == f"c{index % 3}"
        assert message["props"]["seq"] == str(index)
        assert message["props"]["UNIQ_KEY"] == message["msgId"]
    summary = _records(records, "summary")[0]
    assert (summary["distinct"], summary["deliveries"], summary["duplicated"]) == (count, count, 0)

    # The group's offsets were committed: a second run of the same group gets nothing.
    code, records, stderr = run_rmqgo(
        "consume", "--namesrv", broker.namesrv_addr, "--topic", topic, "--group", group,
        "--count", 1, "--timeout", "5s")
    assert code == 3 and _records(records, "message") == [], stderr
    # A tag expression filters on the broker: only Tag1 messages reach a new group.
    code, records, stderr = run_rmqgo(
        "consume", "--namesrv", broker.namesrv_addr, "--topic", topic, "--group",
        f"{group}_tag", "--expr", "Tag1 || NoSuchTag", "--count", count // 2,
        "--linger", "2s", "--timeout", "60s")
    assert code == 0, stderr
    assert sorted(m["msgId"] for m in _records(records, "message")) == sorted(
        msg_id for msg_id, send in sent.items() if send["index"] % 2 == 1)


def test_async_and_oneway_send_counted_by_pull(run_rmqgo, broker):
    topic, body_size = _unique("GoAsync"), 64
    _create_topic(run_rmqgo, broker, topic, 2)
    base = ("send", "--namesrv", broker.namesrv_addr, "--topic", topic, "--body-size", body_size)
    code, records, stderr = run_rmqgo(*base, "--mode", "async", "--count", 15)
    assert code == 0, stderr
    sent = _check_sends(_records(records, "send"), 15, body_size)
    assert _records(records, "summary")[0]["acked"] == 15
    big_size = 20_000  # over the client's 4 KiB threshold: the body travels zlib-compressed
    code, records, stderr = run_rmqgo("send", "--namesrv", broker.namesrv_addr, "--topic", topic,
                                      "--mode", "async", "--count", 3, "--body-size", big_size)
    assert code == 0, stderr
    big = _check_sends(_records(records, "send"), 3, big_size)
    code, records, stderr = run_rmqgo(*base, "--mode", "oneway", "--count", 7, "--body",
                                      "oneway-{i}")
    assert code == 0, stderr
    assert [s["status"] for s in _records(records, "send")] == ["SEND_ONEWAY"] * 7

    pulled = _pull_all(run_rmqgo, broker, topic, 25)
    for sends, size in ((sent, body_size), (big, big_size)):
        for send in sends.values():
            message = pulled[(send["queueId"], send["queueOffset"])]
            assert message["msgId"] == send["msgId"] and message["bodySize"] == size
            assert message["bodySha256"] == _sha256(_expected_body(send["index"], size))
            assert bool(message["sysFlag"] & 1) == (size > 4096)  # COMPRESSED_FLAG
    oneway = sorted(m["bodySha256"] for m in pulled.values()
                    if m["msgId"] not in sent and m["msgId"] not in big)
    assert oneway == sorted(_sha256(f"oneway-{i}".encode()) for i in range(7))
    for queue_id in (0, 1):  # dense queue offsets: nothing lost, nothing duplicated
        offsets = sorted(offset for queue, offset in pulled if queue == queue_id)
        assert offsets == list(range(len(offsets)))


def test_batch_send_then_pull_commit_and_reread_offsets(run_rmqgo, broker):
    topic, group, body_size, batch, count = _unique("GoBatch"), _unique("go_pull"), 50, 5, 20
    namesrv = ("--namesrv", broker.namesrv_addr, "--topic", topic)
    _create_topic(run_rmqgo, broker, topic, 2)
    code, records, stderr = run_rmqgo("send", *namesrv, "--batch", batch, "--count", count,
                                      "--body-size", body_size, "--tag", "B",
                                      "--keys", "bk-{i}", "--props", "n={i}")
    assert code == 0, stderr
    sends = sorted(_records(records, "send"), key=lambda s: s["index"])
    assert [s["index"] for s in sends] == list(range(0, count, batch))
    _check_sends(sends, count, body_size)
    expected = {}  # (queueId, queueOffset) -> (offsetMsgId, index)
    for send in sends:
        offset_ids = send["offsetMsgId"].split(",")
        assert len(offset_ids) == batch and len(set(offset_ids)) == batch
        for k in range(batch):
            expected[(send["queueId"], send["queueOffset"] + k)] = (offset_ids[k],
                                                                    send["index"] + k)

    pulled = _pull_all(run_rmqgo, broker, topic, count)
    assert set(pulled) == set(expected)
    for position, (offset_id, index) in expected.items():
        message = pulled[position]
        assert message["offsetMsgId"] == offset_id
        assert message["bodySha256"] == _sha256(_expected_body(index, body_size))
        assert message["tags"] == "B" and message["keys"] == f"bk-{index}"
        assert message["props"]["n"] == str(index)

    per_queue = {q: sum(1 for (queue_id, _) in expected if queue_id == q) for q in (0, 1)}
    code, records, stderr = run_rmqgo("pull", *namesrv, "--group", group, "--offset", -1,
                                      "--commit", "--count", count)
    assert code == 0, stderr
    assert {r["queueId"]: r["stored"] for r in _records(records, "offset")} == {0: 0, 1: 0}
    assert {r["queueId"]: r["offset"] for r in _records(records, "commit")} == per_queue
    code, records, stderr = run_rmqgo("pull", *namesrv, "--group", group, "--offset", -1,
                                      "--count", 1, "--timeout", "3s")
    assert code == 3, stderr  # nothing new after the committed offsets
    assert {r["queueId"]: r["stored"] for r in _records(records, "offset")} == per_queue
    assert _records(records, "message") == []


def _consumer_ids(broker, group: str) -> list[str]:
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        answer = client.invoke(create_request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                              {"consumerGroup": group}), TIMEOUT_MS)
    if answer.code != ResponseCode.SUCCESS:
        return []
    return orjson.loads(answer.body)["consumerIdList"]


def _start_one_by_one(rmqgo, broker, tmp_path, group: str, args) -> list:
    """Start two consumers of `group`, the second once the first has its queues: the first
    takes all 4 queues and must give 2 up when the broker tells it
    (NOTIFY_CONSUMER_IDS_CHANGED) that the second one joined."""
    consumers = []
    try:
        for members, name in enumerate(("share-a", "share-b"), start=1):
            consumers.append(_popen_rmqgo(rmqgo, tmp_path / name, "consume", *args,
                                          "--group", group, "--instance", name))
            deadline = time.monotonic() + 10
            while len(_consumer_ids(broker, group)) < members:
                assert time.monotonic() < deadline, f"{name} never registered"
                time.sleep(0.2)
            time.sleep(2)
    except BaseException:
        _kill_all(consumers)
        raise
    time.sleep(3)  # well below the client's 20 s periodic rebalance
    return consumers


def _kill_all(processes) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_two_clustering_instances_share_the_queues(rmqgo, run_rmqgo, broker, tmp_path):
    topic, group, count = _unique("GoShare"), _unique("go_share"), 40
    namesrv = ("--namesrv", broker.namesrv_addr, "--topic", topic)
    _create_topic(run_rmqgo, broker, topic, 4)
    consumers = _start_one_by_one(rmqgo, broker, tmp_path, group,
                                  (*namesrv, "--count", 0, "--timeout", "20s"))
    try:
        code, records, stderr = run_rmqgo("send", *namesrv, "--count", count)
        assert code == 0, stderr
        sent = {s["msgId"]: s for s in _records(records, "send")}
        outcomes = [_finish(process) for process in consumers]
    finally:
        _kill_all(consumers)
    per_instance = []
    for code, records, stderr in outcomes:
        assert code == 0, stderr
        per_instance.append(_records(records, "message"))
    received = [m["msgId"] for messages in per_instance for m in messages]
    assert sorted(received) == sorted(sent)  # each message exactly once, across both
    queues = [{m["queueId"] for m in messages} for messages in per_instance]
    assert queues[0] and queues[1] and not queues[0] & queues[1]
    for messages in per_instance:
        for message in messages:
            assert message["queueId"] == sent[message["msgId"]]["queueId"]
    # Both shut down: they unregistered, and their last offsets were committed.
    assert _consumer_ids(broker, group) == []
    per_queue = [sum(1 for s in sent.values() if s["queueId"] == q) for q in range(4)]
    assert [_committed_offset(broker, group, topic, q) for q in range(4)] == per_queue


def test_orderly_queues_change_hands_through_unlock_and_lock(run_rmqgo, broker):
    """The first orderly instance locks all 4 queues, consumes round 1 and shuts down (it
    unlocks them and commits); the second must lock them at once (not after the broker's 60 s
    lock expiry) and consume exactly round 2, in order per key.

    Not a rebalance between two live orderly instances: v2.1.2 never unlocks a queue it gives
    up in a rebalance (removeUnnecessaryMessageQueue: "TODO orderly"), so the newcomer waits
    for the lock to expire - the Java 4.9.8 broker behaves the same."""
    topic, group, count = _unique("GoOrderHand"), _unique("go_order_hand"), 24
    namesrv = ("--namesrv", broker.namesrv_addr, "--topic", topic)
    _create_topic(run_rmqgo, broker, topic, 4, "--order")
    for round_number, instance in ((1, "hand-a"), (2, "hand-b")):
        code, records, stderr = run_rmqgo("send", *namesrv, "--count", count, "--selector",
                                          "hash", "--sharding-key", "key-{i%6}",
                                          "--props", "seq={i}", "--props", f"round={round_number}")
        assert code == 0, stderr
        sent = {s["msgId"] for s in _records(records, "send")}
        code, records, stderr = run_rmqgo("consume", *namesrv, "--group", group, "--orderly",
                                          "--instance", instance, "--count", count,
                                          "--linger", "1s", "--timeout", "40s")
        assert code == 0, stderr
        messages = _records(records, "message")
        assert sorted(m["msgId"] for m in messages) == sorted(sent)
        sequences = {}
        for message in messages:
            assert message["props"]["round"] == str(round_number)
            sequences.setdefault(message["props"]["SHARDING_KEY"], []).append(
                int(message["props"]["seq"]))
        assert sequences == {f"key-{k}": list(range(k, count, 6)) for k in range(6)}


def _committed_offset(broker, group: str, topic: str, queue_id: int) -> int:
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        answer = client.invoke(create_request(RequestCode.QUERY_CONSUMER_OFFSET,
                                              {"consumerGroup": group, "topic": topic,
                                               "queueId": str(queue_id)}), TIMEOUT_MS)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return int(answer.ext_fields["offset"])


def test_broadcasting_delivers_every_message_to_each_consumer(rmqgo, run_rmqgo, broker,
                                                              tmp_path):
    topic, group, count = _unique("GoBroadcast"), _unique("go_bc"), 10
    namesrv = ("--namesrv", broker.namesrv_addr, "--topic", topic)
    code, records, stderr = run_rmqgo("send", *namesrv, "--count", count)  # auto-created
    assert code == 0, stderr
    sent = {s["msgId"] for s in _records(records, "send")}
    assert len(sent) == count
    consumers = [_popen_rmqgo(rmqgo, tmp_path / f"offsets{n}", "consume", *namesrv, "--group",
                              group, "--model", "broadcasting", "--instance", f"bc-{n}",
                              "--count", count, "--linger", "1s", "--timeout", "90s")
                 for n in range(2)]
    for process in consumers:
        code, records, stderr = _finish(process)
        assert code == 0, stderr
        assert sorted(m["msgId"] for m in _records(records, "message")) == sorted(sent)


def test_orderly_send_by_sharding_key_and_orderly_consume(run_rmqgo, broker):
    topic, group, count, keys = _unique("GoOrder"), _unique("go_order"), 40, 4
    namesrv = ("--namesrv", broker.namesrv_addr, "--topic", topic)
    _create_topic(run_rmqgo, broker, topic, 4, "--order")
    code, records, stderr = run_rmqgo("send", *namesrv, "--count", count, "--selector", "hash",
                                      "--sharding-key", f"order-{{i%{keys}}}",
                                      "--props", "seq={i}", "--body-size", 16)
    assert code == 0, stderr
    queue_of_key = {}
    for send in _records(records, "send"):
        key = f"order-{send['index'] % keys}"
        assert queue_of_key.setdefault(key, send["queueId"]) == send["queueId"]
    code, records, stderr = run_rmqgo("consume", *namesrv, "--group", group, "--orderly",
                                      "--count", count, "--timeout", "90s")
    assert code == 0, stderr
    messages = _records(records, "message")
    assert len(messages) == count
    sequences = {}
    for message in messages:
        key = message["props"]["SHARDING_KEY"]
        assert message["queueId"] == queue_of_key[key]
        sequences.setdefault(key, []).append(int(message["props"]["seq"]))
    assert sequences == {f"order-{k}": list(range(k, count, keys)) for k in range(keys)}


def _max_offsets(broker, topic: str, queues: int) -> list[int]:
    found = []
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        for queue_id in range(queues):
            answer = client.invoke(create_request(RequestCode.GET_MAX_OFFSET,
                                                  {"topic": topic, "queueId": str(queue_id)}),
                                   TIMEOUT_MS)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            found.append(int(answer.ext_fields["offset"]))
    return found


def test_delay_level_1_is_delivered_after_one_second_not_before(run_rmqgo, broker):
    topic, group, count = _unique("GoDelay"), _unique("go_delay"), 3
    namesrv = ("--namesrv", broker.namesrv_addr, "--topic", topic)
    _create_topic(run_rmqgo, broker, topic, 1)
    code, records, stderr = run_rmqgo("send", *namesrv, "--count", count, "--delay-level", 1,
                                      "--tag", "late", "--props", "p={i}")
    sent_at_ms = time.time() * 1000
    assert code == 0, stderr
    sent = {s["msgId"]: s for s in _records(records, "send")}
    assert [s["status"] for s in sent.values()] == ["SEND_OK"] * count
    assert _max_offsets(broker, topic, 1) == [0]  # parked in SCHEDULE_TOPIC_XXXX, not visible
    code, records, stderr = run_rmqgo("consume", *namesrv, "--group", group, "--count", count,
                                      "--linger", "1s", "--timeout", "60s")
    assert code == 0, stderr
    messages = _records(records, "message")
    assert sorted(m["msgId"] for m in messages) == sorted(sent)
    for message in messages:
        index = sent[message["msgId"]]["index"]
        assert message["topic"] == topic and message["tags"] == "late"
        # Java's schedule service keeps DELAY and where the message really belongs
        # (tests/compat/test_property_fidelity.py compares with the Java broker).
        assert message["props"]["p"] == str(index) and message["props"]["DELAY"] == "1"
        assert (message["props"]["REAL_TOPIC"], message["props"]["REAL_QID"]) == (topic, "0")
        # Stored in the real topic by the schedule service at least 1 s after the client sent it.
        assert message["storeTimestamp"] - message["bornTimestamp"] >= 1000
        assert message["storeTimestamp"] >= sent_at_ms - 1000
    assert _max_offsets(broker, topic, 1) == [count]


def test_consume_failure_redelivers_through_the_retry_topic(run_rmqgo, broker):
    topic, group, count = _unique("GoRetry"), _unique("go_retry"), 4
    namesrv = ("--namesrv", broker.namesrv_addr, "--topic", topic)
    code, records, stderr = run_rmqgo("send", *namesrv, "--count", count)
    assert code == 0, stderr
    sent = {s["msgId"] for s in _records(records, "send")}
    # The Go client would otherwise first see %RETRY%<group> on its 30 s route poll.
    _create_topic(run_rmqgo, broker, f"%RETRY%{group}", 1)
    code, records, stderr = run_rmqgo("consume", *namesrv, "--group", group, "--retry-first",
                                      "--count", count, "--timeout", "90s")
    assert code == 0, stderr
    deliveries = {}
    for message in _records(records, "message"):
        deliveries.setdefault(message["msgId"], []).append(
            (message["delivery"], message["reconsumeTimes"], message["topic"]))
    # First delivery refused (CONSUMER_SEND_MSG_BACK), the second comes from %RETRY%<group>
    # after delay level 3 (10 s), reported by the client under the original topic.
    assert deliveries == {msg_id: [(1, 0, topic), (2, 1, topic)] for msg_id in sent}
