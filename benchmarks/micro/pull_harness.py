# An in-process remoting worker's pull side, for the pull micro benchmark and callgrind counts.
"""A remoting worker's pull path in one process, without sockets or forks.

A store of BACKLOG_PER_QUEUE records of 128 B in each of QUEUES queues of one topic is written
through MessageStore, then read through a MessageStoreReader as a remoting worker reads it. A
RemotingConnection over one end of a socket pair (its stub transport hands it the socket, so
answers go out with writev as on a real connection; the other end is drained each round)
takes one read of QUEUES PULL_MESSAGE frames per round, as Apache's benchmark Consumer sends
them (ROCKETMQ binary header, sysFlag COMMIT_OFFSET | SUSPEND, no subscription: the
heartbeat's ``*``), through the request table and the worker's request wrapper (statistics
on, per-request counters), or with ``fast=True`` through the worker's pull fast path
(proc/pull_port.py) first; the committed offsets are forwarded as the worker forwards them (a
oneway frame encoded per batch). The offsets wrap at the end of the backlog.
``PullWorker.round()`` runs one read's pulls to their answers;
tools/count_pull_instructions.py runs it under callgrind.
"""
import asyncio
import mmap
import socket

import orjson

from pybroker._fast import record as record_codec
from pybroker._fast import stats as fast_stats
from pybroker.broker import pull
from pybroker.broker.channel import Channel
from pybroker.broker.context import BrokerContext
from pybroker.broker.long_poll import LongPollService
from pybroker.broker.managers.client_channel import make_channel_info
from pybroker.broker.metadata import MetadataState
from pybroker.config import load_broker_config
from pybroker.proc.pull_port import FastPullPort, PullTaker
from pybroker.protocol import command, constants
from pybroker.protocol.bodies import build_subscription
from pybroker.protocol.codes import InternalCode, RequestCode
from pybroker.protocol.command import RemotingCommand, create_request
from pybroker.protocol.constants import SerializeType
from pybroker.remoting.connection import RemotingConnection
from pybroker.remoting.limits import ConnectionLimits
from pybroker.remoting.server import RequestTable
from pybroker.stats.recorder import Recorder
from pybroker.store.config_docs import TopicConfig
from pybroker.store.control_block import remoting_worker, stats_section_count
from pybroker.store.message_store import MessageStore
from pybroker.store.read_only_store import MessageStoreReader

TOPIC = "BenchmarkTest"
GROUP = "benchmark_consumer"
QUEUES = 4
BATCH = 32
BACKLOG_PER_QUEUE = 8192
HOST = bytes([127, 0, 0, 1])
PROPERTIES = (b"UNIQ_KEY\x017F0000010B3C18B4AAC2713A67E90000\x02WAIT\x01true\x02"
              b"TAGS\x01TagA\x02")
SUB_VERSION = 1_700_000_000_000


def pull_frame(queue_id: int, queue_offset: int, opaque: int, commit_offset: int) -> bytes:
    """A PULL_MESSAGE frame as Apache's 4.9.8 push consumer sends it (ROCKETMQ header)."""
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue_id),
              "queueOffset": str(queue_offset), "maxMsgNums": str(BATCH),
              "sysFlag": str(0x3 if commit_offset > 0 else 0x2),
              "commitOffset": str(commit_offset), "suspendTimeoutMillis": "15000",
              "subVersion": str(SUB_VERSION), "expressionType": "TAG"}
    request = RemotingCommand(RequestCode.PULL_MESSAGE, 0, 395, opaque, 0, None, fields)
    return command.encode(request, int(SerializeType.ROCKETMQ))


class StubTransport:
    """A transport over one end of a socket pair: the connection writes its answers to the
    socket itself (writev); what it hands the transport is counted, not sent."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.written_bytes = 0
        self.writes = 0

    def get_extra_info(self, name, default=None):
        if name == "peername":
            return ("127.0.0.1", 50000)
        return self.sock if name == "socket" else default

    def set_write_buffer_limits(self, high=None, low=None):
        pass

    def get_write_buffer_size(self):
        return 0

    def is_closing(self):
        return False

    def write(self, data):
        self.writes += 1
        self.written_bytes += len(data)

    def writelines(self, chunks):
        self.writes += 1
        for chunk in chunks:
            self.written_bytes += len(chunk)

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


class _ForwardingMetadata(MetadataState):
    """The worker's replica forwards each piggy-backed commit offset as a oneway frame."""

    def __init__(self, config):
        super().__init__(config)
        self.forwarded_bytes = 0

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.forward([(group, topic, queue_id, offset)])

    def forward(self, commits: list) -> None:
        frame = command.encode(create_request(
            InternalCode.COMMIT_OFFSET, {}, orjson.dumps(commits), oneway=True))
        self.forwarded_bytes += len(frame)


