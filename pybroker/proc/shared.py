# Shared regions: files in a run directory or memfds, mapped with mmap; the creator owns them.
"""Create, attach and close the memory shared between broker processes (style.md §8.2).

A region is a plain file (under ``<store>/run/`` or ``/dev/shm/pybroker-<pid>/``) mapped
``MAP_SHARED``, or (``in_memory``) a memfd, which no other process can open by a name: the
processes forked after its creation share it through the inherited map. The data plane's
send and completion rings are memfds: a file of the store's filesystem is written back by the
kernel (every dirty page once its inode has been dirty 30 s, dirty_expire_centisecs), and each
page written back is write-protected in every process mapping it, so the next record stored
into it cost its writer and the appender (which patches records in the slot) a page fault
each, with ext4's page_mkwrite, and the disk the ring's whole traffic as writes
(docs/architecture/data-plane.md, "Where an 8-thread drain's time goes"). The process that
creates a region (the supervisor) owns it: its ``close()`` unmaps and unlinks a file.
Attachers (workers) only map and close. Ownership is tied to the creating *pid*, so a
forked child that inherits the creator's object never unlinks on close. Never
``multiprocessing.shared_memory``: its resource tracker may unlink a block when any attached
process exits.

Views pin maps: a ring holds a buffer on the map and ``data()`` views pin it too; ``close()``
closes the rings adopted by the region first, and raises BufferError while other views remain.
"""
import errno
import mmap
import os

from pybroker.store import disk_space
from pybroker._fast.ring import ByteRing, CompletionRing

# Small regions (control words, completion rings, statistics) are pre-faulted at map time: they
# are touched on every hot path. A send ring's data area is not: it is as large as the largest
# records allow (sendRingSizeBytes, 32 MiB), and pre-faulting it made every ring resident in
# the supervisor, idle workers' rings and the supervisor's own included (64 MiB of PSS of a
# 128 B benchmark, docs/benchmarks.md). Its pages fault in once, when the ring first wraps.
_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
_MAP_FLAGS_LAZY = mmap.MAP_SHARED


