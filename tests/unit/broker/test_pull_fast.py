"""The pull fast path answers every pull exactly as the Python handler does, and counts the same.

Method: one real store (MessageStore: two queues of 300 records, tags TagA / TagB in turn,
CommitLog and ConsumeQueue files small enough that pulls cross them) is read by two workers,
each a MessageStoreReader, a Recorder over its own statistics region, a MetadataState with
heartbeat-registered groups and a real RemotingConnection over one end of a socket pair (the
fast path writes its answers with writev there) or over a transport without a socket (its
answers then go through the transport). One worker has only the Python handler, wrapped as
proc/remoting.py wraps it; the other has the pull fast path (proc/pull_port.FastPullPort) in
front of it. A table of PULL_MESSAGE and LITE_PULL_MESSAGE frames (found, tag-filtered by the
heartbeat or by the pull's own expression (a group without a heartbeat too), byte-capped,
across files, JSON and ROCKETMQ headers, committing offsets; and every kind the fast path must
leave to the handler: no message, bad offsets and queue ids, refused groups and topics, a newer
subVersion, SQL92 or an unparsable expression, oneway, a malformed number, another request
code) goes to both, row by row and all at once, and with litePullMessageEnable off. The answer
frames (by opaque, byte for byte), the forwarded commit offsets and the statistics (counters,
key tables, the rocketmq_rpc_latency series per request and response code, pull offsets; not
the latencies) must be the same, and the rows marked fast must have been answered by the fast
path and no other row. Every store page is read into the page cache before each run, so the
cold-page figures (pages not resident when a pull began) are the same for both runs; one test
evicts the store's pages before each run instead, so both count the same cold pages.
"""
import asyncio
import mmap
import os
import socket

import pytest

from pybroker._fast import pagecache
from pybroker._testbase.page_cache import evict_file
from pybroker._fast import record as record_codec
from pybroker.broker import pull
from pybroker.broker.channel import Channel
from pybroker.broker.context import BrokerContext
from pybroker.broker.managers.client_channel import make_channel_info
from pybroker.broker.metadata import MetadataState
from pybroker.config import load_broker_config
from pybroker.proc.pull_port import FastPullPort, PullTaker
from pybroker.proc.remoting import _FAMILIES, _rpc_answer
from pybroker.protocol import command, constants
from pybroker.protocol.bodies import SubscriptionData, build_subscription
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.command import RemotingCommand
from pybroker.protocol.constants import RPC_ONEWAY, SerializeType
from pybroker.remoting.connection import RemotingConnection
from pybroker.remoting.limits import ConnectionLimits
from pybroker.remoting.server import RequestTable
from pybroker.stats.recorder import Recorder
from pybroker._fast.stats import StatsCounter, StatsKeyKind
from pybroker.stats.region import StatsRegion
from pybroker.store.config_docs import SubscriptionGroupConfig, TopicConfig
from pybroker.store.message_store import MessageStore
from pybroker.store.read_only_store import MessageStoreReader

TOPIC = "PullFastT"
UNREADABLE = "PullFastWriteOnly"
QUEUES = 2
PER_QUEUE = 300
VERSION = 100
HOST = bytes([127, 0, 0, 1])
SETTINGS = {"brokerIP1": "127.0.0.1", "mappedFileSizeCommitLog": str(48 << 10),
            "maxMessageSize": "8192",
            "mappedFileSizeConsumeQueue": str(100 * 20), "enablePropertyFilter": "true",
            "maxHashSlotNum": "1000", "maxIndexNum": "4000"}
# group -> (topic -> subscription expression, expression type), as registered by heartbeat
GROUPS = {"G_all": {TOPIC: ("*", "TAG"), UNREADABLE: ("*", "TAG")},
          "G_tag": {TOPIC: ("TagA", "TAG")},
          "G_none_matched": {TOPIC: ("TagC", "TAG")},
          "G_off": {TOPIC: ("*", "TAG")},
          "G_sql": {TOPIC: ("a > 1", "SQL92")},
          "G_unsubscribed": {}}
