"""The completion round in C (pybroker._fast.wake.AsyncWakeReader) against the round as it was
written in Python (main before the C round: proc/wake.py's AsyncWakeReader and Sleeper, kept
here as the reference), driven the same way: seeded schedules of eventfd signals, producers
publishing while a flag is up (they signal) or down (the re-check after the arm must find it),
work found between the clear and the set, kick() and stop() from the test and from inside
on_wake, restarts, rounds_max from 1 to 4. The on_wake calls, every flag set and clear (in
order, interleaved with the loop's turns) and the flags' states must be equal, and nothing a
producer published may be left unseen while the reader runs."""
import asyncio
import random

import pytest

from pybroker._fast.ring import ByteRing, CompletionRing
from pybroker._fast.wake import AsyncWakeReader, ProducerSide, WhileWanted
from pybroker.proc.wake import ConsumerSide, WakeFd

pytestmark = pytest.mark.unit


class PythonRound:
    """The round in Python (the reference): AsyncWakeReader with Sleeper's arm and disarm as
    they were, and the one change the C round made - a round stopped by its on_wake does not
    set the flags again."""

    def __init__(self, loop, wake_fd, flags, on_wake, rounds_max=16):
        self.loop = loop
        self.wake_fd = wake_fd
        self.flags = list(flags)
        self.on_wake = on_wake
        self.rounds_max = rounds_max
        self.rounds = 0
        self._started = False

    def _arm(self):
        for flag in self.flags:
            if flag.set_sleeping():
                self._disarm()
                return True
        return False

    def _disarm(self):
        for flag in self.flags:
            flag.clear_sleeping()

    def start(self):
        self.loop.add_reader(self.wake_fd.fd, self._readable)
        self._started = True
        self._run()

    def kick(self):
        if self._started:
            self.loop.call_soon(self._run)

    def stop(self):
        if self._started:
            self._started = False
            self.loop.remove_reader(self.wake_fd.fd)
            self._disarm()

    def _readable(self):
        self.wake_fd.consume()
        self._run()

    def _run(self):
        if not self._started:
            return
        for _ in range(self.rounds_max):
            self._disarm()
            self.rounds += 1
            self.on_wake()
            if not self._started:
                return
            if not self._arm():
                return
        self.loop.call_soon(self._run)


class Producer:
    """The other side of one flag: publishes work; signals the eventfd only when it takes the
    flag up (the protocol of pybroker/proc/wake.py), else the sleeper's re-check finds it."""

    def __init__(self, name, wake_fd, log):
        self.name = name
        self.wake_fd = wake_fd
        self.log = log
        self.up = False
        self.unseen = 0
        self.published = 0

    def publish(self):
        self.published += 1
        self.unseen += 1
        if self.up:
            self.up = False             # the publisher takes the flag
            self.log.append(("signal", self.name))
            self.wake_fd.signal()

    def set_sleeping(self):
        self.up = True
        self.log.append(("set", self.name, self.unseen))
        return self.unseen > 0

    def clear_sleeping(self):
        self.up = False
        self.log.append(("clear", self.name))


class Schedule:
    """One seeded run: the test's steps and what on_wake does on each call."""

    def __init__(self, seed):
        rng = random.Random(seed)
        self.rounds_max = rng.randint(1, 4)
        self.steps = [rng.choice(("publish", "publish", "signal", "kick", "stop", "start",
                                  "turn", "turn", "turn")) for _ in range(rng.randint(5, 60))]
        self.in_wake = [rng.choice(("see", "see", "see", "publish", "publish-unseen", "kick",
                                    "stop", "signal", "nothing")) for _ in range(400)]
        self.seed = seed


def run_schedule(reader_class, seed):
    schedule = Schedule(seed)
    log: list = []
    wake_fd = WakeFd()
    producers = [Producer(name, wake_fd, log) for name in ("a", "b", "c")]
    picks = random.Random(schedule.seed + 1)
    wanted = []
    held = WhileWanted([producers[2]], lambda: bool(wanted))

    async def main():
        loop = asyncio.get_running_loop()
        calls = iter(schedule.in_wake)
        reader_box = []

        def on_wake():
            log.append(("wake", tuple(p.up for p in producers), held.armed))
            reader = reader_box[0]
            action = next(calls, "see")
            producer = picks.choice(producers)
            if action == "see":
                for each in producers:
                    each.unseen = 0
            elif action == "publish":
                producer.publish()
            elif action == "publish-unseen":
                # Published between the clear and the set: only the re-check can find it.
                producer.unseen += 1
                producer.published += 1
            elif action == "kick":
                reader.kick()
            elif action == "stop":
                reader.stop()
            elif action == "signal":
                wake_fd.signal()

        reader = reader_class(loop, wake_fd, [producers[0], producers[1], held], on_wake,
                              schedule.rounds_max)
        reader_box.append(reader)
        for step in schedule.steps:
            producer = picks.choice(producers)
            if step == "publish":
                if producer is producers[2]:
                    wanted[:] = [1]
                producer.publish()
            elif step == "signal":
                wake_fd.signal()
            elif step == "kick":
                reader.kick()
            elif step == "stop":
                reader.stop()
                reader.stop()           # idempotent
            elif step == "start":       # (on_wake may have stopped it)
                reader.stop()
                reader.start()
            await asyncio.sleep(0)
            log.append(("turn", tuple(p.up for p in producers), held.armed, reader.rounds))
        # Let it settle: on_wake sees everything from here on, nobody publishes.
        schedule.in_wake[:] = []
        reader.stop()
        reader.start()
        for _ in range(6 * schedule.rounds_max + 10):
            await asyncio.sleep(0)
        settled = [p.unseen for p in producers]
        reader.stop()
        flags_after_stop = [p.up for p in producers] + [held.armed]
        return reader.rounds, settled, flags_after_stop

    rounds, settled, flags_after_stop = asyncio.run(main())
    wake_fd.close()
    return log, rounds, settled, flags_after_stop


