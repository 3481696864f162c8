"""Goal: a SendMessage the C++ front puts on the send ring itself (grpcNativeFront, the front's
fast sends: _fast/grpc_front/send.cc, grpc_service/front_send.py) is answered and stored exactly
as the Python servicer answers and stores it, and every send the front cannot take is still the
servicer's.

Method: two real brokers, one with the front (its fast sends on) and one serving grpcio alone
(the servicer's path), get the same seeded requests one after the other: valid sends and sends
mutated in every field the front reads (bodies, tags, keys, user properties, message ids, born
host and time, encodings, message types, batches, other topics, a missing client id; delay
messages parked in the timer wheel or due already). The answers must be byte for byte the
same, and so must the records stored (read back with remoting pulls, the timer wheel's topic
too), field for field; the front's log must show it put the valid sends itself and handed the
others off, some of them after the send ring's fast path refused them (properties the
servicer accepts but beyond the fast path's limit). Topics have one queue each, so both
brokers pick the same queue.
"""
import random
import re
import time

import grpc
import pytest

from pybroker._testbase.cluster import StandaloneBroker, free_port, read_log
from pybroker._testbase.raw_client import client_for, pull, records_of
from pybroker.grpc_service import front as grpc_front
from pybroker.protocol import properties as props
from pybroker.protocol.codes import ResponseCode
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb
from pybroker.protocol.rocketmq_v2 import service_pb2_grpc
from tests import proxy_support
from tests.ha_support import wait_for
from tests.peers import unavailable

pytestmark = [pytest.mark.timeout(240)]

SEED = 20261206
SENDS = 160
TOPIC = "FrontSendTopic"
FIFO_TOPIC = "FrontSendFifo"
DELAY_TOPIC = "FrontSendDelay"
TOPICS = {TOPIC: "NORMAL", FIFO_TOPIC: "FIFO", DELAY_TOPIC: "DELAY"}
# Where a 5.x timer message is parked until due (broker/timer_message.py).
WHEEL_TOPIC = "rmq_sys_wheel_timer"
METADATA = (("x-mq-client-id", "front-send@1"), ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "GRPC_V2"), ("x-mq-client-version", "5.1.2"))
# Properties up to 64 KiB pass the servicer's checks (and the front's), but not the send fast
# path's (32767 bytes): such a send goes back from the ring's port to the servicer.
LIMITS = {"maxUserPropertySize": "65536", "userPropertyMaxNum": "2000"}
# Record fields compared as they are (the physical offset, store host and time differ per broker,
# and so does the born port: the caller's connection's own).
RECORD_FIELDS = ("magic", "body_crc", "queue_id", "flag", "queue_offset", "sys_flag",
                 "born_timestamp", "born_host", "reconsume_times", "topic")


def _broker(tmp_path_factory, front: bool):
    port = free_port()
    broker = StandaloneBroker(tmp_path_factory.mktemp("front-send" if front else "servicer"), {
        "grpcWorkers": "1", "grpcServerPort": str(port),
        "grpcNativeFront": str(front).lower(), **LIMITS})
    broker.start()
    wait_for(lambda: "gRPC worker 0 serving" in read_log(broker.log_path), 30,
             "the gRPC worker's serving line")
    assert ("C++ front" in read_log(broker.log_path)) == front
    for topic, message_type in TOPICS.items():
        proxy_support.create_topic(broker.broker_addr, topic, message_type, queues=1)
    remoting = client_for(broker.broker_addr)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=30)
    return broker, remoting, channel


def _valid(rng: random.Random, index: int) -> pb.Message:
    system = pb.SystemProperties(message_id=f"FRONT-{index:05d}", tag=rng.choice(["", "TagA"]),
                                 keys=rng.choice([[], ["k1"], ["k1", "k2"]]),
                                 born_host=f"10.0.0.{index % 250}",
                                 delivery_attempt=rng.randrange(0, 4))
    system.born_timestamp.FromMilliseconds(1_700_000_000_000 + index)
    user = rng.choice([{}, {"color": "blue"}, {"zz": "1", "aa": "2", "mm": "3"}])
    return pb.Message(topic=pb.Resource(name=TOPIC), user_properties=user,
                      system_properties=system, body=rng.randbytes(rng.randrange(1, 300)))


def _mutate(rng: random.Random, message: pb.Message) -> None:
    """One change the front must either store as the servicer does or hand off."""
    system = message.system_properties
    choice = rng.randrange(20)
    if choice == 0:
        message.body = b""
    elif choice == 1:
        system.tag = rng.choice(["  ", "a|b", "t\x01", "标签", "Tag B"])
    elif choice == 2:
        system.keys[:] = rng.choice([["", "k"], [" "], ["k\x02"], ["键"], ["a b", "c"]])
    elif choice == 3:
        message.user_properties.update(rng.choice(
            [{"TAGS": "t"}, {"k": "\x03"}, {"名": "v"}, {"": "v"}, {"k": ""},
             {"UNIQ_KEY": "x"}, {"a b": "c d"}]))
    elif choice == 4:
        system.message_id = rng.choice(["", "   ", "id\x05", "ид"])
    elif choice == 5:
        system.born_host = rng.choice(["", "  "])
    elif choice == 6:
        system.ClearField("born_timestamp")
    elif choice == 7:
        system.body_encoding = pb.GZIP
    elif choice == 8:
        system.trace_context = rng.choice(["00-abc-def-01", "t\x04"])
    elif choice == 9:
        system.message_type = pb.TRANSACTION
    elif choice == 10:
        system.message_group = "group-1"
    elif choice == 11:
        system.delivery_timestamp.FromMilliseconds(4_000_000_000_000)
    elif choice == 12:
        message.topic.name = rng.choice(["NoSuchTopicX", "bad topic!", "rmq_sys_x"])
    elif choice == 13:
        message.topic.name = FIFO_TOPIC
        system.message_group = rng.choice(["", "g1"])
    elif choice == 14:
        message.user_properties.update({f"p{i}": "v" * 40 for i in range(rng.randrange(30, 200))})
    elif choice == 15:
        message.body = rng.randbytes(rng.randrange(300, 5000))
    elif choice == 16:
        message.topic.resource_namespace = "ns"
    elif choice == 17:
        system.delivery_attempt = rng.choice([-1, 2_000_000_000])
    elif choice == 18:
        message.user_properties.update({"é": "1", "z": "ü"})
    else:
        message.user_properties.update(_beyond_fast_path())


