"""The ACK_MESSAGE fast path answers every ack exactly as the handler does, stores the same ack
records and counts the same figures.

Method: seeded ACK_MESSAGE frames (known and unknown topics, queue ids in and out of
readQueueNums, offsets in and out of the queue's bounds, queues whose POP slot this worker knows
and ones it does not, non-order, order and malformed receipt handles, revive queues in and out
of reviveQueueNum, pop times before and after the slot's in-flight-since, acks due later (parked
on the wheel) and already due, puts the appender refuses, oneway requests; under SYNC_FLUSH held
until the flushed position covers them) go through a real
RemotingConnection twice, each side over its own real shared-memory send and completion rings
(tests/unit/broker/test_send_fast.py's Side: RingPutter, stand-in appender, statistics region)
and its own real POP table: once with the handler only, once with the ACK taker
(proc/ack_port.py) in front of it. Both see the same queue bounds (a stand-in of the store's two
queries) and the same clock. The answers (by opaque) and the records that reached the ring must
be byte for byte the same, and so must the counters, the GROUP_ACK keys, the rpc_latency series'
counts and every slot's in-flight count; most acks must have been taken by the fast path.
"""
import asyncio
import random

import pytest

from pybroker.broker.channel import Channel
from pybroker.broker.pop import ack
from pybroker.broker.pop.state import PopState, SlotCache
from pybroker.broker.timer_message import TIMER_TOPIC
from pybroker.proc.ack_port import FastAckPort
from pybroker.proc.remoting import _rpc_answer
from pybroker.protocol import command, pop
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.command import RemotingCommand
from pybroker.protocol.constants import RPC_ONEWAY, PopConstants, SerializeType
from pybroker.remoting.connection import RemotingConnection
from pybroker.remoting.frame_taker import TakerChain
from pybroker.remoting.limits import ConnectionLimits
from pybroker.remoting.server import RequestTable
from pybroker.store.config_docs import TopicConfig
from pybroker.store.pop_table import PopTable, SlotKey
from pybroker.store.read_api import StoreReads
from pybroker._fast.stats import StatsCounter

from tests.unit.broker.test_send_fast import FakeTransport, Side, feed, responses

NOW_MS = 1_764_900_000_000
TOPIC, GROUPS = "PopTopic", ["GID_a", "GID_b", "GID_#SNA#", "GID_new"]
QUEUES, BOUNDS = 4, (10, 500)
REVIVE_QUEUE_NUM = 8
_OPAQUES = iter(range(1000, 1_000_000))


def _slot_of(key: SlotKey) -> int:
    return (GROUPS.index(key.group) * QUEUES + key.queue_id) % 64


class _Bounds:
    """The store's query the handler asks (the same answers on both sides)."""

    def get_offset_bounds_in_queue(self, topic: str, queue_id: int) -> tuple[int, int]:
        return BOUNDS if topic == TOPIC else (-1, 0)

    def offset_outside_queue(self, topic: str, queue_id: int,
                             queue_offset: int) -> tuple[int, int] | None:
        return StoreReads.offset_outside_queue(self, topic, queue_id, queue_offset)


