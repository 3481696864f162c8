# Reput: tail the CommitLog and write each record's ConsumeQueue unit and index keys (protocol.md
# §4.3-4.5).
"""The dispatcher ("reput" service): CommitLog records -> ConsumeQueue units + IndexFile keys.

:meth:`Dispatcher.dispatch_until` walks whole records from ``reput_from_offset`` up to a given
physical offset and, for each record:

* ConsumeQueue unit (physical offset, size, tags code) at the record's queue offset, unless the
  record is a PREPARED or ROLLBACK transaction record (those have no queue offset). The tags code
  is the Java hash of ``TAGS`` (0 without tags); for ``SCHEDULE_TOPIC_XXXX`` with a ``DELAY``
  level > 0 it is the delivery time: store time + delay of the level (capped to the last level).
* Index keys ``topic#UNIQ_KEY`` and ``topic#k`` per ``KEYS`` entry, unless ROLLBACK (the
  :class:`~pybroker.store.index_file.IndexService` applies that rule and skips records it has).

Both writes are idempotent (a ConsumeQueue skips units it already has, the index skips records
below its end offset), so re-dispatching a range after recovery is safe.

The walk runs in C (``pybroker._fast.dispatch.ReputScanner``): per record it writes the unit
and the index entries into the files this class binds to it for one call, with the rules below;
Python runs per call, per queue bound and for the rare records the scanner leaves to
:meth:`Dispatcher._dispatch_one` (the same rules in Python: schedule-topic tags codes, a queue's
first unit or full file, a full index file, a unit gap). Records are taken only up to a complete
record: a partially replicated tail (a slave's last chunk) stops the walk until more bytes
arrive. A damaged record in the written region is an
invariant violation and raises :class:`~pybroker.errors.StoreCorruptError`.

Ranges recovery skipped at the operator's request (:mod:`pybroker.store.damaged_records`) are
jumped over; after such a jump a queue-offset gap (the skipped record's unit, when it was never
written) is filled with filler units instead of stopping that queue.

The dispatched position is published after every call through ``on_dispatched(offset)`` (the
control block in the multi-process broker) and kept in :attr:`Dispatcher.reput_from_offset`.
With an ``offset_table`` (a :class:`pybroker.store.queue_offsets.QueueOffsetWriter`: the
dispatcher process's) :meth:`publish_offsets` publishes the max offset of every queue that
received units since its last call, in one C call for the units the scanner wrote: each
queue is bound to the scanner with the position of its word in the table, and the scanner
stores there its bound file's end in units (the queue's last file: the value of
``ConsumeQueue.max_offset_in_queue``). The queues the Python rules moved go through the
table's Python side after that (their value then is the latest, so a word never goes back).
"""
import logging
from collections.abc import Callable

from pybroker._fast import dispatch as reput
from pybroker._fast import record as record_codec
from pybroker._fast.jhash import tags_code as java_tags_code
from pybroker.errors import StoreCorruptError
from pybroker.protocol.constants import (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR,
                                         TRANSACTION_TYPE_MASK, MessageSysFlag, Property,
                                         SystemTopic)
from pybroker.store.commitlog import CommitLog
from pybroker.store.consume_queue import ConsumeQueue, ConsumeQueueStore
from pybroker.store.index_file import IndexService
from pybroker.store.mapped_file import MappedFile

__all__ = ["Dispatcher", "property_value"]

log = logging.getLogger(__name__)

_PREPARED = int(MessageSysFlag.TRANSACTION_PREPARED_TYPE)
_ROLLBACK = int(MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)
_NO_QUEUE_TYPES = (_PREPARED, _ROLLBACK)
_TAGS_KEY = Property.TAGS + NAME_VALUE_SEPARATOR
_KEYS_KEY = Property.KEYS + NAME_VALUE_SEPARATOR
_UNIQ_KEY = Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX + NAME_VALUE_SEPARATOR
_DELAY_KEY = Property.DELAY_TIME_LEVEL + NAME_VALUE_SEPARATOR


