# Dropping a file's pages from the page cache, for tests that need cold reads.
"""One way for tests to make a file's next reads cold: its dirty pages written back first
(the kernel does not drop dirty pages), then ``POSIX_FADV_DONTNEED``. Pages a process still
has mapped may stay resident; a caller that must know checks with mincore
(:func:`pybroker._fast.pagecache.residency`)."""
import os

__all__ = ["evict_file"]


def evict_file(path: str) -> None:
    """Write back and drop the page-cache pages of ``path``."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)          # tidy: allow (dirty pages are not dropped: written back first)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
