# The CommitLog record a damaged consume-queue unit should point at, found between its neighbours.
"""A consume queue is derived data: when a unit does not point at its own record (a flipped bit,
a zeroed sector in an old queue file that start-up does not read), the record is still in the
CommitLog. A read that meets such a unit finds the record here instead of skipping it.

Each record names its topic, queue id and queue offset. The nearest units on either side of the
damaged one that do point at their own records bound where it must lie (units follow CommitLog
order); the records between them are walked until one names this queue and offset. The search
is bounded (:data:`NEIGHBOURS_MAX` units each side, :data:`SEARCH_BYTES_MAX` of CommitLog) and
costs nothing unless a unit is damaged; the scrubber reports the unit
(:mod:`pybroker.store.scrub`) and the next start rebuilds the queue from the CommitLog.
"""
from pybroker._fast import record as record_codec
from pybroker.errors import StoreCorruptError
from pybroker.store import layout
from pybroker.store.commitlog import CommitLog
from pybroker.store.consume_queue import ConsumeQueue

__all__ = ["points_at_own_record", "find_unit_record", "NEIGHBOURS_MAX", "SEARCH_BYTES_MAX"]

NEIGHBOURS_MAX = 64
SEARCH_BYTES_MAX = 64 << 20


def points_at_own_record(commitlog: CommitLog, queue: ConsumeQueue, queue_offset: int,
                         physical_offset: int, size: int) -> bool:
    """The unit ``(physical_offset, size)`` of ``queue_offset`` points at a whole record of
    this size that names that offset, this queue and this queue offset (no CRC check)."""
    if physical_offset < 0 or not 0 < size < layout.CQ_FILLER_SIZE:
        return False
    with commitlog.record_at(physical_offset) as found:
        return (found is not None and found.total_size == size
                and found.physical_offset == physical_offset
                and found.queue_id == queue.queue_id and found.queue_offset == queue_offset
                and found.topic == queue.topic)


def _neighbour(commitlog: CommitLog, queue: ConsumeQueue, queue_offset: int,
               step: int) -> tuple[int, int] | None:
    """(physical offset, size) of the nearest unit in direction ``step`` (-1 or 1) that points
    at its own record, within NEIGHBOURS_MAX units; None when there is none."""
    low, high = queue.min_offset_in_queue(), queue.max_offset_in_queue()
    offset = queue_offset + step
    for _ in range(NEIGHBOURS_MAX):
        if not low <= offset < high:
            return None
        unit = queue.get(offset)
        if unit is not None and points_at_own_record(commitlog, queue, offset, unit[0],
                                                     unit[1]):
            return unit[0], unit[1]
        offset += step
    return None


def find_unit_record(commitlog: CommitLog, queue: ConsumeQueue, queue_offset: int,
                     check_crc: bool = True) -> tuple[int, int] | None:
    """(physical offset, size) of the valid record of ``queue``'s ``queue_offset``, searched
    in the CommitLog between the nearest sound units around it; None when not found (the
    record itself is damaged or gone, or the bounds are too far apart)."""
    below = _neighbour(commitlog, queue, queue_offset, -1)
    above = _neighbour(commitlog, queue, queue_offset, 1)
    low = below[0] + below[1] if below is not None else max(commitlog.min_offset(), 0)
    high = above[0] if above is not None else commitlog.max_offset()
    high = min(high, low + SEARCH_BYTES_MAX)
    if high <= low:
        return None
    try:
        for candidate in commitlog.record_iterator(low, high):
            if (candidate.queue_offset == queue_offset and candidate.queue_id == queue.queue_id
                    and candidate.topic == queue.topic):
                found = candidate.physical_offset, candidate.total_size
                candidate.body.release()
                return found if _whole(commitlog, found, check_crc) else None
            candidate.body.release()
    except StoreCorruptError:
        return None                  # damaged records in the way: give up, never guess
    return None


def _whole(commitlog: CommitLog, found: tuple[int, int], check_crc: bool) -> bool:
    physical_offset, size = found
    view = commitlog.read_raw(physical_offset, size)
    if view is None:
        return False
    try:
        return len(view) == size and record_codec.check_records(
            view, [0], [size], physical_offset, check_crc) < 0
    finally:
        commitlog.release_raw(physical_offset, view)
