"""The timer store files (timerlog, timerwheel, timercheck, timermetrics) are Java 5.3.3's, byte
for byte.

Method: tests/golden/java-5.3.3/timer/ holds what a real Java 5.3.3 broker wrote
(tools/java_capture/capture_timer_golden.py: 300-byte timerlog files, a roll window of 6
slots, a recall). pybroker's readers decode those files; its writers, given the same values,
write the same bytes (the timer log appended unit by unit into files of the same size, every
used wheel slot, the checkpoint page, the metrics document). Then damaged tails: recovery's walk
stops at the first unit that is not whole.
"""
import json
import pathlib
import random
import shutil
import struct

import numpy as np
import pytest

from pybroker.store import layout
from pybroker.store.timer_checkpoint import CheckpointValues, TimerCheckpoint, read_checkpoint
from pybroker.store.timer_log import TimerLog, encode_unit
from pybroker.store.timer_metrics import TimerMetrics, load_timer_metrics
from pybroker.store.timer_wheel import EMPTY_SLOT, TimerWheel

GOLDEN = pathlib.Path(__file__).resolve().parents[2] / "golden" / "java-5.3.3" / "timer"
FILE_SIZE = 300        # the capture's mappedFileSizeTimerLog
PRECISION_MS = 1000
CAPTURE = json.loads((GOLDEN / "capture.json").read_text())


def _java_log(tmp_path) -> TimerLog:
    copy = tmp_path / "java-timerlog"
    shutil.copytree(GOLDEN / "timerlog", copy)
    log = TimerLog(str(copy), FILE_SIZE)
    assert log.load()
    return log


def _java_slots() -> list[tuple[int, bytes]]:
    data = (GOLDEN / "timerwheel.slots").read_bytes()
    return [(struct.unpack_from(">I", data, at)[0], data[at + 4:at + 36])
            for at in range(0, len(data), 36)]


def test_java_timerlog_decodes_and_every_unit_re_encodes_identically(tmp_path):
    log = _java_log(tmp_path)
    end, offsets, delayed = log.scan(0, whole_files=True)
    # Five units and a 40-byte blank per 300-byte file, the third file holds one unit.
    assert end == 652
    assert offsets.tolist() == [0, 52, 104, 156, 208, 300, 352, 404, 456, 508, 600]
    for file_base in (0, 300):
        raw = (GOLDEN / "timerlog" / f"{file_base:020d}").read_bytes()
        assert struct.unpack_from(">iqi", raw, 260) == (40, 0, layout.BLANK_MAGIC_CODE)
    for offset, delayed_ms in zip(offsets.tolist(), delayed.tolist(), strict=True):
        unit = log.unit(offset)
        assert unit is not None and unit.delayed_time_ms == delayed_ms
        raw = (GOLDEN / "timerlog" / f"{offset // FILE_SIZE * FILE_SIZE:020d}").read_bytes()
        at = offset % FILE_SIZE
        assert encode_unit(unit.prev_pos, unit.magic, unit.write_time_ms,
                           unit.delayed_time_ms, unit.offset_py, unit.size_py,
                           unit.topic_hash) == raw[at:at + layout.TIMERLOG_UNIT_SIZE]
    # The capture: three in one slot (a chain), two rolls, a cancel mark in the recalled
    # message's slot, the last roll's final unit without the roll bit.
    magics = [log.unit(offset).magic for offset in offsets.tolist()]
    assert magics == [1, 1, 1, 1, 1, 3, 1, 5, 3, 3, 1]
    assert [position for position, _ in log.chain(104, 10)] == [104, 52, 0]
    assert log.unit(404).prev_pos == 352


def test_appending_the_java_units_writes_java_s_files(tmp_path):
    java = _java_log(tmp_path)
    ours = TimerLog(str(tmp_path / "ours"), FILE_SIZE)
    assert ours.load()
    _, offsets, _ = java.scan(0, whole_files=True)
    for offset in offsets.tolist():
        unit = java.unit(offset)
        assert ours.append(encode_unit(unit.prev_pos, unit.magic, unit.write_time_ms,
                                       unit.delayed_time_ms, unit.offset_py, unit.size_py,
                                       unit.topic_hash)) == offset
    ours.flush()
    for path in sorted((GOLDEN / "timerlog").iterdir()):
        assert (tmp_path / "ours" / path.name).read_bytes() == path.read_bytes(), path.name


