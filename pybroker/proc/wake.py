# Wake-ups between processes: eventfds plus the sleep-flag protocol (design.md §2 rule 4, §6).
"""Cheap, explicit wake-ups: signal only a side that has flagged itself asleep.

The sleeping side (consumer of a ring, producer waiting for space, a worker waiting for a
published position) runs: set its flag in shared memory, full fence, re-check for work, and
only then block on its eventfd. The other side, after publishing, fences and takes the flag
(``ByteRing.commit``/``release``, ``CompletionRing.commit``, ``ControlBlock.publish`` do that)
and writes the eventfd only when the flag was set. Either the sleeper sees the new work in its
re-check or the publisher sees the flag: a wake-up is never lost, and a busy peer costs no
syscall. No spinning: the sleeper blocks in poll() or in the asyncio loop's epoll.

Eventfds are created before fork (the supervisor) and inherited; one per sleeping side is
enough even when it watches several rings or positions (the appender: all send rings).

One consumer paces itself under load instead (:class:`Pacer`, the dispatcher: Java's reput
runs once a millisecond): while work keeps arriving it waits a fixed interval with its flags
down - nobody signals it, and it re-reads the positions after the wait, so nothing is lost,
only gathered - and it goes back to the flag protocol as soon as a paced wait found nothing,
so an idle process sleeps without a timer.

The sleep flags (:class:`SleepFlag`) live here: :class:`ConsumerSide` and :class:`ProducerSide`
of a ring, :class:`PositionWatch` of one control-block position (held acknowledgements, parked
pulls), :class:`DispatchEndWatch` (the dispatcher's end: written, bounded by confirm),
:class:`PopTableWatch` (a process holding POPs: its waiter bit on the POP table) and
:class:`WhileWanted` (flags armed only while something wants them). ``ProducerSide``,
``WhileWanted``, arming and clearing a process's flags (:class:`Sleeper`), the asyncio
workers' round (:class:`AsyncWakeReader`: the loop's reader of the eventfd), the eventfd
itself (:class:`WakeFd`) and a worker's deferred wake-up of the appender
(:class:`DeferredSignal`) are C, from :mod:`pybroker._fast.wake`, re-exported here: a
remoting worker's completion round runs without Python frames but its ``on_wake``, and a
signal or a wait costs none.
"""
import asyncio
import dataclasses
import functools
import signal
import time
from typing import TYPE_CHECKING, Callable, Mapping, Protocol, Sequence

from pybroker._fast.wake import (AsyncWakeReader, DeferredSignal, ProducerSide,  # noqa: F401
                                 WakeFd, WhileWanted, arm_flags, disarm_flags, sleep_on)
from pybroker.proc.children import STOP_SIGNAL, accept_stop
from pybroker.store.control_block import APPENDER, DISPATCHER, FLUSHER, HA, ControlBlock
from pybroker.tasks import within

if TYPE_CHECKING:
    from pybroker.store.pop_table import PopTable


class SleepFlag(Protocol):
    """One shared-memory sleep flag of the sleeping side."""

    def set_sleeping(self) -> bool:
        """Set the flag, fence, re-check; True when work is already there."""

    def clear_sleeping(self) -> None:
        """Clear the flag (awake again)."""


@dataclasses.dataclass
class DataPlaneWakes:
    """The eventfds of the data plane; ``workers[i]`` is remoting worker slot i's; ``ha`` the
    ha worker's (pybroker/proc/ha.py)."""
    appender: WakeFd
    dispatcher: WakeFd
    flusher: WakeFd
    workers: list[WakeFd]
    ha: WakeFd | None = None

    def by_slot(self) -> dict[int, WakeFd]:
        """Control-block slot -> eventfd, for signal_mask()."""
        slots = dict(enumerate(self.workers))
        slots.update({APPENDER.slot: self.appender, DISPATCHER.slot: self.dispatcher,
                      FLUSHER.slot: self.flusher})
        if self.ha is not None:
            slots[HA.slot] = self.ha
        return slots


