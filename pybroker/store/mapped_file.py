# MappedFile and MappedFileQueue: fixed-size memory-mapped store files (RocketMQ's MappedFile).
"""Memory-mapped store files with hold/release counting, and ordered queues of them.

A :class:`MappedFile` is one fixed-size file mapped whole, read-write for its single writer or
read-only for everyone else. A :class:`MappedFileQueue` is the ordered list of such files in one
directory whose names are the 20-digit global offsets of their first byte (``commitlog/``,
``consumequeue/<topic>/<queue_id>/``).

Views pin maps. Python refuses to close an ``mmap`` while a ``memoryview`` of it exists, so every
file carries a hold count (RocketMQ's ReferenceResource): :meth:`MappedFile.view` and
:meth:`MappedFile.hold` take a hold, :meth:`MappedFile.release` drops it, and the map is closed
only once the count reaches zero after :meth:`MappedFile.shutdown`/:meth:`MappedFile.destroy`.
When ``interval_forcibly_ms`` has passed since shutdown began, the holds are ignored ("forced"):
the file is then unlinked and its descriptor closed, but if memoryviews of it are still alive the
mapping itself is NOT unmapped; we drop our reference and the kernel mapping goes away when the
last view is garbage collected. Readers that kept a view therefore keep reading valid (stale)
bytes of the unlinked inode: there is never a SIGBUS and never a dangling pointer.

Durability: :meth:`MappedFile.flush` calls ``mmap.flush(offset, size)``, i.e. ``msync(MS_SYNC)``
on the page-aligned dirty range. On Linux that is ``vfs_fsync_range(datasync=1)`` over the range,
the same guarantee as ``fdatasync`` for those bytes. Errors raise
:class:`~pybroker.errors.DurabilityError`; they are never swallowed.

Creation: a new file is allocated under a temporary name and linked into place, so a crash never
leaves a short file with a store name. ``allocation`` chooses how: ``"sparse"`` (ftruncate only,
the default, as Java's ``RandomAccessFile.setLength``: a new 1 GiB CommitLog costs no disk until
written), ``"fallocate"`` (posix_fallocate: blocks reserved, so a full disk fails here and not as
SIGBUS later) or ``"zero_fill"`` (real writes of zeros: design.md §6 measured fdatasync on
pre-written files about 2x faster than on fresh ones).

Page faults: the first store into a fresh page of a file mapping allocates a page-cache page (and,
in a sparse file, reserves its block): 3.0 µs per 4 KiB page on a fallocated file and 3.5 µs on a
sparse one on this ext4 box. :meth:`MappedFile.prefault` does that work ahead of the writer without
touching the data (``MADV_POPULATE_WRITE``); called from another process (the flusher) it leaves
the writer only a minor fault, 1.5 µs per page (tools: docs/architecture/store-files.md).
"""
import errno
import logging
import mmap
import os
import resource
import threading
import time
from collections.abc import Callable

import numpy as np

from pybroker import clock
from pybroker._fast import pagecache
from pybroker.errors import DurabilityError, StoreCorruptError
from pybroker.store import layout

log = logging.getLogger("pybroker.store.mapped_file")

PAGE_SIZE_BYTES = mmap.PAGESIZE
ALLOCATIONS = ("sparse", "fallocate", "zero_fill")
DEFAULT_ALLOCATION = "sparse"
_ZERO_FILL_CHUNK_BYTES = 1 << 20
_ZERO_CHUNK = bytes(_ZERO_FILL_CHUNK_BYTES)
# Java deletes at most this many expired files per cleanup pass.
DELETE_FILES_BATCH_MAX = 10
# A force-released hold count is pushed this far below zero so late release() calls stay < 0.
_FORCED_HOLD_COUNT = -1000


def thread_faults() -> int:
    """Page faults (minor + major) the calling thread has taken so far (one system call)."""
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_minflt + usage.ru_majflt


def offset_file_name(offset: int) -> str:
    """The 20-digit zero-padded file name of a file starting at global ``offset`` (bytes)."""
    if offset < 0:
        raise ValueError(f"file offset must be >= 0, got {offset}")
    return str(offset).zfill(layout.OFFSET_FILE_NAME_DIGITS)