# The topic's and a group's sysFlag, named by LITE_PULL_MESSAGE answers.
TOPIC_SYS_FLAG, TAG_GROUP_SYS_FLAG = 1, 3
LITE = RequestCode.LITE_PULL_MESSAGE
# Java 5.3.3's DefaultLitePullConsumer: SUBSCRIPTION | LITE_PULL_MESSAGE, no suspend.
LITE_FLAGS = constants.PullSysFlag.SUBSCRIPTION | constants.PullSysFlag.LITE_PULL_MESSAGE


def frame(opaque: int, group: str = "G_all", topic: str = TOPIC, queue_id="0",
          queue_offset="0", max_nums="32", sys_flag="0", commit_offset="0",
          sub_version=str(VERSION), serialize=SerializeType.ROCKETMQ, flag=0,
          code=RequestCode.PULL_MESSAGE, **more) -> bytes:
    fields = {"consumerGroup": group, "topic": topic, "queueId": queue_id,
              "queueOffset": queue_offset, "maxMsgNums": max_nums, "sysFlag": sys_flag,
              "commitOffset": commit_offset, "suspendTimeoutMillis": "15000",
              "subVersion": sub_version, "expressionType": "TAG", **more}
    fields = {key: value for key, value in fields.items() if value is not None}
    return command.encode(RemotingCommand(code, 0, 395, opaque, flag, None, fields),
                          int(serialize))


