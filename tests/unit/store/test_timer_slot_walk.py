"""TimerLog.slot_units walks a slot's chain as a unit-by-unit walk does, whole runs at a time.

Method: seeded timer logs on tmp_path (small files, so chains cross files and their blanks)
are written as the timer's enqueue writes them: units of several slots interleaved, some in long
runs of one slot (a burst), each unit's PREV_POS the slot's last. Every slot is read with
slot_units and with a reference walk over TimerLog.unit (PREV_POS by PREV_POS, never below
first_pos, stopping at a unit that is not whole or a PREV_POS that does not go back), also
after damage: a zeroed unit, a PREV_POS pointing forward, a first_pos inside the chain. The
seed is printed.
"""
import random

import numpy as np

from pybroker.store import layout
from pybroker.store.timer_log import TimerLog, encode_unit

UNIT = layout.TIMERLOG_UNIT_SIZE
FILE_SIZE = UNIT * 40


def reference(log: TimerLog, first_pos: int, last_pos: int) -> list[tuple]:
    """(position, magic, write time, delayed time, offset_py, size_py), oldest first."""
    chain = []
    position = last_pos
    if first_pos < 0 or last_pos < 0 or first_pos > last_pos:
        return []
    while position >= first_pos:
        unit = log.unit(position)
        if unit is None:
            break
        chain.append((position, unit.magic, unit.write_time_ms, unit.delayed_time_ms,
                      unit.offset_py, unit.size_py))
        if unit.prev_pos >= position:
            break
        position = unit.prev_pos
    return chain[::-1]


def walked(log: TimerLog, first_pos: int, last_pos: int) -> list[tuple]:
    units = log.slot_units(first_pos, last_pos)
    for column in units:
        assert isinstance(column, np.ndarray)
    return list(zip(*(column.tolist() for column in units), strict=True))


def build(tmp_path, rng: random.Random) -> tuple[TimerLog, dict[int, list[int]]]:
    log = TimerLog(str(tmp_path / "timerlog"), FILE_SIZE)
    assert log.load()
    slots: dict[int, list[int]] = {}          # slot -> [first, last]
    for step in range(400):
        slot = rng.randrange(6)
        for _ in range(rng.choice([1, 1, 2, 30]) if step % 50 else 120):
            first, last = slots.get(slot, [-1, -1])
            position = log.append(encode_unit(last, rng.choice([1, 1, 1, 3, 5]), 1000 + step,
                                              5000 + slot * 1000, rng.randrange(1 << 40),
                                              rng.randrange(100, 2000), 0))
            slots[slot] = [position if first == -1 else first, position]
    return log, slots


def _patch(log: TimerLog, position: int, field_at: int, data: bytes) -> None:
    mapped_file = log.files.find_mapped_file_by_offset(position)
    view = mapped_file.buffer()
    try:
        at = position - mapped_file.file_from_offset + field_at
        view[at:at + len(data)] = data
    finally:
        view.release()


def test_slot_walk_is_the_unit_by_unit_walk(tmp_path):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    log, slots = build(tmp_path, rng)
    try:
        for first, last in slots.values():
            expected = reference(log, first, last)
            assert len(expected) > 1
            assert walked(log, first, last) == expected
            middle = expected[len(expected) // 2][0]
            assert walked(log, middle, last) == reference(log, middle, last)
        assert walked(log, -1, 5) == [] and walked(log, 10, 5) == []
        # Damage: a unit zeroed, a PREV_POS that points forward.
        victims = rng.sample(sorted({position for first, last in slots.values()
                                     for position, *_ in reference(log, first, last)}), 6)
        for position in victims[:3]:
            _patch(log, position, 0, bytes(4))
        for position in victims[3:]:
            _patch(log, position, 4, (position + UNIT).to_bytes(8, "big"))
        for first, last in slots.values():
            assert walked(log, first, last) == reference(log, first, last)
    finally:
        log.close()
