# The records of a due timer slot as re-put runs: their value types and the C rule's call.
"""What the timer's dequeue turns a slot into (broker/timer.py, broker/timer_ahead.py): the
slot's plan read from the timer log, runs of re-puts per (real topic, queue, sys flag), and a
chunk of a slot converted by the C first-delivery rule (_fast/timer_reput.pyx, kept equal to
TimerStore._convert_text by tests/unit/_fast/test_timer_reput.py).
"""
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from pybroker._fast import timer_reput
from pybroker.broker.reput import RePut
from pybroker.protocol.constants import Property
from pybroker.store.read_api import SpansResult

__all__ = ["Run", "AssembledRun", "Wanted", "SlotPlan", "CChunk", "HeldChunk", "Prepared",
           "REPUTS", "TEXT_PATH_NAMES", "RUN_RECORDS_MAX", "RUN_BYTES_MAX", "DEQUEUE_CHUNK",
           "CHUNKS_IN_FLIGHT", "convert_c", "hold", "assembled", "prepared", "runs_of"]

RUN_RECORDS_MAX = 256           # records of one real queue put as one request
DEQUEUE_CHUNK = 1024            # units of a slot turned into re-puts at a time
CHUNKS_IN_FLIGHT = 32
RUN_BYTES_MAX = 256 << 10

# The four values the first-delivery rule reads, in the order the C rule takes them.
TEXT_PATH_NAMES = (Property.REAL_TOPIC, Property.REAL_QUEUE_ID,
                   Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, Property.TIMER_DEL_UNIQKEY)
# The string path in C, many records per call (_fast/timer_reput.pyx; kept equal to
# _convert_text by tests/unit/_fast/test_timer_reput.py).
REPUTS = timer_reput.TimerReputs(*(name.encode() for name in TEXT_PATH_NAMES + (
    Property.TIMER_ENQUEUE_MS, Property.TIMER_DEQUEUE_MS)))


class Run(NamedTuple):
    """Re-puts of one (topic, queue, sys flag) put as one request: ``messages`` whole
    records."""
    records: bytes | bytearray | memoryview
    topic: str
    queue_id: int
    messages: int
    sys_flag: int


class AssembledRun(NamedTuple):
    """A run of a held chunk not assembled yet: run ``run`` of ``assembly``, written where
    it is put (a putter's ``put_assembled``: the send ring's reserved space)."""
    assembly: timer_reput.Assembly
    run: int
    topic: str
    queue_id: int
    messages: int
    sys_flag: int


class Wanted(NamedTuple):
    """Parked messages to re-put, one array per field: CommitLog offsets and sizes, the
    write time each was enqueued at (TIMER_ENQUEUE_MS; Long.MAX: due at enqueue), whether
    it is a roll."""
    offsets: np.ndarray
    sizes: np.ndarray
    enqueue_ms: np.ndarray
    rolls: np.ndarray


class SlotPlan(NamedTuple):
    """A due slot read from the timer log: which units are cancel marks, the marks' keys
    (TIMER_DEL_UNIQKEY -> the mark's properties), the messages to re-put, and the figures
    the reading found (marks unreadable, second units of one message left out)."""
    is_delete: np.ndarray
    cancelled: dict[str, dict[str, str]]
    wanted: Wanted
    unreadable: int
    duplicates: int


class CChunk(NamedTuple):
    """A chunk of a slot converted in C (``records`` of its wanted list): ``out`` holds the
    new records, ``runs`` cut from it; ``groups`` (topic, queue, sys flag, count) for the
    metrics; ``rest`` the indexes left to the Python rule; ``dropped_keys`` the cancel marks
    used up, in the order C used them; ``cuts`` the runs as (start, end, count, group
    index) of ``out``; ``positions`` where each record's new record begins in ``out`` (-1:
    not written there); ``own_ms`` each record's own delivery time, the put rule's at its
    store timestamp (timer_reput.OWN_MS_NONE_VALUE: not read; broker/timer_own.py), None
    when not asked for."""
    out: bytearray
    runs: list[Run]
    groups: list[tuple[str, int, int, int]]
    rest: list[int]
    dropped_keys: list[str]
    records: int
    cuts: list[tuple[int, int, int, int]]
    positions: np.ndarray
    own_ms: np.ndarray | None


class HeldChunk(NamedTuple):
    """A chunk converted ahead, held as recipes (:func:`hold`): its new records without
    their bodies, which stay in the parked records in the CommitLog; what
    :func:`assembled` turns back into the chunk, byte for byte, when it is due; with its
    records' own times (``CChunk.own_ms``: what the running slot takes for the rows its
    enqueue did not see, after a restart)."""
    recipes: bytearray
    positions: np.ndarray
    out_length: int
    cuts: list[tuple[int, int, int, int]]
    groups: list[tuple[str, int, int, int]]
    dropped_keys: list[str]
    records: int
    own_ms: np.ndarray

    @property
    def held_bytes(self) -> int:
        return len(self.recipes) + self.positions.nbytes + self.own_ms.nbytes


