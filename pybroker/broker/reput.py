# The one re-put path: a stored message becomes the record to put under a new topic and queue.
"""Re-putting stored messages (delay delivery, send-back, transaction end and check).

Every service that takes a message out of the CommitLog and puts it again builds the new record
with :func:`reput_message`; the callers only decide the destination and the properties, each
with the Java 4.9 broker's rule written next to it (``schedule.py``, ``send_back.py``,
``end_transaction.py``, ``transaction_check.py``). The property maps a Java client then sees are
compared field by field with the Java broker's in ``tests/compat/test_property_fidelity.py``.

Java builds a re-put message from two things that may differ: the properties *string* it stores
(often computed before the last property changes) and the properties *map* its CommitLog looks
at when it puts the message. The map decides the put-time delay redirect: a NOT/COMMIT type
message whose map has ``DELAY`` > 0 goes to SCHEDULE_TOPIC_XXXX queue ``level - 1`` and the
stored string is then recomputed from the map plus REAL_TOPIC/REAL_QID (the level capped at the
highest one). :func:`reput_message` takes both: ``properties`` (the string's content) and
``redirect`` (the map, or None when the caller knows no redirect can apply).

The services that walk a queue of their own to find what to re-put (delay levels, transaction
half and op queues) read it in batches with :func:`read_batch`.
"""
from collections.abc import Mapping
from typing import NamedTuple

from pybroker.broker import send
from pybroker.broker.interfaces import StoreReader
from pybroker.broker.timer_message import TimerRules
from pybroker.protocol.constants import (TRANSACTION_TYPE_MASK, MessageSysFlag, Property,
                                         SystemTopic)
from pybroker.protocol.properties import encode_properties
from pybroker.store.status import GetStatus

__all__ = ["RePut", "reput_message", "real_destination", "read_batch"]

_REDIRECTABLE_TYPES = (0, int(MessageSysFlag.TRANSACTION_COMMIT_TYPE))
READ_BATCH_COUNT = 32            # records a re-putting service reads per get_messages call
# Offsets the store cannot serve: the service jumps to the offset the answer names.
_SKIP_STATUSES = (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY,
                  GetStatus.OFFSET_FOUND_NULL, GetStatus.MESSAGE_WAS_REMOVING,
                  GetStatus.MESSAGE_DAMAGED)     # the store logged the damaged record


class RePut(NamedTuple):
    """A record ready for ``Putter.put(records, topic, queue_id, 1, sys_flag, False)``."""
    records: bytearray
    topic: str
    queue_id: int
    sys_flag: int


def read_batch(store_reader: StoreReader, group: str, topic: str, queue_id: int,
               queue_offset: int) -> tuple[int, list[bytes]]:
    """(offset of the first record, copies of up to READ_BATCH_COUNT records) of a queue a
    re-putting service walks (delay levels, transaction half and op queues). When the store
    cannot serve ``queue_offset`` the first item is the offset to go on from, with no
    records."""
    result = store_reader.get_messages(group, topic, queue_id, queue_offset, READ_BATCH_COUNT)
    try:
        if result.status in _SKIP_STATUSES and result.next_begin_offset != queue_offset:
            return result.next_begin_offset, []
        if result.status is not GetStatus.FOUND:
            return queue_offset, []
        return queue_offset, [bytes(buffer) for buffer in result.buffers]
    finally:
        result.release()


def real_destination(properties: Mapping[str, str]) -> tuple[str, int] | None:
    """(REAL_TOPIC, REAL_QID) of a schedule or half message; None when unusable."""
    topic = properties.get(Property.REAL_TOPIC)
    text = properties.get(Property.REAL_QUEUE_ID, "")
    if not topic or not text.isdigit():
        return None
    return topic, int(text)


def reput_message(decoded, topic: str, queue_id: int, properties: Mapping[str, str] | str, *,
                  redirect: Mapping[str, str] | None = None, levels_count: int = 0,
                  timer: TimerRules | None = None, now_ms: int = 0,
                  sys_flag: int | None = None, flag: int | None = None,
                  reconsume_times: int | None = None, prepared_transaction_offset: int = 0,
                  store_timestamp: int = 0, queue_offset: int = 0,
                  physical_offset: int = 0) -> RePut:
    """The record that puts the stored message ``decoded`` (a ``record.decode`` result) again.

    Body, born host and time and store host always come from ``decoded``; ``sys_flag``,
    ``flag`` and ``reconsume_times`` too unless given. ``properties`` is stored as given (the
    caller applies its Java rule; a map, or the properties string itself); ``redirect`` is the
    map the store looks at for the put-time redirects (send.redirect_scheduled: the 5.x timer
    rule ``timer`` at ``now_ms``, then the delay level with ``levels_count`` levels; see the
    module docstring); a redirect turns the destination into SCHEDULE_TOPIC_XXXX or
    rmq_sys_wheel_timer.
    ``prepared_transaction_offset`` (bytes), ``store_timestamp`` (ms), ``queue_offset`` and
    ``physical_offset`` are written as given (the appender patches the last three of a stored
    record; a record sent to a client keeps them).
    Raises SendRefused (MESSAGE_ILLEGAL) when the redirect map has a non-numeric DELAY, and
    with Java's code and remark when the timer rule refuses.
    """
    if sys_flag is None:
        sys_flag = decoded.sys_flag
    stored: Mapping[str, str] | str = properties
    if redirect is not None and sys_flag & TRANSACTION_TYPE_MASK in _REDIRECTABLE_TYPES:
        assert levels_count > 0, "a delay redirect needs the delay levels"
        assert timer is not None, "a redirect needs the timer rules"
        seen = dict(redirect)
        new_topic, new_queue_id = send.redirect_scheduled(topic, queue_id, seen, levels_count,
                                                          timer, now_ms)
        if new_topic in (SystemTopic.SCHEDULE, SystemTopic.WHEEL_TIMER) and new_topic != topic:
            topic, queue_id, stored = new_topic, new_queue_id, seen
    records = send.encode_message(
        topic, queue_id, decoded.flag if flag is None else flag, decoded.body,
        stored if isinstance(stored, str) else encode_properties(stored), sys_flag,
        decoded.born_timestamp,
        (decoded.born_host, decoded.born_port), (decoded.store_host, decoded.store_port),
        decoded.reconsume_times if reconsume_times is None else reconsume_times,
        prepared_transaction_offset, store_timestamp, queue_offset, physical_offset)
    return RePut(records, topic, queue_id, sys_flag)
