"""The send fast path answers every send exactly as the Python path does, and stores the same.

Method: a table of valid and invalid SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and
SEND_BATCH_MESSAGE (320) frames, in both header encodings, goes through a real
RemotingConnection (fake transport, real frames) twice: once with the Python path only, once
with the fast path (send_port.FastSendPort) in front of it, each over its own real
shared-memory send and completion rings. A stand-in appender in the test assigns offsets and
answers each put (PUT_OK, or a status the body asks for). The response frames (by opaque) and
the put requests that reached the ring must be byte for byte the same; the rows marked fast must
have been taken by the fast path and the others left to the Python path.
"""
import asyncio
import random
import re
import time

import orjson
import pytest

from pybroker.broker import send, send_fast
from pybroker.broker.channel import Channel
from pybroker.broker.context import BrokerContext
from pybroker.broker.metadata import MetadataState
from pybroker.config import load_broker_config
from pybroker import clock
from pybroker._fast import ring as ring_module
from pybroker.proc import shared
from pybroker.proc.fast_failure import FastFailure
from pybroker.proc.remoting import _rpc_answer
from pybroker.proc.ring_format import PUT_STATUSES, read_put_request
from pybroker.proc.ring_putter import RingPutter
from pybroker.proc.wake import WakeFd
from pybroker.protocol import command
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand
from pybroker.protocol.constants import RPC_ONEWAY, SerializeType
from pybroker.remoting.connection import RemotingConnection
from pybroker.remoting.limits import ConnectionLimits
from pybroker.remoting.server import RequestTable
from pybroker.stats.recorder import Recorder
from pybroker._fast.stats import StatsCounter, StatsHistogram, StatsKeyKind
from pybroker.stats.region import StatsRegion
from pybroker.store.config_docs import TopicConfig
from pybroker.store.control_block import APPENDER, ControlBlock
from pybroker.store.status import PutStatus

TOPIC = "TopicTest"
STORE_HOST = (bytes([10, 0, 0, 7]), 10911)
PEER = ("10.1.2.3", 40000)
BORN_MS = 1_700_000_000_000
SETTINGS = {"brokerIP1": "10.0.0.7", "brokerClusterName": "ClusterX", "maxMessageSize": "4096",
            "regionId": "RegionX"}
_SHORT = dict(zip(["producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId",
                   "sysFlag", "bornTimestamp", "flag", "properties", "reconsumeTimes",
                   "unitMode", "maxReconsumeTimes", "batch", "bname"], "abcdefghijklmn",
                  strict=True))
_OPAQUES = iter(range(100, 1_000_000))
_BUSY_CODE = PUT_STATUSES.index(PutStatus.TIMEOUT_CLEAN_QUEUE)


# --- frames --------------------------------------------------------------------------------------

def fields(topic=TOPIC, queue_id="1", properties="TAGS\x01TagA\x02WAIT\x01true\x02", **extra):
    values = {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102",
              "defaultTopicQueueNums": "4", "queueId": queue_id, "sysFlag": "0",
              "bornTimestamp": str(BORN_MS), "flag": "0", "properties": properties,
              "reconsumeTimes": "0", "unitMode": "false", "maxReconsumeTimes": "16",
              "batch": "false"}
    values.update(extra)
    return {name: value for name, value in values.items() if value is not None}


def frame(style: str, body=b"hello", oneway=False, **kwargs) -> bytes:
    """styles: binary (Java benchmark, 310 ROCKETMQ), json310 (Java default), go (10 JSON),
    batch-binary / batch-json (320)."""
    values = fields(**kwargs)
    code = RequestCode.SEND_MESSAGE
    if style != "go":
        code = RequestCode.SEND_BATCH_MESSAGE if style.startswith("batch") \
            else RequestCode.SEND_MESSAGE_V2
        values = {_SHORT.get(name, name): value for name, value in values.items()}
    serialize = SerializeType.ROCKETMQ if style.endswith("binary") else SerializeType.JSON
    request = RemotingCommand(code, 0 if style != "go" else 9, 409, next(_OPAQUES),
                              RPC_ONEWAY if oneway else 0, None, values, body)
    return command.encode(request, int(serialize))


def hand_json(header: bytes, body=b"hello") -> bytes:
    """A JSON frame from a hand-written header (whitespace, escapes, key orders of real clients)."""
    return (4 + len(header) + len(body)).to_bytes(4, "big") + len(header).to_bytes(4, "big") \
        + header + body


def duplicate_key_frame() -> bytes:
    """A ROCKETMQ header whose ext block names "b" twice (Java never sends it)."""
    pairs = list(fields().items()) + [("topic", "Other")]
    block = b"".join(len(_SHORT[k]).to_bytes(2, "big") + _SHORT[k].encode()
                     + len(v).to_bytes(4, "big") + v.encode() for k, v in pairs)
    header = (310).to_bytes(2, "big") + b"\x00" + (409).to_bytes(2, "big") \
        + next(_OPAQUES).to_bytes(4, "big") + bytes(4) + bytes(4) \
        + len(block).to_bytes(4, "big") + block
    return (4 + len(header) + 5).to_bytes(4, "big") + (len(header) | 1 << 24).to_bytes(
        4, "big") + header + b"hello"


def batch_body(messages) -> bytes:
    out = bytearray()
    for flag, body, properties in messages:
        props = properties.encode()
        out += (22 + len(body) + len(props)).to_bytes(4, "big") + bytes(8)
        out += flag.to_bytes(4, "big") + len(body).to_bytes(4, "big") + body
        out += len(props).to_bytes(2, "big") + props
    return bytes(out)


