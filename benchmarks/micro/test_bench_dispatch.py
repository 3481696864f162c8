"""The dispatcher's per-message cost: Dispatcher.dispatch_until (the C reput scanner) next to
the per-record Python rules it replaced (decode + _dispatch_one), 128 B bodies with the
properties a Java producer sends (UNIQ_KEY is indexed for every message), 8 queues.

Method: 20,000 records are appended to a real CommitLog in tmp_path once; each round starts with
fresh consume queues and a fresh index whose files the first 1,000 records create (setup, not
timed: creating directories and files is a per-queue cost, slow on this VM), then dispatches
the other 19,000 (timed; first touches of consume-queue and index pages included).
Time per message = round time / 19,000; compare the two cases within one run.
"""
import itertools

from pybroker._fast import record
from pybroker.store.commitlog import CommitLog
from pybroker.store.consume_queue import ConsumeQueueStore
from pybroker.schema import parse_delay_levels
from pybroker.store.dispatch import Dispatcher
from pybroker.store.index_file import IndexService

HOST = bytes([127, 0, 0, 1])
TOPIC = "BenchmarkTest"
MESSAGES = 20_000
QUEUES = 8
WARM = 1_000                 # records dispatched in setup: they create the files
DELAYS = parse_delay_levels("1s 5s")


def _commitlog(tmp_path) -> CommitLog:
    commitlog = CommitLog(str(tmp_path / "commitlog"), 64 << 20)
    for number in range(MESSAGES):
        properties = (b"UNIQ_KEY\x01AC1100021F2A18B4AAC27E1B4C%010X\x02WAIT\x01true\x02"
                      b"MSG_REGION\x01DefaultRegion\x02TRACE_ON\x01true\x02" % number)
        size = record.encoded_size(128, len(TOPIC), len(properties), 0)
        buffer = bytearray(size)
        record.encode_into(buffer, 0, TOPIC.encode(), number % QUEUES, 0, b"\xab" * 128,
                           properties, 0, 1_700_000_000_000, HOST, 4242, HOST, 10911)
        commitlog.append_encoded(buffer, TOPIC, number % QUEUES, 1, 0, 1_700_000_000_000)
    return commitlog


class _Fresh:
    """A fresh consume-queue store and index per round (files under a new folder)."""

    def __init__(self, tmp_path, commitlog):
        self.tmp_path = tmp_path
        self.commitlog = commitlog
        self.rounds = itertools.count()
        self.dispatcher = None
        self.parts = []

    def setup(self):
        for part in self.parts:
            part.close()
        root = self.tmp_path / f"round-{next(self.rounds)}"
        queues = ConsumeQueueStore(str(root))
        index = IndexService(str(root / "index"), 500_000, 2_000_000)
        self.parts = [queues, index]
        self.dispatcher = Dispatcher(self.commitlog, queues, index, DELAYS, 0)
        self.warm_end = 0
        for number, message_record in enumerate(self.commitlog.record_iterator(0)):
            self.warm_end = message_record.physical_offset
            message_record.body.release()
            if number == WARM:
                break
        assert self.dispatcher.dispatch_until(self.warm_end) == WARM


def test_c_reput(benchmark, figure, tmp_path):
    fresh = _Fresh(tmp_path, _commitlog(tmp_path))

    def dispatch():
        assert fresh.dispatcher.dispatch_until(fresh.commitlog.max_offset()) == MESSAGES - WARM

    benchmark.pedantic(dispatch, setup=fresh.setup, rounds=5, iterations=1, warmup_rounds=1)
    figure("us_per_message", lambda seconds: seconds * 1e6 / (MESSAGES - WARM), "mean")


def test_python_rules(benchmark, figure, tmp_path):
    fresh = _Fresh(tmp_path, _commitlog(tmp_path))

    def dispatch():
        for message_record in fresh.commitlog.record_iterator(fresh.warm_end):
            fresh.dispatcher._dispatch_one(message_record)
            message_record.body.release()

    benchmark.pedantic(dispatch, setup=fresh.setup, rounds=3, iterations=1, warmup_rounds=1)
    figure("us_per_message", lambda seconds: seconds * 1e6 / (MESSAGES - WARM), "mean")
