"""`pybroker store verify [--repair-derived] STORE` lists every damaged range and says so by exit
status; --repair-derived rebuilds consume queues and index from the CommitLog.

Method: a real store in tmp_path (8 KiB CommitLog files, small queue files) written by
MessageStore and shut down; the command runs as an operator runs it (a subprocess of
``python -m pybroker``) on the clean store, after a body byte of an old record is changed,
after a consume-queue unit is made to point elsewhere, and while another process holds the
store's lock. The lines it prints must name each damaged file, file position and physical
offset; the repair must leave a store that verifies clean and serves every message.
"""
import os
import subprocess
import sys

import pytest

from pybroker.store import lock_file, paths
from pybroker.store.message_store import MessageStore
from pybroker.store.settings import StoreConfig
from tests.unit.store.test_scrub import (BODY_AT, COUNT, FILE_SIZE, TOPIC, encode,
                                         patch_commitlog, patch_unit)

pytestmark = pytest.mark.dataplane          # runs the command as a Python child

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


@pytest.fixture
def store(tmp_path):
    settings = StoreConfig(store_path_root_dir=str(tmp_path / "store"),
                           mapped_file_size_commit_log=FILE_SIZE,
                           mapped_file_size_consume_queue=64 * 20)
    records = []
    with MessageStore(settings) as writer:
        for index in range(COUNT):
            result = writer.put_messages(encode(index, index % 2), TOPIC, index % 2, 1, 0)
            records.append((result.physical_offset, result.queue_offset, index % 2))
    return settings, records


def verify(settings, *options) -> tuple[int, list[str]]:
    completed = subprocess.run(
        [sys.executable, "-m", "pybroker", "store", "verify", *options,
         settings.store_path_root_dir], capture_output=True, text=True, timeout=120,
        env=dict(os.environ, PYTHONPATH=ROOT))
    return completed.returncode, completed.stdout.splitlines()


def test_a_clean_store_verifies_clean(store):
    settings, _ = store
    status, lines = verify(settings)
    assert status == 0, lines
    assert lines[-1].endswith("0 damaged place(s), 0 in the CommitLog"), lines


def test_a_damaged_record_is_listed_and_the_exit_status_says_so(store):
    settings, records = store
    physical_offset = records[33][0]
    patch_commitlog(settings, physical_offset + BODY_AT, b"\x5a")
    status, lines = verify(settings)
    assert status == 1, lines
    damaged = [line for line in lines if line.startswith("damaged:")]
    assert len(damaged) == 1, lines
    assert f"physical offset {physical_offset} to {records[34][0]}" in damaged[0]
    assert os.path.join("commitlog", "%020d" % 0) in damaged[0]
    # The CommitLog is damaged: derived files are not touched.
    queue_files = sorted(os.listdir(paths.consume_queue_root(settings.store_path_root_dir)))
    status, lines = verify(settings, "--repair-derived")
    assert status == 1 and "not rebuilt" in lines[-1]
    assert sorted(os.listdir(paths.consume_queue_root(settings.store_path_root_dir))) == \
        queue_files


def test_a_damaged_unit_is_listed_and_repair_derived_rebuilds_it(store):
    settings, records = store
    physical_offset, queue_offset, queue_id = records[40]
    other = records[300][0]
    unit_file = patch_unit(settings, queue_id, queue_offset, other.to_bytes(8, "big"))
    status, lines = verify(settings)
    assert status == 1
    damaged, = [line for line in lines if line.startswith("damaged:")]
    assert unit_file in damaged and f"queue offset {queue_offset}" in damaged
    status, lines = verify(settings, "--repair-derived")
    assert status == 1 and "rebuilt from the CommitLog" in lines[-1], lines
    status, lines = verify(settings)
    assert status == 0, lines
    with MessageStore(settings) as reopened:
        result = reopened.get_messages("g", TOPIC, queue_id, queue_offset, 1)
        with result:
            assert result.status.name == "FOUND"
            assert int.from_bytes(result.buffers[0][28:36], "big") == physical_offset


def test_a_store_in_use_is_not_verified(store):
    settings, _ = store
    with lock_file.StoreLock(settings.store_path_root_dir):
        status, lines = verify(settings)
    assert status == 2 and "stop the broker first" in lines[-1], lines
    status, lines = verify(StoreConfig(store_path_root_dir="/nonexistent/store"))
    assert status == 2
