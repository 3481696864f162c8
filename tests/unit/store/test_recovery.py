"""Recovery finds exactly the last whole record after every torn tail; mid-log damage stops it.

Method: write a CommitLog of several 8 KiB files, keep its bytes, then for every case restore
the files, damage them (truncate the last record at every byte, zero the tail, flip one byte in
each field, corrupt a record in the middle), reload, run normal and abnormal recovery and compare
the valid end, the bytes left on disk, the re-dispatched records and a following append against
what was written. Damage with valid records after it must raise (files untouched) or, when
asked to, be skipped with every later record kept.
"""
import logging
import os

import pytest

from pybroker._fast import record as record_codec
from pybroker.errors import StoreCorruptError
from pybroker.store import layout, recovery
from pybroker.store.checkpoint import StoreCheckpoint
from pybroker.store.commitlog import CommitLog
from pybroker.store.damaged_records import DamagedRecords
from pybroker.store.status import PutStatus

FILE_SIZE = 8192
HOST = bytes([10, 0, 0, 7])
TOPIC = b"TopicRecover"
# A retry topic past 127 bytes: message format V2 (2-byte topic length), as Java 5.x writes it.
TOPIC_V2 = b"%RETRY%" + b"g" * 150
PROPERTIES = b"KEYS\x01key-1\x02TAGS\x01tag\x02"
BASE_TIMESTAMP_MS = 1_700_000_000_000


def encode(index: int, topic: bytes = TOPIC) -> bytes:
    body = (b"body-%04d-" % index) * (3 + index % 5)
    size = record_codec.encoded_size(len(body), len(topic), len(PROPERTIES), 0)
    buffer = bytearray(size)
    record_codec.encode_into(buffer, 0, topic, index % 2, 7, body, PROPERTIES, 0,
                             BASE_TIMESTAMP_MS, HOST, 1234, HOST, 10911)
    return bytes(buffer)


class Store:
    """A written CommitLog directory plus what was written: (physical offset, size) per record."""

    def __init__(self, path, count: int, topic: bytes = TOPIC):
        self.path = str(path)
        self.topic = topic
        commitlog = CommitLog(self.path, FILE_SIZE)
        self.records = []
        for index in range(count):
            data = encode(index, topic)
            result = commitlog.append_encoded(data, topic.decode(), index % 2, 1, 0,
                                              BASE_TIMESTAMP_MS + index * 1000)
            assert result.status is PutStatus.PUT_OK
            self.records.append((result.physical_offset, len(data)))
        self.max_offset = commitlog.max_offset()
        commitlog.flush()
        commitlog.shutdown(0)
        self.files = {name: (path / name).read_bytes() for name in os.listdir(self.path)}
        assert len(self.files) >= 3

    def restore(self) -> None:
        for name in os.listdir(self.path):
            os.unlink(os.path.join(self.path, name))
        for name, data in self.files.items():
            with open(os.path.join(self.path, name), "wb") as handle:
                handle.write(data)

    def patch(self, physical_offset: int, data: bytes) -> None:
        name = "%020d" % (physical_offset - physical_offset % FILE_SIZE)
        with open(os.path.join(self.path, name), "r+b") as handle:
            handle.seek(physical_offset % FILE_SIZE)
            handle.write(data)

    def open(self) -> CommitLog:
        commitlog = CommitLog(self.path, FILE_SIZE)
        assert commitlog.load()
        return commitlog

    def bytes_after(self, physical_offset: int) -> bytes:
        """Everything stored on disk from ``physical_offset`` on."""
        tail = b""
        for name in sorted(os.listdir(self.path)):
            base = int(name)
            with open(os.path.join(self.path, name), "rb") as handle:
                data = handle.read()
            if base + FILE_SIZE > physical_offset:
                tail += data[max(physical_offset - base, 0):]
        return tail


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return Store(tmp_path_factory.mktemp("commitlog"), 120)


@pytest.fixture(scope="module", params=["v1", "v2"])
def any_store(request, tmp_path_factory):
    """The store above, or one of V2 records only (the torn-tail cases hit the last record)."""
    if request.param == "v1":
        return request.getfixturevalue("store")
    return Store(tmp_path_factory.mktemp("commitlog-v2"), 60, TOPIC_V2)


def recover(store: Store, abnormal: bool, recovery_point_ms: int | None = None):
    commitlog = store.open()
    dispatched = []
    if abnormal:
        point = BASE_TIMESTAMP_MS + 10**9 if recovery_point_ms is None else recovery_point_ms
        result = recovery.recover_abnormally(
            commitlog, point, lambda r: dispatched.append((r.physical_offset, r.queue_offset)))
    else:
        result = recovery.recover_normally(commitlog)
    return commitlog, result, dispatched


