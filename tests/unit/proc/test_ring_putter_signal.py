"""RingPutter wakes a sleeping appender once per loop turn, never loses that wake-up, and never
signals an appender that is awake; POP's revive records enter its ring without a task, the
turn's first at once, and without asking asyncio for the running loop each time; the position
waiters are among its sleep flags only where acknowledgements can be held. The deferred
wake-up (pybroker._fast.wake.DeferredSignal, which the send port's take calls in C) makes no
Python call, goes out once per turn whatever wake_at_once did, and is not lost to a loop that
closed with it pending.

Method: one asyncio loop runs RingPutter.put on real shared-memory rings (tmp_path); the test
plays the appender in the same process (consumer flag, peek, completion push) and counts the
eventfd's signals after the loop turn in which many puts committed; a profile hook counts the
Python calls of a deferral.
"""
import asyncio
import sys

import pytest

from pybroker.proc import shared
from pybroker.proc.ring_format import read_put_request, status_code
from pybroker.proc.ring_putter import _SIGNAL_DEFER_PUTS_MAX, RingPutter
from pybroker.proc.wake import DeferredSignal, WakeFd
from pybroker.store.control_block import ControlBlock
from pybroker.store.status import PutStatus

RECORD = b"\x00" * 96


@pytest.fixture
def plane(tmp_path):
    ring_region = shared.create_byte_ring(str(tmp_path / "send"), 1 << 16)
    done_region = shared.create_completion_ring(str(tmp_path / "done"), 256)
    control = ControlBlock(str(tmp_path / "control"), create=True)
    wake = WakeFd()
    yield ring_region.ring, done_region.ring, control, wake
    wake.close()
    control.close()
    ring_region.close()
    done_region.close()


def complete_all(ring, completions) -> int:
    """The appender's part: take every committed request and answer PUT_OK."""
    taken = 0
    count, start, end = ring.peek_batch(1 << 20)
    data = ring.data()
    for payload_offset, length in ring.iter_records(start, end):
        request_id = read_put_request(data, payload_offset, length).request_id
        completions.push(request_id, status_code(PutStatus.PUT_OK), 1, 0, 0)
        taken += 1
    ring.release(end)
    completions.commit()
    return taken


async def put_turn(plane, puts: int, appender_asleep: bool) -> tuple[int, int]:
    """``puts`` puts started in one loop turn; (signals after that turn, requests committed)."""
    ring, completions, control, wake = plane
    putter = RingPutter(ring, completions, control, wake, 0, (b"\x7f\x00\x00\x01", 10911))
    if appender_asleep:
        assert ring.set_consumer_sleeping() is False
    tasks = [asyncio.ensure_future(putter.put(RECORD, "TopicTest", 0, 1, 0, False))
             for _ in range(puts)]
    for _ in range(3):
        await asyncio.sleep(0)
    signals = wake.consume()
    committed = complete_all(ring, completions)
    putter.on_wake()
    results = await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert [result.status for result in results] == [PutStatus.PUT_OK] * puts
    return signals, committed


@pytest.mark.parametrize("puts", [1, 5, 40])
def test_sleeping_appender_gets_one_signal_per_turn(plane, puts):
    signals, committed = asyncio.run(put_turn(plane, puts, appender_asleep=True))
    assert committed == puts
    assert signals == 1


def test_awake_appender_gets_no_signal(plane):
    signals, committed = asyncio.run(put_turn(plane, 5, appender_asleep=False))
    assert (signals, committed) == (0, 5)


def test_signal_goes_out_within_the_turn_after_many_puts(plane):
    """A turn with more commits than the deferral bound signals at the bound, not at its end."""
    ring, completions, control, wake = plane

    async def main():
        putter = RingPutter(ring, completions, control, wake, 0, (b"\x7f\x00\x00\x01", 10911))
        assert ring.set_consumer_sleeping() is False
        seen = []
        for _ in range(40):
            offset = ring.reserve(8)
            ring.data()[offset:offset + 8] = b"\x00" * 8
            putter.after_commit(asyncio.get_running_loop(), ring.commit(), 1)
            seen.append(wake.consume())
        return seen
    seen = asyncio.run(main())
    assert sum(seen) == 1 and seen.index(1) == _SIGNAL_DEFER_PUTS_MAX - 1


