"""A store written by the real Java broker 4.9.8 opens in pybroker's store and reads back whole.

Method: copy the golden store of tests/golden/java-4.9.8 (README: CommitLog truncated to its
written bytes, index gzipped) to tmp_path and restore it to the files Java wrote (CommitLog
padded with zeros to 1 MiB, index gunzipped); open it with MessageStore (normal recovery, since
Java shut down cleanly) and with the read-only MessageStoreReader; read every queue from offset 0
and compare each record with what the capture run's client was acknowledged (capture.json:
offset message id -> physical offset, queue id, queue offset) and sent (body, tags, keys);
query the index by key. The reader must not change a byte of the store.
"""
import gzip
import hashlib
import json
import pathlib
import shutil

import pytest

from pybroker._fast import record as record_codec
from pybroker.protocol.message_id import decode_offset_message_id
from pybroker.protocol.properties import decode_properties, keys_of, tags_of
from pybroker.store.message_store import MessageStore
from pybroker.store.settings import StoreConfig
from pybroker.store.read_only_store import MessageStoreReader
from pybroker.store.status import GetStatus

GOLDEN = pathlib.Path(__file__).resolve().parents[2] / "golden" / "java-4.9.8"
TOPIC = "CaptureTopic"
COMMITLOG_FILE_SIZE = 1024 * 1024
WRITTEN_BYTES = 2832
# What Capture.java sends in each of its two send phases (README): op -> (tags, keys, bodies).
SENT = {"sync": ("TagA", ["key-sync"], [b"hello sync"]),
        "async": ("TagB", ["key-async"], [b"hello async"]),
        "oneway": ("TagC", ["key-oneway"], [b"hello oneway"]),
        "batch": ("TagD", [], [b"batch 0", b"batch 1", b"batch 2"])}


def _fields(line: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in line.split()[1:])


def expected_messages() -> dict[tuple[int, int], tuple[int, str, list[str], bytes]]:
    """(queue id, queue offset) -> (physical offset or -1, tags, keys, body) from capture.json.

    Sync, async and batch sends were acknowledged with offsets; the oneway send was not, its
    queue and offset come from the push phase (queue 3, in send order).
    """
    capture = json.loads((GOLDEN / "capture.json").read_text())
    expected, oneway_offset = {}, 0
    for phase in ("send", "binary_send"):
        for line in capture["phases"][phase]["results"]:
            fields = _fields(line)
            tags, keys, bodies = SENT[fields["op"]]
            if fields["op"] == "oneway":
                expected[(3, oneway_offset)] = (-1, tags, keys, bodies[0])
                oneway_offset += 1
                continue
            message_ids = fields["offsetMsgId"].split(",")
            for number, (message_id, body) in enumerate(zip(message_ids, bodies, strict=True)):
                physical_offset = decode_offset_message_id(message_id)[2]
                key = (int(fields["queueId"]), int(fields["queueOffset"]) + number)
                expected[key] = (physical_offset, tags, keys, body)
    return expected


@pytest.fixture
def settings(tmp_path) -> StoreConfig:
    """A copy of the golden store restored to Java's file sizes, and settings matching them."""
    store_dir = tmp_path / "store"
    shutil.copytree(GOLDEN / "store", store_dir)
    commitlog = store_dir / "commitlog" / "00000000000000000000"
    assert commitlog.stat().st_size == WRITTEN_BYTES
    with open(commitlog, "r+b") as file:
        file.truncate(COMMITLOG_FILE_SIZE)
    for packed in (store_dir / "index").glob("*.gz"):
        packed.with_suffix("").write_bytes(gzip.decompress(packed.read_bytes()))
        packed.unlink()
    return StoreConfig(store_path_root_dir=str(store_dir),
                       mapped_file_size_commit_log=COMMITLOG_FILE_SIZE,
                       mapped_file_size_consume_queue=300 * 20, max_message_size=512 * 1024,
                       max_hash_slot_num=1000, max_index_num=4000)


def _digest(root: pathlib.Path) -> dict[str, str]:
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


