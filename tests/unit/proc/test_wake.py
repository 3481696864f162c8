"""Eventfd wake-ups with the sleep-flag protocol are never lost and never sent to an awake peer.

Method: real forked processes play ping-pong through a byte ring and a completion ring, so every
round races a sleeper's flag-fence-recheck against the peer's publish-fence-check; a position
watcher sleeps on a control-block field a forked publisher advances; an asyncio loop drains
completions through loop.add_reader; a Pacer on a hand-driven clock paces only while work
keeps coming and hands back to the flags at the first empty pass, and a paced consumer of a
forked publisher loses nothing. Every blocking wait has a timeout that, if it expires with
nothing to do, fails the test, and the whole exchange runs under a deadline.
"""
import asyncio
import multiprocessing
import os
import signal
import threading
import time

import pytest

from pybroker._fast.ring import ByteRing, CompletionRing
from pybroker.proc import shared
from pybroker.proc.wake import (AsyncWakeReader, ConsumerSide, Pacer, PositionWatch, Sleeper,
                                WakeFd, WhileWanted, arm_flags, disarm_flags, signal_mask)
from pybroker.store.control_block import ControlBlock

FORK = multiprocessing.get_context("fork")
WAIT_MS = 5000
DEADLINE_S = 60


def join_all(processes, errors_dir):
    deadline = time.monotonic() + DEADLINE_S
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    alive = [p for p in processes if p.is_alive()]
    for process in alive:
        process.kill()
        process.join()
    messages = [p.read_text() for p in sorted(errors_dir.glob("*.err"))]
    assert not alive, f"deadline of {DEADLINE_S} s passed: {messages}"
    assert [p.exitcode for p in processes] == [0] * len(processes), messages


def fail(error_path, message: str, code: int = 3) -> None:
    error_path.write_text(message)
    os._exit(code)


def test_wake_fd_signal_wait_and_timeout():
    wake = WakeFd()
    started = time.monotonic()
    assert wake.wait(20) is False
    assert 0.015 <= time.monotonic() - started < 2
    wake.signal()
    wake.signal()
    assert wake.consume() == 2 and wake.consume() == 0
    wake.signal()
    assert wake.wait(None) is True
    assert (wake.signals_sent, wake.wakeups) == (3, 2)
    wake.close()
    wake.close()


class _Raised(Exception):
    pass


@pytest.mark.parametrize("handler", ["signals", "nothing", "raises"])
def test_wake_fd_wait_runs_signal_handlers(handler):
    """A signal during wait() runs its Python handler there (the stop request's handler
    signals the eventfd: stop_on_sigterm); a handler that does nothing lets the wait go on
    for the rest of its timeout, one that raises ends it with the exception."""
    wake = WakeFd()

    def on_signal(signal_number, frame):
        if handler == "signals":
            wake.signal()
        elif handler == "raises":
            raise _Raised()
    previous = signal.signal(signal.SIGUSR2, on_signal)
    timer = threading.Timer(0.05, signal.pthread_kill,
                            (threading.main_thread().ident, signal.SIGUSR2))
    try:
        started = time.monotonic()
        timer.start()
        if handler == "raises":
            with pytest.raises(_Raised):
                wake.wait(WAIT_MS)
            assert time.monotonic() - started < 2
        elif handler == "signals":
            assert wake.wait(WAIT_MS) is True
            assert time.monotonic() - started < 2
        else:
            assert wake.wait(300) is False
            assert 0.29 <= time.monotonic() - started < 2
    finally:
        timer.join()
        signal.signal(signal.SIGUSR2, previous)
        wake.close()


def test_sleeper_returns_at_once_when_work_is_there():
    region = bytearray(ByteRing.region_size(256))
    producer, consumer = ByteRing(region, True, 256), ByteRing(region, False)
    wake = WakeFd()
    sleeper = Sleeper(wake, [ConsumerSide(consumer)])
    producer.put(b"x")
    assert producer.commit() is False          # consumer awake: no signal needed
    started = time.monotonic()
    assert sleeper.sleep(WAIT_MS) is True      # the re-check found the record
    assert time.monotonic() - started < 1
    assert producer.put(b"y") >= 0
    assert producer.commit() is False          # the flag was cleared on return
    assert sleeper.sleep(0) is True
    count, _, end = consumer.peek_batch()
    consumer.release(end)
    assert sleeper.sleep(10) is False          # nothing: times out
    wake.close()


