"""Store files are interchangeable between Java RocketMQ 4.9.8 and pybroker, in both directions.

Method: a seeded plan of messages (topics, queue ids, tags, keys, binary bodies of random size,
enough to roll CommitLog and ConsumeQueue files) is sent by the official Java client
(tools/java_store/StoreCompat.java) to one broker, which is then stopped cleanly; a COPY of its
store directory (with config/*.json) is opened by the other broker with the same file sizes,
and the Java client pulls every queue of every topic from offset 0 and queries keys through the
other broker. Every message must come back at the queue offset the first broker acknowledged,
with the same body, tags and keys; queue offsets are contiguous and keys find exactly the
planned messages. Skips when Java/Maven are missing (fails under PYBROKER_REQUIRE_PEERS=1).
"""
import base64
import json
import os
import pathlib
import random
import shutil

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from tests import peers, progress

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOPICS = ("StoreCompatA", "StoreCompatB")
QUEUES_PER_TOPIC = 4          # the auto-created topic's queue count (defaultTopicQueueNums)
MESSAGE_COUNT = 900
APPENDED_COUNT = 150          # sent through the second broker after it opened the store
BODY_SIZE_MAX = 3000          # under the client's 4 KiB compression threshold: bodies stay raw
SHARED_KEYS = 50              # "grp-N" keys: each names ~18 messages (under queryMessage's 32)
# Both brokers must use the same sizes: files are opened only at their configured size.
FILE_SIZES = {
    "mappedFileSizeCommitLog": str(1024 * 1024),
    "mappedFileSizeConsumeQueue": str(60 * 20),
    "maxMessageSize": str(512 * 1024),
    "maxHashSlotNum": "1000",
    "maxIndexNum": "4000",
}
CLIENT_TIMEOUT_S = 120


java_rocketmq = peers.java_rocketmq


@pytest.fixture(scope="module")
def java_peer(tmp_path_factory):
    """(install, classes dir) with StoreCompat compiled against the 4.9.8 client."""
    install = peers.java_install("4.9.8")
    try:
        classes = peers.compile_java(
            install, [ROOT / "tools" / "java_store" / "StoreCompat.java"],
            tmp_path_factory.mktemp("store_compat_classes"))
    except java_rocketmq.HarnessError as error:
        peers.unavailable(f"cannot prepare Java RocketMQ 4.9.8: {error}")
    return install, classes


def make_plan(generator: random.Random, count: int, first_index: int, path) -> tuple:
    """``count`` planned messages numbered from ``first_index``: (entries, JSON-lines path)."""
    entries = []
    for index in range(first_index, first_index + count):
        # A third go to one queue so that it rolls several ConsumeQueue files.
        topic = TOPICS[0] if index % 3 == 0 else generator.choice(TOPICS)
        queue_id = 0 if index % 3 == 0 else generator.randrange(QUEUES_PER_TOPIC)
        body = generator.randbytes(generator.randint(1, BODY_SIZE_MAX))
        entries.append({"index": index, "topic": topic, "queueId": queue_id,
                        "tags": f"Tag{index % 3}",
                        "keys": f"k-{index} grp-{index % SHARED_KEYS}", "body": body})
    with open(path, "w", encoding="utf-8") as out:
        for entry in entries:
            line = dict(entry, body=base64.b64encode(entry["body"]).decode())
            out.write(json.dumps(line) + "\n")
    return entries, path


@pytest.fixture(scope="module")
def generator() -> random.Random:
    seed = random.SystemRandom().randrange(1 << 32)
    print(f"seed={seed}")  # noqa: T201 (tests may print)
    return random.Random(seed)


@pytest.fixture(scope="module")
def plan(generator, tmp_path_factory):
    """The seeded message plan: a list of dicts and the JSON-lines file StoreCompat reads."""
    path = tmp_path_factory.mktemp("store_compat_plan") / "plan.jsonl"
    return make_plan(generator, MESSAGE_COUNT, 0, path)


