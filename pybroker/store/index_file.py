# IndexFile (hash index of message keys, protocol.md §4.5) and IndexService (the index/ directory of
# them).
"""Query-by-key index: RocketMQ's IndexFile byte layout and the service that rolls its files.

One IndexFile (protocol.md §4.5; positions from :mod:`pybroker.store.layout`)::

    header, 40 bytes
      0   8  beginTimestamp    store time of the first entry, ms
      8   8  endTimestamp      store time of the last entry, ms
     16   8  beginPhyOffset    commit-log offset of the first entry
     24   8  endPhyOffset      commit-log offset of the last entry
     32   4  hashSlotCount     slots in use
     36   4  indexCount        next entry number; starts at 1 (entry 0 = "none")
    slots, max_hash_slot_num x 4 bytes: newest entry number of the slot (0 = empty)
    entries, max_index_num x 20 bytes
      0   4  key hash          index_key_hash(key)
      4   8  phy offset        commit-log offset of the record
     12   4  time diff         seconds since beginTimestamp, clamped to [0, 2^31-1]
     16   4  prev entry        previous entry of the same slot (0 = end of chain)

Entry n lives at ``40 + 4 * slots + 20 * n``, slot s at ``40 + 4 * s``; slot = hash % slots.
The header is kept in the mapping itself (written on every put), so read-only mappings in other
processes see the writer's progress without a side channel.

Deviation from Java, on purpose: the first entry's time diff is measured from its own store time
(Java measures it from the seeded begin timestamp and then resets begin, which shifts that entry's
time by the seed gap); chains are followed only to strictly older entries, which makes a corrupt
file's cycle impossible to loop on.
"""
import logging
import os
import struct
import time

from pybroker._fast.jhash import index_key_hash
from pybroker.protocol import constants
from pybroker.store import layout
from pybroker.store.mapped_file import MappedFile

__all__ = ["IndexFile", "IndexService", "index_file_name"]

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
_SLOT = struct.Struct(">i")
assert _HEADER.size == layout.INDEX_HEADER_SIZE
assert _ENTRY.size == layout.INDEX_ENTRY_SIZE
assert _SLOT.size == layout.INDEX_HASH_SLOT_SIZE
_INT_MAX = 0x7FFFFFFF
_INDEX_FILE_NAME_DIGITS = 17
_EMPTY = 0   # slot value / prev link meaning "no entry"


def index_file_name(timestamp_ms: int) -> str:
    """17-digit local-time name (yyyyMMddHHmmssSSS) of an IndexFile created at ``timestamp_ms``."""
    seconds, millis = divmod(timestamp_ms, 1000)
    return time.strftime(layout.INDEX_FILE_NAME_FORMAT, time.localtime(seconds)) + f"{millis:03d}"