def run_pinger(paths, rounds, work_fd, done_fd, error_path):
    requests = shared.attach_byte_ring(paths[0]).ring
    completions = shared.attach_completion_ring(paths[1]).ring
    sleeper = Sleeper(done_fd, [ConsumerSide(completions)])
    for round_index in range(rounds):
        requests.put(round_index.to_bytes(8, "little"))
        if requests.commit():
            work_fd.signal()
        while True:
            answers = completions.drain()
            if answers:
                break
            if not sleeper.sleep(WAIT_MS):
                fail(error_path, f"pinger: wake-up lost in round {round_index}")
        if answers != [(round_index, 0, 1, round_index * 8, round_index)]:
            fail(error_path, f"pinger: round {round_index} answered {answers}", 4)
    error_path.with_suffix(".signals").write_text(str(work_fd.signals_sent))


def run_ponger(paths, rounds, work_fd, done_fd, error_path):
    requests = shared.attach_byte_ring(paths[0]).ring
    completions = shared.attach_completion_ring(paths[1]).ring
    sleeper = Sleeper(work_fd, [ConsumerSide(requests)])
    data = requests.data()
    answered = 0
    while answered < rounds:
        count, start, end = requests.peek_batch()
        if count == 0:
            if not sleeper.sleep(WAIT_MS):
                fail(error_path, f"ponger: wake-up lost after {answered} rounds")
            continue
        for offset, length in requests.iter_records(start, end):
            request_id = int.from_bytes(data[offset:offset + length], "little")
            completions.push(request_id, 0, 1, request_id * 8, request_id)
            answered += 1
        requests.release(end)
        if completions.commit():
            done_fd.signal()
    del data


@pytest.mark.dataplane
def test_ping_pong_races_lose_no_wake_up(tmp_path):
    rounds = 3000
    paths = [str(tmp_path / "requests.ring"), str(tmp_path / "completions.ring")]
    work_fd, done_fd = WakeFd(), WakeFd()
    with shared.create_byte_ring(paths[0], 4096), shared.create_completion_ring(paths[1], 64):
        processes = [
            FORK.Process(target=run_ponger, args=(paths, rounds, work_fd, done_fd,
                                                   tmp_path / "ponger.err")),
            FORK.Process(target=run_pinger, args=(paths, rounds, work_fd, done_fd,
                                                   tmp_path / "pinger.err")),
        ]
        for process in processes:
            process.start()
        join_all(processes, tmp_path)
    # At most one signal per round: the protocol never signals per message to an awake peer.
    assert int((tmp_path / "pinger.signals").read_text()) <= rounds
    work_fd.close()
    done_fd.close()


def run_position_publisher(path, steps, wake_fds, error_path):
    with ControlBlock(path, create=False) as block:
        for step in range(1, steps + 1):
            mask = block.publish("written_position", step * 100, monotonic=True)
            signal_mask(mask, wake_fds)
            if step % 64 == 0:
                os.sched_yield()


def run_position_watcher(path, steps, slot, wake_fd, error_path):
    with ControlBlock(path, create=False) as block:
        watch = PositionWatch(block, "written_position", slot)
        sleeper = Sleeper(wake_fd, [watch])
        seen = 0
        while seen < steps * 100:
            watch.target = seen + 1
            if block.written_position < watch.target and not sleeper.sleep(WAIT_MS):
                fail(error_path, f"watcher {slot}: wake-up lost at position {seen}")
            position = block.written_position
            if position < seen:
                fail(error_path, f"watcher {slot}: position went back to {position}", 4)
            seen = position
        block.worker(slot).add(wakeups=wake_fd.wakeups)


@pytest.mark.dataplane
def test_position_watchers_are_woken_by_the_publisher(tmp_path):
    path = str(tmp_path / "control")
    steps = 5000
    wake_fds = [WakeFd() for _ in range(3)]
    with ControlBlock(path, create=True) as block:
        watchers = [FORK.Process(target=run_position_watcher,
                                 args=(path, steps, slot, wake_fds[slot],
                                       tmp_path / f"watcher{slot}.err"))
                    for slot in (1, 2)]
        publisher = FORK.Process(target=run_position_publisher,
                                 args=(path, steps, wake_fds, tmp_path / "publisher.err"))
        for process in watchers + [publisher]:
            process.start()
        join_all(watchers + [publisher], tmp_path)
        assert block.written_position == steps * 100
        assert block.waiters("written_position") & 0b110 in (0, 0b010, 0b100, 0b110)
        assert block.worker(0).wakeups == 0
    for wake in wake_fds:
        wake.close()