def property_value(properties: str, key_with_separator: str) -> str | None:
    """Value of one property in a properties string without decoding the others.

    ``key_with_separator`` is ``name + "\\x01"``. Like Java's decoder the last occurrence wins
    and an empty value counts as absent.
    """
    at = properties.rfind(key_with_separator)
    while at >= 0:
        if at == 0 or properties[at - 1] == PROPERTY_SEPARATOR:
            start = at + len(key_with_separator)
            end = properties.find(PROPERTY_SEPARATOR, start)
            value = properties[start:end] if end >= 0 else properties[start:]
            return value or None
        at = properties.rfind(key_with_separator, 0, at)
    return None


class Dispatcher:
    """Reput from the CommitLog into the consume queues and the index (the single writer of both).

    Parameters
    ----------
    commitlog : CommitLog
        The log to tail (read side is enough).
    consume_queue_store : ConsumeQueueStore
        Writable consume queues; a queue is created on its first record.
    index_service : IndexService or None
        Writable index, or None when ``messageIndexEnable`` is false.
    delay_levels_ms : tuple of int
        Delay of level 1, 2, ... (ms), for the schedule topic's tags code.
    reput_from_offset : int
        Physical offset (bytes) of the first record to dispatch.
    on_dispatched : callable, optional
        Called with the new dispatched physical offset after each :meth:`dispatch_until`.
    offset_table : QueueOffsetWriter, optional
        The queue offset table :meth:`publish_offsets` publishes moved queues' max offsets in.
    """

    def __init__(self, commitlog: CommitLog, consume_queue_store: ConsumeQueueStore,
                 index_service: IndexService | None, delay_levels_ms: tuple[int, ...],
                 reput_from_offset: int = 0,
                 on_dispatched: Callable[[int], None] | None = None,
                 damaged_records=None, keep_bindings: bool = False,
                 offset_table=None):
        if reput_from_offset < 0:
            raise ValueError(f"reput_from_offset must be >= 0, got {reput_from_offset}")
        self.commitlog = commitlog
        self.consume_queue_store = consume_queue_store
        self.index_service = index_service
        self.delay_levels_ms = tuple(delay_levels_ms)
        self.reput_from_offset = reput_from_offset
        self.on_dispatched = on_dispatched
        self.damaged_records = damaged_records    # DamagedRecords or None
        self._fill_gaps = False                   # set once a damaged range was jumped over
        self.last_store_timestamp = 0     # ms, store time of the last dispatched record
        self.dispatched_total = 0         # records dispatched since construction
        # One-entry cache: consecutive records mostly share a topic-queue.
        self._last_queue_key: tuple[str, int] | None = None
        self._last_queue: ConsumeQueue | None = None
        # The C side of the reput; files are bound to it within one dispatch_until call, or,
        # with keep_bindings (the dispatcher process), until release_files(): re-binding every
        # queue of a batch in Python cost more than the batch's records under load. The owner
        # must then call release_files() before any consume-queue or index file is closed.
        self.keep_bindings = keep_bindings
        self._scanner = reput.ReputScanner(index_service is not None)
        # scanner slot -> (queue, its bound last file)
        self._bound: dict[int, tuple[ConsumeQueue, MappedFile]] = {}
        self.offset_table = offset_table          # QueueOffsetWriter or None
        # Queues the Python rules gave units since the last publish_offsets() (None: no
        # table); the scanner keeps its own (ReputScanner.publish_offsets).
        self._moved: dict[tuple[str, int], ConsumeQueue] | None = \
            {} if offset_table is not None else None

    def publish_offsets(self) -> int:
        """Publish in ``offset_table`` the max offset of each queue that received units since
        the last call (call once the dispatched position covers them: a reader never sees a
        value ahead of it); the number of values stored."""
        stores = self._scanner.publish_offsets(self.offset_table.buffer)
        moved = self._moved
        if moved:
            # After the scanner's: a queue both moved holds its latest value, not the
            # bound file's end from before the Python rule placed a unit.
            self._moved = {}
            self.offset_table.publish_queues(moved.values())
            stores += len(moved)
        return stores

    def dispatch_behind_bytes(self, max_physical_offset: int | None = None) -> int:
        """Bytes written to the CommitLog but not dispatched yet."""
        if max_physical_offset is None:
            max_physical_offset = self.commitlog.max_offset()
        return max(max_physical_offset - self.reput_from_offset, 0)

    def dispatch_until(self, max_physical_offset: int) -> int:
        """Dispatch every whole record in ``[reput_from_offset, max_physical_offset)``.

        Returns the number of records dispatched. Stops early at the end of written data or at a
        record not yet complete (it is taken on a later call). StoreCorruptError on damage.
        """
        queue = self.commitlog.mapped_file_queue
        dispatched = 0
        offset = self.reput_from_offset
        try:
            while offset < max_physical_offset:
                limit = max_physical_offset
                if self.damaged_records:
                    span = self.damaged_records.span_at(offset)
                    if span is not None:
                        offset, self._fill_gaps = span[1], True
                        continue
                    limit = min(limit, self.damaged_records.next_start(offset) or limit)
                mapped_file = queue.find_mapped_file_by_offset(offset)
                if mapped_file is None:
                    min_offset = self.commitlog.min_offset()
                    if 0 <= offset < min_offset:
                        # Files below were deleted by cleanup: resume at the oldest record.
                        log.warning("reput offset %d is below the CommitLog min %d; skipping "
                                    "ahead", offset, min_offset)
                        offset = min_offset
                        continue
                    break
                count, next_offset = self._dispatch_file(mapped_file, offset, limit)
                dispatched += count
                if next_offset == offset:
                    break
                offset = next_offset
        finally:
            if self.keep_bindings:
                self._sync_queues()
            else:
                self._unbind_all()
        self.reput_from_offset = offset
        self.dispatched_total += dispatched
        if self.on_dispatched is not None:
            self.on_dispatched(offset)
        return dispatched

    def _dispatch_file(self, mapped_file: MappedFile, offset: int,
                       max_physical_offset: int) -> tuple[int, int]:
        """Dispatch records of one file from global ``offset``: (count, next global offset).

        The C scanner does the records; Python binds files to it and takes the rare records
        it leaves (pybroker._fast.dispatch)."""
        base = mapped_file.file_from_offset
        position = offset - base
        end = min(mapped_file.wrote_position, max_physical_offset - base)
        if position >= end or not mapped_file.hold():
            return 0, offset
        buffer = mapped_file.buffer()
        count = 0
        try:
            while position < end:
                stop, position, scanned, last_timestamp, topic, queue_id = \
                    self._scanner.scan(buffer, position, end)
                count += scanned
                if scanned:
                    self.last_store_timestamp = last_timestamp
                if stop in (reput.SCAN_DONE, reput.SCAN_END):
                    break      # the end, or a record whose bytes are not all here yet
                if stop == reput.SCAN_BLANK:
                    return count, base + self.commitlog.file_size
                if stop == reput.SCAN_CORRUPT:
                    raise StoreCorruptError(
                        f"{mapped_file.path}: damaged record at file position {position} "
                        f"(physical offset {base + position}) in the written region; "
                        f"dispatch stops")
                try:
                    if stop == reput.SCAN_NEED_QUEUE and topic is not None \
                            and self._bind_queue(topic, queue_id):
                        continue
                    if stop == reput.SCAN_NEED_INDEX and self._bind_index():
                        continue
                    position += self._dispatch_in_python(buffer, position)
                except ValueError as error:
                    # A topic that cannot name a queue directory (the CRC covers only the
                    # body, so a damaged topic passes it): damage, never a directory.
                    raise StoreCorruptError(
                        f"{mapped_file.path}: damaged record at file position {position} "
                        f"(physical offset {base + position}): {error}; dispatch stops") \
                        from error
                count += 1
            return count, base + position
        finally:
            buffer.release()
            mapped_file.release()

    def _bind_queue(self, topic_bytes: bytes, queue_id: int) -> bool:
        """Bind a queue's last file to the scanner; False when the Python rule must place
        the record (a fresh queue's first unit, a full last file)."""
        topic = topic_bytes.decode("utf-8", "replace")
        queue = self.consume_queue_store.find_or_create(topic, queue_id)
        files = queue.mapped_file_queue.mapped_files
        if not files or (len(files) == 1 and files[0].wrote_position == 0) \
                or files[-1].is_full() or queue.read_only:
            return False
        last = files[-1]
        table = self.offset_table
        # The scanner holds the view until release(); it is dropped then, never kept here.
        slot = self._scanner.bind_queue(topic_bytes, queue_id, last.buffer(),
                                        last.file_from_offset, last.wrote_position,
                                        queue.last_dispatched_phy_offset,
                                        -1 if table is None
                                        else table.value_position(topic, queue_id))
        self._bound[slot] = (queue, last)
        return True

    def _bind_index(self) -> bool:
        index_service = self.index_service
        if index_service is None or index_service.read_only:
            return False
        index_file = index_service.writable_file()
        self._scanner.bind_index(index_file.mapped_file.buffer(),
                                 index_service.max_hash_slot_num, index_service.max_index_num)
        return True

    def _sync_queues(self) -> None:
        """Positions the scanner wrote back into the Python queue objects."""
        for slot, wrote_position, last_dispatched_phy in self._scanner.take_dirty():
            queue, mapped_file = self._bound[slot]
            mapped_file.wrote_position = wrote_position
            queue.last_dispatched_phy_offset = last_dispatched_phy

    def release_files(self) -> None:
        """Release the scanner's maps (before files are closed: cleanup, topic deletion,
        shutdown); the next dispatch binds again."""
        self._unbind_all()

    def _unbind_all(self) -> None:
        self._sync_queues()
        self._scanner.release()
        self._bound.clear()

    def _dispatch_in_python(self, buffer, position: int) -> int:
        """Dispatch the record at ``position`` with the Python rules; returns its size."""
        self._unbind_all()        # Python may roll or create the files the scanner had
        message_record = record_codec.decode(buffer, position)
        try:
            self._dispatch_one(message_record)
        finally:
            message_record.body.release()
        return message_record.total_size

    def _dispatch_one(self, message_record) -> None:
        """ConsumeQueue unit and index keys of one decoded record."""
        properties = message_record.properties
        transaction_type = message_record.sys_flag & TRANSACTION_TYPE_MASK
        topic = message_record.topic
        store_timestamp = message_record.store_timestamp
        if transaction_type not in _NO_QUEUE_TYPES:
            tags_code = self._tags_code(topic, properties, store_timestamp)
            queue_key = (topic, message_record.queue_id)
            if queue_key != self._last_queue_key:
                self._last_queue = self.consume_queue_store.find_or_create(*queue_key)
                self._last_queue_key = queue_key
            queue = self._last_queue
            assert queue is not None            # set with its key above
            if not queue.put(message_record.physical_offset, message_record.total_size,
                             tags_code, message_record.queue_offset, self._fill_gaps):
                raise StoreCorruptError(
                    f"consume queue {topic}-{message_record.queue_id} refused queue offset "
                    f"{message_record.queue_offset} of physical offset "
                    f"{message_record.physical_offset}: the queue and the CommitLog disagree")
            if self._moved is not None:
                self._moved[queue_key] = queue
        index_service = self.index_service
        if index_service is not None and transaction_type != _ROLLBACK:
            keys = property_value(properties, _KEYS_KEY)
            uniq_key = property_value(properties, _UNIQ_KEY)
            if keys or uniq_key:
                index_service.build_index(topic, keys, uniq_key, message_record.physical_offset,
                                          store_timestamp, message_record.sys_flag)
        self.last_store_timestamp = store_timestamp

    def _tags_code(self, topic: str, properties: str, store_timestamp: int) -> int:
        tags_code = java_tags_code(property_value(properties, _TAGS_KEY))
        if topic != SystemTopic.SCHEDULE:
            return tags_code
        level_text = property_value(properties, _DELAY_KEY)
        try:
            level = int(level_text) if level_text is not None else 0
        except ValueError:
            log.warning("schedule record at %d has DELAY %r; tags code kept", store_timestamp,
                        level_text)
            return tags_code
        level = min(level, len(self.delay_levels_ms))
        if level <= 0:
            return tags_code
        return store_timestamp + self.delay_levels_ms[level - 1]

    def forget_queues(self) -> None:
        """Drop the cached queues (call after consume queues were destroyed or replaced).
        Max offsets not yet published are dropped with them (a destroyed queue's must not
        follow its 0): with an offset table, republish every queue after this."""
        self._last_queue_key = None
        self._last_queue = None
        self._unbind_all()
        self._scanner.forget()
        if self._moved:
            self._moved = {}

