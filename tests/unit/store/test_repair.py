"""Damaged derived files are rebuilt from the CommitLog; skipped damaged records never come back.

Method: real stores in tmp_path (64 KiB CommitLog files). Each case writes messages, shuts the
store down, damages files on disk, reopens it and reads every queue back: consume-queue tails
with garbage that even looks ordered, a consume queue lost together with a damaged record
(dispatch must fill the skipped record's queue offset and go on), a truncated index file, and
a checkpoint with impossible times.
"""
import os
import shutil
import struct

import pytest

from pybroker._fast import record as record_codec
from pybroker.errors import StoreCorruptError
from pybroker.store import layout, paths
from pybroker.store.damaged_records import DamagedRecords
from pybroker.store.message_store import MessageStore
from tests.unit.store.test_message_store import TOPIC, body_of, bodies, make_settings, put

COUNT = 400


def _fill(tmp_path, **overrides) -> tuple[list[int], object]:
    settings = make_settings(tmp_path, **overrides)
    with MessageStore(settings) as store:
        offsets = [put(store, index, KEYS=f"k{index}").physical_offset for index in range(COUNT)]
    return offsets, settings


def _read_all(store, queue_id: int = 0) -> list[bytes]:
    read, queue_offset = [], 0
    while True:
        result = store.get_messages("g", TOPIC, queue_id, queue_offset, 32)
        try:
            read += bodies(result)
        finally:
            result.release()
        if result.next_begin_offset == queue_offset:
            return read
        queue_offset = result.next_begin_offset


def _queue_file(settings) -> str:
    directory = paths.consume_queue_dir(settings.store_path_root_dir, TOPIC, 0)
    return os.path.join(directory, sorted(os.listdir(directory))[-1])


def test_ordered_garbage_after_the_last_unit_is_cut_and_rebuilt(tmp_path, caplog):
    _, settings = _fill(tmp_path)
    path = _queue_file(settings)
    with open(path, "r+b") as file:
        data = bytearray(file.read())
        written = max(i for i in range(0, len(data), 20) if any(data[i:i + 20])) + 20
        # Units that pass the old rule (phy >= 0, size > 0), in order, pointing at old records.
        garbage = b"".join(struct.pack(">qiq", 100 + i, 50, 0) for i in range(3))
        if written + len(garbage) <= len(data):
            file.seek(written)
            file.write(garbage)
    with MessageStore(settings) as store:
        assert _read_all(store) == [body_of(index) for index in range(COUNT)]
    assert any("rebuilt from the CommitLog" in r.getMessage() for r in caplog.records)


