"""The control block keeps every published position at its documented offset, visible across
processes, monotonic where asked, never torn, and rejects files that are not a control block.

Method: the layout table is checked against the derived offsets; fields are written through one
ControlBlock and read through another on the same real file; forked writer processes publish
their own fields while the test reads them concurrently (values whose two 32-bit halves must
agree expose torn reads); damaged and wrong-size files must raise.
"""
import multiprocessing
import os
import time

import pytest

from pybroker._fast import ring
from pybroker.store import control_block
from pybroker.store.control_block import BrokerState, ControlBlock

FORK = multiprocessing.get_context("fork")
CONTRACT_FIELDS = (
    "written_position", "written_store_timestamp", "flushed_position", "dispatched_position",
    "replicated_position", "logics_flushed_timestamp", "index_flushed_timestamp",
    "physic_flushed_timestamp", "generation", "broker_state", "commitlog_min_offset",
    "disk_full", "topic_deletion_requested", "topic_deletion_appended", "topic_deletion_offset",
    "topic_deletion_done", "ha_slaves_connected", "confirm_position",
)


def test_layout_table():
    assert control_block.FIELDS == CONTRACT_FIELDS
    lines = [offset // control_block.CACHE_LINE_BYTES
             for offset in control_block.FIELD_OFFSETS.values()]
    # One cache line per field, after the header line, in FIELDS order.
    assert lines == list(range(1, len(CONTRACT_FIELDS) + 1))
    assert control_block.WORKERS_OFFSET == 64 * (1 + len(CONTRACT_FIELDS))
    last_worker_line_end = control_block.WORKERS_OFFSET + 64 * control_block.WORKER_SLOTS_MAX
    assert control_block.HA_SLAVES_OFFSET == last_worker_line_end
    assert control_block.TAKEN_OFFSET == \
        last_worker_line_end + 64 * control_block.HA_SLAVE_SLOTS_MAX
    assert control_block.SYNC_STATE_OFFSET == \
        control_block.TAKEN_OFFSET + 8 * control_block.WORKER_SLOTS_MAX
    # The SyncStateSet lines: a sequence, a count and one word per member, in their own lines.
    assert control_block.SYNC_STATE_OFFSET % control_block.CACHE_LINE_BYTES == 0
    assert control_block.SYNC_STATE_END_OFFSET == control_block.SYNC_STATE_OFFSET + \
        8 * (3 + control_block.SYNC_STATE_MEMBERS_MAX)
    # The timer worker's line (the first after the SyncStateSet's), then a slave supervisor's
    # copy of its master's timer line, then the timer's line of re-put bytes coming soon, on
    # the second page.
    assert control_block.TIMER_OFFSET % control_block.CACHE_LINE_BYTES == 0
    assert 0 <= control_block.TIMER_OFFSET - control_block.SYNC_STATE_END_OFFSET < 64
    assert control_block.TIMER_OFFSET >= 4096
    assert control_block.TIMER_MASTER_OFFSET == control_block.TIMER_OFFSET + 64
    assert control_block.TIMER_AHEAD_OFFSET == control_block.TIMER_MASTER_OFFSET + 64
    assert control_block.BLOCK_END_OFFSET == control_block.TIMER_AHEAD_OFFSET + 64
    assert control_block.BLOCK_END_OFFSET <= control_block.FILE_SIZE_BYTES
    assert {owner for _, owner in control_block.FIELD_OWNERS} == {
        "appender", "flusher", "dispatcher", "ha", "supervisor"}


def test_fields_round_trip_between_two_maps(tmp_path, rand):
    path = str(tmp_path / "control")
    with ControlBlock(path, create=True) as writer, ControlBlock(path, create=False) as reader:
        assert os.path.getsize(path) == control_block.FILE_SIZE_BYTES
        values = {name: rand.randrange(2**64) for name in CONTRACT_FIELDS}
        for name, value in values.items():
            setattr(writer, name, value)
        for name, value in values.items():
            assert getattr(reader, name) == value
            assert reader.load(name) == value
            assert reader.loader(name)() == value
            writer.storer(name)(value ^ 1)          # the frameless store: the same word
            assert getattr(reader, name) == value ^ 1
            setattr(writer, name, value)
            assert reader.load_two(name, "generation") == (value, values["generation"])
            assert reader.two_loader("generation", name)() == (values["generation"], value)
            # The word really is at the documented offset.
            offset = control_block.FIELD_OFFSETS[name]
            assert int.from_bytes(reader._map[offset:offset + 8], "little") == value
        writer.broker_state = BrokerState.RUNNING
        assert reader.state is BrokerState.RUNNING
        with pytest.raises(OverflowError):
            writer.written_position = -1
        loader = reader.two_loader("written_position", "generation")
    with pytest.raises(ValueError):
        loader()                    # the block is closed: no read of an unmapped word