def convert_c(wanted: Wanted, spans: SpansResult, keys: list[str], dequeue_ms: int,
              own_times: bool = False) -> CChunk:
    """One call of the C rule over a chunk, its parked records where ``spans`` found them
    (no figure counted, no mark used up); with ``own_times`` (the conversion ahead) each
    record's own time read too (about 0.08 µs a record more)."""
    positions = np.empty(len(wanted.offsets), np.int64)
    own_ms = np.empty(len(wanted.offsets), np.int64) if own_times else None
    out, groups, cuts, rest, dropped = REPUTS.convert(
        spans.buffers, spans.which, spans.starts, np.ascontiguousarray(wanted.sizes, np.int64),
        np.ascontiguousarray(wanted.enqueue_ms, np.int64),
        np.ascontiguousarray(~wanted.rolls, np.uint8), dequeue_ms, RUN_RECORDS_MAX,
        RUN_BYTES_MAX, tuple(key.encode() for key in keys), positions, own_ms)
    return CChunk(out, _runs(out, groups, cuts), groups, rest,
                  [keys[key_index] for _, key_index in dropped], len(wanted.offsets), cuts,
                  positions, own_ms)


def _runs(out: bytearray, groups: list[tuple[str, int, int, int]],
          cuts: list[tuple[int, int, int, int]]) -> list[Run]:
    whole = memoryview(out)
    return [Run(whole[start:end], groups[group][0], groups[group][1], count,
                groups[group][2]) for start, end, count, group in cuts]


def hold(chunk: CChunk) -> HeldChunk | None:
    """The chunk (C took it whole, its own times read) as recipes: what is held of it until
    it is due; None when its output cannot be stripped (hold it whole then)."""
    recipes = timer_reput.strip(chunk.out, chunk.positions)
    if recipes is None or chunk.own_ms is None:
        return None
    return HeldChunk(recipes, chunk.positions, len(chunk.out), chunk.cuts, chunk.groups,
                     chunk.dropped_keys, chunk.records, chunk.own_ms)


def assembled(held: HeldChunk, read_spans: Callable[[np.ndarray, np.ndarray], SpansResult],
              wanted: Wanted, start: int, converted_ms: int, dequeue_ms: int) -> CChunk | None:
    """The chunk ``held`` was made of (rows ``start`` on of ``wanted``), its bodies copied
    from the parked records read again (where they lie in the mapped files: no object a
    record) and TIMER_DEQUEUE_MS rewritten from ``converted_ms`` to ``dequeue_ms``; None
    when a record does not read as it did or the time cannot be rewritten in place (convert
    the chunk again)."""
    rows = slice(start, start + held.records)
    sizes = np.ascontiguousarray(wanted.sizes[rows], np.int64)
    spans = read_spans(wanted.offsets[rows], sizes)
    try:
        out = timer_reput.assemble(held.recipes, held.positions, spans.buffers, spans.which,
                                   spans.starts, sizes, held.out_length)
    finally:
        spans.release()
    if out is None or not timer_reput.restamp(out, converted_ms, dequeue_ms):
        return None
    return CChunk(out, _runs(out, held.groups, held.cuts), held.groups, [], held.dropped_keys,
                  held.records, held.cuts, held.positions, held.own_ms)


class Prepared(NamedTuple):
    """A held chunk whose runs are assembled where they are put (:func:`prepared`); release
    ``assembly`` once they are."""
    assembly: timer_reput.Assembly
    runs: list[AssembledRun]
    groups: list[tuple[str, int, int, int]]
    dropped_keys: list[str]


def prepared(held: HeldChunk, read_spans: Callable[[np.ndarray, np.ndarray], SpansResult],
             wanted: Wanted, start: int, converted_ms: int, dequeue_ms: int) -> Prepared | None:
    """:func:`assembled` without the chunk's bytes: the parked records read again and checked
    against the recipes, the runs left to be written into the ring by the putter
    (SendPath.put_assembled), TIMER_DEQUEUE_MS ``dequeue_ms``; byte for byte the records
    :func:`assembled` makes (tests/unit/broker/test_timer_ring.py). None: convert again."""
    rows = slice(start, start + held.records)
    sizes = np.ascontiguousarray(wanted.sizes[rows], np.int64)
    spans = read_spans(wanted.offsets[rows], sizes)
    written = np.flatnonzero(held.positions >= 0)
    order = written[np.argsort(held.positions[written], kind="stable")].astype(np.int64)
    try:
        assembly = timer_reput.prepare(held.recipes, held.positions, order, spans, sizes,
                                       held.out_length, held.cuts, converted_ms, dequeue_ms)
    except BaseException:
        spans.release()
        raise
    if assembly is None:
        spans.release()
        return None
    groups = held.groups
    return Prepared(assembly, [AssembledRun(assembly, index, groups[group][0], groups[group][1],
                                            count, groups[group][2])
                               for index, (_, _, count, group) in enumerate(held.cuts)],
                    groups, held.dropped_keys)


def runs_of(reputs: list[RePut]) -> list[Run]:
    """The re-puts grouped per (topic, queue, sys flag) into runs, in the order each group
    first appears: a new run once the last holds RUN_RECORDS_MAX records or RUN_BYTES_MAX
    bytes (_fast/timer_reput.pyx cuts its runs by the same rule)."""
    groups: dict[tuple[str, int, int], list[list[RePut]]] = {}
    run_bytes: dict[tuple[str, int, int], int] = {}
    for reput in reputs:
        key = (reput.topic, reput.queue_id, reput.sys_flag)
        chunks = groups.setdefault(key, [[]])
        last = chunks[-1]
        if len(last) >= RUN_RECORDS_MAX or run_bytes.get(key, 0) >= RUN_BYTES_MAX:
            last = []
            chunks.append(last)
            run_bytes[key] = 0
        last.append(reput)
        run_bytes[key] = run_bytes.get(key, 0) + len(reput.records)
    return [Run(chunk[0].records if len(chunk) == 1 else b"".join(item.records
                                                                     for item in chunk),
                topic, queue_id, len(chunk), sys_flag)
            for (topic, queue_id, sys_flag), chunks in groups.items() for chunk in chunks]
