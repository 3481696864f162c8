# The controller-mode epoch file (epochFileCheckpoint): which master epoch wrote which bytes.
"""Epoch entries of a controller-mode store (docs/architecture/controller.md).

Each master epoch the controller hands out starts at a CommitLog offset; the list of
``(epoch, start offset)`` pairs, ascending in both, says which master wrote which bytes. A
slave compares its list with its master's at every HA handshake to find where their logs
agree (:func:`consistent_point`) and cuts the rest. The file is Java's ``CheckpointFile``
format, so a store moves between pybroker and Java RocketMQ 5.x::

    line 1   number of entries (decimal)
    line 2   CRC32 of the entry lines (each with its "\\n"), & 0x7FFFFFFF; 0 = not checked
    line 3.. "<epoch>-<start offset>" per entry, ascending

with the previous content in ``<file>.bak`` (read when the file is absent, empty or does not
verify). Writes use the store's safe write (:func:`pybroker.store.config_docs.save_file`). An
empty list removes both files: Java's reader would take ``.bak`` for an empty file, bringing
truncated entries back.

The end of an entry is the start of the next one; the last entry's end is open
(:data:`OPEN_END`) until a caller sets the log's end for a comparison. Appending follows Java's
``EpochFileCache.appendEntry``: an entry whose epoch or start offset is not above the last
entry's is refused (a master elected again before it wrote anything keeps its older entry; a
Java slave compares against exactly that list). One writer at a time: the supervisor between
generations, a slave's ha worker while it replicates.
"""
import dataclasses
import logging
import os
import zlib

from pybroker.errors import StoreCorruptError
from pybroker.store import config_docs

log = logging.getLogger("pybroker.store.epoch_file")

__all__ = ["EpochEntry", "EpochFile", "OPEN_END", "consistent_point", "parse_entries",
           "format_entries"]

OPEN_END = (1 << 63) - 1          # Java's Long.MAX_VALUE: the last entry has no end yet
_ENTRIES_MAX = 1 << 16            # far above any real history; bounds what a bad file costs
_CRC_NOT_CHECKED = 0


@dataclasses.dataclass
class EpochEntry:
    """One master epoch: ``epoch`` (int32), ``start_offset`` and ``end_offset`` (CommitLog
    physical offsets, bytes; the end is exclusive)."""
    epoch: int
    start_offset: int
    end_offset: int = OPEN_END


def _crc(lines_text: bytes) -> int:
    return zlib.crc32(lines_text) & 0x7FFFFFFF


def format_entries(entries: list[EpochEntry]) -> bytes:
    """The file content of ``entries`` (Java's ``CheckpointFile.write``)."""
    body = "".join(f"{entry.epoch}-{entry.start_offset}\n" for entry in entries).encode()
    return f"{len(entries)}\n{_crc(body)}\n".encode() + body


def parse_entries(data: bytes, where: str) -> list[EpochEntry]:
    """Entries of a file's content; ValueError naming ``where`` when it does not verify (count,
    CRC, numbers, ascending order). Lines that are not ``a-b`` are skipped and counted in the
    CRC, as Java's reader does."""
    lines = data.decode("utf-8", errors="strict").splitlines()
    if len(lines) < 2:
        raise ValueError(f"{where}: {len(lines)} lines, a header needs 2")
    expected, expected_crc = int(lines[0]), int(lines[1])
    if not 0 <= expected <= _ENTRIES_MAX:
        raise ValueError(f"{where}: {expected} entries is out of range")
    entries, body = [], "".join(line + "\n" for line in lines[2:]).encode()
    for line in lines[2:]:
        parts = line.split("-")
        if len(parts) == 2:
            entries.append(EpochEntry(int(parts[0]), int(parts[1])))
    if len(entries) != expected:
        raise ValueError(f"{where}: expected {expected} entries, found {len(entries)}")
    if expected_crc != _CRC_NOT_CHECKED and _crc(body) != expected_crc:
        raise ValueError(f"{where}: entries CRC {_crc(body)} does not match {expected_crc}")
    for previous, entry in zip(entries, entries[1:], strict=False):
        if entry.epoch <= previous.epoch or entry.start_offset < previous.start_offset:
            raise ValueError(f"{where}: entry {entry.epoch}-{entry.start_offset} does not "
                             f"follow {previous.epoch}-{previous.start_offset}")
        previous.end_offset = entry.start_offset
    return entries


def _read(path: str) -> tuple[bool, list[EpochEntry] | None, str]:
    """(exists, entries or None when unusable or empty, why)."""
    try:
        with open(path, "rb") as source:
            data = source.read()
    except FileNotFoundError:
        return False, None, "absent"
    try:
        entries = parse_entries(data, path)
    except (ValueError, UnicodeDecodeError) as error:
        return True, None, str(error)
    return True, (entries or None), "no entries"