def test_create_replaces_a_stale_block(tmp_path):
    path = str(tmp_path / "control")
    with ControlBlock(path, create=True) as block:
        block.generation = 7
        block.flushed_position = 1 << 40
    with ControlBlock(path, create=True) as block:
        assert block.generation == 0 and block.flushed_position == 0
        assert block.state is BrokerState.STARTING


def test_attach_rejects_other_files(tmp_path):
    wrong_size = tmp_path / "short"
    wrong_size.write_bytes(bytes(100))
    with pytest.raises(ValueError, match=f"expected {control_block.FILE_SIZE_BYTES}"):
        ControlBlock(str(wrong_size), create=False)
    zeroed = tmp_path / "zeroed"
    zeroed.write_bytes(bytes(control_block.FILE_SIZE_BYTES))
    version = control_block.LAYOUT_VERSION
    with pytest.raises(ValueError, match=f"not a version {version} control block"):
        ControlBlock(str(zeroed), create=False)
    with pytest.raises(FileNotFoundError):
        ControlBlock(str(tmp_path / "missing"), create=False)
    block = ControlBlock(str(tmp_path / "closed"), create=True)
    block.close()
    block.close()
    with pytest.raises(ValueError, match="closed"):
        block.load("written_position")
    with pytest.raises(ValueError, match="closed"):
        block.written_position = 1


def test_monotonic_publish_and_waiters(tmp_path):
    with ControlBlock(str(tmp_path / "control"), create=True) as block:
        assert block.publish("written_position", 100, monotonic=True) == 0
        block.publish("written_position", 50, monotonic=True)
        assert block.written_position == 100
        block.add_waiter("written_position", 3)
        block.add_waiter("written_position", 31)
        block.add_waiter("flushed_position", 5)
        assert block.waiters("written_position") == (1 << 3) | (1 << 31)
        # The publisher takes the mask: each sleeper is signalled once.
        assert block.publish("written_position", 200) == (1 << 3) | (1 << 31)
        assert block.publish("written_position", 300) == 0
        block.remove_waiter("flushed_position", 5)
        assert block.publish("flushed_position", 1) == 0
        for bad in (-1, control_block.WORKER_SLOTS_MAX):
            with pytest.raises(ValueError, match="worker slot"):
                block.add_waiter("written_position", bad)
        with pytest.raises(KeyError):
            block.publish("no_such_field", 1)
        # The same store, fence and take of the mask as a call without Python frames.
        publish_written = block.publisher("written_position")
        block.add_waiter("written_position", 7)
        assert publish_written(40) == 1 << 7 and block.written_position == 40
        assert publish_written(30) == 0 and block.written_position == 30


def test_worker_counters(tmp_path):
    path = str(tmp_path / "control")
    with ControlBlock(path, create=True) as writer, ControlBlock(path, create=False) as reader:
        counters = writer.worker(2)
        counters.add(appends=128, batches=2)
        counters.add(appends=64, batches=1, wakeups=1)
        counters.wakeups += 4
        seen = reader.worker(2)
        assert (seen.appends, seen.batches, seen.wakeups) == (192, 3, 5)
        # The frameless calls (the appender's) touch the same words.
        counters.adder("appends")(8)
        add_heartbeat = counters.adder("heartbeats")
        add_heartbeat(1)
        counters.beat()
        counters.storer("busy_since_ms")(1_700_000_000_123)
        assert (seen.appends, seen.heartbeats, seen.busy_since_ms) == (200, 2, 1_700_000_000_123)
        assert seen.loader("busy_since_ms")() == 1_700_000_000_123
        assert reader.worker(1).loader("appends")() == 0
        field_loader = reader.loader("written_position")
        assert (reader.worker(1).appends, reader.worker(3).appends) == (0, 0)
        with pytest.raises(ValueError, match="worker slot"):
            reader.worker(control_block.WORKER_SLOTS_MAX)
    # The counters use the block's map: once it is closed they fail, never touch a stale map.
    with pytest.raises(ValueError, match="closed"):
        counters.beat()
    with pytest.raises(ValueError, match="closed"):      # the frameless calls too
        add_heartbeat(1)
    with pytest.raises(ValueError, match="closed"):
        field_loader()


def test_ha_slave_lines(tmp_path):
    path = str(tmp_path / "control")
    with ControlBlock(path, create=True) as writer, ControlBlock(path, create=False) as reader:
        assert reader.ha_slaves() == []
        writer.publish_ha_slave(3, 4096, (0x7F000001 << 16) | 10912, 1_700_000_000_000)
        writer.publish_ha_slave(0, 12, 99, 5)
        assert reader.ha_slaves() == [(12, 99, 5),
                                      (4096, (0x7F000001 << 16) | 10912, 1_700_000_000_000)]
        writer.publish_ha_slave(0, 0, 0, 0)       # peer 0 frees the line
        assert [ack for ack, _, _ in reader.ha_slaves()] == [4096]
        with pytest.raises(ValueError, match="HA slave slot"):
            writer.publish_ha_slave(control_block.HA_SLAVE_SLOTS_MAX, 0, 1, 0)


