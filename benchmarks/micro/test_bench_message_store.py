"""Store-path throughput: put, pull, dispatch (reput) and recovery of the MessageStore facade.

Method: pytest-benchmark (pedantic, bounded rounds) on real stores in tmp_path: puts of 128 B and
1 KiB bodies one at a time and in runs of 32 under ASYNC_FLUSH; get_messages of 32 records at a
time; Dispatcher.dispatch_until over a prepared CommitLog into fresh consume queues and index;
normal and abnormal recovery of a ~128 MiB store, reported per GiB. Each case checks its result
before it is timed. Rates are in extra_info (records/s, GiB/s, s per GiB).
"""
import os
import shutil
import time

import pytest

from pybroker._fast import record as record_codec
from pybroker.store import lock_file
from pybroker.store.commitlog import CommitLog
from pybroker.store.consume_queue import ConsumeQueueStore
from pybroker.schema import parse_delay_levels
from pybroker.store.dispatch import Dispatcher
from pybroker.store.index_file import IndexService
from pybroker.store.message_store import MessageStore
from pybroker.store.settings import StoreConfig
from pybroker.store.status import GetStatus, PutStatus

HOST = bytes([127, 0, 0, 1])
PROPERTIES = (b"KEYS\x01OrderID188\x02UNIQ_KEY\x017F0000010B3C18B4AAC2713A67E90000\x02"
              b"TAGS\x01TagA\x02")
BODY_SIZES = {"128B": 128, "1KiB": 1024}
RECOVERY_BYTES = 128 << 20


def encode_run(body_bytes: int, count: int) -> bytes:
    size = record_codec.encoded_size(body_bytes, 9, len(PROPERTIES), 0)
    buffer = bytearray(size * count)
    for number in range(count):
        record_codec.encode_into(buffer, number * size, b"TopicTest", 0, 0,
                                 b"\xab" * body_bytes, PROPERTIES, 0, 1, HOST, 1, HOST, 10911)
    return bytes(buffer)


def settings(root, **overrides) -> StoreConfig:
    values = dict(store_path_root_dir=str(root), mapped_file_size_commit_log=32 << 20,
                  max_hash_slot_num=100_000, max_index_num=400_000)
    values.update(overrides)
    return StoreConfig(**values)


@pytest.mark.parametrize("batch", [1, 32])
@pytest.mark.parametrize("body_name", BODY_SIZES)
def test_put_async(benchmark, figure, tmp_path, body_name, batch):
    benchmark.group = f"put ASYNC {body_name}"
    run = encode_run(BODY_SIZES[body_name], batch)
    puts_per_round = max(2048 // batch, 16)
    with MessageStore(settings(tmp_path)) as store:
        assert store.put_messages(bytearray(run), "TopicTest", 0, batch, 0).status is \
            PutStatus.PUT_OK

        def put_many():
            for _ in range(puts_per_round):
                store.put_messages(bytearray(run), "TopicTest", 0, batch, 0)

        benchmark.pedantic(put_many, rounds=7, iterations=1, warmup_rounds=1)
        figure("records_per_s", lambda seconds: puts_per_round * batch / seconds)


def test_get_messages(benchmark, figure, tmp_path):
    benchmark.group = "get_messages 32 x 128B"
    run = encode_run(128, 32)
    with MessageStore(settings(tmp_path)) as store:
        for _ in range(1024):
            store.put_messages(bytearray(run), "TopicTest", 0, 32, 0)
        max_offset = store.get_max_offset_in_queue("TopicTest", 0)

        def read_all():
            offset = 0
            while offset < max_offset:
                result = store.get_messages("g", "TopicTest", 0, offset, 32)
                offset = result.next_begin_offset
                result.release()

        first = store.get_messages("g", "TopicTest", 0, 0, 32)
        assert first.status is GetStatus.FOUND and first.message_count == 32
        first.release()
        benchmark.pedantic(read_all, rounds=5, iterations=1, warmup_rounds=1)
        figure("records_per_s", lambda seconds: max_offset / seconds)


def test_dispatch(benchmark, figure, tmp_path):
    benchmark.group = "dispatch"
    commitlog = CommitLog(str(tmp_path / "commitlog"), 32 << 20)
    run = encode_run(128, 32)
    for number in range(1024):
        commitlog.append_encoded(bytearray(run), "TopicTest", number % 4, 32, 0, 1_700_000_000)
    records = 32 * 1024
    delays = parse_delay_levels("1s 5s")
    state = {"round": 0}

    def fresh():
        state["round"] += 1
        root = tmp_path / f"round{state['round']}"
        queues = ConsumeQueueStore(str(root))
        index = IndexService(str(root / "index"), 100_000, 400_000)
        return (Dispatcher(commitlog, queues, index, delays),), {}

    def dispatch(dispatcher):
        assert dispatcher.dispatch_until(commitlog.max_offset()) == records
        dispatcher.consume_queue_store.close()
        dispatcher.index_service.destroy()
        shutil.rmtree(dispatcher.consume_queue_store.store_root)

    benchmark.pedantic(dispatch, setup=fresh, rounds=3, iterations=1)
    figure("records_per_s", lambda seconds: records / seconds)
    commitlog.shutdown(0)


@pytest.fixture(scope="module")
def recovery_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("recovery") / "store"
    run = encode_run(1024, 32)
    with MessageStore(settings(root, message_index_enable=False)) as store:
        while store.max_physical_offset < RECOVERY_BYTES:
            store.put_messages(bytearray(run), "TopicTest", 0, 32, 0)
        size = store.max_physical_offset
    return root, size


@pytest.mark.parametrize("mode", ["normal", "abnormal_full_redispatch"])
def test_recovery(benchmark, figure, recovery_store, mode):
    benchmark.group = "recovery (CRC checked)"
    root, size = recovery_store

    def prepare():
        if mode != "normal":
            lock_file.create_abort_file(str(root))
            os.unlink(os.path.join(root, "checkpoint"))      # recovery point 0: whole log
            shutil.rmtree(os.path.join(root, "consumequeue"), ignore_errors=True)
        return (), {}

    def recover():
        store = MessageStore(settings(root, message_index_enable=False))
        started = time.perf_counter()
        assert store.load()
        elapsed = time.perf_counter() - started
        assert store.last_recovery_abnormal == (mode != "normal")
        assert store.recovery_result.valid_end_offset == size
        store.shutdown()
        return elapsed

    benchmark.pedantic(recover, setup=prepare, rounds=3, iterations=1)
    scanned = size if mode != "normal" else min(size, 3 * (32 << 20))
    benchmark.extra_info["scanned_bytes"] = scanned
    figure("seconds_per_GiB", lambda seconds: seconds * (1 << 30) / scanned)
