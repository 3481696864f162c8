"""Cross-process put throughput: RingPutter producers -> send rings -> appender (+ dispatcher,
flusher), 128 B bodies, ASYNC_FLUSH and SYNC_FLUSH, one and two producer processes.

Method: real forked processes over real shared rings, control block and a store in tmp_path
(64 MiB CommitLog files, index off). Each producer keeps 64 puts in
flight and times its own run; the rate is all messages over the slowest producer's time. The
appender's counters give the mean records per drain (group commit size). One bounded round per
case (each run is seconds long and noisy: compare cases within one run). Figures in extra_info.
"""
import asyncio
import json
import time

import pytest

from pybroker._fast import record as record_codec
from pybroker._testbase.local_data_plane import LocalDataPlane
from pybroker.config import FlushDiskType, StoreConfig
from pybroker.proc.ring_putter import RingPutter
from pybroker.store.control_block import APPENDER

HOST = bytes([127, 0, 0, 1])
TOPIC = "BenchTopic"
QUEUES = 8
IN_FLIGHT = 64
MESSAGES = {"ASYNC_FLUSH": 100_000, "SYNC_FLUSH": 50_000}
DEADLINE_S = 120


def _produce(ring, completions, control, wakes, slot, count, sync, result_path):
    records = []
    for queue_id in range(QUEUES):
        size = record_codec.encoded_size(128, len(TOPIC), 0, 0)
        buffer = bytearray(size)
        record_codec.encode_into(buffer, 0, TOPIC.encode(), queue_id, 0, b"\xab" * 128, b"",
                                 0, 1, HOST, 1, HOST, 10911)
        records.append(bytes(buffer))

    async def main():
        putter = RingPutter(ring, completions, control, wakes.appender, slot, (HOST, 10911),
                            sync, 10_000)
        putter.start(wakes.workers[slot])
        next_number = iter(range(count))
        statuses = set()

        async def sender():
            for number in next_number:
                queue_id = number % QUEUES
                result = await putter.put(records[queue_id], TOPIC, queue_id, 1, 0, True)
                statuses.add(result.status.name)
        started = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(IN_FLIGHT)))
        elapsed = time.perf_counter() - started
        putter.stop()
        with open(result_path, "w") as output:
            json.dump({"elapsed_s": elapsed, "statuses": sorted(statuses)}, output)
    asyncio.run(main())


def _run_plane(tmp_path, producers: int, flush_disk_type: str) -> dict:
    settings = StoreConfig(store_path_root_dir=str(tmp_path / "store"),
                           mapped_file_size_commit_log=64 << 20,
                           flush_disk_type=FlushDiskType(flush_disk_type),
                           message_index_enable=False)
    plane = LocalDataPlane(tmp_path / "run", settings, producers, 1 << 22, 1024)
    try:
        plane.start_workers()
        count = MESSAGES[flush_disk_type] // producers
        paths = [str(tmp_path / f"result-{i}.json") for i in range(producers)]
        sync = flush_disk_type == "SYNC_FLUSH"
        for i in range(producers):
            plane.fork(f"producer-{i}", _produce, plane.rings[i].ring, plane.completions[i].ring,
                       plane.control, plane.wakes, i, count, sync, paths[i])
        producer_codes = [plane.wait(f"producer-{i}", DEADLINE_S) for i in range(producers)]
        codes = plane.stop_workers(30)
        assert codes == [0, 0, 0] and producer_codes == [0] * producers
        results = []
        for path in paths:
            with open(path) as source:
                results.append(json.load(source))
        assert all(result["statuses"] == ["PUT_OK"] for result in results)
        counters = plane.control.worker(APPENDER.slot)
        elapsed = max(result["elapsed_s"] for result in results)
        return {"messages": count * producers, "elapsed_s": round(elapsed, 3),
                "msgs_per_s": round(count * producers / elapsed),
                "records_per_drain": round(counters.appends / max(counters.batches, 1), 2),
                "appender_wakeups": counters.wakeups}
    finally:
        plane.close()


@pytest.mark.parametrize("flush_disk_type", ["ASYNC_FLUSH", "SYNC_FLUSH"])
@pytest.mark.parametrize("producers", [1, 2])
def test_bench_cross_process_put(benchmark, tmp_path, producers, flush_disk_type):
    figures = {}

    def run():
        figures.update(_run_plane(tmp_path, producers,
                                  flush_disk_type))
    benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update(figures)