def _run_client(java_peer, harness, args) -> list[dict]:
    """Run StoreCompat with args; its RESULT lines as dicts (fails with the output)."""
    _, classes = java_peer
    run = harness.run_class("StoreCompat", args, timeout_s=CLIENT_TIMEOUT_S,
                            extra_classpath=[classes])
    assert run.returncode == 0, f"StoreCompat {args[0]} failed:\n{run.stdout[-3000:]}\n" \
                                f"{run.stderr[-3000:]}"
    return [json.loads(line[len("RESULT "):]) for line in run.stdout.splitlines()
            if line.startswith("RESULT ")]


def _send_plan(java_peer, harness, namesrv_addr: str, plan) -> dict:
    """Send the plan; {(topic, queue id, queue offset): plan index} as acknowledged."""
    entries, path = plan
    results = _run_client(java_peer, harness, ["send", namesrv_addr, "store_compat_producer",
                                               str(path)])
    assert len(results) == len(entries)
    by_index = {entry["index"]: entry for entry in entries}
    acked = {}
    for result in results:
        entry = by_index[result["index"]]
        assert result["status"] == "SEND_OK", result
        assert (result["topic"], result["queueId"]) == (entry["topic"], entry["queueId"])
        acked[(result["topic"], result["queueId"], result["queueOffset"])] = result["index"]
    assert len(acked) == len(entries), "two messages acknowledged at one queue offset"
    return acked


def _check_dump(java_peer, harness, namesrv_addr: str, plan, acked: dict) -> None:
    """Pull everything through the second broker and compare with the acknowledged plan."""
    entries, _ = plan
    results = _run_client(java_peer, harness, ["dump", namesrv_addr, "store_compat_dump",
                                               ",".join(TOPICS)])
    found = {}
    for result in results:
        if result["op"] != "message":
            continue
        where = (result["topic"], result["queueId"], result["queueOffset"])
        assert where not in found, f"{where} served twice"
        found[where] = result
    assert sorted(found) == sorted(acked)
    for where, index in acked.items():
        entry, message = entries[index], found[where]
        assert base64.b64decode(message["body"]) == entry["body"], where
        assert (message["tags"], message["keys"]) == (entry["tags"], entry["keys"]), where
        assert message["planIndex"] == str(index), where
    ends = {(r["topic"], r["queueId"]): r for r in results if r["op"] == "end"}
    for topic in TOPICS:
        for queue_id in range(QUEUES_PER_TOPIC):
            offsets = sorted(o for t, q, o in acked if (t, q) == (topic, queue_id))
            assert offsets == list(range(len(offsets))), (topic, queue_id)
            end = ends[(topic, queue_id)]
            assert end["maxOffset"] == len(offsets), end


def _check_query(java_peer, harness, namesrv_addr: str, plan, acked: dict) -> None:
    """Query a few unique and shared keys per topic; exactly the planned messages answer."""
    entries, _ = plan
    where_of = {index: where for where, index in acked.items()}
    for topic in TOPICS:
        in_topic = [index for index, entry in enumerate(entries) if entry["topic"] == topic]
        keys = [f"k-{in_topic[0]}", f"k-{in_topic[-1]}", f"k-{in_topic[len(in_topic) // 2]}",
                "grp-3", f"grp-{SHARED_KEYS - 1}"]
        results = _run_client(java_peer, harness, ["query", namesrv_addr, "store_compat_query",
                                                   topic, ",".join(keys)])
        assert [result["key"] for result in results] == keys
        for result in results:
            expected = {f"{where_of[i][1]}:{where_of[i][2]}" for i in in_topic
                        if result["key"] in entries[i]["keys"].split()}
            assert set(result["found"]) == expected, result["key"]
            assert len(result["found"]) == len(expected), f"duplicates for {result['key']}"