GO_HEADER = (b'{"code":10,"language":"GO","version":317,"opaque":%d,"flag":0,"remark":"",'
             b'"extFields":{"producerGroup":"PG","topic":"TopicTest","defaultTopic":"TBW102",'
             b'"defaultTopicQueueNums":"4","queueId":"2","sysFlag":"0","bornTimestamp":"%d",'
             b'"flag":"0","properties":"UNIQ_KEY\\u0001AB12\\u0002WAIT\\u0001true\\u0002",'
             b'"reconsumeTimes":"0","unitMode":"false","maxReconsumeTimes":"0","batch":"false"}}')
SPACED_HEADER = (b' { "code" : 310 , "extFields" : { "a" : "PG" , "b" : "Topic\\u0054est" , '
                 b'"c" : "TBW102" , "d" : "4" , "e" : "3" , "f" : "0" , "g" : "%d" , '
                 b'"h" : "5" , "i" : "KEYS\\u0001k\\/1\\u0002" , "zz" : "\\"q\\"" } , '
                 b'"flag" : 0 , "language" : 0 , "opaque" : %d , "remark" : null , '
                 b'"version" : 409 , "extra" : true }\n')
# extFields before the code (no client seen writes it so; the reader then reads it last).
EXT_FIRST_HEADER = (b'{"extFields":{"a":"PG","b":"TopicTest","c":"TBW102","d":"4","e":"1",'
                    b'"f":"0","g":"%d","h":"0","i":"TAGS\\u0001T\\u0002"},"code":310,"flag":0,'
                    b'"language":"JAVA","opaque":%d,"version":409}')

