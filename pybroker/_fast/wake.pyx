# pybroker._fast.wake: the sleep-flag round of an asyncio worker, in C (pybroker/proc/wake.py).
"""The completion round of a remoting worker without Python frames (docs/architecture/
data-plane.md, "The completion round in C").

:class:`AsyncWakeReader` is the event loop's reader of the worker's eventfd (``loop.add_reader
(fd, reader)``: the loop calls ``reader()``, a C call). Each call reads the eventfd (one
``read(2)``), then runs rounds: clear every sleep flag, call ``on_wake()``, set every flag
again (set, fence, re-check: :func:`arm_flags`) - a flag that reports work (a producer
published between the clear and the set) means another round at once; after ``rounds_max``
rounds back to back the reader yields to the loop's other callbacks and goes on with
``call_soon``, so a producer that never pauses cannot starve the sockets. Before, this round
was six Python frames per wake-up (the reader's ``_readable``, ``consume`` and ``_run``, the
sleeper's ``arm`` and ``disarm``) besides the flags'.

The flags whose set or clear was Python are here too: :class:`ProducerSide` (a ring's
producer flag while a put waits for space) and :class:`WhileWanted` (the held-request watches,
one ``wanted()`` question per arm); a ring's consumer flag (``wake.ConsumerSide``) is already
the ring's own C methods. :func:`arm_flags` and :func:`disarm_flags` are the one
implementation of arming a process's flags, used by this reader and by the blocking
``wake.Sleeper`` of the appender, dispatcher and flusher.

:class:`WakeFd` (the eventfd every data-plane process signals and waits on) and
:class:`DeferredSignal` (a remoting worker's wake-up of the appender, deferred to the end of
the loop's turn) are C too: a signal, a wait and a deferred wake-up cost no Python frame
(docs/architecture/data-plane.md, "The wake-ups without Python frames").
"""
import asyncio
import collections
import os

from cpython.exc cimport PyErr_CheckSignals, PyErr_SetFromErrno
from libc.errno cimport EAGAIN, EINTR, errno
from libc.math cimport ceil
from libc.stdint cimport INT64_MAX, int64_t, uint64_t
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec
from posix cimport unistd
from posix.unistd cimport read, write


cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd *fds, unsigned long count, int timeout_ms)
    enum:
        POLLIN


cdef int64_t _monotonic_ms() noexcept nogil:
    cdef timespec now
    clock_gettime(CLOCK_MONOTONIC, &now)
    return <int64_t>now.tv_sec * 1000 + now.tv_nsec // 1000000


cdef int _timeout_ms(object timeout_ms) except? -2:
    """poll()'s timeout: None is -1 (no limit), a fraction rounds up (as select.poll)."""
    if timeout_ms is None:
        return -1
    return <int>ceil(<double>timeout_ms)


cdef class WakeFd:
    """A non-blocking eventfd. ``signal()`` from any process that inherited it; ``wait()``
    blocks the owner until signalled. Counts: ``signals_sent`` (this process), ``wakeups``
    (reads that found a signal). ``fd``: an eventfd to adopt, else a new one."""

    def __init__(self, fd=None):
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) if fd is None else fd
        self.signals_sent = 0
        self.wakeups = 0

    def fileno(self):
        return self.fd

    def signal(self):
        """Add 1 to the eventfd counter (one write system call)."""
        self.signal_c()

    def consume(self):
        """Read and reset the counter without blocking; the number of signals, or 0."""
        return self.consume_c()

    def wait(self, timeout_ms):
        """Block until signalled or ``timeout_ms`` (None, or negative: no limit; a fraction
        rounds up, as select.poll) passes; True if signalled. Resets the counter: one poll
        and, when signalled, one read per wait (this runs once per drain of the data-plane
        loops). A signal handler runs during the wait (the stop request's writes this
        eventfd), and the wait goes on for what is left of the timeout."""
        return self.wait_c(_timeout_ms(timeout_ms))

    def close(self):
        """Close the descriptor (idempotent)."""
        cdef int fd = self.fd
        if fd >= 0:
            self.fd = -1
            if unistd.close(fd) != 0:
                PyErr_SetFromErrno(OSError)

    cdef int signal_c(self) except -1:
        cdef uint64_t one = 1
        cdef ssize_t wrote
        while True:
            wrote = write(self.fd, &one, sizeof(one))
            if wrote == sizeof(one):
                break
            if wrote < 0 and errno == EINTR:
                PyErr_CheckSignals()
                continue
            if wrote < 0 and errno == EAGAIN:
                break       # the counter is at its maximum: a wake-up is pending anyway
            PyErr_SetFromErrno(OSError)
            return -1
        self.signals_sent += 1
        return 0

    cdef int64_t consume_c(self) except -1:
        cdef uint64_t count = 0
        cdef ssize_t got
        while True:
            got = read(self.fd, &count, sizeof(count))
            if got == sizeof(count):
                self.wakeups += 1
                return <int64_t>count if count <= <uint64_t>INT64_MAX else INT64_MAX
            if got < 0 and errno == EINTR:
                PyErr_CheckSignals()
                continue
            if got < 0 and errno != EAGAIN:
                PyErr_SetFromErrno(OSError)
                return -1
            return 0

    cdef bint wait_c(self, int timeout_ms) except -1:
        cdef pollfd entry
        cdef int ready
        cdef int64_t deadline = _monotonic_ms() + timeout_ms
        entry.fd = self.fd
        entry.events = POLLIN
        while True:
            entry.revents = 0
            with nogil:
                ready = poll(&entry, 1, timeout_ms)
            if ready > 0:
                return self.consume_c() > 0
            if ready == 0:
                return 0
            if errno != EINTR:
                PyErr_SetFromErrno(OSError)
                return -1
            PyErr_CheckSignals()
            if timeout_ms >= 0:
                timeout_ms = <int>max(0, deadline - _monotonic_ms())