def test_wake_at_once_signals_once_and_defers_nothing(plane):
    """A caller that has put everything it had (the ACK port after a read, RevivePuts) wakes
    a sleeping appender at once without a deferred wake-up left pending; an awake appender
    gets nothing; a wake-up deferred by an earlier put of the turn is given now, once (its
    queued handle finds nothing pending at the turn's end)."""
    ring, completions, control, wake = plane

    def commit():
        offset = ring.reserve(8)
        ring.data()[offset:offset + 8] = b"\x00" * 8
        return ring.commit()

    async def main():
        loop = asyncio.get_running_loop()
        putter = RingPutter(ring, completions, control, wake, 0, (b"\x7f\x00\x00\x01", 10911))
        pending = lambda: putter.appender_signal.pending  # noqa: E731
        assert ring.set_consumer_sleeping() is False
        putter.wake_at_once(commit())
        seen = [(wake.consume(), pending())]
        putter.wake_at_once(commit())               # the flag is taken: awake
        seen.append((wake.consume(), pending()))
        ring.set_consumer_sleeping()                # asleep again (records wait: no matter)
        putter.after_commit(loop, commit(), 1)      # deferred to the turn's end
        seen.append((wake.consume(), pending()))
        putter.wake_at_once(commit())
        seen.append((wake.consume(), pending()))
        await asyncio.sleep(0)
        seen.append((wake.consume(), pending()))
        return seen

    assert asyncio.run(main()) == [(1, False), (0, False), (0, True), (1, False), (0, False)]


def test_revive_records_of_a_turn_go_into_the_ring_without_a_task(plane):
    """POP's revive records (broker/pop/revive_log.py RevivePuts) over the real RingPutter:
    the turn's first record enters the ring through put_now at once and wakes a sleeping
    appender at once; the others enter it at the turn's end, one request per topic and queue;
    none has a task of its own; a lone record's waiter is resolved by the completion itself, a
    run's waiters each once it is stored; a refused record never reaches the ring; a ring
    without room falls back to put(), which waits for it."""
    from pybroker.broker.interfaces import RingFull
    from pybroker.broker.pop.revive_log import ReviveRecord, RevivePuts
    ring, completions, control, wake = plane

    async def main():
        putter = RingPutter(ring, completions, control, wake, 0, (b"\x7f\x00\x00\x01", 10911))
        puts = RevivePuts(putter)
        assert ring.set_consumer_sleeping() is False
        tasks_before = len(asyncio.all_tasks())
        alone = puts.put(ReviveRecord(bytearray(RECORD), "rmq_sys_wheel_timer", 0))
        # The turn's first record: in the ring, the sleeping appender woken, before the turn
        # ends.
        assert ring.peek_batch(1 << 20)[0] == 1 and wake.consume() == 1
        run = [puts.put(ReviveRecord(bytearray(RECORD), "rmq_sys_REVIVE_LOG_c", 1))
               for _ in range(3)]
        refused = puts.put(ReviveRecord(bytearray(RECORD), "t" * 300, 0))
        assert ring.peek_batch(1 << 20)[0] == 1
        await asyncio.sleep(0)                  # the turn ends: RevivePuts flushes
        assert len(asyncio.all_tasks()) == tasks_before
        assert wake.consume() == 0              # the appender's flag was taken by the first
        assert refused.done() and refused.result().status is PutStatus.MESSAGE_ILLEGAL
        assert (puts.puts_total, puts.records_total) == (3, 5)
        requests = []
        count, start, end = ring.peek_batch(1 << 20)
        for payload_offset, length in ring.iter_records(start, end):
            request = read_put_request(ring.data(), payload_offset, length)
            requests.append((request.topic, request.record_count))
        assert requests == [("rmq_sys_wheel_timer", 1), ("rmq_sys_REVIVE_LOG_c", 3)]
        assert not alone.done() and not any(future.done() for future in run)
        assert complete_all(ring, completions) == 2
        putter.on_wake()
        assert alone.done() and alone.result().status is PutStatus.PUT_OK
        results = await asyncio.wait_for(asyncio.gather(*run), 5)
        assert [result.status for result in results] == [PutStatus.PUT_OK] * 3

        # No room: the record waits in put() for the appender to free the ring.
        fillers = []
        while True:
            future = asyncio.get_running_loop().create_future()
            try:
                assert putter.put_now(RECORD, "filler", 0, 1, 0, False, future) is None
            except RingFull:
                break
            fillers.append(future)
        filler = len(fillers)
        waiting = puts.put(ReviveRecord(bytearray(RECORD), "rmq_sys_wheel_timer", 0))
        await asyncio.sleep(0)
        assert len(asyncio.all_tasks()) == tasks_before + 1 and not waiting.done()
        assert complete_all(ring, completions) == filler
        putter.on_wake()
        for _ in range(3):
            await asyncio.sleep(0)
        assert complete_all(ring, completions) == 1
        putter.on_wake()
        assert (await asyncio.wait_for(waiting, 5)).status is PutStatus.PUT_OK
        assert filler > 0 and all(future.result().status is PutStatus.PUT_OK
                                  for future in fillers)

    asyncio.run(main())