LONG_TEXT = "K\x01" + "v" * 32755 + "\x02"   # 32759 bytes; 32776 with CLUSTER
# A delivery time a day ahead: parked, in a slot that depends on it alone (not on now).
TOMORROW_MS = int(time.time()) * 1000 + 86_400_000
ROWS = [
    # (name, frame, taken by the fast path)
    ("java benchmark binary", frame("binary"), True),
    ("java json 310", frame("json310"), True),
    ("go json 10", frame("go"), True),
    ("go client header", hand_json(GO_HEADER % (next(_OPAQUES), BORN_MS)), True),
    ("spaced json, escapes", hand_json(SPACED_HEADER % (BORN_MS, next(_OPAQUES))), True),
    ("json, extFields before code",
     hand_json(EXT_FIRST_HEADER % (BORN_MS, next(_OPAQUES))), True),
    ("WAIT false", frame("binary", properties="WAIT\x01false\x02KEYS\x01a b\x02"), True),
    ("no properties", frame("binary", properties=None), True),
    ("empty properties", frame("json310", properties=""), True),
    ("empty-valued pair", frame("binary", properties="A\x01\x02B\x01b\x02"), True),
    ("multi-tag topic", frame("binary", topic="MultiTag"), True),
    ("oneway", frame("binary", oneway=True), True),
    ("sysflag compressed", frame("go", sysFlag="1", flag="7", reconsumeTimes="3"), True),
    ("signed and padded numbers", frame("binary", queue_id="+03", bornTimestamp="-5"), True),
    ("unknown ext fields", frame("go", bname="broker-a", ns="x", AccessKey="k"), True),
    ("1 KiB body", frame("binary", body=bytes(range(256)) * 4), True),
    ("DEL byte in properties", frame("binary", properties="K\x01a\x7f\x02"), True),
    ("appender: service not available", frame("binary", body=b"#SNA#"), True),
    ("appender: flush timeout status", frame("json310", body=b"#FDT#"), True),
    ("appender: unknown status", frame("go", body=b"#UNK#"), True),
    ("unknown topic (auto-create)", frame("binary", topic="BrandNew"), False),
    ("queue id out of range", frame("binary", queue_id="4"), False),
    ("negative queue id", frame("go", queue_id="-1"), False),
    ("empty body", frame("binary", body=b""), False),
    ("body over maxMessageSize", frame("binary", body=b"x" * 4097), False),
    ("missing topic", frame("binary", topic=None), False),
    ("missing required number", frame("json310", defaultTopicQueueNums=""), False),
    ("bad queue id", frame("go", queue_id="1x"), False),
    ("queue id overflow", frame("binary", queue_id="2147483648"), False),
    ("bad boolean", frame("binary", unitMode="yes"), False),
    ("delay", frame("binary", properties="DELAY\x013\x02"), False),
    ("delay zero", frame("binary", properties="DELAY\x010\x02"), False),
    ("transaction property", frame("binary", properties="TRAN_MSG\x01true\x02PGROUP\x01P\x02"),
     False),
    ("transaction sysflag", frame("go", sysFlag="4"), False),
    ("control character", frame("binary", properties="K\x01a\x05\x02"), False),
    ("duplicate property", frame("binary", properties="K\x01a\x02K\x01b\x02"), False),
    ("pipe in tag", frame("binary", properties="TAGS\x01a|b\x02"), False),
    ("blank tag", frame("binary", properties="TAGS\x01  \x02"), False),
    ("cluster property", frame("binary", properties="CLUSTER\x01C\x02"), False),
    # 5.x timer messages: parked by the fast path as the handler parks them (send/timer.pyx,
    # broker/timer_message.py; the answer carries the recall handle), refusals and the rarer
    # shapes left to the handler.
    ("timer deliver time", frame("binary", properties=f"TIMER_DELIVER_MS\x01{TOMORROW_MS}\x02"
                                 "UNIQ_KEY\x01U1\x02"), True),
    ("timer producer (Apache's TimerProducer)", frame("json310", properties=(
        f"MY_RECORD_TIMER_DELIVER_MS\x01{TOMORROW_MS + 1234}\x02TIMER_DELIVER_MS\x01"
        f"{TOMORROW_MS + 1234}\x02UNIQ_KEY\x017F0000010F2A18B4AAC2\x02WAIT\x01true\x02")), True),
    ("timer, go json 10, WAIT false", frame("go", properties=(
        f"WAIT\x01false\x02TIMER_DELIVER_MS\x01+0{TOMORROW_MS + 1}\x02UNIQ_KEY\x01G\x02"
        "TAGS\x01T\x02E\x01\x02")), True),
    ("timer oneway", frame("binary", oneway=True, properties=(
        f"TIMER_DELIVER_MS\x01{TOMORROW_MS}\x02UNIQ_KEY\x01O\x02")), True),
    ("timer to a multi-tag topic", frame("binary", topic="MultiTag", queue_id="0", properties=(
        f"UNIQ_KEY\x01M\x02TIMER_DELIVER_MS\x01{TOMORROW_MS + 999}\x02")), True),
    ("timer, appender: flush timeout status", frame("json310", body=b"#FDT#", properties=(
        f"TIMER_DELIVER_MS\x01{TOMORROW_MS}\x02UNIQ_KEY\x01F\x02")), True),
    ("timer, appender: service not available", frame("binary", body=b"#SNA#", properties=(
        f"TIMER_DELIVER_MS\x01{TOMORROW_MS}\x02UNIQ_KEY\x01S\x02")), True),
    ("timer deliver time past: stored as is", frame("binary", properties=(
        "TIMER_DELIVER_MS\x011000\x02UNIQ_KEY\x01P\x02WAIT\x01true\x02")), True),
    ("timer cancel mark due now", frame("binary", properties=(
        "TIMER_DELIVER_MS\x011000\x02TIMER_DEL_UNIQKEY\x01TopicTest+X\x02UNIQ_KEY\x01C\x02")),
     False),
    ("timer with REAL_TOPIC", frame("binary", properties=(
        f"REAL_TOPIC\x01Other\x02TIMER_DELIVER_MS\x01{TOMORROW_MS}\x02UNIQ_KEY\x01R\x02")),
     False),
    ("timer already delivered (TIMER_OUT_MS)", frame("binary", properties=(
        f"TIMER_OUT_MS\x015\x02TIMER_DELIVER_MS\x01{TOMORROW_MS}\x02UNIQ_KEY\x01D\x02")),
     False),
    ("timer and a delay level", frame("binary", properties=(
        f"DELAY\x012\x02TIMER_DELIVER_MS\x01{TOMORROW_MS}\x02UNIQ_KEY\x01L\x02")), False),
    ("timer, transaction sysflag", frame("go", sysFlag="4", properties=(
        f"TIMER_DELIVER_MS\x01{TOMORROW_MS}\x02UNIQ_KEY\x01T\x02")), False),
    ("timer, transaction property", frame("binary", properties=(
        f"TRAN_MSG\x01true\x02TIMER_DELIVER_MS\x01{TOMORROW_MS}\x02UNIQ_KEY\x01H\x02")),
     False),
    ("timer to the wheel topic itself", frame("binary", topic="rmq_sys_wheel_timer",
                                              queue_id="0", properties=(
        f"TIMER_DELIVER_MS\x01{TOMORROW_MS}\x02UNIQ_KEY\x01W\x02")), False),
    ("plain send to the wheel topic", frame("binary", topic="rmq_sys_wheel_timer",
                                            queue_id="0"), False),
    ("timer deliver too far", frame("binary", properties="TIMER_DELIVER_MS\x014102444800000\x02"),
     False),
    ("timer delay not a number", frame("go", properties="TIMER_DELAY_MS\x01x\x02"), False),
    ("timer delay seconds too long", frame("json310", properties="TIMER_DELAY_SEC\x01"
                                           "999999999\x02"), False),
    ("no separator", frame("binary", properties="K\x02"), False),
    ("non-ascii property", frame("binary", properties="K\x01\u00e9t\u00e9\x02"), False),
    ("retry topic", frame("binary", topic="%RETRY%G1"), False),
    ("topic not allowed", frame("binary", topic="SCHEDULE_TOPIC_XXXX"), False),
    ("properties too long once stored", frame("binary", properties=LONG_TEXT), False),
    ("batch binary", frame("batch-binary", batch="true", body=batch_body(
        [(0, b"m0", "UNIQ_KEY\x01A\x02WAIT\x01true\x02"), (3, b"m1", "TAGS\x01T"),
         (0, b"m2", "")])), True),
    ("batch json", frame("batch-json", batch="true", properties="WAIT\x01false\x02",
                         body=batch_body([(0, b"x" * 300, "K\x01v\x02")] * 4)), True),
    ("batch of one binary", frame("batch-binary", batch="true",
                                  body=batch_body([(0, b"one", "K\x01v\x02")])), True),
    ("batch of one json", frame("batch-json", batch="true", body=batch_body([(0, b"1", "")])),
     True),
    ("batch flag on code 310", frame("binary", batch="true",
                                     body=batch_body([(0, b"a", "")] * 2)), True),
    ("batch on code 320 without the flag", frame("batch-binary"), True),
    ("batch with inner delay", frame("batch-binary", batch="true", body=batch_body(
        [(0, b"a", "DELAY\x012\x02")])), False),
    ("batch with inner timer properties", frame("batch-binary", batch="true", body=batch_body(
        [(0, b"a", "TIMER_DELAY_SEC\x012\x02"), (0, b"b", "TIMER_DELIVER_MS\x019\x02")])),
     True),
    ("batch to retry topic", frame("batch-binary", batch="true", topic="%RETRY%G1",
                                   body=batch_body([(0, b"a", "")])), False),
    ("batch malformed", frame("batch-binary", batch="true", body=b"\x00\x00\x00\x05xxxxx"),
     False),
    ("batch inner over maxMessageSize", frame("batch-json", batch="true",
                                              body=batch_body([(0, b"y" * 4097, "")])), False),
    ("batch inner control character", frame("batch-binary", batch="true",
                                            body=batch_body([(0, b"a", "K\x01\x03\x02")])),
     False),
    ("batch header transaction", frame("batch-binary", batch="true", sysFlag="8",
                                       body=batch_body([(0, b"a", "")])), False),
]