cdef class DeferredSignal:
    """A remoting worker's wake-up of the sleeping appender after it committed puts
    (RingPutter.after_commit; the send port's take calls :meth:`after_commit_c` in C):
    when the appender sleeps, the signal goes out after the callbacks of this loop turn (the
    other puts decoded from the same reads) have committed too, or as soon as
    ``deferred_max`` puts wait, so that a long turn still overlaps with the appender's drain
    instead of lock-stepping with it. Nothing happens when the appender is awake and no
    wake-up is pending.

    The end of the turn is one reusable ``asyncio.Handle`` whose callback is this object,
    appended to the loop's ready queue (what ``loop.call_soon`` does, without its four
    Python frames, the handle made per call and the callback's frame): the loop runs it in
    its next turn, before the events that turn's poll finds, as it would a call_soon's. A
    wake-up pending in a loop that closed is dropped (nobody is there to commit more); a
    new loop starts with none."""

    def __init__(self, WakeFd wake_fd, Py_ssize_t deferred_max):
        self.wake_fd = wake_fd
        self.deferred_max = deferred_max
        self.pending = False
        self.deferred = 0
        self._loop = None

    def after_commit(self, loop, bint appender_asleep, Py_ssize_t puts):
        """After a commit of ``puts`` requests; ``appender_asleep``: the commit took the
        appender's sleep flag (nobody else signals it until this does)."""
        self.after_commit_c(loop, appender_asleep, puts)

    def wake_at_once(self, bint appender_asleep):
        """After a commit, for a caller that has put everything it had (the ACK port after a
        read's acks, RevivePuts): signal now when the appender sleeps (``appender_asleep``:
        the commit took its flag) or a wake-up waits for the end of the turn - one signal,
        nothing deferred (the queued handle then finds nothing pending)."""
        if self.pending:
            self._fire()
        elif appender_asleep:
            self.wake_fd.signal_c()

    def __call__(self):
        """The end of the turn (the handle's callback)."""
        if self.pending:
            self._fire()

    cdef int after_commit_c(self, object loop, bint appender_asleep,
                            Py_ssize_t puts) except -1:
        if loop is not self._loop:
            self._bind(loop)
        if appender_asleep:
            self.deferred = 0
            if not self.pending:
                # The flag is taken: nobody else signals this appender until we do, and we
                # do in this loop's next turn at the latest, so the wake-up is late, never
                # lost. One turn late even when nothing else is ready this turn: signalling
                # at once saved that turn's zero-timeout epoll_wait, but in interleaved pairs
                # the drains came smaller and the sends slower (data-plane.md, "Where one
                # send's time goes", the follow-up).
                self.pending = True
                self._ready_append(self._handle)
        if self.pending:
            self.deferred += puts
            if self.deferred >= self.deferred_max:
                self._fire()
        return 0

    cdef int _bind(self, object loop) except -1:
        ready = loop._ready
        if type(ready) is not collections.deque:
            raise TypeError(f"{type(loop).__name__}: no asyncio ready queue to defer to")
        self._loop = loop
        self._ready_append = ready.append
        self._handle = asyncio.Handle(self, (), loop)
        self.pending = False
        return 0

    cdef int _fire(self) except -1:
        self.pending = False
        return self.wake_fd.signal_c()


