"""Goal: ConsumeQueue keeps RocketMQ's 20-byte unit files and recovers from damaged tails.

Method: real temp store roots with tiny files (a few units each) so puts roll across files;
raw bytes are decoded with struct at the reference's positions; tails are zeroed or torn and
the queue reloaded; binary searches are compared with linear oracles on random data.
"""
import os
import struct

import numpy as np
import pytest

from pybroker.store import layout, paths
from pybroker.store.consume_queue import UNIT_DTYPE, ConsumeQueue, ConsumeQueueStore

UNITS_PER_FILE = 8
FILE_SIZE = UNITS_PER_FILE * 20


def _queue(root, topic="T", queue_id=0, read_only=False):
    queue = ConsumeQueue(str(root), topic, queue_id, FILE_SIZE, read_only)
    assert queue.load()
    queue.recover()
    return queue


def _fill(queue, count, first=0, record_size=100):
    for queue_offset in range(first, first + count):
        assert queue.put(queue_offset * 1000, record_size, queue_offset * 7 - 3, queue_offset)


def _unit_bytes(root, queue_offset, topic="T", queue_id=0):
    directory = paths.consume_queue_dir(str(root), topic, queue_id)
    base = queue_offset * 20 // FILE_SIZE * FILE_SIZE
    with open(os.path.join(directory, str(base).zfill(20)), "rb") as file:
        file.seek(queue_offset * 20 - base)
        return struct.unpack(">qiq", file.read(20))


def test_put_get_and_file_bytes(tmp_path):
    queue = _queue(tmp_path)
    _fill(queue, 20)                                   # 2.5 files
    assert (queue.min_offset_in_queue(), queue.max_offset_in_queue()) == (0, 20)
    assert queue.get(13) == (13_000, 100, 13 * 7 - 3)
    assert queue.get(20) is None and queue.get(-1) is None
    names = sorted(os.listdir(queue.queue_dir))
    assert names == [str(i * FILE_SIZE).zfill(20) for i in range(3)]
    queue.flush()
    assert _unit_bytes(tmp_path, 9) == (9000, 100, 60)
    assert queue.last_dispatched_phy_offset == 19_000 + 100
    queue.close()


def test_rejects_file_size_not_multiple_of_unit(tmp_path):
    with pytest.raises(ValueError):
        ConsumeQueue(str(tmp_path), "T", 0, 30)


def test_idempotent_re_put_and_gap_refused(tmp_path):
    queue = _queue(tmp_path)
    _fill(queue, 5)
    assert queue.put(2000, 100, 0, 2)                  # already there: skipped
    assert queue.get(2) == (2000, 100, 11)
    assert not queue.put(9000, 100, 0, 9)             # gap 5..8
    assert queue.max_offset_in_queue() == 5
    assert queue.put(5000, 100, 1, 5)
    queue.last_dispatched_phy_offset = 0              # as after a restart without recover
    assert queue.put(3000, 100, 99, 3)                 # by queue offset: still skipped
    assert queue.get(3) == (3000, 100, 18)
    queue.close()


def test_filler_rule_for_late_first_entry(tmp_path):
    queue = _queue(tmp_path)
    assert queue.put(5_000, 64, 5, 11)                 # file 1 (units 8..15), position 3
    assert (queue.min_offset_in_queue(), queue.max_offset_in_queue()) == (11, 12)
    assert sorted(os.listdir(queue.queue_dir)) == [str(FILE_SIZE).zfill(20)]
    for filler_offset in (8, 9, 10):
        assert _unit_bytes(tmp_path, filler_offset) == (0, layout.CQ_FILLER_SIZE, 0)
    assert queue.get(10) is None
    _fill(queue, 6, first=12)
    queue.close()
    reopened = _queue(tmp_path)                        # fillers stay below the min offset
    assert (reopened.min_offset_in_queue(), reopened.max_offset_in_queue()) == (11, 18)
    assert reopened.get(11) == (5_000, 64, 5)
    assert reopened.last_dispatched_phy_offset == 17_000 + 100
    reopened.close()


