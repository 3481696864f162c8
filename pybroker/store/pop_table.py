# The shared POP state: one slot per topic@group@queue, mapped by every process that pops.
"""Per-queue POP state shared by the remoting workers (docs/architecture/pop.md).

A POP of a queue needs, at once and whichever remoting worker its connection landed on: the
next offset to hand out, a lock so two POPs of the same group never hand out the same messages,
the order-POP record of the queue, and the in-flight count. They live here, in a mapped file
(``<store>/run/pop``) every process maps, one fixed-size slot per topic@group@queue, so a POP
costs no round trip to another process. Words are native-endian unsigned 64-bit, read with
acquire loads and written with release stores or atomic read-modify-writes
(``pybroker._fast.ring``)::

    header (4096 bytes)
    0     magic "PBPOPTB1"                                   creator
    8     layout version (2)                                 creator
    16    slots (count)                                      creator
    24    version: bumped when a held POP may now find something (an order queue's head was
          freed by an ack): every process that holds POPs re-checks them   any (fetch_add)
    32    waiters: bit i = worker slot i holds POPs and wants that wake-up    waiter sets,
                                                                            notifier takes
    40    used: one past the highest slot ever assigned; scans stop there    supervisor
          (a slot page is never read before it is assigned: on tmpfs a read fault
          allocates the page, so a scan of all 256 MiB of sparse slots would fill the disk)
    slot i at 4096 * (1 + i), 4096 bytes:
    0     state: 0 free, 1 assigned (stored after the key)   supervisor
    8     lock: 0 free, else the holder's tag                any (exchange; holder clears)
    16    pop offset: next queue offset to pop (UNSET before the first POP)   lock holder
    24    in flight: popped, not yet acked nor revived (two's complement)     any (fetch_add)
    32    offset seq: bumped with each offset the metadata service sets       supervisor
    40    offset value: that offset (a reset, or another writer's commit)     supervisor
    48    offset flags: bit 0 = a reset (taken even when lower)               supervisor
    56    applied seq: the offset seq the POP side has taken                  lock holder
    64    order length: bytes of the order record's JSON (0: none)            lock holder
    72    last pop (epoch ms)                                                 lock holder
    80    in-flight since (epoch ms): acks of POPs before it do not count      supervisor
    88    held: POP requests held for this key, in every process (POLLING_INFO) any (fetch_add)
    128   key: u16 topic length, topic, u16 group length, group, u32 queue id supervisor
    1024  order record: OrderInfo JSON (broker/pop/order_info.py)            lock holder

**Why several writers here.** design.md §2 wants one writer per region. The metadata service
(supervisor) is the single writer of the directory (which slot holds which key) and of what it
sets (offset resets and commits from other clients); but the POP fields of a slot are written by
whichever remoting worker pops or acks that queue, under the slot's lock. A single writer per
slot would mean sending every POP of a group to one process: a cross-process hand-off per POP
(~45 us p50, ms at p99 on this box, design.md §6) on the consume hot path, or pinning all of a
group's connections to one worker, which SO_REUSEPORT cannot do. The lock is a test-and-set word
(try-lock: a POP that finds it taken skips the queue, as Java's QueueLockManager.tryLock); it is
held across the check-point's append, never across a client wait. A process that dies holding
it ends the generation (the crash model), and the supervisor clears every lock before the next
generation forks: no lock outlives its holder. Cost: one exchange and one store per popped
queue, and 4 KiB of address space per slot, disk blocks allocated when a slot is assigned.

The file outlives a ``kill -9`` of the broker (page cache): the next start reads the pop offsets
and order records from it before anything else (``recovered_slots``), so offsets handed out but
not yet in consumerOffset.json are not handed out again.
"""
import mmap
import os
import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from pybroker._fast import ring
from pybroker.store import disk_space

__all__ = ["PopTable", "SlotKey", "UNSET_OFFSET", "SLOT_BYTES", "ORDER_RECORD_MAX_BYTES",
           "KEY_PART_MAX_BYTES", "LOCKED_ELSEWHERE", "NOT_PLAIN"]

MAGIC = int.from_bytes(b"PBPOPTB1", "little")
LAYOUT_VERSION = 2
HEADER_BYTES = 4096
SLOT_BYTES = 4096
UNSET_OFFSET = 0xFFFFFFFFFFFFFFFF
_U64_MASK = 0xFFFFFFFFFFFFFFFF