class SharedRegion:
    """One mapped file. Use :meth:`create` or :meth:`attach`; ``buffer`` is the mmap."""

    def __init__(self, path: str, buffer: mmap.mmap, owner_pid: int | None,
                 linked: bool = True):
        self.path = path
        self.linked = linked        # a file at path (False: a memfd named after path)
        self.buffer = buffer
        self.size_bytes = len(buffer)
        self.owner_pid = owner_pid
        self.ring: ByteRing | CompletionRing | None = None
        self._closed = False

    @classmethod
    def create(cls, path: str, size_bytes: int, populate: bool = True,
               in_memory: bool = False) -> "SharedRegion":
        """Create (replacing a stale one) the file of size_bytes at path and map it; this
        process owns it. The file's mode is 0600. ``populate``: pre-fault every page.
        ``in_memory``: a memfd named after path's file name instead (module docstring)."""
        if size_bytes <= 0:
            raise ValueError(f"region size must be > 0 bytes, got {size_bytes}")
        if in_memory:
            return cls._create_in_memory(path, size_bytes, populate)
        # A stale file is unlinked, not truncated: a process still mapping it keeps its own
        # pages instead of faulting (SIGBUS) on a shrunk file.
        _unlink_quietly(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            # Blocks allocated now: on a full disk this is an OSError naming the region, not
            # a SIGBUS in whichever process touches a page first.
            disk_space.allocate(fd, size_bytes, path)
            buffer = mmap.mmap(fd, size_bytes, _MAP_FLAGS if populate else _MAP_FLAGS_LAZY,
                               mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)
        return cls(path, buffer, os.getpid())

    @classmethod
    def _create_in_memory(cls, path: str, size_bytes: int, populate: bool) -> "SharedRegion":
        # Its pages are memory from the first touch on (no blocks to reserve: the memory
        # cgroup, not the disk, bounds it), as a populated or lazy file region's are.
        fd = os.memfd_create(os.path.basename(path), os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size_bytes)
            buffer = mmap.mmap(fd, size_bytes, _MAP_FLAGS if populate else _MAP_FLAGS_LAZY,
                               mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        return cls(path, buffer, os.getpid(), linked=False)

    @classmethod
    def attach(cls, path: str, size_bytes: int | None = None,
               populate: bool = True) -> "SharedRegion":
        """Map an existing region read-write; size_bytes, if given, must match the file."""
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            file_size_bytes = os.fstat(fd).st_size
            if file_size_bytes <= 0 or (size_bytes is not None and size_bytes != file_size_bytes):
                raise ValueError(f"shared region {path} is {file_size_bytes} bytes, "
                                 f"expected {size_bytes if size_bytes is not None else '> 0'}")
            buffer = mmap.mmap(fd, file_size_bytes, _MAP_FLAGS if populate else _MAP_FLAGS_LAZY,
                               mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        return cls(path, buffer, None)

    @property
    def owner(self) -> bool:
        """True in the creating process (the one that unlinks at close)."""
        return self.owner_pid == os.getpid()

    def close(self) -> None:
        """Close the adopted ring, unmap, and unlink if this process created the region.
        Idempotent. BufferError if views of the map are still held elsewhere."""
        if self._closed:
            return
        if self.ring is not None:
            self.ring.close()
        self.buffer.close()
        self._closed = True
        if self.owner and self.linked:
            _unlink_quietly(self.path)

    def __enter__(self) -> "SharedRegion":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _unlink_quietly(path: str) -> None:
    # Already gone is fine (a supervisor restart may have cleaned the run directory).
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def create_byte_ring(path: str, capacity_bytes: int, in_memory: bool = False) -> SharedRegion:
    """Create a region at path (``in_memory``: a memfd named after it) holding a fresh
    ByteRing of capacity_bytes; region.ring."""
    region = SharedRegion.create(path, ByteRing.region_size(capacity_bytes), populate=False,
                                 in_memory=in_memory)
    region.ring = ByteRing(region.buffer, True, capacity_bytes)
    return region


def attach_byte_ring(path: str) -> SharedRegion:
    """Attach to the ByteRing region at path; region.ring is this process's side."""
    region = SharedRegion.attach(path, populate=False)
    try:
        region.ring = ByteRing(region.buffer, False)
    except BaseException:
        region.close()
        raise
    return region


def create_completion_ring(path: str, slot_count: int, in_memory: bool = False) -> SharedRegion:
    """Create a region at path (``in_memory``: a memfd named after it) holding a fresh
    CompletionRing of slot_count slots."""
    region = SharedRegion.create(path, CompletionRing.region_size(slot_count),
                                 in_memory=in_memory)
    region.ring = CompletionRing(region.buffer, True, slot_count)
    return region


def attach_completion_ring(path: str) -> SharedRegion:
    """Attach to the CompletionRing region at path."""
    region = SharedRegion.attach(path)
    try:
        region.ring = CompletionRing(region.buffer, False)
    except BaseException:
        region.close()
        raise
    return region


class RunDirectory:
    """The directory holding a broker's shared regions. The creator makes it (mode 0700) and
    removes it at close once its regions are gone; attachers only name files in it."""

    def __init__(self, path: str, create: bool):
        self.path = path
        self.owner_pid = os.getpid() if create else None
        if create:
            os.makedirs(path, mode=0o700, exist_ok=True)
        elif not os.path.isdir(path):
            raise FileNotFoundError(errno.ENOENT, "run directory does not exist", path)

    def region_path(self, name: str) -> str:
        """Path of the region called name (a plain file name) in this directory."""
        if not name or os.sep in name or name in (".", ".."):
            raise ValueError(f"region name {name!r} must be a plain file name")
        return os.path.join(self.path, name)

    def close(self) -> None:
        """In the creating process, remove the directory if it is empty (idempotent)."""
        if self.owner_pid != os.getpid():
            return
        try:
            os.rmdir(self.path)
        except FileNotFoundError:
            pass
        except OSError as error:
            if error.errno != errno.ENOTEMPTY:
                raise
