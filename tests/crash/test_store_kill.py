"""A MessageStore writer killed with SIGKILL under SYNC_FLUSH loses no acknowledged message.

Method: a child process puts messages (body derived from their number, two queues) through
MessageStore with flushDiskType SYNC_FLUSH and writes "number queue_id queue_offset" to its stdout
pipe after each put returns (the acknowledgement). The parent kills it after a seeded random
delay, reopens the store (abort file present: abnormal recovery) and reads every acknowledged
message back at its queue offset; the next iteration appends to the same store. The seed is
printed for replay.
"""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from pybroker._fast import record as record_codec
from pybroker.store import lock_file
from pybroker.store.message_store import MessageStore
from pybroker.store.settings import StoreConfig
from pybroker.store.status import GetStatus

pytestmark = [pytest.mark.crash, pytest.mark.slow]

ITERATIONS = 3
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETTINGS = dict(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=64 * 20,
                max_hash_slot_num=64, max_index_num=512, flush_disk_type="SYNC_FLUSH")

CHILD = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, sys.argv[1])
    from pybroker._fast import record
    from pybroker.store.message_store import MessageStore
    from pybroker.store.settings import StoreConfig
    settings = StoreConfig(store_path_root_dir=sys.argv[2], **eval(sys.argv[3]))
    store = MessageStore(settings)
    store.start()
    os.write(1, b"ready\\n")   # the parent's kill timer starts only now (slow start-ups)
    number = int(sys.argv[4])
    host = bytes([127, 0, 0, 1])
    while True:
        body = (b"%08d|" % number) * (1 + number % 30)
        queue_id = number % 2
        buffer = bytearray(record.encoded_size(len(body), 5, 0, 0))
        record.encode_into(buffer, 0, b"Crash", queue_id, 0, body, b"", 0, 1, host, 1, host, 2)
        result = store.put_messages(buffer, "Crash", queue_id, 1, 0)
        assert result.status.name == "PUT_OK", result
        os.write(1, b"%d %d %d\\n" % (number, queue_id, result.queue_offset))
        number += 1
""")


def body_of(number: int) -> bytes:
    return (b"%08d|" % number) * (1 + number % 30)


def run_and_kill(root: str, first_number: int, delay_s: float) -> list[tuple[int, int, int]]:
    child = subprocess.Popen([sys.executable, "-c", CHILD, ROOT, root, repr(SETTINGS),
                              str(first_number)], stdout=subprocess.PIPE, cwd=ROOT)
    try:
        # Under load the interpreter may take longer than delay_s to start: time from "ready".
        assert child.stdout.readline() == b"ready\n", "writer did not start"
        time.sleep(delay_s)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        # Through the same buffered pipe as readline() (communicate() would skip its buffer).
        output = child.stdout.read()
        child.stdout.close()
        child.wait(timeout=30)
    lines = output.split(b"\n")[:-1]     # the last piece may be a torn line
    return [tuple(int(field) for field in line.split()) for line in lines]


def test_sigkill_under_sync_flush_loses_no_acked_message(tmp_path, rand):
    root = str(tmp_path / "store")
    acked: dict[tuple[int, int], int] = {}
    next_number = 0
    for _ in range(ITERATIONS):
        received = run_and_kill(root, next_number, rand.uniform(0.5, 1.5))
        assert received, "the child acknowledged nothing before the kill"
        for number, queue_id, queue_offset in received:
            acked[(queue_id, queue_offset)] = number
        assert lock_file.abort_file_exists(root)
        with MessageStore(StoreConfig(store_path_root_dir=root, **SETTINGS)) as store:
            assert store.last_recovery_abnormal
            for (queue_id, queue_offset), number in acked.items():
                result = store.get_messages("check", "Crash", queue_id, queue_offset, 1)
                assert result.status is GetStatus.FOUND, (queue_id, queue_offset, result)
                decoded = record_codec.decode(result.buffers[0], 0)
                assert bytes(decoded.body) == body_of(number)
                assert decoded.queue_offset == queue_offset
                result.release()
            next_number = sum(store.get_max_offset_in_queue("Crash", queue_id)
                              for queue_id in (0, 1))
        assert next_number >= len(acked)
