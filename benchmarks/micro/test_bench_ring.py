"""What a record costs through the shared-memory rings, in one process and across processes, and
what one wake-up costs here.

Method: pytest-benchmark over (1) reserve + write + commit + peek + release of one 128 B record,
(2) a batch of 256 such records put and committed, then drained with one peek/iter/release,
(3) completions pushed, committed and drained 64 at a time, (4) a forked consumer draining
200k records of 128 B sent in batches of 64 with eventfd wake-ups (records/s in extra_info),
(5) ping-pong round trips through both rings with the sleep-flag protocol, next to a bare
eventfd ping-pong (microseconds per round trip in extra_info).
"""
import multiprocessing
import os
import select
import statistics
import time

import pytest

from pybroker._fast.ring import ByteRing, CompletionRing
from pybroker.proc import shared
from pybroker.proc.wake import ConsumerSide, ProducerSide, Sleeper, WakeFd

FORK = multiprocessing.get_context("fork")
PAYLOAD = bytes(range(128))
CROSS_RECORDS = 200_000
CROSS_BATCH = 64
ROUND_TRIPS = 2000
WAIT_MS = 5000


def drain_until_empty(consumer, walk):
    """Peek and release until empty (a run stops at the wrap); returns records seen."""
    total = 0
    while True:
        count, start, end = consumer.peek_batch()
        if walk:
            consumer.iter_records(start, end)
        consumer.release(end)
        if count == 0:
            return total
        total += count


def byte_ring_pair(capacity_bytes):
    region = bytearray(ByteRing.region_size(capacity_bytes))
    return ByteRing(region, True, capacity_bytes), ByteRing(region, False)


def test_one_record_round(benchmark):
    producer, consumer = byte_ring_pair(1 << 16)
    data = producer.data()

    def one_record():
        offset = producer.reserve(128)
        data[offset:offset + 128] = PAYLOAD
        producer.commit()
        count, start, end = consumer.peek_batch()
        consumer.release(end)
        return count

    assert one_record() == 1
    benchmark.group = "ring per record 128 B"
    benchmark(one_record)


def test_batch_put_and_drain(benchmark):
    producer, consumer = byte_ring_pair(1 << 16)

    def batch():
        for _ in range(256):
            producer.put(PAYLOAD)
        producer.commit()
        return drain_until_empty(consumer, True)

    assert batch() == 256
    benchmark.group = "ring batch of 256 x 128 B"
    benchmark(batch)


def test_batch_drain_only(benchmark):
    producer, consumer = byte_ring_pair(1 << 16)

    def fill():
        for _ in range(256):
            producer.put(PAYLOAD)
        producer.commit()
        return (), {}

    def drain():
        assert drain_until_empty(consumer, False) == 256

    benchmark.group = "ring batch of 256 x 128 B"
    benchmark.pedantic(drain, setup=fill, rounds=2000, warmup_rounds=10)


def test_completions_64(benchmark):
    region = bytearray(CompletionRing.region_size(256))
    producer, consumer = CompletionRing(region, True, 256), CompletionRing(region, False)
    entries = [(i, 0, 1, i * 200, i) for i in range(64)]

    def cycle():
        producer.push_many(entries)
        producer.commit()
        return len(consumer.drain())

    assert cycle() == 64
    benchmark.group = "completion ring 64 per drain"
    benchmark(cycle)


def run_drainer(path, total, space_fd, work_fd):
    consumer = shared.attach_byte_ring(path).ring
    sleeper = Sleeper(work_fd, [ConsumerSide(consumer)])
    received = 0
    while received < total:
        count, start, end = consumer.peek_batch()
        if count == 0:
            if not sleeper.sleep(WAIT_MS):
                os._exit(3)
            continue
        received += count
        if consumer.release(end):
            space_fd.signal()


def send_all(producer, total, space_fd, work_fd):
    sleeper = Sleeper(space_fd, [ProducerSide(producer)])
    data = producer.data()
    sent = 0
    while sent < total:
        batch = min(CROSS_BATCH, total - sent)
        done = 0
        while done < batch:
            offset = producer.reserve(128)
            if offset < 0:
                if producer.commit():
                    work_fd.signal()
                if not sleeper.sleep(WAIT_MS):
                    raise AssertionError("producer lost a wake-up")
                continue
            data[offset:offset + 128] = PAYLOAD
            done += 1
        sent += batch
        if producer.commit():
            work_fd.signal()


