"""Goal: the shared POP table keeps its promises: a slot's key and fields read back as written,
its lock admits one holder at a time across processes, offsets set by the metadata service wait
for the POP side, take_plain finds in one call what the one-word methods find slot by slot,
in-flight and held counts add up under concurrent writers, the waiters of a notify are taken
once; the directory assigns slots, harvests pop offsets into the consumer
offsets only when they move, and recovers offsets and order records from a table a killed
broker left. Method: real mapped files in tmp_path, forked processes hammering one slot.
"""
import multiprocessing
import os
import random

import orjson
import pytest

from pybroker.broker.managers.consumer_offset import ConsumerOffsetManager
from pybroker.broker.pop.directory import PopDirectory, PopTableFull, recover_table
from pybroker.store.pop_table import (LOCKED_ELSEWHERE, NOT_PLAIN, ORDER_RECORD_MAX_BYTES,
                                     PopTable, SlotKey)

KEY = SlotKey("Topic", "Group", 3)


@pytest.fixture
def table(tmp_path):
    created = PopTable.create(str(tmp_path / "pop"), 8)
    yield created
    created.close()


def test_acks_are_taken_off_unless_popped_before_the_count_was_cleared(table):
    table.assign(1, KEY, None, 1000)
    table.add_in_flight(1, 10)
    table.take_acked(1, 1000, 3)                      # popped at the count's start: taken off
    assert table.in_flight(1) == 7
    table.clear_in_flight(1, 5000)
    table.add_in_flight(1, 4)
    table.take_acked(1, 4999, 2)                      # popped before the clear: not counted
    assert table.in_flight(1) == 4
    table.take_acked(1, 5000, 2)
    assert table.in_flight(1) == 2
    with pytest.raises(ValueError):
        table.take_acked(8, 5000, 1)                  # no such slot


def test_slot_fields_round_trip(table, tmp_path):
    table.assign(2, SlotKey("%RETRY%g+t" * 20, "g" * 255, -1), None, 1000)
    assert table.key(2) == SlotKey("%RETRY%g+t" * 20, "g" * 255, -1)
    assert table.pop_offset(2) is None
    table.set_pop_offset(2, 12)
    assert table.pop_offset(2) == 12
    table.add_in_flight(2, 5)
    table.add_in_flight(2, -7)
    assert table.in_flight(2) == 0                    # never below 0
    table.set_order_record(2, b'{"o":[1]}')
    assert table.order_record(2) == b'{"o":[1]}'
    with pytest.raises(ValueError):
        table.set_order_record(2, b"x" * (ORDER_RECORD_MAX_BYTES + 1))
    with pytest.raises(ValueError):
        table.assign(2, KEY, None, 0)                 # assigned already
    with pytest.raises(ValueError):
        table.assign(3, SlotKey("t" * 256, "g", 0), None, 0)
    attached = PopTable.attach(str(tmp_path / "pop"))
    assert list(attached.assigned_slots()) == [(2, table.key(2))]
    attached.close()
    (tmp_path / "bad").write_bytes(b"x" * 8192)
    with pytest.raises(ValueError):
        PopTable.attach(str(tmp_path / "bad"))


def test_popped_moves_the_offset_grows_in_flight_and_stamps_the_time(table):
    table.assign(4, KEY, None, 1000)
    table.assign(5, SlotKey("Topic", "Group", 4), None, 1000)
    table.add_in_flight(4, 2)
    table.popped(4, 17, 3, 123456)
    assert (table.pop_offset(4), table.in_flight(4), table.last_pop_ms(4)) == (17, 5, 123456)
    table.popped(4, 17, 0, 123999)                    # an order run stays at its head
    assert (table.pop_offset(4), table.in_flight(4), table.last_pop_ms(4)) == (17, 5, 123999)
    assert table.pop_offset(5) is None and table.in_flight(5) == 0   # no other slot touched
    with pytest.raises(ValueError):
        table.popped(8, 0, 1, 0)                      # no such slot


def test_lock_and_pending_offsets(table):
    table.assign(0, KEY, 5, 0)
    assert table.try_lock(0, 1) and not table.try_lock(0, 2)
    table.unlock(0, 1)
    assert table.try_lock(0, 2)
    assert table.clear_locks() == 1 and table.try_lock(0, 3)
    assert table.pending_offset(0) is None
    table.set_offset(0, 2, reset=True)
    pending = table.pending_offset(0)
    assert (pending.value, pending.reset) == (2, True)
    table.mark_applied(0, pending.seq)
    assert table.pending_offset(0) is None


def _plain_by_steps(table, slot, tag, in_flight_max, release):
    """What take_plain finds for one slot, by the one-word methods a POP used before it."""
    if not table.try_lock(slot, tag):
        return LOCKED_ELSEWHERE
    offset = table.pop_offset(slot)
    if table.pending_offset(slot) is not None or offset is None or \
            (in_flight_max is not None and table.in_flight(slot) > in_flight_max):
        return NOT_PLAIN
    if release:
        table.unlock(slot, tag)
    return offset


