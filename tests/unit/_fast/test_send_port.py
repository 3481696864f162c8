"""The send port's take in C (pybroker._fast.send.port) leaves out RingPutter.after_commit,
FastFailure.committed and FastFailure.page_cache_busy only when they would do nothing: the
twins of docs/architecture.md's list.

Method: each Python method runs on real instances (made without their rings and control block:
the methods read only the attributes set here) in every state its first test reads; what it
changed (a wake-up scheduled, counted or sent, a timer armed, a drain judged too old) is
compared with the C test's answer taken before it ran.
"""
import asyncio
import itertools

from pybroker._fast.send.port import after_commit_has_work, committed_has_work
from pybroker.proc.fast_failure import FastFailure
from pybroker.proc.ring_putter import _SIGNAL_DEFER_PUTS_MAX, RingPutter


class _Wake:
    def __init__(self):
        self.signals = 0

    def signal(self):
        self.signals += 1


def test_after_commit_is_left_out_only_when_it_does_nothing():
    async def main():
        loop = asyncio.get_running_loop()
        for asleep, pending, deferred, puts in itertools.product(
                (False, True), (False, True), (0, _SIGNAL_DEFER_PUTS_MAX - 1), (1, 3)):
            putter = object.__new__(RingPutter)
            putter.appender_wake = _Wake()
            putter.signal_handle = loop.call_soon(lambda: None) if pending else None
            putter._deferred_puts = deferred
            in_c = after_commit_has_work(putter, asleep)
            before = (putter.signal_handle, putter._deferred_puts)
            putter.after_commit(loop, asleep, puts)
            changed = (putter.signal_handle, putter._deferred_puts) != before \
                or putter.appender_wake.signals != 0
            assert in_c == changed, (asleep, pending, deferred, puts)
            if putter.signal_handle is not None:
                putter.signal_handle.cancel()
    asyncio.run(main())


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