def test_cross_process_throughput(benchmark, tmp_path):
    path = str(tmp_path / "send.ring")
    space_fd, work_fd = WakeFd(), WakeFd()
    rates = []
    with shared.create_byte_ring(path, 1 << 20) as region:
        def run():
            drainer = FORK.Process(target=run_drainer,
                                   args=(path, CROSS_RECORDS, space_fd, work_fd))
            drainer.start()
            started = time.perf_counter()
            send_all(region.ring, CROSS_RECORDS, space_fd, work_fd)
            drainer.join(60)
            elapsed = time.perf_counter() - started
            assert drainer.exitcode == 0
            rates.append(CROSS_RECORDS / elapsed)

        benchmark.group = "ring across processes"
        benchmark.pedantic(run, rounds=3, iterations=1)
    rates.sort()
    benchmark.extra_info["records_per_s_median"] = round(rates[len(rates) // 2])
    benchmark.extra_info["signals_to_consumer"] = work_fd.signals_sent
    space_fd.close()
    work_fd.close()


def run_ponger(paths, rounds, work_fd, done_fd):
    requests = shared.attach_byte_ring(paths[0]).ring
    completions = shared.attach_completion_ring(paths[1]).ring
    sleeper = Sleeper(work_fd, [ConsumerSide(requests)])
    answered = 0
    while answered < rounds:
        count, start, end = requests.peek_batch()
        if count == 0:
            if not sleeper.sleep(WAIT_MS):
                os._exit(3)
            continue
        for _ in range(count):
            completions.push(answered, 0, 1, 0, answered)
            answered += 1
        requests.release(end)
        if completions.commit():
            done_fd.signal()


def ping(requests, completions, sleeper, work_fd, rounds):
    for _ in range(rounds):
        requests.put(PAYLOAD)
        if requests.commit():
            work_fd.signal()
        while not completions.drain(1):
            if not sleeper.sleep(WAIT_MS):
                raise AssertionError("pinger lost a wake-up")


@pytest.mark.parametrize("kind", ["rings+flags", "bare eventfd"])
def test_wake_up_round_trip(benchmark, tmp_path, kind):
    paths = [str(tmp_path / "requests.ring"), str(tmp_path / "completions.ring")]
    work_fd, done_fd = WakeFd(), WakeFd()
    per_trip_us = []
    with shared.create_byte_ring(paths[0], 1 << 16) as requests, \
            shared.create_completion_ring(paths[1], 1024) as completions:
        def run():
            if kind == "bare eventfd":
                peer = FORK.Process(target=bare_ponger, args=(ROUND_TRIPS, work_fd, done_fd))
            else:
                peer = FORK.Process(target=run_ponger,
                                    args=(paths, ROUND_TRIPS, work_fd, done_fd))
            peer.start()
            started = time.perf_counter()
            if kind == "bare eventfd":
                bare_pinger(ROUND_TRIPS, work_fd, done_fd)
            else:
                sleeper = Sleeper(done_fd, [ConsumerSide(completions.ring)])
                ping(requests.ring, completions.ring, sleeper, work_fd, ROUND_TRIPS)
            per_trip_us.append((time.perf_counter() - started) / ROUND_TRIPS * 1e6)
            peer.join(60)
            assert peer.exitcode == 0

        benchmark.group = "wake-up round trip"
        benchmark.pedantic(run, rounds=3, iterations=1)
    # Of the rounds run: 3, or 1 under --benchmark-disable.
    benchmark.extra_info["round_trip_us_median"] = round(statistics.median(per_trip_us), 1)
    benchmark.extra_info["signals_sent"] = work_fd.signals_sent
    work_fd.close()
    done_fd.close()


def bare_pinger(rounds, work_fd, done_fd):
    poller = select.poll()
    poller.register(done_fd.fd, select.POLLIN)
    for _ in range(rounds):
        work_fd.signal()
        while not done_fd.consume():
            poller.poll(WAIT_MS)


def bare_ponger(rounds, work_fd, done_fd):
    poller = select.poll()
    poller.register(work_fd.fd, select.POLLIN)
    for _ in range(rounds):
        while not work_fd.consume():
            poller.poll(WAIT_MS)
        done_fd.signal()