def is_offset_file_name(name: str) -> bool:
    """True for names that are exactly OFFSET_FILE_NAME_DIGITS decimal digits."""
    return len(name) == layout.OFFSET_FILE_NAME_DIGITS and name.isdigit()


def _create_file(path: str, file_size: int, allocation: str) -> None:
    """Create ``path`` with ``file_size`` bytes allocated, atomically (tmp + link): the
    first creator wins and a file another process created meanwhile is kept (the writer
    and the allocator ahead of it, pybroker/store/allocate.py, may race for one name)."""
    if allocation not in ALLOCATIONS:
        raise ValueError(f"allocation must be one of {ALLOCATIONS}, got {allocation!r}")
    tmp_path = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if allocation == "zero_fill":
            written = 0
            while written < file_size:
                chunk = min(_ZERO_FILL_CHUNK_BYTES, file_size - written)
                written += os.pwrite(fd, _ZERO_CHUNK[:chunk], written)
            os.fdatasync(fd)
        elif allocation == "fallocate":
            os.posix_fallocate(fd, 0, file_size)
        os.ftruncate(fd, file_size)
    finally:
        os.close(fd)
    try:
        os.link(tmp_path, path)      # never replaces: a mapped file keeps its inode
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp_path)


class MappedFile:
    """One fixed-size store file mapped read-write (or read-only), RocketMQ's MappedFile.

    Parameters
    ----------
    path : str
        File path. Created (atomically, at full size) when absent unless ``read_only``.
    file_size : int
        Size of the file and of the mapping, bytes.
    read_only : bool
        Map with ``PROT_READ`` only (every process but the file's single writer).
    file_from_offset : int, optional
        Global offset of the first byte. Default: the file name when it is a 20-digit offset
        name, else 0.
    allocation : str
        How a new file is allocated: ``"sparse"``, ``"fallocate"`` or ``"zero_fill"``.

    ``wrote_position`` and ``flushed_position`` are file positions (bytes from the file start).
    A freshly constructed file has both at 0; :meth:`MappedFileQueue.load` sets them to the file
    size until recovery tells the truth.
    """

    def __init__(self, path: str, file_size: int, read_only: bool = False,
                 file_from_offset: int | None = None, *,
                 allocation: str = DEFAULT_ALLOCATION):
        if file_size <= 0:
            raise ValueError(f"file_size must be > 0, got {file_size}")
        self.path = path
        self.file_name = os.path.basename(path)
        if file_from_offset is None:
            file_from_offset = int(self.file_name) if is_offset_file_name(self.file_name) else 0
        self.file_from_offset = file_from_offset
        self.file_size = file_size
        self.read_only = read_only
        self.wrote_position = 0
        self.flushed_position = 0
        # transientStorePoolEnable (store/transient_pool.py): while a pool buffer is attached,
        # appends go to it and commit() writes [committed_position, wrote_position) to the file.
        self.write_buffer: mmap.mmap | None = None
        self.committed_position = 0
        self._commit_fd = -1
        # Range written by write_at() (anywhere in the file) since the last flush.
        self._dirty_low = file_size
        self._dirty_high = 0
        self._hold_lock = threading.Lock()
        self._hold_count = 1           # the file's own reference, dropped by shutdown()
        self._available = True
        self._cleanup_over = False
        self._shutdown_started_ms = 0
        self._unlink_on_cleanup = False
        self._map, self._view = self._open_map(allocation)

    def _open_map(self, allocation: str):
        if not os.path.exists(self.path):
            if self.read_only:
                raise FileNotFoundError(self.path)
            _create_file(self.path, self.file_size, allocation)
        fd = os.open(self.path, os.O_RDONLY if self.read_only else os.O_RDWR)
        try:
            actual_size = os.fstat(fd).st_size
            if actual_size > self.file_size or (self.read_only and actual_size < self.file_size):
                raise StoreCorruptError(
                    f"{self.path}: size {actual_size} bytes, expected {self.file_size}")
            if actual_size < self.file_size:
                os.ftruncate(fd, self.file_size)   # extend; existing bytes are kept
            access = mmap.ACCESS_READ if self.read_only else mmap.ACCESS_WRITE
            mapping = mmap.mmap(fd, self.file_size, access=access)
        finally:
            os.close(fd)   # the mapping keeps the file alive
        return mapping, memoryview(mapping)

    def __repr__(self) -> str:
        return (f"MappedFile({self.path!r}, wrote={self.wrote_position}, "
                f"flushed={self.flushed_position}, holds={self._hold_count})")

    # --- access ------------------------------------------------------------------------------
    def buffer(self) -> memoryview:
        """The whole mapping as a new memoryview; hold()/release() around its use."""
        if self._view is None:
            raise ValueError(f"{self.path} is closed")
        return memoryview(self._view)

    def write_target(self) -> memoryview:
        """Where appends go: the attached pool buffer, else the mapping (a new memoryview)."""
        if self.write_buffer is not None:
            return memoryview(self.write_buffer)
        return self.buffer()

    def append(self, data) -> bool:
        """Copy ``data`` (any buffer) at ``wrote_position``; False (nothing written) if no room."""
        size = memoryview(data).nbytes
        position = self.wrote_position
        if position + size > self.file_size:
            return False
        (self.write_buffer if self.write_buffer is not None else self._map)[
            position:position + size] = data
        self.wrote_position = position + size
        return True

    def write_at(self, file_position: int, data) -> None:
        """Copy ``data`` at ``file_position`` (bytes); does not move ``wrote_position``.

        The range is remembered and included in the next :meth:`flush`.
        """
        size = memoryview(data).nbytes
        if file_position < 0 or file_position + size > self.file_size:
            raise ValueError(f"{self.path}: write of {size} bytes at {file_position} "
                             f"outside file of {self.file_size} bytes")
        if self.write_buffer is not None:
            # Pool mode: only bytes at or past the committed position can still change.
            if file_position < self.committed_position:
                raise ValueError(f"{self.path}: write at {file_position} below the committed "
                                 f"position {self.committed_position}")
            self.write_buffer[file_position:file_position + size] = data
            return
        self._map[file_position:file_position + size] = data
        self._dirty_low = min(self._dirty_low, file_position)
        self._dirty_high = max(self._dirty_high, file_position + size)

    def remaining(self) -> int:
        """Bytes left after ``wrote_position``."""
        return self.file_size - self.wrote_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def view(self, file_position: int, size: int) -> memoryview | None:
        """Slice ``[file_position, file_position + size)`` of the written data, holding the file.

        Returns None (and holds nothing) when the range is not inside ``[0, wrote_position)`` or
        the file is shutting down. Otherwise the caller must call :meth:`release` once done and
        should ``release()`` the memoryview itself too, so the map can close promptly.
        """
        if file_position < 0 or size < 0 or file_position + size > self.wrote_position:
            return None
        if not self.hold():
            return None
        return self._view[file_position:file_position + size]

    def views(self, positions: list[int], sizes: list[int]) -> list[memoryview] | None:
        """Slices at each ``(positions[i], sizes[i])`` under ONE hold (one :meth:`release`
        for all of them); the caller has checked every range lies in ``[0, wrote_position)``.
        None (and no hold) when the file is shutting down."""
        if not self.hold():
            return None
        view = self._view
        return [view[position:position + size]
                for position, size in zip(positions, sizes, strict=True)]

    # --- hold counting (RocketMQ ReferenceResource) --------------------------------------------
    def hold(self) -> bool:
        """Take a hold on the map; False once shutdown/destroy started."""
        with self._hold_lock:
            if not self._available or self._hold_count <= 0:
                return False
            self._hold_count += 1
            return True

    def release(self) -> None:
        """Drop a hold; the map closes when the count reaches zero after shutdown."""
        with self._hold_lock:
            self._hold_count -= 1
            if self._hold_count > 0:
                return
        self._cleanup()

    @property
    def hold_count(self) -> int:
        """Current holds (1 is the file's own reference while available)."""
        return self._hold_count

    def _cleanup(self) -> None:
        if self._available or self._cleanup_over:
            return
        view, mapping = self._view, self._map
        self._view = None
        self._map = None
        if view is not None:
            view.release()
        if mapping is not None:
            try:
                mapping.close()
            except BufferError:
                # A forced close with views still alive: leave the mapping to the garbage
                # collector (it unmaps when the last view dies), never unmap under a reader.
                log.warning("%s: closed with live views; unmapped when they are released",
                            self.path)
        self._cleanup_over = True
        self.detach_write_buffer()
        if self._unlink_on_cleanup:
            self._unlink()

    def _unlink(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def shutdown(self, interval_forcibly_ms: int) -> None:
        """Stop new holds; close when released, or force after ``interval_forcibly_ms``."""
        if self._available:
            self._available = False
            self._shutdown_started_ms = clock.now_ms()
            self.release()
            return
        with self._hold_lock:
            forced = (self._hold_count > 0
                      and clock.now_ms() - self._shutdown_started_ms >= interval_forcibly_ms)
            if forced:
                self._hold_count = _FORCED_HOLD_COUNT - self._hold_count
        if forced:
            log.warning("%s: forcing close after %d ms with holds", self.path,
                        interval_forcibly_ms)
            self._cleanup()

    @property
    def cleanup_over(self) -> bool:
        """True once the map is closed (or abandoned to live views after a forced close)."""
        return self._cleanup_over

    # --- durability ----------------------------------------------------------------------------
    def _dirty_range(self) -> tuple[int, int]:
        low = min(self.flushed_position, self._dirty_low)
        high = max(self.wrote_position, self._dirty_high)
        return low, high

    def _able_to_flush(self, least_pages: int) -> bool:
        low, high = self._dirty_range()
        if high <= low:
            return False
        if self.is_full() or least_pages <= 0:
            return True
        return high // PAGE_SIZE_BYTES - low // PAGE_SIZE_BYTES >= least_pages

    def flush(self, least_pages: int = 0) -> int:
        """msync(MS_SYNC) the dirty page range; returns ``flushed_position`` (bytes).

        With ``least_pages`` > 0 nothing is synced until at least that many pages are dirty
        (or the file is full). Raises DurabilityError when msync fails.
        """
        if not self._able_to_flush(least_pages) or not self.hold():
            return self.flushed_position
        try:
            wrote = self.wrote_position
            low, high = self._dirty_range()
            start = low - low % PAGE_SIZE_BYTES
            try:
                self._map.flush(start, high - start)
            except (OSError, ValueError) as exc:
                raise DurabilityError(f"msync of {self.path} [{start}, {high}) failed: {exc}") \
                    from exc
            self.flushed_position = wrote
            self._dirty_low, self._dirty_high = self.file_size, 0
        finally:
            self.release()
        return self.flushed_position

    # --- transient store pool --------------------------------------------------------------
    def attach_write_buffer(self, buffer: mmap.mmap) -> None:
        """Append into ``buffer`` (a pool buffer of ``file_size`` bytes) from now on; the
        bytes below ``wrote_position`` are in the file already (committed)."""
        if self.read_only or self.write_buffer is not None:
            raise ValueError(f"{self.path}: cannot take a pool buffer")
        self._commit_fd = os.open(self.path, os.O_WRONLY)
        self.write_buffer = buffer
        self.committed_position = self.wrote_position

    def detach_write_buffer(self) -> mmap.mmap | None:
        """Give the pool buffer back (the caller commits first); None when none attached."""
        buffer, self.write_buffer = self.write_buffer, None
        if self._commit_fd >= 0:
            os.close(self._commit_fd)
            self._commit_fd = -1
        return buffer

    def able_to_commit(self, least_pages: int) -> bool:
        """Java's MappedFile.isAbleToCommit: a full file, or ``least_pages`` pages written
        past the committed position (any byte when ``least_pages`` <= 0)."""
        committed, wrote = self.committed_position, self.wrote_position
        if self.write_buffer is None or wrote <= committed:
            return False
        if self.is_full() or least_pages <= 0:
            return True
        return wrote // PAGE_SIZE_BYTES - committed // PAGE_SIZE_BYTES >= least_pages

    def commit(self, least_pages: int = 0) -> int:
        """Write the pool buffer's new bytes to the file (pwrite, not through the mapping);
        returns the committed position (``wrote_position`` when no buffer is attached).
        Raises DurabilityError when the write fails (nothing is reported committed then)."""
        if self.write_buffer is None:
            return self.wrote_position
        if self.able_to_commit(least_pages):
            start, end = self.committed_position, self.wrote_position
            source = memoryview(self.write_buffer)
            try:
                while start < end:
                    start += os.pwrite(self._commit_fd, source[start:end], start)
            except OSError as exc:
                raise DurabilityError(f"commit of {self.path} [{start}, {end}) failed: "
                                      f"{exc}") from exc
            finally:
                source.release()
            self.committed_position = end
        return self.committed_position

    def last_modified_ms(self) -> int:
        """File modification time, ms since the epoch (0 when the file is gone)."""
        try:
            return os.stat(self.path).st_mtime_ns // 1_000_000
        except FileNotFoundError:
            return 0

    def destroy(self, interval_forcibly_ms: int) -> bool:
        """Shut down and delete the file; False while holds remain (before the forced interval).

        The file is also unlinked as soon as the last hold is released; call again later to
        force: after ``interval_forcibly_ms`` holds are ignored (see the module docstring for
        what live views then see).
        """
        self._unlink_on_cleanup = True
        self.shutdown(interval_forcibly_ms)
        if not self._cleanup_over:
            return False
        self._unlink()
        return True

    def close(self) -> None:
        """Close the map now; raises BufferError if memoryviews of it are still alive."""
        self._available = False
        view, mapping = self._view, self._map
        if mapping is None:
            return
        if view is not None:
            view.release()
        self._view = None
        mapping.close()      # BufferError here means a caller still holds a view
        self._map = None
        self._cleanup_over = True

    def warm(self, from_position: int = 0) -> None:
        """Pre-fault pages from ``from_position`` to the end ahead of the writer.

        Read-write files get one zero byte stored per page beyond ``wrote_position`` (those bytes
        are zero already, so this only faults the page in); read-only files get MADV_WILLNEED.
        """
        start = max(from_position, 0)
        if self._map is None or start >= self.file_size:
            return
        aligned = start - start % PAGE_SIZE_BYTES
        self._map.madvise(mmap.MADV_WILLNEED, aligned, self.file_size - aligned)
        if self.read_only:
            return
        first = max(start, self.wrote_position, self._dirty_high)
        first += -first % PAGE_SIZE_BYTES
        mapping = self._map
        for position in range(first, self.file_size, PAGE_SIZE_BYTES):
            mapping[position] = 0

    def prefault(self, file_position: int, end_position: int) -> int:
        """Fault ``[file_position, end_position)`` in writable without changing a byte.

        For the writer's helpers (another process mapping the same file read-write): the page
        cache pages get allocated and, in a sparse file, their blocks reserved, so the writer's
        own first store into them is a minor fault. Safe while the writer is writing there
        (``MADV_POPULATE_WRITE`` stores nothing). Returns 0, or the errno of a refusal:
        ``EINVAL`` when the kernel lacks the call (before 5.14), ``EFAULT``/``ENOMEM`` when the
        pages cannot be had (no room on disk for the blocks: the writer would take SIGBUS).
        """
        end_position = min(end_position, self.file_size)
        if self._map is None or self.read_only or file_position >= end_position:
            return 0
        start = max(file_position, 0)
        # The GIL is released meanwhile: the allocator warms in a thread of the flusher.
        return pagecache.populate(self._map, start, end_position)

    def drop_pages(self, file_position: int, end_position: int) -> None:
        """Take the whole pages of ``[file_position, end_position)`` out of THIS process's page
        tables (``MADV_DONTNEED``). The file is mapped shared, so nothing is lost: a dirty page
        stays dirty in the page cache (msync and writeback still write it) and a later access
        maps it again from the page cache. OSError when the kernel refuses (locked pages)."""
        end_position = min(end_position, self.file_size)
        start = file_position - file_position % PAGE_SIZE_BYTES
        end = end_position - end_position % PAGE_SIZE_BYTES
        if self._map is None or start >= end:
            return
        self._map.madvise(mmap.MADV_DONTNEED, start, end - start)

    def lock_pages(self) -> int:
        """mlock the whole mapping (pages stay in the page cache while this process maps
        them); 0, or the errno of the refusal (not permitted, over RLIMIT_MEMLOCK)."""
        if self._map is None:
            return errno.EBADF
        return pagecache.lock(self._map, 0, self.file_size)

    def unlock_pages(self) -> int:
        """munlock the whole mapping; 0 or an errno."""
        if self._map is None:
            return 0
        return pagecache.unlock(self._map, 0, self.file_size)

    def sync_range(self, file_position: int, end_position: int) -> None:
        """msync ``[file_position, end_position)`` with the GIL released; DurabilityError
        on failure."""
        if self._map is None:
            raise DurabilityError(f"{self.path} is closed")
        refusal = pagecache.sync(self._map, file_position, min(end_position, self.file_size))
        if refusal:
            raise DurabilityError(f"msync of {self.path} failed: {os.strerror(refusal)}")

    def zero_range(self, file_position: int, end_position: int) -> None:
        """Zero ``[file_position, end_position)`` writing only chunks that are not zero already.

        Used to truncate dirty tails without dirtying (and allocating) untouched pages.
        """
        end_position = min(end_position, self.file_size)
        chunk = _ZERO_FILL_CHUNK_BYTES
        position = max(file_position, 0)
        while position < end_position:
            stop = min(position - position % chunk + chunk, end_position)
            if np.frombuffer(self._map, np.uint8, stop - position, position).any():
                self.write_at(position, _ZERO_CHUNK[:stop - position])
            position = stop


class MappedFileQueue:
    """Ordered list of MappedFiles of one directory whose names are 20-digit start offsets.

    Offsets taken and returned here are global (file base + file position), in bytes.
    ``flushed_where`` is the global offset known durable.
    """

    def __init__(self, store_path: str, mapped_file_size: int, read_only: bool = False, *,
                 allocation: str = DEFAULT_ALLOCATION, warm: bool = False,
                 on_create: Callable[[MappedFile, bool, int, int], None] | None = None):
        if mapped_file_size <= 0:
            raise ValueError(f"mapped_file_size must be > 0, got {mapped_file_size}")
        self.store_path = store_path
        self.mapped_file_size = mapped_file_size
        self.read_only = read_only
        self.allocation = allocation
        # warmMapedFileEnable: every new file is faulted in whole when created (MappedFile.warm).
        self.warm = warm
        # Told (file, created, elapsed ns, page faults) after each file this queue creates
        # or maps (created False: another process made it) on the write path.
        self.on_create = on_create
        self.mapped_files: list[MappedFile] = []
        self.flushed_where = 0
        # transientStorePoolEnable: global offset written to the file from the pool buffers.
        self.committed_where = 0

    def _file_names(self) -> list[str]:
        try:
            names = os.listdir(self.store_path)
        except FileNotFoundError:
            return []
        return sorted(n for n in names if is_offset_file_name(n))

    def _map_file(self, name: str) -> MappedFile | None:
        path = os.path.join(self.store_path, name)
        if os.path.getsize(path) != self.mapped_file_size:
            log.error("%s: size %d bytes differs from the configured %d; not loading", path,
                      os.path.getsize(path), self.mapped_file_size)
            return None
        mapped_file = MappedFile(path, self.mapped_file_size, self.read_only)
        # Until recovery says otherwise, everything mapped counts as written and durable.
        mapped_file.wrote_position = self.mapped_file_size
        mapped_file.flushed_position = self.mapped_file_size
        return mapped_file

    def load(self) -> bool:
        """Map existing files in name order; False if a file has the wrong size."""
        for name in self._file_names():
            try:
                mapped_file = self._map_file(name)
            except FileNotFoundError:
                if not self.read_only:
                    raise
                continue     # the writer's cleanup deleted it since the listing
            if mapped_file is None:
                return False
            self.mapped_files.append(mapped_file)
        return True

    def forget_files_below(self, offset: int) -> int:
        """Reader side: drop the files that end at or below global ``offset`` (bytes), which
        another process's cleanup deleted; returns how many. A held file closes when its last
        hold is released (its map stays valid until then: the file is unlinked, not cut)."""
        size = self.mapped_file_size
        gone = [f for f in self.mapped_files if f.file_from_offset + size <= offset]
        for mapped_file in gone:
            mapped_file.shutdown(0)
        if gone:
            self.mapped_files = self.mapped_files[len(gone):]
        return len(gone)

    def forget_files_beyond(self, offset: int) -> int:
        """Unmap (never delete) the files that begin after global ``offset``. Writer side, at
        start, ``offset`` the end of the data: files the allocator made ready ahead of the
        writer, so the next append goes at ``offset`` and not at the start of the last ready
        file; they are mapped again when the writer reaches them. Reader side: files past the
        one a reader's position is in (``refresh`` maps them again). Returns how many."""
        beyond = [f for f in self.mapped_files if f.file_from_offset > offset]
        for mapped_file in beyond:
            mapped_file.shutdown(0)
        if beyond:
            self.mapped_files = self.mapped_files[:len(self.mapped_files) - len(beyond)]
        return len(beyond)

    def refresh(self) -> int:
        """Reader side: map files created by the writer since load(); returns how many."""
        last_base = self.mapped_files[-1].file_from_offset if self.mapped_files else -1
        added = 0
        for name in self._file_names():
            if int(name) > last_base:
                mapped_file = self._map_file(name)
                if mapped_file is None:
                    break
                self.mapped_files.append(mapped_file)
                added += 1
        return added

    def last_mapped_file(self, start_offset: int = 0,
                         need_create: bool = True) -> MappedFile | None:
        """The last file; if none or full and ``need_create``, create the next one.

        The next file's base is the previous base + file size, or ``start_offset`` rounded down
        to a file boundary when the queue is empty.
        """
        last = self.mapped_files[-1] if self.mapped_files else None
        if not need_create or (last is not None and not last.is_full()):
            return last
        if last is None:
            create_offset = start_offset - start_offset % self.mapped_file_size
        else:
            create_offset = last.file_from_offset + self.mapped_file_size
        if self.read_only:
            raise PermissionError(f"{self.store_path}: read-only queue cannot create files")
        started_ns, faults = time.monotonic_ns(), thread_faults()
        os.makedirs(self.store_path, exist_ok=True)
        path = os.path.join(self.store_path, offset_file_name(create_offset))
        created = not os.path.exists(path)       # else made ready by the allocator
        mapped_file = MappedFile(path, self.mapped_file_size, allocation=self.allocation)
        if self.warm and created:
            mapped_file.warm()
        self.mapped_files.append(mapped_file)
        if self.on_create is not None:
            self.on_create(mapped_file, created, time.monotonic_ns() - started_ns,
                           thread_faults() - faults)
        return mapped_file

    def first_mapped_file(self) -> MappedFile | None:
        return self.mapped_files[0] if self.mapped_files else None

    def find_mapped_file_by_offset(self, offset: int,
                                   return_first_on_not_found: bool = False) -> MappedFile | None:
        """The file holding global ``offset``; None (or the first file) when out of range."""
        files = self.mapped_files
        if files:
            first_base = files[0].file_from_offset
            if first_base <= offset < files[-1].file_from_offset + self.mapped_file_size:
                index = offset // self.mapped_file_size - first_base // self.mapped_file_size
                candidate = files[index] if 0 <= index < len(files) else None
                if (candidate is not None and candidate.file_from_offset <= offset
                        < candidate.file_from_offset + self.mapped_file_size):
                    return candidate
                for mapped_file in files:   # holes in the sequence: search
                    if (mapped_file.file_from_offset <= offset
                            < mapped_file.file_from_offset + self.mapped_file_size):
                        return mapped_file
            if return_first_on_not_found:
                return files[0]
        return None

    def min_offset(self) -> int:
        """Base of the first file, or -1 when empty."""
        return self.mapped_files[0].file_from_offset if self.mapped_files else -1

    def max_offset(self) -> int:
        """Base of the last file + its wrote_position (0 when empty)."""
        if not self.mapped_files:
            return 0
        last = self.mapped_files[-1]
        return last.file_from_offset + last.wrote_position

    def flush(self, least_pages: int = 0) -> bool:
        """Flush from ``flushed_where`` on; True when ``flushed_where`` advanced."""
        before = self.flushed_where
        mapped_file = self.find_mapped_file_by_offset(before, before == 0)
        while mapped_file is not None:
            flushed_position = mapped_file.flush(least_pages)
            self.flushed_where = max(self.flushed_where,
                                     mapped_file.file_from_offset + flushed_position)
            if flushed_position < self.mapped_file_size:
                break
            mapped_file = self.find_mapped_file_by_offset(
                mapped_file.file_from_offset + self.mapped_file_size)
        return self.flushed_where > before

    def commit(self, least_pages: int = 0) -> bool:
        """Commit pool buffers from ``committed_where`` on (Java's MappedFileQueue.commit);
        True when ``committed_where`` advanced. Without buffers it follows the writes."""
        before = self.committed_where
        mapped_file = self.find_mapped_file_by_offset(before, before == 0)
        while mapped_file is not None:
            committed = mapped_file.commit(least_pages)
            self.committed_where = max(self.committed_where,
                                       mapped_file.file_from_offset + committed)
            if committed < self.mapped_file_size:
                break
            mapped_file = self.find_mapped_file_by_offset(
                mapped_file.file_from_offset + self.mapped_file_size)
        return self.committed_where > before

    def set_wrote_and_flushed(self, offset: int) -> None:
        """After recovery: every file's positions as if data ended at global ``offset``."""
        for mapped_file in self.mapped_files:
            position = min(max(offset - mapped_file.file_from_offset, 0), self.mapped_file_size)
            mapped_file.wrote_position = position
            mapped_file.flushed_position = position
            mapped_file.committed_position = position
        self.flushed_where = offset
        self.committed_where = offset

    def truncate_dirty_files(self, offset: int) -> None:
        """Drop data beyond global ``offset``: zero the tail of its file, delete later files."""
        keep = []
        for mapped_file in self.mapped_files:
            tail_offset = mapped_file.file_from_offset + self.mapped_file_size
            if tail_offset <= offset:
                keep.append(mapped_file)
            elif offset >= mapped_file.file_from_offset:
                position = offset - mapped_file.file_from_offset
                if not self.read_only:
                    mapped_file.zero_range(position, self.mapped_file_size)
                    mapped_file.flush()
                mapped_file.wrote_position = position
                mapped_file.flushed_position = position
                keep.append(mapped_file)
            else:
                mapped_file.destroy(1000)
        self.mapped_files = keep
        self.flushed_where = min(self.flushed_where, offset)

    def delete_last_mapped_file(self) -> None:
        """Destroy and forget the last file."""
        if self.mapped_files:
            self.mapped_files.pop().destroy(1000)

    def _delete_files(self, files: list[MappedFile], interval_forcibly_ms: int,
                      delete_interval_ms: int) -> int:
        deleted = []
        for mapped_file in files:
            if not mapped_file.destroy(interval_forcibly_ms):
                break   # held by a reader: try again on the next pass
            deleted.append(mapped_file)
            if len(deleted) >= DELETE_FILES_BATCH_MAX:
                break
            if delete_interval_ms > 0:
                time.sleep(delete_interval_ms / 1000)   # periodic service, spreads unlink I/O
        gone = {id(f) for f in deleted}
        self.mapped_files = [f for f in self.mapped_files if id(f) not in gone]
        return len(deleted)

    def delete_expired_by_time(self, expired_ms: int, delete_interval_ms: int,
                               interval_forcibly_ms: int, clean_immediately: bool) -> int:
        """Delete files (never the last, never one not full) unmodified for ``expired_ms``;
        returns how many."""
        now_ms = clock.now_ms()
        expired = []
        for mapped_file in self.mapped_files[:-1]:
            if not mapped_file.is_full():
                break    # the file being written, and any made ready after it (allocate.py)
            if not clean_immediately and now_ms < mapped_file.last_modified_ms() + expired_ms:
                break   # files are in age order: later ones are younger
            expired.append(mapped_file)
        return self._delete_files(expired, interval_forcibly_ms, delete_interval_ms)

    def delete_expired_by_offset(self, offset: int, unit_size: int) -> int:
        """Delete files (never the last) whose last unit points below commit-log ``offset``.

        The first 8 bytes of a unit are the commit-log physical offset (ConsumeQueue layout).
        """
        expired = []
        for mapped_file in self.mapped_files[:-1]:
            unit = mapped_file.view(self.mapped_file_size - unit_size, unit_size)
            if unit is None:
                break
            try:
                last_physical_offset = int.from_bytes(unit[:8], "big", signed=True)
            finally:
                unit.release()
                mapped_file.release()
            if last_physical_offset >= offset:
                break
            expired.append(mapped_file)
        return self._delete_files(expired, 60_000, 0)

    def shutdown(self, interval_forcibly_ms: int) -> None:
        """Shut down every file (closes each once its holds are released)."""
        for mapped_file in self.mapped_files:
            mapped_file.shutdown(interval_forcibly_ms)

    def destroy(self) -> None:
        """Delete every file and the directory when it is empty."""
        for mapped_file in self.mapped_files:
            mapped_file.destroy(3000)
        self.mapped_files = []
        self.flushed_where = 0
        try:
            os.rmdir(self.store_path)
        except OSError:
            pass
