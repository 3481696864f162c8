# The scrubber: every CommitLog record and consume-queue unit verified, a little at a time.
"""Background verification of a whole store (issue #22): what start-up does not read.

Start-up proves the end of the CommitLog and reads the newest files (store/recovery.py); a
store of many GiB cannot be read whole at every start. The scrubber reads the rest while the
broker runs, rate-limited (``storeScrubRateMegabytesPerSecond``), in passes:

1. **CommitLog**: every record from the min offset up to ``limit`` (the flushed position: what
   is on disk) with its layout, body CRC and own physical offset (``record.scan`` in C). Zeros
   where a record must start, a BLANK before the file end or followed by valid records, a
   record that fails its check, a file missing: a *finding* (file, file position, physical
   offset, up to where the next valid record starts). Ranges recovery already skipped
   (damagedRecords.json) are known and not reported again.
2. **Consume queues**: every unit must point at a whole record of its topic, queue id and queue
   offset (``record.check_records``, grouped per CommitLog file). A unit whose record is
   damaged is the CommitLog's finding, not reported twice.

Findings are kept in ``<store>/scrubber.json`` with the progress, so a restart resumes the pass
instead of starting over, and so the next start acts on them: recovery checks each CommitLog
finding again and refuses to start while it is still damaged (fail-stop, exactly as for damage
it finds itself, with the same option); each queue with a finding is rebuilt from the
CommitLog (:meth:`ScrubState.settle`). A pass ends by dropping findings it did not meet again
(files expired). One writer: the scrubber while the broker runs, start-up before it runs.

:class:`Scrubber` does the work in steps of a bounded number of bytes; the rate, the thread and
the figures are :mod:`pybroker.proc.scrubber`'s; ``pybroker store verify`` runs the same passes
at full speed on a stopped broker's store.
"""
import dataclasses
import logging
import os

import numpy as np
import orjson

from pybroker._fast import record as record_codec
from pybroker.store import layout, paths
from pybroker.store.commitlog import CommitLog
from pybroker.store.damaged_records import DamagedRecords
from pybroker.store.mapped_file import MappedFile, offset_file_name
from pybroker.store.read_only_store import MessageStoreReader
from pybroker.store.record_search import first_record_from, next_valid_record

__all__ = ["Finding", "ScrubState", "Scrubber", "COMMITLOG", "CONSUME_QUEUE"]

log = logging.getLogger("pybroker.store.scrub")

COMMITLOG, CONSUME_QUEUE = "commitlog", "consumequeue"
PHASE_COMMITLOG, PHASE_QUEUES, PHASE_DONE = "commitlog", "queues", "done"
FINDINGS_MAX = 1000                   # kept; more are counted in ``findings_dropped``
_UNITS_PER_STEP_MAX = 1 << 16


@dataclasses.dataclass
class Finding:
    """One damaged place. ``physical_offset``: the damaged record (CommitLog) or where the unit
    points (consume queue); ``end``: the next valid record after a CommitLog finding."""
    kind: str
    path: str
    file_position: int
    physical_offset: int
    end: int = -1
    what: str = ""
    queue: str = ""                   # "topic/queueId" of a consume-queue finding
    queue_offset: int = -1
    found_ms: int = 0

    @property
    def key(self) -> tuple:
        return self.kind, self.physical_offset, self.queue, self.queue_offset

    def text(self) -> str:
        """One line an operator can act on."""
        if self.kind == COMMITLOG:
            span = f" to {self.end}" if self.end > self.physical_offset else ""
            return (f"CommitLog file {self.path}: {self.what} at file position "
                    f"{self.file_position}, physical offset {self.physical_offset}{span}")
        return (f"consume queue {self.queue} file {self.path}: the unit of queue offset "
                f"{self.queue_offset} (file position {self.file_position}) {self.what}")


