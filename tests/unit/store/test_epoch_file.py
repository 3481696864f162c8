"""The controller-mode epoch file reads and writes Java 5.3.3's format and keeps its rules.

Method: a file captured from a Java 5.3.3 broker (tests/golden/java-5.3.3/controller) is read and
written back byte for byte; entries are appended and truncated on real temp files and reloaded;
damaged files (bad CRC, wrong count, garbage) fall back to the ``.bak`` the safe write leaves, or
refuse to load when nothing verifies; the consistent point is checked on the cases of Java's
design document (same epoch with different ends, diverged epochs, nothing in common).
"""
import os
import pathlib

import pytest

from pybroker.errors import StoreCorruptError
from pybroker.store.epoch_file import (OPEN_END, EpochEntry, EpochFile, consistent_point,
                                       format_entries, parse_entries)

GOLDEN = pathlib.Path(__file__).parents[2] / "golden" / "java-5.3.3" / "controller"


def test_java_file_round_trip(tmp_path):
    data = (GOLDEN / "epochFileCheckpoint").read_bytes()
    entries = parse_entries(data, "golden")
    assert entries == [EpochEntry(1, 0, OPEN_END)]
    assert format_entries(entries) == data
    path = tmp_path / "epochFileCheckpoint"
    path.write_bytes(data)
    epochs = EpochFile.load(str(path))
    assert epochs.append(2, 4096)
    assert path.read_bytes() == format_entries([EpochEntry(1, 0), EpochEntry(2, 4096)])
    assert (tmp_path / "epochFileCheckpoint.bak").read_bytes() == data


def test_append_follows_java_rule(tmp_path):
    epochs = EpochFile.load(str(tmp_path / "epochs"))
    assert epochs.last_epoch() == -1 and epochs.last() is None
    assert epochs.append(1, 0)
    # Elected again before writing anything: Java refuses, the older entry stays.
    assert not epochs.append(2, 0)
    assert not epochs.append(1, 100)
    assert epochs.append(3, 100)
    assert [(e.epoch, e.start_offset, e.end_offset) for e in epochs.entries] == \
        [(1, 0, 100), (3, 100, OPEN_END)]
    reloaded = EpochFile.load(str(tmp_path / "epochs"))
    assert reloaded.entries == epochs.entries
    assert reloaded.find_by_offset(99).epoch == 1
    assert reloaded.find_by_offset(100).epoch == 3
    assert reloaded.next_after(1).epoch == 3 and reloaded.next_after(3) is None


def test_truncations_persist(tmp_path):
    path = str(tmp_path / "epochs")
    epochs = EpochFile.load(path)
    for epoch, start in ((1, 0), (2, 100), (4, 250)):
        assert epochs.append(epoch, start)
    epochs.truncate_suffix_by_offset(250)
    assert [e.epoch for e in EpochFile.load(path).entries] == [1, 2]
    assert EpochFile.load(path).last().end_offset == OPEN_END
    epochs.truncate_suffix_by_epoch(2)
    assert [e.epoch for e in EpochFile.load(path).entries] == [1]
    epochs.append(5, 300)
    epochs.truncate_prefix_by_offset(300)
    assert [e.epoch for e in EpochFile.load(path).entries] == [5]
    # Emptied: no file and no backup, so Java's reader cannot bring the entries back.
    epochs.truncate_suffix_by_offset(0)
    assert not os.path.exists(path) and not os.path.exists(path + ".bak")
    assert EpochFile.load(path).entries == []


@pytest.mark.parametrize("damage", [
    b"2\n1725254278\n1-0\n",                  # count says 2
    b"1\n12345\n1-0\n",                       # CRC does not match
    b"garbage",
    b"1\n0\nx-y\n",                           # not numbers
])
def test_damaged_file_falls_back_to_backup(tmp_path, damage):
    path = str(tmp_path / "epochs")
    epochs = EpochFile.load(path)
    epochs.append(1, 0)
    epochs.append(2, 10)                      # .bak now holds [1-0]
    pathlib.Path(path).write_bytes(damage)
    assert [e.epoch for e in EpochFile.load(path).entries] == [1]
    pathlib.Path(path + ".bak").write_bytes(damage)
    with pytest.raises(StoreCorruptError, match="epoch file unusable"):
        EpochFile.load(path)


def test_crc_zero_is_not_checked():
    assert parse_entries(b"1\n0\n7-7000\n", "x") == [EpochEntry(7, 7000)]


def entries(*pairs):
    result = [EpochEntry(epoch, start) for epoch, start in pairs]
    for previous, entry in zip(result, result[1:], strict=False):
        previous.end_offset = entry.start_offset
    return result


@pytest.mark.parametrize("local, local_end, master, master_end, expected", [
    # Same single epoch: the shorter log's end.
    ([(1, 0)], 1000, [(1, 0)], 800, 800),
    ([(1, 0)], 500, [(1, 0)], 800, 500),
    # An old master rejoins: its epoch 1 ran past where the new master's epoch 2 began.
    ([(1, 0)], 1000, [(1, 0), (2, 800)], 1200, 800),
    # The slave saw epoch 2 too, and an epoch 3 the master never had.
    ([(1, 0), (2, 800), (3, 900)], 950, [(1, 0), (2, 800), (4, 1000)], 1500, 900),
    # Epoch 2 started elsewhere on the master: agreement ends with epoch 1.
    ([(1, 0), (2, 700)], 900, [(1, 0), (2, 800)], 1200, 700),
    # Nothing in common.
    ([(5, 0)], 100, [(1, 0)], 100, -1),
])
def test_consistent_point(local, local_end, master, master_end, expected):
    assert consistent_point(entries(*local), local_end, entries(*master), master_end) == expected