def test_java_wheel_slots_read_and_write_identically(tmp_path):
    wheel = TimerWheel(str(tmp_path / "timerwheel"), PRECISION_MS)
    assert CAPTURE["wheel_file_bytes"] == layout.TIMER_WHEEL_FILE_SIZE
    java_slots = _java_slots()
    for index, raw in java_slots:
        time_units, first, last, num, magic = struct.unpack(">qqqii", raw)
        time_ms = time_units * PRECISION_MS
        assert wheel.slot_index(time_ms) == index
        wheel.put_slot(time_ms, first, last, num, magic)
    wheel.flush()
    data = (tmp_path / "timerwheel").read_bytes()
    assert len(data) == layout.TIMER_WHEEL_FILE_SIZE
    for index, raw in java_slots:
        assert data[index * 32:index * 32 + 32] == raw
    used = {index for index, _ in java_slots}
    assert np.count_nonzero(wheel.slots["time"]) == len(used)
    first_time = struct.unpack(">q", java_slots[0][1][:8])[0] * PRECISION_MS
    assert wheel.slot(first_time) == (first_time, 208, 208, 1, 0)
    # The same index one lap later is another time: empty.
    lap = layout.TIMER_WHEEL_SLOTS * 2 * PRECISION_MS
    assert wheel.slot(first_time + lap) == EMPTY_SLOT
    # Parked from the first slot on: every num (the recalled slot counts 0).
    assert wheel.all_num(first_time) == sum(struct.unpack(">qqqii", raw)[3]
                                            for _, raw in java_slots)
    assert wheel.all_num(first_time + 3 * PRECISION_MS) == 4
    # Slots whose last unit lies beyond a timer log cut short: the smallest first position.
    assert wheel.check_phy_pos(first_time, 300) == 352
    assert wheel.check_phy_pos(first_time, 299) == 300
    assert wheel.check_phy_pos(first_time, 10_000) == (1 << 63) - 1
    wheel.close()


def test_all_num_and_nums_between_are_what_a_walk_over_the_slots_finds(tmp_path):
    """all_num and nums_between look only at the slots with a count: on slots of this lap, of
    other laps (stale), with count 0 and at the file's wrap, they give what Java's walk of the
    slots from the read time finds (the slots whose time lies within the span walked)."""
    wheel = TimerWheel(str(tmp_path / "timerwheel"), PRECISION_MS)
    rand = random.Random(29)
    slots = layout.TIMER_WHEEL_SLOTS * 2
    start_units = 1_700_000_000_000 // PRECISION_MS
    written = {}
    for _ in range(400):
        units = start_units + rand.randrange(-slots, 2 * slots)
        num = rand.choice((0, 1, rand.randrange(1, 1 << 20)))
        wheel.put_slot(units * PRECISION_MS, 1, 2, num, 0)
        written[wheel.slot_index(units * PRECISION_MS)] = (units, num)
    for read_units in (start_units, start_units + 7, start_units + slots - 1, start_units - 5):
        walked = sum(num for units, num in written.values()
                     if read_units <= units < read_units + slots)
        assert walked > 0
        assert wheel.all_num(read_units * PRECISION_MS) == walked
        span = 3 * slots // 4
        expected = np.zeros(span, dtype=np.int64)
        for units, num in written.values():
            if read_units <= units < read_units + span:
                expected[units - read_units] = num
        assert (wheel.nums_between(read_units * PRECISION_MS, span) == expected).all()
    wheel.close()


def test_revise_slot_follows_java(tmp_path):
    wheel = TimerWheel(str(tmp_path / "timerwheel"), PRECISION_MS)
    time_ms = 1_796_474_218_000
    wheel.revise_slot(time_ms, -2, 104, force=False)
    assert wheel.slot(time_ms) == EMPTY_SLOT               # another lap: only with force
    wheel.revise_slot(time_ms, -2, 104, force=True)
    assert wheel.slot(time_ms) == (time_ms, 104, 104, 0, 0)
    wheel.put_slot(time_ms, 0, 104, 3, 0)
    wheel.revise_slot(time_ms, -2, 156, force=True)
    assert wheel.slot(time_ms) == (time_ms, 0, 156, 3, 0)
    wheel.close()