@dataclasses.dataclass
class ScrubState:
    """Progress and findings, persisted as ``<store>/scrubber.json``."""
    phase: str = PHASE_DONE
    position: int = 0                 # next CommitLog offset of the running pass
    queue_index: int = 0              # consume-queue phase: index into ``queues``
    queue_offset: int = 0             # next unit of that queue
    queues: list = dataclasses.field(default_factory=list)    # [topic, queue id] pairs
    passes: int = 0
    pass_started_ms: int = 0
    last_pass_ms: int = 0             # when the last pass ended (0: never)
    verified_bytes: int = 0           # CommitLog bytes and queue units checked, all passes
    findings: list = dataclasses.field(default_factory=list)
    findings_dropped: int = 0
    seen: set = dataclasses.field(default_factory=set)        # keys met in this pass

    @classmethod
    def load(cls, store_root: str) -> "ScrubState":
        """The saved state; a fresh one when absent or unreadable (logged: the scrubber then
        starts over, nothing is lost but its progress)."""
        path = paths.scrub_state_path(store_root)
        try:
            with open(path, "rb") as file:
                document = orjson.loads(file.read())
            fields = {f.name for f in dataclasses.fields(cls)} - {"findings", "seen"}
            state = cls(**{key: value for key, value in document.items() if key in fields})
            state.findings = [Finding(**item) for item in document.get("findings", [])]
            state.seen = {tuple(key) for key in document.get("seen", [])}
            return state
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError, TypeError) as error:
            log.error("%s cannot be read (%s): the scrubber starts a new pass", path, error)
            return cls()

    def save(self, store_root: str) -> None:
        """Write the state (temp file + rename; losing it only costs progress)."""
        path = paths.scrub_state_path(store_root)
        document = dataclasses.asdict(self)
        document["seen"] = sorted(list(key) for key in self.seen)
        temporary = path + ".tmp"
        with open(temporary, "wb") as file:
            file.write(orjson.dumps(document))
        os.replace(temporary, path)

    def add(self, finding: Finding) -> bool:
        """Record ``finding`` (logged once); False when it was known already."""
        self.seen.add(finding.key)
        if any(known.key == finding.key for known in self.findings):
            return False
        if len(self.findings) >= FINDINGS_MAX:
            self.findings_dropped += 1
            return False
        self.findings.append(finding)
        log.error("scrubber: %s", finding.text())
        return True

    def commitlog_suspects(self) -> list[int]:
        """Offsets of the CommitLog findings (recovery checks each again)."""
        return [f.physical_offset for f in self.findings if f.kind == COMMITLOG]

    def damaged_queues(self) -> list[tuple[str, int]]:
        """(topic, queue id) of every consume-queue finding."""
        found = set()
        for finding in self.findings:
            if finding.kind == CONSUME_QUEUE:
                topic, _, queue_id = finding.queue.rpartition("/")
                found.add((topic, int(queue_id)))
        return sorted(found)

    def settle(self, damaged: DamagedRecords, commitlog_min_offset: int,
               still_damaged) -> None:
        """After recovery: forget the CommitLog findings that are skipped now (in
        ``damaged``), expired, or no longer damaged (``still_damaged(offset)`` False, e.g. a
        file restored from a backup), and every queue finding (the queues were rebuilt)."""
        kept = []
        for finding in self.findings:
            if finding.kind != COMMITLOG or finding.physical_offset < commitlog_min_offset:
                continue
            if damaged.span_at(finding.physical_offset) is not None:
                continue
            if still_damaged(finding.physical_offset):
                kept.append(finding)
        self.findings = kept