def write_store(root: str, per_queue: int = BACKLOG_PER_QUEUE) -> int:
    """The backlog: ``per_queue`` records of 128 B in each queue; returns the CommitLog end."""
    config = load_broker_config(None, _settings(root))
    size = record_codec.encoded_size(128, len(TOPIC), len(PROPERTIES), 0)
    with MessageStore(config.store) as store:
        for queue_id in range(QUEUES):
            run = bytearray(size * BATCH)
            for number in range(BATCH):
                record_codec.encode_into(run, number * size, TOPIC.encode(), queue_id, 0,
                                         b"\xab" * 128, PROPERTIES, 0, 1_700_000_000_000, HOST,
                                         40000, HOST, 10911)
            for _ in range(per_queue // BATCH):
                result = store.put_messages(bytearray(run), TOPIC, queue_id, BATCH, 0)
                assert result.status.stored
        return store.max_physical_offset


def _settings(root: str) -> dict:
    return {"storePathRootDir": root, "brokerIP1": "127.0.0.1",
            "mappedFileSizeCommitLog": str(64 << 20), "maxHashSlotNum": "100000",
            "maxIndexNum": "400000"}


def _stats_writer() -> fast_stats.StatsWriter:
    buffer = mmap.mmap(-1, fast_stats.region_size(stats_section_count(1)))
    fast_stats.initialise(buffer, stats_section_count(1), 0, True)
    return fast_stats.StatsWriter(buffer, remoting_worker(0).stats_section)


class PullWorker:
    """The pull side of one remoting worker over the store at ``root`` (see module doc)."""

    def __init__(self, root: str, end_offset: int, per_queue: int = BACKLOG_PER_QUEUE,
                 fast: bool = False):
        self.config = load_broker_config(None, _settings(root))
        self.per_queue = per_queue
        self.reader = MessageStoreReader(self.config.store, end_offset,
                                         positions=lambda: (end_offset, end_offset))
        self.metadata = _ForwardingMetadata(self.config)
        self.metadata.topics.update_topic_config(TopicConfig(TOPIC, QUEUES, QUEUES))
        self.stats = Recorder(_stats_writer())
        self.loop = asyncio.new_event_loop()
        self.long_poll = LongPollService(self.reader.get_max_offset_in_queue)
        self.ctx = BrokerContext(self.config, self.reader, None, self.metadata,
                                 (HOST, 10911), long_poll=self.long_poll, stats=self.stats)
        self.peer, sock = socket.socketpair()
        for end in (self.peer, sock):
            end.setblocking(False)
            end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock = sock
        self.received_bytes = 0
        self._drain = bytearray(1 << 20)
        self.transport = StubTransport(sock)
        self.connection = RemotingConnection(self._table(),
                                             ConnectionLimits.from_config(self.config.remoting))
        self.loop.run_until_complete(self._connect())
        self.port: FastPullPort | None = None
        if fast:
            self.port = FastPullPort(self.config, self.reader, self.stats,
                                     self.metadata.forward)
            self.port.refresh(self.config, self.metadata)
            self.connection.use_frame_taker(PullTaker(
                self.port, self.connection, self.connection.limits.write_buffer_high_bytes))
        self.offsets = [0] * QUEUES
        self.opaque = 0

    def _table(self) -> RequestTable:
        ctx, stats = self.ctx, self.stats

        async def run(connection, request):
            # proc/remoting.py RemotingWorker._local, as it wraps every data handler.
            channel = connection.attachment
            channel.language, channel.version = request.language, request.version
            started = stats.now_ns()
            token = stats.request_started("pull")
            try:
                return await pull.handle_pull_message(ctx, channel, request)
            finally:
                stats.request_finished("pull", token, (stats.now_ns() - started) // 1000)
        return RequestTable({code: run for code in pull.HANDLERS})

    async def _connect(self) -> None:
        connection = self.connection
        connection.connection_made(self.transport)
        channel = Channel("0:1", "127.0.0.1:50000", int(constants.LanguageCode.JAVA), 395,
                          connection.send)
        connection.attachment = channel
        subscription = build_subscription(TOPIC, "*", "TAG", SUB_VERSION)
        self.metadata.consumers.register_consumer(
            GROUP, make_channel_info(channel, "127.0.0.1@1", 0),
            constants.ConsumeType.CONSUME_PASSIVELY, constants.MessageModel.CLUSTERING,
            constants.ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, [subscription])

    def frames(self) -> bytes:
        """One read: a pull per queue at its next offset (wrapping at the backlog's end)."""
        parts = []
        for queue_id in range(QUEUES):
            offset = self.offsets[queue_id]
            self.opaque += 1
            parts.append(pull_frame(queue_id, offset, self.opaque, offset))
            self.offsets[queue_id] = (offset + BATCH) % self.per_queue
        return b"".join(parts)

    async def _round(self, data: bytes) -> None:
        buffer = self.connection.get_buffer(len(data))
        buffer[:len(data)] = data
        del buffer
        self.connection.buffer_updated(len(data))
        while self.connection.handler_tasks:
            await asyncio.sleep(0)
        await asyncio.sleep(0)          # the loop turn that writes the answers

    def round(self) -> int:
        """One read of QUEUES pulls, run until every answer is written; the bytes the
        other end received."""
        self.loop.run_until_complete(self._round(self.frames()))
        received = 0
        while True:
            try:
                received += self.peer.recv_into(self._drain)
            except BlockingIOError:
                break
        self.received_bytes += received
        return received

    def close(self) -> None:
        self.connection.connection_lost(None)
        if self.port is not None:
            self.port.close()
        self.loop.close()
        self.reader.close()
        self.sock.close()
        self.peer.close()
