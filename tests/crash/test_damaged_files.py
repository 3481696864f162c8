"""Damaged store files never silently cost acknowledged messages.

Method: a real `pybroker standalone` broker with small CommitLog files takes a few hundred
acknowledged sends (SYNC_FLUSH), is stopped cleanly or killed with SIGKILL, and then one file is
damaged on disk the way real disks and crashes do it:

* one flipped bit in an OLD CommitLog record (its body, or its size field) with hundreds of
  valid records after it: the next start must refuse (exit 1) with an error naming the file and
  the offset (reliability R6), and must not have truncated anything; with the operator option
  ``skipDamagedRecordsOnRecover=true`` it starts, logs and counts the damaged record, never
  serves it, and every other message stays readable, new sends going after the end;
* damage in a CommitLog file older than the three files a clean start scans: the scrubber
  finds it while the broker runs (brokerStatus, pybroker prof), a pull of the record answers
  PULL_OFFSET_MOVED to the next offset, every other message is served, the next start
  refuses until the operator chooses;
* garbage in a ConsumeQueue's tail (random bytes, or stale units: copies of the queue's first
  units, pointing at real records, as a torn or misplaced write leaves them), a truncated
  IndexFile, a damaged checkpoint: derived files, rebuilt from the CommitLog with a log line,
  every message still readable (by queue offset, and by key for the index), no record served
  at a queue offset that is not its own, and new sends taking the next queue offsets.
"""
import os
import random
import time
import urllib.request

import pytest

from pybroker._fast import record
from pybroker._testbase.cluster import StandaloneBroker, free_port
from pybroker.prof.sampler import Sampler, attach_store
from pybroker.protocol import fastjson
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.remoting.client import SyncRemotingClient
from pybroker.store import layout

pytestmark = [pytest.mark.crash, pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "DamageTopic"
TIMEOUT_MS = 10_000
MESSAGES = 600
BODY_BYTES = 1000
OVERRIDES = {"flushDiskType": "SYNC_FLUSH", "mappedFileSizeCommitLog": str(256 * 1024),
             "maxMessageSize": str(64 * 1024)}


def _body(index: int) -> bytes:
    return (b"msg-%06d-" % index).ljust(BODY_BYTES, b"x")


def _send(client, index: int):
    properties = props.encode_properties({"WAIT": "true", "KEYS": f"key-{index}",
                                          "UNIQ_KEY": f"AC1100010000{index:020X}"})
    ext = {"a": "damage_producer", "b": TOPIC, "c": "TBW102", "d": "1", "e": "0", "f": "0",
           "g": "1700000000000", "h": "0", "i": properties, "j": "0", "k": "false", "m": "false"}
    response = client.invoke(create_request(RequestCode.SEND_MESSAGE_V2, ext, _body(index)),
                             TIMEOUT_MS)
    assert response.code == ResponseCode.SUCCESS, response.remark
    return int(response.ext_fields["queueOffset"])


def _send_many(broker, first: int, count: int) -> None:
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        for index in range(first, first + count):
            assert _send(client, index) == index


def _read_queue(broker) -> dict[int, bytes]:
    """queue offset -> body of every message pulled from queue 0 from offset 0."""
    found, queue_offset = {}, 0
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        while True:
            ext = {"consumerGroup": "damage_consumer", "topic": TOPIC, "queueId": "0",
                   "queueOffset": str(queue_offset), "maxMsgNums": "32", "sysFlag": "4",
                   "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
                   "subVersion": "0", "expressionType": "TAG"}
            response = client.invoke(create_request(RequestCode.PULL_MESSAGE, ext), TIMEOUT_MS)
            if response.code == ResponseCode.PULL_NOT_FOUND:
                return found
            assert response.code in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY), \
                (response.code, response.remark)
            data, position = bytes(response.body or b""), 0
            while position < len(data):
                status, size = record.check(data, position, len(data), True)
                assert status == record.RECORD_OK, "a damaged record was served"
                message = record.decode(data, position)
                # A pull from queue_offset serves records of that offset on, never older ones
                # (a stale consume-queue unit would serve an old record again).
                assert message.queue_offset >= queue_offset, (message.queue_offset, queue_offset)
                found[message.queue_offset] = bytes(message.body)
                position += size
            next_offset = int(response.ext_fields["nextBeginOffset"])
            assert next_offset > queue_offset
            queue_offset = next_offset


