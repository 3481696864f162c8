# ConsumeQueue (per topic-queue index of CommitLog records, protocol.md §4.4) and the table of all
# of them.
"""RocketMQ's ConsumeQueue: fixed 20-byte units in 20-digit-named files of one directory.

Unit layout (positions from :mod:`pybroker.store.layout`)::

    off size field
      0    8  physical offset   commit-log offset of the record (bytes)
      8    4  size              record size (bytes); CQ_FILLER_SIZE in filler units
     12    8  tags code         Java hash of TAGS (or delivery time for SCHEDULE_TOPIC_XXXX)

Unit ``queue_offset`` lives at global byte offset ``queue_offset * 20``, i.e. in the file whose
base (its name) is that offset rounded down to the file size. ``max_offset_in_queue`` is the next
queue offset to write, ``min_offset_in_queue`` the first valid one.

When the first unit of a fresh queue is not unit 0 of its file, the file is pre-filled up to it
with filler units (physical offset 0, size CQ_FILLER_SIZE, tags 0); fillers are never valid
queue entries (they sit below ``min_offset_in_queue``).

Scans run vectorised with numpy over the mapping (big-endian structured dtype
:data:`UNIT_DTYPE`, no copy). numpy arrays over a map pin it (Python cannot close an mmap with
live exports), so internal scans keep arrays inside one helper frame and reduce them to Python
ints before the map is released; :meth:`ConsumeQueue.read_units` hands the caller a
:class:`UnitsView` that must be released.

Single writer: the dispatcher (design.md §2 rule 1). A ``read_only`` queue maps the files for
readers; it learns the writer's progress through :meth:`ConsumeQueue.refresh`.
"""
import logging
import os
import struct
from typing import Callable

import numpy as np

from pybroker.store import layout, paths
from pybroker.store.mapped_file import MappedFile, MappedFileQueue

__all__ = ["UNIT_DTYPE", "UNIT_STRUCT", "DEFAULT_MAPPED_FILE_SIZE", "ConsumeQueue",
           "ConsumeQueueStore", "UnitsView"]

log = logging.getLogger(__name__)

UNIT_SIZE = layout.CQ_STORE_UNIT_SIZE
UNIT_DTYPE = np.dtype([("phy", ">i8"), ("size", ">i4"), ("tags", ">i8")])
assert UNIT_DTYPE.itemsize == UNIT_SIZE
assert UNIT_DTYPE.fields is not None
assert UNIT_DTYPE.fields["size"][1] == layout.CQ_UNIT_SIZE_POSITION
assert UNIT_DTYPE.fields["tags"][1] == layout.CQ_UNIT_TAGS_CODE_POSITION
UNIT_STRUCT = struct.Struct(">qiq")
assert UNIT_STRUCT.size == UNIT_SIZE
_FILLER_UNIT = UNIT_STRUCT.pack(0, layout.CQ_FILLER_SIZE, 0)
DEFAULT_MAPPED_FILE_SIZE = 300_000 * UNIT_SIZE   # mappedFileSizeConsumeQueue
BOUNDARIES = ("lower", "upper", "nearest")


# How far past the last valid unit recover() looks for leftover bytes (a damaged tail).
_TAIL_WINDOW_BYTES = 4096


def _bytes_after(mapped_file: MappedFile, file_position: int) -> bool:
    """True when non-zero bytes follow ``file_position`` (within _TAIL_WINDOW_BYTES)."""
    if not mapped_file.hold():
        raise RuntimeError(f"{mapped_file.path} is shutting down")
    buffer = mapped_file.buffer()
    try:
        end = min(file_position + _TAIL_WINDOW_BYTES, len(buffer))
        window = np.frombuffer(buffer, np.uint8, end - file_position, file_position)
        try:
            return bool(window.any())
        finally:
            del window
    finally:
        buffer.release()
        mapped_file.release()