class AckSide(Side):
    """A Side with POP: a real table, a slot cache that knows the first three groups' queues,
    the handler counted as proc/remoting.py counts it, and (fast) the ACK taker."""

    def __init__(self, tmp_path, name: str, fast: bool, overrides=None):
        super().__init__(tmp_path, name, fast, {"reviveQueueNum": str(REVIVE_QUEUE_NUM),
                                                **(overrides or {})})
        self.metadata.topics.update_topic_config(TopicConfig(TOPIC, QUEUES, QUEUES))
        self.table = PopTable.create(str(tmp_path / name / "pop"), 64)

        async def fetch(keys):
            return [_slot_of(key) for key in keys]
        cache = SlotCache(fetch)
        for group in GROUPS[:3]:
            asyncio.run(cache.slots([SlotKey(TOPIC, group, q) for q in range(QUEUES)]))
        for slot in range(64):
            if slot % 3 == 0:       # counted afresh since a minute ago: older pops not taken off
                self.table.clear_in_flight(slot, NOW_MS - 60_000)
            self.table.add_in_flight(slot, 1000)
        self.ctx.pop = PopState(self.table, cache, 1, 0)
        self.ctx.store = _Bounds()
        self.ctx.now_ms = lambda: NOW_MS
        self.sync_flush = self.config.store.flush_disk_type.value == "SYNC_FLUSH"
        self.port = FastAckPort(self.config, self.ctx, self.putter, clock_ms=lambda: NOW_MS) \
            if fast else None

    def connect(self):
        ctx, stats = self.ctx, self.recorder

        async def handle(connection, request):
            started = stats.now_ns()
            token = stats.request_started("ack")
            response = None
            try:
                response = await ack.handle_ack_message(ctx, connection.attachment, request)
                return response
            finally:
                stats.request_finished("ack", token, (stats.now_ns() - started) // 1000,
                                       _rpc_answer(request, response))
        table = RequestTable({code: handle for code in ack.HANDLERS})
        connection = RemotingConnection(table, ConnectionLimits.from_config(self.config.remoting))
        transport = FakeTransport()
        connection.connection_made(transport)
        connection.attachment = Channel("0:1", connection.remote_address, send=connection.send)
        if self.port is not None:
            connection.use_frame_taker(TakerChain([
                self.putter.open_fast_port((bytes([10, 1, 2, 3]), 40000),
                                           connection.write_frames),
                self.port.open(connection.write_frames)]))
        return connection, transport

    def ack_figures(self) -> tuple:
        snapshot = self.stats_region.snapshot()
        return [snapshot.counter(counter) for counter in (
            StatsCounter.ACK_STARTED, StatsCounter.ACK_FINISHED, StatsCounter.ACK_OLDEST_MS,
            StatsCounter.BROKER_ACK_NUMS)], [self.table.in_flight(slot) for slot in range(64)]

    def close(self) -> None:
        self.table.close()
        super().close()


def _handle(rand: random.Random, queue_id: int) -> str:
    revive_qid = rand.choice([0, 3, REVIVE_QUEUE_NUM - 1] * 6
                             + [PopConstants.ORDER_REVIVE_QUEUE, REVIVE_QUEUE_NUM, -1])
    pop_time = NOW_MS + rand.choice([-90_000, -59_999, -30_000, -5_000, -1000, 0])
    invisible = rand.choice([60_000] * 4 + [30_000, 100, 4 * 86_400_000])
    handle = pop.build_extra_info(rand.randrange(BOUNDS[1]), pop_time, invisible, revive_qid,
                                  TOPIC, "broker-a", queue_id, rand.randrange(BOUNDS[1]))
    return rand.choice([handle] * 12 + ["1 2 x 3 0 b 1 5", "1 2 3"])


def _frames(rand: random.Random, count: int, refusals: bool) -> list[bytes]:
    """``refusals``: acks of GID_#SNA#, whose puts the stand-in appender refuses (it refuses a
    put by its records: the handler's puts of one loop turn carry several acks each, so only
    acks sent one at a time are refused alike)."""
    groups = GROUPS[:2] * 5 + (GROUPS[2:] if refusals else GROUPS[3:])
    frames = []
    for _ in range(count):
        queue_id = rand.choice(list(range(QUEUES)) * 5 + [QUEUES, -1])
        fields = {"consumerGroup": rand.choice(groups),
                  "topic": rand.choice([TOPIC] * 12 + ["NoSuchTopic"]),
                  "queueId": str(queue_id),
                  "extraInfo": _handle(rand, queue_id),
                  "offset": str(rand.choice([rand.randrange(*BOUNDS)] * 10
                                            + [BOUNDS[0] - 1, BOUNDS[1], BOUNDS[1] + 1]))}
        items = list(fields.items())
        rand.shuffle(items)
        request = RemotingCommand(RequestCode.ACK_MESSAGE, opaque=next(_OPAQUES),
                                  ext_fields=dict(items))
        if rand.random() < 0.03:
            request.flag |= RPC_ONEWAY
        frames.append(command.encode(request, int(SerializeType.JSON)))
    return frames


