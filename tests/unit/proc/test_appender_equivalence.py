"""The appender's C drain loop stores exactly what the Python path (CommitLog.append_encoded)
stores, and the C reput derives exactly what the Python dispatch rules derive from it.

Method: a real appender object (pybroker.proc.appender._Appender) over real shared rings, a real
control block and a store in tmp_path, in this process (its loop body ``drain()`` is called
directly). Random put requests - topics with non-ASCII names, several queues, runs of 1-3
records, transaction PREPARED/COMMIT/ROLLBACK types, runs whose declared count is wrong, runs
larger than a file, UNIQ_KEY/KEYS/TAGS properties - go into two send rings and are drained with
the per-drain store time; the same requests, in the appender's order (ring 0's then ring 1's
per drain), are appended to a second CommitLog with ``append_encoded`` and that time. Small
CommitLog files force rolls. Checked: every completion against the Python AppendResult
(status, count, physical and queue offset), every CommitLog file byte for byte, the next queue
offsets; then the fast failure claim (the taken id published, withdrawn ids completed
TIMEOUT_CLEAN_QUEUE and never stored); then both CommitLogs are dispatched, the first by
Dispatcher.dispatch_until (C scanner), the second record by record with the Python rules, and
every consume-queue and index file must be identical.
"""
import pathlib

import pytest

from pybroker._fast import record as record_codec
from pybroker._fast import ring
from pybroker.config import StoreConfig
from pybroker.proc import ring_format
from pybroker.proc.appender import _Appender
from pybroker.proc.shared import create_byte_ring, create_completion_ring
from pybroker.proc.wake import DataPlaneWakes, WakeFd
from pybroker.protocol.constants import MessageSysFlag
from pybroker.schema import parse_delay_levels
from pybroker.stats.region import private_writer
from pybroker.store import layout, lock_file
from pybroker.store.commitlog import CommitLog
from pybroker.store.consume_queue import ConsumeQueueStore
from pybroker.store.control_block import APPENDER, ControlBlock
from pybroker.store.dispatch import Dispatcher
from pybroker.store.index_file import IndexService
from pybroker.store.status import PutStatus

HOST = bytes([127, 0, 0, 1])
FILE_SIZE = 16 * 1024
RINGS = 2
TOPICS = ["TopicA", "Tópico-ü", "q" * 100]
TYPES = [0, 0, 0, 0, int(MessageSysFlag.TRANSACTION_PREPARED_TYPE),
         int(MessageSysFlag.TRANSACTION_COMMIT_TYPE),
         int(MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)]
START_MS = 1_700_000_000_000


class Clock:
    def __init__(self):
        self.now = START_MS

    def __call__(self) -> int:
        return self.now


def _properties(rand) -> bytes:
    items = [b"UNIQ_KEY\x01" + ("%032X" % rand.getrandbits(128)).encode()]
    if rand.random() < 0.5:
        items.append(b"TAGS\x01" + rand.choice([b"TagA", "Tág".encode()]))
    if rand.random() < 0.4:
        items.append(b"KEYS\x01" + rand.choice([b"k1", b"k1 k2", "kéy".encode()]))
    return b"\x02".join(items) + b"\x02"


def _run(rand, topic: str, queue_id: int, sys_flag: int, count: int, body_max: int) -> bytes:
    run = bytearray()
    for _ in range(count):
        body = bytes(rand.randrange(256) for _ in range(rand.randrange(1, body_max)))
        properties = _properties(rand)
        chunk = bytearray(record_codec.encoded_size(len(body), len(topic.encode()),
                                                    len(properties), sys_flag))
        record_codec.encode_into(chunk, 0, topic.encode(), queue_id, 0, body, properties,
                                 sys_flag, START_MS - 5, HOST, 4242, HOST, 10911)
        run += chunk
    return bytes(run)


