"""The scrubber finds old damage start-up does not read, and the next start acts on it.

Method: a real store in tmp_path (8 KiB CommitLog files, 64-unit queue files) takes 600 records
in two queues and is shut down cleanly. Then damage is written on disk far outside the
three-file window start-up scans: a body byte of a record (only the CRC tells), a size field
zeroed in the middle of a file, a consume-queue unit pointing elsewhere. A clean start does not
see any of it. The scrubber's passes (the same code the broker's thread runs, here stepped by
hand with small budgets and saved and reloaded mid-pass) must report exactly those places - the
record, the next valid record after it, the unit - and nothing for units whose record is the
damaged one. The next start must then refuse, naming the record and the option; with
skipDamagedRecordsOnRecover it starts, keeps every other record, and the damaged queue is rebuilt
from the CommitLog. The scrubber thread keeps to its rate.
"""
import os
import time

import pytest

from pybroker import clock
from pybroker._fast import record as record_codec
from pybroker.errors import StoreCorruptError
from pybroker.proc.scrubber import ScrubberThread
from pybroker.store import layout, paths
from pybroker.store.control_block import ControlBlock
from pybroker.store.message_store import MessageStore
from pybroker.store.read_only_store import MessageStoreReader
from pybroker.store.scrub import (COMMITLOG, CONSUME_QUEUE, PHASE_DONE, Scrubber, ScrubState)
from pybroker.store.settings import StoreConfig

HOST = bytes([127, 0, 0, 1])
TOPIC = "ScrubTopic"
COUNT = 600
FILE_SIZE = 8192
BODY_AT = layout.RECORD_BODY_LENGTH_POSITION_V4 + 4 + 3


def encode(index: int, queue_id: int) -> bytearray:
    body = (b"scrub-%05d-" % index) * (2 + index % 5)
    buffer = bytearray(record_codec.encoded_size(len(body), len(TOPIC), 0, 0))
    record_codec.encode_into(buffer, 0, TOPIC.encode(), queue_id, 0, body, b"", 0, 1, HOST, 1,
                             HOST, 2)
    return buffer


@pytest.fixture
def store(tmp_path):
    settings = StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=FILE_SIZE,
                           mapped_file_size_consume_queue=64 * layout.CQ_STORE_UNIT_SIZE,
                           message_index_enable=False)
    records = []
    with MessageStore(settings) as writer:
        for index in range(COUNT):
            result = writer.put_messages(encode(index, index % 2), TOPIC, index % 2, 1, 0)
            records.append((result.physical_offset, result.wrote_bytes, index % 2,
                            result.queue_offset))
    return settings, records


def patch_commitlog(settings, physical_offset: int, data: bytes) -> None:
    path = os.path.join(settings.commitlog_dir, "%020d" % (physical_offset // FILE_SIZE *
                                                           FILE_SIZE))
    with open(path, "r+b") as handle:
        handle.seek(physical_offset % FILE_SIZE)
        handle.write(data)


