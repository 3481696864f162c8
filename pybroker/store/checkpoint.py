# The store checkpoint file: one mapped 4096-byte page of flush timestamps and offsets (protocol.md
# §4.6).
"""StoreCheckpoint: the recovery point of abnormal recovery.

Layout (big-endian longs, the rest of the page zero; offsets from :mod:`pybroker.store.layout`)::

    off  size  field
      0     8  physicMsgTimestamp     store time (ms) of the last flushed CommitLog record
      8     8  logicsMsgTimestamp     store time (ms) of the last flushed ConsumeQueue entry
     16     8  indexMsgTimestamp      store time (ms) covered by the last flushed IndexFile
     24     8  masterFlushedOffset    5.x
     32     8  confirmPhyOffset       5.x

Only the flusher writes it (design.md §2 rule 1). The fields are Python attributes; :meth:`flush`
stores all of them into the page and msyncs it, raising DurabilityError on failure; :meth:`save`
stores them after every CommitLog flush and msyncs only every ``sync_interval_ms``, as Java's
store sets the checkpoint after each group commit and flushes it with the consume queues'
thorough flush. A checkpoint on disk older than the page is always safe: every field is set
after the flush it describes, so whatever the disk holds never claims more than was flushed,
and abnormal recovery from an older point only scans further back.

The flushed offset is recovery's proof of the end of the CommitLog
(:mod:`pybroker.store.recovery`): every byte below it was flushed before the page said so, so
the data must reach at least that far after any crash. The stamp tells a page pybroker stored
(``stamp_state`` "stamped") from one written by Java or an older pybroker ("unstamped": both
words zero) and from a page damaged or rewritten since ("mismatch"); only a stamped page's
offset counts (:meth:`flushed_end`).
"""
import os
import struct
import zlib

from pybroker.store import layout
from pybroker.store.mapped_file import MappedFile

_LONG = struct.Struct(">q")
_FIELDS = (
    ("physic_msg_timestamp", layout.CHECKPOINT_PHYSIC_MSG_TIMESTAMP_POSITION),
    ("logics_msg_timestamp", layout.CHECKPOINT_LOGICS_MSG_TIMESTAMP_POSITION),
    ("index_msg_timestamp", layout.CHECKPOINT_INDEX_MSG_TIMESTAMP_POSITION),
    ("master_flushed_offset", layout.CHECKPOINT_MASTER_FLUSHED_OFFSET_POSITION),
    ("confirm_phy_offset", layout.CHECKPOINT_CONFIRM_PHY_OFFSET_POSITION),
    ("commitlog_flushed_offset", layout.CHECKPOINT_COMMITLOG_FLUSHED_OFFSET_POSITION),
)
_FIELDS_END = max(position for _, position in _FIELDS) + _LONG.size
assert _FIELDS_END == layout.CHECKPOINT_STAMP_POSITION
assert layout.CHECKPOINT_STAMP_POSITION + _LONG.size <= layout.CHECKPOINT_FILE_SIZE
STAMPED, UNSTAMPED, MISMATCH = "stamped", "unstamped", "mismatch"


def _stamp(fields: bytes) -> int:
    return layout.CHECKPOINT_STAMP_MARKER << 32 | zlib.crc32(fields)


class StoreCheckpoint:
    """The checkpoint file at ``path`` (created zeroed when absent unless ``read_only``).

    Attributes (all int): ``physic_msg_timestamp``, ``logics_msg_timestamp``,
    ``index_msg_timestamp`` (ms since the epoch), ``master_flushed_offset``,
    ``confirm_phy_offset`` and ``commitlog_flushed_offset`` (CommitLog physical offsets,
    bytes); ``stamp_state`` (STAMPED, UNSTAMPED or MISMATCH) as last read from the page.
    """

    def __init__(self, path: str, read_only: bool = False, sync_interval_ms: int = 0,
                 now_ms: int = 0):
        self.path = path
        self.sync_interval_ms = sync_interval_ms
        self.synced_ms = now_ms
        existed = os.path.exists(path)
        self._file = MappedFile(path, layout.CHECKPOINT_FILE_SIZE, read_only,
                                file_from_offset=0, allocation="zero_fill")
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        self.master_flushed_offset = 0
        self.confirm_phy_offset = 0
        self.commitlog_flushed_offset = 0
        self.stamp_state = UNSTAMPED
        if existed:
            self.reload()

    def reload(self) -> None:
        """Re-read every field and the stamp from the page (readers in other processes)."""
        page = self._file.buffer()
        try:
            for name, position in _FIELDS:
                setattr(self, name, _LONG.unpack_from(page, position)[0])
            stamp = _LONG.unpack_from(page, layout.CHECKPOINT_STAMP_POSITION)[0] & (2**64 - 1)
            fields = bytes(page[:_FIELDS_END])
        finally:
            page.release()
        if stamp == 0 and self.commitlog_flushed_offset == 0:
            self.stamp_state = UNSTAMPED
        else:
            self.stamp_state = STAMPED if stamp == _stamp(fields) else MISMATCH

    def flushed_end(self) -> int | None:
        """The CommitLog offset (bytes) known flushed when the page was stored by pybroker,
        or None when the page does not vouch for it (unstamped or mismatched)."""
        return self.commitlog_flushed_offset if self.stamp_state == STAMPED else None

    def flush(self, stamped: bool = True) -> None:
        """Store every field into the page and msync it (raises DurabilityError on failure).
        ``stamped`` False stores a page that vouches for no flushed offset (both words 0)."""
        self._store(stamped)
        self._file.flush()

    def save(self, now_ms: int) -> bool:
        """Store every field into the page; msync it when ``sync_interval_ms`` has passed since
        the last msync (``now_ms``: the caller's clock). True when it msynced."""
        if now_ms < self.synced_ms + self.sync_interval_ms:
            self._store()
            return False
        self.flush()
        self.synced_ms = now_ms
        return True

    def _store(self, stamped: bool = True) -> None:
        if not stamped:
            self.commitlog_flushed_offset = 0
        packed = b"".join(_LONG.pack(getattr(self, name)) for name, _ in _FIELDS)
        stamp = _stamp(packed) if stamped else 0
        self._file.write_at(0, packed + stamp.to_bytes(_LONG.size, "big"))
        self.stamp_state = STAMPED if stamped else UNSTAMPED

    def min_timestamp(self) -> int:
        """Abnormal-recovery point: min(physic, logics) - 3000 ms, never below 0 (ms)."""
        earliest = min(self.physic_msg_timestamp, self.logics_msg_timestamp)
        return max(earliest - layout.CHECKPOINT_RECOVERY_SAFETY_MS, 0)

    def min_timestamp_index(self) -> int:
        """Recovery point when ``messageIndexSafe``: also no later than the index time (ms)."""
        return min(self.min_timestamp(), self.index_msg_timestamp)

    def recovery_point_ms(self, message_index_safe: bool = False) -> int:
        """The store time (ms) abnormal recovery rewinds to."""
        return self.min_timestamp_index() if message_index_safe else self.min_timestamp()

    def close(self) -> None:
        """Unmap the page without storing anything (a store that refused to load)."""
        self._file.close()

    def shutdown(self) -> None:
        """Flush (when writable) and close the page."""
        if not self._file.read_only:
            self.flush()
        self._file.close()
