# The timer log (Java 5.x timerlog/): 52-byte units, one per enqueued timer message.
"""``<root>/timerlog/``: units of :data:`pybroker.store.layout.TIMERLOG_UNIT_SIZE` bytes appended
to 20-digit-named files of ``mappedFileSizeTimerLog`` bytes (layout table in
:mod:`pybroker.store.layout`). A unit never straddles two files: when one would not leave room
for the blank, the blank (SIZE = bytes left, BLANK_MAGIC_CODE) ends the file and the unit opens
the next one, as Java's TimerLog.append.

Single writer: the timer worker. Units are read by timer-log offset (global bytes, the value
kept in wheel slots and PREV_POS). :meth:`TimerLog.scan` is recovery's walk (Java
recoverAndRevise): from the file holding a start offset, unit by unit to the first that is not
whole (wrong SIZE or MAGIC), a blank ending each file; it runs vectorised per file with numpy.
"""
import struct
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from pybroker.store import layout
from pybroker.store.mapped_file import MappedFile, MappedFileQueue

__all__ = ["TimerLog", "TimerUnit", "SlotUnits", "UNIT_DTYPE", "encode_unit", "magic_ok"]

UNIT_SIZE = layout.TIMERLOG_UNIT_SIZE
_UNIT = struct.Struct(">iqiqiqiiq")
assert _UNIT.size == UNIT_SIZE
_BLANK = struct.Struct(">iqi")
assert _BLANK.size == layout.TIMERLOG_MIN_BLANK_BYTES
UNIT_DTYPE = np.dtype([("size", ">i4"), ("prev", ">i8"), ("magic", ">i4"),
                       ("write_time", ">i8"), ("delay", ">i4"), ("offset_py", ">i8"),
                       ("size_py", ">i4"), ("topic_hash", ">i4"), ("reserved", ">i8")])
assert UNIT_DTYPE.itemsize == UNIT_SIZE
assert UNIT_DTYPE.fields is not None
assert UNIT_DTYPE.fields["offset_py"][1] == layout.TIMERLOG_OFFSET_PY_POSITION
assert UNIT_DTYPE.fields["topic_hash"][1] == layout.TIMERLOG_TOPIC_HASH_POSITION


class TimerUnit(NamedTuple):
    """One unit as read: ``delayed_time_ms`` is WRITE_TIME + DELAY (the slot's time)."""
    prev_pos: int
    magic: int
    write_time_ms: int
    delayed_time_ms: int
    offset_py: int
    size_py: int
    topic_hash: int


class SlotUnits(NamedTuple):
    """The units of a slot's chain, oldest first, one array per field: timer-log
    ``positions`` and what dequeue needs of each."""
    positions: np.ndarray
    magic: np.ndarray
    write_time_ms: np.ndarray
    delayed_time_ms: np.ndarray
    offset_py: np.ndarray
    size_py: np.ndarray


def _no_units() -> SlotUnits:
    return SlotUnits(*(np.empty(0, np.int64) for _ in SlotUnits._fields))


class _Span(NamedTuple):
    start: int                  # global offset of units[0]
    units: np.ndarray           # UNIT_DTYPE
    run_start: np.ndarray       # per unit: the first index of its chained run


def encode_unit(prev_pos: int, magic: int, write_time_ms: int, delayed_time_ms: int,
                offset_py: int, size_py: int, topic_hash: int) -> bytes:
    """The 52 bytes of a unit (DELAY is stored relative to WRITE_TIME, a Java int)."""
    return _UNIT.pack(UNIT_SIZE, prev_pos, magic, write_time_ms,
                      delayed_time_ms - write_time_ms, offset_py, size_py, topic_hash, 0)


def magic_ok(magic: int) -> bool:
    """Java isMagicOK: no bit outside TIMER_MAGIC_MASK."""
    return magic | layout.TIMER_MAGIC_MASK == layout.TIMER_MAGIC_MASK