def _apply_to_units(mapped_file: MappedFile, unit_count: int, function: Callable):
    """Call ``function(units)`` on units [0, unit_count) of a file; return its result.

    The array lives only in this frame and ``function``'s, so the map is released cleanly;
    ``function`` must return plain Python values, never views of ``units``.
    """
    if not mapped_file.hold():
        raise RuntimeError(f"{mapped_file.path} is shutting down")
    buffer = mapped_file.buffer()
    try:
        units = np.frombuffer(buffer, UNIT_DTYPE, unit_count)
        try:
            return function(units)
        finally:
            del units
    finally:
        try:
            buffer.release()
        except BufferError:
            # Only when function raised and its traceback still holds a view: the memoryview
            # is then freed with the traceback instead.
            log.debug("%s: units view outlived a failed scan", mapped_file.path)
        mapped_file.release()


def _is_filler(units) -> np.ndarray:
    return (units["phy"] == 0) & (units["size"] == layout.CQ_FILLER_SIZE)


def _valid_prefix(units) -> tuple[int, int]:
    """(valid unit count, max phy+size of real units) of the leading valid units (protocol.md §4.4
    rule)."""
    valid = (units["phy"] >= 0) & (units["size"] > 0)
    count = len(units) if bool(valid.all()) else int(np.argmin(valid))
    return count, _last_phy_end(units[:count])


def _last_phy_end(units) -> int:
    real = np.flatnonzero(~_is_filler(units))
    if len(real) == 0:
        return 0
    last = units[int(real[-1])]
    return int(last["phy"]) + int(last["size"])


def _first_real_at_or_above(units, phy_min: int) -> int:
    """Index of the first non-filler unit with phy >= phy_min, or -1."""
    hits = np.flatnonzero((units["phy"] >= phy_min) & ~_is_filler(units))
    return int(hits[0]) if len(hits) else -1


class UnitsView:
    """Units of one ConsumeQueue file as a read-only numpy array over the map (no copy).

    ``units`` has dtype :data:`UNIT_DTYPE` (fields ``phy``, ``size``, ``tags``); ``units[i]`` is
    queue offset ``queue_offset + i``; ``raw`` is the same bytes as a memoryview (None when
    empty; the array is made on first use of ``units``). Call :meth:`release` (or use
    ``with``) when done. An array kept past release (``units`` or a view derived from it;
    ``.copy()`` what you keep) stays readable but pins the map: the file cannot be unmapped
    until the array is garbage.
    """

    __slots__ = ("_units", "queue_offset", "_view", "_mapped_file")

    def __init__(self, queue_offset: int, view: memoryview | None,
                 mapped_file: MappedFile | None):
        self.queue_offset = queue_offset
        self._view = view
        self._mapped_file = mapped_file
        self._units: np.ndarray | None = None

    @property
    def units(self) -> np.ndarray:
        units = self._units
        if units is None:
            if self._view is None:
                units = np.empty(0, UNIT_DTYPE)
            else:
                units = np.frombuffer(self._view, UNIT_DTYPE)
                units.flags.writeable = False
            self._units = units
        return units

    @property
    def raw(self) -> memoryview | None:
        """The units' bytes (no copy), None when there are none."""
        return self._view

    def __len__(self) -> int:
        return 0 if self._view is None else len(self._view) // UNIT_SIZE

    def __enter__(self) -> "UnitsView":
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()

    def release(self) -> None:
        """Drop the array and the hold on the file."""
        self._units = None
        view, mapped_file = self._view, self._mapped_file
        self._view = self._mapped_file = None
        try:
            if view is not None:
                view.release()
        finally:
            if mapped_file is not None:
                mapped_file.release()


