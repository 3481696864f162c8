"""The shared-memory rings deliver every record and completion in order exactly once, refuse when
full instead of overwriting, and reject impossible cursors and bad arguments with clear errors.

Method: random operation sequences checked against a plain-Python FIFO oracle in one process
(bytearray and real mmap regions, creator and attacher objects on the same region); corrupted
shared words; and real forked producer and consumer processes that pass N records of random
sizes through a small ring (many wraps, constant back-pressure) with eventfd wake-ups, the
consumer checking every byte, under a deadline that fails the test.
"""
import collections
import mmap
import multiprocessing
import os
import time

import pytest

from pybroker._fast import ring as ring_module
from pybroker._fast.ring import ByteRing, CompletionRing, RingCorruptError
from pybroker.proc import shared
from pybroker.proc.wake import ConsumerSide, ProducerSide, Sleeper, WakeFd

FORK = multiprocessing.get_context("fork")
WAIT_MS = 5000          # a blocked side that sees nothing for this long has lost a wake-up
DEADLINE_S = 60         # the whole cross-process exchange must finish within this


def make_pair(capacity_bytes: int):
    region = bytearray(ByteRing.region_size(capacity_bytes))
    return ByteRing(region, True, capacity_bytes), ByteRing(region, False), region


def drain_all(consumer: ByteRing) -> list[bytes]:
    records = []
    while True:
        count, start, end = consumer.peek_batch()
        if count == 0:
            consumer.release(end)
            return records
        data = consumer.data()
        records += [bytes(data[o:o + n]) for o, n in consumer.iter_records(start, end)]
        consumer.release(end)


