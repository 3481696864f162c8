# RingPutter: the Putter of a remoting worker - send ring to the appender, completion ring back.
"""Put requests travel to the appender through the worker's send ring (design.md §2 rule 3, §6).

The request and completion layouts are :mod:`pybroker.proc.ring_format`; the appender answers
with one completion slot per request. Under SYNC_FLUSH a ``wait_store`` put is answered only
once the control block's ``flushed_position`` covers the run (or ``syncFlushTimeout`` ms
passed: FLUSH_DISK_TIMEOUT). Under SYNC_MASTER it also waits for ``replicated_position``
(a slave acknowledged the run; FLUSH_SLAVE_TIMEOUT after ``slaveTimeout``, as Java), and is answered
SLAVE_NOT_AVAILABLE at once when no slave is connected or the slave is ``haMaxGapNotInSync``
bytes or more behind the run's end (Java's isSlaveOK). With both, the replica's outcome wins,
as in Java. The instrument SYNC_FLUSH_WAIT_US records how long each SYNC_FLUSH acknowledgement
was held (both paths).

Both paths share the ring through :class:`pybroker._fast.send.take.SendPath`: the Python path
(:meth:`RingPutter.put`) and the send fast path of the worker's connections
(:class:`pybroker.proc.send_port.FastSendPort`: frames straight from a receive buffer into
the ring, completions straight into response bytes) take request ids, ring space and
completion slots from it, so requests of both kinds stay in one order and one count. A put
may start only with a completion slot free for it (the appender can then always complete what
it takes). The
SYNC_FLUSH / SYNC_MASTER holds of both paths are one implementation, in C
(``pybroker/_fast/send/held.pyx``): a Python path put waits in the same FIFO as the fast
sends and its outcome (the status, as the fast path answers it) comes back here from
``SendPath.drain`` and from :class:`pybroker.proc.ack_holds.AckHolds` (the holds' wake-ups
and timer), which hands them to :meth:`RingPutter.answer`. Fast failure
(:mod:`pybroker.proc.fast_failure`) covers both paths: while the page cache is busy every
frame goes to the handlers (which refuse it), and puts of either path that waited too long in
the ring are withdrawn in one walk of that FIFO and answered by fast failure, delivered here
(:meth:`RingPutter.answer_fast`, :meth:`RingPutter.answer_python`).

Wake-ups: the worker has ONE eventfd. Its sleep flags (:meth:`RingPutter.sleep_flags`) are the
completion ring's consumer flag, the send ring's producer flag while a put waits for space, and
a waiter bit on ``flushed_position`` / ``replicated_position`` while acknowledgements wait for
it (AckHolds); whoever publishes signals the eventfd only when the flag is set (the flusher once per
flush, the ha worker once per slave report: waits are released per batch, never per
message). :meth:`RingPutter.on_wake` runs in the event loop's own turn
(``pybroker.proc.wake.AsyncWakeReader``).
"""
import asyncio
import collections
import dataclasses
from collections.abc import Callable, Sized
from typing import Protocol

from pybroker._fast.send import take as send_take
from pybroker._fast.timer_reput import Assembly
from pybroker.broker.interfaces import RingFull
from pybroker.broker.send_fast import FastSendSettings
from pybroker.proc import ring_format
from pybroker.proc.ack_holds import AckHolds
from pybroker.proc.fast_failure import FastFailure, Withdrawn
from pybroker.proc.send_port import FastSendPort
from pybroker.proc.wake import (AsyncWakeReader, ConsumerSide, DeferredSignal, ProducerSide,
                                SleepFlag)
from pybroker.protocol.constants import RETRY_GROUP_TOPIC_PREFIX
from pybroker.protocol.message_id import offset_message_id
from pybroker.store import layout
from pybroker.store.message_store import PutResult
from pybroker.store.status import PutStatus

__all__ = ["RingPutter", "FastPut"]

