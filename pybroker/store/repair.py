# Derived store files (consume queues, index, checkpoint) checked at load and rebuilt from the log.
"""The CommitLog is the store's only primary data; everything else can be rebuilt from it.

At load (:class:`pybroker.store.message_store.MessageStore`) a damaged derived file is never a
reason to refuse start-up, and never a reason to serve wrong data:

* **checkpoint** of the wrong size, with impossible values (a negative time, a time more than
  a day ahead of the clock) or whose stamp does not match (store/checkpoint.py): logged and
  zeroed, the flushed CommitLog offset unknown; abnormal recovery then rewinds to the first
  CommitLog file and re-dispatches everything (idempotent);
* **consume queue** with a file of the wrong size, a file missing between two others, or a
  missing first file while no CommitLog file has expired: deleted (``ConsumeQueueStore.load(
  repair=True)``) and rebuilt by dispatch from the oldest CommitLog record;
* **units damaged in an older queue file** (start-up reads a queue's last three files): a
  read that meets one finds its record in the CommitLog (:mod:`pybroker.store.unit_search`),
  the scrubber reports it (:mod:`pybroker.store.scrub`) and the next start rebuilds the queue;
* **consume queue tail** with garbage after the last real unit (:func:`drop_damaged_tails`):
  units must be in physical-offset order, point inside the recovered CommitLog, and the last
  one kept must point at a record of this very topic, queue and queue offset; the rest is cut
  and dispatched again from the CommitLog;
* **a queue's last units lost** (zeroed, its last file removed: the queue alone cannot tell
  that from its end): the CommitLog window recovery scanned is dispatched again at every
  start (idempotent: units and index entries already there are skipped); a queue ending
  exactly at a full file before that window is re-dispatched from its last unit when that is
  at most QUEUE_FILE_END_REDISPATCH_BYTES_MAX behind the CommitLog's end, else logged;
* **index files** of the wrong size: all deleted (``IndexService.load(repair=True)``) and
  rebuilt from the oldest CommitLog record.

Each repair is one WARNING/ERROR line naming the file and saying "rebuilt from the CommitLog".
"""
import logging
import os

import numpy as np

from pybroker.store import layout
from pybroker.store.checkpoint import MISMATCH, StoreCheckpoint
from pybroker.store.commitlog import CommitLog
from pybroker.store.consume_queue import ConsumeQueue, ConsumeQueueStore

__all__ = ["open_checkpoint", "drop_damaged_tails", "queues_ending_at_a_file_end"]

log = logging.getLogger("pybroker.store.repair")

_CHECKPOINT_FUTURE_MAX_MS = 24 * 3600 * 1000
# Units checked against their record, walking back from the tail, before the tail is given up.
_TAIL_RECORD_CHECKS_MAX = 64
# A queue whose last file is full may have lost the file after it: it is re-dispatched from
# its last unit when that lies at most this far behind the CommitLog's end (C dispatch: about a
# second per GiB of already dispatched records); further back it is logged instead.
QUEUE_FILE_END_REDISPATCH_BYTES_MAX = 4 << 30


def open_checkpoint(path: str, now_ms: int) -> StoreCheckpoint:
    """The checkpoint at ``path``; a damaged one is logged and zeroed (see the module doc)."""
    problem = None
    if os.path.exists(path) and os.path.getsize(path) != layout.CHECKPOINT_FILE_SIZE:
        problem = f"{os.path.getsize(path)} bytes instead of {layout.CHECKPOINT_FILE_SIZE}"
        os.unlink(path)
    checkpoint = StoreCheckpoint(path)
    if problem is None:
        times = (checkpoint.physic_msg_timestamp, checkpoint.logics_msg_timestamp,
                 checkpoint.index_msg_timestamp)
        if any(t < 0 or t > now_ms + _CHECKPOINT_FUTURE_MAX_MS for t in times):
            problem = f"impossible store times {times}"
        elif checkpoint.stamp_state == MISMATCH:
            problem = ("its stamp does not match its fields: damaged, or written since by a "
                       "broker that does not keep pybroker's stamp, e.g. Java")
    if problem is not None:
        log.error("checkpoint %s is damaged (%s): rebuilt; a crash recovery now re-dispatches "
                  "the whole CommitLog, and recovery proves the CommitLog's end without it",
                  path, problem)
        for name in ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp",
                     "master_flushed_offset", "confirm_phy_offset", "commitlog_flushed_offset"):
            setattr(checkpoint, name, 0)
        # Stored unstamped: no flushed offset is vouched for until the next flush.
        checkpoint.flush(stamped=False)
    return checkpoint


