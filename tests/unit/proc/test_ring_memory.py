"""The data plane's send and completion rings are memory, never written back to a disk.

Method: the supervisor's own DataPlane.create over a store in tmp_path (on the box's disk
filesystem); every ring region must be a memfd (its map in /proc/self/maps) with no file left
in the run directory, and, what the change is for, a writeback of the region (msync, as the
kernel's own writeback does once an inode has been dirty 30 s) must not write-protect its
pages: storing into 64 pages again afterwards takes no page fault (ru_minflt), where a
ring in a file of the store took one per page (docs/architecture/data-plane.md, "Where an
8-thread drain's time goes").
"""
import os
import resource

import pytest

from pybroker import config
from pybroker.proc.dataplane import DataPlane
from pybroker.proc.shared import create_byte_ring
from pybroker.store import paths

pytestmark = pytest.mark.dataplane
PAGE = os.sysconf("SC_PAGE_SIZE")
PAGES = 64


def _plane(tmp_path):
    loaded = config.load_broker_config(overrides={
        "storePathRootDir": str(tmp_path / "store"), "remotingWorkers": "1"})
    return DataPlane.create(loaded, paths.run_dir(loaded.store.store_path_root_dir), 1, 0)


def _map_names(buffers) -> list[str]:
    """The /proc/self/maps name of the mapping holding each buffer's first byte."""
    import ctypes
    starts = [ctypes.addressof(ctypes.c_char.from_buffer(buffer)) for buffer in buffers]
    names = []
    with open("/proc/self/maps") as maps:
        lines = [line.split(maxsplit=5) for line in maps]
    for start in starts:
        for fields in lines:
            low, high = (int(value, 16) for value in fields[0].split("-"))
            if low <= start < high:
                names.append(fields[5].strip() if len(fields) > 5 else "")
                break
    return names


def _faults_storing_again(buffer) -> int:
    """Store into PAGES pages at the region's end, write them back (msync), store again:
    the minor faults of the second stores."""
    end = len(buffer)
    for page in range(1, PAGES + 1):
        buffer[end - page * PAGE] = 1
    buffer.flush()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for page in range(1, PAGES + 1):
        buffer[end - page * PAGE] = 2
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_the_rings_are_memfds_with_no_file_in_the_store(tmp_path):
    plane = _plane(tmp_path)
    try:
        regions = plane.rings + plane.completions
        names = _map_names([region.buffer for region in regions])
        assert all(name.startswith("/memfd:") for name in names), names
        run_files = os.listdir(paths.run_dir(str(tmp_path / "store")))
        assert not [name for name in run_files if name.startswith(("send-", "done-"))]
    finally:
        plane.close()


def test_a_writeback_leaves_the_ring_pages_writable(tmp_path):
    plane = _plane(tmp_path)
    try:
        assert _faults_storing_again(plane.rings[0].buffer) < PAGES // 4
    finally:
        plane.close()


def _filesystem_type(path) -> str:
    """The type of the filesystem holding ``path`` (the longest mount point over it)."""
    path = os.path.realpath(path)
    best, kind = "", ""
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            point = fields[1].replace("\\040", " ")
            inside = path == point or path.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best):
                best, kind = point, fields[2]
    return kind


def test_a_ring_in_a_store_file_faults_after_a_writeback(tmp_path):
    # The control for the test above: the same stores into a ring in a file of the disk's
    # filesystem fault again once written back (else the test above proves nothing here).
    # A memory filesystem has no writeback to write-protect the pages: nothing to show there.
    if _filesystem_type(tmp_path) in ("tmpfs", "ramfs"):
        pytest.skip("the temporary directory is on a memory filesystem: no writeback faults")
    region = create_byte_ring(str(tmp_path / "send-file"), 1 << 20)
    try:
        assert _faults_storing_again(region.buffer) >= PAGES
    finally:
        region.close()
