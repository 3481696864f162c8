"""Store micro benchmarks: CommitLog append vs raw memcpy, read walk, recovery time per GiB.

Method: pytest-benchmark over real temp files. Append runs of 64 pre-encoded records (128 B and
1 KiB) and compare with copying the same bytes into the same kind of mapping; walk the records
back with the cross-file iterator; write ~256 MiB and time abnormal recovery (CRC on) over it,
extrapolated to one GiB. Figures go to ``extra_info``.
"""
import mmap
import os
import time

import pytest

from pybroker._fast import record as record_codec
from pybroker.store import recovery
from pybroker.store.commitlog import CommitLog

HOST = bytes([127, 0, 0, 1])
RUN_RECORDS = 64
FILE_SIZE = 64 * 1024 * 1024


def encoded_run(record_size: int) -> bytearray:
    body_length = record_size - record_codec.encoded_size(0, 9, 0, 0)
    one = bytearray(record_size)
    record_codec.encode_into(one, 0, b"BenchTopic"[:9], 0, 0, b"b" * body_length, b"", 0, 1,
                             HOST, 1, HOST, 2)
    return one * RUN_RECORDS


def append_rate(commitlog: CommitLog, run: bytearray, seconds: float) -> float:
    """Bytes per second appended through append_encoded."""
    deadline = time.perf_counter() + seconds
    wrote = 0
    start = time.perf_counter()
    while time.perf_counter() < deadline:
        result = commitlog.append_encoded(run, "BenchTopic", 0, RUN_RECORDS, 0, 1)
        wrote += result.wrote_bytes
    return wrote / (time.perf_counter() - start)


def memcpy_rate(path: str, run: bytearray, seconds: float) -> float:
    """Bytes per second of plain slice copies of ``run`` into a fresh mapping of FILE_SIZE."""
    with open(path, "w+b") as handle:
        os.posix_fallocate(handle.fileno(), 0, FILE_SIZE)
        mapping = mmap.mmap(handle.fileno(), FILE_SIZE)
    size, position, wrote = len(run), 0, 0
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < deadline:
        if position + size > FILE_SIZE:
            position = 0
        mapping[position:position + size] = run
        position += size
        wrote += size
    elapsed = time.perf_counter() - start
    mapping.close()
    return wrote / elapsed


@pytest.mark.parametrize("record_size", [128, 1024])
def test_append_vs_memcpy(benchmark, tmp_path, record_size):
    run = encoded_run(record_size)
    commitlog = CommitLog(str(tmp_path / "commitlog"), FILE_SIZE)
    benchmark.pedantic(commitlog.append_encoded, args=(run, "BenchTopic", 0, RUN_RECORDS, 0, 1),
                       rounds=2000, iterations=1)
    appended = append_rate(commitlog, run, 0.5)
    raw = memcpy_rate(str(tmp_path / "raw"), run, 0.5)
    benchmark.extra_info.update({
        "append_records_per_s": appended / record_size,
        "append_bytes_per_s": appended, "memcpy_bytes_per_s": raw,
        "append_to_memcpy_ratio": appended / raw})
    commitlog.destroy()


def test_read_walk(benchmark, tmp_path):
    commitlog = CommitLog(str(tmp_path), FILE_SIZE)
    run = encoded_run(1024)
    for _ in range(200):
        commitlog.append_encoded(run, "BenchTopic", 0, RUN_RECORDS, 0, 1)

    def walk() -> int:
        return sum(1 for _ in commitlog.record_iterator(0))

    assert benchmark(walk) == 200 * RUN_RECORDS
    benchmark.extra_info["records"] = 200 * RUN_RECORDS
    commitlog.destroy()


def test_recovery_per_gib(benchmark, figure, tmp_path):
    target_bytes = 256 * 1024 * 1024
    commitlog = CommitLog(str(tmp_path), FILE_SIZE)
    run = encoded_run(1024)
    while commitlog.max_offset() < target_bytes - FILE_SIZE // 2:
        commitlog.append_encoded(run, "BenchTopic", 0, RUN_RECORDS, 0, 1)
    written = commitlog.max_offset()
    commitlog.flush()
    commitlog.shutdown(0)

    def recover() -> int:
        reopened = CommitLog(str(tmp_path), FILE_SIZE)
        reopened.load()
        result = recovery.recover_abnormally(reopened, 0)   # scans everything, CRC on
        reopened.shutdown(0)
        return result.valid_end_offset

    assert benchmark.pedantic(recover, rounds=3, iterations=1) == written
    benchmark.extra_info["scanned_bytes"] = written
    figure("seconds_per_gib", lambda seconds: seconds * (1 << 30) / written)
