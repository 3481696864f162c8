"""A gRPC worker killed with SIGKILL while SDK-style sends are in flight loses no acknowledged
message: its death ends the generation like any worker's (abnormal recovery, SYNC_FLUSH so an
acknowledgement means flushed), the gRPC port serves again, and every message answered OK
before or after the kill is in the topic's queues under its message id (a send retried after a
lost answer may be there twice: at least once, as with any RocketMQ producer).

Method: one pybroker standalone (grpcWorkers=1, flushDiskType=SYNC_FLUSH); 16 grpc.aio senders
send numbered messages, retrying what fails, until the port serves again after the kill of
pb-grpc-0 at a seeded random moment and each has 20 more acknowledgements; then every queue
is read back with raw remoting pulls and each acknowledged id must be found. Run with grpcio
serving the port and with the C++ front (grpcNativeFront), which dies with its worker and is
bound again by the new one.
"""
import asyncio
import os
import random
import signal
import time

import grpc
import psutil
import pytest

from pybroker._testbase.cluster import StandaloneBroker, free_port
from pybroker.grpc_service import front as grpc_front
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb
from pybroker.protocol.rocketmq_v2 import service_pb2 as spb
from pybroker.protocol.rocketmq_v2 import service_pb2_grpc
from tests.ha_support import client_for, pull, records_of, wait_for
from tests.peers import unavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "GrpcCrash"
SENDERS = 16
AFTER_KILL_ACKS = 20
METADATA = (("x-mq-client-id", "crash-client@1"), ("x-mq-language", "JAVA"))


def _grpc_worker(broker) -> psutil.Process:
    for child in psutil.Process(broker.process.pid).children(recursive=True):
        if child.name() == "pb-grpc-0":
            return child
    raise AssertionError("no pb-grpc-0 under the broker")


async def _sender(stub, index: int, acked: set, state: dict) -> None:
    number = 0
    after = 0
    while after < AFTER_KILL_ACKS and time.monotonic() < state["deadline"]:
        message_id = f"S{index}-{number}"
        message = pb.Message(topic=pb.Resource(name=TOPIC), body=message_id.encode(),
                             system_properties=pb.SystemProperties(message_id=message_id))
        try:
            answer = await stub.SendMessage(spb.SendMessageRequest(messages=[message]),
                                            metadata=METADATA, timeout=5)
        except grpc.aio.AioRpcError:
            await asyncio.sleep(0.05)
            continue
        if answer.status.code == pb.OK:
            acked.add(message_id)
            number += 1
            if state["killed"]:
                after += 1
        else:
            await asyncio.sleep(0.05)


async def _load(port: int, broker, seed: int) -> set:
    acked: set = set()
    state = {"killed": False, "deadline": time.monotonic() + 150}
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        senders = [asyncio.ensure_future(_sender(stub, i, acked, state))
                   for i in range(SENDERS)]
        await asyncio.sleep(random.Random(seed).uniform(1.0, 3.0))
        victim = _grpc_worker(broker)
        os.kill(victim.pid, signal.SIGKILL)
        state["killed"] = True
        await asyncio.gather(*senders)
    assert time.monotonic() < state["deadline"], "sends did not resume after the kill"
    return acked


@pytest.mark.parametrize("front", [False, True], ids=["grpcio", "front"])
def test_killed_grpc_worker_loses_no_acknowledged_send(tmp_path, front):
    if front and not grpc_front.built():
        unavailable("the gRPC front is not built (libgrpc++-dev missing at build time)")
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    port = free_port()
    with StandaloneBroker(tmp_path / "broker", {"grpcWorkers": "1",
                                                "grpcServerPort": str(port),
                                                "flushDiskType": "SYNC_FLUSH",
                                                "grpcNativeFront": str(front).lower()}) as broker:
        remoting = client_for(broker.broker_addr)
        answer = remoting.invoke(create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "4",
            "writeQueueNums": "4", "perm": "6", "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0", "order": "false"}), 5000)
        assert answer.code == ResponseCode.SUCCESS
        remoting.close()
        acked = asyncio.run(_load(port, broker, seed))
        remoting = client_for(broker.broker_addr)     # the restart closed remoting connections
        assert len(acked) >= SENDERS * AFTER_KILL_ACKS
        stored: dict[str, int] = {}

        def all_stored() -> bool:
            stored.clear()
            for queue_id in range(4):
                offset = 0
                while True:
                    reply = pull(remoting, TOPIC, queue_id, offset)
                    if reply.code != ResponseCode.SUCCESS:
                        break
                    records = records_of(reply.body)
                    for record in records:
                        key = props.decode_properties(record.properties)["UNIQ_KEY"]
                        stored[key] = stored.get(key, 0) + 1
                    offset = records[-1].queue_offset + 1
            return acked <= set(stored)
        wait_for(all_stored, 30, "every acknowledged message in the topic's queues")
        remoting.close()
        log_text = broker._log_text()
        assert "worker grpc-0" in log_text and "restarting the data plane" in log_text
        assert log_text.count("C++ front)") == (2 if front else 0)   # before and after
    missing = acked - set(stored)
    assert not missing, (seed, sorted(missing)[:10])