# --- the two runs --------------------------------------------------------------------------------

class FakeTransport:
    def __init__(self):
        self.written = bytearray()
        self.aborted = False

    def get_extra_info(self, name, default=None):
        return PEER if name == "peername" else default

    def set_write_buffer_limits(self, high=None, low=None):
        pass

    def get_write_buffer_size(self):
        return 0

    def write(self, data):
        self.written += data

    def writelines(self, chunks):
        for chunk in chunks:
            self.written += chunk

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass

    def is_closing(self):
        return self.aborted

    def close(self):
        self.aborted = True

    def abort(self):
        self.aborted = True


class StandInAppender:
    """Takes the put requests, gives offsets, answers with the status the body asks for."""

    def __init__(self, ring, completions, control=None):
        self.ring, self.completions, self.control = ring, completions, control
        self.physical_offset = 4096
        self.queue_offsets: dict = {}
        self.requests: list = []

    def status_of(self, records: bytes) -> int:
        for marker, status in ((b"#SNA#", PutStatus.SERVICE_NOT_AVAILABLE),
                               (b"#FDT#", PutStatus.FLUSH_DISK_TIMEOUT)):
            if marker in records:
                return PUT_STATUSES.index(status)
        return 99 if b"#UNK#" in records else PUT_STATUSES.index(PutStatus.PUT_OK)

    def claim(self, data, start: int, end: int) -> int:
        """The appender's side of the fast-failure handshake (proc/appender.py _claim):
        publish the batch's last id as taken, fence, read the cancel watermark."""
        if self.control is None:
            return 0
        last, length = self.ring.iter_records(start, end)[-1]
        ring_module.store_u64(self.control.words(), self.control.taken_offset(0),
                              read_put_request(data, last, length).request_id)
        ring_module.fence()
        return self.control.worker(0).cancel_request_id

    def run(self) -> int:
        taken = 0
        while True:
            count, start, end = self.ring.peek_batch(self.completions.free_slots())
            if not count:
                break
            data = self.ring.data()
            cancelled_up_to = self.claim(data, start, end)
            for offset, length in self.ring.iter_records(start, end):
                # ring_format reads what the C side wrote (the one layout, checked here).
                (request_id, queue_id, records_count, sys_flag, flags, topic, records_offset,
                 records_end) = read_put_request(data, offset, length)
                if request_id <= cancelled_up_to:        # withdrawn: never stored
                    self.completions.push(request_id, _BUSY_CODE, 0, 0, 0)
                    continue
                topic = topic.encode()
                records = bytes(data[records_offset:records_end])
                self.requests.append((topic, queue_id, records_count, sys_flag, flags, records))
                status = self.status_of(records)
                if status != PUT_STATUSES.index(PutStatus.PUT_OK):
                    self.completions.push(request_id, status, 0, 0, 0)
                    continue
                key = (topic, queue_id)
                queue_offset = self.queue_offsets.get(key, 0)
                self.queue_offsets[key] = queue_offset + records_count
                self.completions.push(request_id, status, records_count, self.physical_offset,
                                      queue_offset)
                self.physical_offset += len(records)
            taken += count
            self.ring.release(end)
        self.completions.commit()
        return taken


