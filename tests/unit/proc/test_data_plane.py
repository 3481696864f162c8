"""The data plane stores every acknowledged put once, at consecutive queue offsets, durably.

Method: real forked processes over real shared rings, a real control block and a store in
tmp_path - an appender, a dispatcher and a flusher, plus two producer processes each running a
RingPutter in an asyncio loop. Producers write their acknowledgements to JSON files; the test
then reads the store back through MessageStoreReader (and, after kill -9 of the appender under
load, through MessageStore's abnormal recovery) and checks every acknowledgement against it.
The dispatcher process's queue offset table is read against the store's queues. The
dispatcher's hold at the confirm offset (controller mode) is driven by publishing
confirm_position as the ha worker would; under SYNC_FLUSH the flusher publishes it. Every
wait has a deadline that fails the test.
"""
import asyncio
import dataclasses
import functools
import json
import os
import signal
import time

import pytest

from pybroker._fast import record as record_codec
from pybroker._testbase.local_data_plane import LocalDataPlane
from pybroker.config import FlushDiskType, StoreConfig
from pybroker.proc.appender import run_appender
from pybroker.proc.dispatcher import run_dispatcher
from pybroker.proc.flusher import run_flusher
from pybroker.proc.ring_putter import RingPutter
from pybroker.proc.wake import signal_mask
from pybroker.store.checkpoint import StoreCheckpoint
from pybroker.store.control_block import CONFIRM_UNBOUNDED
from pybroker.store.message_store import MessageStore
from pybroker.store.queue_offsets import QueueOffsetReader
from pybroker.store.read_only_store import MessageStoreReader
from pybroker.store.status import GetStatus

pytestmark = pytest.mark.dataplane
HOST = bytes([127, 0, 0, 1])
PORT = 10911
TOPIC = "PlaneTopic"
QUEUES = 4
PRODUCERS = 2


def settings_for(tmp_path, flush_disk_type: str) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(tmp_path / "store"),
                       mapped_file_size_commit_log=128 * 1024,
                       mapped_file_size_consume_queue=256 * 20, max_hash_slot_num=256,
                       max_index_num=2048, flush_disk_type=FlushDiskType(flush_disk_type),
                       flush_interval_commit_log=20, flush_interval_consume_queue=50)


def encode(body: bytes, queue_id: int) -> bytearray:
    size = record_codec.encoded_size(len(body), len(TOPIC), 0, 0)
    buffer = bytearray(size)
    record_codec.encode_into(buffer, 0, TOPIC.encode(), queue_id, 0, body, b"", 0,
                             1_700_000_000_000, HOST, 4242, HOST, PORT)
    return buffer


def make_plane(tmp_path, flush_disk_type: str) -> LocalDataPlane:
    # 4 KiB send rings: 48 puts in flight do not fit, so producers wait for space.
    return LocalDataPlane(tmp_path / "run", settings_for(tmp_path, flush_disk_type), PRODUCERS,
                          1 << 12, 256)


def produce(plane: LocalDataPlane, index: int, count: int, result_path: str, sync: bool,
            sync_flush_timeout_ms: int = 5000) -> None:
    """Child: send ``count`` messages through a RingPutter; write the acknowledgements."""
    async def main():
        putter = RingPutter(plane.rings[index].ring, plane.completions[index].ring,
                            plane.control, plane.wakes.appender, index, (HOST, PORT), sync,
                            sync_flush_timeout_ms)
        putter.start(plane.wakes.workers[index])
        in_flight = asyncio.Semaphore(48)
        acks, failed = [], []

        async def one(number: int):
            queue_id = (number + index) % QUEUES
            body = b"p%d-%06d" % (index, number)
            async with in_flight:
                if failed:
                    return
                try:
                    # Odd numbers put as the timer's re-puts do: no message id wanted.
                    result = await asyncio.wait_for(
                        putter.put(encode(body, queue_id), TOPIC, queue_id, 1, 0, True,
                                   message_ids=number % 2 == 0), 3)
                except TimeoutError:
                    failed.append(number)     # the appender is gone: stop sending
                    return
            end = result.physical_offset + result.wrote_bytes
            acks.append({"queue_id": queue_id, "queue_offset": result.queue_offset,
                         "physical_offset": result.physical_offset, "body": body.decode(),
                         "status": result.status.name, "message_id": result.message_id,
                         "flushed": plane.control.flushed_position >= end})
        await asyncio.gather(*(one(n) for n in range(count)), return_exceptions=True)
        putter.stop()
        with open(result_path, "w") as output:
            json.dump({"acks": acks, "space_waits": putter.space_waits_total}, output)
    asyncio.run(main())