_MAGIC_OFFSET, _VERSION_OFFSET, _SLOTS_OFFSET = 0, 8, 16
_TABLE_VERSION_OFFSET, _WAITERS_OFFSET, _USED_OFFSET = 24, 32, 40

_STATE, _LOCK, _POP_OFFSET, _IN_FLIGHT = 0, 8, 16, 24
_OFFSET_SEQ, _OFFSET_VALUE, _OFFSET_FLAGS, _APPLIED_SEQ = 32, 40, 48, 56
_ORDER_LENGTH, _LAST_POP_MS, _IN_FLIGHT_SINCE_MS, _HELD = 64, 72, 80, 88
_KEY_OFFSET = 128
_ORDER_OFFSET = 1024
ORDER_RECORD_MAX_BYTES = SLOT_BYTES - _ORDER_OFFSET
KEY_PART_MAX_BYTES = 255
_OFFSET_FLAG_RESET = 1
_ASSIGNED = 1
# What PopTable.take_plain finds for a slot when it cannot give its pop offset (both < 0).
LOCKED_ELSEWHERE = -1
NOT_PLAIN = -2

assert _KEY_OFFSET + 2 + KEY_PART_MAX_BYTES + 2 + KEY_PART_MAX_BYTES + 4 <= _ORDER_OFFSET
assert _HELD + 8 <= _KEY_OFFSET
assert ORDER_RECORD_MAX_BYTES == 3072


class SlotKey(NamedTuple):
    topic: str
    group: str
    queue_id: int


class PendingOffset(NamedTuple):
    """An offset the metadata service set and the POP side has not taken yet."""
    seq: int
    value: int
    reset: bool


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