def check_recovered_to(store: Store, commitlog: CommitLog, result, valid_end: int) -> None:
    assert result.valid_end_offset == valid_end
    assert commitlog.max_offset() == valid_end
    assert not any(store.bytes_after(valid_end)), "dirty bytes survived truncation"
    walked = [r.physical_offset for r in commitlog.record_iterator(result.scan_from_offset)]
    expected = [p for p, _ in store.records if result.scan_from_offset <= p < valid_end]
    assert walked == expected
    appended = commitlog.append_encoded(encode(999, store.topic), store.topic.decode(), 0, 1,
                                        0, 1)
    assert appended.physical_offset in (valid_end, valid_end - valid_end % FILE_SIZE + FILE_SIZE)
    commitlog.shutdown(0)


@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
def test_clean_store_recovers_to_max_offset(store, abnormal):
    store.restore()
    commitlog, result, dispatched = recover(store, abnormal)
    assert result.damaged_offset is None
    check_recovered_to(store, commitlog, result, store.max_offset)
    if abnormal:   # the newest file's records were re-dispatched, in order
        assert [p for p, _ in dispatched] == [
            p for p, _ in store.records if p >= result.dispatch_from_offset]
        assert dispatched[-1][0] == store.records[-1][0]


@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
def test_last_record_truncated_at_every_byte(any_store, abnormal):
    store = any_store
    last_offset, last_size = store.records[-1]
    for cut in range(last_size):
        store.restore()
        store.patch(last_offset + cut, bytes(last_size - cut))
        commitlog, result, _ = recover(store, abnormal)
        check_recovered_to(store, commitlog, result, last_offset)


@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
def test_zeroed_tail_of_several_records(store, abnormal):
    store.restore()
    cut_offset = store.records[-4][0]
    store.patch(cut_offset, bytes(store.max_offset - cut_offset))
    commitlog, result, _ = recover(store, abnormal)
    check_recovered_to(store, commitlog, result, cut_offset)


def field_positions(size: int, topic: bytes) -> dict[str, tuple[int, bool]]:
    """Last byte of each field of an IPv4 record -> (position, record survives a flip)."""
    body_length = size - record_codec.encoded_size(0, len(topic), len(PROPERTIES), 0)
    body_at = layout.RECORD_BODY_LENGTH_POSITION_V4 + 4
    length_bytes = layout.TOPIC_LENGTH_BYTES_V1 if len(topic) <= layout.TOPIC_MAX_BYTES_V1 \
        else layout.TOPIC_LENGTH_BYTES_V2
    topic_length_at = body_at + body_length + length_bytes - 1
    properties_length_at = topic_length_at + 1 + len(topic)
    return {
        "total_size": (3, False), "magic": (7, False), "body_crc": (11, False),
        "queue_id": (15, True), "flag": (19, True), "queue_offset": (27, True),
        # A last record must name its own offset (a missing append-time patch is torn).
        "physical_offset": (35, False), "sys_flag": (39, False),   # 0xFF sets both v6 flags
        "born_timestamp": (47, True), "born_host": (55, True),
        "store_timestamp": (63, True), "store_host": (71, True),
        "reconsume_times": (75, True), "prepared_offset": (83, True),
        "body_length": (87, False), "body": (body_at + 3, False),
        # A topic byte flipped by 0xFF leaves Java's topic charset: damaged (the CRC does not
        # cover the topic, the charset check does).
        "topic_length": (topic_length_at, False), "topic": (topic_length_at + 2, False),
        "properties_length": (properties_length_at + 1, False),
        "properties": (properties_length_at + 4, True),
    }


@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
def test_flip_one_byte_in_each_field_of_last_record(any_store, abnormal):
    store = any_store
    last_offset, last_size = store.records[-1]
    original = store.files["%020d" % (last_offset - last_offset % FILE_SIZE)]
    for field, (position, survives) in field_positions(last_size, store.topic).items():
        store.restore()
        byte = original[last_offset % FILE_SIZE + position]
        store.patch(last_offset + position, bytes([byte ^ 0xFF]))
        commitlog, result, _ = recover(store, abnormal)
        expected_end = last_offset + last_size if survives else last_offset
        assert result.valid_end_offset == expected_end, field
        check_recovered_to(store, commitlog, result, expected_end)


def _file_bytes(store: Store) -> dict[str, bytes]:
    found = {}
    for name in os.listdir(store.path):
        with open(os.path.join(store.path, name), "rb") as handle:
            found[name] = handle.read()
    return found


