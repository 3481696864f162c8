# POP check-points and acks: records of rmq_sys_REVIVE_LOG_<cluster>, put as timer messages.
"""The records POP puts on its revive topic, built as Java 5.3.3's broker builds them.

A check-point (tag ``ck``) is a timer message due one second before its revive time, an ack
(``ack``) or batch ack (``bAck``) one due at it (``TIMER_DELIVER_MS``), so that read in due
order every ack of a check-point follows it (Java PopMessageProcessor.buildCkMsg,
AckMessageProcessor.appendAck). Each carries Java's UNIQ_KEY (topic@queue@offset@group@popTime@
broker@tag). Born and store host are the broker's; born time is now. They go through the
process's own putter like any put, so they are replicated, flushed and recovered as sends are,
and a POP or ack is answered only once its record is written (under SYNC_FLUSH: flushed).

As in Java (its store hooks see these puts), the 5.x timer's put-time rule applies
(broker/timer_message.py): a record due later is parked on ``rmq_sys_wheel_timer`` and reaches
its revive queue when the timer delivers it; one already due (a late ack) is stored there at
once. So the revive log holds records in due order, whichever broker wrote the store, and the
revive service (broker/pop/revive.py) takes a check-point as due by how far the timer has
delivered. POP needs the timer (Java refuses POP with timerWheelEnable=false); a refusal of the
rule (flow control, an invisible time past timerMaxDelaySec) is the put's outcome.

The records of one loop turn after its first go out together (:class:`RevivePuts`): a remoting
worker answers many acks per read of a busy connection, and each would otherwise be a ring
request, a completion and often an appender wake-up of its own. Those that share a topic and
queue (the parked ones all do) are one put of several records, in the order they came; each
waiter is answered with that put's outcome once it is stored, so nothing is answered earlier
than alone. That put goes into the ring at the end of the turn itself (the putter's put_now),
not from a task of its own, and the appender is woken then, not one turn later. The turn's
first record (a POP's check-point, a lone ack: a POP-then-ACK client's case) does not wait for
the turn's end: it is put and the appender woken at once, so the appender appends it while
the worker finishes its turn. The outcome resolves the waiter's future directly when the put
carries one record, so a record costs no loop turn beyond its waiter's.
"""
import asyncio
import weakref

from pybroker.broker import send
from pybroker.broker.interfaces import RingFull
from pybroker.broker.timer_message import TIMER_TOPIC, TimerRefused, TimerRules, parked_slot
from pybroker.protocol.constants import (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR,
                                         PopConstants, Property)
from pybroker.store.message_store import PutResult
from pybroker.store.pop_checkpoint import AckMsg, BatchAckMsg, PopCheckPoint, checkpoint_body
from pybroker.store.status import PutStatus
from pybroker.tasks import start_task

__all__ = ["checkpoint_message", "pop_checkpoint_message", "ack_message", "put_revive_record",
           "ReviveRecord", "RevivePuts"]

# One put of a loop turn's records: at most this many records and bytes (a ring request).
TURN_PUT_RECORDS_MAX = 256
TURN_PUT_BYTES_MAX = 256 << 10
_SPLIT = PopConstants.SPLIT
_ACK_TAG, _BATCH_ACK_TAG = PopConstants.ACK_TAG, PopConstants.BATCH_ACK_TAG
# The properties of a revive record, written as encode_properties writes them.
_SEP = PROPERTY_SEPARATOR
_TAGS = Property.TAGS + NAME_VALUE_SEPARATOR
_DELIVER_MS = Property.TIMER_DELIVER_MS + NAME_VALUE_SEPARATOR
_UNIQ_KEY = Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX + NAME_VALUE_SEPARATOR
_OUT_MS = Property.TIMER_OUT_MS + NAME_VALUE_SEPARATOR
_REAL_TOPIC = Property.REAL_TOPIC + NAME_VALUE_SEPARATOR
_REAL_QID = Property.REAL_QUEUE_ID + NAME_VALUE_SEPARATOR


class ReviveRecord:
    """One record to put: its bytes, the topic and queue it is stored under (the wheel topic
    when parked), or the timer rule's refusal (``refused``: a PutStatus, nothing to put)."""

    __slots__ = ("records", "topic", "queue_id", "refused")

    def __init__(self, records: bytearray, topic: str, queue_id: int,
                 refused: PutStatus | None = None):
        self.records = records
        self.topic = topic
        self.queue_id = queue_id
        self.refused = refused


