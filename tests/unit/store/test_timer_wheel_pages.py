"""A scan over the wheel leaves none of its pages in the scanning process's page tables, and no
slot is lost.

Why: the timer worker scans the whole 38.7 MB wheel at start-up (check_phy_pos) and every 10 s
for its progress line (all_num); each scan mapped every page of the file (holes as zero pages)
and the process kept them: 37 MiB of the timer worker's PSS in tools/bench_grpc.py
(docs/architecture/grpc.md, "Memory of the consume phase").

Method: a real wheel file in tmp_path; what this process maps of it is the kernel's count
(``Rss`` of the file's mapping in ``/proc/self/smaps``), read after each scan. The slots written
before a scan are read back through the map, through a second (read-only) mapping and from the
file after a flush.
"""
import random

import pytest

from pybroker.store import layout
from pybroker.store.timer_wheel import TimerWheel
from tests.unit.store.test_drop_behind import mapped_rss_bytes

PRECISION_MS = 1000
BASE_MS = 1_765_000_000_000           # a slot time (whole seconds)
SLOT_TIMES = [BASE_MS + step * PRECISION_MS for step in (0, 1, 5, 3_600, 86_400)]
PAGE = 4096


@pytest.fixture
def wheel(tmp_path):
    wheel = TimerWheel(str(tmp_path / "timerwheel"), PRECISION_MS)
    for count, time_ms in enumerate(SLOT_TIMES, start=1):
        wheel.put_slot(time_ms, 100 * count, 100 * count + 52, num=count, magic=0)
    yield wheel
    wheel.close()


@pytest.mark.parametrize("scan", ["all_num", "nums_between", "check_phy_pos", "used_between"])
def test_a_scan_leaves_no_page_mapped(wheel, scan):
    assert mapped_rss_bytes(wheel.path) <= len(SLOT_TIMES) * 16 * PAGE    # the slots written
    if scan == "all_num":
        assert wheel.all_num(BASE_MS) == sum(range(1, len(SLOT_TIMES) + 1))
    elif scan == "nums_between":
        nums = wheel.nums_between(BASE_MS, 10)
        assert nums[[0, 1, 5]].tolist() == [1, 2, 3] and int(nums.sum()) == 6
    elif scan == "check_phy_pos":
        assert wheel.check_phy_pos(BASE_MS, 250) == 200          # slot 2 ends at 252
    else:
        assert wheel.used_between(BASE_MS, BASE_MS + 2 * 86_400_000) == SLOT_TIMES
    # Without the drop the scan maps the whole file (37 MiB).
    assert layout.TIMER_WHEEL_FILE_SIZE > 30 << 20
    assert mapped_rss_bytes(wheel.path) == 0


def test_slots_written_before_a_scan_are_kept(wheel):
    wheel.all_num(BASE_MS)
    assert mapped_rss_bytes(wheel.path) == 0
    for count, time_ms in enumerate(SLOT_TIMES, start=1):
        assert wheel.slot(time_ms).num == count                  # mapped again from the cache
    wheel.put_slot(BASE_MS + 2 * PRECISION_MS, 7, 9, num=42)     # written after the drop
    wheel.check_phy_pos(BASE_MS, 1 << 40)
    reader = TimerWheel(wheel.path, PRECISION_MS, read_only=True)
    try:
        assert reader.slot(BASE_MS + 2 * PRECISION_MS).num == 42
        assert [reader.slot(time_ms).num for time_ms in SLOT_TIMES] == [1, 2, 3, 4, 5]
    finally:
        reader.close()
    wheel.flush()
    with open(wheel.path, "rb") as raw:
        raw.seek(wheel.slot_index(BASE_MS + 2 * PRECISION_MS) * layout.TIMER_SLOT_SIZE
                 + layout.TIMER_SLOT_NUM_POSITION)
        assert int.from_bytes(raw.read(4), "big") == 42


def test_check_phy_pos_is_what_a_walk_over_the_slots_finds(tmp_path):
    """The scan goes a chunk of slots at a time: slots of this lap, of other laps (stale) and
    at the file's wrap give what Java's walk from the read time finds."""
    wheel = TimerWheel(str(tmp_path / "timerwheel"), PRECISION_MS)
    rand = random.Random(31)
    slots = layout.TIMER_WHEEL_SLOTS * 2
    start_units = BASE_MS // PRECISION_MS
    written = {}
    try:
        for _ in range(400):
            units = start_units + rand.randrange(-slots, 2 * slots)
            first = rand.randrange(0, 1 << 30)
            last = first + rand.randrange(0, 1 << 20)
            wheel.put_slot(units * PRECISION_MS, first, last, 1, 0)
            written[wheel.slot_index(units * PRECISION_MS)] = (units, first, last)
        for read_units in (start_units, start_units + 7, start_units + slots - 1):
            for cut in (0, 1 << 29, 1 << 30, 1 << 31):
                walked = [first for units, first, last in written.values()
                          if read_units <= units < read_units + slots and last > cut]
                assert wheel.check_phy_pos(read_units * PRECISION_MS, cut) == \
                    (min(walked) if walked else (1 << 63) - 1)
    finally:
        wheel.close()
