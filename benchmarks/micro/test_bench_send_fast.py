"""A remoting worker's CPU per 128 B send: the send fast path next to the Python path.

Method: one RemotingConnection (a stub transport that keeps what is written) in this process
receives one read of BATCH_FRAMES send frames (as 64 producer threads keep that many in flight)
over real shared-memory rings; a stand-in appender (the same for every case) answers each put
PUT_OK, the putter's wake-up runs, and the round ends when every response has been written.
Cases: the Java benchmark's frame (SEND_MESSAGE_V2, ROCKETMQ header) and the Go client's
(SEND_MESSAGE, JSON header), each through the Python path (decode, handler, RingPutter.put,
response encode) and through the fast path (SendPath.take, drain, take_outputs); plus the
stand-in appender alone, to subtract. extra_info has us_per_message.
"""
import asyncio

import pytest

from pybroker.broker import send, send_fast
from pybroker.broker.channel import Channel
from pybroker.broker.context import BrokerContext
from pybroker.broker.metadata import MetadataState
from pybroker.config import load_broker_config
from pybroker.proc import shared
from pybroker.proc.ring_format import PUT_HEADER, PUT_STATUSES
from pybroker.proc.ring_putter import RingPutter
from pybroker.proc.wake import WakeFd
from pybroker.protocol import command
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.command import RemotingCommand
from pybroker.protocol.constants import SerializeType
from pybroker.remoting.connection import RemotingConnection
from pybroker.remoting.limits import ConnectionLimits
from pybroker.remoting.server import RequestTable
from pybroker.store.config_docs import TopicConfig
from pybroker.store.control_block import ControlBlock
from pybroker.store.status import PutStatus

BATCH_FRAMES = 64
BODY = b"x" * 128
PROPERTIES = "UNIQ_KEY\x017F0000010F2A18B4AAC2470BC0B30000\x02WAIT\x01true\x02"
_PUT_OK = PUT_STATUSES.index(PutStatus.PUT_OK)


def send_frame(style: str, opaque: int) -> bytes:
    values = {"producerGroup": "benchmark_producer", "topic": "BenchmarkTest",
              "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
              "queueId": str(opaque % 1024), "sysFlag": "0", "bornTimestamp": "1764750000000",
              "flag": "0", "properties": PROPERTIES, "reconsumeTimes": "0",
              "unitMode": "false", "maxReconsumeTimes": "16", "batch": "false"}
    if style == "java":
        values = dict(zip("abcdefghijklm", values.values(), strict=True))
        request = RemotingCommand(RequestCode.SEND_MESSAGE_V2, 0, 409, opaque, 0, None, values,
                                  BODY)
        return command.encode(request, int(SerializeType.ROCKETMQ))
    request = RemotingCommand(RequestCode.SEND_MESSAGE, 9, 317, opaque, 0, "", values, BODY)
    return command.encode(request, int(SerializeType.JSON))


class StubTransport:
    def __init__(self):
        self.written_bytes = 0

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 50000) if name == "peername" else default

    def set_write_buffer_limits(self, high=None, low=None):
        pass

    def get_write_buffer_size(self):
        return 0

    def write(self, data):
        self.written_bytes += len(data)

    def writelines(self, chunks):
        for chunk in chunks:
            self.written_bytes += len(chunk)

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


class Worker:
    def __init__(self, tmp_path, fast: bool):
        self.config = load_broker_config(None, {"storePathRootDir": str(tmp_path),
                                                "brokerIP1": "127.0.0.1"})
        self.send_region = shared.create_byte_ring(str(tmp_path / "send"), 1 << 20)
        self.done_region = shared.create_completion_ring(str(tmp_path / "done"), 256)
        self.ring, self.completions = self.send_region.ring, self.done_region.ring
        self.control = ControlBlock(str(tmp_path / "control"), create=True)
        self.wake = WakeFd()
        self.putter = RingPutter(self.ring, self.completions, self.control, self.wake, 0,
                                 (bytes([127, 0, 0, 1]), 10911), False, 5000,
                                 fast_sends=send_fast.fast_send_settings(self.config,
                                                                         PUT_STATUSES))
        metadata = MetadataState(self.config)
        metadata.topics.update_topic_config(TopicConfig("BenchmarkTest", 1024, 1024))
        ctx = BrokerContext(self.config, None, self.putter, metadata,
                            (bytes([127, 0, 0, 1]), 10911))
        self.putter.set_fast_topics(send_fast.fast_topics(self.config, metadata))
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self._connect(ctx, fast))
        self.physical_offset = 0

    async def _connect(self, ctx, fast: bool) -> None:
        async def handle(connection, request):
            return await send.handle_send_message(ctx, connection.attachment, request)
        table = RequestTable({code: handle for code in send.HANDLERS})
        self.connection = RemotingConnection(table,
                                             ConnectionLimits.from_config(self.config.remoting))
        self.transport = StubTransport()
        self.connection.connection_made(self.transport)
        self.connection.attachment = Channel("0:1", "127.0.0.1:50000",
                                             send=self.connection.send)
        if fast:
            self.connection.use_frame_taker(self.putter.open_fast_port(
                (bytes([127, 0, 0, 1]), 50000), self.connection.write_frames))

    def append_all(self) -> int:
        """The stand-in appender: answer every put PUT_OK."""
        count, start, end = self.ring.peek_batch(self.completions.free_slots())
        data = self.ring.data()
        for offset, length in self.ring.iter_records(start, end):
            self.completions.push(PUT_HEADER.unpack_from(data, offset)[0], _PUT_OK, 1,
                                  self.physical_offset, 0)
            self.physical_offset += length
        self.ring.release(end)
        self.completions.commit()
        return count

    async def round(self, data: bytes) -> None:
        target = self.transport.written_bytes + 1
        buffer = self.connection.get_buffer(len(data))
        buffer[:len(data)] = data
        del buffer
        self.connection.buffer_updated(len(data))
        while self.append_all():
            self.putter.on_wake()
            await asyncio.sleep(0)
        while self.transport.written_bytes < target or self.connection.handler_tasks:
            await asyncio.sleep(0)

    def close(self) -> None:
        self.loop.close()
        self.wake.close()
        self.control.close()
        self.send_region.close()
        self.done_region.close()


@pytest.mark.parametrize("style", ["java", "go"])
@pytest.mark.parametrize("path", ["python", "fast"])
def test_send_round(benchmark, figure, tmp_path, style, path):
    worker = Worker(tmp_path, fast=path == "fast")
    data = b"".join(send_frame(style, opaque) for opaque in range(BATCH_FRAMES))
    try:
        benchmark(lambda: worker.loop.run_until_complete(worker.round(data)))
        figure("us_per_message", lambda seconds: round(seconds * 1e6 / BATCH_FRAMES, 2))
        fast_puts = worker.putter.core.fast_puts_total
        assert (fast_puts > 0) == (path == "fast")
    finally:
        worker.close()


def test_stand_in_appender_alone(benchmark, figure, tmp_path):
    """What the stand-in appender costs per message (in every round above)."""
    worker = Worker(tmp_path, fast=False)
    records = b"\x00" * 200
    topic = b"BenchmarkTest"

    def round_trip():
        for _ in range(BATCH_FRAMES):
            worker.putter.core.put_python(records, topic, 0, 1, 0, False)
        worker.ring.commit()
        worker.append_all()
        worker.putter.core.drain(0.0)
    try:
        benchmark(round_trip)
        figure("us_per_message", lambda seconds: round(seconds * 1e6 / BATCH_FRAMES, 2))
    finally:
        worker.close()