class TimerLog:
    """The timer log under ``store_path`` in files of ``file_size`` bytes (single writer;
    ``read_only`` maps for readers)."""

    def __init__(self, store_path: str, file_size: int, read_only: bool = False):
        if file_size < UNIT_SIZE + layout.TIMERLOG_MIN_BLANK_BYTES:
            raise ValueError(f"mappedFileSizeTimerLog {file_size} cannot hold one unit")
        self.file_size = file_size
        self.files = MappedFileQueue(store_path, file_size, read_only)

    def load(self) -> bool:
        """Map the existing files; False when one has the wrong size (Java's load fails)."""
        return self.files.load()

    @property
    def flushed_where(self) -> int:
        """Timer-log offset known durable (bytes)."""
        return self.files.flushed_where

    def max_offset(self) -> int:
        """End of the written units (bytes)."""
        return self.files.max_offset()

    # --- write ---------------------------------------------------------------------------------
    def append(self, unit: bytes) -> int:
        """Append one encoded unit; returns its timer-log offset. A file without room for it
        and the blank is closed with the blank first."""
        mapped_file = self.files.last_mapped_file(0)
        assert mapped_file is not None
        if len(unit) + layout.TIMERLOG_MIN_BLANK_BYTES > mapped_file.remaining():
            left = mapped_file.remaining()
            mapped_file.append(_BLANK.pack(left, 0, layout.BLANK_MAGIC_CODE))
            mapped_file.wrote_position = self.file_size
            mapped_file = self.files.last_mapped_file(0)
            assert mapped_file is not None
        offset = mapped_file.file_from_offset + mapped_file.wrote_position
        if not mapped_file.append(unit):
            raise AssertionError(f"timer log {mapped_file.path}: no room for a unit at "
                                 f"{mapped_file.wrote_position}")
        return offset

    def flush(self) -> None:
        """msync every unit written since the last flush (DurabilityError on failure)."""
        self.files.flush(0)

    # --- read ----------------------------------------------------------------------------------
    def unit(self, offset: int) -> TimerUnit | None:
        """The unit at timer-log ``offset``, or None when no written unit starts there."""
        mapped_file = self.files.find_mapped_file_by_offset(offset)
        if mapped_file is None:
            return None
        view = mapped_file.view(offset - mapped_file.file_from_offset, UNIT_SIZE)
        if view is None:
            return None
        try:
            (size, prev_pos, magic, write_time, delay, offset_py, size_py, topic_hash,
             _reserved) = _UNIT.unpack(view)
        finally:
            view.release()
            mapped_file.release()
        if size != UNIT_SIZE:
            return None
        return TimerUnit(prev_pos, magic, write_time, write_time + delay, offset_py, size_py,
                         topic_hash)

    def chain(self, last_pos: int, limit: int) -> Iterator[tuple[int, TimerUnit]]:
        """(offset, unit) of a slot's units from ``last_pos`` back through PREV_POS, newest
        first, at most ``limit`` (a damaged chain must not loop); stops at an unreadable one."""
        position = last_pos
        while position >= 0 and limit > 0:
            unit = self.unit(position)
            if unit is None:
                return
            yield position, unit
            limit -= 1
            position = unit.prev_pos

    def slot_units(self, first_pos: int, last_pos: int) -> SlotUnits:
        """A slot's units, oldest first: the chain from ``last_pos`` back through PREV_POS,
        never below ``first_pos``. The units of [first_pos, last_pos] are read per file in one
        numpy pass; the walk stops at a position that is not a whole unit or a PREV_POS that
        does not go back (a damaged chain never loops). Units chained to the one just before
        them (a burst's, enqueued one after the other) are taken a run at a time."""
        if last_pos < 0 or first_pos < 0 or first_pos > last_pos:
            return _no_units()
        spans: dict[int, _Span] = {}
        pieces: list[np.ndarray] = []          # newest first, each oldest first
        position = last_pos
        while position >= first_pos:
            base = position - position % self.file_size
            span = spans.get(base)
            if span is None:
                span = spans[base] = self._span(base, max(first_pos, base), last_pos)
            index, rest = divmod(position - span.start, UNIT_SIZE)
            if rest or not 0 <= index < len(span.units) or \
                    span.units["size"][index] != UNIT_SIZE:
                break
            low = int(span.run_start[index])
            pieces.append(np.arange(low, index + 1) * UNIT_SIZE + span.start)
            pieces.append(span.units[low:index + 1])
            prev = int(span.units["prev"][low])
            if prev >= span.start + low * UNIT_SIZE:
                break
            position = prev
        if not pieces:
            return _no_units()
        positions = np.concatenate(pieces[-2::-2])
        units = np.concatenate(pieces[::-2])
        write_time = units["write_time"].astype(np.int64)
        return SlotUnits(positions, units["magic"].astype(np.int32), write_time,
                         write_time + units["delay"], units["offset_py"].astype(np.int64),
                         units["size_py"].astype(np.int64))

    def _span(self, base: int, low: int, high: int) -> "_Span":
        """The units of the file at ``base`` between ``low`` and ``high`` (global offsets),
        aligned on ``low`` (a copy), and where the run of units each chained to the one
        before it ends going back from each."""
        mapped_file = self.files.find_mapped_file_by_offset(base)
        start = low - base
        count = 0 if mapped_file is None else \
            (min(high - base + UNIT_SIZE, mapped_file.wrote_position) - start) // UNIT_SIZE
        if mapped_file is None or count <= 0:
            return _Span(low, np.empty(0, UNIT_DTYPE), np.empty(0, np.int64))
        view = mapped_file.buffer()
        try:
            units = np.frombuffer(view, UNIT_DTYPE, count, start).copy()
        finally:
            view.release()
        indexes = np.arange(count, dtype=np.int64)
        # Unit k continues the run of k - 1 when it points at it and k - 1 is a whole unit.
        linked = np.zeros(count, bool)
        linked[1:] = (units["prev"][1:] == low + (indexes[:-1] * UNIT_SIZE)) & \
            (units["size"][:-1] == UNIT_SIZE)
        run_start = np.maximum.accumulate(np.where(linked, 0, indexes))
        return _Span(low, units, run_start)

    def scan(self, begin_offset: int, whole_files: bool) -> tuple[int, np.ndarray, np.ndarray]:
        """Recovery's walk from the file holding ``begin_offset`` (the first file when before
        it): ``(end, offsets, delayed times)`` of every whole unit (SIZE and MAGIC right)
        up to the first that is not, the blank ending each file; ``end`` is where that
        walk stopped. ``whole_files`` walks each file to its size (the tail after a crash),
        else to its written position."""
        files = self.files.mapped_files
        if not files:
            return 0, np.empty(0, np.int64), np.empty(0, np.int64)
        index = len(files) - 1
        while index > 0 and begin_offset < files[index].file_from_offset:
            index -= 1
        end = files[index].file_from_offset
        offsets: list[np.ndarray] = []
        delayed: list[np.ndarray] = []
        for mapped_file in files[index:]:
            limit = self.file_size if whole_files else mapped_file.wrote_position
            count, stopped = _valid_units(mapped_file, limit, whole_files, offsets, delayed)
            end = mapped_file.file_from_offset + count * UNIT_SIZE
            if stopped:
                break
        if not offsets:
            return end, np.empty(0, np.int64), np.empty(0, np.int64)
        return end, np.concatenate(offsets), np.concatenate(delayed)

    # --- files ---------------------------------------------------------------------------------
    def truncate(self, offset: int) -> None:
        """Set the written end to ``offset`` (bytes): zero what lies after it in its file,
        delete later files (Java truncateDirtyFiles)."""
        self.files.truncate_dirty_files(offset)
        self.files.set_wrote_and_flushed(offset)

    def delete_expired(self, commitlog_min_offset: int) -> int:
        """Delete leading files (never the last) whose last unit's message lies below the
        CommitLog's min offset: their messages are gone (Java
        deleteExpiredFileByOffsetForTimerLog). Returns how many."""
        position = layout.timerlog_last_unit_position(self.file_size)
        expired = []
        for mapped_file in self.files.mapped_files[:-1]:
            view = mapped_file.buffer()
            try:
                size, _prev, magic, _write, _delay, offset_py, _size_py, _hash, _rest = \
                    _UNIT.unpack_from(view, position)
            finally:
                view.release()
            if size != UNIT_SIZE or not magic_ok(magic) or offset_py >= commitlog_min_offset:
                break
            expired.append(mapped_file)
        return self.files._delete_files(expired, 60_000, 0) if expired else 0

    def close(self) -> None:
        """Unmap every file (no flush)."""
        self.files.shutdown(0)