class Side:
    """One broker worker's send side: rings, putter, metadata, a connection over FakeTransport."""

    def __init__(self, tmp_path, name: str, fast: bool, overrides=None, slots: int = 64,
                 wait_ms: int | None = None):
        settings = dict(SETTINGS, storePathRootDir=str(tmp_path / name), **(overrides or {}))
        self.config = load_broker_config(None, settings)
        (tmp_path / name).mkdir()
        self.regions = [shared.create_byte_ring(str(tmp_path / name / "send"), 1 << 20),
                        shared.create_completion_ring(str(tmp_path / name / "done"), slots)]
        self.control = ControlBlock(str(tmp_path / name / "control"), create=True)
        self.wake = WakeFd()
        self.putter = RingPutter(
            self.regions[0].ring, self.regions[1].ring, self.control, self.wake, 0, STORE_HOST,
            self.config.store.flush_disk_type.value == "SYNC_FLUSH",
            self.config.store.sync_flush_timeout,
            sync_master=self.config.store.broker_role.value == "SYNC_MASTER",
            ha_max_gap_bytes=self.config.store.ha_max_gap_not_in_sync,
            fast_failure=None if wait_ms is None else FastFailure(
                self.control, 0, APPENDER.slot, wait_ms, 1000, clock.now_ms),
            fast_sends=send_fast.fast_send_settings(self.config, PUT_STATUSES),
            controller_mode=self.config.broker.enable_controller_mode,
            min_in_sync_replicas=self.config.store.min_in_sync_replicas,
            slave_timeout_ms=self.config.store.slave_timeout)
        self.appender = StandInAppender(self.regions[0].ring, self.regions[1].ring,
                                        None if wait_ms is None else self.control)
        self.metadata = MetadataState(self.config)
        self.metadata.topics.update_topic_config(TopicConfig(TOPIC, 4, 4))
        self.metadata.topics.update_topic_config(TopicConfig("MultiTag", 2, 2,
                                                      topic_filter_type="MULTI_TAG"))
        self.metadata.topics.update_topic_config(TopicConfig("rmq_sys_wheel_timer", 1, 1))
        self.stats_region = StatsRegion.create(str(tmp_path / name / "stats"), 6, 0)
        self.recorder = Recorder(self.stats_region.writer(5))
        self.putter.set_stats(self.recorder)
        self.ctx = BrokerContext(self.config, None, self.putter, self.metadata, STORE_HOST,
                                 stats=self.recorder)
        self.fast = fast

    def connect(self) -> tuple[RemotingConnection, FakeTransport]:
        connection = self.new_connection()
        transport = FakeTransport()
        connection.connection_made(transport)
        self.attach(connection)
        return connection, transport

    def new_connection(self, read_in_c: bool = True) -> RemotingConnection:
        """A connection serving the send handlers (not connected yet); ``read_in_c``: see
        RemotingConnection."""
        ctx, stats = self.ctx, self.recorder

        async def handle(connection, request):
            # What proc/remoting.py's _local counts around a handler.
            started = stats.now_ns()
            token = stats.request_started("send")
            response = None
            try:
                response = await send.handle_send_message(ctx, connection.attachment, request)
                return response
            finally:
                stats.request_finished("send", token, (stats.now_ns() - started) // 1000,
                                       _rpc_answer(request, response))
        table = RequestTable({code: handle for code in send.HANDLERS})
        return RemotingConnection(table, ConnectionLimits.from_config(self.config.remoting),
                                  read_in_c=read_in_c)

    def attach(self, connection: RemotingConnection, write=None) -> None:
        """What proc/remoting.py does with a connection made: its channel and, on the fast
        side, its fast port (answers through ``write``, by default its write_frames, or
        straight to its socket where it lends it)."""
        connection.attachment = Channel("0:1", connection.remote_address, send=connection.send)
        if self.fast:
            port = self.putter.open_fast_port(send.born_host_of(connection.remote_address),
                                              write or connection.write_frames)
            connection.lend_socket(port.lend_socket)
            connection.use_frame_taker(port)

    def refresh(self) -> None:
        self.putter.set_fast_topics(send_fast.fast_topics(self.config, self.metadata))

    def counted(self) -> tuple:
        """The figures the two paths must agree on (latency values differ, their counts
        may not)."""
        snapshot = self.stats_region.snapshot()
        counters = [snapshot.counter(counter) for counter in (
            StatsCounter.REQUESTS_TOTAL, StatsCounter.SEND_STARTED, StatsCounter.SEND_FINISHED,
            StatsCounter.BROKER_PUT_NUMS, StatsCounter.KEYS_DROPPED,
            StatsCounter.SEND_OLDEST_MS)]
        distribute = sum(snapshot.counter(StatsCounter.PUT_DISTRIBUTE_0 + index)
                         for index in range(13))
        sizes = snapshot.histogram(StatsHistogram.MESSAGE_SIZE_BYTES).tolist()
        latencies = [int(snapshot.histogram(histogram)[64]) for histogram in (
            StatsHistogram.PUT_LATENCY_US, StatsHistogram.RPC_LATENCY_US,
            StatsHistogram.SYNC_FLUSH_WAIT_US)]
        # rpc_latency series: the same keys and counts; the bucket (label) and the sum are
        # latencies, which differ between two runs.
        keys, rpc = {}, {}
        for (kind, label, key), words in snapshot.labelled_keys().items():
            if kind == StatsKeyKind.KEY_RPC:
                rpc[key] = rpc.get(key, 0) + words[0]
            else:
                keys[(kind, label, key)] = words
        return counters, distribute, sizes, latencies, keys, rpc

    def close(self) -> None:
        self.recorder.writer.close()
        self.stats_region.close()
        self.wake.close()
        self.control.close()
        for region in self.regions:
            region.close()


def feed(connection: RemotingConnection, data: bytes) -> None:
    """What asyncio does with a read: fill the buffer it hands out, report the byte count."""
    while data:
        buffer = connection.get_buffer(len(data))
        size = min(len(buffer), len(data))
        buffer[:size] = data[:size]
        del buffer
        connection.buffer_updated(size)
        data = data[size:]


async def settle(side: Side, connection: RemotingConnection) -> None:
    """Run the stand-in appender and the putter's wake-ups until nothing is in flight and no
    frame waits in the receive buffer."""
    for _ in range(200):
        for _ in range(3):
            await asyncio.sleep(0)
        side.appender.run()
        side.putter.on_wake()
        for _ in range(3):
            await asyncio.sleep(0)
        # With nothing in flight the Python path's puts left are held (SYNC_FLUSH /
        # SYNC_MASTER acks wait for the positions), and so are their handlers.
        held = side.putter.python_puts_waiting
        if side.putter.core.inflight == 0 and len(connection.handler_tasks) <= held \
                and not connection._frames_held:
            return
    raise AssertionError("puts still in flight after 200 rounds")


def responses(data: bytes) -> dict[int, bytes]:
    """Response frames by opaque."""
    out, at = {}, 0
    while at < len(data):
        length = int.from_bytes(data[at:at + 4], "big") + 4
        out[command.decode(data, at, length).opaque] = bytes(data[at:at + length])
        at += length
    return out