def test_wheel_of_another_size_is_refused(tmp_path):
    path = tmp_path / "timerwheel"
    path.write_bytes(b"\0" * 4096)
    with pytest.raises(Exception, match="Timer wheel length:4096 != expected:38707200"):
        TimerWheel(str(path), PRECISION_MS)


def test_java_checkpoint_decodes_and_writes_identically(tmp_path):
    page = (GOLDEN / "timercheck").read_bytes()
    assert len(page) == layout.TIMER_CHECK_FILE_SIZE
    values = CheckpointValues.decode(page[:56])
    assert values.last_timerlog_flush_pos == 652
    assert values.last_timer_queue_offset == values.master_timer_queue_offset == 11
    assert values.encode() == page[:56]
    copy = tmp_path / "timercheck"
    shutil.copyfile(GOLDEN / "timercheck", copy)
    assert read_checkpoint(str(copy)) == values
    checkpoint = TimerCheckpoint(str(copy))
    assert checkpoint.existed and checkpoint.values == values
    checkpoint.flush()
    checkpoint.close()
    assert copy.read_bytes() == page
    fresh = TimerCheckpoint(str(tmp_path / "config" / "timercheck"))
    assert not fresh.existed and fresh.values == CheckpointValues()
    fresh.values = values
    fresh.flush()
    fresh.close()
    assert (tmp_path / "config" / "timercheck").read_bytes() == page
    # Java before the data version answered four longs.
    assert CheckpointValues.decode(page[:32]).master_timer_queue_offset == 11


def test_java_metrics_document_round_trips_byte_for_byte(tmp_path):
    raw = (GOLDEN / "timermetrics").read_bytes()
    metrics = load_timer_metrics(str(GOLDEN / "timermetrics"))
    assert metrics.count(CAPTURE["topic"]) == 1       # the long message, still parked
    assert metrics.encode() == raw
    other = TimerMetrics()
    assert other.replace(metrics) and not other.replace(metrics)
    counter = metrics.data_version.counter
    assert metrics.add("T2", 1) == 1 and metrics.data_version.counter == counter + 1
    assert metrics.clean({CAPTURE["topic"]}) == ["T2"]


@pytest.mark.parametrize("damage", ["zero", "short", "magic", "size"])
def test_recovery_walk_stops_at_the_first_unit_that_is_not_whole(tmp_path, damage):
    log = _java_log(tmp_path)
    path = pathlib.Path(log.files.mapped_files[1].path)
    log.close()
    data = bytearray(path.read_bytes())
    at = 404 - 300            # the third unit of the second file
    if damage == "zero":
        data[at:] = bytes(len(data) - at)
    elif damage == "short":
        data[at + 20:] = bytes(len(data) - at - 20)
    elif damage == "magic":
        data[at + 12:at + 16] = struct.pack(">i", 0x10)
    else:
        data[at:at + 4] = struct.pack(">i", 51)
    path.write_bytes(bytes(data))
    log = TimerLog(str(path.parent), FILE_SIZE)
    assert log.load()
    end, offsets, _ = log.scan(0, whole_files=True)
    expected = [0, 52, 104, 156, 208, 300, 352] if damage != "short" else \
        [0, 52, 104, 156, 208, 300, 352, 404]
    if damage == "short":
        # SIZE and MAGIC survived: the unit counts as whole (Java checks nothing else).
        assert offsets.tolist()[:8] == expected and end >= 456
    else:
        assert offsets.tolist() == expected and end == 404
    # Without the check (the second pass) units that are not whole are skipped, not a stop.
    _, unchecked, _ = log.scan(300, whole_files=False)
    assert 456 in unchecked.tolist() or damage in ("zero", "short")
    log.truncate(end)
    assert log.max_offset() == end
    assert log.append(encode_unit(-1, 1, 0, 1000, 7, 9, 0)) == end


def test_expired_files_go_when_their_messages_are_gone(tmp_path):
    log = _java_log(tmp_path)
    # Last unit of file 0 points at CommitLog offset 1465, of file 300 at 6477.
    assert log.delete_expired(1465) == 0
    assert log.delete_expired(1466) == 1
    assert log.files.min_offset() == 300
    assert log.delete_expired(10**9) == 1        # the last file always stays
    assert [f.file_from_offset for f in log.files.mapped_files] == [600]