def stop_on_sigterm(wake_fd: WakeFd) -> Callable[[], bool]:
    """Install a handler of the supervisor's stop request (STOP_SIGNAL, SIGUSR1: SIGTERM and
    SIGINT to the process group are ignored by workers, see pybroker.proc.children) in the
    forked child's main thread that wakes ``wake_fd``; returns "was the stop requested". The
    supervisor stops the data plane in order: broker_state STOPPING (the appender drains and
    exits), then the stop signal to the dispatcher, then to the flusher, each after the
    previous one exited, so each finishes what its upstream wrote."""
    received = []

    def on_stop(signal_number, frame) -> None:
        received.append(signal_number)
        wake_fd.signal()
    signal.signal(STOP_SIGNAL, on_stop)
    accept_stop()
    return functools.partial(bool, received)       # asked before every sleep: no frame


class ConsumerSide:
    """A ring's consumer sleep flag (ByteRing or CompletionRing)."""

    def __init__(self, ring):
        self.set_sleeping = ring.set_consumer_sleeping
        self.clear_sleeping = ring.clear_consumer_sleeping


class PositionWatch:
    """Sleep until a control-block position reaches a target (the dispatcher waiting for
    written_position, a held acknowledgement for flushed_position, a parked pull for
    dispatched_position...). The field's publisher gets this worker slot's waiter bit from
    ``ControlBlock.publish`` and signals its eventfd.

    ``target``: a number the owner moves, or a callable giving the target now, None while
    nothing waits (the bit then stays down: no wake-up for nobody). :attr:`armed` says whether
    the bit is set."""

    def __init__(self, block: ControlBlock, field: str, slot: int,
                 target: int | Callable[[], int | None] = 0):
        self.block = block
        self.field = field
        self.slot = slot
        self.target = target
        self.armed = False

    def set_sleeping(self) -> bool:
        target = self.target() if callable(self.target) else self.target
        if target is None:
            return False
        self.block.add_waiter(self.field, self.slot)
        self.armed = True
        return self.block.load(self.field) >= target

    def clear_sleeping(self) -> None:
        if self.armed:
            self.armed = False
            self.block.remove_waiter(self.field, self.slot)


class DispatchEndWatch:
    """The end of what may be dispatched - ``written_position``, bounded by
    ``confirm_position`` when ``gated`` (readUnCommitted=false) - and a sleep flag until it
    passes :attr:`target`: a waiter bit only on the fields below the target, so a dispatcher
    held at the confirm offset is not woken by every append."""

    def __init__(self, control: ControlBlock, slot: int, gated: bool):
        self.control = control
        self.slot = slot
        self.gated = gated
        self.target = 0
        self._armed: list[str] = []
        self._load_confirm = control.loader("confirm_position")    # no frame per end()

    def end(self, written: int) -> int:
        """The dispatch end for ``written`` (the caller's load of written_position)."""
        return min(written, self._load_confirm()) if self.gated else written

    def set_sleeping(self) -> bool:
        fields = ("written_position", "confirm_position") if self.gated \
            else ("written_position",)
        self._armed = [name for name in fields if self.control.load(name) < self.target]
        for name in self._armed:
            self.control.add_waiter(name, self.slot)
        return self.end(self.control.written_position) >= self.target

    def clear_sleeping(self) -> None:
        for name in self._armed:
            self.control.remove_waiter(name, self.slot)
        self._armed = []


class PopTableWatch:
    """Sleep flag of a process holding POPs: its waiter bit on the POP table, set only while
    ``wanted()``; :meth:`PopState.notify_held` elsewhere bumps the table's version and signals
    the processes whose bit it takes (the set-fence-re-check of pybroker/proc/wake.py)."""

    def __init__(self, table: "PopTable", worker_slot: int, wanted: Callable[[], bool]):
        self.table = table
        self.worker_slot = worker_slot
        self.wanted = wanted
        self.armed = False
        self.seen_version = table.version

    def moved(self) -> bool:
        """Whether the table's version moved since the last call (then held POPs re-check)."""
        version = self.table.version
        if version == self.seen_version:
            return False
        self.seen_version = version
        return True

    def set_sleeping(self) -> bool:
        if not self.wanted():
            return False
        self.table.add_waiter(self.worker_slot)
        self.armed = True
        return self.table.version != self.seen_version

    def clear_sleeping(self) -> None:
        if self.armed:
            self.armed = False
            self.table.remove_waiter(self.worker_slot)


