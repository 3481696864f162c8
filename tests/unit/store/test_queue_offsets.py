"""Goal: the queue offset table (pybroker/store/queue_offsets.py) gives a reader every consume
queue's max offset as the dispatcher wrote it: the number of records each queue received, over
rolled consume-queue files (the C scanner's and the Python rule's units), 0 for a queue that
does not exist or whose topic was deleted, nothing it cannot vouch for (before the dispatcher
is ready, a queue that did not fit); a batch's values appear only at Dispatcher.publish_offsets
(the dispatcher process calls it after the dispatched position), each the queue's latest.
Method: real records appended to a CommitLog in tmp_path and dispatched by the real
Dispatcher; the oracle is the count of records sent to each queue (and, per queue,
ConsumeQueue.max_offset_in_queue, the Python rule the scanner's C stores must equal).
"""
import mmap
import random

import pytest

from pybroker.store.commitlog import CommitLog
from pybroker.store.consume_queue import ConsumeQueueStore
from pybroker.store.dispatch import Dispatcher
from pybroker.proc.shared import SharedRegion
from pybroker.store.read_only_store import MessageStoreReader
from pybroker.store.settings import StoreConfig
from pybroker.store.queue_offsets import (ENTRIES_OFFSET, TABLE_BYTES, QueueOffsetReader,
                                          QueueOffsetWriter, initialise)
from tests.unit.store.test_dispatch import DELAYS, append

QUEUES = {"TopicA": 8, "TopicB-" + "b" * 120: 3}


@pytest.fixture
def parts(tmp_path):
    commitlog = CommitLog(str(tmp_path / "commitlog"), 64 * 1024)
    # 64 units a file: queues roll files, so the Python rule places some units.
    queues = ConsumeQueueStore(str(tmp_path), 64 * 20)
    region = SharedRegion.create(str(tmp_path / "queue-offsets"), TABLE_BYTES)
    initialise(region.buffer)
    writer = QueueOffsetWriter(region.buffer)
    dispatcher = Dispatcher(commitlog, queues, None, DELAYS, 0, keep_bindings=True,
                            offset_table=writer)
    yield commitlog, queues, dispatcher, writer
    dispatcher.release_files()
    commitlog.shutdown(0)
    queues.close()
    region.close()


def _send(commitlog, sent: dict, count: int, rand: random.Random) -> None:
    for _ in range(count):
        topic = rand.choice(sorted(QUEUES))
        queue_id = rand.randrange(QUEUES[topic])
        append(commitlog, b"x" * rand.randrange(1, 200), topic, queue_id)
        sent[(topic, queue_id)] = sent.get((topic, queue_id), 0) + 1


def _expected(reader: QueueOffsetReader, sent: dict) -> None:
    for topic, queue_count in QUEUES.items():
        for queue_id in range(queue_count + 1):       # one past: a queue that does not exist
            assert reader.max_offset(topic, queue_id) == sent.get((topic, queue_id), 0), \
                (topic, queue_id)
    assert reader.max_offset("NoSuchTopic", 0) == 0
    for topic, queue_count in QUEUES.items():      # a POP's queues in one call: the same
        queue_ids = list(range(queue_count + 1))[::-1]
        assert reader.max_offsets(topic, queue_ids) == \
            [reader.max_offset(topic, queue_id) for queue_id in queue_ids]


def _same_as_the_queues(reader: QueueOffsetReader, queues) -> None:
    for queue in queues.queues():
        assert reader.max_offset(queue.topic, queue.queue_id) == queue.max_offset_in_queue()


def test_a_reader_sees_every_queues_max_offset_as_dispatched(parts):
    commitlog, queues, dispatcher, writer = parts
    table = writer.buffer
    reader = QueueOffsetReader(table)
    assert reader.max_offset("TopicA", 0) is None          # not ready: the reader falls back
    assert reader.max_offsets("TopicA", [0, 1]) == [None, None]
    writer.republish(queues)
    writer.ready()
    rand, sent = random.Random(28), {}
    _expected(reader, sent)
    for _ in range(6):
        before = dict(sent)
        _send(commitlog, sent, 130, rand)
        dispatcher.dispatch_until(commitlog.max_offset())
        _expected(reader, before)            # nothing of the batch before publish_offsets
        moved = {key for key, count in sent.items() if count != before.get(key, 0)}
        assert dispatcher.publish_offsets() >= len(moved)
        _expected(reader, sent)
        _same_as_the_queues(reader, queues)
    assert dispatcher.publish_offsets() == 0       # nothing moved since
    _expected(reader, sent)
    assert max(len(queue.mapped_file_queue.mapped_files) for queue in queues.queues()) > 2
    # A reader attached later, and a writer restarted on the same table (no entry twice).
    _expected(QueueOffsetReader(table), sent)
    end = reader.end
    again = QueueOffsetWriter(table)
    again.republish(queues)
    later = QueueOffsetReader(table)
    _expected(later, sent)
    assert later.end == end


