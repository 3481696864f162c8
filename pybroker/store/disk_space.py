# Disk space: allocation that fails cleanly, and the used ratio of a store's partition.
"""Disk-space facts every process uses.

:func:`allocate` gives a file its blocks up front (``posix_fallocate``). A shared region or a
control block mapped over a sparse file takes its blocks on first touch, and on a full disk
that touch is SIGBUS - a process dying without a word. Allocated first, a full disk is an
``OSError`` at creation, with the path and the size in its message, and start-up stops with it.

:func:`used_ratio` and :func:`free_bytes` read the partition holding a path that may not exist
yet (a fresh store's directories are created on first use): the nearest existing ancestor is
on the same partition.
"""
import errno
import logging
import os
import time

__all__ = ["allocate", "used_ratio", "free_bytes", "existing_ancestor", "SpaceGuard"]

log = logging.getLogger("pybroker.store.disk_space")


def allocate(fd: int, size_bytes: int, path: str) -> None:
    """Size the open file ``fd`` to ``size_bytes`` with every block allocated.

    Raises OSError(ENOSPC) naming ``path`` and the size when the disk cannot hold it.
    Filesystems without fallocate get the blocks written as zeros instead.
    """
    os.ftruncate(fd, size_bytes)
    try:
        os.posix_fallocate(fd, 0, size_bytes)
        return
    except OSError as error:
        if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise _no_space(error, size_bytes, path) from None
    chunk = bytes(1 << 20)
    written = 0
    try:
        while written < size_bytes:
            written += os.pwrite(fd, chunk[:min(len(chunk), size_bytes - written)], written)
    except OSError as error:
        raise _no_space(error, size_bytes, path) from None


def _no_space(error: OSError, size_bytes: int, path: str) -> OSError:
    return OSError(error.errno, f"cannot allocate {size_bytes} bytes on disk for "
                                f"{path}: {error.strerror}", path)


def existing_ancestor(path: str) -> str:
    """``path`` itself if it exists, else its nearest existing parent directory."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def used_ratio(path: str) -> float:
    """Used fraction (0..1) of the partition holding ``path`` (which may not exist yet);
    -1.0 when it cannot be read.

    Java's ``(totalSpace - freeSpace) / totalSpace``: blocks reserved for root count as free
    (statvfs ``f_bfree``), so this is a little below ``df``'s percentage.
    """
    try:
        stats = os.statvfs(existing_ancestor(path))
    except OSError:
        return -1.0
    if stats.f_blocks <= 0:
        return -1.0
    return (stats.f_blocks - stats.f_bfree) / stats.f_blocks


def free_bytes(path: str) -> int:
    """Bytes an unprivileged writer can still allocate on ``path``'s partition; -1 unknown."""
    try:
        stats = os.statvfs(existing_ancestor(path))
    except OSError:
        return -1
    return stats.f_bavail * stats.f_frsize


class SpaceGuard:
    """Is the CommitLog's disk too full to append? Checked on a timer and on every new file.

    Full when the partition's used ratio is above ``warning_ratio_percent`` (Java's
    diskSpaceWarningLevelRatio, 90: puts are refused, as Java does) or when less than one
    CommitLog file (``file_size_bytes``) is free: store files are sparse, and the pages of a
    file the disk cannot hold would fault (SIGBUS) on first write. Re-checked when
    ``interval_s`` passed or the number of CommitLog files changed; transitions are logged.
    """

    def __init__(self, path: str, warning_ratio_percent: int, file_size_bytes: int,
                 interval_s: float = 1.0, clock=time.monotonic):
        self.path = path
        self.warning_ratio = warning_ratio_percent / 100
        self.file_size_bytes = file_size_bytes
        self.interval_s = interval_s
        self.clock = clock
        self.is_full = False
        # full() returns is_full without looking while clock() < next_check and the files
        # count is files_count: a caller on a hot path may test that itself and skip the call.
        self.next_check = 0.0
        self.files_count = -1
        self.checks_total = 0

    def full(self, files_count: int) -> bool:
        """The current verdict (re-checking when due)."""
        now = self.clock()
        if now < self.next_check and files_count == self.files_count:
            return self.is_full
        self.next_check = now + self.interval_s
        self.files_count = files_count
        self.checks_total += 1
        ratio, free = used_ratio(self.path), free_bytes(self.path)
        full = ratio > self.warning_ratio or 0 <= free < self.file_size_bytes
        if full != self.is_full:
            (log.error if full else log.warning)(
                "disk of %s is %.1f%% used, %d MiB free: puts are %s (above %.0f%% used or "
                "below one CommitLog file, %d MiB, free, puts are refused)", self.path,
                ratio * 100, free >> 20, "refused" if full else "accepted again",
                self.warning_ratio * 100, self.file_size_bytes >> 20)
            self.is_full = full
        return full
