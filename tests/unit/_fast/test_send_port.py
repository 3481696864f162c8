"""The send port's take in C (pybroker._fast.send.port) leaves out FastFailure.committed and
FastFailure.page_cache_busy only when they would do nothing: the twins of docs/architecture.md's
list. (The appender's wake-up it calls in C is RingPutter.after_commit's own object,
pybroker._fast.wake.DeferredSignal: no twin; tests/unit/proc/test_ring_putter_signal.py.)

Method: each Python method runs on real instances (made without their rings and control block:
the methods read only the attributes set here) in every state its first test reads; what it
changed (a wake-up scheduled, counted or sent, a timer armed, a drain judged too old) is
compared with the C test's answer taken before it ran.
"""
import asyncio
import itertools

from pybroker._fast.send.port import committed_has_work
from pybroker.proc.fast_failure import FastFailure


def test_committed_is_left_out_only_when_it_does_nothing():
    async def main():
        loop = asyncio.get_running_loop()
        for armed, wait_s in itertools.product((False, True), (None, 0.2, 0.0)):
            failure = object.__new__(FastFailure)
            failure.timer = loop.call_later(60, lambda: None) if armed else None
            failure.wait_s = wait_s
            in_c = committed_has_work(failure)
            before = failure.timer
            failure.committed(loop)
            assert in_c == (failure.timer is not before), (armed, wait_s)
            if failure.timer is not None:
                failure.timer.cancel()
    asyncio.run(main())


def test_no_drain_running_is_never_too_old():
    """busy_since_ms 0 (no drain running): the C take sets divert False without asking."""
    for now_ms, limit_ms in ((0, 0), (10**13, 0), (10**13, 1000), (-5, -10)):
        failure = object.__new__(FastFailure)
        failure.clock_ms = lambda now=now_ms: now
        failure.page_cache_busy_ms = limit_ms
        assert failure.page_cache_busy(0) is False
        assert failure.page_cache_busy(now_ms - limit_ms - 1) is True