class ConsumeQueue:
    """One consume queue: ``<store_root>/consumequeue/<topic>/<queue_id>/``.

    ``mapped_file_size`` (bytes) must be a multiple of the 20-byte unit. Offsets named
    ``queue_offset`` count units; ``physical_offset`` is a commit-log byte offset.
    Call :meth:`load` and :meth:`recover` on an existing queue before use.
    """

    def __init__(self, store_root: str, topic: str, queue_id: int,
                 mapped_file_size: int = DEFAULT_MAPPED_FILE_SIZE, read_only: bool = False):
        if mapped_file_size <= 0 or mapped_file_size % UNIT_SIZE:
            raise ValueError(f"mapped_file_size must be a positive multiple of {UNIT_SIZE}, "
                             f"got {mapped_file_size}")
        self.topic = topic
        self.queue_id = queue_id
        self.mapped_file_size = mapped_file_size
        self.read_only = read_only
        self.queue_dir = paths.consume_queue_dir(store_root, topic, queue_id)
        self.mapped_file_queue = MappedFileQueue(self.queue_dir, mapped_file_size, read_only)
        self._min_logic_offset = 0          # bytes: first valid unit * 20
        self.last_dispatched_phy_offset = 0  # max physical_offset + size written (bytes)
        # recover() found non-zero bytes right after the last valid unit (zeroed then).
        self.tail_damaged = False

    def __repr__(self) -> str:
        return (f"ConsumeQueue({self.topic!r}, {self.queue_id}, min={self.min_offset_in_queue()},"
                f" max={self.max_offset_in_queue()})")

    # --- offsets ------------------------------------------------------------------------------
    def min_offset_in_queue(self) -> int:
        """First valid queue offset (units)."""
        return self._min_logic_offset // UNIT_SIZE

    def max_offset_in_queue(self) -> int:
        """Next queue offset to write (units); equals the min offset when the queue is empty."""
        return self.mapped_file_queue.max_offset() // UNIT_SIZE

    # --- load / recover -----------------------------------------------------------------------
    def load(self) -> bool:
        """Map the existing files; False if one has the wrong size."""
        return self.mapped_file_queue.load()

    def recover(self) -> None:
        """Find the end of valid units (phy >= 0 and size > 0) and truncate everything after.

        Scans from the third-last file, as Java does; earlier files are taken as complete.
        """
        files = self.mapped_file_queue.mapped_files
        if not files:
            return
        units_per_file = self.mapped_file_size // UNIT_SIZE
        end_offset = files[max(len(files) - 3, 0)].file_from_offset
        last_phy_end = 0
        for mapped_file in files[max(len(files) - 3, 0):]:
            count, phy_end = _apply_to_units(mapped_file, units_per_file, _valid_prefix)
            end_offset = mapped_file.file_from_offset + count * UNIT_SIZE
            last_phy_end = phy_end or last_phy_end
            if count < units_per_file:
                self.tail_damaged = _bytes_after(mapped_file, count * UNIT_SIZE)
                break
        if not self.read_only:
            self.mapped_file_queue.truncate_dirty_files(end_offset)
        self.mapped_file_queue.set_wrote_and_flushed(end_offset)
        self.last_dispatched_phy_offset = last_phy_end
        self._min_logic_offset = self._scan_min_logic_offset(0)

    def refresh(self) -> int:
        """Reader side: map new files and advance over units the writer added; returns the
        new max queue offset."""
        queue = self.mapped_file_queue
        known_count = len(queue.mapped_files)
        queue.refresh()
        for mapped_file in queue.mapped_files[known_count:]:
            mapped_file.wrote_position = mapped_file.flushed_position = 0
        units_per_file = self.mapped_file_size // UNIT_SIZE
        for mapped_file in queue.mapped_files:
            if mapped_file.wrote_position >= self.mapped_file_size:
                continue
            # The writer only appends, so the valid prefix seen now is the written range.
            count, _ = _apply_to_units(mapped_file, units_per_file, _valid_prefix)
            mapped_file.wrote_position = count * UNIT_SIZE
            if count < units_per_file:
                break
        if self._min_logic_offset == 0:
            self._min_logic_offset = self._scan_min_logic_offset(0)
        return self.max_offset_in_queue()

    def _scan_min_logic_offset(self, phy_min: int) -> int:
        """Byte offset of the first real unit with physical offset >= phy_min (else max)."""
        for mapped_file in self.mapped_file_queue.mapped_files:
            count = mapped_file.wrote_position // UNIT_SIZE
            if mapped_file.file_from_offset + count * UNIT_SIZE <= self._min_logic_offset:
                continue
            index = _apply_to_units(mapped_file, count,
                                    lambda units: _first_real_at_or_above(units, phy_min))
            if index >= 0:
                return max(mapped_file.file_from_offset + index * UNIT_SIZE,
                           self._min_logic_offset)
        return self.mapped_file_queue.max_offset()

    # --- write --------------------------------------------------------------------------------
    def put(self, physical_offset: int, size: int, tags_code: int, queue_offset: int,
            fill_gap: bool = False) -> bool:
        """Write the unit for ``queue_offset``; True when written or already present.

        An offset below the end (re-dispatch after recovery) is skipped as already written; a
        gap above the end is refused (False, logged): the dispatcher has lost its place -
        unless ``fill_gap`` (dispatch jumped over damaged records an operator chose to skip):
        then the gap is filled with filler units, which reads step over.
        """
        if self.read_only:
            raise PermissionError(f"{self.queue_dir}: read-only consume queue")
        if physical_offset < 0 or size <= 0 or queue_offset < 0:
            raise ValueError(f"bad unit: physical_offset={physical_offset} size={size} "
                             f"queue_offset={queue_offset}")
        if physical_offset + size <= self.last_dispatched_phy_offset:
            return True   # Java: "maybe try to build consume queue repeatedly"
        expect_offset = queue_offset * UNIT_SIZE
        mapped_file = self._file_for(expect_offset)
        current_offset = mapped_file.file_from_offset + mapped_file.wrote_position
        if expect_offset < current_offset:
            return True
        if expect_offset > current_offset and fill_gap:
            gap_units = (expect_offset - current_offset) // UNIT_SIZE
            log.warning("%s: queue offsets %d..%d belong to skipped damaged records: filled",
                        self.queue_dir, current_offset // UNIT_SIZE, queue_offset - 1)
            for _ in range(gap_units):
                filler_file = self.mapped_file_queue.last_mapped_file(
                    self.mapped_file_queue.max_offset())
                assert filler_file is not None          # created when missing
                if not filler_file.append(_FILLER_UNIT):
                    raise AssertionError(f"{filler_file.path}: no room for a filler unit")
            mapped_file = self._file_for(expect_offset)
            current_offset = mapped_file.file_from_offset + mapped_file.wrote_position
        if expect_offset > current_offset:
            log.error("%s: queue offset %d leaves a gap after %d; unit refused", self.queue_dir,
                      queue_offset, current_offset // UNIT_SIZE)
            return False
        if not mapped_file.append(UNIT_STRUCT.pack(physical_offset, size, tags_code)):
            raise AssertionError(f"{mapped_file.path}: no room at {mapped_file.wrote_position}")
        self.last_dispatched_phy_offset = physical_offset + size
        return True

    def _file_for(self, expect_offset: int) -> MappedFile:
        """The file to append at ``expect_offset``: the last one, or a fresh queue's first file
        placed (and pre-filled with filler units) so that the unit lands where it belongs."""
        queue = self.mapped_file_queue
        files = queue.mapped_files
        fresh = not files or (len(files) == 1 and files[0].wrote_position == 0)
        if not fresh:
            last = queue.last_mapped_file(expect_offset)
            assert last is not None           # need_create: there always is one
            return last
        if files and not (files[0].file_from_offset <= expect_offset
                          < files[0].file_from_offset + self.mapped_file_size):
            queue.delete_last_mapped_file()   # an empty file in the wrong place
        mapped_file = queue.last_mapped_file(expect_offset)
        assert mapped_file is not None
        filler_count = (expect_offset - mapped_file.file_from_offset) // UNIT_SIZE
        if filler_count:
            mapped_file.append(_FILLER_UNIT * filler_count)
        self._min_logic_offset = expect_offset
        return mapped_file

    def flush(self, least_pages: int = 0) -> bool:
        """msync dirty units (at least ``least_pages`` pages unless 0); True if progress."""
        return self.mapped_file_queue.flush(least_pages)

    # --- read ---------------------------------------------------------------------------------
    def get(self, queue_offset: int) -> tuple[int, int, int] | None:
        """(physical_offset, size, tags_code) of one unit, or None outside [min, max)."""
        if not self.min_offset_in_queue() <= queue_offset < self.max_offset_in_queue():
            return None
        offset = queue_offset * UNIT_SIZE
        mapped_file = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mapped_file is None:
            return None
        view = mapped_file.view(offset - mapped_file.file_from_offset, UNIT_SIZE)
        if view is None:
            return None
        try:
            return UNIT_STRUCT.unpack(view)
        finally:
            view.release()
            mapped_file.release()

    def read_units(self, queue_offset: int, count_max: int,
                   bounds: tuple[int, int] | None = None) -> UnitsView:
        """Up to ``count_max`` units from ``queue_offset``, within one file, as a no-copy view.

        Empty when ``queue_offset`` is outside [min, max). ``bounds``: (min, max) as the caller
        has just read them (a pull reads them once). Release the result when done.
        """
        span = self.units_span(queue_offset, count_max, bounds)
        if span is None:
            return UnitsView(queue_offset, None, None)
        return UnitsView(queue_offset, *span)

    def units_span(self, queue_offset: int, count_max: int,
                   bounds: tuple[int, int] | None = None) -> tuple[memoryview, MappedFile] | None:
        """:meth:`read_units`' units as ``(bytes, file)``, the file held for them (release the
        bytes, then the file), or None when there are none: for a reader that takes the bytes
        as they are (a pull's scan in C)."""
        if count_max < 0:
            raise ValueError(f"count_max must be >= 0, got {count_max}")
        min_offset, max_offset = (self.min_offset_in_queue(), self.max_offset_in_queue()) \
            if bounds is None else bounds
        if not min_offset <= queue_offset < max_offset or count_max == 0:
            return None
        offset = queue_offset * UNIT_SIZE
        mapped_file = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mapped_file is None:
            return None
        file_position = offset - mapped_file.file_from_offset
        count = min(count_max, max_offset - queue_offset,
                    (mapped_file.wrote_position - file_position) // UNIT_SIZE)
        view = mapped_file.view(file_position, count * UNIT_SIZE)
        if view is None:
            return None
        return view, mapped_file

    def offset_by_time(self, timestamp_ms: int, store_timestamp_of: Callable[[int, int], int],
                       boundary: str = "lower") -> int:
        """Queue offset nearest ``timestamp_ms`` by binary search over store times.

        ``store_timestamp_of(physical_offset, size)`` returns the record's store time (ms) from
        the CommitLog, negative when the record is gone (treated as older than anything).
        ``boundary="lower"``: the first offset stored at or after ``timestamp_ms`` (max offset
        when all are older); ``"upper"``: the last offset stored at or before it (min offset
        when all are newer); ``"nearest"`` (Java 4.x, no boundary given): the offset whose
        store time is nearest, the earlier one on a tie, the last message when all are older.
        Store times are taken as non-decreasing along the queue.
        """
        if boundary not in BOUNDARIES:
            raise ValueError(f"boundary must be one of {BOUNDARIES}, got {boundary!r}")
        low, high = self.min_offset_in_queue(), self.max_offset_in_queue()
        # Invariant: units in [min, low) are "before", units in [high, max) are "not before",
        # where "before" means time < timestamp (lower) or time <= timestamp (upper).
        while low < high:
            middle = (low + high) // 2
            unit = self.get(middle)
            if unit is None:   # concurrently expired: treat as old
                low = middle + 1
                continue
            stored_ms = store_timestamp_of(unit[0], unit[1])
            before = stored_ms <= timestamp_ms if boundary == "upper" else \
                stored_ms < timestamp_ms
            if before:
                low = middle + 1
            else:
                high = middle
        if boundary == "lower":
            return low
        if boundary == "nearest":
            return self._nearest(low, timestamp_ms, store_timestamp_of)
        return max(low - 1, self.min_offset_in_queue())

    def _nearest(self, lower: int, timestamp_ms: int,
                 store_timestamp_of: Callable[[int, int], int]) -> int:
        # ``lower`` is the first offset stored at or after the time (Java 4.9's
        # getOffsetInQueueByTime keeps the nearer of it and the one before).
        first, end = self.min_offset_in_queue(), self.max_offset_in_queue()
        if end <= first or lower <= first:
            return lower
        if lower >= end:
            return end - 1
        before, after = self.get(lower - 1), self.get(lower)
        if before is None or after is None:
            return lower
        before_ms = store_timestamp_of(before[0], before[1])
        after_ms = store_timestamp_of(after[0], after[1])
        return lower if abs(timestamp_ms - before_ms) > abs(timestamp_ms - after_ms) else lower - 1

    # --- truncation and expiry ----------------------------------------------------------------
    def truncate_dirty(self, phy_offset: int) -> None:
        """Drop units pointing at or beyond commit-log ``phy_offset`` (bytes): their records were
        cut from the CommitLog by recovery. Bytes beyond the new end are zeroed."""
        if self.read_only:
            raise PermissionError(f"{self.queue_dir}: read-only consume queue")
        cut_offset = self.mapped_file_queue.max_offset()
        for mapped_file in reversed(self.mapped_file_queue.mapped_files):
            count = mapped_file.wrote_position // UNIT_SIZE
            index = _apply_to_units(mapped_file, count,
                                    lambda units: _first_real_at_or_above(units, phy_offset))
            if index < 0:
                break
            cut_offset = mapped_file.file_from_offset + index * UNIT_SIZE
            if index > 0:
                break
        self.mapped_file_queue.truncate_dirty_files(cut_offset)
        self._min_logic_offset = min(self._min_logic_offset, cut_offset)
        self.last_dispatched_phy_offset = self._last_phy_end()

    def truncate_at(self, queue_offset: int) -> None:
        """Drop the units from ``queue_offset`` on (damaged units found by
        pybroker.store.repair); bytes beyond the new end are zeroed."""
        if self.read_only:
            raise PermissionError(f"{self.queue_dir}: read-only consume queue")
        self.mapped_file_queue.truncate_dirty_files(queue_offset * UNIT_SIZE)
        self._min_logic_offset = min(self._min_logic_offset, queue_offset * UNIT_SIZE)
        self.last_dispatched_phy_offset = self._last_phy_end()

    def _last_phy_end(self) -> int:
        for mapped_file in reversed(self.mapped_file_queue.mapped_files):
            count = mapped_file.wrote_position // UNIT_SIZE
            phy_end = _apply_to_units(mapped_file, count, _last_phy_end)
            if phy_end:
                return phy_end
        return 0

    def correct_min_offset(self, commitlog_min_offset: int) -> None:
        """After CommitLog files are deleted: the min offset becomes the first unit whose
        record still exists (physical offset >= ``commitlog_min_offset``, bytes)."""
        self._min_logic_offset = self._scan_min_logic_offset(commitlog_min_offset)

    def delete_expired(self, commitlog_min_offset: int) -> int:
        """Delete files (never the last) whose units all point below ``commitlog_min_offset``
        and correct the min offset; returns how many files were deleted."""
        deleted = self.mapped_file_queue.delete_expired_by_offset(commitlog_min_offset, UNIT_SIZE)
        self.correct_min_offset(commitlog_min_offset)
        return deleted

    def close(self) -> None:
        """Unmap every file (they stay on disk)."""
        self.mapped_file_queue.shutdown(0)

    def destroy(self) -> None:
        """Delete every file and the queue directory."""
        self.mapped_file_queue.destroy()
        self._min_logic_offset = 0
        self.last_dispatched_phy_offset = 0


def _missing_file(queue: ConsumeQueue, from_zero: bool) -> str | None:
    """Why a loaded queue's files cannot be whole (a missing file), or None."""
    files = queue.mapped_file_queue.mapped_files
    size = queue.mapped_file_size
    if files and from_zero and files[0].file_from_offset != 0:
        return f"no first file (its files start at {files[0].file_name})"
    for before, after in zip(files, files[1:], strict=False):
        if after.file_from_offset != before.file_from_offset + size:
            return f"a file missing after {before.file_name}"
    return None


class ConsumeQueueStore:
    """Every consume queue of a store root, found or created by (topic, queue_id)."""

    def __init__(self, store_root: str, mapped_file_size: int = DEFAULT_MAPPED_FILE_SIZE,
                 read_only: bool = False):
        self.store_root = store_root
        self.mapped_file_size = mapped_file_size
        self.read_only = read_only
        self.queue_table: dict[str, dict[int, ConsumeQueue]] = {}
        # (topic, queue_id) deleted by load(repair=True), to be rebuilt from the CommitLog.
        self.rebuilt_queues: list[tuple[str, int]] = []

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queue_table.get(topic, {}).get(queue_id)

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue of (topic, queue_id); a new, empty one when it does not exist yet."""
        queues = self.queue_table.setdefault(topic, {})
        queue = queues.get(queue_id)
        if queue is None:
            queue = ConsumeQueue(self.store_root, topic, queue_id, self.mapped_file_size,
                                 self.read_only)
            queues[queue_id] = queue
        return queue

    def queues(self) -> list[ConsumeQueue]:
        return [queue for queues in self.queue_table.values() for queue in queues.values()]

    def load(self, repair: bool = False, from_zero: bool = False) -> bool:
        """Map ``consumequeue/<topic>/<queue_id>/`` from disk; False if a file has a bad size.

        ``repair``: a queue with a file of the wrong size, a file missing between two others,
        or - with ``from_zero`` (no CommitLog file has expired, so no queue file may have
        either) - a missing first file is deleted instead (logged) and recorded in
        :attr:`rebuilt_queues`; the caller re-dispatches it from the CommitLog.
        """
        root = paths.consume_queue_root(self.store_root)
        try:
            topics = sorted(os.listdir(root))
        except FileNotFoundError:
            return True
        for topic in topics:
            topic_dir = os.path.join(root, topic)
            if not os.path.isdir(topic_dir):
                continue
            for name in sorted(os.listdir(topic_dir)):
                if not name.isdigit():
                    log.warning("ignoring %s: not a queue id", os.path.join(topic_dir, name))
                    continue
                queue = self.find_or_create(topic, int(name))
                problem = "a file of the wrong size" if not queue.load() \
                    else _missing_file(queue, from_zero)
                if problem is None:
                    continue
                if not repair:
                    return False
                self.rebuild(topic, int(name), problem)
        return True

    def rebuild(self, topic: str, queue_id: int, problem: str) -> None:
        """Delete a damaged queue (logged with ``problem``) and record it in
        :attr:`rebuilt_queues`: the caller re-dispatches it from the CommitLog."""
        queue = self.find(topic, queue_id)
        if queue is None:
            return
        log.error("consume queue %s has %s: deleted, to be rebuilt from the CommitLog",
                  queue.queue_dir, problem)
        queue.destroy()
        self.queue_table[topic][queue_id] = ConsumeQueue(
            self.store_root, topic, queue_id, self.mapped_file_size, self.read_only)
        self.rebuilt_queues.append((topic, queue_id))

    def recover(self) -> int:
        """Recover every queue; returns the max commit-log offset they cover (bytes), where the
        dispatcher (reput) may resume."""
        for queue in self.queues():
            queue.recover()
        return self.max_physical_offset()

    def max_physical_offset(self) -> int:
        """Largest physical_offset + size written to any queue (bytes), 0 when none."""
        return max((queue.last_dispatched_phy_offset for queue in self.queues()), default=0)

    def truncate_dirty(self, phy_offset: int) -> int | None:
        """Every queue's truncate_dirty; the lowest new end (CommitLog offset) of a queue that
        lost units, where dispatch must start to give them back when their records are still
        there (a damaged unit pointing past the end cuts a queue too), or None."""
        resume = None
        for queue in self.queues():
            before = queue.max_offset_in_queue()
            queue.truncate_dirty(phy_offset)
            if queue.max_offset_in_queue() < before:
                end = queue.last_dispatched_phy_offset
                resume = end if resume is None else min(resume, end)
        return resume

    def correct_min_offset(self, commitlog_min_offset: int) -> None:
        for queue in self.queues():
            queue.correct_min_offset(commitlog_min_offset)

    def delete_expired(self, commitlog_min_offset: int) -> int:
        return sum(queue.delete_expired(commitlog_min_offset) for queue in self.queues())

    def flush(self, least_pages: int = 0) -> bool:
        results = [queue.flush(least_pages) for queue in self.queues()]
        return any(results)

    def delete_topic(self, topic: str) -> None:
        """Destroy every queue of ``topic`` (topic deleted by an admin)."""
        for queue in self.queue_table.pop(topic, {}).values():
            queue.destroy()
        try:
            os.rmdir(os.path.join(paths.consume_queue_root(self.store_root), topic))
        except OSError:
            pass

    def close(self) -> None:
        for queue in self.queues():
            queue.close()