def test_revive_puts_ask_asyncio_for_the_loop_once(plane, monkeypatch):
    """asyncio.get_running_loop() is a getpid system call per call on Python 3.11: RevivePuts
    asks it once for its loop, and the putter's put_now never (it takes the waiter's future's
    own loop), whether a record goes at once or with its turn's others."""
    from pybroker.broker.pop.revive_log import ReviveRecord, RevivePuts
    ring, completions, control, wake = plane

    async def main():
        putter = RingPutter(ring, completions, control, wake, 0, (b"\x7f\x00\x00\x01", 10911))
        puts = RevivePuts(putter)
        futures = [puts.put(ReviveRecord(bytearray(RECORD), "rmq_sys_wheel_timer", 0))]
        asked = []
        real = asyncio.get_running_loop
        monkeypatch.setattr(asyncio, "get_running_loop", lambda: asked.append(1) or real())
        futures += [puts.put(ReviveRecord(bytearray(RECORD), "rmq_sys_wheel_timer", 0))
                    for _ in range(2)]
        await asyncio.sleep(0)                  # the turn's end: the two go as one put
        futures.append(puts.put(ReviveRecord(bytearray(RECORD), "rmq_sys_wheel_timer", 0)))
        monkeypatch.undo()
        assert asked == []
        assert (puts.puts_total, puts.records_total) == (3, 4)
        assert complete_all(ring, completions) == 3
        putter.on_wake()
        results = await asyncio.wait_for(asyncio.gather(*futures), 5)
        assert [result.status for result in results] == [PutStatus.PUT_OK] * 4

    asyncio.run(main())


@pytest.mark.parametrize("sync_flush, sync_master", [(False, False), (True, False),
                                                     (False, True)])
def test_position_waiters_only_where_acks_are_held(plane, sync_flush, sync_master):
    """The waiter bits on flushed_position / replicated_position are among the worker's sleep
    flags only when acknowledgements can be held (SYNC_FLUSH or SYNC_MASTER): an ASYNC_FLUSH
    master's wake-ups do not arm two flags whose target is never set."""
    from pybroker.proc.wake import PositionWatch
    ring, completions, control, wake = plane
    putter = RingPutter(ring, completions, control, wake, 0, (b"\x7f\x00\x00\x01", 10911),
                        sync_flush=sync_flush, sync_master=sync_master)
    watched = sorted(flag.field for flag in putter.sleep_flags()
                     if isinstance(flag, PositionWatch))
    held = sync_flush or sync_master
    assert watched == (["flushed_position", "replicated_position"] if held else [])
    assert len(putter.sleep_flags()) == 2 + len(watched)


def test_a_deferral_makes_no_python_call(plane):
    """after_commit and wake_at_once of the deferred wake-up are C through and through: no
    call_soon, no handle made, no callback frame (issue #28: 7 Python calls per read)."""
    wake = plane[3]
    deferred = DeferredSignal(wake, _SIGNAL_DEFER_PUTS_MAX)
    calls = []

    def hook(frame, event, arg):
        # Only frames of Python source count: the debug flavour compiles with linetrace, so
        # its Cython functions (and their generated attribute getters, `__get__` of
        # "stringsource") report frames too; those are C, not what this counts.
        if event == "call" and frame.f_code.co_filename.endswith(".py"):
            calls.append(frame.f_code.co_name)

    async def main():
        loop = asyncio.get_running_loop()
        deferred.after_commit(loop, False, 0)      # bound to the loop (its handle made)
        sys.setprofile(hook)
        try:
            deferred.after_commit(loop, True, 1)
            deferred.after_commit(loop, False, 2)
            pending = deferred.pending
            deferred.wake_at_once(False)
        finally:
            sys.setprofile(None)
        assert pending and not deferred.pending
        assert wake.consume() == 1
    asyncio.run(main())
    assert calls == []


def test_one_signal_per_turn_after_wake_at_once(plane):
    """A wake-up signalled early (wake_at_once, or the bound) and deferred again in the same
    turn goes out once more at the turn's end, not twice; an awake appender gets nothing."""
    wake = plane[3]
    deferred = DeferredSignal(wake, _SIGNAL_DEFER_PUTS_MAX)

    async def main():
        loop = asyncio.get_running_loop()
        deferred.after_commit(loop, True, 1)
        deferred.wake_at_once(False)
        deferred.after_commit(loop, True, 1)       # the appender slept again meanwhile
        assert wake.consume() == 1
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert wake.consume() == 1 and not deferred.pending
        deferred.after_commit(loop, False, 5)
        deferred.wake_at_once(False)
        await asyncio.sleep(0)
        assert wake.consume() == 0
        assert wake.signals_sent == 2
    asyncio.run(main())


def test_a_wake_up_left_in_a_closed_loop_is_not_carried_over(plane):
    """A loop closed with a wake-up pending (its turn never came) leaves nothing that holds
    back the next loop's: the first commit finding the appender asleep there is signalled at
    that loop's next turn."""
    wake = plane[3]
    deferred = DeferredSignal(wake, _SIGNAL_DEFER_PUTS_MAX)
    old = asyncio.new_event_loop()
    deferred.after_commit(old, True, 1)
    old.close()
    assert deferred.pending and wake.consume() == 0

    async def main():
        deferred.after_commit(asyncio.get_running_loop(), True, 1)
        await asyncio.sleep(0)
        return wake.consume()
    assert asyncio.run(main()) == 1
