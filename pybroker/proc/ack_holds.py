# The held acknowledgements' wake-ups and timeouts, around the C holds both send paths share.
"""Held acknowledgements of a remoting worker: SYNC_FLUSH and SYNC_MASTER sends of both paths.

The holds themselves are ONE implementation, in C (``pybroker/_fast/send/held.pyx``, driven by
``SendPath``): a send of either path waits there in completion (= CommitLog) order until the
positions it waits for cover it. What is left to Python is when to look again:

* the sleep flags (:meth:`AckHolds.sleep_flags`): a waiter bit on ``flushed_position`` /
  ``replicated_position`` only while acknowledgements wait for it (``SendPath.flush_target`` /
  ``replica_target``), so the flusher and the ha worker signal this worker's eventfd once per
  flush or slave report, never per message;
* :meth:`AckHolds.release` at each wake-up: what the positions now cover;
* one loop timer at the oldest hold's deadline (``syncFlushTimeout`` / ``slaveTimeout``):
  :meth:`AckHolds.expire` answers what is past it (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT),
  re-armed for the next; a position that covered one condition may bring it earlier.

The outcomes (the Python path's puts answered, as ``SendPath`` gives them) go to the owner's
``answered`` callback (``RingPutter.answer``), which resolves them and writes the fast answers.
"""
import asyncio
from collections.abc import Callable

from pybroker._fast.send.take import SendPath
from pybroker.proc.wake import PositionWatch, SleepFlag

__all__ = ["AckHolds"]


class AckHolds:
    """The held acknowledgements of one worker's ``SendPath`` (see the module docstring).

    ``control``: the control block (the published positions); ``slot``: this worker's
    waiter bit; ``enabled``: SYNC_FLUSH or SYNC_MASTER (otherwise nothing is ever held);
    ``answered(outcomes)``: called with what :meth:`expire` answers on the timer.
    """

    def __init__(self, core: SendPath, control, slot: int, enabled: bool,
                 answered: Callable[[list], None]):
        self.core = core
        self.control = control
        self.enabled = enabled
        self._answered = answered
        self._timeout_handle: asyncio.TimerHandle | None = None
        self._timeout_at = 0.0
        self._flags: list[SleepFlag] = [
            PositionWatch(control, "flushed_position", slot, lambda: core.flush_target),
            PositionWatch(control, "replicated_position", slot, lambda: core.replica_target)]

    def sleep_flags(self) -> list[SleepFlag]:
        """The waiter bits to arm before the worker blocks on its eventfd: none when nothing
        is ever held (their targets would stay None: two Python calls each per wake-up for
        nothing)."""
        return list(self._flags) if self.enabled else []

    def release(self) -> list:
        """Answer the holds the published positions cover; the Python path's outcomes. A
        position that covered one condition of the oldest hold may bring its timeout (the
        other condition's deadline) earlier: the timer follows."""
        if not self.enabled:
            return []
        control = self.control
        outcomes = self.core.release(control.flushed_position, control.replicated_position)
        deadline = self.core.held_deadline
        if deadline is not None and (self._timeout_handle is None
                                     or deadline < self._timeout_at):
            self._arm_timeout()
        return outcomes

    def expire(self) -> None:
        """The timer: answer every hold past its deadline - FLUSH_SLAVE_TIMEOUT while a slave
        still lacks it (the replica's outcome wins, as in Java), else FLUSH_DISK_TIMEOUT -
        hand the outcomes to ``answered`` and arm the timer for the next."""
        self._timeout_handle = None
        control = self.control
        now = asyncio.get_running_loop().time()
        self._answered(self.core.expire(control.flushed_position,
                                        control.replicated_position, now))
        self._arm_timeout()

    def _arm_timeout(self) -> None:
        if self._timeout_handle is not None:
            self._timeout_handle.cancel()
            self._timeout_handle = None
        head = self.core.held_deadline
        if head is not None:
            self._timeout_at = head
            self._timeout_handle = asyncio.get_running_loop().call_at(head, self.expire)