def test_roll_and_reload(tmp_path):
    queue = _queue(tmp_path)
    _fill(queue, 3 * UNITS_PER_FILE + 1)
    queue.close()
    reopened = _queue(tmp_path)
    assert reopened.max_offset_in_queue() == 3 * UNITS_PER_FILE + 1
    assert all(reopened.get(i) == (i * 1000, 100, i * 7 - 3) for i in range(25))
    _fill(reopened, 3, first=25)
    assert reopened.get(27) == (27_000, 100, 186)
    reopened.close()


def _damage_last_unit(root, queue_offset, keep_bytes):
    directory = paths.consume_queue_dir(str(root), "T", 0)
    base = queue_offset * 20 // FILE_SIZE * FILE_SIZE
    path = os.path.join(directory, str(base).zfill(20))
    with open(path, "r+b") as file:
        file.seek(queue_offset * 20 - base + keep_bytes)
        file.write(bytes(FILE_SIZE - (queue_offset * 20 - base + keep_bytes)))


@pytest.mark.parametrize("keep_bytes", [0, 4, 8, 11])
def test_recover_after_zeroed_or_torn_tail(tmp_path, keep_bytes):
    """The last written unit torn before its size field is complete: it and later are gone."""
    queue = _queue(tmp_path)
    _fill(queue, 21)
    queue.close()
    _damage_last_unit(tmp_path, 18, keep_bytes)        # units 18..23 of file 2 damaged
    reopened = _queue(tmp_path)
    assert reopened.max_offset_in_queue() == 18
    assert reopened.last_dispatched_phy_offset == 17_000 + 100
    assert reopened.put(18_000, 100, 123, 18)          # dispatch resumes where it ended
    assert reopened.get(18) == (18_000, 100, 123)
    reopened.close()


def test_recover_when_a_whole_file_is_zero(tmp_path):
    queue = _queue(tmp_path)
    _fill(queue, 16)
    queue.mapped_file_queue.last_mapped_file()         # an empty third file, as after a roll
    queue.close()
    reopened = _queue(tmp_path)
    assert reopened.max_offset_in_queue() == 16
    _fill(reopened, 2, first=16)
    assert reopened.get(17) == (17_000, 100, 116)
    reopened.close()


def test_truncate_dirty(tmp_path):
    queue = _queue(tmp_path)
    _fill(queue, 20)
    queue.truncate_dirty(13_000)                       # units with phy >= 13000 go
    assert queue.max_offset_in_queue() == 13
    assert queue.last_dispatched_phy_offset == 12_100
    assert len(os.listdir(queue.queue_dir)) == 2
    queue.truncate_dirty(16_000)                       # nothing beyond: no change
    assert queue.max_offset_in_queue() == 13
    queue.truncate_dirty(8_000)                        # exactly a file boundary
    assert queue.max_offset_in_queue() == 8
    assert _fill(queue, 3, first=8) is None and queue.get(10) == (10_000, 100, 67)
    queue.close()
    reopened = _queue(tmp_path)                        # zeroed, so recovery agrees
    assert reopened.max_offset_in_queue() == 11
    reopened.close()


def test_correct_min_offset_and_delete_expired(tmp_path):
    queue = _queue(tmp_path)
    _fill(queue, 20)
    queue.correct_min_offset(5500)
    assert queue.min_offset_in_queue() == 6
    assert queue.get(5) is None and queue.get(6) is not None
    assert queue.delete_expired(10_500) == 1           # file 0 (units 0..7) all below
    assert queue.min_offset_in_queue() == 11
    assert queue.delete_expired(10**9) == 1            # never the last file
    assert queue.min_offset_in_queue() == queue.max_offset_in_queue() == 20
    queue.close()