def _valid_units(mapped_file: MappedFile, limit: int, check: bool, offsets: list,
                 delayed: list) -> tuple[int, bool]:
    """Whole units of one file up to ``limit`` bytes, appended to ``offsets`` / ``delayed``;
    returns (units walked, stopped). The walk ends at the blank (the next file follows) or,
    with ``check``, at the first unit that is not whole (the walk stops there: stopped);
    without ``check`` such units are skipped."""
    count = limit // UNIT_SIZE
    view = mapped_file.buffer()
    try:
        units = np.frombuffer(view, UNIT_DTYPE, count)
        whole = (units["size"] == UNIT_SIZE) & \
            ((units["magic"] | layout.TIMER_MAGIC_MASK) == layout.TIMER_MAGIC_MASK)
        blank = np.flatnonzero(units["magic"] == layout.BLANK_MAGIC_CODE)
        stop = int(blank[0]) if len(blank) else count
        stopped = False
        if check:
            bad = np.flatnonzero(~whole[:stop])
            if len(bad):
                stop, stopped = int(bad[0]), True
        keep = np.flatnonzero(whole[:stop])
        offsets.append(mapped_file.file_from_offset + keep.astype(np.int64) * UNIT_SIZE)
        delayed.append(units["write_time"][keep].astype(np.int64)
                       + units["delay"][keep].astype(np.int64))
        del units, whole
    finally:
        view.release()
    return stop, stopped
