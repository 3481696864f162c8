"""The debug build's checks fire: a fast path that breaks its own invariant aborts, naming it.

Method: only in the debug build (``make debug``; ``pybroker._fast.ring.DEBUG_CHECKS``), where
``make test-debug`` runs it: a forked child plays a second producer of a byte ring - it moves the
shared producer cursor past the ring's own producer, which then commits - and must die of
SIGABRT with the check's message on its stderr. The normal build compiles no such check (it
would cost the hot path), so there the test is skipped.
"""
import faulthandler
import mmap
import os
import signal
import sys

import pytest

from pybroker._fast import ring

pytestmark = [pytest.mark.dataplane,
              pytest.mark.skipif(not ring.DEBUG_CHECKS,
                                 reason="the checks exist in the debug build only "
                                        "(make test-debug)")]

CAPACITY_BYTES = 4096


def test_a_second_producer_of_a_ring_aborts_the_process(tmp_path):
    log = tmp_path / "stderr"
    pid = os.fork()
    if pid == 0:
        try:
            faulthandler.disable()      # the check's own message is the report wanted here
            os.dup2(os.open(log, os.O_WRONLY | os.O_CREAT, 0o600), 2)
            region = mmap.mmap(-1, ring.ByteRing.region_size(CAPACITY_BYTES))
            producer = ring.ByteRing(region, True, CAPACITY_BYTES)
            producer.put(b"first")
            producer.commit()
            at = ring.RING_PRODUCER_CURSOR_OFFSET
            region[at:at + 8] = (1 << 20).to_bytes(8, sys.byteorder)   # another producer
            producer.put(b"second")
            producer.commit()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGABRT, status
    assert "byte ring: the producer cursor would move back" in log.read_text()