@pytest.mark.parametrize("block", range(8))
def test_the_c_round_is_the_python_round(block):
    for seed in range(block * 60, block * 60 + 60):
        c_run = run_schedule(AsyncWakeReader, seed)
        python_run = run_schedule(PythonRound, seed)
        assert c_run == python_run, f"seed {seed}"
        log, rounds, settled, flags_after_stop = c_run
        assert settled == [0, 0, 0], f"seed {seed}: published work left unseen"
        assert flags_after_stop == [False] * 4, f"seed {seed}: a flag left up after stop"
        wakes = [entry for entry in log if entry[0] == "wake"]
        assert all(entry[1:] == ((False, False, False), False) for entry in wakes), \
            f"seed {seed}: on_wake ran with a flag up"


def _rounds_in_one_turn(reader_class, rounds_max):
    """A flag that always has work: each call runs rounds_max rounds, then the reader yields
    (call_soon) and the test's task runs between them."""
    marks: list = []

    class Busy:
        def set_sleeping(self):
            return True

        def clear_sleeping(self):
            pass

    async def main():
        loop = asyncio.get_running_loop()
        wake_fd = WakeFd()
        reader = reader_class(loop, wake_fd, [Busy()], lambda: marks.append("wake"),
                              rounds_max)
        reader.start()
        for _ in range(3):
            await asyncio.sleep(0)
            marks.append("turn")
        reader.stop()
        await asyncio.sleep(0)
        marks.append("turn")
        wake_fd.close()

    asyncio.run(main())
    return marks


@pytest.mark.parametrize("rounds_max", [1, 3, 16])
def test_rounds_max_yields_to_the_loop(rounds_max):
    marks = _rounds_in_one_turn(AsyncWakeReader, rounds_max)
    assert marks == _rounds_in_one_turn(PythonRound, rounds_max)
    # start()'s rounds, then each turn the yielded round's before the test's task resumes;
    # stopped, the round already scheduled does nothing.
    assert marks == ["wake"] * rounds_max + (["wake"] * rounds_max + ["turn"]) * 3 + ["turn"]


def test_the_reader_consumes_the_eventfd_and_counts_wakeups():
    async def main():
        loop = asyncio.get_running_loop()
        wake_fd = WakeFd()
        calls = []
        reader = AsyncWakeReader(loop, wake_fd, [], lambda: calls.append(1))
        reader.start()
        assert calls == [1]
        for _ in range(3):
            wake_fd.signal()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert calls == [1, 1] and wake_fd.wakeups == 1
        assert wake_fd.consume() == 0, "the counter was read"
        reader.stop()
        wake_fd.signal()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert calls == [1, 1], "stopped: the eventfd is no longer read"
        wake_fd.close()

    asyncio.run(main())


def test_ring_flags_through_the_c_round():
    """A completion ring's consumer flag and a byte ring's producer flag (ProducerSide, C)
    armed by the C round: a completion pushed after the clear is drained by another round;
    the producer flag counts only while wanted and ready."""
    slots = 8
    completions = bytearray(CompletionRing.region_size(slots))
    pusher, drained = CompletionRing(completions, True, slots), CompletionRing(completions, False)
    ring_region = bytearray(ByteRing.region_size(4096))
    producer = ByteRing(ring_region, True, 4096)
    waiters: list = []
    ready = [True]
    space = ProducerSide(producer, waiters.__len__, lambda: ready[0])
    assert not space.set_sleeping(), "nothing waits for space"
    waiters.append(1)
    assert not space.set_sleeping(), "no reserve failed: the consumer cursor did not move"
    space.clear_sleeping()

    async def main():
        loop = asyncio.get_running_loop()
        wake_fd = WakeFd()
        got = []

        def on_wake():
            got.extend(entry[0] for entry in drained.drain())
            if len(got) < 3:
                pusher.push(len(got) + 10, 0, 1, 0, 0)     # after the clear
                pusher.commit()

        reader = AsyncWakeReader(loop, wake_fd, [ConsumerSide(drained), space], on_wake)
        reader.start()
        assert got == [10, 11, 12] and reader.rounds == 4
        pusher.push(99, 0, 1, 0, 0)
        assert pusher.commit(), "the consumer flag is up: the producer signals"
        wake_fd.signal()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert got[-1] == 99
        reader.stop()
        assert not pusher.commit(), "stopped: the flag is down"
        wake_fd.close()

    try:
        asyncio.run(main())
    finally:
        for ring in (pusher, drained, producer):
            ring.close()