# The fast path writes put requests in C (pybroker/_fast/send/take.pyx) with the appender's
# C view of ring_format's layout (pybroker/_fast/put_request.pxd, checked by ring_format);
# these are the facts send_take exports besides.
assert ring_format.PUT_HEADER.size == send_take.PUT_HEADER_FIXED_BYTES
assert ring_format.PUT_FLAG_WAIT_STORE == send_take.PUT_FLAG_WAIT_STORE
PUT_STATUSES = ring_format.PUT_STATUSES
_NO_GAP_RULE_BYTES = 1 << 62      # controller mode: no haMaxGapNotInSync rule
_PUT_OK = ring_format.status_code(PutStatus.PUT_OK)
# Puts committed while the appender's wake-up is deferred to the end of the loop turn, beyond
# which it is signalled at once (measured: a whole turn of 64 puts lock-stepped the two sides).
_SIGNAL_DEFER_PUTS_MAX = 16


def _record_sizes(view: memoryview, count: int) -> list[int]:
    """TOTALSIZE of each record of a run but the last (the message ids' offsets; the worker
    encoded them: trusted, but bounded)."""
    sizes: list[int] = []
    position = 0
    while position + 4 <= len(view) and len(sizes) < count - 1:
        size = int.from_bytes(view[position:position + 4], "big")
        if size <= 0:
            break
        sizes.append(size)
        position += size
    return sizes


class _Pending:
    """A Python path put waiting for its outcome; ``sizes`` (None: no message ids wanted)
    are the sizes of its records but the last."""
    __slots__ = ("future", "sizes")

    def __init__(self, future, sizes):
        self.future = future
        self.sizes = sizes


class FastPut(Protocol):
    """A put of another fast path waiting for its outcome (RingPutter.add_fast_put)."""

    def settled(self, status: PutStatus) -> None:
        """The put's outcome (a refusal or withdrawal too)."""


def _no_fast_sends() -> FastSendSettings:
    """Settings of a putter whose fast path is never used (the supervisor's own ring, an ACL
    broker)."""
    template = (False, (b"{", b"", b"", b"", b"}"), 0)
    return FastSendSettings(b"", 0, 16 << 20, 0, [template] * len(PUT_STATUSES) + [template],
                            _PUT_OK, PUT_STATUSES.index(PutStatus.FLUSH_DISK_TIMEOUT), {},
                            PUT_STATUSES.index(PutStatus.FLUSH_SLAVE_TIMEOUT),
                            PUT_STATUSES.index(PutStatus.SLAVE_NOT_AVAILABLE))