class IndexFile:
    """One fixed-size IndexFile mapped through :class:`MappedFile`.

    ``end_phy_offset`` / ``end_timestamp`` (ms) seed a new file's header from the previous file,
    as Java does when rolling. An existing file is loaded as it is.
    """

    def __init__(self, path: str, max_hash_slot_num: int, max_index_num: int,
                 end_phy_offset: int = 0, end_timestamp: int = 0, read_only: bool = False):
        if max_hash_slot_num <= 0 or max_index_num <= layout.INDEX_FIRST_ENTRY_NUMBER:
            raise ValueError(f"need max_hash_slot_num > 0 and max_index_num > 1, got "
                             f"{max_hash_slot_num}, {max_index_num}")
        self.max_hash_slot_num = max_hash_slot_num
        self.max_index_num = max_index_num
        self.file_size = layout.index_file_size(max_hash_slot_num, max_index_num)
        existed = os.path.exists(path)
        self.mapped_file = MappedFile(path, self.file_size, read_only)
        self.path = path
        self.file_name = os.path.basename(path)
        self._entries_position = (layout.INDEX_HEADER_SIZE
                                  + max_hash_slot_num * layout.INDEX_HASH_SLOT_SIZE)
        self._buffer = self.mapped_file.buffer()
        if not existed:
            self._write_header(end_timestamp, end_timestamp, end_phy_offset, end_phy_offset,
                               0, layout.INDEX_FIRST_ENTRY_NUMBER)

    # --- header ---------------------------------------------------------------------------
    def _header(self) -> tuple[int, int, int, int, int, int]:
        return _HEADER.unpack_from(self._buffer, 0)

    def _write_header(self, begin_timestamp: int, end_timestamp: int, begin_phy_offset: int,
                      end_phy_offset: int, hash_slot_count: int, index_count: int) -> None:
        _HEADER.pack_into(self._buffer, 0, begin_timestamp, end_timestamp, begin_phy_offset,
                          end_phy_offset, hash_slot_count, index_count)

    @property
    def begin_timestamp(self) -> int:
        """Store time of the first entry, ms (the seed for a fresh rolled file)."""
        return self._header()[0]

    @property
    def end_timestamp(self) -> int:
        """Store time of the last entry, ms."""
        return self._header()[1]

    @property
    def begin_phy_offset(self) -> int:
        return self._header()[2]

    @property
    def end_phy_offset(self) -> int:
        """Commit-log offset of the last indexed record (bytes)."""
        return self._header()[3]

    @property
    def hash_slot_count(self) -> int:
        return self._header()[4]

    @property
    def index_count(self) -> int:
        """Next entry number; a fresh file has 1 (Java treats <= 0 as 1)."""
        return max(self._header()[5], layout.INDEX_FIRST_ENTRY_NUMBER)

    def is_write_full(self) -> bool:
        return self.index_count >= self.max_index_num

    def entries_range(self) -> tuple[int, int]:
        """File positions of the entry area and of the end of the last entry written (puts
        write entries in order there; the hash slots before it take random writes)."""
        return (self._entries_position,
                self._entries_position + self.index_count * layout.INDEX_ENTRY_SIZE)

    def is_time_matched(self, begin_ms: int, end_ms: int) -> bool:
        """True when [begin_ms, end_ms] overlaps this file's [beginTimestamp, endTimestamp]."""
        begin_timestamp, end_timestamp = self._header()[:2]
        return ((begin_ms < begin_timestamp and end_ms > end_timestamp)
                or begin_timestamp <= begin_ms <= end_timestamp
                or begin_timestamp <= end_ms <= end_timestamp)

    # --- put / select ---------------------------------------------------------------------
    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Index ``key`` -> ``phy_offset`` (bytes) stored at ``store_timestamp`` (ms).

        Returns False, writing nothing, when the file is full.
        """
        (begin_timestamp, _, begin_phy_offset, _, hash_slot_count,
         index_count) = self._header()
        index_count = max(index_count, layout.INDEX_FIRST_ENTRY_NUMBER)
        if index_count >= self.max_index_num:
            return False
        key_hash = index_key_hash(key)
        slot_position = layout.INDEX_HEADER_SIZE + \
            (key_hash % self.max_hash_slot_num) * layout.INDEX_HASH_SLOT_SIZE
        slot_value = _SLOT.unpack_from(self._buffer, slot_position)[0]
        if slot_value <= _EMPTY or slot_value > index_count:
            slot_value = _EMPTY
        if index_count == layout.INDEX_FIRST_ENTRY_NUMBER:
            begin_timestamp, begin_phy_offset = store_timestamp, phy_offset
        time_diff_seconds = 0
        if begin_timestamp > 0:
            time_diff_seconds = min(max((store_timestamp - begin_timestamp) // 1000, 0), _INT_MAX)
        entry_position = self._entries_position + index_count * layout.INDEX_ENTRY_SIZE
        _ENTRY.pack_into(self._buffer, entry_position, key_hash, phy_offset,
                         time_diff_seconds, slot_value)
        # Publish order for concurrent readers: entry, then slot, then the header count.
        _SLOT.pack_into(self._buffer, slot_position, index_count)
        if slot_value == _EMPTY:
            hash_slot_count += 1
        self._write_header(begin_timestamp, store_timestamp, begin_phy_offset, phy_offset,
                           hash_slot_count, index_count + 1)
        return True

    def select(self, key: str, max_num: int, begin_ms: int, end_ms: int,
               results: list[int] | None = None) -> list[int]:
        """Commit-log offsets of entries for ``key`` stored in [begin_ms, end_ms], newest first.

        Appends to ``results`` (when given) until it holds ``max_num`` offsets. Entries with an
        equal hash but another key are included: the caller compares the keys.
        """
        if results is None:
            results = []
        begin_timestamp, index_count = self._header()[0], self.index_count
        key_hash = index_key_hash(key)
        slot_position = layout.INDEX_HEADER_SIZE + \
            (key_hash % self.max_hash_slot_num) * layout.INDEX_HASH_SLOT_SIZE
        entry_number = _SLOT.unpack_from(self._buffer, slot_position)[0]
        if entry_number <= _EMPTY or entry_number >= index_count:
            return results
        while len(results) < max_num:
            entry_position = self._entries_position + entry_number * layout.INDEX_ENTRY_SIZE
            hash_read, phy_offset, time_diff_seconds, prev_number = \
                _ENTRY.unpack_from(self._buffer, entry_position)
            if time_diff_seconds < 0:
                break
            time_read = begin_timestamp + time_diff_seconds * 1000
            if hash_read == key_hash and begin_ms <= time_read <= end_ms:
                results.append(phy_offset)
            if prev_number <= _EMPTY or prev_number >= entry_number or time_read < begin_ms:
                break
            entry_number = prev_number
        return results

    # --- life cycle -----------------------------------------------------------------------
    def flush(self) -> None:
        """msync the whole file (header, slots, entries); DurabilityError on failure."""
        # Puts write the header, random slots and the next entry in place, so the dirty range is
        # always within [0, end of the last entry): hand exactly that range to MappedFile.
        written_end = self.entries_range()[1]
        self.mapped_file.wrote_position = min(written_end, self.file_size)
        self.mapped_file.flushed_position = 0
        self.mapped_file.flush()

    def close(self) -> None:
        """Unmap; the file stays on disk."""
        self._buffer.release()
        self.mapped_file.close()

    def destroy(self) -> None:
        """Unmap and delete the file."""
        self._buffer.release()
        self.mapped_file.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class IndexService:
    """The ``index/`` directory: IndexFiles oldest to newest, the last one written.

    ``max_hash_slot_num`` / ``max_index_num`` default to Java's 5,000,000 / 20,000,000. The
    dispatcher is the only writer (design.md §2 rule 1); readers open with ``read_only=True`` and
    call :meth:`load` again to see files created since.
    """

    def __init__(self, index_dir: str, max_hash_slot_num: int = 5_000_000,
                 max_index_num: int = 20_000_000, read_only: bool = False):
        self.index_dir = index_dir
        self.max_hash_slot_num = max_hash_slot_num
        self.max_index_num = max_index_num
        self.read_only = read_only
        self.index_files: list[IndexFile] = []
        self.rebuilt = False       # load(repair=True) deleted damaged files

    def _open(self, name: str, end_phy_offset: int = 0, end_timestamp: int = 0) -> IndexFile:
        return IndexFile(os.path.join(self.index_dir, name), self.max_hash_slot_num,
                         self.max_index_num, end_phy_offset, end_timestamp, self.read_only)

    def load(self, repair: bool = False) -> bool:
        """Map every IndexFile of the directory, oldest first; False if one has the wrong size.

        ``repair``: instead, delete every IndexFile (logged; :attr:`rebuilt` is set) so that
        the caller rebuilds the index from the oldest CommitLog record."""
        self.close()
        try:
            names = sorted(n for n in os.listdir(self.index_dir)
                           if len(n) == _INDEX_FILE_NAME_DIGITS and n.isdigit())
        except FileNotFoundError:
            return True
        expected = layout.index_file_size(self.max_hash_slot_num, self.max_index_num)
        for name in names:
            size = os.path.getsize(os.path.join(self.index_dir, name))
            if size != expected:
                log.error("index file %s has %d bytes, expected %d%s", name, size, expected,
                          ": every index file is deleted, to be rebuilt from the CommitLog"
                          if repair else "")
                if not repair:
                    return False
                self.close()
                for other in names:
                    os.unlink(os.path.join(self.index_dir, other))
                self.rebuilt = True
                return True
            self.index_files.append(self._open(name))
        return True

    def delete_newer_than(self, timestamp_ms: int) -> int:
        """Abnormal recovery: delete files whose end timestamp (ms) is after the checkpoint's
        index timestamp; returns how many. The dispatcher re-indexes from the recovery point."""
        keep, deleted = [], 0
        for index_file in self.index_files:
            if index_file.end_timestamp > timestamp_ms:
                log.warning("deleting index file %s: ends at %d > checkpoint %d",
                            index_file.file_name, index_file.end_timestamp, timestamp_ms)
                index_file.destroy()
                deleted += 1
            else:
                keep.append(index_file)
        self.index_files = keep
        return deleted

    def writable_file(self) -> IndexFile:
        """The newest file with room, creating (rolling to) a new one when needed."""
        last = self.index_files[-1] if self.index_files else None
        if last is not None and not last.is_write_full():
            return last
        end_phy_offset = last.end_phy_offset if last is not None else 0
        end_timestamp = last.end_timestamp if last is not None else 0
        os.makedirs(self.index_dir, exist_ok=True)
        now_ms = time.time_ns() // 1_000_000
        name = index_file_name(now_ms)
        # Two files within one millisecond (tiny test files) or a clock step back: keep names
        # unique and in creation order, since the order of names is the order of files.
        while (last is not None and name <= last.file_name) or \
                os.path.exists(os.path.join(self.index_dir, name)):
            now_ms += 1
            name = index_file_name(now_ms)
        new_file = self._open(name, end_phy_offset, end_timestamp)
        self.index_files.append(new_file)
        if last is not None:
            last.flush()   # a full file is never written again: make it durable once
        return new_file

    def _put(self, index_file: IndexFile, key: str, phy_offset: int,
             store_timestamp: int) -> IndexFile:
        if index_file.put_key(key, phy_offset, store_timestamp):
            return index_file
        index_file = self.writable_file()
        if not index_file.put_key(key, phy_offset, store_timestamp):
            raise AssertionError(f"fresh index file {index_file.path} refused a key")
        return index_file

    def build_index(self, topic: str, keys: str | None, uniq_key: str | None, phy_offset: int,
                    store_timestamp: int, sys_flag: int = 0) -> int:
        """Index one dispatched record; returns the number of keys written.

        Keys are ``topic#uniq_key`` and ``topic#k`` for each non-empty space-separated entry of
        ``keys``. ROLLBACK records (by ``sys_flag``) and records already indexed are skipped:
        below the last file's endPhyOffset, or at it (endPhyOffset is the last indexed record's
        own offset; Java's ``<`` indexes it again on every re-dispatch). ``store_timestamp`` in
        ms.
        """
        if self.read_only:
            raise PermissionError(f"{self.index_dir}: read-only index service")
        index_file = self.writable_file()
        if already_indexed(phy_offset, index_file.end_phy_offset, index_file.index_count):
            return 0
        if constants.transaction_type(sys_flag) == \
                constants.MessageSysFlag.TRANSACTION_ROLLBACK_TYPE:
            return 0
        written = 0
        if uniq_key:
            index_file = self._put(index_file, f"{topic}#{uniq_key}", phy_offset,
                                   store_timestamp)
            written += 1
        for key in (keys or "").split(constants.KEY_SEPARATOR):
            if key:
                index_file = self._put(index_file, f"{topic}#{key}", phy_offset,
                                       store_timestamp)
                written += 1
        return written

    def query(self, topic: str, key: str, max_num: int, begin_ms: int,
              end_ms: int) -> tuple[list[int], int, int]:
        """Commit-log offsets for ``topic#key`` stored in [begin_ms, end_ms], newest first.

        Returns (phy_offsets, last_update_timestamp_ms, last_update_phy_offset), the last two
        from the newest file's header (RocketMQ's indexLastUpdate* response fields).
        """
        phy_offsets: list[int] = []
        last_update_timestamp = last_update_phy_offset = 0
        full_key = f"{topic}#{key}"
        for position, index_file in enumerate(reversed(self.index_files)):
            if position == 0:
                last_update_timestamp = index_file.end_timestamp
                last_update_phy_offset = index_file.end_phy_offset
            if index_file.is_time_matched(begin_ms, end_ms):
                index_file.select(full_key, max_num, begin_ms, end_ms, phy_offsets)
            if index_file.begin_timestamp < begin_ms or len(phy_offsets) >= max_num:
                break
        return phy_offsets, last_update_timestamp, last_update_phy_offset

    def delete_expired(self, commitlog_min_offset: int) -> int:
        """Delete files (never the newest) whose entries all point below ``commitlog_min_offset``
        (bytes): their records are gone from the CommitLog. Returns how many."""
        deleted = 0
        while len(self.index_files) > 1 and \
                self.index_files[0].end_phy_offset < commitlog_min_offset:
            self.index_files.pop(0).destroy()
            deleted += 1
        return deleted

    def flush(self) -> int:
        """msync the newest file; returns the index timestamp (ms) now durable, for the
        checkpoint's indexMsgTimestamp (0 when there is no file)."""
        if not self.index_files:
            return 0
        last = self.index_files[-1]
        last.flush()
        return last.end_timestamp

    def close(self) -> None:
        """Unmap every file."""
        for index_file in self.index_files:
            index_file.close()
        self.index_files = []

    def destroy(self) -> None:
        """Delete every file."""
        for index_file in self.index_files:
            index_file.destroy()
        self.index_files = []


def already_indexed(phy_offset: int, end_phy_offset: int, index_count: int) -> bool:
    """A record at ``phy_offset`` is in the index whose last file says ``end_phy_offset`` (the
    last indexed record's offset, carried over to a new file) and ``index_count``: below it,
    or at it once anything was indexed (a fresh index's end 0 has indexed nothing). The C
    reput (``_fast/dispatch.pyx``) applies the same rule; test_dispatch_scanner keeps them
    equal."""
    if phy_offset != end_phy_offset:
        return phy_offset < end_phy_offset
    return end_phy_offset > 0 or index_count > layout.INDEX_FIRST_ENTRY_NUMBER
