# Java's broker fast failure for a remoting worker's puts: answer "busy" instead of nothing.
"""Fast failure of put requests (Java ``BrokerFastFailure`` + the store's page-cache check).

A client must learn quickly that this broker cannot take its message, so that it retries on
another one; a put that waits without an answer is the worst outcome (the client times out and
does not know whether the message was stored).

* **Page cache busy.** Before a put enters the send ring, the appender's ``busy_since_ms``
  (start of its running drain, 0 between drains, in the control block) is read: a drain older
  than ``osPageCacheBusyTimeOutMills`` (1000 ms) means the append is stuck, and the put is
  answered at once with OS_PAGE_CACHE_BUSY: SYSTEM_ERROR "[PC_SYNCHRONIZED]broker busy, start
  flow control for a while", Java's answer.
* **Queue timeout** (``brokerFastFailureEnable``, ``waitTimeMillsInSendQueue`` 200 ms). A put
  that waited longer than that in this worker - for ring space, or in the ring for the
  appender - is answered SYSTEM_BUSY "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for
  a while, period in queue: Nms, size of queue: M". A put already in the ring is withdrawn
  with the handshake documented in :mod:`pybroker.store.control_block`: this worker stores the
  highest withdrawn request id (``cancel_request_id``), fences and reads the appender's
  ``taken_request_id``; only requests above the taken id are answered, and the appender, which
  stores its taken id before reading the withdrawn one, completes those without storing them.
  So a request answered busy is never stored, and a request the appender took is never
  answered busy (like Java, which only cleans requests no thread has started).

The send fast path's puts (proc/ring_putter.py) are covered too: while the page cache is busy
its frames go to the handlers (which refuse them). The puts of both paths in the ring are one
FIFO in C (``SendPath``, the putter's :class:`RingRequests`): found by age, withdrawn with one
walk in the one handshake (a request id above the withdrawn one was never cancelled, so one
watermark serves both paths). This module is the one home of the rule: when (the policy, the
timer), the handshake, which puts (the FIFO's walk, ``SendCompletions.withdraw``, marks them
so their completions are dropped) and their answers (:func:`busy` for a Python path put,
:func:`busy_frame` - the handler's own encoding - for a fast send); the putter only delivers
them (a connection's writer, a put's future). The appender's half of the handshake is in
``_fast/append.pyx`` (a cancelled request is completed unstored).

The check runs on a timer armed at the oldest waiting put's deadline, not per put.
"""
import asyncio
import collections
from typing import Protocol

from pybroker._fast import ring
from pybroker.proc import ring_format
from pybroker.protocol.command import RemotingCommand, create_response, encode
from pybroker.store.message_store import PutResult
from pybroker.store.status import PutStatus, send_response

__all__ = ["FastFailure", "RingRequests", "Withdrawn", "busy", "busy_frame"]

# The completion code a withdrawn put is counted under (the fast sends' statistics).
_BUSY_STATUS = ring_format.status_code(PutStatus.TIMEOUT_CLEAN_QUEUE)


class RingRequests(Protocol):
    """The putter's puts (both paths) in the ring, waiting for their completion
    (ring_putter.RingPutter)."""

    def aged(self, limit: float, after_id: int) -> int:
        """Highest id above ``after_id`` of a put waiting since ``limit`` or before; 0."""

    def oldest(self, after_id: int) -> float | None:
        """Loop time the longest-waiting put above ``after_id`` started waiting, or None."""

    def count(self) -> int:
        """Puts waiting in the ring."""

    def withdraw(self, taken: int, up_to: int, status: int) -> tuple[int, list, list]:
        """Mark withdrawn the puts with ``taken`` < id <= ``up_to`` (their completions are
        dropped; fast sends count as completion code ``status``): ``(how many, the fast sends
        to answer as (slot, opaque, started), the Python path's as (request_id, started))``
        (``SendCompletions.withdraw``)."""

    def answer_fast(self, slot: int, frame: bytes) -> None:
        """Write a whole response frame to the connection of ``slot`` (if it is still open)."""

    def answer_python(self, request_id: int, result: PutResult) -> bool:
        """Answer the Python path's put ``request_id``; False when it was given up already."""


def busy(now: float, started: float, queued: int) -> PutResult:
    """The answer to a put withdrawn at loop time ``now`` that started waiting at ``started``
    with ``queued`` puts waiting (TIMEOUT_CLEAN_QUEUE: the figures of Java's remark)."""
    return PutResult(PutStatus.TIMEOUT_CLEAN_QUEUE, waited_ms=int((now - started) * 1000),
                     queue_size=queued)


def busy_frame(fields: dict[str, str], opaque: int, result: PutResult) -> bytes:
    """The whole response frame to a fast send withdrawn with ``result`` (:func:`busy`; its
    remark carries figures a response template cannot): the handler's own answer to it."""
    code, remark = send_response(result.status, waited_ms=result.waited_ms,
                                 queue_size=result.queue_size)
    request = RemotingCommand(0, opaque=opaque)
    return encode(create_response(request, code, remark, dict(fields)))


class Withdrawn(Exception):
    """A put withdrawn while it waited for ring space; ``result`` is its answer."""

    def __init__(self, result: PutResult):
        super().__init__(result.status.value)
        self.result = result