# (name, frame, answered by the fast path)
ROWS = [
    ("found", frame(1), True),
    ("found, JSON header", frame(2, serialize=SerializeType.JSON), True),
    ("commit offset", frame(3, queue_id="1", queue_offset="40", sys_flag="1",
                            commit_offset="40"), True),
    ("tag filter", frame(4, group="G_tag", queue_id="1", queue_offset="3", max_nums="16"), True),
    ("max bytes", frame(5, queue_offset="7", maxMsgBytes="600"), True),
    ("max bytes below one record", frame(6, queue_offset="9", maxMsgBytes="1"), True),
    ("one message", frame(7, queue_offset="11", max_nums="1"), True),
    ("across files", frame(8, queue_offset="90", max_nums="64"), True),
    ("the last records", frame(9, queue_id="1", queue_offset="290"), True),
    ("older subVersion", frame(10, sub_version=str(VERSION - 1)), True),
    ("at the end", frame(11, queue_offset=str(PER_QUEUE)), False),
    ("past the end", frame(12, queue_offset=str(PER_QUEUE + 50)), False),
    ("negative offset", frame(13, queue_offset="-1"), False),
    ("queue id too big", frame(14, queue_id=str(QUEUES)), False),
    ("negative queue id", frame(15, queue_id="-1"), False),
    ("unknown topic", frame(16, topic="NoSuchTopic"), False),
    ("unreadable topic", frame(17, topic=UNREADABLE), False),
    ("group disabled", frame(18, group="G_off"), False),
    ("no subscription", frame(19, group="G_unsubscribed"), False),
    ("newer subVersion", frame(20, sub_version=str(VERSION + 1)), False),
    ("subscription flag", frame(21, sys_flag="4", subscription="TagB"), True),
    ("SQL92", frame(22, group="G_sql"), False),
    ("no tag matched", frame(23, group="G_none_matched"), False),
    # Java's isTheBatchFull takes the first record whatever maxMsgNums and maxMsgBytes say
    ("zero messages", frame(24, max_nums="0"), True),
    ("malformed number", frame(25, queue_offset="1x"), False),
    ("oneway", frame(26, flag=RPC_ONEWAY), False),
    ("another request", frame(27, code=RequestCode.GET_CONSUMER_LIST_BY_GROUP), False),
    ("found again", frame(28, queue_id="1", queue_offset="100", sys_flag="1",
                          commit_offset="99"), True),
    # The pull's own expression: its tags, whatever the heartbeat's and its subVersion say.
    ("subscription flag, two tags", frame(29, group="G_tag", sys_flag="4",
                                          subscription="TagB || TagA ||", queue_offset="5",
                                          sub_version=str(VERSION + 9)), True),
    ("subscription flag, all", frame(30, group="G_none_matched", sys_flag="5",
                                     subscription="*", commit_offset="12"), True),
    ("subscription flag, no expression type", frame(31, sys_flag="4", subscription="TagA",
                                                    expressionType=None), True),
    # Its own expression needs no heartbeat subscription (Java's assign mode), nor a tag one.
    ("subscription flag, no heartbeat", frame(49, group="G_unsubscribed", sys_flag="4",
                                              subscription="TagA", queue_offset="70"), True),
    ("subscription flag, SQL92 heartbeat", frame(50, group="G_sql", sys_flag="4",
                                                 subscription="*", queue_id="1"), True),
    ("subscription flag, new group", frame(51, group="G_new", sys_flag="4", subscription="*",
                                           queue_offset="200"), True),
    ("subscription flag, group disabled", frame(52, group="G_off", sys_flag="4",
                                                subscription="*"), False),
    ("subscription flag, unknown topic", frame(53, group="G_unsubscribed", topic="NoSuchTopic",
                                               sys_flag="4", subscription="*"), False),
    ("subscription flag, unreadable topic", frame(54, topic=UNREADABLE, sys_flag="4",
                                                  subscription="*"), False),
    ("lite, no heartbeat", frame(55, code=LITE, group="G_unsubscribed", queue_offset="100",
                                 sys_flag=str(LITE_FLAGS), subscription="TagA"), True),
    ("lite, no heartbeat, no expression flag", frame(56, code=LITE, group="G_unsubscribed",
                                                     sys_flag="16"), False),
    # Empty values (JSON keeps them): absent to the header parse, the field's default.
    ("subscription flag, empty expression type", frame(
        47, sys_flag="4", subscription="TagB", queue_offset="3", expressionType="",
        serialize=SerializeType.JSON), True),
    ("subscription flag, empty expression", frame(48, sys_flag="4", subscription="",
                                                  serialize=SerializeType.JSON), True),
    ("subscription flag, no tag matched", frame(32, sys_flag="4", subscription="TagC"), False),
    ("subscription flag, SQL92", frame(33, sys_flag="4", subscription="a > 1",
                                       expressionType="SQL92"), False),
    ("subscription flag, unknown type", frame(34, sys_flag="4", subscription="x",
                                              expressionType="XPATH"), False),
    # LITE_PULL_MESSAGE (361): 5.x answers, the sysFlags named, as the handler's.
    ("lite", frame(35, code=LITE, sys_flag=str(LITE_FLAGS), subscription="*"), True),
    ("lite, later offset", frame(36, code=LITE, queue_id="1", queue_offset="150",
                                 sys_flag=str(LITE_FLAGS), subscription="*"), True),
    ("lite, own tags", frame(37, code=LITE, group="G_tag", queue_offset="20",
                             sys_flag=str(LITE_FLAGS), subscription="TagB"), True),
    ("lite, heartbeat tags", frame(38, code=LITE, group="G_tag", queue_offset="41",
                                   sys_flag="16"), True),
    ("lite, commit offset", frame(39, code=LITE, queue_id="1", queue_offset="60",
                                  sys_flag=str(LITE_FLAGS | 1), subscription="*",
                                  commit_offset="58"), True),
    ("lite, JSON header", frame(40, code=LITE, queue_offset="299", sys_flag=str(LITE_FLAGS),
                                subscription="*", serialize=SerializeType.JSON), True),
    ("lite, at the end", frame(41, code=LITE, queue_offset=str(PER_QUEUE),
                               sys_flag=str(LITE_FLAGS), subscription="*"), False),
    ("lite, queue id too big", frame(42, code=LITE, queue_id=str(QUEUES),
                                     sys_flag=str(LITE_FLAGS), subscription="*"), False),
    ("lite, group disabled", frame(43, code=LITE, group="G_off", sys_flag=str(LITE_FLAGS),
                                   subscription="*"), False),
    ("lite, unreadable topic", frame(44, code=LITE, topic=UNREADABLE,
                                     sys_flag=str(LITE_FLAGS), subscription="*"), False),
    ("lite, SQL92", frame(45, code=LITE, sys_flag=str(LITE_FLAGS), subscription="a > 1",
                          expressionType="SQL92"), False),
    ("lite, oneway", frame(46, code=LITE, sys_flag=str(LITE_FLAGS), subscription="*",
                           flag=RPC_ONEWAY), False),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("pull-fast"))
    config = load_broker_config(None, dict(SETTINGS, storePathRootDir=root))
    with MessageStore(config.store) as message_store:
        for queue_id in range(QUEUES):
            for number in range(PER_QUEUE):
                properties = (f"TAGS\x01Tag{'AB'[number % 2]}\x02a\x01{number % 4}\x02"
                              f"UNIQ_KEY\x01K{queue_id}-{number}\x02").encode()
                body = bytes([number % 251]) * (80 + number % 50)
                size = record_codec.encoded_size(len(body), len(TOPIC), len(properties), 0)
                run = bytearray(size)
                record_codec.encode_into(run, 0, TOPIC.encode(), queue_id, 0, body, properties,
                                         0, 1_700_000_000_000 + number, HOST, 40000, HOST,
                                         10911)
                assert message_store.put_messages(run, TOPIC, queue_id, 1, 0).status.stored
        end = message_store.max_physical_offset
    assert end > 2 * (48 << 10)          # the pulls cross CommitLog files
    return root, end


