# The timer wheel (Java 5.x timerwheel): one fixed-size file of time slots over the timer log.
"""``<root>/timerwheel``: 2 x 604,800 slots of 32 bytes (layout in :mod:`pybroker.store.layout`),
the slot of time ``t`` at ``(t / precision) % slots``; a slot whose TIME word is not
``t / precision`` belongs to another lap and reads as empty.

The timer worker maps it read-write and is its only writer (stores go straight into the shared
map; :meth:`TimerWheel.flush` msyncs it); every other process maps it read-only (the send
path's congestion check, runtime figures, ``pybroker prof``). Java keeps a private copy and
copies differing bytes into its map at each flush; the file format is the same, and recovery
revises slots from the timer log either way (store/timer_log.py).

Scans over the whole wheel (Java's ``getAllNum`` and ``checkPhyPos``) run vectorised with
numpy over the map, a chunk of slots at a time, in the order Java walks the slots. A scan
reads every page of the 38.7 MB file (its holes too, as zero pages of the page cache), and
the process kept a page-table entry for each until it unmapped: the timer worker, which scans
at start-up and for its progress line every 10 s, held the whole wheel as file-backed memory
(37 MiB of its PSS) although it only ever uses the slots near its read time. So a wide scan
(``all_num``, ``nums_between``, ``check_phy_pos``, ``used_between``) ends with
``madvise(MADV_DONTNEED)`` over the map: the file is mapped shared, so nothing is lost (a
dirty slot stays dirty in the page cache, msync writes it, the next access maps it again);
docs/architecture/grpc.md, "Memory of the consume phase".
"""
import logging
import mmap
import os
import struct
from typing import NamedTuple

import numpy as np

from pybroker.errors import DurabilityError, StoreCorruptError
from pybroker.store import layout

__all__ = ["Slot", "TimerWheel", "SLOT_DTYPE", "BLANK", "IGNORE"]

log = logging.getLogger("pybroker.store.timer_wheel")

BLANK = -1            # a position that names no unit
IGNORE = -2           # revise_slot: leave this position as it is
_SLOT = struct.Struct(">qqqii")
assert _SLOT.size == layout.TIMER_SLOT_SIZE
SLOT_DTYPE = np.dtype([("time", ">i8"), ("first", ">i8"), ("last", ">i8"), ("num", ">i4"),
                       ("magic", ">i4")])
assert SLOT_DTYPE.itemsize == layout.TIMER_SLOT_SIZE
assert SLOT_DTYPE.fields is not None
assert SLOT_DTYPE.fields["num"][1] == layout.TIMER_SLOT_NUM_POSITION
_SLOTS_IN_FILE = layout.TIMER_WHEEL_SLOTS * 2
# Whole-wheel scans go a chunk at a time: a scan over all 1.2 M slots at once made 5-10 MB
# temporaries, which glibc kept in the heap of the thread that ran it after their release (the
# timer worker's recovery: 9.2 MiB of its PSS for its life).
_SCAN_CHUNK_SLOTS = 1 << 16


class Slot(NamedTuple):
    """One slot: ``time_ms`` (its time, -1 when the slot is empty for the asked time), first
    and last timer-log offsets (BLANK when none), ``num`` messages, ``magic``."""
    time_ms: int
    first_pos: int
    last_pos: int
    num: int = 0
    magic: int = 0


EMPTY_SLOT = Slot(-1, BLANK, BLANK)