class EpochFile:
    """The epoch entries of one store, kept in memory and persisted on every change.

    ``path`` is ``storePathEpochFile`` (default ``<storePathRootDir>/epochFileCheckpoint``).
    Loading raises :class:`StoreCorruptError` when the file or its backup exists but neither
    verifies: a controller-mode broker must not compare logs against a history it lost.
    """

    def __init__(self, path: str):
        self.path = path
        self.entries: list[EpochEntry] = []

    @classmethod
    def load(cls, path: str) -> "EpochFile":
        epochs = cls(path)
        problems: list[str] = []
        for candidate in (path, path + config_docs.BAK_SUFFIX):
            exists, entries, why = _read(candidate)
            if entries is not None:
                if problems:
                    log.warning("epoch file unusable (%s); loaded %s", problems[0], candidate)
                epochs.entries = entries
                return epochs
            if exists and why != "no entries":
                problems.append(f"{candidate}: {why}")
        if problems:
            raise StoreCorruptError("epoch file unusable: " + "; ".join(problems))
        return epochs

    # --- reads ----------------------------------------------------------------------------------
    def last_epoch(self) -> int:
        """The last entry's epoch, -1 when there is none."""
        return self.entries[-1].epoch if self.entries else -1

    def last(self) -> EpochEntry | None:
        return self.entries[-1] if self.entries else None

    def first(self) -> EpochEntry | None:
        return self.entries[0] if self.entries else None

    def get(self, epoch: int) -> EpochEntry | None:
        return next((entry for entry in self.entries if entry.epoch == epoch), None)

    def find_by_offset(self, offset: int) -> EpochEntry | None:
        """The entry whose [start, end) holds ``offset``."""
        return next((entry for entry in self.entries
                     if entry.start_offset <= offset < entry.end_offset), None)

    def next_after(self, epoch: int) -> EpochEntry | None:
        """The first entry with a higher epoch than ``epoch``."""
        return next((entry for entry in self.entries if entry.epoch > epoch), None)

    def copy_entries(self) -> list[EpochEntry]:
        return [dataclasses.replace(entry) for entry in self.entries]

    # --- changes (each persisted) ---------------------------------------------------------------
    def append(self, epoch: int, start_offset: int) -> bool:
        """Add ``(epoch, start_offset)`` after the last entry; False (nothing changes) when its
        epoch or start offset is not above the last entry's (Java's rule)."""
        last = self.last()
        if last is not None and (last.epoch >= epoch or last.start_offset >= start_offset):
            log.info("epoch entry %d-%d not appended after %d-%d", epoch, start_offset,
                     last.epoch, last.start_offset)
            return False
        if last is not None:
            last.end_offset = start_offset
        self.entries.append(EpochEntry(epoch, start_offset))
        self._persist()
        return True

    def truncate_suffix_by_epoch(self, epoch: int) -> None:
        """Remove the entries of ``epoch`` and later."""
        self._keep([entry for entry in self.entries if entry.epoch < epoch])

    def truncate_suffix_by_offset(self, offset: int) -> None:
        """Remove the entries that start at ``offset`` or later (the log was cut there)."""
        self._keep([entry for entry in self.entries if entry.start_offset < offset])

    def truncate_prefix_by_offset(self, offset: int) -> None:
        """Remove the entries that end at ``offset`` or before (their files were deleted)."""
        kept = [entry for entry in self.entries if entry.end_offset > offset]
        if len(kept) != len(self.entries):
            self.entries = kept
            self._persist()

    def _keep(self, kept: list[EpochEntry]) -> None:
        changed = len(kept) != len(self.entries)
        self.entries = kept
        if kept:
            kept[-1].end_offset = OPEN_END
        if changed:
            self._persist()

    def _persist(self) -> None:
        if self.entries:
            config_docs.save_file(self.path, format_entries(self.entries))
            return
        for path in (self.path, self.path + config_docs.BAK_SUFFIX):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        directory = os.open(os.path.dirname(os.path.abspath(self.path)), os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def consistent_point(local: list[EpochEntry], local_end: int, master: list[EpochEntry],
                     master_end: int) -> int:
    """Where a slave's log (``local`` entries, log end ``local_end``) stops agreeing with its
    master's (``master``, ``master_end``): from the slave's last epoch backwards, the first
    epoch both have with the same start offset; the point is the smaller of the two ends of
    that epoch. -1 when they share no epoch. (Java's ``EpochFileCache.findConsistentPoint``,
    with each list's last end set to its log end.)"""
    local_ends = _ends(local, local_end)
    master_ends = {entry.epoch: (entry.start_offset, end)
                   for entry, end in zip(master, _ends(master, master_end), strict=True)}
    for entry, end in reversed(list(zip(local, local_ends, strict=True))):
        theirs = master_ends.get(entry.epoch)
        if theirs is not None and theirs[0] == entry.start_offset:
            return min(end, theirs[1])
    return -1


def _ends(entries: list[EpochEntry], log_end: int) -> list[int]:
    ends = [entry.end_offset for entry in entries]
    if entries and entries[-1].start_offset <= log_end:
        ends[-1] = log_end
    return ends
