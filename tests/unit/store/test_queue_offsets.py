"""Goal: the queue offset table (pybroker/store/queue_offsets.py) gives a reader every consume
queue's max offset as the dispatcher wrote it: the number of records each queue received, over
rolled consume-queue files (the C scanner's and the Python rule's units), 0 for a queue that
does not exist or whose topic was deleted, nothing it cannot vouch for (before the dispatcher
is ready, a queue that did not fit). Method: real records appended to a CommitLog in tmp_path
and dispatched by the real Dispatcher; the oracle is the count of records sent to each queue.
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
    dispatcher = Dispatcher(commitlog, queues, None, DELAYS, 0, keep_bindings=True,
                            track_moved=True)
    region = SharedRegion.create(str(tmp_path / "queue-offsets"), TABLE_BYTES)
    initialise(region.buffer)
    yield commitlog, queues, dispatcher, region.buffer
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


def test_a_reader_sees_every_queues_max_offset_as_dispatched(parts):
    commitlog, queues, dispatcher, table = parts
    writer, reader = QueueOffsetWriter(table), QueueOffsetReader(table)
    assert reader.max_offset("TopicA", 0) is None          # not ready: the reader falls back
    assert reader.max_offsets("TopicA", [0, 1]) == [None, None]
    writer.republish(queues)
    writer.ready()
    rand, sent = random.Random(28), {}
    _expected(reader, sent)
    for _ in range(6):
        _send(commitlog, sent, 130, rand)
        dispatcher.dispatch_until(commitlog.max_offset())
        writer.publish_queues(dispatcher.take_moved())
        _expected(reader, sent)
    assert dispatcher.take_moved() == []
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
    commitlog, queues, dispatcher, table = parts
    writer, reader = QueueOffsetWriter(table), QueueOffsetReader(table)
    writer.republish(queues)
    writer.ready()
    rand, sent = random.Random(5), {}
    _send(commitlog, sent, 200, rand)
    dispatcher.dispatch_until(commitlog.max_offset())
    writer.publish_queues(dispatcher.take_moved())
    _expected(reader, sent)
    dispatcher.release_files()
    queues.delete_topic("TopicA")
    dispatcher.forget_queues()
    writer.republish(queues)
    _expected(reader, {key: count for key, count in sent.items() if key[0] != "TopicA"})


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
    commitlog, queues, dispatcher, table = parts
    writer = QueueOffsetWriter(table)
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