cdef class ProducerSide:
    """A ByteRing's producer sleep flag (waiting for space: back-pressure), raised only while
    ``wanted()`` is true (something waits for space, e.g. a waiter queue's ``__len__``; None:
    always); freed space counts as work only while ``ready()`` too (None: always; the
    putter's: a completion slot is free - when they are all taken the wake-up comes with the
    completions, and the ring's answer, against a consumer cursor last read when a reserve
    failed, would only spin the loop)."""

    def __init__(self, ring, wanted=None, ready=None):
        self._set = ring.set_producer_sleeping
        self._clear = ring.clear_producer_sleeping
        self._wanted = wanted
        self._ready = ready

    def set_sleeping(self):
        if self._wanted is not None and not self._wanted():
            return False
        return bool(self._set()) and (self._ready is None or bool(self._ready()))

    def clear_sleeping(self):
        self._clear()


cdef class WhileWanted:
    """Sleep flags armed only while ``wanted()``: one question per arm instead of one per flag
    while nothing wants them (a remoting worker's held-request watches, armed on every
    completion wake-up of a send load and wanted only while a pull or POP is held). Each
    flag may still ask its own narrower question. :attr:`armed` says whether they are set."""

    def __init__(self, flags, wanted):
        self.flags = list(flags)
        self.wanted = wanted
        self.armed = False

    def set_sleeping(self):
        if not self.wanted():
            return False
        self.armed = True
        for flag in self.flags:
            if flag.set_sleeping():
                return True
        return False

    def clear_sleeping(self):
        if self.armed:
            self.armed = False
            for flag in self.flags:
                flag.clear_sleeping()


cdef bint arm_c(list flags) except -1:
    for flag in flags:
        if flag.set_sleeping():
            disarm_c(flags)
            return True
    return False


cdef int disarm_c(list flags) except -1:
    for flag in flags:
        flag.clear_sleeping()
    return 0


def arm_flags(list flags):
    """Set every flag (each sets, fences, re-checks); True, with all of them cleared again, as
    soon as one reports work."""
    return arm_c(flags)


def disarm_flags(list flags):
    """Clear every flag."""
    disarm_c(flags)


def sleep_on(list flags, WakeFd wake_fd, timeout_ms):
    """Arm every flag: True at once (all cleared again) when one reports work; else wait on
    ``wake_fd`` for ``timeout_ms`` (as :meth:`WakeFd.wait`) and clear them: True when
    signalled, False on timeout (``wake.Sleeper.sleep``, the blocking loops' sleep)."""
    if arm_c(flags):
        return True
    signalled = wake_fd.wait_c(_timeout_ms(timeout_ms))
    disarm_c(flags)
    return signalled


cdef class AsyncWakeReader:
    """The event loop's reader of a worker's eventfd: each wake-up (and each time the re-check
    finds work) calls ``on_wake()`` in the loop's own turn, e.g. to drain the completion ring;
    ``rounds_max`` rounds back to back, then the rest after the loop's other callbacks
    (``call_soon``). ``flags`` is the list armed before the worker waits (it may be changed
    in place: a promoted slave's putter adds its flags)."""

    def __init__(self, loop, WakeFd wake_fd, flags, on_wake, Py_ssize_t rounds_max=16):
        self.loop = loop
        self.wake_fd = wake_fd
        self.flags = list(flags)
        self.on_wake = on_wake
        self.rounds_max = rounds_max
        self.rounds = 0
        self._fd = wake_fd.fd
        self._started = False
        self._call_soon = loop.call_soon
        self._run_soon = self.run

    def start(self):
        """Register the eventfd, run on_wake once and arm the flags."""
        self.loop.add_reader(self._fd, self)
        self._started = True
        self._run()

    def kick(self):
        """Run a round soon (in the loop's next turn), as if the eventfd had been signalled."""
        if self._started:
            self._call_soon(self._run_soon)

    def stop(self):
        """Unregister the eventfd and clear the flags (idempotent)."""
        if self._started:
            self._started = False
            self.loop.remove_reader(self._fd)
            disarm_c(self.flags)

    def run(self):
        """A round now (what kick() and a yield schedule)."""
        self._run()

    def __call__(self):
        """The eventfd is readable: consume it and run."""
        self.wake_fd.consume_c()
        self._run()

    cdef int _run(self) except -1:
        cdef Py_ssize_t index
        if not self._started:
            return 0
        for index in range(self.rounds_max):
            disarm_c(self.flags)
            self.rounds += 1
            self.on_wake()
            if not self._started:
                return 0        # stopped by on_wake: stop() cleared the flags, they stay so
            if not arm_c(self.flags):
                return 0
        self._call_soon(self._run_soon)
        return 0