class Transport:
    """A transport over one end of a socket pair (the connection writes with writev), or
    without a socket: everything then goes through write / writelines."""

    def __init__(self, sock: socket.socket | None):
        self.sock = sock
        self.written = bytearray()

    def get_extra_info(self, name, default=None):
        if name == "peername":
            return ("127.0.0.1", 50000)
        return self.sock if name == "socket" and self.sock is not None else default

    def set_write_buffer_limits(self, high=None, low=None):
        pass

    def get_write_buffer_size(self):
        return 0

    def is_closing(self):
        return False

    def write(self, data):
        self.written += data

    def writelines(self, chunks):
        for chunk in chunks:
            self.written += chunk

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


class Worker:
    """One remoting worker's pull side over the store (see the module docstring)."""

    def __init__(self, tmp_path, name: str, store, fast: bool, with_socket: bool,
                 settings: dict[str, str]):
        root, end = store
        self.root = root
        self.config = load_broker_config(None, dict(SETTINGS, storePathRootDir=root,
                                                    **settings))
        self.reader = MessageStoreReader(self.config.store, end, positions=lambda: (end, end))
        self.metadata = MetadataState(self.config)
        self.metadata.topics.update_topic_config(TopicConfig(TOPIC, QUEUES, QUEUES,
                                                             topic_sys_flag=TOPIC_SYS_FLAG))
        self.metadata.topics.update_topic_config(TopicConfig(UNREADABLE, 1, 1, perm=2))
        self.metadata.groups.update_subscription_group(
            SubscriptionGroupConfig("G_off", consume_enable=False))
        self.metadata.groups.update_subscription_group(
            SubscriptionGroupConfig("G_tag", group_sys_flag=TAG_GROUP_SYS_FLAG))
        self.region = StatsRegion.create(str(tmp_path / f"{name}-stats"), 6, 0)
        self.stats = Recorder(self.region.writer(5))
        self.committed: list = []
        self.ctx = BrokerContext(self.config, self.reader, None, self.metadata, (HOST, 10911),
                                 stats=self.stats)
        self.fast = fast
        self.peer = None
        sock = None
        if with_socket:
            self.peer, sock = socket.socketpair()
            for end_ in (self.peer, sock):
                end_.setblocking(False)
        self.sock = sock
        self.transport = Transport(sock)
        self.port: FastPullPort | None = None
        self.closed = False

    async def commit_offset(self, group, topic, queue_id, offset):
        self.committed.append((group, topic, queue_id, offset))

    def connect(self) -> RemotingConnection:
        ctx, stats = self.ctx, self.stats
        self.metadata.commit_offset = self.commit_offset

        async def run(connection, request):
            # proc/remoting.py RemotingWorker._local, as it wraps every data handler.
            channel = connection.attachment
            channel.language, channel.version = request.language, request.version
            family = _FAMILIES.get(request.code)
            started = stats.now_ns()
            token = stats.request_started(family)
            response = None
            try:
                response = await pull.handle_pull_message(ctx, channel, request)
                return response
            finally:
                stats.request_finished(family, token, (stats.now_ns() - started) // 1000,
                                       _rpc_answer(request, response))
        connection = RemotingConnection(RequestTable({code: run for code in pull.HANDLERS}),
                                        ConnectionLimits.from_config(self.config.remoting))
        connection.connection_made(self.transport)
        channel = Channel("0:1", "127.0.0.1:50000", int(constants.LanguageCode.JAVA), 395,
                          connection.send)
        connection.attachment = channel
        for group, topics in GROUPS.items():
            subscriptions = [
                build_subscription(topic, text, kind, VERSION) if kind == "TAG" else
                SubscriptionData(topic=topic, sub_string=text, sub_version=VERSION,
                                 expression_type=kind)
                for topic, (text, kind) in topics.items()]
            self.metadata.consumers.register_consumer(
                group, make_channel_info(channel, f"127.0.0.1@{group}", 0),
                constants.ConsumeType.CONSUME_PASSIVELY, constants.MessageModel.CLUSTERING,
                constants.ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, subscriptions,
                notify_enabled=False)
        if self.fast:
            self.port = FastPullPort(self.config, self.reader, self.stats,
                                     self.committed.extend)
            self.port.refresh(self.config, self.metadata)
            connection.use_frame_taker(PullTaker(self.port, connection,
                                                 connection.limits.write_buffer_high_bytes))
        return connection

    def received(self) -> bytes:
        data = bytes(self.transport.written)
        while self.peer is not None:
            try:
                chunk = self.peer.recv(1 << 20)
            except BlockingIOError:
                break
            data += chunk
        return data

    def counted(self) -> tuple:
        snapshot = self.region.snapshot()
        counters = [snapshot.counter(counter) for counter in (
            StatsCounter.REQUESTS_TOTAL, StatsCounter.PULL_STARTED, StatsCounter.PULL_FINISHED,
            StatsCounter.GET_FOUND, StatsCounter.GET_MISS, StatsCounter.GET_TRANSFERRED_MESSAGES,
            StatsCounter.GET_TRANSFERRED_BYTES, StatsCounter.BROKER_GET_NUMS,
            StatsCounter.PULL_PAGES, StatsCounter.PULL_PAGES_COLD, StatsCounter.PULLS_COLD,
            StatsCounter.PULLS_IN_DISK, StatsCounter.KEYS_DROPPED,
            StatsCounter.PULL_OLDEST_MS)]
        # rocketmq_rpc_latency's series: the same keys and counts; the bucket (label) and the
        # sum are latencies, which differ between two runs.
        keys, rpc = {}, {}
        for (kind, label, key), words in snapshot.labelled_keys().items():
            if kind == StatsKeyKind.KEY_RPC:
                rpc[key] = rpc.get(key, 0) + words[0]
            else:
                keys[(kind, label, key)] = words
        return counters, keys, rpc, snapshot.pull_offsets()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.port is not None:
            self.port.close()
        self.reader.close()
        self.stats.writer.close()
        self.region.close()
        for end_ in (self.peer, self.sock):
            if end_ is not None:
                end_.close()


