# Shared harness of the POP unit tests: a real store, metadata, POP table and revive, one clock.
"""A broker in one process for the POP handlers: the send harness's store and metadata, a POP
table in the store's run directory with its directory (the supervisor's side) and a PopState
(a worker's side) whose slots come from that directory, the long polls, the 5.x timer (which
parks check-points and acks until they are due, as in the broker), the revive service over the
same store, and one injected clock for handlers, store, timer and revive. Requests are built
as the Java 5.3.3 client builds them (JSON header, long names). Loaded with :func:`load`.
"""
import asyncio
import importlib.util
import os
import pathlib

from pybroker._fast import record as record_codec
from pybroker.broker import send
from pybroker.broker.pop import ack, change_invisible, notification, peek, pop_message
from pybroker.broker.pop.directory import PopDirectory
from pybroker.broker.pop.long_poll import PopLongPoll
from pybroker.broker.pop.revive import ReviveService
from pybroker.broker.pop.state import PopState, SlotCache
from pybroker.broker.timer import TimerStore, delivered_until_ms
from pybroker.broker.timer_message import TIMER_TOPIC
from pybroker.protocol import constants, pop
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.command import RemotingCommand
from pybroker.protocol.properties import decode_properties
from pybroker.store import paths
from pybroker.store.config_docs import TopicConfig
from pybroker.store.pop_table import PopTable

_spec = importlib.util.spec_from_file_location(
    "send_harness", pathlib.Path(__file__).with_name("send_harness.py"))
send_harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(send_harness)

TOPIC = "PopTopic"
GROUP = "PopGroup"
BROKER_NAME = "broker-a"
START_MS = 1_700_000_000_000
# A small timer log (the other timer settings are the broker's defaults).
TIMER_SETTINGS = {"mappedFileSizeTimerLog": str(52 * 1024)}
HANDLERS = {**pop_message.HANDLERS, **ack.HANDLERS, **change_invisible.HANDLERS,
            **peek.HANDLERS, **notification.HANDLERS}


class Clock:
    def __init__(self, now_ms: int = START_MS):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