def _commitlog_files(broker) -> list[str]:
    """The CommitLog files holding records (after a kill -9 the files the allocator made
    ready ahead of the writer are still there, empty: recovery deletes them)."""
    directory = os.path.join(broker.store_dir, "commitlog")
    paths = [os.path.join(directory, name) for name in sorted(os.listdir(directory))]
    while paths and not _record_positions(paths[-1]):
        paths.pop()
    return paths


def _file_bytes(broker) -> dict[str, bytes]:
    found = {}
    for path in _commitlog_files(broker):
        with open(path, "rb") as file:
            found[path] = file.read()
    return found


def _record_positions(path: str) -> list[tuple[int, int]]:
    with open(path, "rb") as file:
        data = file.read()
    positions, position = [], 0
    while True:
        status, size = record.check(data, position, len(data), True)
        if status != record.RECORD_OK:
            return positions
        positions.append((position, size))
        position += size


def _flip_bit(path: str, file_position: int, rand) -> None:
    with open(path, "r+b") as file:
        file.seek(file_position)
        byte = file.read(1)[0]
        file.seek(file_position)
        file.write(bytes([byte ^ (1 << rand.randrange(8))]))


def _filled_broker(tmp_path, stop: str, extra=None) -> StandaloneBroker:
    broker = StandaloneBroker(tmp_path, dict(OVERRIDES, **(extra or {})))
    broker.start()
    _send_many(broker, 0, MESSAGES)
    if stop == "clean":
        assert broker.stop() == 0
    else:
        broker.kill()
    return broker