def test_offset_by_time_against_linear_oracle(tmp_path, rand):
    queue = _queue(tmp_path)
    count = rand.randint(1, 60)
    times = sorted(rand.randint(0, 40) for _ in range(count))   # duplicates on purpose
    for queue_offset in range(count):
        assert queue.put(queue_offset * 1000, 10, 0, queue_offset)
    by_phy = {queue_offset * 1000: t for queue_offset, t in enumerate(times)}

    def store_timestamp_of(phy, size):
        assert size == 10
        return by_phy[phy]

    for probe in range(-2, 44):
        lower = next((i for i, t in enumerate(times) if t >= probe), count)
        upper = max([i for i, t in enumerate(times) if t <= probe], default=0)
        assert queue.offset_by_time(probe, store_timestamp_of) == lower, probe
        assert queue.offset_by_time(probe, store_timestamp_of, "upper") == upper, probe
        # Java 4.9: the nearer of lower and the one before it (ties: the earlier one).
        nearest = min(lower, count - 1)
        if 0 < lower < count and abs(probe - times[lower - 1]) <= abs(probe - times[lower]):
            nearest = lower - 1
        assert queue.offset_by_time(probe, store_timestamp_of, "nearest") == nearest, probe
    with pytest.raises(ValueError):
        queue.offset_by_time(0, store_timestamp_of, "middle")
    queue.close()


def test_read_units_is_a_view_for_vectorised_filtering(tmp_path):
    queue = _queue(tmp_path)
    _fill(queue, 20)
    with queue.read_units(5, 100) as view:             # stops at the end of file 0
        assert view.units.dtype == UNIT_DTYPE and len(view) == 3
        assert view.units["phy"].tolist() == [5000, 6000, 7000]
        wanted = np.flatnonzero(view.units["tags"] % 2 == 0).tolist()
        assert wanted == [i - 5 for i in range(5, 8) if (i * 7 - 3) % 2 == 0]
        with pytest.raises(ValueError):
            view.units["size"][0] = 1                  # read-only over the map
    with queue.read_units(16, 3) as view:
        assert view.units["phy"].tolist() == [16_000, 17_000, 18_000]
    assert len(queue.read_units(20, 5)) == 0 and len(queue.read_units(0, 0)) == 0
    view = queue.read_units(0, 1)
    kept = view.units                                  # a caller that forgot to let go
    view.release()
    queue.close()                                      # the array pins the map: no unmap
    assert kept["phy"].tolist() == [0]                 # still readable, never a crash


def test_reader_refresh_sees_writer_progress(tmp_path):
    writer = _queue(tmp_path)
    _fill(writer, 5)
    reader = _queue(tmp_path, read_only=True)
    assert reader.max_offset_in_queue() == 5
    _fill(writer, 12, first=5)                         # rolls into a second file
    assert reader.refresh() == 17
    assert reader.get(16) == (16_000, 100, 109)
    with pytest.raises(PermissionError):
        reader.put(1, 1, 1, 17)
    reader.close()
    writer.close()


def test_store_load_recover_and_max_physical_offset(tmp_path):
    store = ConsumeQueueStore(str(tmp_path), FILE_SIZE)
    for queue_id in range(3):
        queue = store.find_or_create("TopicA", queue_id)
        for queue_offset in range(queue_id * 5):
            assert queue.put(queue_id * 100_000 + queue_offset * 50, 50, 0, queue_offset)
    store.find_or_create("%RETRY%G", 0).put(7, 3, 0, 0)
    store.flush()
    store.close()
    reopened = ConsumeQueueStore(str(tmp_path), FILE_SIZE)
    assert reopened.load()
    assert reopened.recover() == 200_000 + 9 * 50 + 50
    assert reopened.find("TopicA", 2).max_offset_in_queue() == 10
    assert reopened.find("TopicA", 0) is None          # never written: no directory
    assert reopened.find("%RETRY%G", 0).get(0) == (7, 3, 0)
    assert reopened.find("Nope", 0) is None
    reopened.truncate_dirty(100_100)
    assert reopened.find("TopicA", 1).max_offset_in_queue() == 2
    assert reopened.find("TopicA", 2).max_offset_in_queue() == 0
    reopened.delete_topic("%RETRY%G")
    assert not os.path.exists(os.path.join(str(tmp_path), "consumequeue", "%RETRY%G"))
    reopened.close()