def test_flags_while_wanted_are_asked_only_then(tmp_path):
    """WhileWanted: unwanted, its flags are neither set nor cleared (no waiter bit); wanted,
    they are set and cleared with the sleeper's other flags (arm_flags / disarm_flags, as
    Sleeper.sleep arms them), and a publish they wait for wakes the sleeper."""
    wake = WakeFd()
    wanted = []
    with ControlBlock(str(tmp_path / "control"), create=True) as block:
        watch = PositionWatch(block, "dispatched_position", 1, lambda: 100)
        held = WhileWanted([watch], lambda: bool(wanted))
        sleeper = Sleeper(wake, [held])
        assert not arm_flags(sleeper.flags)
        assert not held.armed and not watch.armed
        assert block.waiters("dispatched_position") == 0
        disarm_flags(sleeper.flags)
        wanted.append(1)
        assert not arm_flags(sleeper.flags)
        assert held.armed and watch.armed
        assert block.waiters("dispatched_position") == 0b10
        # The publisher takes the waiter bit: it would signal this slot's eventfd.
        assert block.publish("dispatched_position", 100) == 0b10
        disarm_flags(sleeper.flags)
        assert not held.armed and block.waiters("dispatched_position") == 0
        assert arm_flags(sleeper.flags), "the position reached its target: work at once"
        assert not held.armed and block.waiters("dispatched_position") == 0
    wake.close()


def test_signal_mask_signals_each_bit_once():
    wake_fds = [WakeFd() for _ in range(5)]
    assert signal_mask(0b10110, wake_fds) == 3
    assert [w.consume() for w in wake_fds] == [0, 1, 1, 0, 1]
    for wake in wake_fds:
        wake.close()


def run_completion_producer(path, total, done_fd, seed):
    completions = shared.attach_completion_ring(path).ring
    pushed = 0
    burst = 1
    while pushed < total:
        burst = (burst * 1103515245 + seed) % 37 + 1
        entries = [(pushed + i, 0, 1, 0, pushed + i) for i in range(min(burst, total - pushed))]
        taken = completions.push_many(entries)
        pushed += taken
        if completions.commit():
            done_fd.signal()
        if taken < len(entries) or burst % 5 == 0:
            os.sched_yield()


@pytest.mark.dataplane
def test_asyncio_reader_drains_every_completion(tmp_path, rand):
    path = str(tmp_path / "completions.ring")
    total = 20_000
    done_fd = WakeFd()
    with shared.create_completion_ring(path, 256) as region:
        consumer = region.ring
        received = []

        async def main():
            loop = asyncio.get_running_loop()
            finished = loop.create_future()

            def on_wake():
                received.extend(consumer.drain())
                if len(received) >= total and not finished.done():
                    finished.set_result(None)

            reader = AsyncWakeReader(loop, done_fd, [ConsumerSide(consumer)], on_wake)
            reader.start()
            producer = FORK.Process(target=run_completion_producer,
                                    args=(path, total, done_fd, rand.randrange(1 << 16)))
            producer.start()
            try:
                await asyncio.wait_for(finished, DEADLINE_S)
            finally:
                reader.stop()
                producer.join(DEADLINE_S)
            assert producer.exitcode == 0
            return reader.rounds

        rounds = asyncio.run(main())
    assert [entry[0] for entry in received] == list(range(total))
    assert 0 < rounds <= total
    done_fd.close()


def test_sleep_async_timeout_and_signal():
    region = bytearray(CompletionRing.region_size(4))
    producer, consumer = CompletionRing(region, True, 4), CompletionRing(region, False)
    wake = WakeFd()
    sleeper = Sleeper(wake, [ConsumerSide(consumer)])

    async def main():
        assert await sleeper.sleep_async(10) is False
        loop = asyncio.get_running_loop()

        def publish():
            producer.push(7, 0, 1, 0, 0)
            if producer.commit():
                wake.signal()

        loop.call_later(0.01, publish)
        assert await sleeper.sleep_async(WAIT_MS) is True
        assert consumer.drain() == [(7, 0, 1, 0, 0)]

    asyncio.run(main())
    wake.close()