def _damage_an_old_record(broker, which_file: str, field: str, rand) -> tuple[str, int, int]:
    """Flip one bit; returns (file, file position of the record, its queue offset)."""
    files = _commitlog_files(broker)
    assert len(files) >= 3, files
    path = files[0] if which_file == "first" else files[-1]
    positions = _record_positions(path)
    assert len(positions) > 100, len(positions)
    position, size = positions[len(positions) // 3] if which_file == "first" else positions[0]
    with open(path, "rb") as file:
        file.seek(position)
        data = file.read(size)
    queue_offset = record.decode(data, 0).queue_offset
    if field == "body":
        body_start = layout.RECORD_BODY_LENGTH_POSITION_V4 + 4
        _flip_bit(path, position + body_start + rand.randrange(BODY_BYTES), rand)
    else:
        _flip_bit(path, position + 1, rand)       # TOTALSIZE: the record no longer parses
    return path, position, queue_offset


def _start_refused(broker) -> str:
    offset = len(broker._log_text())
    with pytest.raises(RuntimeError, match="exited with 1"):
        broker.start()
    return broker._log_text()[offset:]


@pytest.mark.parametrize("stop,which_file", [("clean", "first"), ("clean", "last"),
                                             ("kill", "last")])
@pytest.mark.parametrize("field", ["body", "size"])
def test_flipped_bit_in_an_old_record_stops_recovery(tmp_path, rand, stop, which_file, field):
    broker = _filled_broker(tmp_path, stop)
    try:
        path, position, queue_offset = _damage_an_old_record(broker, which_file, field, rand)
        damaged_bytes = _file_bytes(broker)
        base = int(os.path.basename(path))
        log = _start_refused(broker)
        assert path in log and f"physical offset {base + position}" in log, log[-3000:]
        assert "Traceback" not in log, log[-3000:]
        # Nothing was truncated: every byte after the damage is still on disk.
        assert _file_bytes(broker) == damaged_bytes
        # The operator's choice: skip the damaged record, keep everything else.
        with open(broker.conf_path, "a", encoding="utf-8") as conf:
            conf.write("skipDamagedRecordsOnRecover=true\n")
        offset = len(broker._log_text())
        broker.start()
        tail = broker._log_text()[offset:]
        assert "skipped" in tail and f"physical offset {base + position}" in tail, tail[-3000:]
        found = _read_queue(broker)
        expected = {index: _body(index) for index in range(MESSAGES) if index != queue_offset}
        assert found == expected
        _send_many(broker, MESSAGES, 20)
        found = _read_queue(broker)
        assert len(found) == MESSAGES - 1 + 20 and found[MESSAGES + 19] == _body(MESSAGES + 19)
        assert broker.stop() == 0
    finally:
        broker.kill()


def _expect_everything(broker, offset: int, rebuilt: str) -> None:
    tail = broker._log_text()[offset:]
    assert rebuilt in tail, tail[-3000:]
    assert "Traceback" not in tail, tail[-3000:]
    assert _read_queue(broker) == {index: _body(index) for index in range(MESSAGES)}
    _send_many(broker, MESSAGES, 5)


@pytest.mark.parametrize("garbage", ["random", "stale_units"])
def test_garbage_in_a_consume_queue_tail_is_rebuilt(tmp_path, rand, garbage):
    broker = _filled_broker(tmp_path, "clean")
    try:
        queue_dir = os.path.join(broker.store_dir, "consumequeue", TOPIC, "0")
        name = sorted(os.listdir(queue_dir))[-1]
        with open(os.path.join(queue_dir, name), "r+b") as file:
            if garbage == "random":
                tail = rand.randbytes(40 * layout.CQ_STORE_UNIT_SIZE)
            else:
                # Plausible units (inside the CommitLog, positive sizes) that are not this
                # offset's: recovery that only checks phy >= 0 and size > 0 keeps them.
                tail = file.read(40 * layout.CQ_STORE_UNIT_SIZE)
            file.seek(MESSAGES * layout.CQ_STORE_UNIT_SIZE)
            file.write(tail)
        offset = len(broker._log_text())
        broker.start()
        _expect_everything(broker, offset, "rebuilt from the CommitLog")
        assert broker.stop() == 0
    finally:
        broker.kill()


def _query_by_key(broker, key: str) -> int:
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        response = client.invoke(create_request(RequestCode.QUERY_MESSAGE, {
            "topic": TOPIC, "key": key, "maxNum": "32", "beginTimestamp": "0",
            "endTimestamp": str(1 << 62)}), TIMEOUT_MS)
        assert response.code == ResponseCode.SUCCESS, (response.code, response.remark)
        return len(bytes(response.body or b""))


@pytest.mark.parametrize("stop", ["clean", "kill"])
def test_truncated_index_file_is_rebuilt(tmp_path, stop):
    broker = _filled_broker(tmp_path, stop)
    try:
        index_dir = os.path.join(broker.store_dir, "index")
        for name in os.listdir(index_dir):
            path = os.path.join(index_dir, name)
            os.truncate(path, os.path.getsize(path) // 2)
        offset = len(broker._log_text())
        broker.start()
        _expect_everything(broker, offset, "rebuilt from the CommitLog")
        for index in random.Random(7).sample(range(MESSAGES), 10):
            assert _query_by_key(broker, f"key-{index}") > 0
        assert broker.stop() == 0
    finally:
        broker.kill()


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_damaged_checkpoint_is_rebuilt(tmp_path, rand, damage):
    broker = _filled_broker(tmp_path, "kill")
    try:
        path = os.path.join(broker.store_dir, "checkpoint")
        if damage == "truncated":
            os.truncate(path, 10)
        else:
            with open(path, "r+b") as file:
                file.write(rand.randbytes(40))
        offset = len(broker._log_text())
        broker.start()
        _expect_everything(broker, offset, "checkpoint")
        assert broker.stop() == 0
    finally:
        broker.kill()


def _runtime_info(broker) -> dict[str, str]:
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        answer = client.invoke(create_request(RequestCode.GET_BROKER_RUNTIME_INFO, {}),
                               TIMEOUT_MS)
    return fastjson.loads(answer.body)["table"]


def _pull_answers(broker, queue_offset: int):
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        ext = {"consumerGroup": "damage_consumer", "topic": TOPIC, "queueId": "0",
               "queueOffset": str(queue_offset), "maxMsgNums": "32", "sysFlag": "4",
               "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
               "subVersion": "0", "expressionType": "TAG"}
        return client.invoke(create_request(RequestCode.PULL_MESSAGE, ext), TIMEOUT_MS)


def _read_around_damage(broker) -> tuple[dict[int, bytes], list]:
    """Every message of queue 0, as a consumer reads it; the PULL_OFFSET_MOVED answers met."""
    found, moved, queue_offset = {}, [], 0
    while True:
        response = _pull_answers(broker, queue_offset)
        if response.code == ResponseCode.PULL_NOT_FOUND:
            return found, moved
        next_offset = int(response.ext_fields["nextBeginOffset"])
        if response.code == ResponseCode.PULL_OFFSET_MOVED:
            moved.append((queue_offset, next_offset, response.remark))
        else:
            assert response.code == ResponseCode.SUCCESS, (response.code, response.remark)
            data, position = bytes(response.body), 0
            while position < len(data):
                status, size = record.check(data, position, len(data), True)
                assert status == record.RECORD_OK, "a damaged record was served"
                message = record.decode(data, position)
                found[message.queue_offset] = bytes(message.body)
                position += size
        assert next_offset > queue_offset
        queue_offset = next_offset


def _wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout_s} s: {what}")


def test_damage_outside_the_scan_window_is_found_answered_and_stops_the_next_start(tmp_path):
    """Issue #22: a clean start scans the last three CommitLog files, so damage in an older
    one was never seen and its record was served as it was. Now the scrubber finds it while
    the broker runs (brokerStatus, pybroker prof), a pull of it answers PULL_OFFSET_MOVED to
    the next offset and serves every other message, and the next start refuses until the
    operator chooses (skipDamagedRecordsOnRecover)."""
    metrics_port = free_port()
    extra = {"storeScrubRateMegabytesPerSecond": "64", "storeScrubPassIntervalSeconds": "0",
             "metricsExporterType": "PROM", "metricsPromExporterHost": "127.0.0.1",
             "metricsPromExporterPort": str(metrics_port)}
    broker = _filled_broker(tmp_path, "clean", extra)
    try:
        files = _commitlog_files(broker)
        assert len(files) >= 3, files
        # A size-64-KiB-file store would keep its first file in the window: make 5+ files.
        broker.start()
        _send_many(broker, MESSAGES, MESSAGES)
        assert broker.stop() == 0
        files = _commitlog_files(broker)
        assert len(files) >= 5, files
        path = files[0]                          # outside the last three files
        position, size = _record_positions(path)[100]
        with open(path, "rb") as file:
            file.seek(position)
            queue_offset = record.decode(file.read(size), 0).queue_offset
        _flip_bit(path, position + layout.RECORD_BODY_LENGTH_POSITION_V4 + 4 + 10,
                  random.Random(3))
        physical_offset = int(os.path.basename(path)) + position
        broker.start()                            # start-up does not read it
        info = _wait_for(lambda: (lambda table: table if table.get("scrubDamagedRecords")
                                  == "1" else None)(_runtime_info(broker)), 60,
                         "brokerStatus reports the damaged record")
        assert path in info["scrubFindings"] and str(physical_offset) in info["scrubFindings"]
        sample = _prof_sample(broker)
        assert sample["positions"]["scrub_findings"] == 1
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                    timeout=10) as answer:
            metrics = answer.read().decode()
        assert any(line.startswith("pybroker_scrub_damage{") and 'file_kind="commitlog"' in line
                   and line.endswith(" 1.0") for line in metrics.splitlines()), metrics[-2000:]
        found, moved = _read_around_damage(broker)
        assert found == {index: _body(index) for index in range(2 * MESSAGES)
                         if index != queue_offset}
        assert [(q, n) for q, n, _ in moved] == [(queue_offset, queue_offset + 1)]
        assert str(physical_offset) in moved[0][2]
        assert int(_runtime_info(broker)["damagedRecordsRead"]) >= 1
        assert broker.stop() == 0
        log = _start_refused(broker)
        assert path in log and f"physical offset {physical_offset}" in log, log[-3000:]
        assert "skipDamagedRecordsOnRecover" in log and "Traceback" not in log
        with open(broker.conf_path, "a", encoding="utf-8") as conf:
            conf.write("skipDamagedRecordsOnRecover=true\n")
        broker.start()
        found, moved = _read_around_damage(broker)
        assert len(found) == 2 * MESSAGES - 1 and not moved
        assert broker.stop() == 0
    finally:
        broker.kill()


def _prof_sample(broker) -> dict:
    sampler = Sampler(attach_store(broker.store_dir))
    try:
        return sampler.sample()
    finally:
        sampler.close()