class Scrubber:
    """Passes over one store through a read-only ``reader`` (see the module docstring).

    ``clock_ms`` stamps findings; ``at_data_end``: ``limit`` is not a flushed position but the
    end of every file (a stopped store: ``pybroker store verify``), so zeros with nothing
    valid after them are the end of the data, not damage.
    """

    def __init__(self, reader: MessageStoreReader, state: ScrubState, clock_ms,
                 at_data_end: bool = False):
        self.reader = reader
        self.state = state
        self.clock_ms = clock_ms
        self.at_data_end = at_data_end
        self.store_root = reader.store_root
        self.damaged = DamagedRecords.load(self.store_root)
        # Where the CommitLog's data ended in this pass (with ``at_data_end``; else the
        # limit the CommitLog phase reached).
        self.data_end: int | None = None

    # --- passes -------------------------------------------------------------------------------
    def start_pass(self) -> None:
        state = self.state
        state.phase, state.position = PHASE_COMMITLOG, 0
        state.queue_index = state.queue_offset = 0
        state.queues = []
        state.pass_started_ms = self.clock_ms()
        state.seen = set()
        self.data_end = None

    def step(self, limit: int, budget_bytes: int) -> int:
        """Verify about ``budget_bytes`` more, never past CommitLog offset ``limit``; returns
        the bytes verified (0: the pass is done, or waits for ``limit`` to move)."""
        state = self.state
        if state.phase == PHASE_COMMITLOG:
            verified = self._commitlog_step(limit, budget_bytes)
            if verified == 0 and state.phase == PHASE_COMMITLOG:
                state.phase, state.queues = PHASE_QUEUES, self._queue_names()
                state.queue_index = state.queue_offset = 0
            return verified or (1 if state.phase == PHASE_QUEUES else 0)
        if state.phase == PHASE_QUEUES:
            verified = self._queue_step(limit, budget_bytes) \
                if state.queue_index < len(state.queues) else 0
            if state.queue_index >= len(state.queues):
                self._end_pass()
            return max(verified, 1)
        return 0

    def _end_pass(self) -> None:
        state = self.state
        state.findings = [f for f in state.findings if f.key in state.seen]
        state.phase, state.passes = PHASE_DONE, state.passes + 1
        state.last_pass_ms = self.clock_ms()
        log.info("scrubber: pass %d done, %d finding(s)", state.passes, len(state.findings))

    # --- CommitLog ----------------------------------------------------------------------------
    def _commitlog_step(self, limit: int, budget_bytes: int) -> int:
        state = self.state
        commitlog = self.reader.current_commitlog()
        files = commitlog.mapped_file_queue.mapped_files
        state.position = max(state.position, commitlog.min_offset(), 0)
        while state.position < limit:
            span = self.damaged.span_at(state.position)
            if span is not None:                  # skipped by the operator's choice: known
                state.position = span[1]
                continue
            mapped_file = commitlog.mapped_file_queue.find_mapped_file_by_offset(state.position)
            if mapped_file is None:
                self._missing_file(files, limit)
                continue
            return self._scan_chunk(commitlog, mapped_file, limit, budget_bytes)
        if self.data_end is None:
            self.data_end = state.position
        return 0

    def _missing_file(self, files: list[MappedFile], limit: int) -> None:
        state = self.state
        later = [f for f in files if f.file_from_offset > state.position]
        base = state.position - state.position % self.reader.commitlog.file_size
        resume = later[0].file_from_offset if later else limit
        path = os.path.join(self.reader.commitlog_dir, offset_file_name(base))
        self._commitlog_finding(path, state.position - base, state.position, resume,
                                "missing file")
        state.position = resume

    def _scan_chunk(self, commitlog: CommitLog, mapped_file: MappedFile, limit: int,
                    budget_bytes: int) -> int:
        state = self.state
        base, file_size = mapped_file.file_from_offset, mapped_file.file_size
        start = state.position - base
        file_end = min(file_size, limit - base)
        stop = min(file_end, start + max(budget_bytes, 1))
        status, position = self._scan(mapped_file, start, stop)
        if status == record_codec.RECORD_TRUNCATED and position == start and stop < file_end:
            status, position = self._scan(mapped_file, start, file_end)   # one big record
        if status == record_codec.RECORD_END and position == stop:
            state.position = base + position if position < file_size else base + file_size
        elif status == record_codec.RECORD_TRUNCATED and position < file_end and stop < file_end:
            state.position = base + position          # the next step takes that record
        elif status == record_codec.RECORD_BLANK and self._blank_ends_file(mapped_file,
                                                                          position):
            state.position = base + file_size
        else:
            self._damage(commitlog, mapped_file, position, status, limit)
        self.state.verified_bytes += max(position - start, 1)
        return max(position - start, 1)

    def _scan(self, mapped_file: MappedFile, start: int, stop: int) -> tuple[int, int]:
        if not mapped_file.hold():
            return record_codec.RECORD_END, stop      # expired meanwhile
        buffer = mapped_file.buffer()
        try:
            status, position, _ = record_codec.scan(buffer, start, stop, True, True)
            return status, position
        finally:
            buffer.release()
            mapped_file.release()

    def _blank_ends_file(self, mapped_file: MappedFile, position: int) -> bool:
        """A BLANK reaching its file end with no valid record after it."""
        if not mapped_file.hold():
            return True
        buffer = mapped_file.buffer()
        try:
            _, total_size = record_codec.check(buffer, position, mapped_file.file_size, False)
        finally:
            buffer.release()
            mapped_file.release()
        return position + total_size == mapped_file.file_size and \
            first_record_from(mapped_file, position + 1) is None

    def _damage(self, commitlog: CommitLog, mapped_file: MappedFile, position: int,
                status: int, limit: int) -> None:
        state = self.state
        start = mapped_file.file_from_offset + position
        files = commitlog.mapped_file_queue.mapped_files
        resume = next_valid_record(files, files.index(mapped_file), position + 1)
        if resume is not None and resume >= limit:
            resume = None
        if resume is None and self.at_data_end and status == record_codec.RECORD_END:
            self.data_end = start                    # zeros to the end: the data ends here
            state.position = limit
            return
        what = {record_codec.RECORD_END: "record size 0 inside written data",
                record_codec.RECORD_BLANK: "an end-of-file marker (BLANK) hiding records",
                record_codec.RECORD_TRUNCATED: "a record running past written data"}.get(
            status, "a damaged record (bad size, magic code or body CRC)")
        end = resume if resume is not None else limit
        self._commitlog_finding(mapped_file.path, position, start, end, what)
        state.position = end

    def _commitlog_finding(self, path: str, file_position: int, start: int, end: int,
                           what: str) -> None:
        if self.damaged.covers(start, end):
            return
        self.state.add(Finding(COMMITLOG, path, file_position, start, end, what,
                               found_ms=self.clock_ms()))

    # --- consume queues -----------------------------------------------------------------------
    def _queue_names(self) -> list[list]:
        root = paths.consume_queue_root(self.store_root)
        names: list[list] = []
        try:
            topics = sorted(os.listdir(root))
        except FileNotFoundError:
            return names
        for topic in topics:
            try:
                ids = sorted(int(name) for name in os.listdir(os.path.join(root, topic))
                             if name.isdigit())
            except (FileNotFoundError, NotADirectoryError):
                continue
            names.extend([topic, queue_id] for queue_id in ids)
        return names

    def _queue_step(self, limit: int, budget_bytes: int) -> int:
        state = self.state
        topic, queue_id = state.queues[state.queue_index]
        queue = self.reader.queue(topic, queue_id)
        if queue is None:                             # deleted meanwhile
            state.queue_index, state.queue_offset = state.queue_index + 1, 0
            return 0
        first = max(state.queue_offset, queue.min_offset_in_queue())
        count = min(max(budget_bytes // layout.CQ_STORE_UNIT_SIZE, 1), _UNITS_PER_STEP_MAX)
        with queue.read_units(first, count) as view:
            units = view.units
            physical_offsets = units["phy"].astype(np.int64)
            sizes = units["size"].astype(np.int64)
        if len(physical_offsets) == 0:
            state.queue_index, state.queue_offset = state.queue_index + 1, 0
            return 0
        checked = self._check_units(queue, first, physical_offsets, sizes, limit)
        state.queue_offset = first + checked
        state.verified_bytes += checked * layout.CQ_STORE_UNIT_SIZE
        if checked < len(physical_offsets):          # units beyond the limit: next pass
            state.queue_index, state.queue_offset = state.queue_index + 1, 0
        return checked * layout.CQ_STORE_UNIT_SIZE

    def _check_units(self, queue, first: int, physical_offsets, sizes, limit: int) -> int:
        """Check units [first, first + len); returns how many were due: all but a trailing run
        pointing past ``limit`` (dispatched, not yet flushed: the next pass takes them)."""
        commitlog = self.reader.current_commitlog()
        filler = (physical_offsets == 0) & (sizes == layout.CQ_FILLER_SIZE)
        sane = ~filler & (physical_offsets >= 0) & (sizes > 0)
        past = sane & (physical_offsets + sizes > limit)
        in_limit = np.flatnonzero(~past)
        due = int(in_limit[-1]) + 1 if len(in_limit) else 0
        impossible = ~filler[:due] & (~sane[:due] | past[:due])
        for unit in np.flatnonzero(impossible).tolist():
            self._unit_finding(queue, first + unit, int(physical_offsets[unit]),
                               int(sizes[unit]))
        live = sane[:due] & ~past[:due] & \
            (physical_offsets[:due] >= max(commitlog.min_offset(), 0))
        indexes = np.flatnonzero(live)
        file_size = commitlog.file_size
        bases = physical_offsets[indexes] - physical_offsets[indexes] % file_size
        for base in np.unique(bases).tolist():
            in_file = indexes[bases == base]
            self._check_group(commitlog, queue, first, base, in_file, physical_offsets, sizes)
        return due

    def _check_group(self, commitlog, queue, first: int, base: int, in_file, physical_offsets,
                     sizes) -> None:
        mapped_file = commitlog.mapped_file_queue.find_mapped_file_by_offset(base)
        topic = queue.topic.encode()
        remaining = in_file.tolist()
        while remaining:
            if mapped_file is None or not mapped_file.hold():
                bad = 0
            else:
                buffer = mapped_file.buffer()
                try:
                    bad = record_codec.check_records(
                        buffer, [int(physical_offsets[i]) - base for i in remaining],
                        [int(sizes[i]) for i in remaining], base, False, topic,
                        queue.queue_id, first, remaining)
                finally:
                    buffer.release()
                    mapped_file.release()
            if bad < 0:
                return
            unit = remaining[bad]
            self._unit_finding(queue, first + unit, int(physical_offsets[unit]),
                               int(sizes[unit]))
            remaining = remaining[bad + 1:]

    def _unit_finding(self, queue, queue_offset: int, physical_offset: int, size: int) -> None:
        finding = next((f for f in self.state.findings if f.kind == COMMITLOG
                        and f.physical_offset <= physical_offset < max(f.end, 0)), None)
        if finding is not None or self.damaged.span_at(physical_offset) is not None:
            return                      # the record itself is damaged: reported as such
        position = queue_offset * layout.CQ_STORE_UNIT_SIZE
        file_base = position - position % queue.mapped_file_size
        self.state.add(Finding(
            CONSUME_QUEUE, os.path.join(queue.queue_dir, offset_file_name(file_base)),
            position - file_base, physical_offset,
            what=f"points at physical offset {physical_offset} (size {size}), not at its "
                 f"own record", queue=f"{queue.topic}/{queue.queue_id}",
            queue_offset=queue_offset, found_ms=self.clock_ms()))
