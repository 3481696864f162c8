"""The wheel's gauges read counts another process is writing: a scrape (the supervisor's
Prometheus endpoint, brokerStatus) sums the timer worker's wheel while it parks messages.

Why: CI at cc24a4a, test_pop_pybroker's metrics scrape got no answer: numpy's nonzero counts the
non-zero counts, then fills, and raises RuntimeError when the count changed in between.

Method: a forked child flips slot counts of the same wheel file through its own mapping as
fast as it can for 1.5 s while this process asks all_num and nums_between; none may raise
(without the snapshot of the counts about half of the calls did).
"""
import os
import time

import pytest

from pybroker.store.timer_wheel import TimerWheel

pytestmark = [pytest.mark.dataplane, pytest.mark.timeout(60)]
PRECISION_MS = 1000
SLOTS_FLIPPED = 50_000
RUN_S = 1.5


def _flip(path: str) -> None:
    nums = TimerWheel(path, PRECISION_MS).slots["num"]
    end, step = time.monotonic() + RUN_S, 0
    while time.monotonic() < end:
        nums[step % SLOTS_FLIPPED] = step & 1
        nums[step * 7 % SLOTS_FLIPPED] = 1 - (step & 1)
        step += 1


def test_gauges_read_while_another_process_parks(tmp_path):
    path = str(tmp_path / "timerwheel")
    wheel = TimerWheel(path, PRECISION_MS)
    pid = os.fork()
    if pid == 0:
        try:
            _flip(path)
        finally:
            os._exit(0)
    calls = 0
    try:
        end = time.monotonic() + RUN_S
        while time.monotonic() < end:
            now_ms = int(time.time() * 1000)
            assert wheel.all_num(now_ms) >= 0
            assert len(wheel.nums_between(now_ms, 16)) == 16
            calls += 1
    finally:
        os.waitpid(pid, 0)
    assert calls > 10