def _assert_files_rolled(store_dir: pathlib.Path) -> None:
    """The plan must exercise file boundaries: several CommitLog and ConsumeQueue files."""
    assert len(os.listdir(store_dir / "commitlog")) >= 2
    queue_dir = store_dir / "consumequeue" / TOPICS[0] / "0"
    assert len(os.listdir(queue_dir)) >= 3


def _copy_store(source: pathlib.Path, target: pathlib.Path) -> None:
    # The lock file is the running broker's and run/ holds pybroker's sockets; everything
    # else (config/*.json too) moves.
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("lock", "run"))
    assert not (target / "abort").exists(), "the first broker did not shut down cleanly"


def _start_java(install, work_dir: pathlib.Path, source_store=None):
    """A started Java NameServer + broker on free ports, on a fresh copy of ``source_store``
    (or an empty store). Retried on a port another process took between probe and bind."""
    for attempt in range(3):
        java = java_rocketmq.JavaRocketMQ(work_dir, install, free_ports=True,
                                          broker_overrides=FILE_SIZES)
        shutil.rmtree(java.store_dir, ignore_errors=True)
        if source_store is not None:
            _copy_store(source_store, java.store_dir)
        try:
            with progress.stage(f"Java RocketMQ {install.version}: starting on "
                                f"{'a copied' if source_store else 'an empty'} store"):
                return java.start()
        except java_rocketmq.HarnessError as error:
            if "BindException" not in str(error) or attempt == 2:
                raise
    raise AssertionError("unreachable")


def test_java_written_store_opens_in_pybroker(java_peer, plan, generator, tmp_path):
    install, _ = java_peer
    java = _start_java(install, tmp_path / "java")
    try:
        acked = _send_plan(java_peer, java, java.namesrv_addr, plan)
    finally:
        java.stop()
    _assert_files_rolled(java.store_dir)
    _copy_store(java.store_dir, tmp_path / "py" / "store")
    more = make_plan(generator, APPENDED_COUNT, MESSAGE_COUNT, tmp_path / "more.jsonl")
    both = (plan[0] + more[0], None)
    with StandaloneBroker(tmp_path / "py", FILE_SIZES) as broker:
        _check_dump(java_peer, java, broker.namesrv_addr, plan, acked)
        _check_query(java_peer, java, broker.namesrv_addr, plan, acked)
        # pybroker appends to the Java-written files: queue offsets go on where Java stopped.
        acked.update(_send_plan(java_peer, java, broker.namesrv_addr, more))
        _check_dump(java_peer, java, broker.namesrv_addr, both, acked)
        log_text = broker._log_text()
    assert "normal recovery" in log_text and "abnormal recovery" not in log_text
    # And the store, written by both, opens in Java again.
    java_again = _start_java(install, tmp_path / "java_again", tmp_path / "py" / "store")
    try:
        _check_dump(java_peer, java_again, java_again.namesrv_addr, both, acked)
        _check_query(java_peer, java_again, java_again.namesrv_addr, both, acked)
    finally:
        java_again.stop()


def test_pybroker_written_store_opens_in_java(java_peer, plan, tmp_path):
    install, _ = java_peer
    client = java_rocketmq.JavaRocketMQ(tmp_path / "client", install)
    broker = StandaloneBroker(tmp_path / "py", FILE_SIZES)
    with broker:
        acked = _send_plan(java_peer, client, broker.namesrv_addr, plan)
    assert broker.process.returncode == 0, broker._log_text()[-3000:]
    store_dir = pathlib.Path(broker.store_dir)
    _assert_files_rolled(store_dir)
    java = _start_java(install, tmp_path / "java", store_dir)
    try:
        _check_dump(java_peer, java, java.namesrv_addr, plan, acked)
        _check_query(java_peer, java, java.namesrv_addr, plan, acked)
    finally:
        java.stop()
    # Java took the store as cleanly shut down (no abort file): normal recovery.
    assert "last shutdown normally" in (java.logs_dir / "broker.log").read_text(errors="replace")