def test_region_layout_and_sizes():
    assert ring_module.RING_HEADER_BYTES == 5 * ring_module.RING_CACHE_LINE_BYTES
    offsets = [ring_module.RING_MAGIC_OFFSET, ring_module.RING_PRODUCER_CURSOR_OFFSET,
               ring_module.RING_CONSUMER_CURSOR_OFFSET, ring_module.RING_CONSUMER_SLEEPING_OFFSET,
               ring_module.RING_PRODUCER_SLEEPING_OFFSET]
    # Every word that changes has its own cache line.
    assert sorted({o // 64 for o in offsets}) == [0, 1, 2, 3, 4]
    assert ByteRing.region_size(4096) == ring_module.RING_HEADER_BYTES + 4096
    assert CompletionRing.region_size(8) == ring_module.RING_HEADER_BYTES + 8 * 32
    for bad in (0, 32, 100, 4095, 1 << 31):
        with pytest.raises(ValueError, match="power of two"):
            ByteRing.region_size(bad)
    for bad in (0, 1, 3, 1 << 25):
        with pytest.raises(ValueError, match="power of two"):
            CompletionRing.region_size(bad)


def test_random_operations_match_fifo_oracle(rand):
    producer, consumer, _ = make_pair(1024)
    oracle = collections.deque()
    pending = []
    for _ in range(20000):
        if rand.random() < 0.55:
            size = rand.choice([0, 1, 3, 4, 7, 8, 60, 128,
                                rand.randrange(producer.record_max_bytes + 1)])
            payload = rand.randbytes(size)
            offset = producer.reserve(size)
            if offset < 0:
                # Full: everything committed must still be intact (checked on drain).
                assert producer.free_bytes() < 2 * (size + 12)
                continue
            assert offset % 8 == 4 and offset + size <= producer.capacity_bytes
            producer.data()[offset:offset + size] = payload
            pending.append(payload)
            if rand.random() < 0.5:
                producer.commit()
                oracle.extend(pending)
                pending.clear()
        else:
            count, start, end = consumer.peek_batch(rand.choice([1, 2, 5, 1 << 30]))
            data = consumer.data()
            records = consumer.iter_records(start, end)
            assert len(records) == count
            for offset, length in records:
                assert bytes(data[offset:offset + length]) == oracle.popleft()
            consumer.release(end)
        assert 0 <= producer.used_bytes() <= producer.capacity_bytes
    producer.commit()
    oracle.extend(pending)
    assert drain_all(consumer) == list(oracle)
    assert producer.used_bytes() == 0 and producer.free_bytes() == producer.capacity_bytes


def test_padding_marker_and_wrap():
    producer, consumer, _ = make_pair(256)
    assert producer.put(b"a" * 100) == 4          # takes 104 bytes
    assert producer.put(b"b" * 100) == 108        # ends at 208
    producer.commit()
    assert consumer.peek_batch() == (2, 0, 208)
    consumer.release(208)
    # 48 bytes remain before the end: the next 104-byte record pads them and starts at 0.
    assert producer.put(b"c" * 100) == 4
    producer.commit()
    assert producer.used_bytes() == 48 + 104
    count, start, end = consumer.peek_batch()
    assert (count, start, end) == (1, 0, 104)
    assert bytes(consumer.data()[4:104]) == b"c" * 100
    consumer.release(end)
    assert producer.used_bytes() == 0


def test_run_stops_at_the_wrap_and_partial_release():
    producer, consumer, _ = make_pair(256)
    for index in range(4):
        assert producer.put(bytes([index]) * 52) >= 0   # 56 bytes each: 0..224
    producer.commit()
    count, start, end = consumer.peek_batch()
    assert (count, start, end) == (4, 0, 224)
    consumer.release(112)                               # the first two only
    assert producer.put(b"x" * 52) == 4                 # pads 224..256, lands at 0
    producer.commit()
    assert consumer.peek_batch() == (2, 112, 224)       # the run stops at the padding
    consumer.release(224)
    assert consumer.peek_batch() == (1, 0, 56)
    with pytest.raises(ValueError, match="outside the peeked run"):
        consumer.release(64)
    with pytest.raises(ValueError, match="outside the peeked run"):
        consumer.release(4)


def test_full_ring_refuses_and_never_overwrites(rand):
    producer, consumer, _ = make_pair(4096)
    written = []
    while True:
        payload = rand.randbytes(rand.randrange(1, 300))
        if producer.put(payload) < 0:
            break
        written.append(payload)
    producer.commit()
    free_before = producer.free_bytes()
    for _ in range(100):
        assert producer.reserve(rand.randrange(300, producer.record_max_bytes + 1)) == -1
    assert producer.commit() is False                   # nothing new to publish
    assert producer.free_bytes() == free_before
    assert drain_all(consumer) == written


def test_largest_record_fits_an_empty_ring_at_any_position():
    producer, consumer, _ = make_pair(512)
    largest = producer.record_max_bytes
    assert largest == 512 // 2 - 4
    for shift in range(0, 512, 8):
        for _ in range(2):
            assert producer.put(bytes([shift % 251]) * largest) >= 0, shift
            producer.commit()
            assert drain_all(consumer) == [bytes([shift % 251]) * largest]
        assert producer.put(b"") >= 0                   # move the wrap position by 8 bytes
        producer.commit()
        assert drain_all(consumer) == [b""]
    with pytest.raises(ValueError, match="record_max_bytes"):
        producer.reserve(largest + 1)
    with pytest.raises(ValueError, match=">= 0"):
        producer.reserve(-1)


def test_sleep_flags_and_wake_reporting():
    producer, consumer, region = make_pair(1024)
    assert consumer.set_consumer_sleeping() is False    # nothing there: may block
    producer.put(b"x")
    assert producer.commit() is True                    # flagged: the producer must signal
    assert producer.put(b"y") >= 0
    assert producer.commit() is False                   # the flag was taken: one signal per sleep
    assert consumer.set_consumer_sleeping() is True     # work arrived: do not block
    consumer.clear_consumer_sleeping()
    count, _, end = consumer.peek_batch()
    assert count == 2
    assert consumer.release(end) is False               # producer awake
    # Producer back-pressure handshake.
    while producer.put(b"z" * 100) >= 0:
        pass
    producer.commit()
    assert producer.set_producer_sleeping() is False
    _, _, end = consumer.peek_batch(1)
    assert consumer.release(end) is True                # the producer was waiting for space
    assert producer.set_producer_sleeping() is True     # space was freed since the failed reserve
    producer.clear_producer_sleeping()
    assert ring_module.load_u64(region, ring_module.RING_PRODUCER_SLEEPING_OFFSET) == 0


def test_attach_checks_and_real_mmap(tmp_path):
    path = str(tmp_path / "send.ring")
    with shared.create_byte_ring(path, 8192) as created:
        with shared.attach_byte_ring(path) as attached:
            assert attached.ring.capacity_bytes == 8192
            assert created.ring.put(b"hello") == 4
            created.ring.commit()
            count, start, end = attached.ring.peek_batch()
            assert attached.ring.iter_records(start, end) == [(4, 5)]
            assert bytes(attached.ring.data()[4:9]) == b"hello"
        with pytest.raises(ValueError, match="bad magic"):
            CompletionRing(created.buffer, False)
        with pytest.raises(ValueError, match="8192 bytes, not 4096"):
            ByteRing(created.buffer, False, 4096)
    assert not os.path.exists(path)                     # the creator unlinked it
    with pytest.raises(ValueError, match="bad magic"):
        ByteRing(bytearray(4096), False)
    with pytest.raises(ValueError, match="smaller"):
        ByteRing(bytearray(100), True, 64)
    with pytest.raises(BufferError):
        ByteRing(bytes(ByteRing.region_size(64)), True, 64)   # read-only buffer


def test_ring_pins_the_map_until_closed(tmp_path):
    path = tmp_path / "pinned"
    path.write_bytes(bytes(ByteRing.region_size(64)))
    with open(path, "r+b") as handle:
        mapped = mmap.mmap(handle.fileno(), 0)
    byte_ring = ByteRing(mapped, True, 64)
    byte_ring.data()
    with pytest.raises(BufferError):
        mapped.close()
    byte_ring.close()
    byte_ring.close()
    mapped.close()
    with pytest.raises(ValueError, match="closed"):
        byte_ring.peek_batch()
    with pytest.raises(ValueError, match="closed"):
        byte_ring.reserve(1)


def test_corrupt_shared_words_are_detected():
    producer, consumer, region = make_pair(256)
    producer.put(b"abc")
    producer.commit()
    data_start = ring_module.RING_HEADER_BYTES
    region[data_start:data_start + 4] = (1000).to_bytes(4, "little")   # length beyond the end
    with pytest.raises(RingCorruptError):
        consumer.peek_batch()
    ring_module.store_u64(region, ring_module.RING_PRODUCER_CURSOR_OFFSET, 10_000)
    with pytest.raises(RingCorruptError):
        consumer.peek_batch()
    with pytest.raises(RingCorruptError):
        ByteRing(region, False)
    region[data_start:data_start + 4] = (5).to_bytes(4, "little")    # 16 bytes, not 8
    with pytest.raises(ValueError, match="no whole record"):
        consumer.iter_records(0, 8)
    assert consumer.iter_records(0, 16) == [(4, 5)]
    with pytest.raises(ValueError, match="8-aligned"):
        consumer.iter_records(4, 8)


def test_completion_ring_fifo_and_full(rand):
    region = bytearray(CompletionRing.region_size(8))
    producer = CompletionRing(region, True, 8)
    consumer = CompletionRing(region, False)
    assert producer.slot_count == 8
    entries = [(rand.randrange(-2**63, 2**63), rand.randrange(-2**31, 2**31),
                rand.randrange(2**31), rand.randrange(2**63), rand.randrange(2**63))
               for _ in range(12)]
    assert producer.push_many(entries) == 8             # only 8 fit; published at once
    assert producer.free_slots() == 0
    assert producer.push(*entries[8]) is False
    assert consumer.drain(3) == entries[:3]
    assert producer.push_many(entries[8:]) == 3
    assert producer.commit() is False
    assert consumer.drain() == entries[3:11]
    assert consumer.drain() == []
    assert consumer.set_consumer_sleeping() is False
    assert producer.push(*entries[11]) is True
    assert consumer.drain() == []                       # pushed, not yet committed
    assert producer.commit() is True
    assert consumer.set_consumer_sleeping() is True
    consumer.clear_consumer_sleeping()
    assert consumer.drain() == [entries[11]]
    # push_many publishes, and the following commit() reports the sleeping consumer.
    consumer.set_consumer_sleeping()
    assert producer.push_many(entries[:2]) == 2
    assert producer.commit() is True
    with pytest.raises(OverflowError):
        producer.push(2**63, 0, 0, 0, 0)
    with pytest.raises(ValueError, match=">= 0"):
        consumer.drain(-1)


def test_completion_ring_corrupt_cursor():
    region = bytearray(CompletionRing.region_size(4))
    consumer = CompletionRing(region, True, 4)
    ring_module.store_u64(region, ring_module.RING_PRODUCER_CURSOR_OFFSET, 99)
    with pytest.raises(RingCorruptError):
        consumer.drain()


def test_atomic_word_helpers():
    words = bytearray(64)
    ring_module.store_u64(words, 8, 5)
    ring_module.max_u64(words, 8, 3)
    assert ring_module.load_u64(words, 8) == 5
    ring_module.max_u64(words, 8, 2**64 - 1)
    assert ring_module.load_u64(words, 8) == 2**64 - 1
    assert ring_module.exchange_u64(words, 16, 7) == 0
    assert ring_module.fetch_or_u64(words, 16, 8) == 7
    assert ring_module.fetch_and_u64(words, 16, 1) == 15
    assert ring_module.load_u64(words, 16) == 1
    assert ring_module.fetch_add_u64(words, 24, 5) == 0
    assert ring_module.fetch_add_u64(words, 24, -7) == 5
    assert ring_module.load_u64(words, 24) == 2**64 - 2          # two's complement
    assert ring_module.compare_exchange_u64(words, 32, 1, 9) == 0   # not 1: unchanged
    assert ring_module.load_u64(words, 32) == 0
    assert ring_module.compare_exchange_u64(words, 32, 0, 9) == 0   # 0: swapped
    assert ring_module.load_u64(words, 32) == 9
    for bad in (-8, 4, 57, 64):
        with pytest.raises(ValueError, match="aligned word"):
            ring_module.load_u64(words, bad)
    with pytest.raises(OverflowError):
        ring_module.store_u64(words, 0, -1)
    with pytest.raises(BufferError):
        ring_module.store_u64(bytes(64), 0, 1)


# ---- real processes -----------------------------------------------------------------------

def record_payload(index: int, seed: int, size_max: int) -> bytes:
    size = (index * 7919 + seed) % (size_max + 1)
    pattern = ((index * 2654435761 + seed) & (2**64 - 1)).to_bytes(8, "little")
    return (pattern * (size // 8 + 1))[:size]


def run_producer(path, count, seed, size_max, space_fd, work_fd, error_path):
    region = shared.attach_byte_ring(path)
    producer = region.ring
    sleeper = Sleeper(space_fd, [ProducerSide(producer)])
    index = 0
    data = producer.data()
    while index < count:
        payload = record_payload(index, seed, size_max)
        offset = producer.reserve(len(payload))
        if offset < 0:
            if producer.commit():
                work_fd.signal()
            if not sleeper.sleep(WAIT_MS):
                error_path.write_text(f"producer lost a wake-up at record {index}")
                os._exit(3)
            continue
        data[offset:offset + len(payload)] = payload
        index += 1
        if index % 16 == 0 and producer.commit():
            work_fd.signal()
    if producer.commit():
        work_fd.signal()
    del data
    region.close()


def run_consumer(path, count, seed, size_max, space_fd, work_fd, error_path):
    region = shared.attach_byte_ring(path)
    consumer = region.ring
    sleeper = Sleeper(work_fd, [ConsumerSide(consumer)])
    data = consumer.data()
    expected = 0
    while expected < count:
        records, start, end = consumer.peek_batch()
        if records == 0:
            if not sleeper.sleep(WAIT_MS):
                error_path.write_text(f"consumer waited {WAIT_MS} ms at record {expected}")
                os._exit(3)
            continue
        for offset, length in consumer.iter_records(start, end):
            if bytes(data[offset:offset + length]) != record_payload(expected, seed, size_max):
                error_path.write_text(f"record {expected} differs at offset {offset}")
                os._exit(4)
            expected += 1
        if consumer.release(end):
            space_fd.signal()
    if consumer.peek_batch()[0] != 0:
        error_path.write_text("records beyond the count arrived")
        os._exit(5)
    del data
    region.close()


def run_pair(tmp_path, capacity_bytes, count, seed, size_max):
    path = str(tmp_path / "send.ring")
    space_fd, work_fd = WakeFd(), WakeFd()
    errors = {name: tmp_path / f"{name}.err" for name in ("producer", "consumer")}
    with shared.create_byte_ring(path, capacity_bytes):
        args = (path, count, seed, size_max, space_fd, work_fd)
        processes = [FORK.Process(target=run_consumer, args=args + (errors["consumer"],)),
                     FORK.Process(target=run_producer, args=args + (errors["producer"],))]
        for process in processes:
            process.start()
        deadline = time.monotonic() + DEADLINE_S
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
        alive = [p for p in processes if p.is_alive()]
        for process in alive:
            process.kill()
            process.join()
        messages = {n: p.read_text() for n, p in errors.items() if p.exists()}
        assert not alive, f"deadline of {DEADLINE_S} s passed; {messages}"
        assert [p.exitcode for p in processes] == [0, 0], messages
    space_fd.close()
    work_fd.close()


@pytest.mark.dataplane
def test_cross_process_every_byte_in_order_exactly_once(tmp_path, rand):
    # A 4 KiB ring for 30k records up to 700 B: hundreds of wraps and constant back-pressure.
    run_pair(tmp_path, 4096, 30_000, rand.randrange(1 << 20), 700)


@pytest.mark.dataplane
def test_cross_process_small_records_large_ring(tmp_path, rand):
    run_pair(tmp_path, 1 << 16, 50_000, rand.randrange(1 << 20), 64)


def close_inherited(region) -> None:
    region.close()          # a forked child inherits the creator's object: unmap only


@pytest.mark.dataplane
def test_shared_region_ownership_and_run_directory(tmp_path):
    run_directory = shared.RunDirectory(str(tmp_path / "run"), create=True)
    path = run_directory.region_path("worker-0.send")
    with pytest.raises(ValueError, match="plain file name"):
        run_directory.region_path("../escape")
    stale = shared.SharedRegion.create(path, 4096)
    stale.buffer[:4] = b"old!"
    region = shared.create_completion_ring(path, 16)   # replaces the stale file
    assert stale.buffer[:4] == b"old!"                 # the old map keeps its own pages
    stale.owner_pid = None
    stale.close()
    child = FORK.Process(target=close_inherited, args=(region,))
    child.start()
    child.join(30)
    assert child.exitcode == 0 and os.path.exists(path)
    with pytest.raises(ValueError, match="expected 999"):
        shared.SharedRegion.attach(path, 999)
    attached = shared.attach_completion_ring(path)
    assert attached.ring.slot_count == 16 and not attached.owner
    attached.close()
    assert os.path.exists(path)                         # attachers never unlink
    run_directory.close()                               # not empty: stays
    assert os.path.isdir(run_directory.path)
    region.close()
    region.close()
    assert not os.path.exists(path)
    with pytest.raises(FileNotFoundError):
        shared.attach_byte_ring(path)
    run_directory.close()
    assert not os.path.exists(run_directory.path)
    with pytest.raises(FileNotFoundError):
        shared.RunDirectory(run_directory.path, create=False)
    with pytest.raises(ValueError, match="> 0 bytes"):
        shared.SharedRegion.create(str(tmp_path / "empty"), 0)


def _resident_kib(path: str) -> int:
    """Rss (KiB) of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps", encoding="utf-8") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:
                inside = len(fields) >= 6 and fields[5] == path
            elif inside and fields[0] == "Rss:":
                total += int(fields[1])
    return total


def test_a_send_ring_is_not_resident_until_used_and_small_regions_are(tmp_path):
    # PSS: an idle worker's (and the supervisor's) send ring must cost no memory.
    capacity = 8 << 20
    ring_path = str(tmp_path / "send-0")
    done_path = str(tmp_path / "done-0")
    with shared.create_byte_ring(ring_path, capacity) as region, \
            shared.create_completion_ring(done_path, 1024) as done:
        assert _resident_kib(ring_path) < 64, "the send ring was pre-faulted"
        assert _resident_kib(done_path) * 1024 >= done.size_bytes - 4096
        with shared.attach_byte_ring(ring_path) as attached:
            assert _resident_kib(ring_path) < 128
            attached.ring.put(b"x" * 1000)
            assert region.ring.peek_batch() is not None