class FastFailure:
    """The fast-failure state of one remoting worker's RingPutter.

    ``control``: the control block; ``slot``: the worker's ring slot; ``appender_slot``: the
    appender's worker line (busy_since_ms); ``wait_ms``: waitTimeMillsInSendQueue, or None when
    brokerFastFailureEnable is false; ``page_cache_busy_ms``: osPageCacheBusyTimeOutMills;
    ``clock_ms``: epoch ms (the appender's busy_since_ms is epoch ms).
    """

    def __init__(self, control, slot: int, appender_slot: int, wait_ms: int | None,
                 page_cache_busy_ms: int, clock_ms):
        self._words = control.words()
        # The appender's busy_since_ms, read before every read's sends: a load without frames
        # (the send port's take in C calls it too: _fast/send/port.pyx).
        self.busy_since = control.worker(appender_slot).loader("busy_since_ms")
        self._cancel = control.worker(slot)
        self._taken_offset = control.taken_offset(slot)
        self.wait_s = None if wait_ms is None else wait_ms / 1000
        self.page_cache_busy_ms = page_cache_busy_ms
        self.clock_ms = clock_ms
        # (loop time the put started, waiter future) of puts waiting for ring space.
        self._waiting: collections.deque = collections.deque()
        self._withdrawn_up_to = 0
        # The queue-timeout check armed; read in C by the send port's take (_fast/send/port.pyx,
        # the twin of committed's test).
        self.timer: asyncio.TimerHandle | None = None
        self._requests: RingRequests | None = None
        self._response_fields: dict[str, str] = {}
        self.withdrawn_total = 0
        self.page_cache_busy_total = 0

    def set_limits(self, wait_ms: int | None, page_cache_busy_ms: int) -> None:
        """New limits (UPDATE_BROKER_CONFIG): puts from now on are judged by them; turning
        the queue timeout off drops the timer, and with it the tracking of waiting puts."""
        self.wait_s = None if wait_ms is None else wait_ms / 1000
        self.page_cache_busy_ms = page_cache_busy_ms
        if self.wait_s is None:
            self.close()
            self._waiting.clear()

    def attach(self, requests: RingRequests, response_fields: dict[str, str]) -> None:
        """Cover the putter's puts in the ring; a fast send's answer has the handler's
        ``response_fields`` (broker/send_fast.py FastSendSettings)."""
        self._requests = requests
        self._response_fields = response_fields

    # --- per put ----------------------------------------------------------------------------
    def page_cache_busy(self, began: int | None = None) -> bool:
        """True while the appender's running drain is older than osPageCacheBusyTimeOutMills.
        ``began``: its busy_since_ms loaded already (0: no drain running; the send port's
        take in C loads it and asks only while a drain runs), else loaded here."""
        if began is None:
            began = self.busy_since()
        return bool(began) and self.clock_ms() - began > self.page_cache_busy_ms

    def refuse_now(self) -> PutResult | None:
        """OS_PAGE_CACHE_BUSY when the appender's running drain is too old, else None."""
        if self.page_cache_busy():
            self.page_cache_busy_total += 1
            return PutResult(PutStatus.OS_PAGE_CACHE_BUSY)
        return None

    def committed(self, loop, started: float | None = None) -> None:
        """Puts entered the ring, the oldest waiting since loop time ``started`` (None: now,
        read only when the timer is armed: the fast path, once per read, not per send).
        Nothing to do while the timer is armed or the queue timeout is off: the send port's
        take in C tests that itself (_fast/send/port.pyx, a twin kept equal by
        tests/unit/_fast/test_send_port.py)."""
        if self.timer is None and self.wait_s is not None:
            self._arm(loop, loop.time() if started is None else started)

    def waiting(self, loop, waiter: asyncio.Future, started: float) -> None:
        """A put waits for ring space on ``waiter`` since loop time ``started``."""
        if self.wait_s is None:
            return
        self._waiting.append((started, waiter))
        self._arm(loop, started)

    # --- the timer ---------------------------------------------------------------------------
    def _arm(self, loop, started: float) -> None:
        if self.timer is None and self.wait_s is not None:
            self.timer = loop.call_at(started + self.wait_s, self._check, loop)

    def _check(self, loop) -> None:
        self.timer = None
        assert self.wait_s is not None          # armed only with fast failure on
        requests = self._requests
        now = loop.time()
        limit = now - self.wait_s
        queued = len(self._waiting) + (requests.count() if requests is not None else 0)
        self._withdraw_waiters(now, limit, queued)
        if requests is not None:
            self._withdraw_in_ring(requests, now, limit, queued)
        oldest = [started for started in (
            requests.oldest(self._withdrawn_up_to) if requests is not None else None,
            self._next_waiter_start()) if started is not None]
        if oldest:
            self._arm(loop, min(oldest))

    def _next_waiter_start(self) -> float | None:
        while self._waiting and self._waiting[0][1].done():
            self._waiting.popleft()
        return self._waiting[0][0] if self._waiting else None

    def _withdraw_waiters(self, now: float, limit: float, queued: int) -> None:
        while self._waiting and self._waiting[0][0] <= limit:
            started, waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_exception(Withdrawn(busy(now, started, queued)))
                self.withdrawn_total += 1

    def _withdraw_in_ring(self, requests: RingRequests, now: float, limit: float,
                          queued: int) -> None:
        highest = requests.aged(limit, self._withdrawn_up_to)
        if not highest:
            return
        self._cancel.cancel_request_id = highest
        ring.fence()
        taken = ring.load_u64(self._words, self._taken_offset)
        self._withdrawn_up_to = highest
        # Every request up to the watermark the appender did not take is cancelled, so every
        # such put is answered busy now (its completion will say so too, and is dropped).
        withdrawn, fast, python = requests.withdraw(taken, highest, _BUSY_STATUS)
        for slot, opaque, started in fast:
            requests.answer_fast(slot, busy_frame(self._response_fields, opaque,
                                                  busy(now, started, queued)))
        for request_id, started in python:
            if not requests.answer_python(request_id, busy(now, started, queued)):
                withdrawn -= 1       # its put was given up already (cancelled)
        self.withdrawn_total += withdrawn

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