async def _settle(side: AckSide, connection: RemotingConnection) -> None:
    for _ in range(300):
        for _ in range(4):
            await asyncio.sleep(0)
        side.appender.run()
        if side.sync_flush:     # the flusher's part: what is written is flushed
            side.control.publish("flushed_position", side.appender.physical_offset)
        side.putter.on_wake()
        for _ in range(4):
            await asyncio.sleep(0)
        if side.putter.core.inflight == 0 and not connection.handler_tasks \
                and not connection._frames_held and not side.putter.python_puts_waiting:
            return
    raise AssertionError("acks still in flight after 300 rounds")


def _records(requests: list) -> list:
    """Each stored record with its topic and queue (a handler's put may carry several)."""
    records = []
    for topic, queue_id, _, _, _, data in requests:
        at = 0
        while at < len(data):
            size = int.from_bytes(data[at:at + 4], "big")
            records.append((topic, queue_id, data[at:at + size]))
            at += size
    return records


def _run(side: AckSide, frames: list[bytes], pipelined: bool):
    async def main():
        connection, transport = side.connect()
        side.refresh()
        for data in ([b"".join(frames)] if pipelined else frames):
            feed(connection, data)
            await _settle(side, connection)
        await asyncio.sleep(0)
        assert not transport.aborted
        return (responses(bytes(transport.written)), _records(side.appender.requests),
                side.counted(), side.ack_figures())
    return asyncio.run(main())


@pytest.fixture
def ack_sides(tmp_path):
    made = []

    def make(overrides=None):
        pair = (AckSide(tmp_path, f"python{len(made)}", False, overrides),
                AckSide(tmp_path, f"fast{len(made)}", True, overrides))
        made.extend(pair)
        return pair
    yield make
    for side in made:
        side.close()


@pytest.mark.parametrize("pipelined", [False, True], ids=["one-by-one", "pipelined"])
@pytest.mark.parametrize("overrides", [None, {"timerPrecisionMs": "100"},
                                       {"flushDiskType": "SYNC_FLUSH"},
                                       {"timerWheelEnable": "false"},
                                       {"enablePopLog": "true"},
                                       {"statsInstrumentsEnable": "false"}],
                         ids=["default", "precision-100", "sync-flush", "no-timer", "pop-log",
                              "instruments-off"])
def test_acks_answer_store_and_count_as_the_handler(ack_sides, rand, pipelined, overrides):
    python, fast = ack_sides(overrides)
    frames = _frames(rand, 300, not pipelined)
    python_answers, python_records, python_counted, python_acks = _run(python, frames,
                                                                       pipelined)
    fast_answers, fast_records, fast_counted, fast_acks = _run(fast, frames, pipelined)
    assert fast_answers == python_answers
    if pipelined:       # the handler's turn puts group records by queue: order within differs
        assert sorted(fast_records) == sorted(python_records)
    else:
        assert fast_records == python_records
    if pipelined:
        # SYNC_FLUSH_WAIT_US counts held puts: the handler's of one turn carry several acks.
        fast_counted[3][2] = python_counted[3][2] = None
    assert fast_counted == python_counted
    assert fast_acks == python_acks
    taken = fast.port.taker.acks_total
    if overrides and overrides.get("timerWheelEnable") == "false":
        assert taken == 0 and not fast_records     # every ack is the handler's (refused)
        return
    # About 40 % of the seeded acks are the fast path's (~120 of 300, sd ~8.5 over seeds): 100
    # failed once in a seeded run; 60 is seven sd below and still most of them.
    assert taken > 60, taken
    assert any(topic == TIMER_TOPIC.encode() for topic, _, _ in fast_records)