def test_lost_queue_and_a_damaged_record_skip_and_fill_the_gap(tmp_path):
    offsets, settings = _fill(tmp_path, skip_damaged_records_on_recover=True)
    root = settings.store_path_root_dir
    shutil.rmtree(paths.consume_queue_root(root))
    damaged = offsets[COUNT // 2]                  # not the first record of its file
    if damaged % settings.mapped_file_size_commit_log == 0:
        damaged = offsets[COUNT // 2 + 1]
    name = paths.offset_file_path(settings.commitlog_dir,
                                  damaged - damaged % settings.mapped_file_size_commit_log)
    with open(name, "r+b") as file:
        file.seek(damaged % settings.mapped_file_size_commit_log + 1)
        file.write(b"\x7f")                         # TOTALSIZE: unparseable
    lock_path = paths.abort_path(root)
    open(lock_path, "w").close()                    # abnormal: re-dispatch from the start
    with MessageStore(settings) as store:
        skipped = offsets.index(damaged)
        assert _read_all(store) == [body_of(i) for i in range(COUNT) if i != skipped]
        assert store.get_max_offset_in_queue(TOPIC, 0) == COUNT
        assert store.look_message_by_offset(damaged) is None
        put(store, COUNT)
        assert _read_all(store)[-1] == body_of(COUNT)
    assert DamagedRecords.load(root).span_at(damaged) is not None
    # The span is known now: a later start needs no option.
    with MessageStore(make_settings(tmp_path)) as store:
        assert len(_read_all(store)) == COUNT


def test_damage_without_the_option_refuses_to_load(tmp_path):
    offsets, settings = _fill(tmp_path)
    damaged = offsets[-50]
    name = paths.offset_file_path(settings.commitlog_dir,
                                  damaged - damaged % settings.mapped_file_size_commit_log)
    with open(name, "r+b") as file:
        file.seek(damaged % settings.mapped_file_size_commit_log
                  + layout.RECORD_BODY_LENGTH_POSITION_V4 + 5)
        file.write(b"\xff")
    with pytest.raises(StoreCorruptError, match=f"physical offset {damaged}"):
        MessageStore(settings).load()


def test_truncated_index_and_damaged_checkpoint_are_rebuilt(tmp_path, caplog):
    _, settings = _fill(tmp_path)
    root = settings.store_path_root_dir
    index_dir = paths.index_dir(root)
    for name in os.listdir(index_dir):
        os.truncate(os.path.join(index_dir, name), 1000)
    with open(paths.checkpoint_path(root), "r+b") as file:
        file.write(struct.pack(">q", -5))
    open(paths.abort_path(root), "w").close()
    with MessageStore(settings) as store:
        assert _read_all(store) == [body_of(index) for index in range(COUNT)]
        found = store.query_messages(TOPIC, "k7", 32, 0, 1 << 62)
        try:
            assert [bytes(record_codec.decode(b, 0).body) for b in found.buffers] == \
                [body_of(7)]
        finally:
            found.release()
    messages = [r.getMessage() for r in caplog.records]
    assert any("index file" in m and "rebuilt from the CommitLog" in m for m in messages)
    assert any("checkpoint" in m and "damaged" in m for m in messages)


def _queue_files(settings) -> list[str]:
    directory = paths.consume_queue_dir(settings.store_path_root_dir, TOPIC, 0)
    return [os.path.join(directory, name) for name in sorted(os.listdir(directory))]


@pytest.mark.parametrize("which", ["first", "middle"])
def test_a_missing_queue_file_rebuilds_the_queue(tmp_path, caplog, which):
    """A queue file missing between two others (or the first one while no CommitLog file has
    expired) is damage, not expiry: the queue is rebuilt and every message is read again."""
    _, settings = _fill(tmp_path)
    files = _queue_files(settings)
    assert len(files) >= 5
    os.unlink(files[0] if which == "first" else files[2])
    with MessageStore(settings) as store:
        assert _read_all(store) == [body_of(index) for index in range(COUNT)]
    assert "rebuilt from the CommitLog" in caplog.text


@pytest.mark.parametrize("damage", ["512_zero_bytes", "offset_bit", "size_bit"])
def test_damaged_units_of_an_old_queue_file_cost_no_message(tmp_path, damage):
    """Start-up reads the last three files of a queue; units damaged before them are found
    by the read (store/unit_search.py)."""
    _, settings = _fill(tmp_path)
    path = _queue_files(settings)[1]
    with open(path, "r+b") as file:
        if damage == "512_zero_bytes":
            file.seek(100)
            file.write(bytes(512))
        else:
            unit = 7 * layout.CQ_STORE_UNIT_SIZE
            at = unit + (7 if damage == "offset_bit" else 11)     # low byte of each field
            file.seek(at)
            value = file.read(1)[0]
            file.seek(at)
            file.write(bytes([value ^ 0x04]))
    with MessageStore(settings) as store:
        assert _read_all(store) == [body_of(index) for index in range(COUNT)]


def _queue_units(path: str) -> list[tuple[int, int, int]]:
    with open(path, "rb") as file:
        data = file.read()
    return [struct.unpack_from(">qiq", data, at) for at in range(0, len(data), 20)]


@pytest.mark.parametrize("damage", ["last_units_zeroed", "last_file_removed",
                                    "unit_past_the_end"])
def test_a_queue_that_lost_its_last_units_gets_them_back(tmp_path, damage):
    """Found by tests/crash/test_damage_property.py: zeroed last units (they read as the
    queue's end), a removed last file, or a unit pointing past the CommitLog (recovery cut
    the queue there) left the queue short with dispatch starting after its new end."""
    _, settings = _fill(tmp_path, mapped_file_size_consume_queue=64 * 20)
    with MessageStore(settings) as store:                # a second queue, written last
        for index in range(COUNT, COUNT + 50):
            put(store, index, queue_id=1)
    files = _queue_files(settings)
    last = files[-1]
    written = sum(1 for unit in _queue_units(last) if unit != (0, 0, 0))
    with open(last, "r+b") as file:
        if damage == "last_units_zeroed":
            file.seek((written - 3) * 20)
            file.write(bytes(3 * 20))
        elif damage == "unit_past_the_end":
            file.seek((written - 3) * 20)
            file.write((1 << 40).to_bytes(8, "big"))
    if damage == "last_file_removed":
        os.unlink(last)
    with MessageStore(settings) as store:
        assert _read_all(store) == [body_of(index) for index in range(COUNT)]


def test_a_damaged_topic_stops_dispatch_as_damage_not_a_crash(tmp_path):
    """The body CRC does not cover the topic: zeroed topic bytes made dispatch create a
    queue directory with a NUL in its name (ValueError). Now recovery's scan (Java's topic
    charset) or dispatch names the record as damage."""
    offsets, settings = _fill(tmp_path)
    os.unlink(os.path.join(paths.consume_queue_dir(settings.store_path_root_dir, TOPIC, 0),
                           sorted(os.listdir(paths.consume_queue_dir(
                               settings.store_path_root_dir, TOPIC, 0)))[0]))
    target = offsets[5]
    with open(os.path.join(settings.commitlog_dir, "%020d" % 0), "r+b") as file:
        data = file.read()
        record = record_codec.decode(data, target)
        topic_at = target + record.body_position - target + len(bytes(record.body)) + 1
        file.seek(topic_at + 2)
        file.write(b"\x00\x00")
    with pytest.raises(StoreCorruptError, match=f"physical offset {target}"):
        MessageStore(settings).load()


def test_restarts_index_every_key_once(tmp_path):
    """Every start dispatches the scanned window again (units and index entries already there
    are skipped): the last indexed record, at the index's endPhyOffset, was indexed again by
    each restart (Java's rule is `<`), so a query found it twice (found by
    tests/compat/test_store_files.py on a store written by Java)."""
    _, settings = _fill(tmp_path)
    for _ in range(2):
        with MessageStore(settings):
            pass
    with MessageStore(settings) as store:
        for index in (0, COUNT // 2, COUNT - 1):
            with store.query_messages(TOPIC, f"k{index}", 32, 0, 1 << 62) as found:
                assert len(found.buffers) == 1, index