class TimerWheel:
    """The wheel file at ``path`` for ``precision_ms``; ``read_only`` for every process but the
    timer worker. A file of another size stops the start (StoreCorruptError), as Java's
    "Timer wheel length ... != expected"."""

    def __init__(self, path: str, precision_ms: int, read_only: bool = False):
        self.path = path
        self.precision_ms = precision_ms
        self.read_only = read_only
        size = layout.TIMER_WHEEL_FILE_SIZE
        if read_only:
            fd = os.open(path, os.O_RDONLY)
        else:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            actual = os.fstat(fd).st_size
            if actual not in (0, size) or (read_only and actual != size):
                raise StoreCorruptError(f"Timer wheel length:{actual} != expected:{size} "
                                        f"({path})")
            if actual == 0:
                os.ftruncate(fd, size)       # sparse, as Java's setLength
            access = mmap.ACCESS_READ if read_only else mmap.ACCESS_WRITE
            self._map: mmap.mmap | None = mmap.mmap(fd, size, access=access)
        finally:
            os.close(fd)
        self.slots = np.frombuffer(self._map, SLOT_DTYPE)
        self._drop_after_scans = True      # off after the kernel refused once (locked pages)

    # --- slots -------------------------------------------------------------------------------
    def slot_index(self, time_ms: int) -> int:
        """Index of the slot of ``time_ms`` (epoch ms)."""
        return time_ms // self.precision_ms % _SLOTS_IN_FILE

    def raw_slot(self, time_ms: int) -> Slot:
        """The slot at ``time_ms``'s index as stored (its time may be another lap's)."""
        time_units, first, last, num, magic = _SLOT.unpack_from(
            self._words(), self.slot_index(time_ms) * layout.TIMER_SLOT_SIZE)
        return Slot(time_units * self.precision_ms, first, last, num, magic)

    def slot(self, time_ms: int) -> Slot:
        """The slot of ``time_ms``, or EMPTY_SLOT when its index holds another time."""
        slot = self.raw_slot(time_ms)
        if slot.time_ms != time_ms // self.precision_ms * self.precision_ms:
            return EMPTY_SLOT
        return slot

    def put_slot(self, time_ms: int, first_pos: int, last_pos: int, num: int = 0,
                 magic: int = 0) -> None:
        """Write the slot of ``time_ms`` whole."""
        _SLOT.pack_into(self._words(), self.slot_index(time_ms) * layout.TIMER_SLOT_SIZE,
                        time_ms // self.precision_ms, first_pos, last_pos, num, magic)

    def revise_slot(self, time_ms: int, first_pos: int, last_pos: int, force: bool) -> None:
        """Recovery's revision: in a slot of ``time_ms`` set the positions not IGNORE; a slot
        of another lap is replaced only with ``force`` (first = last when first is IGNORE,
        count 0, as Java)."""
        words = self._words()
        at = self.slot_index(time_ms) * layout.TIMER_SLOT_SIZE
        if struct.unpack_from(">q", words, at)[0] != time_ms // self.precision_ms:
            if force:
                self.put_slot(time_ms, first_pos if first_pos != IGNORE else last_pos,
                              last_pos)
            return
        if first_pos != IGNORE:
            struct.pack_into(">q", words, at + layout.TIMER_SLOT_FIRST_POS_POSITION, first_pos)
        if last_pos != IGNORE:
            struct.pack_into(">q", words, at + layout.TIMER_SLOT_LAST_POS_POSITION, last_pos)

    # --- scans ---------------------------------------------------------------------------------
    def _chunks(self):
        """(first index, slots) over the wheel, ``_SCAN_CHUNK_SLOTS`` at a time."""
        for low in range(0, _SLOTS_IN_FILE, _SCAN_CHUNK_SLOTS):
            yield low, self.slots[low:low + _SCAN_CHUNK_SLOTS]

    def _current(self, time_start_ms: int) -> np.ndarray:
        """Slots whose time is the one a walk over every slot from ``time_start_ms`` expects
        there (Java's loops from the start slot): the slots of the coming lap. Sums and
        minimums over them do not depend on the walking order, so none is built."""
        start_units = time_start_ms // self.precision_ms
        parts = []
        for low, slots in self._chunks():
            steps = (np.arange(low, low + len(slots), dtype=np.int64) - start_units) \
                % _SLOTS_IN_FILE
            parts.append(slots[slots["time"] == start_units + steps])     # a copy
        self._drop_pages()
        return np.concatenate(parts)

    def _counted(self, time_start_ms: int) -> tuple[np.ndarray, np.ndarray]:
        """The slots of the coming lap from ``time_start_ms`` that hold a count: their
        distance from it in slots and their counts. Only the counts are scanned (a slot of
        count 0 adds nothing to a sum), so a scrape's gauges cost no index of every slot. The
        counts are copied first: the timer worker writes them while another process reads
        (numpy's nonzero counts, then fills, and raises when the count changed between)."""
        start_units = time_start_ms // self.precision_ms
        steps_parts, nums_parts = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
        for low, slots in self._chunks():
            nums = np.array(slots["num"])
            used = np.nonzero(nums)[0]
            steps = (used + low - start_units) % _SLOTS_IN_FILE
            current = slots["time"][used] == start_units + steps
            steps_parts.append(steps[current])
            nums_parts.append(nums[used][current].astype(np.int64))
        self._drop_pages()
        return np.concatenate(steps_parts), np.concatenate(nums_parts)

    def all_num(self, time_start_ms: int) -> int:
        """Messages parked in every slot from ``time_start_ms`` on (Java getAllNum)."""
        return int(self._counted(time_start_ms)[1].sum())

    def check_phy_pos(self, time_start_ms: int, max_offset: int) -> int:
        """Smallest first position of the slots (from ``time_start_ms`` on) whose last
        position lies beyond ``max_offset`` (a timer log cut shorter than the wheel); the
        largest int64 when none (Java checkPhyPos)."""
        current = self._current(time_start_ms)
        beyond = current[current["last"] > max_offset]
        if len(beyond) == 0:
            return (1 << 63) - 1
        return int(beyond["first"].min())

    def _used_chunks(self, time_ms: int, until_ms: int):
        """Over the slot times from ``time_ms`` (a slot time) below ``until_ms``, a wheel's
        length at a time: (the times, which of them their slot holds)."""
        precision = self.precision_ms
        count = max((until_ms - time_ms + precision - 1) // precision, 0)
        start_units = time_ms // precision
        for chunk_start in range(0, count, _SLOTS_IN_FILE):
            expected = start_units + chunk_start + np.arange(
                min(count - chunk_start, _SLOTS_IN_FILE), dtype=np.int64)
            yield expected * precision, self.slots["time"][expected % _SLOTS_IN_FILE] == expected

    def next_used(self, time_ms: int, until_ms: int) -> int:
        """The first slot time from ``time_ms`` (a slot time) below ``until_ms`` whose slot
        holds that time, else the first slot time at or past ``until_ms``: where a walk over
        empty slots stops."""
        for times, held in self._used_chunks(time_ms, until_ms):
            used = np.flatnonzero(held)
            if len(used):
                return int(times[used[0]])
        precision = self.precision_ms
        count = max((until_ms - time_ms + precision - 1) // precision, 0)
        return (time_ms // precision + count) * precision

    def used_between(self, time_ms: int, until_ms: int) -> list[int]:
        """The slot times from ``time_ms`` (a slot time) below ``until_ms`` whose slot holds
        that time, in order (one vectorised pass over that part of the wheel)."""
        used: list[int] = []
        for times, held in self._used_chunks(time_ms, until_ms):
            used.extend(times[held].tolist())
        self._drop_pages()
        return used

    def nums_between(self, time_start_ms: int, slot_count: int) -> np.ndarray:
        """``num`` of the ``slot_count`` slots from ``time_start_ms`` (0 for a stale slot)."""
        steps, nums = self._counted(time_start_ms)
        within = steps < slot_count
        out = np.zeros(slot_count, dtype=np.int64)
        out[steps[within]] = nums[within]
        return out

    def _drop_pages(self) -> None:
        """After a wide scan: every page of the wheel out of THIS process's page tables (see
        the module docstring); the slots in use are mapped again at their next access."""
        if not self._drop_after_scans or self._map is None:
            return
        try:
            self._map.madvise(mmap.MADV_DONTNEED)
        except OSError as error:
            self._drop_after_scans = False
            log.warning("%s: the wheel's pages stay mapped after scans (%s)", self.path,
                        error.strerror)

    # --- life ----------------------------------------------------------------------------------
    def _words(self) -> mmap.mmap:
        if self._map is None:
            raise ValueError(f"timer wheel {self.path} is closed")
        return self._map

    def view(self) -> memoryview:
        """The mapped bytes (read-only for a read-only wheel); the map cannot be closed while
        a view is held."""
        return memoryview(self._words())

    def flush(self) -> None:
        """msync the whole wheel (only dirty pages are written); DurabilityError on failure."""
        try:
            self._words().flush()
        except OSError as error:
            raise DurabilityError(f"msync of {self.path} failed: {error}") from error

    def close(self) -> None:
        """Unmap (idempotent); no flush (call :meth:`flush` first to make it durable)."""
        if self._map is not None:
            self.slots = np.empty(0, SLOT_DTYPE)
            self._map.close()
            self._map = None
