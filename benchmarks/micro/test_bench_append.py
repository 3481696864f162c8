"""The appender's per-message cost: the C drain loop next to the per-request Python path it
replaced (read the request header, CommitLog.append_encoded), 128 B bodies with the properties
a Java producer sends, 64 single-message requests per drain (the standard tool's 64 threads).

Method: each round fills a send ring with 64 requests (setup, not timed), then drains it into a
real CommitLog file in tmp_path (pages faulted in once before timing). Time per message =
round time / 64; the figure that matters is the ratio of the two cases within one run.
"""
import pytest

from pybroker._fast import append, record
from pybroker._fast.ring import ByteRing, CompletionRing
from pybroker.proc import ring_format
from pybroker.store.commitlog import CommitLog
from pybroker.store.status import PutStatus

HOST = bytes([127, 0, 0, 1])
TOPIC = "BenchmarkTest"
REQUESTS = 64
QUEUES = 8
PROPERTIES = (b"UNIQ_KEY\x01AC1100021F2A18B4AAC27E1B4C0F0001\x02WAIT\x01true\x02"
              b"MSG_REGION\x01DefaultRegion\x02TRACE_ON\x01true\x02")


def _record(queue_id: int) -> bytes:
    size = record.encoded_size(128, len(TOPIC), len(PROPERTIES), 0)
    buffer = bytearray(size)
    record.encode_into(buffer, 0, TOPIC.encode(), queue_id, 0, b"\xab" * 128, PROPERTIES, 0,
                       1_700_000_000_000, HOST, 4242, HOST, 10911)
    return bytes(buffer)


class _Setup:
    def __init__(self, tmp_path):
        capacity = 1 << 20
        self.ring = ByteRing(bytearray(ByteRing.region_size(capacity)), True, capacity)
        self.completions = CompletionRing(bytearray(CompletionRing.region_size(128)), True,
                                          128)
        self.commitlog = CommitLog(str(tmp_path / "commitlog"), 256 << 20)
        self.commitlog.load()
        self.records = [_record(queue_id) for queue_id in range(QUEUES)]
        mapped_file = self.commitlog.writable_file()
        mapped_file.warm(0)
        self.request_id = 0

    def fill(self):
        self.completions.drain()
        for number in range(REQUESTS):
            records = self.records[number % QUEUES]
            size = ring_format.put_request_size(len(TOPIC), len(records))
            offset = self.ring.reserve(size)
            self.request_id += 1
            ring_format.write_put_request(self.ring.data(), offset, self.request_id,
                                          number % QUEUES, 1, 0, False, TOPIC.encode(), records)
        self.ring.commit()
        mapped_file = self.commitlog.writable_file()
        if mapped_file.remaining() < 1 << 20:
            mapped_file.wrote_position = 0      # rewind: only the copy cost matters here


def test_c_drain(benchmark, figure, tmp_path):
    setup = _Setup(tmp_path)
    drainer = append.RingDrainer(setup.commitlog.queue_offsets,
                                 ring_format.status_code(PutStatus.PUT_OK),
                                 ring_format.status_code(PutStatus.MESSAGE_ILLEGAL),
                                 ring_format.status_code(PutStatus.MESSAGE_SIZE_EXCEEDED))

    def drain():
        mapped_file = setup.commitlog.writable_file()
        result = drainer.drain(setup.ring, setup.completions, mapped_file.buffer(),
                               mapped_file.wrote_position, mapped_file.file_from_offset, 1, -1)
        mapped_file.wrote_position = result[4]
        setup.completions.commit()
        assert result[1] == REQUESTS

    benchmark.pedantic(drain, setup=setup.fill, rounds=300, iterations=1, warmup_rounds=5)
    figure("us_per_message", lambda seconds: seconds * 1e6 / REQUESTS, "mean")


def test_python_append_encoded(benchmark, figure, tmp_path):
    setup = _Setup(tmp_path)
    ok = ring_format.status_code(PutStatus.PUT_OK)

    def drain():
        ring, completions = setup.ring, setup.completions
        taken = 0
        for _ in range(2):       # the old appender's loop: a run stops at the ring's wrap
            count, start, end = ring.peek_batch(completions.free_slots())
            data = ring.data()
            for offset, length in ring.iter_records(start, end):
                request = ring_format.read_put_request(data, offset, length)
                records = data[request.records_offset:request.records_end]
                result = setup.commitlog.append_encoded(records, request.topic,
                                                        request.queue_id, request.record_count,
                                                        request.sys_flag, 1)
                records.release()
                completions.push(request.request_id, ok, result.count,
                                 result.physical_offset, result.queue_offset)
            ring.release(end)
            taken += count
        completions.commit()
        assert taken == REQUESTS

    benchmark.pedantic(drain, setup=setup.fill, rounds=300, iterations=1, warmup_rounds=5)
    figure("us_per_message", lambda seconds: seconds * 1e6 / REQUESTS, "mean")


@pytest.fixture(autouse=True)
def _no_gc(benchmark):
    benchmark._disable_gc = True