def test_a_deleted_topics_queues_read_zero(parts):
    commitlog, queues, dispatcher, writer = parts
    reader = QueueOffsetReader(writer.buffer)
    writer.republish(queues)
    writer.ready()
    rand, sent = random.Random(5), {}
    _send(commitlog, sent, 200, rand)
    dispatcher.dispatch_until(commitlog.max_offset())
    dispatcher.publish_offsets()
    _expected(reader, sent)
    dispatcher.release_files()
    queues.delete_topic("TopicA")
    dispatcher.forget_queues()
    writer.republish(queues)
    assert dispatcher.publish_offsets() == 0
    left = {key: count for key, count in sent.items() if key[0] != "TopicA"}
    _expected(reader, left)
    # The topic again (its queue offsets restarted, as the appender does at a deletion):
    # its queues count from 0, through the scanner once bound again.
    for queue_id in range(QUEUES["TopicA"]):
        commitlog.remove_topic_queue("TopicA", queue_id)
    for count in range(1, 4):
        append(commitlog, b"again", "TopicA", 1)
        dispatcher.dispatch_until(commitlog.max_offset())
        dispatcher.publish_offsets()
        assert reader.max_offset("TopicA", 1) == count
    _expected(reader, left | {("TopicA", 1): 3})


def test_a_queue_the_python_rule_moved_last_in_a_batch_holds_its_latest_value(parts):
    """A fresh queue's first unit and the unit that rolls its full file are the Python
    rule's; the units between are the scanner's. When the roll is the queue's last unit in a
    batch the scanner's slot still holds the full file's end: the Python rule's value must
    be the one that stays."""
    commitlog, queues, dispatcher, writer = parts
    reader = QueueOffsetReader(writer.buffer)
    writer.republish(queues)
    writer.ready()
    units_per_file = 64
    for _ in range(units_per_file + 1):
        append(commitlog, b"r", "TopicA", 3)
    append(commitlog, b"other", "TopicA", 4)
    dispatcher.dispatch_until(commitlog.max_offset())
    assert len(queues.find("TopicA", 3).mapped_file_queue.mapped_files) == 2
    dispatcher.publish_offsets()
    assert reader.max_offset("TopicA", 3) == units_per_file + 1
    assert reader.max_offset("TopicA", 4) == 1
    for _ in range(3):              # the scanner's stores after the roll, bound again
        append(commitlog, b"r", "TopicA", 3)
    dispatcher.dispatch_until(commitlog.max_offset())
    dispatcher.publish_offsets()
    assert reader.max_offset("TopicA", 3) == units_per_file + 4
    _same_as_the_queues(reader, queues)


def test_a_queue_that_does_not_fit_is_not_vouched_for(tmp_path):
    # Room for two entries of a 6-byte topic name (16-byte head + 8 bytes of name).
    region = SharedRegion.create(str(tmp_path / "small"), ENTRIES_OFFSET + 2 * 24)
    initialise(region.buffer)
    table = region.buffer
    try:
        writer, reader = QueueOffsetWriter(table), QueueOffsetReader(table)
        writer.ready()
        for queue_id, offset in enumerate((7, 9, 11)):
            writer.publish("Topic1", queue_id, offset)
        assert (reader.max_offset("Topic1", 0), reader.max_offset("Topic1", 1)) == (7, 9)
        assert reader.max_offset("Topic1", 2) is None
        assert reader.max_offsets("Topic1", [2, 1, 0]) == [None, 9, 7]
        writer.publish("Topic1", 1, 10)
        assert reader.max_offset("Topic1", 1) == 10
        with pytest.raises(ValueError):
            QueueOffsetReader(mmap.mmap(-1, 4096))       # no header: not a table
    finally:
        region.close()


