"""The appender's loop follows every store change although it calls check_store_changes only
when its inline test says something could have changed (docs/architecture/data-plane.md,
"The appender's per-drain Python").

Method: a real data plane in forked processes (appender, dispatcher, flusher) over a store in
tmp_path; this process puts through a RingPutter as a remoting worker does and changes the
control block as the dispatcher's cleanup and the supervisor do. The appender is forked with
its disk look due once an hour instead of once a second, so that nothing but the inline test
can make it see a change: a test that passed only because the once-a-second look came round
would pass by luck. The look itself: an appender alone (no cleanup to publish the flag) under a
warning ratio below the disk's use refuses the first put.
"""
import asyncio
import functools
import pathlib
import time

import pytest

from pybroker._fast import record as record_codec
from pybroker._testbase.local_data_plane import LocalDataPlane
from pybroker.config import StoreConfig
from pybroker.proc import appender
from pybroker.proc.ring_putter import RingPutter
from pybroker.proc.topic_deletion import TopicDeletionRequests, requests_path
from pybroker.store.control_block import BrokerState
from pybroker.store.disk_space import SpaceGuard, used_ratio
from pybroker.store.status import PutStatus

pytestmark = pytest.mark.dataplane
HOST = bytes([127, 0, 0, 1])
PORT = 10911
FILE_SIZE = 128 * 1024
BODY = b"b" * 1000


def _plane(tmp_path, monkeypatch, **settings) -> LocalDataPlane:
    # The forked appender inherits this: its own disk look at the start, then only on a new
    # file.
    monkeypatch.setattr(appender, "SpaceGuard", functools.partial(SpaceGuard, interval_s=3600))
    return LocalDataPlane(tmp_path / "run", StoreConfig(
        store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=FILE_SIZE,
        mapped_file_size_consume_queue=256 * 20, max_hash_slot_num=256, max_index_num=2048,
        **settings), 1, 1 << 16, 256)


@pytest.fixture
def plane(tmp_path, monkeypatch):
    made = _plane(tmp_path, monkeypatch)
    made.start_workers()
    yield made
    try:
        assert made.stop_workers() == [0, 0, 0]
    finally:
        made.close()


def _put(plane: LocalDataPlane, topic: str, count: int = 1) -> list:
    """``count`` puts of one record each, one after the other; their PutResults."""
    async def main():
        putter = RingPutter(plane.rings[0].ring, plane.completions[0].ring, plane.control,
                            plane.wakes.appender, 0, (HOST, PORT), False, 5000)
        putter.start(plane.wakes.workers[0])
        try:
            results = []
            for _ in range(count):
                size = record_codec.encoded_size(len(BODY), len(topic.encode()), 0, 0)
                record = bytearray(size)
                record_codec.encode_into(record, 0, topic.encode(), 0, 0, BODY, b"", 0,
                                         1_700_000_000_000, HOST, 4242, HOST, PORT)
                results.append(await asyncio.wait_for(putter.put(record, topic, 0, 1, 0, True),
                                                      5))
            return results
        finally:
            putter.stop()
    return asyncio.run(main())


def _mapped_paths(pid: int) -> set[str]:
    with open(f"/proc/{pid}/maps") as maps:
        return {line.split(None, 5)[5].strip() for line in maps if len(line.split()) == 6}


def _until(condition, deadline_s: float = 10) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, "the appender did not follow the change"
        time.sleep(0.005)


@pytest.mark.timeout(60)
def test_disk_full_flag_set_between_two_drains_refuses_the_next_put(plane):
    assert [r.status for r in _put(plane, "Full")] == [PutStatus.PUT_OK]
    plane.control.disk_full = 1             # the dispatcher's cleanup found the disk full
    assert [r.status for r in _put(plane, "Full", 2)] == [PutStatus.SERVICE_NOT_AVAILABLE] * 2
    plane.control.disk_full = 0
    assert [r.status for r in _put(plane, "Full")] == [PutStatus.PUT_OK]


@pytest.mark.timeout(60)
def test_min_offset_raised_between_two_drains_forgets_the_files_below(plane):
    results = _put(plane, "Rolled", 2 * FILE_SIZE // len(BODY) + 10)
    assert results[-1].physical_offset >= 2 * FILE_SIZE           # three files written
    # A roll happened at each file's end: no record crosses one.
    assert all(r.physical_offset // FILE_SIZE == (r.physical_offset + r.wrote_bytes - 1)
               // FILE_SIZE for r in results)
    commitlog = pathlib.Path(plane.settings.commitlog_dir)
    first, second = (str(commitlog / f"{base:020d}") for base in (0, FILE_SIZE))
    pid = plane.pids["appender"]
    assert {first, second} <= _mapped_paths(pid)
    # The cleanup deleted the first file and published the new min offset; the next put
    # (no new file: only the min offset changed) wakes the appender.
    plane.control.commitlog_min_offset = FILE_SIZE
    assert [r.status for r in _put(plane, "Rolled")] == [PutStatus.PUT_OK]
    mapped = _mapped_paths(pid)
    assert first not in mapped and second in mapped


@pytest.mark.timeout(60)
def test_topic_deletion_requested_between_two_drains_restarts_its_queue(plane):
    assert [r.queue_offset for r in _put(plane, "Gone", 3)] == [0, 1, 2]
    path = pathlib.Path(requests_path(plane.root))
    path.parent.mkdir(parents=True, exist_ok=True)      # the supervisor's run directory
    requests = TopicDeletionRequests(str(path), plane.control, plane.wakes.appender)
    assert asyncio.run(requests.delete_topics(["Gone"], timeout_s=10)) is True
    _until(lambda: plane.control.topic_deletion_appended == 1)
    assert [r.queue_offset for r in _put(plane, "Gone", 2)] == [0, 1]


@pytest.mark.timeout(60)
def test_the_appenders_own_first_look_at_the_disk_refuses_puts(tmp_path, monkeypatch):
    used_percent = int(used_ratio(str(tmp_path)) * 100)
    if used_percent < 3:
        pytest.skip(f"disk only {used_percent}% used: cannot go above a warning ratio")
    made = _plane(tmp_path, monkeypatch, disk_space_warning_level_ratio=used_percent - 2)
    try:
        # The appender alone: no dispatcher's cleanup publishes the disk-full flag.
        made.fork("appender", appender.run_appender, made.settings, [made.rings[0].ring],
                  [made.completions[0].ring], made.control, made.wakes)
        assert [r.status for r in _put(made, "Full")] == [PutStatus.SERVICE_NOT_AVAILABLE]
        assert made.control.disk_full == 0
        made.control.broker_state = int(BrokerState.STOPPING)
        made.wakes.appender.signal()
        assert made.wait("appender", 20) == 0
    finally:
        made.close()
