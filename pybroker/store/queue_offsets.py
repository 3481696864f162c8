# The queue offset table: every consume queue's max offset, published by the dispatcher.
"""A shared region of one generation where the dispatcher publishes each consume queue's max
offset (next queue offset to write, in units) as it moves, so a reader in another process
answers ``get_max_offset_in_queue`` with one dictionary look-up and one load, without opening,
listing or scanning the queue's files (issue #28 item 5: a Prometheus scrape and
GET_BROKER_RUNTIME_INFO cost O(groups x subscribed queues), never O(store)).

The region is a :class:`pybroker.proc.shared.SharedRegion` the supervisor creates for each
generation before the fork (:func:`initialise` writes its header); the writer and the readers
take its buffer. Layout (native-endian 64-bit words, read with acquire loads and written with
release stores through ``pybroker._fast.ring``)::

    offset  size  content                                              writer
    0       8     magic "PBQOFFS1"                                      creator
    8       8     layout version (LAYOUT_VERSION)                       creator
    16      8     file size in bytes                                    creator
    24      8     end: bytes of entries published after ENTRIES_OFFSET  dispatcher
    32      8     ready: 1 once every queue loaded at start is in       dispatcher
    40      8     overflow: 1 once a queue did not fit                  dispatcher
    64 ...        entries, each 8-byte aligned:
                    +0   8  max offset of the queue (units)
                    +8   4  queue id (int32)
                    +12  4  topic length in bytes (UTF-8)
                    +16  n  topic bytes, zero-padded to 8

The dispatcher is the only writer. An entry is written whole before ``end`` covers it (a
release store), so a reader that loaded ``end`` reads only complete entries; an entry never
moves or goes away (a deleted topic's queues read 0, as a queue without a directory does).
The dispatcher publishes a batch's queues after ``dispatched_position``, so a value never runs
ahead of what the dispatched position covers, and a queue's value only grows between two
topic deletions. Most values are stored by the reput scanner in C, at the word positions
:meth:`QueueOffsetWriter.value_position` gave it (``Dispatcher.publish_offsets`` in
pybroker/store/dispatch.py): one call a batch, each value one release store. Before
``ready`` (the dispatcher of a new generation has not published its loaded queues yet) and,
after an overflow, for a queue not in the table, a reader answers None: the caller falls back
to the consume-queue files.
"""
import struct

from pybroker._fast import ring

__all__ = ["initialise", "QueueOffsetWriter", "QueueOffsetReader", "TABLE_BYTES",
           "ENTRIES_OFFSET"]

MAGIC = int.from_bytes(b"PBQOFFS1", "little")
LAYOUT_VERSION = 1
_MAGIC_OFFSET, _VERSION_OFFSET, _SIZE_OFFSET = 0, 8, 16
_END_OFFSET, _READY_OFFSET, _OVERFLOW_OFFSET = 24, 32, 40
ENTRIES_OFFSET = 64
_ENTRY_HEAD = struct.Struct("=qiI")      # max offset, queue id, topic length
# About 100,000 queues of 24-byte topic names (the region is allocated, as every shared
# region: pybroker/proc/shared.py).
TABLE_BYTES = 4 << 20


def _entry_bytes(topic_length: int) -> int:
    return _ENTRY_HEAD.size + (topic_length + 7) // 8 * 8


def initialise(buffer) -> None:
    """Write the header of a fresh (zeroed) table region (the creator, before the fork)."""
    ring.store_u64(buffer, _SIZE_OFFSET, len(buffer))
    ring.store_u64(buffer, _VERSION_OFFSET, LAYOUT_VERSION)
    ring.store_u64(buffer, _MAGIC_OFFSET, MAGIC)


def _checked(buffer):
    if len(buffer) < ENTRIES_OFFSET or ring.load_u64(buffer, _MAGIC_OFFSET) != MAGIC or \
            ring.load_u64(buffer, _VERSION_OFFSET) != LAYOUT_VERSION:
        raise ValueError(f"not a version {LAYOUT_VERSION} queue offset table")
    return buffer