def feed(connection: RemotingConnection, data: bytes) -> None:
    while data:
        buffer = connection.get_buffer(len(data))
        size = min(len(buffer), len(data))
        buffer[:size] = data[:size]
        del buffer
        connection.buffer_updated(size)
        data = data[size:]


def responses(data: bytes) -> dict[int, bytes]:
    """Response frames by opaque (each opaque answered once)."""
    out, at = {}, 0
    while at < len(data):
        length = int.from_bytes(data[at:at + 4], "big") + 4
        opaque = command.decode(data, at, length).opaque
        assert opaque not in out
        out[opaque] = bytes(data[at:at + length])
        at += length
    assert at == len(data)
    return out


def store_files(root: str) -> list[str]:
    return [os.path.join(folder, name) for folder, _, names in os.walk(root) for name in names]


def warm(root: str) -> None:
    """Every page of the store read into the page cache (memory pressure from other tests may
    have evicted some since the store was written)."""
    for path in store_files(root):
        with open(path, "rb") as file:
            while file.read(1 << 20):
                pass


def evict(root: str) -> bool:
    """The store's pages dropped from the page cache (durable first; no worker may have them
    mapped); False when some stay resident (a tmpfs keeps them)."""
    resident = 0
    for path in store_files(root):
        evict_file(path)
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size:
                with mmap.mmap(fd, size, prot=mmap.PROT_READ) as view:
                    vector = bytearray((size + pagecache.page_size() - 1)
                                       // pagecache.page_size())
                    resident += pagecache.residency(view, 0, size, vector)
        finally:
            os.close(fd)
    return resident == 0


def run(worker: Worker, reads: list[bytes], warmed: bool = True) -> tuple:
    """Each read fed in turn and run to its answers: (answers, commits, figures, reads the
    fast path answered wholly, fast pulls). ``warmed``: the store's pages read in first."""
    if warmed:
        warm(worker.root)

    async def main():
        connection = worker.connect()
        taken = []
        for data in reads:
            before = worker.port.path.fast_pulls_total if worker.port is not None else 0
            feed(connection, data)
            for _ in range(50):
                await asyncio.sleep(0)
                if not connection.handler_tasks:
                    break
            assert not connection.handler_tasks
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            after = worker.port.path.fast_pulls_total if worker.port is not None else 0
            taken.append(after - before)
        connection.connection_lost(None)
        return responses(worker.received()), list(worker.committed), worker.counted(), taken
    return asyncio.run(main())


@pytest.fixture
def pair(tmp_path, store):
    made = []

    def make(with_socket: bool = True, **settings: str):
        workers = (Worker(tmp_path, f"python{len(made)}", store, False, with_socket, settings),
                   Worker(tmp_path, f"fast{len(made)}", store, True, with_socket, settings))
        made.extend(workers)
        return workers
    yield make
    for worker in made:
        worker.close()


@pytest.mark.parametrize("row", ROWS, ids=[row[0] for row in ROWS])
def test_each_pull_gets_the_handler_answer(pair, row):
    name, data, fast = row
    python_worker, fast_worker = pair()
    expected = run(python_worker, [data])
    got = run(fast_worker, [data])
    assert got[:3] == expected[:3]
    assert got[3] == [1 if fast else 0]
    assert expected[0] or name.endswith("oneway")


@pytest.mark.parametrize("name", ["tag filter", "lite, later offset", "across files"])
def test_cold_pages_are_counted_as_the_handler_counts_them(pair, name):
    """Each run starts with none of the store's pages in the page cache (the Python worker
    closed before the second eviction, so none stays mapped): both count the same cold pages
    and cold pulls, and some."""
    row = next(row for row in ROWS if row[0] == name)
    python_worker, fast_worker = pair()
    if not evict(python_worker.root):
        pytest.skip("the store's pages stay resident here (tmpfs?)")
    expected = run(python_worker, [row[1]], warmed=False)
    python_worker.close()
    assert evict(fast_worker.root)
    got = run(fast_worker, [row[1]], warmed=False)
    assert got[:3] == expected[:3]
    assert got[3] == [1]
    pages, cold_pages, cold_pulls = got[2][0][8:11]
    assert 0 < cold_pages <= pages and cold_pulls == 1


@pytest.mark.parametrize("with_socket", [True, False], ids=["writev", "transport"])
def test_the_whole_table_in_one_read(pair, with_socket):
    python_worker, fast_worker = pair(with_socket)
    data = b"".join(row[1] for row in ROWS)
    expected = run(python_worker, [data])
    got = run(fast_worker, [data])
    assert got[:3] == expected[:3]
    assert got[3] == [sum(row[2] for row in ROWS)]
    assert len(expected[0]) == len(ROWS) - 2          # the oneway pulls have no answer
    # rocketmq_rpc_latency counts every SUCCESS answer, the fast path's too
    rpc = got[2][2]
    assert rpc["pull_message|success|false|success"] + \
        rpc["lite_pull_message|success|false|success"] == sum(
            command.decode(answer, 0, len(answer)).code == 0 for answer in got[0].values())


def test_lite_pulls_stay_the_handlers_while_lite_pull_is_disabled(pair):
    """litePullMessageEnable=false: every LITE_PULL_MESSAGE gets the handler's refusal
    (NO_PERMISSION naming BROKER_FORBIDDEN), the PULL_MESSAGE rows stay fast."""
    python_worker, fast_worker = pair(litePullMessageEnable="false")
    data = b"".join(row[1] for row in ROWS)
    expected = run(python_worker, [data])
    got = run(fast_worker, [data])
    assert got[:3] == expected[:3]
    lite = {row[0] for row in ROWS if command.decode(row[1], 0, len(row[1])).code == LITE}
    assert len(lite) == 14
    assert got[3] == [sum(row[2] for row in ROWS if row[0] not in lite)]
    refused = {opaque for opaque, answer in got[0].items()
               if command.decode(answer, 0, len(answer)).ext_fields.get("forbiddenType")
               == str(int(constants.ForbiddenType.BROKER_FORBIDDEN))}
    assert len(refused) == len(lite) - 1               # the oneway one has no answer


def test_lite_answers_name_the_sys_flags(pair):
    """A fast LITE_PULL_MESSAGE answer carries the topic's and the group's sysFlag (the
    answers' equality with the handler's is the table's; this shows the values are there)."""
    _, fast_worker = pair()
    rows = [row for row in ROWS if row[0] in ("lite", "lite, own tags")]
    got = run(fast_worker, [row[1] for row in rows])
    assert got[3] == [1, 1]
    flags = {}
    for opaque, answer in got[0].items():
        fields = command.decode(answer, 0, len(answer)).ext_fields
        flags[opaque] = fields["topicSysFlag"], fields["groupSysFlag"]
    assert flags == {35: (str(TOPIC_SYS_FLAG), "0"),
                     37: (str(TOPIC_SYS_FLAG), str(TAG_GROUP_SYS_FLAG))}
    # Lite pulls are pulls in the figures (pull started / finished), as PULL_MESSAGE's are.
    requests, started, finished = got[2][0][:3]
    assert (requests, started, finished) == (2, 2, 2)


def test_a_subscription_change_is_followed(pair):
    """A heartbeat with a newer subVersion (the table refreshed from it) makes the newer
    pull fast; until the refresh the handler answers it (SUBSCRIPTION_NOT_LATEST)."""
    _, fast_worker = pair()
    newer = frame(40, sub_version=str(VERSION + 5))

    async def main():
        connection = fast_worker.connect()
        feed(connection, newer)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert fast_worker.port.path.fast_pulls_total == 0
        fast_worker.metadata.consumers.register_consumer(
            "G_all", make_channel_info(connection.attachment, "127.0.0.1@G_all", 0),
            constants.ConsumeType.CONSUME_PASSIVELY, constants.MessageModel.CLUSTERING,
            constants.ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
            [build_subscription(TOPIC, "*", "TAG", VERSION + 5)], notify_enabled=False)
        fast_worker.port.refresh(fast_worker.config, fast_worker.metadata)
        feed(connection, frame(41, sub_version=str(VERSION + 5)))
        await asyncio.sleep(0)
        assert fast_worker.port.path.fast_pulls_total == 1
        connection.connection_lost(None)
    asyncio.run(main())
    answers = responses(fast_worker.received())
    codes = {opaque: command.decode(data, 0, len(data)).code
             for opaque, data in answers.items()}
    assert codes == {40: 25, 41: 0}       # SUBSCRIPTION_NOT_LATEST, then SUCCESS