def test_controller_mode_slave_words_and_sync_state(tmp_path):
    path = str(tmp_path / "control")
    with ControlBlock(path, create=True) as writer, ControlBlock(path, create=False) as reader:
        writer.publish_ha_slave(2, 100, 7, 5, broker_id=3, caught_up_ms=9,
                                flags=control_block.HA_SLAVE_ASYNC_LEARNER)
        [line] = reader.ha_slave_lines()
        assert line == {"slot": 2, "ack_offset": 100, "peer": 7, "connected_ms": 5,
                        "broker_id": 3, "caught_up_ms": 9, "flags": 1, "required_from": 0}
        assert reader.sync_state() == (0, (), 0)
        writer.publish_sync_state({5, 2}, 3)
        sequence, members, in_sync = reader.sync_state()
        assert (members, in_sync) == ((2, 5), 3) and sequence % 2 == 0 and sequence > 0
        writer.publish_sync_state([], 1)
        assert reader.sync_state()[1:] == ((), 1) and reader.sync_state()[0] > sequence
        with pytest.raises(ValueError, match="SyncStateSet members"):
            writer.publish_sync_state(range(control_block.SYNC_STATE_MEMBERS_MAX + 1), 1)


def doubled(value: int) -> int:
    """A 64-bit word whose halves are equal: a torn read breaks the equality."""
    return (value << 32) | value


def run_field_writer(path: str, field: str, count: int) -> None:
    with ControlBlock(path, create=False) as block:
        for value in range(1, count + 1):
            block.publish(field, doubled(value))


@pytest.mark.dataplane
def test_cross_process_writers_readers_never_see_torn_or_backward_values(tmp_path):
    path = str(tmp_path / "control")
    count = 20_000
    fields = ("written_position", "flushed_position", "dispatched_position")
    with ControlBlock(path, create=True) as reader:
        writers = [FORK.Process(target=run_field_writer, args=(path, field, count))
                   for field in fields]
        for process in writers:
            process.start()
        last = dict.fromkeys(fields, 0)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for field in fields:
                word = reader.load(field)
                assert word >> 32 == word & 0xFFFFFFFF, f"torn read of {field}: {word:#x}"
                assert word >= last[field], f"{field} went backwards"
                last[field] = word
            if all(value == doubled(count) for value in last.values()):
                break
        for process in writers:
            process.join(max(0.0, deadline - time.monotonic()))
        assert all(p.exitcode == 0 for p in writers), [p.exitcode for p in writers]
        assert last == dict.fromkeys(fields, doubled(count))
        assert ring.load_u64(reader._map, control_block.MAGIC_OFFSET) == control_block.MAGIC


def test_fast_failure_words_have_one_writer_line_each(tmp_path):
    # The producer's cancel word lives in its own worker line; every taken word is in the
    # appender's lines after the worker area; the appender's busy_since_ms in its own line.
    block = ControlBlock(str(tmp_path / "control"), create=True)
    try:
        worker = block.worker(3)
        worker.cancel_request_id = 41
        worker.beat()
        worker.beat()
        assert (worker.cancel_request_id, worker.heartbeats) == (41, 2)
        assert block.taken_offset(0) == control_block.TAKEN_OFFSET >= \
            control_block.WORKERS_OFFSET + control_block.CACHE_LINE_BYTES * \
            control_block.WORKER_SLOTS_MAX
        assert block.taken_offset(31) + 8 == control_block.SYNC_STATE_OFFSET
        assert block.worker(4).cancel_request_id == 0
    finally:
        block.close()


def test_timer_lines_publish_and_the_master_line_reads_whole_writes(tmp_path):
    block = ControlBlock(str(tmp_path / "control"), create=True)
    try:
        timer, master = block.timer(), block.timer_master()
        assert master.read() is None                   # nothing written yet
        timer.set(read_time_ms=1_800_000_001_000, queue_offset=7)
        assert (timer.read_time_ms, timer.queue_offset, timer.dequeue_tps_milli) == \
            (1_800_000_001_000, 7, 0)
        master.write(1_800_000_000_000, 12, 0, 1_800_000_000_500, 33)
        assert master.read() == (2, 1_800_000_000_000, 12, 0, 1_800_000_000_500, 33)
        master.set(seq=master.seq + 1)                 # a write under way: no torn read
        assert master.read() is None
        ahead = block.timer_ahead()
        assert ahead.coming_bytes == 0
        ahead.set(coming_bytes=300 << 20)
        assert (ahead.coming_bytes, timer.read_time_ms, master.seq) == \
            (300 << 20, 1_800_000_001_000, 3)
        with pytest.raises(AttributeError):
            _ = timer.nonsense
    finally:
        block.close()