class PopBroker(send_harness.Broker):
    """The send harness's broker plus POP (see the module docstring); ``queues`` of TOPIC."""

    def __init__(self, tmp_path, overrides=None, queues: int = 4, slots: int = 256):
        self.clock = Clock()
        super().__init__(tmp_path, {"brokerName": BROKER_NAME, **TIMER_SETTINGS,
                                    **(overrides or {})}, clock_ms=self.clock)
        self.ctx.now_ms = self.clock
        self.metadata.topics.update_topic_config(TopicConfig(TOPIC, queues, queues))
        run_dir = paths.run_dir(str(tmp_path))
        os.makedirs(run_dir, exist_ok=True)
        self.table = PopTable.create(os.path.join(run_dir, "pop"), slots)
        self.directory = PopDirectory(self.table, self.metadata.offsets,
                                      os.path.join(str(tmp_path), "consumerOrderInfo.json"), {},
                                      self.clock)
        self.metadata.offsets.listener = self.directory.offset_committed

        async def fetch(keys):
            return self.directory.slots_for(keys)
        def limits():
            return 100000, 1024, 100000
        self.pop_state = PopState(self.table, SlotCache(fetch), 1, 0,
                            long_poll=PopLongPoll(self.clock, limits,
                                                  count_held=self.table.add_held),
                            notification_poll=PopLongPoll(self.clock, limits))
        self.ctx.pop = self.pop_state
        self.timer = TimerStore(self.config.store, self.store, self.putter, dequeue_enabled=True,
                                now_ms=self.clock)
        self.timer.recover()
        self.revive = self.new_revive()

    def new_revive(self) -> ReviveService:
        """A revive service over this broker (as a restarted one starts)."""
        def timer_covered_ms() -> int:
            timer = self.timer
            return delivered_until_ms(timer.commit_read_time_ms, timer.curr_queue_offset,
                                      timer.last_enqueue_store_ms,
                                      self.store.get_max_offset_in_queue(TIMER_TOPIC, 0))
        return ReviveService(self.config, self.store, self.putter, self.metadata,
                             self.directory, (send_harness.HOST, 10911), self.clock,
                             lambda: self.store.max_physical_offset,
                             lambda: self.store.max_physical_offset, timer_covered_ms)

    def close(self) -> None:
        self.timer.close()
        self.table.close()
        super().close()

    # --- producing -----------------------------------------------------------------------------
    def send(self, body: bytes, queue_id: int = 0, topic: str = TOPIC, **properties) -> int:
        """Store one message (through the send handler); returns its queue offset."""
        return asyncio.run(self.asend(body, queue_id, topic, **properties))

    async def asend(self, body: bytes, queue_id: int = 0, topic: str = TOPIC,
                    **properties) -> int:
        text = send_harness.properties_text(**properties) if properties else ""
        request = send_harness.send_request("go", body, topic=topic, queue_id=queue_id,
                                            properties=text)
        response = await send.handle_send_message(self.ctx, self.channel, request)
        assert response.code == 0, (response.code, response.remark)
        return int(response.ext_fields["queueOffset"])

    # --- requests ------------------------------------------------------------------------------
    async def request(self, code: int, fields: dict, body: bytes | None = None):
        request = RemotingCommand(code, int(constants.LanguageCode.JAVA), 479, 1, 0, None,
                                  {k: str(v) for k, v in fields.items()}, body)
        return await HANDLERS[code](self.ctx, self.channel, request)

    async def pop(self, queue_id: int = -1, max_nums: int = 32, invisible_ms: int = 60000,
                  poll_ms: int = 0, group: str = GROUP, topic: str = TOPIC, **extra):
        fields = {"consumerGroup": group, "topic": topic, "queueId": queue_id,
                  "maxMsgNums": max_nums, "invisibleTime": invisible_ms, "pollTime": poll_ms,
                  "bornTime": self.clock(), "initMode": constants.PopConstants.INIT_MODE_MIN}
        fields.update(extra)
        return await self.request(RequestCode.POP_MESSAGE, fields)

    async def ack(self, message, group: str = GROUP, topic: str = TOPIC):
        info = pop.parse_extra_info(message.handle)
        return await self.request(RequestCode.ACK_MESSAGE, {
            "consumerGroup": group, "topic": pop.real_topic(topic, group, info.retry),
            "queueId": info.queue_id, "extraInfo": message.handle,
            "offset": info.queue_offset})

    async def change_invisible(self, message, invisible_ms: int, group: str = GROUP,
                               topic: str = TOPIC):
        info = pop.parse_extra_info(message.handle)
        return await self.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {
            "consumerGroup": group, "topic": pop.real_topic(topic, group, info.retry),
            "queueId": info.queue_id, "extraInfo": message.handle,
            "offset": info.queue_offset, "invisibleTime": invisible_ms})

    async def step_timer(self) -> None:
        """The timer worker's turns at the clock's time: enqueue everything parked, deliver
        every slot before the write time."""
        timer = self.timer
        timer.move_write_time()
        while await timer.enqueue():
            pass
        while await timer.dequeue() >= 0:
            pass

    def revive_round(self) -> int:
        """The timer's turns, then one revive round of every queue, due or not."""
        async def run() -> int:
            await self.step_timer()
            total = 0
            for queue in self.revive.queues:
                total += await self.revive.revive_queue(queue)
            return total
        return asyncio.run(run())

    def revive_records(self) -> list:
        """(tag, body text, properties, revive queue) of every revive log record, by queue:
        those the timer delivered in offset order, then those still parked in put order."""
        out = []
        topic = pop.revive_topic(self.config.broker.broker_cluster_name)
        parked = [(decoded, properties) for decoded, properties in self.records(TIMER_TOPIC, 0)
                  if properties.get("REAL_TOPIC") == topic]
        for queue_id in range(self.config.broker.revive_queue_num):
            here = self.records(topic, queue_id) + [
                (decoded, properties) for decoded, properties in parked
                if properties["REAL_QID"] == str(queue_id)]
            for decoded, properties in here:
                out.append((properties.get("TAGS"), bytes(decoded.body).decode(), properties,
                            queue_id))
        return out


class Popped:
    """One popped message with its receipt handle as the Java client makes it."""

    def __init__(self, decoded, handle: str):
        self.decoded = decoded
        self.handle = handle
        self.body = bytes(decoded.body)
        self.properties = decode_properties(decoded.properties)


def popped(response, broker_name: str = BROKER_NAME) -> list[Popped]:
    """The messages of a POP answer, each with its handle (the POP_CK property when the broker
    set one, else built from the answer's offset infos as Java's processPopResponse does)."""
    body = bytes(response.body or b"")
    header = response.ext_fields
    starts = pop.parse_start_offset_info(header.get("startOffsetInfo")) or {}
    out, position = [], 0
    while position < len(body):
        decoded = record_codec.decode(body, position)
        position += decoded.total_size
        properties = decode_properties(decoded.properties)
        handle = properties.get(constants.Property.POP_CK)
        key = f"{pop.retry_flag(decoded.topic)}@{decoded.queue_id}"
        if handle is None and key in starts:      # a peek's answer has no handles
            handle = pop.build_extra_info(starts[key], int(header["popTime"]),
                                          int(header["invisibleTime"]),
                                          int(header["reviveQid"]), decoded.topic, broker_name,
                                          decoded.queue_id, decoded.queue_offset)
        out.append(Popped(decoded, handle))
    return out