def read_all(store) -> dict[tuple[int, int], tuple[int, str, list[str], bytes]]:
    """Every record of every queue of TOPIC, pulled from offset 0 until the queue ends."""
    found = {}
    for queue_id in range(4):
        queue_offset = 0
        while True:
            result = store.get_messages("golden", TOPIC, queue_id, queue_offset, 32)
            try:
                if result.status is not GetStatus.FOUND:
                    assert queue_offset == store.get_max_offset_in_queue(TOPIC, queue_id)
                    break
                for buffer in result.buffers:
                    message = record_codec.decode(buffer, 0)
                    assert (message.topic, message.queue_id) == (TOPIC, queue_id)
                    assert message.queue_offset == queue_offset
                    properties = decode_properties(message.properties)
                    found[(queue_id, queue_offset)] = (
                        message.physical_offset, tags_of(properties), keys_of(properties),
                        bytes(message.body))
                    queue_offset += 1
                assert result.next_begin_offset == queue_offset
            finally:
                result.release()
    return found


def _compare(found, expected) -> None:
    assert sorted(found) == sorted(expected)
    for where, (physical_offset, tags, keys, body) in expected.items():
        if physical_offset < 0:
            physical_offset = found[where][0]   # the oneway send had no acknowledgement
        assert found[where] == (physical_offset, tags, keys, body), where


def _query_keys(store) -> dict[str, list[int]]:
    """Key -> sorted physical offsets the index answers with (records checked to hold it)."""
    answers = {}
    for key in ("key-sync", "key-async", "key-oneway"):
        result = store.query_messages(TOPIC, key, 32, 0, 1 << 62)
        try:
            offsets = []
            for buffer in result.buffers:
                message = record_codec.decode(buffer, 0)
                assert key in keys_of(decode_properties(message.properties))
                offsets.append(message.physical_offset)
            answers[key] = sorted(offsets)
        finally:
            result.release()
    return answers


def _expected_keys(found) -> dict[str, list[int]]:
    return {key: sorted(offset for offset, _, keys, _ in found.values() if key in keys)
            for key in ("key-sync", "key-async", "key-oneway")}


def test_message_store_recovers_and_reads_every_message(settings):
    expected = expected_messages()
    assert len(expected) == 12
    store = MessageStore(settings)
    assert store.load()
    try:
        assert not store.last_recovery_abnormal
        assert store.recovery_result.valid_end_offset == WRITTEN_BYTES
        assert store.max_physical_offset == WRITTEN_BYTES
        found = read_all(store)
        _compare(found, expected)
        assert [store.get_max_offset_in_queue(TOPIC, q) for q in range(4)] == [8, 0, 2, 2]
        answers = _query_keys(store)
        assert answers == _expected_keys(found)
        assert all(len(offsets) == 2 for offsets in answers.values())
    finally:
        store.shutdown()
    # Recovery of a cleanly shut-down store keeps every written byte.
    commitlog = pathlib.Path(settings.store_path_root_dir) / "commitlog" / "00000000000000000000"
    golden = (GOLDEN / "store" / "commitlog" / "00000000000000000000").read_bytes()
    assert commitlog.read_bytes()[:WRITTEN_BYTES] == golden


def test_read_only_reader_serves_every_message_and_writes_nothing(settings):
    root = pathlib.Path(settings.store_path_root_dir)
    before = _digest(root)
    with MessageStoreReader(settings, dispatched_position=WRITTEN_BYTES) as reader:
        found = read_all(reader)
        _compare(found, expected_messages())
        assert _query_keys(reader) == _expected_keys(found)
    assert _digest(root) == before


def test_reader_serves_nothing_beyond_the_dispatched_position(settings):
    """Advanced to the end of the 6th record only, the reader serves exactly the records below."""
    expected = expected_messages()
    acknowledged = sorted(offset for offset, *_ in expected.values() if offset >= 0)
    limit = acknowledged[6]          # the 7th acknowledged record starts here
    with MessageStoreReader(settings, dispatched_position=limit) as reader:
        partial = read_all(reader)
        reader.advance(WRITTEN_BYTES)
        whole = read_all(reader)
    assert sorted(whole) == sorted(expected)
    assert partial == {where: message for where, message in whole.items() if message[0] < limit}
    assert 6 <= len(partial) < len(whole)
