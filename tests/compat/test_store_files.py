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
import importlib.util
import json
import os
import pathlib
import random
import shutil
import sys

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from tests.conftest import require_peers

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOPICS = ("StoreCompatA", "StoreCompatB")
QUEUES_PER_TOPIC = 4          # the auto-created topic's queue count (defaultTopicQueueNums)
MESSAGE_COUNT = 900
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


def _load_tool(name: str):
    """Import tools/<name>.py by path (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"_pybroker_tools_{name}",
                                                  ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


java_rocketmq = _load_tool("java_rocketmq")


def _unavailable(reason: str):
    if require_peers():
        pytest.fail(f"Java RocketMQ peer required (PYBROKER_REQUIRE_PEERS=1): {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def java_peer(tmp_path_factory):
    """(install, classes dir) with StoreCompat compiled against the 4.9.8 client."""
    reason = java_rocketmq.java_available()
    if reason:
        _unavailable(reason)
    install = java_rocketmq.RocketMQInstall("4.9.8")
    try:
        install.install(timeout_s=1200)
        classes = java_rocketmq.compile_java(
            install, [ROOT / "tools" / "java_store" / "StoreCompat.java"],
            tmp_path_factory.mktemp("store_compat_classes"))
    except java_rocketmq.HarnessError as error:
        _unavailable(f"cannot prepare Java RocketMQ 4.9.8: {error}")
    return install, classes


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    """The seeded message plan: a list of dicts and the JSON-lines file StoreCompat reads."""
    seed = random.SystemRandom().randrange(1 << 32)
    print(f"seed={seed}")  # noqa: T201 (tests may print)
    generator = random.Random(seed)
    entries = []
    for index in range(MESSAGE_COUNT):
        # A third go to one queue so that it rolls several ConsumeQueue files.
        topic = TOPICS[0] if index % 3 == 0 else generator.choice(TOPICS)
        queue_id = 0 if index % 3 == 0 else generator.randrange(QUEUES_PER_TOPIC)
        body = generator.randbytes(generator.randint(1, BODY_SIZE_MAX))
        entries.append({"topic": topic, "queueId": queue_id, "tags": f"Tag{index % 3}",
                        "keys": f"k-{index} grp-{index % SHARED_KEYS}", "body": body})
    path = tmp_path_factory.mktemp("store_compat_plan") / "plan.jsonl"
    with open(path, "w", encoding="utf-8") as out:
        for entry in entries:
            line = dict(entry, body=base64.b64encode(entry["body"]).decode())
            out.write(json.dumps(line) + "\n")
    return entries, path


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
    acked = {}
    for result in results:
        entry = entries[result["index"]]
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


def test_java_written_store_opens_in_pybroker(java_peer, plan, tmp_path):
    install, _ = java_peer
    java = java_rocketmq.JavaRocketMQ(tmp_path / "java", install, free_ports=True,
                                      broker_overrides=FILE_SIZES)
    with java:
        acked = _send_plan(java_peer, java, java.namesrv_addr, plan)
    _assert_files_rolled(java.store_dir)
    _copy_store(java.store_dir, tmp_path / "py" / "store")
    with StandaloneBroker(tmp_path / "py", FILE_SIZES) as broker:
        _check_dump(java_peer, java, broker.namesrv_addr, plan, acked)
        _check_query(java_peer, java, broker.namesrv_addr, plan, acked)
        log_text = broker._log_text()
    assert "normal recovery" in log_text and "abnormal recovery" not in log_text


def test_pybroker_written_store_opens_in_java(java_peer, plan, tmp_path):
    install, _ = java_peer
    client = java_rocketmq.JavaRocketMQ(tmp_path / "client", install)
    broker = StandaloneBroker(tmp_path / "py", FILE_SIZES)
    with broker:
        acked = _send_plan(java_peer, client, broker.namesrv_addr, plan)
    assert broker.process.returncode == 0, broker._log_text()[-3000:]
    store_dir = pathlib.Path(broker.store_dir)
    _assert_files_rolled(store_dir)
    java = java_rocketmq.JavaRocketMQ(tmp_path / "java", install, free_ports=True,
                                      broker_overrides=FILE_SIZES)
    _copy_store(store_dir, java.store_dir)
    with java:
        _check_dump(java_peer, java, java.namesrv_addr, plan, acked)
        _check_query(java_peer, java, java.namesrv_addr, plan, acked)