def run_producers(plane: LocalDataPlane, tmp_path, count: int, sync: bool, *args,
                  deadline_s: float = 60) -> tuple[list[dict], int]:
    """(acknowledgements of every producer, times a producer waited for ring space)."""
    paths = [str(tmp_path / f"acks-{i}.json") for i in range(PRODUCERS)]
    for i in range(PRODUCERS):
        plane.fork(f"producer-{i}", produce, plane, i, count, paths[i], sync, *args)
    for i in range(PRODUCERS):
        assert plane.wait(f"producer-{i}", deadline_s) == 0
    acks, space_waits = [], 0
    for path in paths:
        with open(path) as source:
            produced = json.load(source)
        acks += produced["acks"]
        space_waits += produced["space_waits"]
    return acks, space_waits


def check_acks_in_store(store, acks: list[dict], contiguous: bool = True) -> None:
    """Every acknowledged body sits at its acknowledged queue and physical offset; with
    ``contiguous`` each queue's acknowledgements are exactly offsets 0, 1, 2, ... (after a
    crash, records appended but never acknowledged may sit between and after them)."""
    for queue_id in range(QUEUES):
        by_offset = {a["queue_offset"]: a for a in acks if a["queue_id"] == queue_id}
        assert len(by_offset) == len([a for a in acks if a["queue_id"] == queue_id])
        if contiguous:
            assert sorted(by_offset) == list(range(len(by_offset)))
        found, queue_offset, end = 0, 0, max(by_offset, default=-1) + 1
        while queue_offset < end:
            with store.get_messages("g", TOPIC, queue_id, queue_offset, 32) as result:
                assert result.status is GetStatus.FOUND, (queue_id, queue_offset, result)
                for buffer in result.buffers:
                    stored = record_codec.decode(buffer, 0)
                    ack = by_offset.get(stored.queue_offset)
                    if ack is not None:
                        assert bytes(stored.body).decode() == ack["body"]
                        assert stored.physical_offset == ack["physical_offset"]
                        found += 1
                    stored.body.release()
                queue_offset = result.next_begin_offset
        assert found == len(by_offset)