class PopTable:
    """The mapped table at ``path``. :meth:`create` (supervisor) or :meth:`attach` (workers,
    tools). Slot indexes come from the supervisor (:meth:`assign`)."""

    def __init__(self, path: str, buffer: mmap.mmap, slots: int, fd: int | None):
        self.path = path
        self._map: mmap.mmap | None = buffer
        self.slots = slots
        self._fd = fd           # the creator keeps it to allocate slot pages on assignment

    # --- open and close ------------------------------------------------------------------------
    @classmethod
    def create(cls, path: str, slots: int) -> "PopTable":
        """A fresh, empty table of ``slots`` slots (a stale file is unlinked first). The file
        is sparse: a slot's page gets its disk blocks when it is assigned."""
        if slots <= 0:
            raise ValueError(f"a POP table needs slots, got {slots}")
        if os.path.lexists(path):
            os.unlink(path)
        size = HEADER_BYTES + SLOT_BYTES * slots
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            disk_space.allocate(fd, HEADER_BYTES, path)
            os.ftruncate(fd, size)
            buffer = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        ring.store_u64(buffer, _VERSION_OFFSET, LAYOUT_VERSION)
        ring.store_u64(buffer, _SLOTS_OFFSET, slots)
        ring.store_u64(buffer, _MAGIC_OFFSET, MAGIC)
        return cls(path, buffer, slots, fd)

    @classmethod
    def attach(cls, path: str) -> "PopTable":
        """Map an existing table; ValueError when it is not one of this layout."""
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            if size < HEADER_BYTES:
                raise ValueError(f"POP table {path} is {size} bytes")
            buffer = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        if ring.load_u64(buffer, _MAGIC_OFFSET) != MAGIC or \
                ring.load_u64(buffer, _VERSION_OFFSET) != LAYOUT_VERSION:
            buffer.close()
            raise ValueError(f"{path} is not a version {LAYOUT_VERSION} POP table")
        slots = ring.load_u64(buffer, _SLOTS_OFFSET)
        if size != HEADER_BYTES + SLOT_BYTES * slots:
            buffer.close()
            raise ValueError(f"POP table {path} is {size} bytes for {slots} slots")
        return cls(path, buffer, slots, None)

    def close(self) -> None:
        """Unmap (idempotent); the file stays."""
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _words(self) -> mmap.mmap:
        if self._map is None:
            raise ValueError(f"POP table {self.path} is closed")
        return self._map

    # A POP visits every queue of its topic, each a few words of its slot: the slot's words
    # are found in one call (the map's check inline), not one for the map and one for the slot.
    def _at(self, slot: int, word: int) -> tuple[mmap.mmap, int]:
        """The map and the byte offset of ``word`` of ``slot`` (ValueError: the table is
        closed, or no such slot)."""
        words = self._map
        if words is None:
            words = self._words()           # raises: closed
        if not 0 <= slot < self.slots:
            raise ValueError(f"POP slot must be in [0, {self.slots}), got {slot}")
        return words, HEADER_BYTES + SLOT_BYTES * slot + word

    def _base(self, slot: int) -> int:
        return self._at(slot, 0)[1]

    def _load(self, slot: int, word: int) -> int:
        return ring.load_u64(*self._at(slot, word))

    def _store(self, slot: int, word: int, value: int) -> None:
        ring.store_u64(*self._at(slot, word), value & _U64_MASK)

    # --- the directory (supervisor) ------------------------------------------------------------
    def assign(self, slot: int, key: SlotKey, pop_offset: int | None, now_ms: int) -> None:
        """Give free ``slot`` to ``key`` (the supervisor's directory picks the slot), with its
        pop offset (None: unset, the first POP decides) and in-flight counting from
        ``now_ms``. Allocates the slot's disk blocks first; the key is published last."""
        if self.assigned(slot):
            raise ValueError(f"POP slot {slot} is assigned already")
        topic, group = key.topic.encode(), key.group.encode()
        if len(topic) > KEY_PART_MAX_BYTES or len(group) > KEY_PART_MAX_BYTES:
            raise ValueError(f"POP key parts are at most {KEY_PART_MAX_BYTES} bytes")
        if self._fd is not None:
            os.posix_fallocate(self._fd, self._base(slot), SLOT_BYTES)
        words, base = self._at(slot, 0)
        packed = (struct.pack("<H", len(topic)) + topic + struct.pack("<H", len(group)) + group
                  + struct.pack("<i", key.queue_id))
        words[base + _KEY_OFFSET:base + _KEY_OFFSET + len(packed)] = packed
        for word in (_LOCK, _IN_FLIGHT, _OFFSET_SEQ, _OFFSET_VALUE, _OFFSET_FLAGS, _APPLIED_SEQ,
                     _ORDER_LENGTH, _LAST_POP_MS, _HELD):
            self._store(slot, word, 0)
        self._store(slot, _POP_OFFSET, UNSET_OFFSET if pop_offset is None else pop_offset)
        self._store(slot, _IN_FLIGHT_SINCE_MS, now_ms)
        self._store(slot, _STATE, _ASSIGNED)
        if slot >= ring.load_u64(words, _USED_OFFSET):
            ring.store_u64(words, _USED_OFFSET, slot + 1)

    def assigned(self, slot: int) -> bool:
        if slot >= ring.load_u64(self._words(), _USED_OFFSET):
            self._base(slot)                # the range check
            return False                    # never assigned: its page is not touched
        return self._load(slot, _STATE) == _ASSIGNED

    def key(self, slot: int) -> SlotKey:
        """The key of an assigned slot."""
        words, base = self._at(slot, _KEY_OFFSET)
        (topic_length,) = struct.unpack_from("<H", words, base)
        topic = bytes(words[base + 2:base + 2 + topic_length]).decode()
        base += 2 + topic_length
        (group_length,) = struct.unpack_from("<H", words, base)
        group = bytes(words[base + 2:base + 2 + group_length]).decode()
        (queue_id,) = struct.unpack_from("<i", words, base + 2 + group_length)
        return SlotKey(topic, group, queue_id)

    def assigned_slots(self) -> Iterator[tuple[int, SlotKey]]:
        """(slot, key) of every assigned slot, in slot order."""
        for slot in range(min(self.slots, ring.load_u64(self._words(), _USED_OFFSET))):
            if self.assigned(slot):
                yield slot, self.key(slot)

    def clear_locks(self) -> int:
        """Free every lock (the supervisor, before a generation forks: no holder is alive);
        returns how many were held."""
        held = 0
        for slot, _ in self.assigned_slots():
            if self._load(slot, _LOCK):
                held += 1
                self._store(slot, _LOCK, 0)
        return held

    def set_offset(self, slot: int, value: int, reset: bool) -> None:
        """The metadata service's offset for the queue (a reset, or a commit by another
        client): the POP side takes it under the lock (a reset always, a commit when ahead)."""
        self._store(slot, _OFFSET_VALUE, value)
        self._store(slot, _OFFSET_FLAGS, _OFFSET_FLAG_RESET if reset else 0)
        self._store(slot, _OFFSET_SEQ, self._load(slot, _OFFSET_SEQ) + 1)

    # --- the POP side (any process, under the slot's lock) ------------------------------------
    def try_lock(self, slot: int, tag: int) -> bool:
        """Take the slot's lock for ``tag`` (> 0) unless it is held; True when taken."""
        assert tag > 0, "a lock tag is never 0"
        words, offset = self._at(slot, _LOCK)
        if ring.load_u64(words, offset):
            return False
        return ring.compare_exchange_u64(words, offset, 0, tag) == 0

    def unlock(self, slot: int, tag: int) -> None:
        """Release a lock this ``tag`` holds."""
        words, offset = self._at(slot, _LOCK)
        held = ring.compare_exchange_u64(words, offset, tag, 0)
        assert held == tag, f"POP slot {slot} unlocked by {tag}, held by {held}"

    def take_plain(self, slots: Sequence[int], tag: int, in_flight_max: int | None,
                   release: bool) -> list[int]:
        """A POP's first steps on each of ``slots`` in one call (a POP of every queue visits
        them all): the slot's lock taken for ``tag`` (> 0), then its pop offset when none of
        the POP's own rules applies to it: no offset set by the metadata service waits, the
        pop offset is set, the in-flight count is at most ``in_flight_max`` (None: not
        checked). Per slot: that offset, the lock released when ``release``; NOT_PLAIN with the
        lock held (the caller applies its rules, then unlocks); LOCKED_ELSEWHERE when another
        holder has the lock. The words read are those :meth:`try_lock`,
        :meth:`pending_offset`, :meth:`in_flight` and :meth:`pop_offset` read."""
        assert tag > 0, "a lock tag is never 0"
        words = self._map
        if words is None:
            words = self._words()           # raises: closed
        for slot in slots:              # all checked before any lock is taken
            if not 0 <= slot < self.slots:
                raise ValueError(f"POP slot must be in [0, {self.slots}), got {slot}")
        load, exchange = ring.load_u64, ring.compare_exchange_u64
        found = []
        for slot in slots:
            base = HEADER_BYTES + SLOT_BYTES * slot
            if load(words, base + _LOCK) or exchange(words, base + _LOCK, 0, tag) != 0:
                found.append(LOCKED_ELSEWHERE)
                continue
            seq, applied = ring.load_two_u64(words, base + _OFFSET_SEQ, base + _APPLIED_SEQ)
            offset = load(words, base + _POP_OFFSET)
            if seq != applied or offset == UNSET_OFFSET or (
                    in_flight_max is not None and
                    max(0, _signed(load(words, base + _IN_FLIGHT))) > in_flight_max):
                found.append(NOT_PLAIN)
                continue
            if release:
                held = exchange(words, base + _LOCK, tag, 0)
                assert held == tag, f"POP slot {slot} unlocked by {tag}, held by {held}"
            found.append(offset)
        return found

    def pop_offset(self, slot: int) -> int | None:
        """The next offset to pop, None before the first POP."""
        value = ring.load_u64(*self._at(slot, _POP_OFFSET))
        return None if value == UNSET_OFFSET else value

    def set_pop_offset(self, slot: int, offset: int) -> None:
        assert offset >= 0, offset
        ring.store_u64(*self._at(slot, _POP_OFFSET), offset & _U64_MASK)

    def popped(self, slot: int, offset: int, count: int, now_ms: int) -> None:
        """A POP handed out ``count`` messages of the slot's queue at ``now_ms``: the pop
        offset set to ``offset`` (as :meth:`set_pop_offset`), the in-flight count grown (as
        :meth:`add_in_flight`), the last pop time stored; the slot looked up once."""
        assert offset >= 0, offset
        words, base = self._at(slot, 0)
        ring.store_u64(words, base + _POP_OFFSET, offset & _U64_MASK)
        ring.fetch_add_u64(words, base + _IN_FLIGHT, count)
        ring.store_u64(words, base + _LAST_POP_MS, now_ms & _U64_MASK)

    def pending_offset(self, slot: int) -> PendingOffset | None:
        """The service's offset not yet taken, or None."""
        words, base = self._at(slot, 0)
        seq, applied = ring.load_two_u64(words, base + _OFFSET_SEQ, base + _APPLIED_SEQ)
        if seq == applied:
            return None
        return PendingOffset(seq, ring.load_u64(words, base + _OFFSET_VALUE),
                             bool(ring.load_u64(words, base + _OFFSET_FLAGS)
                                  & _OFFSET_FLAG_RESET))

    def mark_applied(self, slot: int, seq: int) -> None:
        self._store(slot, _APPLIED_SEQ, seq)

    def last_pop_ms(self, slot: int) -> int:
        return self._load(slot, _LAST_POP_MS)

    def order_record(self, slot: int) -> bytes | None:
        """The order record's JSON, or None."""
        length = self._load(slot, _ORDER_LENGTH)
        if not length:
            return None
        words, base = self._at(slot, _ORDER_OFFSET)
        return bytes(words[base:base + length])

    def set_order_record(self, slot: int, data: bytes | None) -> None:
        """Replace the order record (None clears it); ValueError when it does not fit."""
        if data is None:
            self._store(slot, _ORDER_LENGTH, 0)
            return
        if len(data) > ORDER_RECORD_MAX_BYTES:
            raise ValueError(f"an order record of {len(data)} bytes exceeds "
                             f"{ORDER_RECORD_MAX_BYTES}")
        words, base = self._at(slot, _ORDER_OFFSET)
        words[base:base + len(data)] = data
        self._store(slot, _ORDER_LENGTH, len(data))

    # --- in-flight counts (any process) ---------------------------------------------------------
    def add_in_flight(self, slot: int, delta: int) -> None:
        ring.fetch_add_u64(*self._at(slot, _IN_FLIGHT), delta)

    def in_flight(self, slot: int) -> int:
        """Popped messages neither acked nor revived (never below 0)."""
        return max(0, _signed(ring.load_u64(*self._at(slot, _IN_FLIGHT))))

    def in_flight_since_ms(self, slot: int) -> int:
        return self._load(slot, _IN_FLIGHT_SINCE_MS)

    def take_acked(self, slot: int, pop_time: int, count: int) -> None:
        """Take ``count`` acked messages popped at ``pop_time`` out of the in-flight count,
        unless they were popped before it was last cleared (:meth:`clear_in_flight`): every
        ack ends here, so the slot is looked up once."""
        words, base = self._at(slot, 0)
        if pop_time >= ring.load_u64(words, base + _IN_FLIGHT_SINCE_MS):
            ring.fetch_add_u64(words, base + _IN_FLIGHT, -count)

    def clear_in_flight(self, slot: int, now_ms: int) -> None:
        """Start counting afresh (an order queue's new run; a reset): acks of earlier POPs no
        longer count."""
        self._store(slot, _IN_FLIGHT, 0)
        self._store(slot, _IN_FLIGHT_SINCE_MS, now_ms)

    def add_held(self, slot: int, delta: int) -> None:
        """A process holds one more (``delta`` 1) or one fewer (-1) POP for the slot's key."""
        ring.fetch_add_u64(*self._at(slot, _HELD), delta)

    def held(self, slot: int) -> int:
        return max(0, _signed(self._load(slot, _HELD)))

    def clear_held(self) -> None:
        """Zero every held count (the supervisor, before a generation forks: no POP is held)."""
        for slot, _ in self.assigned_slots():
            self._store(slot, _HELD, 0)

    # --- wake-ups of held POPs --------------------------------------------------------------
    @property
    def version(self) -> int:
        return ring.load_u64(self._words(), _TABLE_VERSION_OFFSET)

    def notify(self) -> int:
        """A held POP may now find something: bump the version, fence, take the waiters; the
        returned bits are worker slots the caller must signal."""
        words = self._words()
        ring.fetch_add_u64(words, _TABLE_VERSION_OFFSET, 1)
        ring.fence()
        if ring.load_u64(words, _WAITERS_OFFSET) == 0:
            return 0
        return ring.exchange_u64(words, _WAITERS_OFFSET, 0)

    def add_waiter(self, worker_slot: int) -> None:
        ring.fetch_or_u64(self._words(), _WAITERS_OFFSET, 1 << worker_slot)

    def remove_waiter(self, worker_slot: int) -> None:
        ring.fetch_and_u64(self._words(), _WAITERS_OFFSET, ~(1 << worker_slot) & _U64_MASK)