def _units(queue: ConsumeQueue, first: int, count: int) -> np.ndarray:
    """Units [first, first + count) as native integers (copied; across files)."""
    chunks, end = [], first + count
    while first < end:
        with queue.read_units(first, end - first) as view:
            if len(view) == 0:
                break
            chunks.append(view.units.astype([("phy", "i8"), ("size", "i8"), ("tags", "i8")]))
        first += len(chunks[-1])
    return np.concatenate(chunks)


def _points_at_own_record(queue: ConsumeQueue, commitlog: CommitLog, queue_offset: int,
                          physical_offset: int, size: int) -> bool:
    with commitlog.record_at(physical_offset) as found:
        return (found is not None and found.total_size == size and found.topic == queue.topic
                and found.queue_id == queue.queue_id and found.queue_offset == queue_offset)


def _good_end(queue: ConsumeQueue, commitlog: CommitLog, valid_end: int) -> int:
    """Queue offset just past the last trustworthy unit of ``queue``'s tail."""
    low, high = queue.min_offset_in_queue(), queue.max_offset_in_queue()
    units_per_file = queue.mapped_file_size // layout.CQ_STORE_UNIT_SIZE
    first = max(low, high - high % units_per_file - units_per_file, 0)   # last ~2 files
    if high <= first:
        return high
    units = _units(queue, first, high - first)
    filler = (units["phy"] == 0) & (units["size"] == layout.CQ_FILLER_SIZE)
    real = ~filler
    inside = (units["phy"] >= 0) & (units["size"] > 0) & \
        (units["phy"] + units["size"] <= valid_end)
    phys = np.where(real, units["phy"], -1)
    previous = np.maximum.accumulate(np.concatenate(([-1], phys[:-1])))
    ordered = ~real | (phys > previous)
    bad = np.flatnonzero(~(filler | (inside & ordered)))
    end = first + (int(bad[0]) if len(bad) else len(units))
    for _ in range(_TAIL_RECORD_CHECKS_MAX):
        index = end - 1 - first
        if index < 0 or filler[index]:
            return end
        if _points_at_own_record(queue, commitlog, end - 1, int(units["phy"][index]),
                                 int(units["size"][index])):
            return end
        end -= 1
    return first


def drop_damaged_tails(queues: ConsumeQueueStore, commitlog: CommitLog,
                       valid_end: int) -> int | None:
    """Cut garbage from every queue's tail; returns the CommitLog offset dispatch must rebuild
    from (the lowest end of a cut queue), or None when every tail was whole."""
    rebuild_from = None
    for queue in queues.queues():
        before = queue.max_offset_in_queue()
        end = _good_end(queue, commitlog, valid_end)
        if end == before:
            if queue.tail_damaged:    # bytes after the valid units, zeroed by recover()
                resume = queue.last_dispatched_phy_offset
                log.error("consume queue %s: unreadable bytes after queue offset %d zeroed; "
                          "rebuilt from the CommitLog from physical offset %d",
                          queue.queue_dir, end, resume)
                rebuild_from = resume if rebuild_from is None else min(rebuild_from, resume)
            continue
        queue.truncate_at(end)
        resume = queue.last_dispatched_phy_offset
        log.error("consume queue %s: %d damaged unit(s) after queue offset %d dropped; "
                  "rebuilt from the CommitLog from physical offset %d", queue.queue_dir,
                  before - end, end, resume)
        rebuild_from = resume if rebuild_from is None else min(rebuild_from, resume)
    return rebuild_from


def queues_ending_at_a_file_end(queues: ConsumeQueueStore, valid_end: int) -> int | None:
    """The CommitLog offset to re-dispatch from for queues whose last file is full (see the
    module doc), or None."""
    resume = None
    for queue in queues.queues():
        files = queue.mapped_file_queue.mapped_files
        if not files or not files[-1].is_full():
            continue
        end = queue.last_dispatched_phy_offset
        if valid_end - end > QUEUE_FILE_END_REDISPATCH_BYTES_MAX:
            log.warning("consume queue %s ends exactly at the end of its file %s, %d bytes "
                        "before the CommitLog's end: if a later file was lost, `pybroker "
                        "store verify --repair-derived` rebuilds it", queue.queue_dir,
                        files[-1].file_name, valid_end - end)
            continue
        resume = end if resume is None else min(resume, end)
    return resume