def patch_unit(settings, queue_id: int, queue_offset: int, data: bytes) -> str:
    size = settings.mapped_file_size_consume_queue
    offset = queue_offset * layout.CQ_STORE_UNIT_SIZE
    path = os.path.join(paths.consume_queue_dir(settings.store_path_root_dir, TOPIC, queue_id),
                        "%020d" % (offset // size * size))
    with open(path, "r+b") as handle:
        handle.seek(offset % size)
        handle.write(data)
    return path


def damage_old_places(settings, records):
    """Three damages in the store's first files; returns (crc record, zeroed record, the
    record after the zeroed one, (queue id, queue offset) of the damaged unit)."""
    crc_record = records[20]
    zeroed, after_zeroed = records[45], records[46]
    patch_commitlog(settings, crc_record[0] + BODY_AT, b"\xee")
    patch_commitlog(settings, zeroed[0], bytes(4))
    unit_record, other = records[100], records[110]
    assert unit_record[2] == 0
    patch_unit(settings, 0, unit_record[3], other[0].to_bytes(8, "big"))
    return crc_record, zeroed, after_zeroed, (0, unit_record[3])


def run_pass(settings, state: ScrubState, budget: int, save_every: int = 0) -> ScrubState:
    """One whole pass, stepped with ``budget`` bytes; saved and reloaded every ``save_every``
    steps (a restart mid-pass)."""
    end = max_offset(settings)
    steps = 0
    reader = MessageStoreReader(settings, dispatched_position=end)
    reader.advance(end, end)
    scrubber = Scrubber(reader, state, clock.now_ms)
    if state.phase == PHASE_DONE:
        scrubber.start_pass()
    while state.phase != PHASE_DONE:
        assert scrubber.step(end, budget) > 0
        steps += 1
        if save_every and steps % save_every == 0:
            state.save(settings.store_path_root_dir)
            reader.close()
            state = ScrubState.load(settings.store_path_root_dir)
            reader = MessageStoreReader(settings, dispatched_position=end)
            reader.advance(end, end)
            scrubber = Scrubber(reader, state, clock.now_ms)
        assert steps < 100_000
    reader.close()
    state.save(settings.store_path_root_dir)
    return state


def max_offset(settings) -> int:
    names = sorted(os.listdir(settings.commitlog_dir))
    with open(os.path.join(settings.commitlog_dir, names[-1]), "rb") as handle:
        data = handle.read()
    _, position, _ = record_codec.scan(data, 0, len(data), False)
    return int(names[-1]) + position


@pytest.mark.parametrize("budget,save_every", [(1 << 20, 0), (3000, 7)],
                         ids=["one_step", "small_steps_restarted"])
def test_a_pass_finds_old_damage_start_up_does_not_read(store, budget, save_every):
    settings, records = store
    crc_record, zeroed, after_zeroed, (queue_id, unit_offset) = damage_old_places(settings,
                                                                                  records)
    with MessageStore(settings) as reopened:                # a clean start sees none of it
        assert reopened.max_physical_offset == records[-1][0] + records[-1][1]
    state = run_pass(settings, ScrubState(), budget, save_every)
    found = {(f.kind, f.physical_offset): f for f in state.findings}
    assert set(found) == {(COMMITLOG, crc_record[0]), (COMMITLOG, zeroed[0]),
                          (CONSUME_QUEUE, records[110][0])}, [f.text() for f in state.findings]
    assert found[(COMMITLOG, crc_record[0])].end == crc_record[0] + crc_record[1]
    assert found[(COMMITLOG, zeroed[0])].end == after_zeroed[0]
    unit = found[(CONSUME_QUEUE, records[110][0])]
    assert unit.queue == f"{TOPIC}/{queue_id}" and unit.queue_offset == unit_offset
    assert state.passes == 1
    assert state.verified_bytes >= max_offset(settings)
    # The units of the two damaged records are the CommitLog's findings, not reported again.
    assert not any(f.kind == CONSUME_QUEUE and f.physical_offset in (crc_record[0], zeroed[0])
                   for f in state.findings)
    # A second pass meets the same damage: nothing new, nothing lost.
    again = run_pass(settings, state, 1 << 20)
    assert {(f.kind, f.physical_offset) for f in again.findings} == set(found)
    assert again.passes == 2


def test_the_next_start_refuses_then_skips_and_rebuilds(store):
    settings, records = store
    crc_record, zeroed, _, (queue_id, unit_offset) = damage_old_places(settings, records)
    run_pass(settings, ScrubState(), 1 << 20)
    with pytest.raises(StoreCorruptError) as refused:
        MessageStore(settings).load()
    message = str(refused.value)
    assert f"physical offset {crc_record[0]}" in message
    assert "skipDamagedRecordsOnRecover" in message and "\n" not in message
    skipping = StoreConfig(**{**settings.__dict__, "skip_damaged_records_on_recover": True})
    with MessageStore(skipping) as reopened:
        spans = reopened.damaged_records.spans
        assert (crc_record[0], crc_record[0] + crc_record[1]) in spans
        served = {}
        for queue in (0, 1):
            offset = 0
            while True:
                result = reopened.get_messages("g", TOPIC, queue, offset, 32)
                with result:
                    for buffer in result.buffers:
                        message_record = record_codec.decode(buffer, 0)
                        served[message_record.physical_offset] = message_record.queue_offset
                if result.next_begin_offset == offset:
                    break
                offset = result.next_begin_offset
    expected = {p: q for p, _, _, q in records if p not in (crc_record[0], zeroed[0])}
    assert served == expected
    # The queue with the damaged unit was rebuilt, and the findings settled.
    assert ScrubState.load(settings.store_path_root_dir).findings == []
    with MessageStore(settings) as again:                # known now: no option needed
        assert again.max_physical_offset == records[-1][0] + records[-1][1]


def test_the_thread_keeps_to_its_rate(store, tmp_path):
    settings, _ = store
    rate = StoreConfig(**{**settings.__dict__, "store_scrub_rate_megabytes_per_second": 1,
                          "store_scrub_pass_interval_seconds": 0})
    control = ControlBlock(str(tmp_path / "control"), create=True)
    end = max_offset(settings)
    for field in ("written_position", "flushed_position", "dispatched_position"):
        control.publish(field, end)
    # A store larger than a second's worth: the same bytes again and again (pass interval 0).
    thread = ScrubberThread(rate, control, None)
    started = time.monotonic()
    thread.start()
    time.sleep(1.5)
    thread.stop()
    elapsed = time.monotonic() - started
    verified = thread.state.verified_bytes
    assert verified > 0 and thread.error is None
    # At most the rate over the time run, plus the one step taken before the first pause.
    assert verified <= 1_000_000 * elapsed + (1 << 20), verified
    assert thread.status()["scrubPasses"] == str(thread.state.passes)
    control.close()


def test_an_empty_store_passes(tmp_path):
    settings = StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=FILE_SIZE)
    os.makedirs(settings.commitlog_dir)
    state = ScrubState()
    reader = MessageStoreReader(settings, dispatched_position=0)
    scrubber = Scrubber(reader, state, clock.now_ms)
    scrubber.start_pass()
    for _ in range(3):
        scrubber.step(0, 1 << 20)
    reader.close()
    assert state.phase == PHASE_DONE and state.passes == 1 and not state.findings


def test_a_thread_that_fails_to_start_reports_its_error(store, tmp_path, monkeypatch, caplog):
    """A failure before the scrubber's loop (here its reader, injected) is logged with its
    traceback and shown in the thread's status, not lost on stderr; the broker goes on."""
    settings, _ = store
    rate = StoreConfig(**{**settings.__dict__, "store_scrub_rate_megabytes_per_second": 1})
    control = ControlBlock(str(tmp_path / "control"), create=True)

    def broken(*args, **kwargs):
        raise OSError("injected failure")
    monkeypatch.setattr("pybroker.proc.scrubber.MessageStoreReader", broken)
    thread = ScrubberThread(rate, control, None)
    with caplog.at_level("ERROR", logger="pybroker.proc.scrubber"):
        thread.start()
        assert thread._thread is not None
        thread._thread.join(10)
    assert thread.error == "OSError: injected failure"
    assert "scrubber ended by an error: injected failure" in caplog.text
    thread.stop()
    control.close()
