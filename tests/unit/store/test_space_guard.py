"""The appender's disk check refuses above the warning ratio, on its timer and on every new file.

Method: SpaceGuard over a temporary directory with an injected clock; the partition figures
(used ratio, free bytes) are replaced by values the test sets, so each case states the disk it
means. The real-disk behaviour (a tmpfs filled while a broker runs) is
tests/crash/test_disk_full.py; this pins when the guard looks again and where its limits are.
"""
import pytest

from pybroker.store import disk_space
from pybroker.store.disk_space import SpaceGuard

FILE_BYTES = 8 << 20


class Disk:
    def __init__(self):
        self.ratio = 0.5
        self.free = 1 << 30
        self.now = 100.0


@pytest.fixture
def disk(monkeypatch):
    state = Disk()
    monkeypatch.setattr(disk_space, "used_ratio", lambda path: state.ratio)
    monkeypatch.setattr(disk_space, "free_bytes", lambda path: state.free)
    return state


def _guard(tmp_path, disk, warning_percent=90) -> SpaceGuard:
    return SpaceGuard(str(tmp_path), warning_percent, FILE_BYTES, interval_s=1.0,
                      clock=lambda: disk.now)


@pytest.mark.parametrize("warning_percent,below,above", [(90, 0.899, 0.901), (70, 0.69, 0.71)])
def test_full_just_above_the_warning_ratio(tmp_path, disk, warning_percent, below, above):
    guard = _guard(tmp_path, disk, warning_percent)
    disk.ratio = below
    assert not guard.full(1)
    disk.now += 1.0
    disk.ratio = above
    assert guard.full(1)


def test_full_when_less_than_one_commitlog_file_is_free(tmp_path, disk):
    guard = _guard(tmp_path, disk)
    disk.free = FILE_BYTES - 1
    assert guard.full(1)
    disk.now += 1.0
    disk.free = FILE_BYTES
    assert not guard.full(1)


def test_rechecked_on_the_timer_and_on_every_new_file(tmp_path, disk):
    guard = _guard(tmp_path, disk)
    assert not guard.full(1)
    disk.ratio = 0.95
    disk.now += 0.5
    assert not guard.full(1)            # neither due nor a new file: the last verdict
    assert guard.full(2)                # a new CommitLog file: checked at once
    disk.ratio = 0.5
    disk.now += 0.5
    assert guard.full(2)
    disk.now += 0.5                     # a second since the last check
    assert not guard.full(2)
    assert guard.checks_total == 3
