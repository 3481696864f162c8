"""The C reput (pybroker._fast.dispatch) writes byte for byte what the Python rules write.

Method: random records (topics with non-ASCII names, queues, tags, keys, UNIQ_KEY, transaction
types, the schedule topic, malformed UTF-8 in properties) are appended to a real CommitLog in
tmp_path. One store is dispatched by Dispatcher.dispatch_until (the C scanner, Python only for
the records it leaves); a second by Dispatcher._dispatch_one on every record (the Python rules
alone). Small consume-queue and index files force rolls on both sides. Every consume-queue and
index file must be identical, also after dispatching everything again on both sides (which
leaves the consume queues unchanged).
"""
import pathlib

import pytest

from pybroker._fast import dispatch as reput
from pybroker._fast import record as record_codec
from pybroker.protocol.constants import MessageSysFlag, SystemTopic
from pybroker.store import layout
from pybroker.store.commitlog import CommitLog
from pybroker.store.consume_queue import ConsumeQueueStore
from pybroker.schema import parse_delay_levels
from pybroker.store.dispatch import Dispatcher
from pybroker.store.index_file import IndexService

HOST = bytes([127, 0, 0, 1])
DELAYS = parse_delay_levels("1s 5s 10s 30s 1m 2m")
TOPICS = ["TopicA", "Tópico-ü", "t" * 120, SystemTopic.SCHEDULE]
TRANSACTION_TYPES = [0, 0, 0, int(MessageSysFlag.TRANSACTION_PREPARED_TYPE),
                     int(MessageSysFlag.TRANSACTION_COMMIT_TYPE),
                     int(MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)]


def _properties(rand) -> bytes:
    items = []
    if rand.random() < 0.8:
        items.append(b"UNIQ_KEY\x01" + ("%032X" % rand.getrandbits(128)).encode())
    if rand.random() < 0.5:
        items.append(b"TAGS\x01" + rand.choice([b"TagA", b"", "Tág".encode(), b"\xe2\x28x"]))
    if rand.random() < 0.4:
        keys = [rand.choice([b"k1", b"", b"key-2", "kéy".encode()])
                for _ in range(rand.randrange(1, 4))]
        items.append(b"KEYS\x01" + b" ".join(keys))
    if rand.random() < 0.3:
        items.append(b"DELAY\x01" + rand.choice([b"1", b"3", b"0", b"x", b"9"]))
    if rand.random() < 0.2:
        items.append(b"TAGS\x01Override")          # the last occurrence wins
    rand.shuffle(items)
    return b"\x02".join(items) + (b"\x02" if items and rand.random() < 0.5 else b"")


def _append_random(commitlog: CommitLog, rand, count: int, topics=TOPICS) -> None:
    for number in range(count):
        topic = rand.choice(topics)
        queue_id = rand.randrange(3)
        sys_flag = rand.choice(TRANSACTION_TYPES)
        properties = _properties(rand)
        body = bytes(rand.randrange(256) for _ in range(rand.randrange(1, 40)))
        buffer = bytearray(record_codec.encoded_size(len(body), len(topic.encode()),
                                                     len(properties), sys_flag))
        record_codec.encode_into(buffer, 0, topic.encode(), queue_id, 0, body, properties,
                                 sys_flag, 1, HOST, 1, HOST, 10911)
        result = commitlog.append_encoded(buffer, topic, queue_id, 1, sys_flag,
                                          1_700_000_000_000 + number * 700)
        assert result.status.stored


def _store(root: pathlib.Path, commitlog: CommitLog, keep_bindings: bool = False,
           queue_units: int = 7):
    queues = ConsumeQueueStore(str(root), queue_units * layout.CQ_STORE_UNIT_SIZE)
    index = IndexService(str(root / "index"), 13, 40)
    return queues, index, Dispatcher(commitlog, queues, index, DELAYS, 0,
                                     keep_bindings=keep_bindings)


def _files(root: pathlib.Path) -> list[tuple[str, bytes]]:
    # Index files are named by their creation time: compare them in order, not by name.
    found = []
    for path in sorted((root / "consumequeue").rglob("*")):
        if path.is_file():
            found.append((str(path.relative_to(root)), path.read_bytes()))
    index_dir = root / "index"
    for number, path in enumerate(sorted(index_dir.iterdir()) if index_dir.exists() else []):
        found.append((f"index-{number}", path.read_bytes()))
    return found


