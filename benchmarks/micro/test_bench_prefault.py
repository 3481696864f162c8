"""Appender CPU per fresh page: fallocated files (the old default) vs sparse files, alone and
with the flusher's pre-fault window (pybroker/store/prefault.py) running in another process.

Method: one writer appends runs of 64 pre-encoded 1 KiB records into fresh 64 MiB CommitLog
files at a paced 40 MB/s (a busy broker, not a memcpy race) and measures its own CPU time
(``time.thread_time``) per 4 KiB of CommitLog written; the helper process, when present, maps
the same files read-write and calls ``PrefaultWindow.advance`` with the writer's position every
500 ms, as the ASYNC_FLUSH flusher does. One round per case; compare the cases within one run
and repeat the run (the box is shared and noisy). Figures in ``extra_info``.
"""
import mmap
import os
import signal
import time

import pytest

from pybroker.store import mapped_file as mapped_file_module
from pybroker.store.commitlog import CommitLog
from pybroker.store.prefault import PrefaultWindow

from benchmarks.micro.test_bench_store import RUN_RECORDS, encoded_run

FILE_SIZE = 64 << 20
FILES = 2
RATE_BYTES_PER_S = 40 << 20
FLUSHER_INTERVAL_S = 0.5
PAGE = mmap.PAGESIZE


def _helper(store_path: str, position: mmap.mmap) -> None:
    """The flusher's part: follow the writer's position, keep the window ahead."""
    commitlog = CommitLog(store_path, FILE_SIZE)
    window = None
    while True:
        commitlog.refresh()
        written = int.from_bytes(position[:8], "little")
        if window is None:
            window = PrefaultWindow(commitlog, written)
        window.advance(written)
        time.sleep(FLUSHER_INTERVAL_S)


def _write(commitlog: CommitLog, run: bytearray, position: mmap.mmap) -> float:
    """Append FILES files' worth at the paced rate; returns writer CPU µs per page written."""
    total = FILES * FILE_SIZE - len(run)
    wrote, cpu = 0, 0.0
    started = time.monotonic()
    while wrote < total:
        before = time.thread_time()
        result = commitlog.append_encoded(run, "BenchTopic", 0, RUN_RECORDS, 0, 1)
        cpu += time.thread_time() - before
        wrote += result.wrote_bytes
        position[:8] = commitlog.max_offset().to_bytes(8, "little")
        ahead_s = started + wrote / RATE_BYTES_PER_S - time.monotonic()
        if ahead_s > 0:
            time.sleep(ahead_s)
    return cpu * 1e6 / (wrote / PAGE)


@pytest.mark.parametrize("case", ["fallocate", "sparse", "sparse+prefault"])
def test_bench_append_cpu_per_fresh_page(benchmark, tmp_path, monkeypatch, case):
    allocation = case.split("+")[0]
    monkeypatch.setattr(mapped_file_module, "DEFAULT_ALLOCATION", allocation)
    store_path = str(tmp_path / "commitlog")
    commitlog = CommitLog(store_path, FILE_SIZE, allocation=allocation)
    commitlog.mapped_file_queue.last_mapped_file(0)
    position = mmap.mmap(-1, 8)
    helper = None
    if case.endswith("+prefault"):
        helper = os.fork()
        if helper == 0:
            try:
                _helper(store_path, position)
            finally:
                os._exit(1)
    figures = {}
    try:
        run = encoded_run(1024)
        benchmark.pedantic(lambda: figures.update(cpu_us_per_page=_write(commitlog, run,
                                                                         position)),
                           rounds=1, iterations=1)
    finally:
        if helper:
            os.kill(helper, signal.SIGKILL)
            os.waitpid(helper, 0)
        commitlog.destroy()
    benchmark.extra_info.update(figures)