def run_side(side: Side, frames: list[bytes], pipelined: bool) -> tuple[dict, list]:
    async def main():
        send._random.seed(7)
        connection, transport = side.connect()
        side.refresh()
        if pipelined:
            feed(connection, b"".join(frames))
            await settle(side, connection)
        for data in ([] if pipelined else frames):
            feed(connection, data)
            await settle(side, connection)
            side.refresh()      # as a worker does when a snapshot or a created topic arrives
        assert not transport.aborted
        return responses(bytes(transport.written)), side.appender.requests, side.counted()
    return asyncio.run(main())


def side_pairs(tmp_path):
    """The ``sides`` fixture's body (test_send_holds.py uses it too): ``make(overrides,
    slots, wait_ms)`` gives a (Python path, fast path) pair of sides, closed at the end."""
    made = []

    def make(overrides=None, slots=64, wait_ms=None):
        pair = (Side(tmp_path, f"python{len(made)}", False, overrides, slots, wait_ms),
                Side(tmp_path, f"fast{len(made)}", True, overrides, slots, wait_ms))
        made.extend(pair)
        return pair
    yield make
    for side in made:
        side.close()


@pytest.fixture
def sides(tmp_path):
    yield from side_pairs(tmp_path)


@pytest.mark.parametrize("row", ROWS, ids=[row[0] for row in ROWS])
def test_each_send_gets_the_python_answer(sides, row):
    name, data, taken = row
    python_side, fast_side = sides()
    expected = run_side(python_side, [data], pipelined=False)
    got = run_side(fast_side, [data], pipelined=False)
    assert got[0] == expected[0]
    assert got[1] == expected[1]
    assert got[2] == expected[2]
    assert fast_side.putter.core.fast_puts_total == (1 if taken else 0), name


@pytest.mark.parametrize("pipelined", [False, True], ids=["one by one", "pipelined"])
def test_the_whole_table_in_one_stream(sides, pipelined):
    python_side, fast_side = sides()
    frames = [row[1] for row in ROWS]
    expected = run_side(python_side, frames, pipelined)
    got = run_side(fast_side, frames, pipelined)
    assert got == expected
    assert fast_side.putter.core.fast_puts_total == sum(1 for row in ROWS if row[2])
    assert len(expected[0]) == sum(1 for row in ROWS if b"oneway" not in row[0].encode())


_TIMER_ROWS = [row for row in ROWS if row[0].startswith("timer")]
_PARKED = sum(1 for name, _, taken in _TIMER_ROWS if taken and "past" not in name)


@pytest.mark.parametrize("overrides, parked", [
    ({}, _PARKED), ({"timerPrecisionMs": "500"}, _PARKED), ({"timerWheelEnable": "false"}, 0),
    ({"timerCongestNumEachSlot": "10"}, 0), ({"timerMaxDelaySec": "60"}, 0)],
    ids=["defaults", "precision 500", "wheel disabled", "congestion limit", "max delay 60 s"])
def test_timer_sends_under_each_setting(sides, overrides, parked):
    """The timer rows under the timer settings: the same answers (the handler's refusals with
    Java's codes and remarks), records and figures either way; the fast path parks exactly the
    sends the handler would park and cannot be refused."""
    python_side, fast_side = sides(overrides)
    frames = [row[1] for row in _TIMER_ROWS]
    expected = run_side(python_side, frames, True)
    assert run_side(fast_side, frames, True) == expected
    assert fast_side.putter.core.timer_puts_total == parked
    if parked == 0:
        codes = {command.decode(data, 0, len(data)).code for data in expected[0].values()}
        assert codes & {ResponseCode.SYSTEM_ERROR, ResponseCode.MESSAGE_ILLEGAL} or \
            "congest" in str(overrides), codes


def test_a_timer_producer_load_never_reaches_the_handler(sides):
    """Apache's TimerProducer's sends (TIMER_DELIVER_MS and its MY_RECORD_ copy, UNIQ_KEY,
    WAIT; both header encodings), 600 pipelined: every one parked by the fast path (counted,
    not timed: no frame handed to the Python path, no handler run), stored and answered as
    the handler stores and answers them."""
    frames = []
    for number in range(600):
        deliver_ms = TOMORROW_MS + number * 37
        frames.append(frame("binary" if number % 2 else "json310", body=b"t%d" % number,
                            queue_id=str(number % 4), properties=(
            f"MY_RECORD_TIMER_DELIVER_MS\x01{deliver_ms}\x02TIMER_DELIVER_MS\x01{deliver_ms}"
            f"\x02UNIQ_KEY\x017F00000100002A9F00000000{number:08X}\x02WAIT\x01true\x02")))
    python_side, fast_side = sides()
    handled = []
    original = send.handle_send_message

    async def counting(*args):
        handled.append(1)
        return await original(*args)
    send.handle_send_message = counting
    try:
        expected = run_side(python_side, frames, True)
        assert len(handled) == 600          # the count sees the handler's sends
        handled.clear()
        got = run_side(fast_side, frames, True)
    finally:
        send.handle_send_message = original
    assert got == expected
    assert len(expected[1]) == 600 and {request[0] for request in expected[1]} == {
        b"rmq_sys_wheel_timer"}
    core = fast_side.putter.core
    assert (core.timer_puts_total, core.fast_puts_total, core.other_frames_total) == (600, 600, 0)
    assert handled == []
    assert all(b'"recallHandle":"' in data for data in got[0].values())