@pytest.mark.parametrize("seed", range(40))
def test_take_plain_finds_what_the_one_word_steps_find(table, seed):
    """Seeded slot states (locked by another tag or not, an offset set by the service or
    not, a reset or a commit, the pop offset unset or not, in-flight counts around the
    threshold, negative ones): take_plain gives what the one-word methods give and leaves
    every lock as they leave it."""
    rng = random.Random(seed)
    for slot in range(8):
        table.assign(slot, SlotKey("T", "G", slot), rng.choice([None, rng.randrange(1 << 40)]),
                     1000)
        if rng.random() < 0.3:
            table.set_offset(slot, rng.randrange(100), rng.random() < 0.5)
            if rng.random() < 0.3:
                table.mark_applied(slot, table.pending_offset(slot).seq)
        table.add_in_flight(slot, rng.randrange(-5, 20))
        if rng.random() < 0.25:
            assert table.try_lock(slot, 9)
    in_flight_max = rng.choice([None, 0, 5, 10, -1])
    release = rng.random() < 0.5
    slots = rng.sample(range(8), rng.randrange(1, 9))
    words = bytes(table._words())
    with pytest.raises(ValueError):
        table.take_plain(slots + [8], 3, None, False)
    assert bytes(table._words()) == words           # no lock taken before the refusal
    found = table.take_plain(slots, 3, in_flight_max, release)
    after = bytes(table._words())
    table._words()[:] = words                       # the same states, by the one-word steps
    assert found == [_plain_by_steps(table, slot, 3, in_flight_max, release)
                     for slot in slots]
    assert bytes(table._words()) == after           # every lock, and nothing else, the same


def test_notify_takes_the_waiters_once(table):
    version = table.version
    table.add_waiter(1)
    table.add_waiter(4)
    table.remove_waiter(4)
    assert table.notify() == 0b10
    assert table.notify() == 0
    assert table.version == version + 2


def _hammer(path: str, tag: int, rounds: int) -> None:
    table = PopTable.attach(path)
    done = 0
    while done < rounds:
        if not table.try_lock(0, tag):
            continue
        # A read-modify-write that loses updates unless the lock excludes the other process.
        table.set_pop_offset(0, (table.pop_offset(0) or 0) + 1)
        table.unlock(0, tag)
        table.add_in_flight(0, 1)
        table.add_held(0, 1)
        done += 1
    table.close()
    os._exit(0)


@pytest.mark.dataplane
def test_the_lock_excludes_other_processes(table):
    table.assign(0, KEY, 0, 0)
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_hammer, args=(table.path, tag, 3000))
               for tag in (1, 2, 3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    assert table.pop_offset(0) == 9000
    assert table.in_flight(0) == 9000 and table.held(0) == 9000


def test_directory_assigns_harvests_and_hands_over_offsets(table, tmp_path):
    offsets = ConsumerOffsetManager(str(tmp_path / "consumerOffset.json"))
    offsets.commit("Group", "Topic", 3, 7)
    directory = PopDirectory(table, offsets, str(tmp_path / "order.json"), {}, lambda: 100)
    offsets.listener = directory.offset_committed
    (slot,) = directory.slots_for([KEY])
    assert directory.slots_for([KEY]) == [slot]
    assert table.pop_offset(slot) == 7                # the committed offset
    assert directory.harvest() == 0                   # unchanged
    table.set_pop_offset(slot, 9)
    assert directory.harvest() == 1 and offsets.query("Group", "Topic", 3) == 9
    offsets.commit("Group", "Topic", 3, 4, reset=True)
    assert directory.harvest() == 0                   # waits for the POP side
    assert offsets.query("Group", "Topic", 3) == 4
    others = [SlotKey("T", "G", queue_id) for queue_id in range(7)]
    directory.slots_for(others)
    with pytest.raises(PopTableFull):
        directory.slots_for([SlotKey("T", "G", 99)])


def test_recovery_takes_offsets_and_order_records_of_a_killed_broker(table, tmp_path):
    table.assign(0, KEY, 0, 0)
    table.set_pop_offset(0, 42)
    table.assign(1, SlotKey("Topic", "Group", 4), 0, 0)
    table.set_pop_offset(1, 10)
    table.set_offset(1, 3, reset=True)                # a reset not yet taken: it wins
    table.set_order_record(0, orjson.dumps({"o": [40, 1], "popTime": 5, "cm": 0, "l": 0}))
    offsets = ConsumerOffsetManager(str(tmp_path / "consumerOffset.json"))
    orders: dict = {}
    assert recover_table(table.path, offsets, orders) == 2
    assert offsets.query("Group", "Topic", 3) == 42
    assert offsets.query("Group", "Topic", 4) == 3
    assert orders["Topic@Group"][3].offset_list == [40, 1]


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no tmpfs at /dev/shm")
def test_scans_never_touch_a_slot_that_was_never_assigned(tmp_path):
    # On tmpfs a read fault of a hole allocates the page: a scan of every sparse slot took the
    # whole 256 MiB default table from the disk at start-up (a full disk: SIGBUS, seen in
    # tests/crash/test_disk_full.py). Scans stop at the highest slot ever assigned.
    directory = tmp_path / "shm"
    directory.symlink_to(os.path.realpath("/dev/shm"))
    path = str(directory / f"pop-{os.getpid()}")
    created = PopTable.create(path, 1024)
    try:
        created.assign(0, SlotKey("T", "G", 0), None, 0)
        created.assign(3, SlotKey("T", "G", 3), None, 0)
        assert [slot for slot, _ in created.assigned_slots()] == [0, 3]
        assert not created.assigned(1) and not created.assigned(1000)
        with pytest.raises(ValueError):
            created.assigned(1024)
        attached = PopTable.attach(path)
        assert [slot for slot, _ in attached.assigned_slots()] == [0, 3]
        attached.close()
        # header + the 4 pages up to slot 3 at the most (slots 1 and 2 read as holes below
        # the mark), not 1024 pages
        assert os.stat(path).st_blocks * 512 <= 4096 * 5
    finally:
        created.close()
        os.unlink(path)