def _record(revive_topic: str, revive_qid: int, tag: str, body: bytes, deliver_ms: int,
            key: tuple[str, int, int, str, int, str | None], store_host: tuple[bytes, int],
            timer: TimerRules, now_ms: int) -> ReviveRecord:
    """The record with TAGS, TIMER_DELIVER_MS and Java's UNIQ_KEY (``key``: topic, queue id,
    offset, group, pop time, broker name; ``null`` for a missing name; then the check-point's
    tag, which acks share), under the timer's put-time rule for ``deliver_ms`` (given as the
    number it is: the rule does not read it back from the property). The properties string is
    written once, in the order encode_properties writes the dict the rule would have filled
    (the rule's three properties last when parked)."""
    try:
        slot_ms = parked_slot(deliver_ms, timer, now_ms)
    except TimerRefused as refused:
        return ReviveRecord(bytearray(), revive_topic, revive_qid, PutStatus[refused.status])
    topic, queue_id, offset, group, pop_time, broker_name = key
    properties = f"{_TAGS}{tag}{_SEP}{_DELIVER_MS}{deliver_ms}{_SEP}{_UNIQ_KEY}" \
        f"{'null' if topic is None else topic}{_SPLIT}{queue_id}{_SPLIT}{offset}{_SPLIT}" \
        f"{'null' if group is None else group}{_SPLIT}{pop_time}{_SPLIT}" \
        f"{'null' if broker_name is None else broker_name}{_SPLIT}" \
        f"{_ACK_TAG if tag == _BATCH_ACK_TAG else tag}{_SEP}"
    if slot_ms is None:                 # due already: stored on its revive queue
        topic, queue_id = revive_topic, revive_qid
    else:
        properties = f"{properties}{_OUT_MS}{slot_ms}{_SEP}{_REAL_TOPIC}{revive_topic}{_SEP}" \
                     f"{_REAL_QID}{revive_qid}{_SEP}"
        topic, queue_id = TIMER_TOPIC, 0
    records = send.encode_message(topic, queue_id, 0, body, properties, 0, now_ms, store_host,
                                  store_host)
    return ReviveRecord(records, topic, queue_id)


def checkpoint_message(ck: PopCheckPoint, revive_topic: str, revive_qid: int,
                       store_host: tuple[bytes, int], timer: TimerRules,
                       now_ms: int) -> ReviveRecord:
    """The record of check-point ``ck`` for revive queue ``revive_qid``, under ``timer``'s
    put-time rule."""
    return _record(revive_topic, revive_qid, PopConstants.CK_TAG, ck.encode(),
                   ck.revive_time - PopConstants.ACK_TIME_INTERVAL_MS,
                   (ck.topic, ck.queue_id, ck.start_offset, ck.cid, ck.pop_time,
                    ck.broker_name), store_host, timer, now_ms)


def pop_checkpoint_message(topic: str, group: str, queue_id: int, start_offset: int,
                           pop_time: int, invisible_time: int, queue_offset_diff: list[int],
                           broker_name: str, revive_topic: str, revive_qid: int,
                           store_host: tuple[bytes, int], timer: TimerRules,
                           now_ms: int) -> ReviveRecord:
    """:func:`checkpoint_message` of the check-point a POP writes (the PopCheckPoint of these
    fields, nothing acked, read from nowhere, never re-put), from its fields: the POP makes
    no object for it."""
    return _record(revive_topic, revive_qid, PopConstants.CK_TAG,
                   checkpoint_body(topic, group, queue_id, start_offset, pop_time,
                                   invisible_time, len(queue_offset_diff), queue_offset_diff,
                                   broker_name),
                   pop_time + invisible_time - PopConstants.ACK_TIME_INTERVAL_MS,
                   (topic, queue_id, start_offset, group, pop_time, broker_name), store_host,
                   timer, now_ms)


def ack_message(ack: AckMsg, revive_topic: str, revive_qid: int, deliver_ms: int,
                store_host: tuple[bytes, int], timer: TimerRules, now_ms: int) -> ReviveRecord:
    """The record of ``ack`` (or a batch ack) due at ``deliver_ms`` (its check-point's revive
    time). Java names both kinds by the single-ack id (appendAck overwrites the batch id)."""
    tag = PopConstants.BATCH_ACK_TAG if isinstance(ack, BatchAckMsg) else PopConstants.ACK_TAG
    return _record(revive_topic, revive_qid, tag, ack.encode(), deliver_ms,
                   (ack.topic, ack.queue_id, ack.ack_offset, ack.consumer_group, ack.pop_time,
                    ack.broker_name), store_host, timer, now_ms)