def _random_request(rand) -> dict:
    topic, queue_id = rand.choice(TOPICS), rand.randrange(3)
    sys_flag, count = rand.choice(TYPES), rand.randrange(1, 4)
    body_max = FILE_SIZE if rand.random() < 0.01 else 300     # sometimes larger than a file
    records = _run(rand, topic, queue_id, sys_flag, count, body_max)
    declared = count + 1 if rand.random() < 0.03 else count  # a lying count: MESSAGE_ILLEGAL
    return {"topic": topic, "queue_id": queue_id, "sys_flag": sys_flag, "count": declared,
            "records": records}


class Harness:
    """An appender over two rings, and a plain CommitLog appended by the Python path."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        run_dir = root / "run"
        run_dir.mkdir(parents=True)
        self.settings = StoreConfig(store_path_root_dir=str(root / "fast"),
                                    mapped_file_size_commit_log=FILE_SIZE)
        (root / "fast").mkdir()
        lock_file.create_abort_file(self.settings.store_path_root_dir)
        self.control = ControlBlock(str(run_dir / "control"), create=True)
        self.rings = [create_byte_ring(str(run_dir / f"send-{i}"), 1 << 18)
                      for i in range(RINGS)]
        self.completions = [create_completion_ring(str(run_dir / f"done-{i}"), 1024)
                            for i in range(RINGS)]
        self.wakes = DataPlaneWakes(WakeFd(), WakeFd(), WakeFd(),
                                    [WakeFd() for _ in range(RINGS)])
        self.clock = Clock()
        self.appender = _Appender(self.settings, [r.ring for r in self.rings],
                                  [c.ring for c in self.completions], self.control, self.wakes,
                                  self.clock, private_writer(APPENDER.stats_section))
        self.python_log = CommitLog(str(root / "slow" / "commitlog"), FILE_SIZE)
        self.next_id = 1

    def put(self, index: int, request: dict) -> int:
        ring = self.rings[index].ring
        topic = request["topic"].encode()
        offset = ring.reserve(ring_format.put_request_size(len(topic), len(request["records"])))
        assert offset >= 0
        request_id, self.next_id = self.next_id, self.next_id + 1
        ring_format.write_put_request(ring.data(), offset, request_id, request["queue_id"],
                                      request["count"], request["sys_flag"], False, topic,
                                      request["records"])
        ring.commit()
        return request_id

    def completed(self, index: int) -> list[tuple]:
        return self.completions[index].ring.drain()

    def close(self) -> None:
        self.appender.close()
        self.python_log.shutdown(0)
        for region in self.rings + self.completions:
            region.close()
        self.control.close()


@pytest.fixture
def harness(tmp_path):
    made = Harness(tmp_path)
    yield made
    made.close()


def _python_append(log: CommitLog, request: dict, store_timestamp: int):
    return log.append_encoded(bytearray(request["records"]), request["topic"],
                              request["queue_id"], request["count"], request["sys_flag"],
                              store_timestamp)


def _expected_completion(request_id: int, result) -> tuple:
    code = ring_format.status_code(result.status)
    if result.status is not PutStatus.PUT_OK:
        return (request_id, code, 0, 0, 0)
    return (request_id, code, result.count, result.physical_offset, result.queue_offset)


def _commitlog_files(directory: pathlib.Path) -> list[tuple[str, bytes]]:
    return [(path.name, path.read_bytes()) for path in sorted(directory.iterdir())]


def test_c_drain_stores_what_append_encoded_stores(harness, rand):
    statuses = set()
    for drain_number in range(40):
        harness.clock.now = START_MS + 3 * drain_number
        placed = [[], []]
        for _ in range(rand.randrange(0, 12)):
            index = rand.randrange(RINGS)
            request = _random_request(rand)
            placed[index].append((harness.put(index, request), request))
        taken = harness.appender.drain()
        assert taken == sum(len(requests) for requests in placed)
        for index in range(RINGS):
            expected = []
            for request_id, request in placed[index]:
                result = _python_append(harness.python_log, request, harness.clock.now)
                statuses.add(result.status)
                expected.append(_expected_completion(request_id, result))
            assert harness.completed(index) == expected
    assert {PutStatus.PUT_OK, PutStatus.MESSAGE_ILLEGAL} <= statuses
    fast_log = harness.appender.commitlog
    assert fast_log.max_offset() == harness.python_log.max_offset() > 3 * FILE_SIZE
    assert harness.control.written_position == fast_log.max_offset()
    fast_log.flush(0)
    harness.python_log.flush(0)
    assert _commitlog_files(pathlib.Path(harness.settings.commitlog_dir)) == \
        _commitlog_files(harness.root / "slow" / "commitlog")
    assert fast_log.topic_queue_table == harness.python_log.topic_queue_table
    _check_dispatch_is_the_same(harness, fast_log)


def _check_dispatch_is_the_same(harness: Harness, fast_log: CommitLog) -> None:
    delays = parse_delay_levels("1s 5s")
    stores = {}
    for side, log in (("fast", fast_log), ("slow", harness.python_log)):
        root = harness.root / f"derived-{side}"
        queues = ConsumeQueueStore(str(root), 64 * layout.CQ_STORE_UNIT_SIZE)
        index = IndexService(str(root / "index"), 17, 50)
        stores[side] = (root, queues, index, Dispatcher(log, queues, index, delays, 0))
    try:
        count = stores["fast"][3].dispatch_until(fast_log.max_offset())
        assert count > 100
        slow = stores["slow"][3]
        for message_record in harness.python_log.record_iterator(0):
            slow._dispatch_one(message_record)
            message_record.body.release()
        for _, queues, index, _ in stores.values():
            queues.flush()
            index.flush()
        assert _derived_files(stores["fast"][0]) == _derived_files(stores["slow"][0])
        assert len(_derived_files(stores["fast"][0])) > 8
    finally:
        for _, queues, index, _ in stores.values():
            queues.close()
            index.close()


def _derived_files(root: pathlib.Path) -> list[tuple[str, bytes]]:
    # Index files are named by their creation time: compare them in order, not by name.
    found = [(str(path.relative_to(root)), path.read_bytes())
             for path in sorted((root / "consumequeue").rglob("*")) if path.is_file()]
    index_dir = root / "index"
    found += [(f"index-{number}", path.read_bytes())
              for number, path in enumerate(sorted(index_dir.iterdir()))]
    return found


def test_withdrawn_requests_complete_busy_and_are_never_stored(harness, rand):
    control, index = harness.control, 1
    ids = [harness.put(index, _random_request_ok(rand)) for _ in range(6)]
    # The producer withdrew the first four before the appender claimed the batch.
    control.worker(index).cancel_request_id = ids[3]
    before = harness.appender.commitlog.max_offset()
    assert harness.appender.drain() == 6
    done = harness.completed(index)
    busy = ring_format.status_code(PutStatus.TIMEOUT_CLEAN_QUEUE)
    assert [(c[0], c[1]) for c in done[:4]] == [(i, busy) for i in ids[:4]]
    assert [c[1] for c in done[4:]] == [ring_format.status_code(PutStatus.PUT_OK)] * 2
    assert done[4][3] == before            # the first stored run starts where the log ended
    assert ring.load_u64(control.words(), control.taken_offset(index)) == ids[-1]
    # A claim publishes the batch's last id even when every request of it was withdrawn.
    later = [harness.put(index, _random_request_ok(rand)) for _ in range(2)]
    control.worker(index).cancel_request_id = later[-1]
    end = harness.appender.commitlog.max_offset()
    assert harness.appender.drain() == 2
    assert [c[1] for c in harness.completed(index)] == [busy, busy]
    assert harness.appender.commitlog.max_offset() == end
    assert ring.load_u64(control.words(), control.taken_offset(index)) == later[-1]


def _random_request_ok(rand) -> dict:
    topic, queue_id = rand.choice(TOPICS), rand.randrange(3)
    return {"topic": topic, "queue_id": queue_id, "sys_flag": 0, "count": 2,
            "records": _run(rand, topic, queue_id, 0, 2, 100)}