class Pacer:
    """A consumer's cadence while work keeps coming (module docstring): after a pass that
    found work, when the pass before it also found work less than ``busy_gap_ns`` earlier
    (or pacing is on), :meth:`caught_up` gives ``interval_ms``, to wait with the sleep flags
    down and then look again; a pass that found nothing turns pacing off (None: arm the
    flags and sleep). An idle consumer therefore costs no wake-up, and a lone message is
    taken at once (its wake-up comes through the flags); under load the wake-ups are at
    most one per interval, however often the producer publishes."""

    def __init__(self, interval_ms: int, busy_gap_ns: int,
                 clock_ns: Callable[[], int] = time.monotonic_ns):
        self.interval_ms = interval_ms
        self.busy_gap_ns = busy_gap_ns
        self.clock_ns = clock_ns
        self.pacing = False
        self.paced_waits = 0
        self._last_work_ns: int | None = None

    def caught_up(self, worked: bool) -> int | None:
        """The consumer has taken everything there is; ``worked``: it took something since
        its last wait. Milliseconds to wait unarmed, or None to sleep armed."""
        if not worked:
            self.pacing = False
            return None
        now = self.clock_ns()
        previous, self._last_work_ns = self._last_work_ns, now
        if not self.pacing and (previous is None or now - previous >= self.busy_gap_ns):
            return None
        self.pacing = True
        self.paced_waits += 1
        return self.interval_ms


async def wait_event(event: asyncio.Event, timeout_s: float) -> None:
    """Wait until ``event`` is set or ``timeout_s`` passed, whichever comes first (the ha
    slaves' reconnect back-off, cut short by a new master address)."""
    try:
        await within(event.wait(), timeout_s)
    except TimeoutError:
        pass


def signal_mask(mask: int, wake_fds: Mapping[int, WakeFd] | Sequence[WakeFd]) -> int:
    """Signal the eventfd of every worker slot whose bit is set in mask (from
    ControlBlock.publish); returns how many were signalled."""
    signalled = 0
    while mask:
        slot = (mask & -mask).bit_length() - 1
        mask &= mask - 1
        wake_fds[slot].signal()
        signalled += 1
    return signalled


class Sleeper:
    """Blocking wait for the appender / dispatcher / flusher loops.

    ``sleep(timeout_ms)`` arms every flag; if any reports work it returns True at once,
    otherwise it blocks on the eventfd. Flags are cleared on return either way (the whole of
    it is C, :func:`pybroker._fast.wake.sleep_on`; :meth:`frameless` is the same without
    this method's frame)."""

    def __init__(self, wake_fd: WakeFd, flags: Sequence[SleepFlag]):
        self.wake_fd = wake_fd
        self.flags = list(flags)

    def sleep(self, timeout_ms: int | None) -> bool:
        """Wait for work: True when work was found or a signal came, False on timeout."""
        return sleep_on(self.flags, self.wake_fd, timeout_ms)

    def frameless(self) -> Callable[[int | None], bool]:
        """:meth:`sleep` as a call without a Python frame, for a loop that sleeps once per
        drain (the flags list is this sleeper's: changes to it are seen)."""
        return functools.partial(sleep_on, self.flags, self.wake_fd)

    async def sleep_async(self, timeout_ms: int | None) -> bool:
        """sleep() for a coroutine: waits in the running loop (add_reader), never blocks it."""
        if arm_flags(self.flags):
            return True
        if self.wake_fd.consume():
            disarm_flags(self.flags)
            return True
        loop = asyncio.get_running_loop()
        readable = loop.create_future()
        loop.add_reader(self.wake_fd.fd, _set_once, readable)
        try:
            timeout_s = None if timeout_ms is None else timeout_ms / 1000
            await within(readable, timeout_s)
        except TimeoutError:
            pass
        finally:
            loop.remove_reader(self.wake_fd.fd)
            disarm_flags(self.flags)
        return self.wake_fd.consume() > 0


def _set_once(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