def test_no_room_holds_the_rest_of_the_read(sides):
    """With 4 completion slots, a read of 30 sends waits for room between puts (reading
    pauses), never drops one, and ends with the same answers and records."""
    python_side, fast_side = sides(slots=4)
    frames = [frame(style, body=b"m%d" % number)
              for number in range(10) for style in ("binary", "go", "json310")]
    expected = run_side(python_side, frames, True)
    got = run_side(fast_side, frames, True)
    assert got == expected
    assert len(got[0]) == len(got[1]) == 30
    assert fast_side.putter.core.fast_puts_total == 30
    assert fast_side.putter.space_waits_total > 0


def test_order_topic_on_a_broker_without_write_permission(sides):
    python_side, fast_side = sides({"brokerPermission": "4"})
    for side in (python_side, fast_side):
        side.metadata.topics.update_topic_config(TopicConfig("Ordered", 4, 4, order=True))
    data = [frame("binary", topic="Ordered"), frame("binary")]
    assert run_side(fast_side, data, True) == run_side(python_side, data, True)
    assert fast_side.putter.core.fast_puts_total == 1


def test_random_property_strings(sides):
    """Seeded random properties (separators, controls, duplicates, tags): same answers."""
    rand = random.Random(20261203)
    alphabet = ["\x01", "\x02", "\x01", "\x02", "a", "b", "TAGS", "WAIT", "true", " ", "|",
                "\x03", "K", "DELAY", "\x7f", "é"]
    frames = [frame("binary", properties="".join(rand.choice(alphabet)
                                                  for _ in range(rand.randrange(12))))
              for _ in range(150)]
    python_side, fast_side = sides()
    assert run_side(fast_side, frames, True) == run_side(python_side, frames, True)
    assert fast_side.putter.core.fast_puts_total > 10, "the seed should hit the fast path"


# Fast failure: a send the appender did not take within waitTimeMillsInSendQueue is answered
# busy and never stored; while the page cache is busy, sends are refused at once.
_FAILURE_FRAMES = [frame("binary", body=b"f1"), frame("go", body=b"f2"),
                   frame("binary", properties="DELAY\x013\x02", body=b"p3"),   # Python path
                   frame("batch-binary", batch="true", body=batch_body([(0, b"f4", "")] * 2)),
                   frame("json310", oneway=True, body=b"f5")]
_PERIOD = re.compile(rb"period in queue: \d+ms, size of queue: \d+")


def _busy_answers(written: bytes) -> dict[int, tuple]:
    """Answers by opaque, with the figures of the busy remark masked (timing differs)."""
    return {opaque: (command.decode(data, 0, len(data)).code,
                     _PERIOD.sub(b"period in queue: Nms, size of queue: M", data))
            for opaque, data in responses(written).items()}


def test_sends_left_in_the_ring_are_withdrawn_busy(sides):
    """The appender stalls: after waitTimeMillsInSendQueue every send (fast and Python path)
    is answered SYSTEM_BUSY [TIMEOUT_CLEAN_QUEUE] exactly as the handler answers it, once;
    the appender then skips them all (nothing stored)."""
    python_side, fast_side = sides({"messageDelayLevel": "1s 2s 3s"}, wait_ms=50)

    async def main(side: Side):
        connection, transport = side.connect()
        side.refresh()
        loop = asyncio.get_running_loop()
        fed_at = loop.time()
        feed(connection, b"".join(_FAILURE_FRAMES))
        for _ in range(5):
            await asyncio.sleep(0)
        if loop.time() - fed_at < 0.04:        # (a loaded box may pass the 50 ms already)
            assert bytes(transport.written) == b"", "answered before waitTimeMillsInSendQueue"
        await asyncio.sleep(0.3)              # the fast-failure timer withdraws them
        answered = bytes(transport.written)
        oldest = side.stats_region.snapshot().counter(StatsCounter.SEND_OLDEST_MS)
        await settle(side, connection)        # the stalled appender resumes: skips them
        assert bytes(transport.written) == answered, "answered twice"
        return _busy_answers(answered), side.appender.requests, oldest
    expected = asyncio.run(main(python_side))
    got = asyncio.run(main(fast_side))
    assert got == expected
    assert [code for code, _ in expected[0].values()] == [ResponseCode.SYSTEM_BUSY] * 4
    assert all(b"[TIMEOUT_CLEAN_QUEUE]broker busy" in data for _, data in expected[0].values())
    assert expected[1] == [] and expected[2] == 0
    assert fast_side.putter.core.fast_puts_total == 4
    assert fast_side.putter.fast_failure.withdrawn_total == 5


def test_the_oldest_gauge_covers_a_handler_send_still_waiting(sides):
    """SEND_OLDEST_MS, written by the fast path on each take, is the older of its own oldest
    send and the handlers' oldest, which their Recorder pushes to it when it changes."""
    _, side = sides()

    def gauge() -> int:
        return side.stats_region.snapshot().counter(StatsCounter.SEND_OLDEST_MS)

    async def main():
        connection, _ = side.connect()
        side.refresh()
        token = side.recorder.request_started("send")     # a handler's send, unanswered
        handler_started = gauge()
        await asyncio.sleep(0.02)                         # the fast send starts later
        feed(connection, frame("binary"))
        assert side.putter.core.fast_puts_total == 1
        during = gauge()
        side.recorder.request_finished("send", token, 10)
        fast_only = gauge()
        await settle(side, connection)
        return handler_started, during, fast_only, gauge()
    handler_started, during, fast_only, after = asyncio.run(main())
    assert handler_started > 0 and during == handler_started
    assert fast_only >= handler_started + 20 and after == 0


