# The store's abort file (crash marker) and lock file (one broker per store), protocol.md §4.7.
"""Abort file and lock file of a store root.

``abort`` is an empty file created when a store opens and deleted on clean shutdown; finding it
at start-up means the previous run crashed (abnormal recovery).

``lock`` holds an exclusive fcntl lock on its first byte with the 4 bytes ``lock`` written, as the
Java broker does, so two brokers (pybroker or Java) never open one store. Where Linux offers
open-file-description locks (F_OFD_SETLK) they are used: they conflict with Java's classic POSIX
locks and, unlike those, also with a second lock taken inside the same process.
"""
import fcntl
import os
import struct

from pybroker.errors import BrokerError
from pybroker.store import paths

LOCK_CONTENT = b"lock"
# struct flock on Linux x86-64 / arm64: l_type, l_whence, l_start, l_len, l_pid (+ padding).
_FLOCK = struct.Struct("hhqqi4x")
_OFD_SETLK = getattr(fcntl, "F_OFD_SETLK", None)


class StoreLockedError(BrokerError):
    """Another broker process (or another StoreLock here) holds the store's lock file."""


def create_abort_file(store_root: str) -> None:
    """Create the abort file (marks the store as open) and make its entry durable."""
    os.makedirs(store_root, exist_ok=True)
    fd = os.open(paths.abort_path(store_root), os.O_WRONLY | os.O_CREAT, 0o644)
    os.close(fd)
    _fsync_dir(store_root)


def delete_abort_file(store_root: str) -> None:
    """Delete the abort file (clean shutdown); absent is fine."""
    try:
        os.unlink(paths.abort_path(store_root))
    except FileNotFoundError:
        return
    _fsync_dir(store_root)


def abort_file_exists(store_root: str) -> bool:
    """True when the previous run did not shut down cleanly."""
    return os.path.exists(paths.abort_path(store_root))


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class StoreLock:
    """Exclusive lock on ``<store_root>/lock``; :meth:`acquire` raises StoreLockedError if taken."""

    def __init__(self, store_root: str):
        self.path = paths.lock_path(store_root)
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock (non-blocking) and write ``lock`` into the file."""
        if self._fd is not None:
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._lock_first_byte(fd)
            os.pwrite(fd, LOCK_CONTENT, 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _lock_first_byte(self, fd: int) -> None:
        try:
            if _OFD_SETLK is not None:
                fcntl.fcntl(fd, _OFD_SETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0))
            else:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except OSError as exc:
            raise StoreLockedError(
                f"store lock {self.path} is held by another broker; "
                f"two brokers cannot share one store ({exc.strerror})") from exc

    @property
    def locked(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Drop the lock (closing the descriptor releases it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "StoreLock":
        self.acquire()
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()