class RevivePuts:
    """The revive records of one putter waiting for the end of this loop turn, by topic and
    queue (see the module docstring)."""

    def __init__(self, putter):
        self.putter = putter
        self._waiting: dict[tuple[str, int], list[tuple[bytearray, asyncio.Future]]] = {}
        self._flush_handle: asyncio.Handle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.puts_total = 0          # ring requests made
        self.records_total = 0       # records they carried

    def put(self, record: ReviveRecord) -> asyncio.Future:
        """A future of the PutResult of the put that will carry ``record``: the turn's first
        record is put at once, the others with each other at the turn's end."""
        loop = self._loop
        if loop is None or not loop.is_running():
            # Records left by a loop that ended before its turn did (tests run one loop per
            # call) have no waiter left: start afresh in this one. (The loop is kept, not
            # asked for: asyncio.get_running_loop() is a getpid system call on Python 3.11.)
            loop = asyncio.get_running_loop()
            self._loop, self._waiting, self._flush_handle = loop, {}, None
        future = loop.create_future()
        if self._flush_handle is not None:
            self._waiting.setdefault((record.topic, record.queue_id), []).append(
                (record.records, future))
            return future
        # The turn's first record (a POP's check-point, a lone ack): into the ring and the
        # appender woken now, not one loop turn later; the rest of the turn's records wait
        # for its end, behind it.
        self._flush_handle = loop.call_soon(self._flush)
        self._put_run(record.topic, record.queue_id, [(record.records, future)])
        return future

    def _flush(self) -> None:
        self._flush_handle = None
        if not self._waiting:           # the turn's only record went at once
            return
        waiting, self._waiting = self._waiting, {}
        for (topic, queue_id), entries in waiting.items():
            start = 0
            while start < len(entries):
                end, size = start, 0
                while end < len(entries) and end - start < TURN_PUT_RECORDS_MAX and \
                        (end == start or size + len(entries[end][0]) <= TURN_PUT_BYTES_MAX):
                    size += len(entries[end][0])
                    end += 1
                self._put_run(topic, queue_id, entries[start:end])
                start = end

    def _put_run(self, topic: str, queue_id: int,
                 entries: list[tuple[bytearray, asyncio.Future]]) -> None:
        """Put one run's records: straight into the putter's ring when it takes them now
        (put_now, which wakes the appender at once: the outcome resolves the one waiter's own
        future, or a future whose callback answers every waiter), else in a task that waits
        for room."""
        records = entries[0][0] if len(entries) == 1 else \
            b"".join(records for records, _ in entries)
        self.puts_total += 1
        self.records_total += len(entries)
        put_now = getattr(self.putter, "put_now", None)
        if put_now is not None:
            if len(entries) == 1:
                future = entries[0][1]
            else:
                future = entries[0][1].get_loop().create_future()
                future.add_done_callback(lambda done: _answer_all(entries, done))
            try:
                refused = put_now(records, topic, queue_id, len(entries), 0, True, future)
            except RingFull:
                pass
            except Exception as error:  # each waiter meets what its own put would have
                _fail_all(entries, error)
                return
            else:
                if refused is not None and not future.done():
                    future.set_result(refused)
                return
        start_task(self._put_waiting(topic, queue_id, records, entries), "revive record put")

    async def _put_waiting(self, topic: str, queue_id: int, records,
                           entries: list[tuple[bytearray, asyncio.Future]]) -> None:
        try:
            result = await self.putter.put(records, topic, queue_id, len(entries), 0, True)
        except asyncio.CancelledError:
            _cancel_all(entries)
            raise
        except Exception as error:
            _fail_all(entries, error)
            return
        _settle_all(entries, result)


def _answer_all(entries: list[tuple[bytearray, asyncio.Future]], done: asyncio.Future) -> None:
    """Answer every waiter of a run with the outcome of its put (``done``)."""
    if done.cancelled():
        _cancel_all(entries)
        return
    error = done.exception()
    if error is not None:
        _fail_all(entries, error)
        return
    _settle_all(entries, done.result())


def _settle_all(entries: list[tuple[bytearray, asyncio.Future]], result) -> None:
    for _, future in entries:
        if not future.done():
            future.set_result(result)


def _cancel_all(entries: list[tuple[bytearray, asyncio.Future]]) -> None:
    for _, future in entries:
        future.cancel()


def _fail_all(entries: list[tuple[bytearray, asyncio.Future]], error: BaseException) -> None:
    for _, future in entries:
        if not future.done():
            future.set_exception(error)


_TURN_PUTS: "weakref.WeakKeyDictionary[object, RevivePuts]" = weakref.WeakKeyDictionary()


_LAST_TURN_PUTS: list[RevivePuts | None] = [None]   # the last one asked for


def turn_puts(putter) -> RevivePuts:
    """The :class:`RevivePuts` of ``putter`` (one per putter of the process; a process has
    one putter: the last one asked for is found without the weak dictionary's frame)."""
    puts = _LAST_TURN_PUTS[0]
    if puts is not None and puts.putter is putter:
        return puts
    puts = _TURN_PUTS.get(putter)
    if puts is None:
        puts = _TURN_PUTS[putter] = RevivePuts(putter)
    _LAST_TURN_PUTS[0] = puts
    return puts


def put_revive_record(putter, record: ReviveRecord) -> "asyncio.Future[PutResult]":
    """Put ``record`` with the other revive records of this loop turn: a future done once it
    is stored (the putter's durability condition); a record the timer rule refused is that
    refusal, done at once. (A future, not a coroutine: the waiter's await is the put's own.)"""
    if record.refused is not None:
        future = asyncio.get_running_loop().create_future()
        future.set_result(PutResult(record.refused))
        return future
    return turn_puts(putter).put(record)
