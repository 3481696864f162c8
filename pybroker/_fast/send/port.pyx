# pybroker._fast.send.port: a client connection's take of the send fast path, callable from C.
"""The take of the send fast path's port (proc/send_port.py FastSendPort) in C: both the
connection's receive loop (through FastSendPort.take) and the reader in C
(pybroker._fast.socket_reader, the :class:`~pybroker._fast.socket_reader.CTaker` it calls, no
Python frame per read; docs/architecture/data-plane.md, "The read chain in C") take with it.

Around :meth:`SendPath.take_c <pybroker._fast.send.take.SendPath>`, what the port does per read:

* before: fast failure's page-cache check sets the path's ``divert``. The appender's
  ``busy_since_ms`` is loaded here (FastFailure.busy_since); 0, no drain running, is not busy;
  only a running drain asks FastFailure.page_cache_busy(began) (the rule, in Python).
* after a take that committed puts: the putter's ``puts_total``; the appender's wake-up
  (the putter's :class:`~pybroker._fast.wake.DeferredSignal`, a C call: RingPutter.after_commit
  is the same object's); fast failure's ``committed`` unless its queue-timeout timer is armed
  or the timeout is off (:func:`arms_queue_timeout`).

The nothing-to-do test of ``committed`` twins the first lines of that Python method
(docs/architecture.md, the twins; tests/unit/_fast/test_send_port.py keeps them equal).
"""
from libc.stdint cimport uint64_t

from pybroker._fast.send.take cimport SendTaken
from pybroker._fast.wake cimport DeferredSignal


cdef class PortTake(CTaker):
    """One client connection's take of the send fast path (see the module docstring)."""

    def __init__(self, SendPath core, Py_ssize_t slot, object putter, object fast_failure,
                 object loop):
        """``core``: the putter's SendPath; ``slot``: the connection's; ``putter``: its
        RingPutter; ``fast_failure``: the putter's, or None; ``loop``: the connection's."""
        self.core = core
        self._slot = slot
        self._putter = putter
        self._appender_signal = putter.appender_signal
        self._fast_failure = fast_failure
        self._busy_since = None if fast_failure is None else fast_failure.busy_since
        self._loop = loop

    def take(self, object buffer, Py_ssize_t start, Py_ssize_t end):
        """``(position, outcome, frame_length)`` after taking the fast frames from start."""
        cdef TakeAnswer answer
        self.take_c(buffer, start, end, &answer)
        return answer.position, answer.outcome, answer.frame_bytes

    cdef int take_c(self, object buffer, Py_ssize_t start, Py_ssize_t end,
                    TakeAnswer *answer) except -1:
        cdef object fast_failure = self._fast_failure
        cdef object putter = self._putter
        cdef SendTaken taken
        cdef uint64_t began
        if fast_failure is not None:
            # The page cache is busy: the handlers answer every send (they refuse it).
            began = self._busy_since()
            if began == 0:
                self.core.divert = False
            else:
                self.core.divert = fast_failure.page_cache_busy(began)
        self.core.take_c(buffer, start, end, self._slot, &taken)
        if taken.puts:
            putter.puts_total += taken.puts
            self._appender_signal.after_commit_c(self._loop, taken.asleep, taken.puts)
            if fast_failure is not None and arms_queue_timeout(fast_failure):
                fast_failure.committed(self._loop)
        answer[0] = taken.answer
        return 0


cdef bint arms_queue_timeout(object fast_failure) except -1:
    """False when FastFailure.committed has nothing to do: the timer armed, or the queue
    timeout off."""
    return fast_failure.timer is None and fast_failure.wait_s is not None


def committed_has_work(object fast_failure) -> bool:
    """:func:`arms_queue_timeout` for the twin test."""
    return arms_queue_timeout(fast_failure)
