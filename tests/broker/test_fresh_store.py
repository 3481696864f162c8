"""A fresh store with Java's default file sizes costs kilobytes of disk, not 1.5 GB.

Method: a real `pybroker standalone` with RocketMQ's default sizes (1 GiB CommitLog files,
300,000-unit ConsumeQueue files, 5M-slot / 20M-entry IndexFiles), its store in tmp_path. Disk
use is the kernel's count of allocated blocks (``st_blocks``) of every file, read while serving
(the run/ directory of shared-memory rings is runtime state, counted apart) and again after a
clean stop. A hundred messages with keys are sent and waited for (the dispatched queue offsets
reach 100) so the CommitLog, ConsumeQueue and IndexFile all exist at full apparent size, and
the flusher's pre-fault window must show in the CommitLog's allocated blocks.
"""
import os
import time

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.client import sync
from pybroker.client.message import Message
from pybroker.store.prefault import WINDOW_MIN_BYTES

pytestmark = [pytest.mark.slow]
FRESH_STORE_MAX_BYTES = 10 * 1000 * 1000
JAVA_DEFAULT_SIZES = {
    "mappedFileSizeCommitLog": str(1 << 30),
    "mappedFileSizeConsumeQueue": str(300_000 * 20),
    "maxHashSlotNum": "5000000",
    "maxIndexNum": "20000000",
    "maxMessageSize": str(4 << 20),
}
MESSAGES = 100


def _usage(root: str, skip_dir: str | None = None) -> tuple[int, int]:
    """(allocated bytes, apparent bytes) of the files under ``root``."""
    allocated = apparent = 0
    for directory, subdirectories, files in os.walk(root):
        if skip_dir is not None and skip_dir in subdirectories:
            subdirectories.remove(skip_dir)
        for name in files:
            status = os.stat(os.path.join(directory, name))
            allocated += status.st_blocks * 512
            apparent += status.st_size
    return allocated, apparent


def _wait_dispatched(admin, topic: str, count: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        stats = admin.topic_stats(topic)
        if sum(queue.max_offset for queue in stats.values()) >= count:
            return
        assert time.monotonic() < deadline, f"{topic}: {stats}"
        time.sleep(0.1)


def test_fresh_store_with_java_default_sizes_takes_kilobytes(tmp_path):
    broker = StandaloneBroker(tmp_path, JAVA_DEFAULT_SIZES)
    with broker:
        empty_allocated, _ = _usage(broker.store_dir, skip_dir="run")
        with sync.Producer("fresh_store_producer", broker.namesrv_addr) as producer:
            for index in range(MESSAGES):
                producer.send(Message("FreshStore", b"fresh-%d" % index, keys=f"key-{index}"))
        with sync.Admin(broker.namesrv_addr) as admin:
            _wait_dispatched(admin, "FreshStore", MESSAGES)
        # The flusher keeps a window of CommitLog pages faulted in ahead of the appender.
        commitlog = os.path.join(broker.store_dir, "commitlog", "0" * 20)
        deadline = time.monotonic() + 10
        while os.stat(commitlog).st_blocks * 512 < WINDOW_MIN_BYTES:
            assert time.monotonic() < deadline, os.stat(commitlog).st_blocks * 512
            time.sleep(0.1)
        allocated, apparent = _usage(broker.store_dir, skip_dir="run")
        print(f"fresh store: {empty_allocated} bytes empty, {allocated} bytes allocated "
              f"for {apparent} apparent after {MESSAGES} messages")
        # The full-size files exist, so the small figure is sparseness, not absence.
        assert apparent > (1 << 30) + 400_000_000
        assert empty_allocated < FRESH_STORE_MAX_BYTES
        assert allocated < FRESH_STORE_MAX_BYTES
    assert broker.process.returncode == 0
    # A clean stop leaves no runtime state: the run/ directory goes with its regions.
    assert not os.path.exists(os.path.join(broker.store_dir, "run"))
    stopped_allocated, _ = _usage(broker.store_dir)
    assert stopped_allocated < FRESH_STORE_MAX_BYTES
