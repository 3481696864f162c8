"""A controller-mode slave's log cut survives a kill -9 at any point (apache/rocketmq#10666: Java
5.3.3 cuts in memory only, so the old tail is valid again after a restart).

Method: a real CommitLog of several files and an epoch file with entries past the cut point are
built in tmp_path; a truncation is requested as the slave's ha worker does. Every partial state
a kill can leave (request only; epochs cut; CommitLog cut but the request still there) is made
on disk and then the next start's step (apply_pending_truncation) is run; and the apply itself
is run in forked children killed with SIGKILL after seeded delays. Each time the result must be
the same: the request gone, no epoch starting at or after the cut, the CommitLog's files past
it deleted and its tail zeroed, and recovery of the store ending exactly at the cut.
"""
import os
import signal
import time

import pytest

from pybroker._fast import record as record_codec
from pybroker.store import paths
from pybroker.store.commitlog import CommitLog
from pybroker.store.epoch_file import EpochFile
from pybroker.store.replica import (ReplicaLog, apply_pending_truncation, pending_truncation,
                                    request_truncation)

FILE_SIZE = 16 * 1024
HOST = bytes([127, 0, 0, 1])
TOPIC = "CutTopic"


def encode(body: bytes) -> bytes:
    size = record_codec.encoded_size(len(body), len(TOPIC), 0, 0)
    buffer = bytearray(size)
    record_codec.encode_into(buffer, 0, TOPIC.encode(), 0, 0, body, b"", 0,
                             1_700_000_000_000, HOST, 5555, HOST, 10911)
    return bytes(buffer)


def build(root: str, rand) -> tuple[int, int]:
    """A CommitLog of ~3.5 files and epochs 1, 2, 3; returns (end, cut)."""
    commitlog = CommitLog(paths.commitlog_dir(root), FILE_SIZE)
    while commitlog.max_offset() < 3 * FILE_SIZE + FILE_SIZE // 2:
        body = bytes([rand.randrange(256)]) * rand.randrange(1, 900)
        assert commitlog.append_encoded(encode(body), TOPIC, 0, 1, 0,
                                        1_700_000_000_000).status.name == "PUT_OK"
    end = commitlog.max_offset()
    cut = ReplicaLog(commitlog).record_boundary_at_or_below(FILE_SIZE + FILE_SIZE // 3)
    commitlog.shutdown(0)
    epochs = EpochFile.load(paths.epoch_file_path(root))
    for epoch, start in ((1, 0), (2, cut - 1), (3, cut + 10), (4, 2 * FILE_SIZE)):
        assert epochs.append(epoch, start)
    request_truncation(root, cut)
    return end, cut


def apply(root: str):
    return apply_pending_truncation(root, paths.commitlog_dir(root), FILE_SIZE,
                                    paths.epoch_file_path(root))


def check(root: str, cut: int) -> None:
    assert pending_truncation(root) is None
    assert [(e.epoch, e.start_offset) for e in EpochFile.load(
        paths.epoch_file_path(root)).entries] == [(1, 0), (2, cut - 1)]
    commitlog = CommitLog(paths.commitlog_dir(root), FILE_SIZE)
    assert commitlog.load()
    try:
        assert [f.file_from_offset for f in commitlog.mapped_file_queue.mapped_files] == \
            [0, FILE_SIZE]
        assert commitlog.data_end() == cut          # nothing valid past the cut on disk
        tail = commitlog.mapped_file_queue.mapped_files[-1]
        view = tail.view(cut - FILE_SIZE, FILE_SIZE - (cut - FILE_SIZE))
        assert not any(view)
        view.release()
        tail.release()
    finally:
        commitlog.shutdown(0)


@pytest.mark.parametrize("stage", ["requested", "epochs-cut", "commitlog-cut"])
def test_every_interrupted_stage_completes(tmp_path, rand, stage):
    root = str(tmp_path)
    _, cut = build(root, rand)
    if stage in ("epochs-cut", "commitlog-cut"):
        EpochFile.load(paths.epoch_file_path(root)).truncate_suffix_by_offset(cut)
    if stage == "commitlog-cut":
        commitlog = CommitLog(paths.commitlog_dir(root), FILE_SIZE)
        assert commitlog.load()
        commitlog.truncate_dirty_files(cut)
        commitlog.shutdown(0)
    assert apply(root) == cut
    check(root, cut)
    assert apply(root) is None                      # done: nothing left to apply


@pytest.mark.dataplane
def test_kill_minus_nine_during_the_cut(tmp_path, rand):
    root = str(tmp_path)
    _, cut = build(root, rand)
    for attempt in range(12):
        pid = os.fork()
        if pid == 0:
            try:
                apply(root)
            finally:
                os._exit(0)
        time.sleep(rand.random() * 0.004 * attempt)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        if pending_truncation(root) is None:
            break
    apply(root)
    check(root, cut)