class QueueOffsetWriter:
    """The dispatcher's side: :meth:`publish` a queue's max offset, :meth:`republish` every
    queue of a consume-queue store (at start, after a topic deletion), then :meth:`ready`."""

    def __init__(self, buffer):
        self.buffer = _checked(buffer)
        self.size = len(buffer)
        self.entries: dict[tuple[str, int], int] = {}     # (topic, queue id) -> value offset
        self.end = 0
        self.overflowed = False
        # Entries of a predecessor in this table are continued, never written twice.
        for key, at in _read_entries(self.buffer, 0, ring.load_u64(self.buffer, _END_OFFSET)):
            self.entries[key] = at
        self.end = ring.load_u64(self.buffer, _END_OFFSET)

    def publish(self, topic: str, queue_id: int, max_offset: int) -> None:
        at = self.entries.get((topic, queue_id))
        if at is None:
            self._append(topic, queue_id, max_offset)
        else:
            ring.store_u64(self.buffer, at, max_offset)

    def value_position(self, topic: str, queue_id: int) -> int:
        """Byte position of the queue's max-offset word, for a writer in C (the reput
        scanner's ``publish_offsets``). A queue without an entry gets one reading 0, what a
        reader answers for a queue not in the table until the table overflowed (every queue
        loaded at start is in it then, so such a queue is one created since, and a batch's
        units are published after the batch); after an overflow it gets none (-1: a reader
        then asks the queue's files), nor when it does not fit."""
        at = self.entries.get((topic, queue_id))
        if at is None:
            if self.overflowed:
                return -1
            self._append(topic, queue_id, 0)
            at = self.entries.get((topic, queue_id), -1)
        return at

    def publish_queues(self, queues) -> None:
        """Publish each ConsumeQueue of ``queues`` (topic, queue id and max offset)."""
        for queue in queues:
            self.publish(queue.topic, queue.queue_id, queue.max_offset_in_queue())

    def republish(self, queue_store) -> None:
        """Every queue of ``queue_store`` (a ConsumeQueueStore) as it is now, and 0 for a
        queue in the table that the store no longer has (its topic was deleted)."""
        for (topic, queue_id), at in self.entries.items():
            if queue_store.find(topic, queue_id) is None:
                ring.store_u64(self.buffer, at, 0)
        self.publish_queues(queue_store.queues())

    def ready(self) -> None:
        """Every queue the dispatcher loaded is in: readers may trust an absent queue."""
        ring.store_u64(self.buffer, _READY_OFFSET, 1)

    def _append(self, topic: str, queue_id: int, max_offset: int) -> None:
        name = topic.encode("utf-8")
        size = _entry_bytes(len(name))
        at = ENTRIES_OFFSET + self.end
        if at + size > self.size:
            if not self.overflowed:
                self.overflowed = True
                ring.store_u64(self.buffer, _OVERFLOW_OFFSET, 1)
            return
        self.buffer[at:at + size] = (_ENTRY_HEAD.pack(max_offset, queue_id, len(name)) + name
                                     ).ljust(size, b"\0")
        self.entries[(topic, queue_id)] = at
        self.end += size
        ring.store_u64(self.buffer, _END_OFFSET, self.end)


def _read_entries(buffer, start: int, end: int):
    """((topic, queue id), value offset) of the entries in [start, end) after ENTRIES_OFFSET."""
    position = start
    while position < end:
        at = ENTRIES_OFFSET + position
        _, queue_id, length = _ENTRY_HEAD.unpack_from(buffer, at)
        name_at = at + _ENTRY_HEAD.size
        yield (bytes(buffer[name_at:name_at + length]).decode("utf-8", "replace"), queue_id), at
        position += _entry_bytes(length)


class QueueOffsetReader:
    """Any other process's side: :meth:`max_offset` of a queue, or None when the table cannot
    say (not ready yet, or the queue may be one that did not fit)."""

    def __init__(self, buffer):
        self.buffer = _checked(buffer)
        self.entries: dict[tuple[str, int], int] = {}
        self.end = 0
        self._ready = False

    def _catch_up(self) -> None:
        end = ring.load_u64(self.buffer, _END_OFFSET)
        if end != self.end:
            self.entries.update(_read_entries(self.buffer, self.end, end))
            self.end = end

    def max_offset(self, topic: str, queue_id: int) -> int | None:
        """The queue's max offset as the dispatcher last published it (0 for a queue that
        does not exist), or None when the table cannot say."""
        if not self._ready:
            self._ready = ring.load_u64(self.buffer, _READY_OFFSET) == 1
            if not self._ready:
                return None
        at = self.entries.get((topic, queue_id))
        if at is None:
            self._catch_up()
            at = self.entries.get((topic, queue_id))
            if at is None:
                return None if ring.load_u64(self.buffer, _OVERFLOW_OFFSET) else 0
        return ring.load_u64(self.buffer, at)

    def max_offsets(self, topic: str, queue_ids) -> list[int | None]:
        """:meth:`max_offset` of each queue of ``topic`` (a POP of every queue counts what
        each has left: one call, not one per queue)."""
        if not self._ready:
            return [self.max_offset(topic, queue_id) for queue_id in queue_ids]
        buffer, entries, load = self.buffer, self.entries, ring.load_u64
        offsets: list[int | None] = []
        for queue_id in queue_ids:
            at = entries.get((topic, queue_id))
            offsets.append(self.max_offset(topic, queue_id) if at is None
                           else load(buffer, at))
        return offsets
