# Shared test harness of the send-path tests: a real store, real metadata, a recording channel.
"""A broker context over a real MessageStore on a temp dir, the real MetadataState, a putter
over the store, and requests built the way the Java (310, short names), Go (10, long names) and
C++ (310, numbers sent as JSON numbers then stringified by the codec) clients build them.
Loaded by the test files with :func:`load` (pytest runs with --import-mode=importlib).
"""
import asyncio

from pybroker._fast import record as record_codec
from pybroker.broker.channel import Channel
from pybroker.broker.context import BrokerContext, StorePutter
from pybroker.broker.metadata import MetadataState
from pybroker.config import load_broker_config
from pybroker.protocol import constants
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.command import RemotingCommand
from pybroker.protocol.properties import decode_properties, encode_properties
from pybroker.store.config_docs import TopicConfig
from pybroker.store.message_store import MessageStore

TOPIC = "TopicTest"
HOST = bytes([127, 0, 0, 1])
SMALL_STORE = {"mappedFileSizeCommitLog": str(8 << 20), "mappedFileSizeConsumeQueue": "20000",
               "maxHashSlotNum": "1000", "maxIndexNum": "4000", "brokerIP1": "127.0.0.1",
               "brokerClusterName": "ClusterX"}
BORN_MS = 1_700_000_000_000


class Putter(StorePutter):
    """StorePutter calling put_messages positionally (its keyword differs: wait_store_ok)."""

    async def put(self, records, topic, queue_id, count, sys_flag, wait_store, *,
                  message_ids=True):
        return self.store.put_messages(records, topic, queue_id, count, sys_flag, wait_store)


class Broker:
    """Store + metadata + context on ``tmp_path``; ``sent`` collects what the channel sends."""

    def __init__(self, tmp_path, overrides=None, clock_ms=None):
        settings = dict(SMALL_STORE, storePathRootDir=str(tmp_path), **(overrides or {}))
        self.config = load_broker_config(None, settings)
        self.store = MessageStore(self.config.store, clock_ms=clock_ms)
        self.store.load()
        self.store.start()
        self.metadata = MetadataState(self.config)
        self.metadata.topics.update_topic_config(TopicConfig(TOPIC, read_queue_nums=4,
                                                      write_queue_nums=4))
        self.putter = Putter(self.store)
        self.ctx = BrokerContext(self.config, self.store, self.putter, self.metadata,
                                 (HOST, 10911))
        self.sent: list[RemotingCommand] = []
        self.channel = Channel("0:1", "10.1.2.3:40000", int(constants.LanguageCode.JAVA), 401,
                               self.sent.append)

    def close(self) -> None:
        self.store.shutdown()

    def call(self, handler, request):
        return asyncio.run(handler(self.ctx, self.channel, request))

    def records(self, topic: str, queue_id: int = 0) -> list:
        """(decoded record, properties dict) of every record in a queue, copies."""
        out = []
        result = self.store.get_messages("G", topic, queue_id, 0, 1000)
        try:
            for buffer in result.buffers:
                data = bytes(buffer)
                decoded = record_codec.decode(data, 0)
                out.append((decoded, decode_properties(decoded.properties)))
        finally:
            result.release()
        return out

    def commitlog_end(self) -> int:
        return self.store.max_physical_offset


def properties_text(**values) -> str:
    return encode_properties(values)


def send_fields(topic=TOPIC, queue_id=0, properties="", sys_flag=0, batch=False, **extra):
    """Long-name header values (strings) as the Go client sends them on code 10."""
    fields = {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102",
              "defaultTopicQueueNums": "4", "queueId": str(queue_id), "sysFlag": str(sys_flag),
              "bornTimestamp": str(BORN_MS), "flag": "0", "properties": properties,
              "reconsumeTimes": "0", "unitMode": "false", "maxReconsumeTimes": "0",
              "batch": "true" if batch else "false", "bname": "b"}
    fields.update(extra)
    return fields


_SHORT = {"producerGroup": "a", "topic": "b", "defaultTopic": "c",
          "defaultTopicQueueNums": "d", "queueId": "e", "sysFlag": "f", "bornTimestamp": "g",
          "flag": "h", "properties": "i", "reconsumeTimes": "j", "unitMode": "k",
          "maxReconsumeTimes": "l", "batch": "m", "bname": "n"}


def send_request(style: str, body, oneway=False, **kwargs) -> RemotingCommand:
    """A send request as the ``style`` client ("java", "go", "cpp", "java-batch") builds it."""
    fields = send_fields(**kwargs)
    if style == "go":
        code = RequestCode.SEND_MESSAGE
    else:
        code = RequestCode.SEND_BATCH_MESSAGE if style == "java-batch" else \
            RequestCode.SEND_MESSAGE_V2
        fields = {_SHORT[name]: value for name, value in fields.items()}
    if style == "cpp":
        fields.pop("n")
        fields.pop("j")     # C++ leaves reconsumeTimes out of normal sends
    language = {"go": constants.LanguageCode.GO, "cpp": constants.LanguageCode.CPP}.get(
        style, constants.LanguageCode.JAVA)
    flag = constants.RPC_ONEWAY if oneway else 0
    return RemotingCommand(code, int(language), 401, 11, flag, None, fields, body)


def batch_body(messages) -> bytes:
    """The protocol.md §3.6 batch encoding of [(body bytes, properties str)]."""
    out = bytearray()
    for body, properties in messages:
        props = properties.encode()
        size = 22 + len(body) + len(props)
        out += size.to_bytes(4, "big") + bytes(8) + (0).to_bytes(4, "big")
        out += len(body).to_bytes(4, "big") + body + len(props).to_bytes(2, "big") + props
    return bytes(out)


def run(coroutine):
    return asyncio.run(coroutine)