class RingPutter:
    """Putter of a remoting worker (see the module docstring).

    Parameters
    ----------
    ring, completion_ring : pybroker._fast.ring.ByteRing / CompletionRing
        This worker's producer side of its send ring and consumer side of its completion ring.
    control : pybroker.store.control_block.ControlBlock
        Read for ``flushed_position``.
    appender_wake : pybroker.proc.wake.WakeFd
        Signalled when a commit finds the appender asleep.
    slot : int
        This worker's slot (control-block waiter bit).
    store_host : (bytes, int)
        Broker IP bytes and port, for offset message ids.
    sync_flush : bool
        ``flushDiskType`` is SYNC_FLUSH.
    sync_flush_timeout_ms : int
        ``syncFlushTimeout``: how long a SYNC_FLUSH ``wait_store`` put waits for the flush (ms).
    sync_master : bool
        ``brokerRole`` is SYNC_MASTER.
    slave_timeout_ms : int
        ``slaveTimeout``: how long a SYNC_MASTER ``wait_store`` put waits for a slave (ms).
    ha_max_gap_bytes : int
        ``haMaxGapNotInSync``: a slave this far behind the run's end is not available.
    fast_failure : pybroker.proc.fast_failure.FastFailure, optional
        Answer busy instead of waiting (remoting workers; see that module).
    fast_sends : pybroker.broker.send_fast.FastSendSettings or None
        Enables :meth:`open_fast_port` (remoting workers); None for a putter without
        connections or on an ACL broker.
    controller_mode : bool
        A controller-mode master (docs/architecture/controller.md): the ha worker
        publishes in ``ha_slaves_connected`` how many acknowledgements a send waits for and
        in ``replicated_position`` what they cover; none to wait for is SEND_OK (Java's
        SyncStateSet of one), never SLAVE_NOT_AVAILABLE, and no gap rule applies.
    min_in_sync_replicas : int
        Controller mode: a ``wait_store`` send is refused (in-sync replicas not enough) while
        the published in-sync count is smaller (Java checks it before the append).
    auto_message_version : bool
        ``autoMessageVersionOnTopicLen``: retry topics past 127 bytes are put (as V2
        records); refused when False (:func:`pybroker.store.layout.topic_storable`).
    """

    def __init__(self, ring, completion_ring, control, appender_wake, slot: int,
                 store_host: tuple[bytes, int], sync_flush: bool = False,
                 sync_flush_timeout_ms: int = 5000, sync_master: bool = False,
                 ha_max_gap_bytes: int = 256 << 20, fast_failure: FastFailure | None = None,
                 fast_sends: FastSendSettings | None = None, controller_mode: bool = False,
                 min_in_sync_replicas: int = 1, auto_message_version: bool = True,
                 slave_timeout_ms: int = 3000):
        self.ring = ring
        self.auto_message_version = auto_message_version
        self.completion_ring = completion_ring
        self.control = control
        self.appender_wake = appender_wake
        self.slot = slot
        self.store_host = store_host
        self.sync_flush = sync_flush
        self.sync_flush_timeout_s = sync_flush_timeout_ms / 1000
        self.sync_master = sync_master
        self.controller_mode = controller_mode
        self.min_in_sync_replicas = min_in_sync_replicas if controller_mode else 1
        if controller_mode:
            ha_max_gap_bytes = _NO_GAP_RULE_BYTES
        self.ha_max_gap_bytes = ha_max_gap_bytes
        self.fast_enabled = fast_sends is not None
        self.fast_settings = settings = fast_sends or _no_fast_sends()
        # Nothing to wait for (both paths, decided in C): SLAVE_NOT_AVAILABLE (classic),
        # SEND_OK (controller mode).
        self.core = send_take.SendPath(
            ring, completion_ring, bytes(store_host[0]), store_host[1], settings.cluster_pair,
            settings.max_message_size, settings.frame_max_bytes, settings.ext_fields_max,
            sync_flush, self.sync_flush_timeout_s, settings.templates, settings.put_ok,
            settings.flush_timeout, sync_master, ha_max_gap_bytes, settings.slave_timeout,
            settings.put_ok if controller_mode else settings.slave_not_available,
            slave_timeout_ms / 1000)
        if settings.timer is not None and settings.recall_templates is not None:
            self.core.set_timer(settings.recall_templates,
                                *dataclasses.astuple(settings.timer))
        self._pending: dict[int, _Pending | FastPut] = {}
        self._space_waiters: collections.deque = collections.deque()
        core = self.core
        self.holds = AckHolds(core, control, slot, sync_flush or sync_master, self.answer)
        # The producer flag counts only while a put waits for space and a completion slot
        # is free (wake.ProducerSide); a waiter bit on a position only while acknowledgements
        # are held for it (AckHolds).
        # The deque's own __len__, not a lambda: asked each time the flags are armed, once
        # per wake-up (the deque is emptied in place, never replaced).
        self._space_flag = ProducerSide(ring, self._space_waiters.__len__,
                                        lambda: core.has_room)
        self._flags: list[SleepFlag] = [ConsumerSide(completion_ring), self._space_flag,
                                        *self.holds.sleep_flags()]
        self._reader: AsyncWakeReader | None = None
        # The loop of the first wake-up: asyncio.get_running_loop() costs a getpid system
        # call per call on Python 3.11, once per completion wake-up here (measured,
        # docs/architecture/data-plane.md "Where one send's time goes").
        self._wake_loop: asyncio.AbstractEventLoop | None = None
        # The appender's deferred wake-up (after_commit; the send port's take calls it in C).
        self.appender_signal = DeferredSignal(appender_wake, _SIGNAL_DEFER_PUTS_MAX)
        self._writers: dict[int, Callable[[bytes], object]] = {}
        self._answers_flushes: list[Callable[[], None]] = []
        # What each flush would write (add_answers_flush): one non-empty means a wake-up has
        # Python work (the completion round asks in C, pybroker/_fast/send/round.pyx).
        self.answers_pending: list[Sized] = []
        self.puts_total = 0
        self.space_waits_total = 0
        self.fast_failure = fast_failure
        if fast_failure is not None:
            fast_failure.attach(self, settings.response_fields)

    # --- wiring ---------------------------------------------------------------------------------
    def sleep_flags(self) -> list[SleepFlag]:
        """The sleep flags to arm before this worker blocks on its eventfd."""
        return list(self._flags)

    def start(self, wake_fd, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Drive on_wake from ``wake_fd`` in ``loop`` (the worker may instead combine
        sleep_flags() and on_wake() with its other wake-up work in one AsyncWakeReader)."""
        loop = loop or asyncio.get_running_loop()
        reader = self._reader = AsyncWakeReader(loop, wake_fd, self._flags, self.on_wake)
        reader.start()

    def stop(self) -> None:
        """Undo start() (idempotent)."""
        if self._reader is not None:
            self._reader.stop()
            self._reader = None

    def set_stats(self, recorder) -> None:
        """Count fast sends in ``recorder``'s section (a pybroker.stats.recorder.Recorder) as
        the handlers count theirs, and both paths' SYNC_FLUSH holds (SYNC_FLUSH_WAIT_US); the
        oldest-unanswered-send gauge covers both paths."""
        self.core.set_stats(recorder.writer)
        # The handlers' oldest is pushed to C when it changes, not asked for on every take
        # and drain (one Python call each).
        self.core.set_python_oldest(recorder.oldest_ms("send"))
        recorder.send_oldest_changed = self.core.set_python_oldest
        recorder.send_oldest_elsewhere = self.core.fast_oldest_ms

    def set_fast_topics(self, entries: list) -> None:
        """The topics the fast path may take (broker.send_fast.fast_topics)."""
        self.core.set_topics(entries)

    def set_timer_wheel(self, wheel: memoryview | None) -> None:
        """The timerwheel's read-only bytes for the fast path's congestion rule
        (broker/timer_slots.py WheelSlotCounts.follow)."""
        self.core.set_timer_wheel(wheel)

    def open_fast_port(self, born_host: tuple[bytes, int],
                       write: Callable[[bytes], object]) -> FastSendPort:
        """A connection's door to the fast path; ``write(frames)`` sends its response frames
        (one bytes object per drain)."""
        if not self.fast_enabled:
            raise RuntimeError("this putter has no fast path")
        slot = self.core.open_slot(bytes(born_host[0]), born_host[1])
        self._writers[slot] = write
        return FastSendPort(self, slot)

    def lend_socket(self, slot: int, fd: int) -> None:
        """The socket the answers of ``slot`` may be written to straight from C (its
        connection has nothing queued or buffered before them), or -1 (no longer so; see
        RemotingConnection.lend_socket)."""
        if slot in self._writers:
            self.core.set_slot_fd(slot, fd)

    def close_fast_port(self, slot: int) -> None:
        """Drop the fast port of ``slot`` (its connection closed) and the answers due to it."""
        if self._writers.pop(slot, None) is not None:
            self.core.close_slot(slot)

    def add_fast_put(self, request_id: int, pending: "FastPut") -> None:
        """A put another fast path wrote as a Python path put (the ACK_MESSAGE taker,
        proc/ack_port.py): ``pending.settled(status)`` is called with its outcome, as a put()
        returns it."""
        self._pending[request_id] = pending

    def add_answers_flush(self, flush: Callable[[], None], pending: Sized) -> None:
        """``flush()`` runs after every batch of outcomes is handed out (a fast path writes
        the answers its FastPuts made then: one write per connection per batch); ``pending``
        holds what it would write (never replaced: emptied in place), non-empty exactly when
        ``flush()`` has something to write."""
        self._answers_flushes.append(flush)
        self.answers_pending.append(pending)

    @property
    def round_core(self) -> "send_take.SendPath | None":
        """The send path the worker's completion round may drain in C (_fast/send/round.pyx):
        None under SYNC_FLUSH or SYNC_MASTER, whose held acknowledgements on_wake releases
        (with the loop's time and the replicated position)."""
        return None if self.holds.enabled else self.core

    # --- put ------------------------------------------------------------------------------------
    async def put(self, records, topic: str, queue_id: int, count: int, sys_flag: int,
                  wait_store: bool, *, message_ids: bool = True) -> PutResult:
        """Send ``count`` encoded records of one topic/queue to the appender; the PutResult
        (``store_timestamp`` is 0: the completion does not carry it; ``message_id`` is
        empty with ``message_ids`` False: no record's size is read, no id made)."""
        view = memoryview(records).cast("B")
        topic_bytes = topic.encode()
        return await self._put_written(len(view), topic, topic_bytes, count, wait_store,
                                       lambda started: self.core.put_python(
                                           view, topic_bytes, queue_id, count, sys_flag,
                                           wait_store, started), view, message_ids)

    async def put_assembled(self, assembly: Assembly, run: int, topic: str, queue_id: int,
                            sys_flag: int, wait_store: bool) -> PutResult:
        """put() of the timer's run ``run`` of ``assembly`` (broker/timer_runs.py
        ``prepared``), its records assembled straight into the ring's reserved space from
        their recipes and the parked records (SendPath.put_assembled); no message ids."""
        topic_bytes = topic.encode()
        return await self._put_written(assembly.run_bytes(run), topic, topic_bytes,
                                       assembly.run_records(run), wait_store,
                                       lambda started: self.core.put_assembled(
                                           assembly, run, topic_bytes, queue_id, sys_flag,
                                           wait_store, started), None, False)

    async def _put_written(self, records_bytes: int, topic: str, topic_bytes: bytes,
                           count: int, wait_store: bool, write: Callable[[float], int],
                           view: memoryview | None, message_ids: bool) -> PutResult:
        """A put whose request ``write(started)`` reserves and writes (its id, -1 without
        room): refused, or waited for room and then for its outcome."""
        refused = self._refusal(records_bytes, topic, topic_bytes, count, wait_store)
        if refused is not None:
            return refused
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            request_id = await self._reserve(lambda: write(started), started)
        except Withdrawn as withdrawn:
            return withdrawn.result
        return await self._commit_put(loop, request_id, view, count, started,
                                      loop.create_future(), message_ids)

    def put_now(self, records, topic: str, queue_id: int, count: int, sys_flag: int,
                wait_store: bool, future: asyncio.Future) -> PutResult | None:
        """put() without a coroutine, for a caller that has its own future to resolve (the
        POP revive records: broker/pop/revive_log.py): the refusal as a PutResult, or None
        once the records are in the ring, ``future`` then resolved with the outcome as
        put(message_ids=False) returns it (no message id: the revive records' waiters read
        none). The appender is woken at once when it sleeps (:meth:`wake_at_once`: the
        callers put a turn's first record, or everything of the turn at its end). Raises
        RingFull, with nothing done, when the ring has no room now (or puts already wait for
        room): put() waits for it."""
        view = memoryview(records).cast("B")
        topic_bytes = topic.encode()
        refused = self._refusal(len(view), topic, topic_bytes, count, wait_store)
        if refused is not None:
            return refused
        # The future's own loop (a C call): asyncio.get_running_loop() is a getpid system
        # call on Python 3.11.
        loop = future.get_loop()
        started = loop.time()
        request_id = self._try_reserve(lambda: self.core.put_python(
            view, topic_bytes, queue_id, count, sys_flag, wait_store, started))
        if request_id < 0:
            raise RingFull
        self._commit_put(loop, request_id, view, count, started, future, False, True)
        return None

    def _refusal(self, records_bytes: int, topic: str, topic_bytes: bytes, count: int,
                 wait_store: bool) -> PutResult | None:
        """What put() answers without writing to the ring, or None."""
        if count <= 0 or not layout.topic_storable(
                len(topic_bytes), topic.startswith(RETRY_GROUP_TOPIC_PREFIX),
                self.auto_message_version):
            return PutResult(PutStatus.MESSAGE_ILLEGAL)
        size = ring_format.put_request_size(len(topic_bytes), records_bytes)
        if size > self.ring.record_max_bytes:
            return PutResult(PutStatus.MESSAGE_SIZE_EXCEEDED)
        fast_failure = self.fast_failure
        if fast_failure is not None:
            refused = fast_failure.refuse_now()
            if refused is not None:
                return refused
        if wait_store and self.min_in_sync_replicas > 1 and self.sync_master and \
                self.control.sync_state()[2] < self.min_in_sync_replicas:
            return PutResult(PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH)
        return None

    def _commit_put(self, loop: asyncio.AbstractEventLoop, request_id: int,
                    view: memoryview | None, count: int, started: float,
                    future: asyncio.Future, message_ids: bool = True,
                    wake_at_once: bool = False) -> asyncio.Future:
        """A put reserved as ``request_id``: wait for its outcome on ``future`` (with the
        records' offset message ids when ``message_ids``: ``view`` its records); the
        appender's wake-up deferred to the turn's end (after_commit), or given at once."""
        self._pending[request_id] = _Pending(
            future, _record_sizes(view, count) if message_ids and view is not None else None)
        if self.fast_failure is not None:
            self.fast_failure.committed(loop, started)
        # Commit at once: a deferred commit per loop turn made bigger batches but, measured,
        # lock-stepped one producer with the appender (fewer messages/s, not more).
        if wake_at_once:
            self.wake_at_once(self.ring.commit())
        else:
            self.after_commit(loop, self.ring.commit(), 1)
        self.puts_total += 1
        return future

    def after_commit(self, loop: asyncio.AbstractEventLoop, appender_asleep: bool,
                     puts: int) -> None:
        """After a commit of ``puts`` requests: when the appender sleeps, wake it after the
        callbacks of this loop turn (the other puts decoded from the same reads) have
        committed too, or as soon as _SIGNAL_DEFER_PUTS_MAX puts wait
        (:class:`~pybroker._fast.wake.DeferredSignal`, which the send port's take calls in
        C)."""
        self.appender_signal.after_commit(loop, appender_asleep, puts)

    def wake_at_once(self, appender_asleep: bool) -> None:
        """After a commit (``appender_asleep``: what it returned), for a caller that has put
        everything it had (the ACK port after a read's acks, RevivePuts): wake the appender
        now when it sleeps or its wake-up waits for the end of this loop turn (one signal;
        :meth:`DeferredSignal.wake_at_once <pybroker._fast.wake.DeferredSignal>`)."""
        self.appender_signal.wake_at_once(appender_asleep)

    async def _reserve(self, write: Callable[[], int], started: float) -> int:
        """Write the request into the ring (room and a completion slot; ``write``: the
        SendPath call that reserves and writes it, -1 without room): waits, never drops
        (fast failure may withdraw the put: Withdrawn); returns its request id."""
        while True:
            request_id = self._try_reserve(write)
            if request_id >= 0:
                return request_id
            self.space_waits_total += 1
            loop = asyncio.get_running_loop()
            self.after_commit(loop, self.ring.commit(), 0)   # what is reserved must go out
            waiter = self.wait_for_space()
            if self.fast_failure is not None:
                self.fast_failure.waiting(loop, waiter, started)
            await waiter

    def _try_reserve(self, write: Callable[[], int]) -> int:
        """The request written into the ring now by ``write``: its id, or -1 when there is
        no room or puts already wait for room (they go first, in order)."""
        if self._space_waiters:
            return -1
        return write()

    def wait_for_space(self) -> asyncio.Future:
        """A future resolved at the next wake-up that may have freed ring space or completion
        slots (puts queue behind it in order: the fast path takes nothing meanwhile)."""
        waiter = asyncio.get_running_loop().create_future()
        self._space_waiters.append(waiter)
        self.core.python_waiting = True
        # Arm now: the appender signals only a producer flagged asleep.
        if self._space_flag.set_sleeping():
            self._space_flag.clear_sleeping()
            self._wake_space_waiters()
        return waiter

    def _wake_space_waiters(self) -> None:
        waiters = list(self._space_waiters)
        self._space_waiters.clear()
        self.core.python_waiting = False
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # --- completions ----------------------------------------------------------------------------
    def on_wake(self) -> None:
        """Drain the completion ring (fast puts are answered there), release the acks that
        the flushed / replicated positions cover, resolve the Python path's puts answered,
        write the fast answers, and let puts waiting for space retry. (A worker's completion
        round calls it only on the wake-ups that have Python work: _fast/send/round.pyx.)"""
        core = self.core
        control = self.control
        loop = self._wake_loop
        if loop is None or loop.is_closed():
            loop = self._wake_loop = asyncio.get_running_loop()
        if self.sync_master:
            outcomes = core.drain(loop.time(), control.replicated_position,
                                  control.ha_slaves_connected)
        else:
            outcomes = core.drain(loop.time())
        holds = self.holds
        if holds.enabled:
            outcomes += holds.release()
        self.answer(outcomes)
        if self._space_waiters:
            self._wake_space_waiters()

    def answer(self, outcomes: list, outputs: list | None = None) -> None:
        """Resolve the Python path's puts answered (``outcomes``, as SendPath gives them)
        and write the fast sends' answers of every connection (``outputs``: what
        ``send_outputs()`` left for the writers, when the caller called it)."""
        if outcomes:
            self._resolve_all(outcomes)
        # Each connection's answers of this drain: sent in C to the sockets lent
        # (lend_socket), the rest (or all of them) through the connections' writers.
        if outputs is None:
            outputs = self.core.send_outputs()
        if outputs:
            writers = self._writers
            for slot, frames in outputs:
                writers[slot](frames)
        for flush in self._answers_flushes:
            flush()

    @property
    def python_puts_waiting(self) -> int:
        """Python path puts not answered yet (in the ring, or held for the flush / a
        slave)."""
        return len(self._pending)

    def _resolve_all(self, outcomes: list) -> None:
        """Resolve the Python path's puts from their outcomes (SendPath._python_outcome)."""
        ip, port = self.store_host
        pending_table = self._pending
        for request_id, status_code, stored, count, physical_offset, queue_offset, \
                records_bytes in outcomes:
            pending = pending_table.pop(request_id, None)
            if pending is None:
                raise RuntimeError(f"outcome for unknown request {request_id}")
            if not isinstance(pending, _Pending):      # a fast path's put (add_fast_put)
                pending.settled(ring_format.status_of(status_code))
                continue
            if pending.future.done():       # answered busy by fast failure already
                continue
            status = ring_format.status_of(status_code)
            if not stored:
                pending.future.set_result(PutResult(status))
                continue
            message_id = ""
            if pending.sizes is not None:
                ids, position = [offset_message_id(ip, port, physical_offset)], physical_offset
                for size in pending.sizes:
                    position += size
                    ids.append(offset_message_id(ip, port, position))
                message_id = ",".join(ids)
            pending.future.set_result(PutResult(status, physical_offset, queue_offset, count,
                                                records_bytes, message_id, 0))

    # --- fast failure's view of the ring (fast_failure.RingRequests) -------------------------
    def aged(self, limit: float, after_id: int) -> int:
        """Highest request id above ``after_id`` of a put (either path) waiting in the ring
        since loop time ``limit`` or before, 0 when none."""
        return self.core.aged(limit, after_id)

    def oldest(self, after_id: int) -> float | None:
        """Loop time the longest-waiting put above ``after_id`` started waiting, or None."""
        return self.core.oldest(after_id)

    def count(self) -> int:
        """Puts (both paths) waiting in the ring for their completion."""
        return self.core.waiting

    def withdraw(self, taken: int, up_to: int, status: int) -> tuple[int, list, list]:
        """Mark withdrawn the puts (either path) with ``taken`` < request id <= ``up_to``:
        the FIFO's walk in C (SendCompletions.withdraw); fast failure answers them."""
        return self.core.withdraw(taken, up_to, status)

    def answer_fast(self, slot: int, frame: bytes) -> None:
        """Write a whole response frame to the connection of ``slot``, if still attached."""
        writer = self._writers.get(slot)
        if writer is not None:
            writer(frame)

    def answer_python(self, request_id: int, result: PutResult) -> bool:
        """Answer the Python path's put ``request_id`` with ``result``; False when it was
        given up already (cancelled)."""
        pending = self._pending.pop(request_id, None)
        if pending is None:
            return False
        if not isinstance(pending, _Pending):      # a fast path's put (add_fast_put)
            pending.settled(result.status)
            for flush in self._answers_flushes:
                flush()
            return True
        if pending.future.done():
            return False
        pending.future.set_result(result)
        return True