def _damage_middle_record(store: Store, field: str) -> tuple[int, int]:
    """Damage a record in the middle of the second-to-last file; whole valid records follow
    it. Returns its (physical offset, size)."""
    files = sorted(store.files)
    middle_file_base = int(files[-2])
    candidates = [(p, s) for p, s in store.records
                  if middle_file_base <= p < middle_file_base + FILE_SIZE]
    damaged_offset, damaged_size = candidates[len(candidates) // 2]
    store.restore()
    if field == "body":                                    # CRC mismatch
        store.patch(damaged_offset + layout.RECORD_BODY_LENGTH_POSITION_V4 + 6, b"\xee")
    else:                                                  # TOTALSIZE: the record cannot parse
        store.patch(damaged_offset + 1, b"\x7f")
    return damaged_offset, damaged_size


@pytest.mark.parametrize("field", ["body", "size"])
@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
def test_corruption_in_the_middle_stops_recovery_naming_file_and_offset(store, abnormal, field):
    damaged_offset, _ = _damage_middle_record(store, field)
    files_before = _file_bytes(store)
    commitlog = store.open()
    with pytest.raises(StoreCorruptError) as refused:
        if abnormal:
            recovery.recover_abnormally(commitlog, BASE_TIMESTAMP_MS)
        else:
            recovery.recover_normally(commitlog)
    commitlog.shutdown(0)
    message = str(refused.value)
    assert sorted(store.files)[-2] in message and f"physical offset {damaged_offset}" in message
    assert "skipDamagedRecordsOnRecover" in message
    # Nothing was truncated or deleted.
    assert _file_bytes(store) == files_before


@pytest.mark.parametrize("field", ["body", "size"])
@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
def test_skip_damaged_keeps_every_later_record(store, abnormal, field, caplog, tmp_path):
    damaged_offset, damaged_size = _damage_middle_record(store, field)
    commitlog = store.open()
    dispatched = []
    with caplog.at_level(logging.ERROR, logger="pybroker.store.recovery"):
        if abnormal:
            result = recovery.recover_abnormally(
                commitlog, BASE_TIMESTAMP_MS,
                lambda r: dispatched.append(r.physical_offset), skip_damaged=True)
        else:
            result = recovery.recover_normally(commitlog, skip_damaged=True)
    assert result.valid_end_offset == store.max_offset == commitlog.max_offset()
    assert result.skipped_spans == [(damaged_offset, damaged_offset + damaged_size)]
    assert any(f"physical offset {damaged_offset}" in r.getMessage() for r in caplog.records)
    if abnormal:
        assert dispatched == [p for p, _ in store.records
                              if p >= result.dispatch_from_offset and p != damaged_offset]
    # A later start knows the span: no error even without the option.
    commitlog.shutdown(0)
    known = DamagedRecords(str(tmp_path), result.skipped_spans)
    again = recovery.recover_normally(store.open(), damaged=known)
    assert again.valid_end_offset == store.max_offset


def test_abnormal_recovery_starts_at_newest_file_before_the_checkpoint(store, tmp_path):
    store.restore()
    second_file_base = FILE_SIZE
    first_in_second = next(index for index, (p, _) in enumerate(store.records)
                           if p >= second_file_base)
    # Store times are BASE + index * 1000; the checkpoint covers into the second file.
    checkpoint = StoreCheckpoint(str(tmp_path / "checkpoint"))
    checkpoint.physic_msg_timestamp = BASE_TIMESTAMP_MS + (first_in_second + 2) * 1000 + 3000
    checkpoint.logics_msg_timestamp = checkpoint.physic_msg_timestamp + 5000
    commitlog = store.open()
    dispatched = []
    result = recovery.recover(commitlog, True, checkpoint, dispatched.append)
    assert result.abnormal and result.dispatch_from_offset == second_file_base
    assert result.dispatched_count == len(dispatched)
    assert dispatched[0].physical_offset == second_file_base
    assert [r.physical_offset for r in dispatched] == [
        p for p, _ in store.records if p >= second_file_base]
    assert [r.physical_offset for r in recovery.records_to_dispatch(commitlog, result)] == [
        r.physical_offset for r in dispatched]
    del dispatched
    commitlog.shutdown(0)
    # Without the abort file: normal recovery, nothing to re-dispatch.
    commitlog = store.open()
    result = recovery.recover(commitlog, False, checkpoint, None)
    assert not result.abnormal and list(recovery.records_to_dispatch(commitlog, result)) == []
    commitlog.shutdown(0)
    checkpoint.shutdown()


def test_empty_store_recovers_to_zero(tmp_path):
    commitlog = CommitLog(str(tmp_path), FILE_SIZE)
    assert commitlog.load()
    assert recovery.recover_normally(commitlog).valid_end_offset == 0
    assert recovery.recover_abnormally(commitlog, 0).valid_end_offset == 0