@pytest.fixture
def plane_factory(tmp_path):
    planes = []

    def make(flush_disk_type: str) -> LocalDataPlane:
        plane = make_plane(tmp_path, flush_disk_type)
        planes.append(plane)
        return plane
    yield make
    for plane in planes:
        plane.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("flush_disk_type", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_two_producers_every_ack_is_readable_in_order(tmp_path, plane_factory,
                                                      flush_disk_type):
    plane = plane_factory(flush_disk_type)
    sync = flush_disk_type == "SYNC_FLUSH"
    plane.start_workers()
    count = 1500
    acks, space_waits = run_producers(plane, tmp_path, count, sync)
    assert len(acks) == PRODUCERS * count and space_waits > 0
    assert {a["status"] for a in acks} == {"PUT_OK"}
    if sync:
        assert all(a["flushed"] for a in acks), "a SYNC_FLUSH ack came before its flush"
    assert plane.stop_workers() == [0, 0, 0], "appender, dispatcher, flusher"
    control = plane.control
    assert control.dispatched_position == control.written_position > 0
    assert control.flushed_position == control.written_position
    with MessageStoreReader(plane.settings, control.dispatched_position) as reader:
        check_acks_in_store(reader, acks)
        for ack in acks:        # an id for each put that wanted one, none for the others
            assert bool(ack["message_id"]) == (int(ack["body"].split("-")[1]) % 2 == 0)
        ack = next(a for a in acks[len(acks) // 2:] if a["message_id"])
        with reader.view_message_by_id(ack["message_id"]) as viewed:
            assert bytes(record_codec.decode(viewed.buffer, 0).body).decode() == ack["body"]
        # The dispatcher process published every queue's max offset in the table.
        offsets = QueueOffsetReader(plane.queue_offsets.buffer)
        for queue_id in range(QUEUES):
            acked = len([a for a in acks if a["queue_id"] == queue_id])
            assert offsets.max_offset(TOPIC, queue_id) == acked > 0
            assert reader.get_max_offset_in_queue(TOPIC, queue_id) == acked
    checkpoint = StoreCheckpoint(os.path.join(plane.root, "checkpoint"), read_only=True)
    assert checkpoint.physic_msg_timestamp > 0 and checkpoint.logics_msg_timestamp > 0
    counters = control.worker(31)
    assert counters.appends == PRODUCERS * count and 0 < counters.batches <= counters.appends


@pytest.mark.timeout(120)
def test_kill_of_the_appender_loses_no_acknowledged_message(tmp_path, plane_factory):
    plane = plane_factory("SYNC_FLUSH")
    plane.start_workers()
    paths = [str(tmp_path / f"acks-{i}.json") for i in range(PRODUCERS)]
    for i in range(PRODUCERS):
        plane.fork(f"producer-{i}", produce, plane, i, 20_000, paths[i], True)
    deadline = time.monotonic() + 30
    while plane.control.written_position < 96 * 1024:
        assert time.monotonic() < deadline, "no load reached the CommitLog"
        time.sleep(0.005)
    os.kill(plane.pids["appender"], signal.SIGKILL)
    for i in range(PRODUCERS):
        assert plane.wait(f"producer-{i}", 30) == 0
    plane.kill_all()       # the rest of the broker dies too: the store is as after kill -9
    acks = []
    for path in paths:
        with open(path) as source:
            acks += [a for a in json.load(source)["acks"] if a["status"] == "PUT_OK"]
    assert 0 < len(acks) < PRODUCERS * 20_000
    store = MessageStore(plane.settings)
    assert store.load()
    try:
        assert store.last_recovery_abnormal
        check_acks_in_store(store, acks, contiguous=False)
    finally:
        store.shutdown()


@pytest.mark.timeout(60)
def test_sync_flush_ack_times_out_without_a_flusher(tmp_path, plane_factory):
    plane = plane_factory("SYNC_FLUSH")
    plane.fork("appender", run_appender, plane.settings, [r.ring for r in plane.rings],
               [c.ring for c in plane.completions], plane.control, plane.wakes)
    plane.fork("dispatcher", run_dispatcher, plane.settings, plane.control, plane.wakes)
    started = time.monotonic()
    acks, _ = run_producers(plane, tmp_path, 40, True, 150)
    assert time.monotonic() - started >= 0.15
    assert {a["status"] for a in acks} == {"FLUSH_DISK_TIMEOUT"} and len(acks) == 80
    assert not any(a["flushed"] for a in acks)
    assert plane.control.flushed_position == 0 < plane.control.written_position


def _wait_dispatched(control, expected: int, deadline_s: float = 10) -> None:
    deadline = time.monotonic() + deadline_s
    while control.dispatched_position != expected:
        assert time.monotonic() < deadline, (control.dispatched_position, expected)
        time.sleep(0.005)


def _confirm(plane: LocalDataPlane, position: int) -> None:
    """Publish confirm_position as the ha worker does (and wake its waiters)."""
    signal_mask(plane.control.publish("confirm_position", position), plane.wakes.by_slot())


@pytest.mark.timeout(60)
def test_dispatch_holds_at_the_confirm_offset(tmp_path, plane_factory):
    """Controller mode (readUnCommitted=false): nothing past confirm_position is dispatched,
    so no consumer is served it; a confirm offset inside a record holds that record back; the
    dispatcher follows the offset when it moves, stops while held, and the next start's
    recovery dispatches the held tail. The test plays the ha worker."""
    plane = plane_factory("ASYNC_FLUSH")
    control = plane.control
    assert control.confirm_position == CONFIRM_UNBOUNDED        # a new block: no bound
    _confirm(plane, 0)                   # a controller-mode generation on an empty store
    plane.start_workers()
    acks, _ = run_producers(plane, tmp_path, 200, False)
    assert {a["status"] for a in acks} == {"PUT_OK"}
    written = control.written_position
    time.sleep(0.5)                      # the dispatcher had all the time it needs
    assert control.dispatched_position == 0 < written
    starts = sorted(a["physical_offset"] for a in acks)
    held, following = starts[len(starts) // 2], starts[len(starts) // 2 + 1]
    assert following - held < 1024      # contiguous records of one CommitLog file
    _confirm(plane, held + 1)            # inside the record at `held`
    _wait_dispatched(control, held)
    time.sleep(0.2)
    assert control.dispatched_position == held, "a record past the confirm offset served"
    _confirm(plane, following)
    _wait_dispatched(control, following)
    assert plane.stop_workers() == [0, 0, 0], "appender, dispatcher, flusher (held)"
    assert control.dispatched_position == following < written
    store = MessageStore(plane.settings)
    assert store.load()
    try:
        check_acks_in_store(store, acks)
    finally:
        store.shutdown()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("read_un_committed", [False, True])
def test_sync_flush_dispatches_only_flushed_bytes(tmp_path, read_un_committed):
    """SYNC_FLUSH (outside controller mode) the confirm offset is the flushed position, as
    Java 5.3.3's: with no flusher running, puts answered without waiting for the flush are
    written but not dispatched - unless readUnCommitted, which dispatches to the written end;
    a flusher started later dispatches them all."""
    settings = dataclasses.replace(settings_for(tmp_path, "SYNC_FLUSH"),
                                   read_un_committed=read_un_committed)
    plane = LocalDataPlane(tmp_path / "run", settings, PRODUCERS, 1 << 12, 256)
    try:
        control = plane.control
        plane.fork("appender", run_appender, settings, [r.ring for r in plane.rings],
                   [c.ring for c in plane.completions], control, plane.wakes)
        plane.fork("dispatcher", run_dispatcher, settings, control, plane.wakes)
        acks, _ = run_producers(plane, tmp_path, 50, False)
        assert {a["status"] for a in acks} == {"PUT_OK"}
        written = control.written_position
        if read_un_committed:
            _wait_dispatched(control, written)
        else:
            time.sleep(0.5)                  # the dispatcher had all the time it needs
            assert control.flushed_position == control.dispatched_position == 0 < written
            plane.fork("flusher", functools.partial(run_flusher, owns_confirm=True),
                       settings, control, plane.wakes)
            _wait_dispatched(control, written)
            assert control.confirm_position == control.flushed_position == written
    finally:
        plane.close()