def test_fast_failure_sees_both_paths_puts_in_one_walk(tmp_path):
    """The puts of both paths wait in one C FIFO, and fast failure's age of a Python path put
    counts from when it began to wait (for ring space too), so an old put behind a younger
    fast send is found, is the oldest, and one withdraw answers both kinds."""
    side = Side(tmp_path, "one", fast=True, wait_ms=50)

    async def main():
        connection, transport = side.connect()
        side.refresh()
        young = frame("binary", body=b"young")
        feed(connection, young)
        core = side.putter.core
        assert core.waiting == 1 and core.fast_puts_total == 1
        now = asyncio.get_running_loop().time()
        python_id = core.put_python(b"\0" * 64, TOPIC.encode(), 0, 1, 0, True, now - 1.0)
        side.regions[0].ring.commit()
        assert python_id == 2 and core.waiting == 2
        assert core.aged(now - 0.5, 0) == python_id       # behind a younger fast send
        assert core.aged(now - 0.5, python_id) == 0
        assert abs(core.oldest(0) - (now - 1.0)) < 1e-6
        side.control.worker(0).cancel_request_id = python_id   # fast failure's handshake
        withdrawn, fast, python = core.withdraw(0, python_id, 9)
        assert withdrawn == 2
        assert [opaque for _, opaque, _ in fast] == [command.decode(young, 0, len(young)).opaque]
        assert python == [(python_id, pytest.approx(now - 1.0))]
        assert core.aged(now, 0) == 0 and core.oldest(0) is None and core.waiting == 2
        side.appender.run()            # the appender completes them unstored: dropped here
        side.putter.on_wake()
        assert core.waiting == 0 and bytes(transport.written) == b""
        assert side.appender.requests == []
    asyncio.run(main())


def test_page_cache_busy_refuses_every_send(sides):
    """A drain older than osPageCacheBusyTimeOutMills: every send (the fast path's too) is
    answered SYSTEM_ERROR [PC_SYNCHRONIZED] at once and nothing reaches the ring."""
    python_side, fast_side = sides(wait_ms=200)
    for side in (python_side, fast_side):
        side.control.worker(APPENDER.slot).busy_since_ms = clock.now_ms() - 5000
    frames = _FAILURE_FRAMES[:2] + _FAILURE_FRAMES[3:4]
    expected = run_side(python_side, frames, True)
    got = run_side(fast_side, frames, True)
    assert got == expected
    assert expected[1] == []
    assert {command.decode(data, 0, len(data)).remark for data in expected[0].values()} == {
        "[PC_SYNCHRONIZED]broker busy, start flow control for a while"}
    assert fast_side.putter.core.fast_puts_total == 0


def test_connection_errors_close_the_same_way(sides):
    """Frames the Python path refuses with a ProtocolError close the connection either way."""
    bad = [hand_json(b'{"code":310,"extFields":{"a":"PG"},"flag":0.5}'),
           hand_json(b'{"code":310,"extFields":[]}'),
           frame("binary")[:21] + b"\x7f\xff\xff\xff" + frame("binary")[25:],
           duplicate_key_frame()]
    async def close_reason(side: Side, data: bytes):
        connection, transport = side.connect()
        side.refresh()
        feed(connection, data)
        await asyncio.sleep(0)
        return transport.aborted, connection.close_reason
    for data in bad:
        python_side, fast_side = sides()
        results = [asyncio.run(close_reason(side, data)) for side in (python_side, fast_side)]
        assert results[0] == results[1] and results[0][0], data


def test_templates_are_the_handler_encoding():
    """A stored template with its values filled in is orjson's encoding of the handler's answer."""
    config = load_broker_config(None, dict(SETTINGS))
    stored, pieces, code = send_fast.response_template(PutStatus.PUT_OK,
                                                       send.send_response_fields_of(config),
                                                       4096)
    assert stored and code == 0
    header = pieces[0] + b"AB,CD" + pieces[1] + b"3" + pieces[2] + b"17" + pieces[3] + b"-5" \
        + pieces[4]
    assert orjson.loads(header) == {
        "code": 0, "extFields": {"MSG_REGION": "RegionX", "TRACE_ON": "true", "msgId": "AB,CD",
                                 "queueId": "3", "queueOffset": "17"},
        "flag": 1, "language": "JAVA", "opaque": -5, "serializeTypeCurrentRPC": "JSON",
        "version": 409}


def test_put_latency_buckets_are_the_python_ones():
    from pybroker._fast.send.stats import distribute_bucket
    from pybroker.stats.service import put_distribute_bucket
    for elapsed_ms in [-1, 0, 1, 9, 10, 49, 50, 99, 100, 4999, 5000, 9999, 10000, 10 ** 9]:
        assert distribute_bucket(elapsed_ms) == put_distribute_bucket(elapsed_ms), elapsed_ms


def test_message_size_buckets_are_the_metric_names_ones():
    """The fast path's C bucket search gives metric_names.bucket_of's index (Java's explicit
    bounds: a value equal to a bound is in that bound's bucket)."""
    from pybroker._fast.send.stats import size_bucket
    from pybroker.stats.metric_names import MESSAGE_SIZE_BUCKETS_BYTES, bucket_of
    for bound in MESSAGE_SIZE_BUCKETS_BYTES:
        for size in (bound - 1, bound, bound + 1):
            assert size_bucket(size) == bucket_of(size, MESSAGE_SIZE_BUCKETS_BYTES), size
    assert size_bucket(0) == 0 and size_bucket(1 << 40) == len(MESSAGE_SIZE_BUCKETS_BYTES)
