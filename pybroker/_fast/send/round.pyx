# pybroker._fast.send.round: a remoting worker's completion wake-up without Python when it has none.
"""The completion wake-up of a worker's data plane in C (docs/architecture/data-plane.md, "The
completion wake-up without Python").

:class:`CompletionRound` is the ``on_wake`` of the worker's ``AsyncWakeReader`` (a C callable:
the reader calls it without a Python frame). Each call decides in C whether this wake-up has
Python work, from state that is already there: the send path's ``python_waiting`` (puts wait for
ring space: ``RingPutter._space_waiters``), the answers other fast paths queued for the next
flush (the ACK port's per-connection dict: non-empty is work), and :class:`HeldRequests` (a held
pull or POP: the watches' re-checks are Python). With any of them, or without a send path that
may be drained here (a slave; SYNC_FLUSH or SYNC_MASTER, whose held acknowledgements are
released in Python), the whole wake-up is Python's: ``python(None, None, moved)``. Otherwise it
drains the completion ring (``SendCompletions.drain``: the fast sends' answers are written into
their connections' outputs) and sends the outputs (``send_outputs``: one ``send`` per lent
socket), and calls ``python(outcomes, outputs, moved)`` only when one of them left something for
Python (a Python path put answered, frames for a connection's transport). ``moved``: the
dispatched position differs from the one last seen (:attr:`dispatched_seen`, kept here, the one
copy). A wake-up that finds nothing for Python costs no Python call.
"""
from libc.stdint cimport int64_t

from pybroker._fast.send.stats cimport monotonic_ns
from pybroker._fast.send.take cimport SendPath


cdef class HeldRequests:
    """``held()``: whether any of ``holders`` (a worker's long polls: its pull long poll and
    POP long polls) holds a request (``held_count > 0``), asked without a Python frame. THE
    question of a worker's held-request watches (``WhileWanted``'s ``wanted``) and of
    :class:`CompletionRound`."""

    def __init__(self, holders):
        self.holders = list(holders)

    cdef bint held_c(self) except -1:
        for holder in self.holders:
            if holder.held_count > 0:
                return True
        return False

    def __call__(self):
        return self.held_c()


cdef class CompletionRound:
    """See the module docstring. ``core``: the worker's ``SendPath`` when its completions may
    be drained here (None: every wake-up is Python's); ``load_dispatched()``: the control
    block's dispatched position; ``held``: a :class:`HeldRequests` or None; ``answers``: the
    containers of answers queued for the next flush (shared, appended to in place);
    ``python(outcomes, outputs, moved)``: the Python wake-up (``outcomes`` None: it drains
    itself)."""

    def __init__(self, core, load_dispatched, int64_t dispatched_seen, held, list answers,
                 python):
        self.core = core
        self.load_dispatched = load_dispatched
        self.dispatched_seen = dispatched_seen
        self.held = held
        self.answers = answers
        self.python = python

    cdef bint python_first(self) except -1:
        """Whether this wake-up is Python's before anything is drained."""
        if self.core is None or self.core.python_waiting:
            return True
        for answers in self.answers:
            if len(answers):
                return True
        return self.held is not None and self.held.held_c()

    cdef bint moved_c(self) except -1:
        cdef int64_t dispatched = self.load_dispatched()
        if dispatched == self.dispatched_seen:
            return False
        self.dispatched_seen = dispatched
        return True

    def python_first_now(self):
        """:meth:`python_first` (tests: the twin of the Python side's conditions)."""
        return self.python_first()

    def __call__(self):
        cdef bint moved
        if self.python_first():
            moved = self.moved_c()
            self.python_rounds += 1
            self.python(None, None, moved)
            return
        outcomes = self.core.drain(monotonic_ns() / 1e9)
        outputs = self.core.send_outputs()
        moved = self.moved_c()
        if outcomes or outputs:
            self.python_rounds += 1
            self.python(outcomes, outputs, moved)
            return
        self.c_rounds += 1