@pytest.mark.parametrize("count", [1, 60, 400])
def test_scanner_and_python_rules_write_the_same_files(tmp_path, rand, count):
    commitlog = CommitLog(str(tmp_path / "commitlog"), 32 * 1024)
    _append_random(commitlog, rand, count)
    fast_queues, fast_index, fast = _store(tmp_path / "fast", commitlog)
    slow_queues, slow_index, slow = _store(tmp_path / "slow", commitlog)
    try:
        assert fast.dispatch_until(commitlog.max_offset()) == count
        for message_record in commitlog.record_iterator(0):
            slow._dispatch_one(message_record)
            message_record.body.release()
        fast_queues.flush()
        slow_queues.flush()
        fast_index.flush()
        slow_index.flush()
        assert _files(tmp_path / "fast") == _files(tmp_path / "slow")
        for queue in fast_queues.queues():
            twin = slow_queues.find(queue.topic, queue.queue_id)
            assert queue.max_offset_in_queue() == twin.max_offset_in_queue()
            assert queue.last_dispatched_phy_offset == twin.last_dispatched_phy_offset
        # Again from the start (recovery re-dispatches): both sides skip what they have (the
        # index takes the record at its end offset again, in Java as here).
        queue_files = [f for f in _files(tmp_path / "fast") if f[0].startswith("consumequeue")]
        fast.reput_from_offset = 0
        assert fast.dispatch_until(commitlog.max_offset()) == count
        for message_record in commitlog.record_iterator(0):
            slow._dispatch_one(message_record)
            message_record.body.release()
        for part in (fast_queues, slow_queues, fast_index, slow_index):
            part.flush()
        assert _files(tmp_path / "fast") == _files(tmp_path / "slow")
        assert [f for f in _files(tmp_path / "fast") if f[0].startswith("consumequeue")] == \
            queue_files
    finally:
        for part in (fast_queues, slow_queues, fast_index, slow_index):
            part.close()
        commitlog.shutdown(0)


@pytest.mark.parametrize("count", [60, 400])
def test_bindings_kept_between_batches_write_the_same_files(tmp_path, rand, count):
    # The dispatcher process keeps the scanner's files bound from one batch to the next: small
    # random batches, a flush between some, must write what the Python rules write, and the
    # files close once release_files() let them go.
    # Large queue files and no schedule topic: most batches stay in C (no Python record
    # unbinds the files between them).
    commitlog = CommitLog(str(tmp_path / "commitlog"), 32 * 1024)
    _append_random(commitlog, rand, count, topics=TOPICS[:3])
    fast_queues, fast_index, fast = _store(tmp_path / "fast", commitlog, keep_bindings=True,
                                           queue_units=1000)
    slow_queues, slow_index, slow = _store(tmp_path / "slow", commitlog, queue_units=1000)
    try:
        ends = [message_record.physical_offset + message_record.total_size
                for message_record in commitlog.record_iterator(0)]
        dispatched = 0
        while dispatched < count:
            step = rand.randrange(1, 9)
            dispatched += fast.dispatch_until(ends[min(dispatched + step, count) - 1])
            if rand.random() < 0.3:
                fast_queues.flush()
        assert dispatched == count
        for message_record in commitlog.record_iterator(0):
            slow._dispatch_one(message_record)
            message_record.body.release()
        for part in (fast_queues, slow_queues, fast_index, slow_index):
            part.flush()
        assert _files(tmp_path / "fast") == _files(tmp_path / "slow")
        for queue in fast_queues.queues():
            # Python's view of each file (what a flush covers) follows the scanner per batch.
            twin = slow_queues.find(queue.topic, queue.queue_id)
            assert queue.max_offset_in_queue() == twin.max_offset_in_queue()
            assert [f.wrote_position for f in queue.mapped_file_queue.mapped_files] == \
                [f.wrote_position for f in twin.mapped_file_queue.mapped_files]
            assert queue.last_dispatched_phy_offset == twin.last_dispatched_phy_offset
    finally:
        fast.release_files()
        for part in (fast_queues, slow_queues, fast_index, slow_index):
            part.close()
        commitlog.shutdown(0)


def test_layout_matches_the_store_layout_table():
    assert reput.LAYOUT == {
        "cq_unit_size": layout.CQ_STORE_UNIT_SIZE,
        "cq_unit_size_position": layout.CQ_UNIT_SIZE_POSITION,
        "cq_unit_tags_code_position": layout.CQ_UNIT_TAGS_CODE_POSITION,
        "index_header_size": layout.INDEX_HEADER_SIZE,
        "index_end_phy_offset_position": layout.INDEX_HEADER_END_PHY_OFFSET_POSITION,
        "index_count_position": layout.INDEX_HEADER_INDEX_COUNT_POSITION,
        "index_entry_size": layout.INDEX_ENTRY_SIZE,
        "index_entry_prev_position": layout.INDEX_ENTRY_PREV_INDEX_POSITION}
