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
"""
from cpython.exc cimport PyErr_SetFromErrno
from libc.errno cimport EAGAIN, EINTR, errno
from libc.stdint cimport uint64_t
from posix.unistd cimport read


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


cdef class AsyncWakeReader:
    """The event loop's reader of a worker's eventfd: each wake-up (and each time the re-check
    finds work) calls ``on_wake()`` in the loop's own turn, e.g. to drain the completion ring;
    ``rounds_max`` rounds back to back, then the rest after the loop's other callbacks
    (``call_soon``). ``flags`` is the list armed before the worker waits (it may be changed
    in place: a promoted slave's putter adds its flags)."""

    def __init__(self, loop, wake_fd, flags, on_wake, Py_ssize_t rounds_max=16):
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
        self._consume()
        self._run()

    cdef int _consume(self) except -1:
        """Read and reset the eventfd's counter (WakeFd.consume in C)."""
        cdef uint64_t count = 0
        cdef ssize_t got
        while True:
            got = read(self._fd, &count, sizeof(count))
            if got == sizeof(count):
                self.wake_fd.wakeups += 1
                return 0
            if got < 0 and errno == EINTR:
                continue
            if got < 0 and errno != EAGAIN:
                PyErr_SetFromErrno(OSError)
                return -1
            return 0

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
