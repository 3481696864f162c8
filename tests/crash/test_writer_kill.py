"""A CommitLog writer killed with SIGKILL at random moments loses nothing it had flushed.

Method: a child process appends records (body derived from their index) to a CommitLog of 64 KiB
files, flushes every few records and reports each flushed record's index and physical offset on
its stdout pipe. The parent kills it after a seeded random delay, runs abnormal recovery and
checks that every reported record is intact, readable and at its reported offset, and that
appending continues right after the recovered end. The seed is printed for replay.
"""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from pybroker.store import lock_file, paths, recovery
from pybroker.store.checkpoint import StoreCheckpoint
from pybroker.store.commitlog import CommitLog

pytestmark = [pytest.mark.crash, pytest.mark.slow]

FILE_SIZE = 64 * 1024
ITERATIONS = 5
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = textwrap.dedent("""
    import os, sys, time
    from pybroker._fast import record
    from pybroker.store import lock_file, paths
    from pybroker.store.commitlog import CommitLog

    root, file_size, start_index = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    lock_file.create_abort_file(root)
    commitlog = CommitLog(paths.commitlog_dir(root), file_size)
    commitlog.load()
    max_offset = int(sys.argv[4])
    commitlog.set_wrote_and_flushed(max_offset)
    commitlog.set_topic_queue_table({"CrashTopic-0": start_index})
    os.write(1, b"ready\\n")   # the parent's kill timer starts only now (slow start-ups)
    host = bytes([127, 0, 0, 1])
    pending = []
    index = start_index
    while True:
        body = (b"%08d|" % index) * (1 + index % 40)
        size = record.encoded_size(len(body), 10, 0, 0)
        buffer = bytearray(size)
        record.encode_into(buffer, 0, b"CrashTopic", 0, 0, body, b"", 0, 1, host, 1, host, 2)
        result = commitlog.append_encoded(buffer, "CrashTopic", 0, 1, 0,
                                          time.time_ns() // 1_000_000)
        assert result.queue_offset == index, (result, index)
        pending.append((index, result.physical_offset))
        index += 1
        if index % 7 == 0:
            commitlog.flush()
            flushed = commitlog.flushed_where
            lines = [b"%d %d\\n" % item for item in pending if item[1] < flushed]
            pending = [item for item in pending if item[1] >= flushed]
            os.write(1, b"".join(lines))
""")


def expected_body(index: int) -> bytes:
    return (b"%08d|" % index) * (1 + index % 40)


def run_and_kill(root: str, start_index: int, max_offset: int, delay_s: float) -> list:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, root, str(FILE_SIZE), str(start_index), str(max_offset)],
        stdout=subprocess.PIPE, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    # Under load the interpreter may take longer than delay_s to start: time from "ready".
    assert child.stdout.readline() == b"ready\n", "writer did not start"
    time.sleep(delay_s)
    child.send_signal(signal.SIGKILL)
    # Read through the same buffered pipe as readline() above (communicate() would bypass
    # what that buffer already holds); the pipe ends when the killed child's end closes.
    output = child.stdout.read()
    child.stdout.close()
    child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL, "writer ended before it was killed"
    reported = []
    for line in output.split(b"\n"):
        fields = line.split()
        if len(fields) == 2:   # a torn last line is ignored
            reported.append((int(fields[0]), int(fields[1])))
    return reported


def recover_and_check(root: str, reported: list) -> tuple[int, int]:
    assert lock_file.abort_file_exists(root)
    commitlog = CommitLog(paths.commitlog_dir(root), FILE_SIZE)
    assert commitlog.load()
    checkpoint = StoreCheckpoint(paths.checkpoint_path(root))
    dispatched = []
    result = recovery.recover(commitlog, True, checkpoint,
                              lambda r: dispatched.append(r.queue_offset))
    assert dispatched == list(range(len(dispatched))), "re-dispatch is not in queue order"
    for index, physical_offset in reported:
        with commitlog.record_at(physical_offset) as message_record:
            assert message_record is not None, f"flushed record {index} lost"
            assert message_record.queue_offset == index
            assert bytes(message_record.body) == expected_body(index)
    next_index = len(dispatched)
    valid_end = result.valid_end_offset
    commitlog.shutdown(0)
    checkpoint.shutdown()
    lock_file.delete_abort_file(root)
    return next_index, valid_end


def test_sigkill_loses_nothing_flushed(tmp_path, rand):
    root = str(tmp_path)
    next_index, valid_end = 0, 0
    total_reported = 0
    for _ in range(ITERATIONS):
        reported = run_and_kill(root, next_index, valid_end, rand.uniform(0.3, 1.2))
        total_reported += len(reported)
        if reported:
            assert reported[0][0] == next_index
        next_index, valid_end = recover_and_check(root, reported)
        assert next_index >= (reported[-1][0] + 1 if reported else 0)
    assert total_reported > 0, "the writer never reported a flush"