def test_a_store_reader_counts_rest_from_the_table_and_asks_its_files_what_it_cannot(parts,
                                                                                   tmp_path):
    """A remoting worker's reader (rest_offsets): get_max_offsets_in_queues answers from the
    table, and from the queues' files for a queue the table cannot vouch for; its
    get_max_offset_in_queue keeps answering from the files."""
    commitlog, queues, dispatcher, writer = parts
    table = writer.buffer
    rand, sent = random.Random(11), {}
    _send(commitlog, sent, 300, rand)
    dispatcher.dispatch_until(commitlog.max_offset())
    queues.flush()
    settings = StoreConfig(store_path_root_dir=str(tmp_path),
                           mapped_file_size_commit_log=64 * 1024,
                           mapped_file_size_consume_queue=64 * 20)
    end = commitlog.max_offset()
    with MessageStoreReader(settings, end, positions=lambda: (end, end),
                            rest_offsets=QueueOffsetReader(table)) as reader:
        topic, queue_ids = "TopicA", list(range(QUEUES["TopicA"] + 1))
        expected = [sent.get((topic, queue_id), 0) for queue_id in queue_ids]
        assert reader.get_max_offsets_in_queues(topic, queue_ids) == expected   # not ready
        writer.republish(queues)
        writer.ready()
        writer.publish("TopicA", 0, 10_000)        # the table's word, not the files'
        assert reader.get_max_offsets_in_queues(topic, queue_ids) == [10_000] + expected[1:]
        assert reader.get_max_offset_in_queue(topic, 0) == expected[0]


class _MisplacedTable:
    """An offset table whose words are where no aligned word is (the scanner must refuse)."""

    def __init__(self, position: int):
        self.buffer = bytearray(ENTRIES_OFFSET + 64)
        self.position = position

    def value_position(self, topic: str, queue_id: int) -> int:
        return self.position

    def publish_queues(self, queues) -> None:
        pass


@pytest.mark.parametrize("position", [ENTRIES_OFFSET + 60, ENTRIES_OFFSET + 4])
def test_the_scanner_refuses_a_word_outside_the_table(tmp_path, position):
    commitlog = CommitLog(str(tmp_path / "commitlog"), 64 * 1024)
    queues = ConsumeQueueStore(str(tmp_path), 64 * 20)
    dispatcher = Dispatcher(commitlog, queues, None, DELAYS, 0, keep_bindings=True,
                            offset_table=_MisplacedTable(position))
    try:
        for _ in range(2):          # the first unit the Python rule's, the second the scanner's
            append(commitlog, b"x", "TopicA", 0)
        dispatcher.dispatch_until(commitlog.max_offset())
        with pytest.raises(ValueError, match="aligned word"):
            dispatcher.publish_offsets()
    finally:
        dispatcher.release_files()
        commitlog.shutdown(0)
        queues.close()


def test_after_an_overflow_a_new_queue_is_not_vouched_for_before_its_batch_is_published(
        tmp_path):
    """After an overflow an absent queue reads None (the files answer); binding a new queue
    to the scanner must not make it read 0 before its batch is published."""
    commitlog = CommitLog(str(tmp_path / "commitlog"), 64 * 1024)
    queues = ConsumeQueueStore(str(tmp_path), 64 * 20)
    region = SharedRegion.create(str(tmp_path / "small"), ENTRIES_OFFSET + 2 * 24)
    initialise(region.buffer)
    writer = QueueOffsetWriter(region.buffer)
    dispatcher = Dispatcher(commitlog, queues, None, DELAYS, 0, keep_bindings=True,
                            offset_table=writer)
    try:
        reader = QueueOffsetReader(region.buffer)
        writer.ready()
        writer.publish("TopicB-" + "b" * 120, 0, 5)       # does not fit: overflow
        for _ in range(3):          # the first unit the Python rule's, then the scanner's
            append(commitlog, b"x", "TopicA", 0)
        dispatcher.dispatch_until(commitlog.max_offset())
        assert reader.max_offset("TopicA", 0) is None
        dispatcher.publish_offsets()
        assert reader.max_offset("TopicA", 0) == 3
    finally:
        dispatcher.release_files()
        commitlog.shutdown(0)
        queues.close()
        region.close()