def _beyond_fast_path() -> dict[str, str]:
    """User properties the servicer takes (LIMITS) but the send fast path does not."""
    return {f"p{i:04d}": "v" * 40 for i in range(900)}


def _requests(rng: random.Random) -> list[tuple[spb.SendMessageRequest, tuple, bool]]:
    """(request, metadata, valid) of each send: valid ones are what the front puts itself."""
    requests = []
    now_ms = int(time.time() * 1000)
    for index in range(SENDS):
        message = _valid(rng, index)
        shape = rng.randrange(10)
        metadata = METADATA
        valid = shape < 5
        if index % 40 == 39:    # beyond the send fast path: back from the ring's port
            message.user_properties.update(_beyond_fast_path())
            requests.append((spb.SendMessageRequest(messages=[message]), metadata, False))
            continue
        if shape == 4:          # a delay message: parked (due in an hour) or due already
            message.topic.name = DELAY_TOPIC
            message.system_properties.delivery_timestamp.FromMilliseconds(
                now_ms + rng.choice([3_600_000 + index, -60_000]))
        if shape in (5, 6):
            _mutate(rng, message)
            if rng.random() < 0.3:
                _mutate(rng, message)
        if shape == 7:               # a batch: the servicer's (entries of one topic, or not)
            others = [_valid(rng, SENDS + index * 4 + i) for i in range(rng.randrange(1, 3))]
            if rng.random() < 0.3:
                others[0].topic.name = FIFO_TOPIC
            requests.append((spb.SendMessageRequest(messages=[message, *others]), metadata,
                             False))
            continue
        if shape == 8:
            metadata = rng.choice([METADATA[1:], (("x-mq-client-id", "  "), *METADATA[1:])])
        if shape == 9 and rng.random() < 0.2:
            requests.append((spb.SendMessageRequest(), metadata, False))
            continue
        requests.append((spb.SendMessageRequest(messages=[message]), metadata, valid))
    return requests


def _stored(remoting, topic: str) -> list:
    found, offset = [], 0
    while True:
        answer = pull(remoting, topic, 0, offset)
        if answer.code != ResponseCode.SUCCESS:
            return found
        records = records_of(answer.body)
        found += records
        offset = records[-1].queue_offset + 1


def _fields(record) -> dict:
    properties = props.decode_properties(record.properties)
    born_host = properties.get("__BORNHOST", "")
    fields = {name: getattr(record, name) for name in RECORD_FIELDS}
    fields["body"] = bytes(record.body)
    if born_host.startswith("127.0.0.1:"):
        # The caller's address (a blank born host): the port is each connection's own.
        properties["__BORNHOST"] = "127.0.0.1"
    else:
        fields["total_size"] = record.total_size
    if "BORN_TIMESTAMP" not in properties:
        fields["born_timestamp"] = None     # none given: the servicer's clock when it took it
    fields["properties"] = properties
    return fields


def test_front_sends_answer_and_store_as_the_servicer(tmp_path_factory):
    if not grpc_front.built():
        unavailable("the gRPC front is not built (libgrpc++-dev missing at build time)")
    requests = _requests(random.Random(SEED))
    brokers = []
    try:
        brokers = [_broker(tmp_path_factory, front) for front in (True, False)]
        stubs = [service_pb2_grpc.MessagingServiceStub(channel) for _, _, channel in brokers]
        for number, (request, metadata, _) in enumerate(requests):
            fast, servicer = (stub.SendMessage(request, metadata=metadata, timeout=30)
                              for stub in stubs)
            assert fast.SerializeToString() == servicer.SerializeToString(), \
                (number, request, fast, servicer)
        for topic in (*TOPICS, WHEEL_TOPIC):
            fast, servicer = ([_fields(r) for r in _stored(remoting, topic)]
                              for _, remoting, _ in brokers)
            assert len(fast) == len(servicer)
            for stored, expected in zip(fast, servicer, strict=True):
                assert stored == expected
        stored_ok = sum(1 for _, _, valid in requests if valid)
        assert len(_stored(brokers[0][1], TOPIC)) >= stored_ok > 0
    finally:
        for broker, remoting, channel in brokers:
            channel.close()
            remoting.close()
            broker.stop()
    front_log = read_log(brokers[0][0].log_path)
    took = re.search(r"(\d+) of them handed off, (\d+) sends put by the front", front_log)
    assert took is not None, "the front's count line"
    handed_off, sent_fast = int(took.group(1)), int(took.group(2))
    valid = sum(1 for _, _, ok in requests if ok)
    assert sent_fast >= valid, (sent_fast, valid)
    # A send the ring's fast path refused is counted both ways.
    beyond_fast_path = sum(1 for request, _, _ in requests if request.messages and
                           len(request.messages[0].user_properties) >= 900)
    assert beyond_fast_path > 0
    assert handed_off + sent_fast - len(requests) >= beyond_fast_path, (handed_off, sent_fast)