@pytest.mark.parametrize("bad", [-1, 64])
def test_position_watch_rejects_bad_slots(tmp_path, bad):
    with ControlBlock(str(tmp_path / "control"), create=True) as block:
        with pytest.raises(ValueError, match="worker slot"):
            PositionWatch(block, "flushed_position", bad).set_sleeping()


def test_pacer_paces_only_while_work_keeps_coming():
    now = [0]
    pacer = Pacer(1, 2_000_000, clock_ns=lambda: now[0])
    # Idle, then a lone message: the flags (None), never a timer.
    assert pacer.caught_up(False) is None
    assert pacer.caught_up(True) is None and not pacer.pacing
    now[0] += 10_000_000                      # the next one 10 ms later: still the flags
    assert pacer.caught_up(True) is None and not pacer.pacing
    now[0] += 500_000                         # 0.5 ms later: work keeps coming, pace
    assert pacer.caught_up(True) == 1 and pacer.pacing
    for _ in range(5):                        # each paced pass found work: go on pacing
        now[0] += 1_000_000
        assert pacer.caught_up(True) == 1
    now[0] += 1_000_000
    assert pacer.caught_up(False) is None and not pacer.pacing    # an empty pass: flags
    assert pacer.paced_waits == 6
    now[0] += 3_000_000                       # the next batch after the gap: flags again
    assert pacer.caught_up(True) is None and not pacer.pacing
    now[0] += 2_000_000                       # exactly the gap is not "closer than" it
    assert pacer.caught_up(True) is None
    now[0] += 1_999_999
    assert pacer.caught_up(True) == 1


@pytest.mark.dataplane
def test_paced_consumer_loses_nothing_and_sleeps_when_idle(tmp_path):
    """The dispatcher's use of a Pacer against a forked publisher: while positions come
    faster than the gap it passes at most once per interval with the flag down, it still
    ends at the last position published, and after the publisher stops it sleeps on the flag
    (woken by the one last publish, not by a timer)."""
    path = str(tmp_path / "control")
    block = ControlBlock(path, create=True)
    wake = WakeFd()
    watch = PositionWatch(block, "written_position", 5)
    sleeper = Sleeper(wake, [watch])
    last = 20_000
    ready = FORK.Event()

    def publish() -> None:
        child = ControlBlock(path, create=False)
        ready.wait(WAIT_MS / 1000)
        for position in range(1, last + 1):
            signal_mask(child.publish("written_position", position), {5: wake})
            spin_until = time.monotonic_ns() + 20_000         # one every ~20 µs
            while time.monotonic_ns() < spin_until:
                pass
        time.sleep(0.3)
        signal_mask(child.publish("written_position", last + 1), {5: wake})
        child.close()
    publisher = FORK.Process(target=publish)
    publisher.start()
    pacer = Pacer(1, 2_000_000)
    seen = passes = timed_out = 0
    started = time.monotonic()
    ready.set()
    try:
        while True:
            assert time.monotonic() - started < DEADLINE_S, "the consumer never caught up"
            position = block.written_position
            worked = position > seen
            seen = max(seen, position)
            passes += worked
            if seen == last + 1:
                break
            paced_ms = pacer.caught_up(worked)
            if paced_ms is not None:
                wake.wait(paced_ms)
                continue
            watch.target = seen + 1
            if not sleeper.sleep(WAIT_MS):
                timed_out += 1
                assert block.written_position > seen, "a wake-up was lost"
        elapsed_ms = (time.monotonic() - started) * 1000
    finally:
        publisher.join(DEADLINE_S)
        wake.close()
        block.close()
    assert publisher.exitcode == 0
    assert timed_out == 0
    assert pacer.paced_waits > 0
    # At most one pass per interval while paced, plus the passes that start pacing; without
    # pacing every publish (20,000 in about 0.4 s and more) could be a pass.
    assert passes <= elapsed_ms + 50, (passes, elapsed_ms)
    assert not pacer.pacing, "the last publish came through the flag, not a paced wait"
