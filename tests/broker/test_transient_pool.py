# transientStorePoolEnable on a real broker: round trip, reads only after commit, kill -9.
"""Goal: with the transient store pool a send is acknowledged from the pool buffer, what
consumers (and the dispatcher, and HA) can read is only what the commit step wrote to the
CommitLog file, the COMMIT instruments count the commits, SYNC_FLUSH leaves the pool off as
Java does, and a kill -9 keeps exactly what Java promises: every committed message, in order,
and nothing torn (acknowledged messages not yet committed are lost, as in Java).

Method: a standalone ASYNC_FLUSH broker with 1 MiB CommitLog files, commitCommitLogLeastPages
8 and a 60 s thorough interval, so after the first commit (Java's first turn always commits)
small sends stay in the pool until 8 pages are pending: the control block's written position
(what readers follow) is read with the profiler's sampler and compared with the offsets the
acknowledgements carry; raw PULL_MESSAGE requests show what is readable. The kill is a real
SIGKILL of every broker process; the restarted broker is pulled from offset 0. A master with
the pool and its slave (two real brokers, HA over 127.0.0.1): the slave's written position
never passes the master's committed one, and their CommitLog bytes are equal up to it.
"""
import asyncio

import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker._testbase.ha_cluster import HACluster
from pybroker.client.message import Message, decode_messages
from pybroker.client.producer import Producer
from pybroker.prof.sampler import Sampler, attach_store
from pybroker.protocol import headers
from pybroker.protocol.bodies import MessageQueue
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.protocol.constants import PullSysFlag
from pybroker.protocol import fastjson
from pybroker.protocol.message_id import decode_offset_message_id
from pybroker.remoting.client import SyncRemotingClient
from tests.ha_support import client_for, commitlog_bytes, position, send, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TOPIC = "PoolTopic"
GROUP = "PoolGroup"
BODY_BYTES = 3000
LEAST_PAGES = 8
POOL = {"transientStorePoolEnable": "true", "transientStorePoolSize": "2",
        "commitIntervalCommitLog": "200", "commitCommitLogLeastPages": str(LEAST_PAGES),
        "commitCommitLogThoroughInterval": "60000",
        "mappedFileSizeCommitLog": str(1 << 20), "maxMessageSize": str(64 << 10)}


def body(number: int) -> bytes:
    return f"{number:08d}".encode() * (BODY_BYTES // 8)


async def _send(broker: StandaloneBroker, numbers) -> list[int]:
    """Send one at a time; the physical offset of each acknowledged message."""
    # No retry (a retried send would store the body twice) and a deadline a busy box meets.
    producer = Producer("PoolProducer", broker.namesrv_addr, send_timeout_ms=30_000,
                        retry_times_when_send_failed=0)
    await producer.start()
    offsets = []
    try:
        queue = MessageQueue(TOPIC, "broker-a", 0)
        for number in numbers:
            result = await producer.send(Message(TOPIC, body(number)), queue=queue)
            assert result.status.name == "SEND_OK", result
            offsets.append(decode_offset_message_id(result.offset_msg_id)[2])
    finally:
        await producer.shutdown()
    return offsets


def _pull(broker: StandaloneBroker, queue_offset: int, count: int = 32):
    fields = headers.encode_header(headers.PULL_MESSAGE_REQUEST, {
        "consumer_group": GROUP, "topic": TOPIC, "queue_id": 0, "queue_offset": queue_offset,
        "max_msg_nums": count, "sys_flag": int(PullSysFlag.SUBSCRIPTION), "commit_offset": 0,
        "suspend_timeout_millis": 0, "subscription": "*", "sub_version": 0,
        "expression_type": "TAG"})
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        response = client.invoke(create_request(RequestCode.PULL_MESSAGE, fields), 10_000)
    if response.code != ResponseCode.SUCCESS:
        return response.code, []
    return response.code, [message.body for message in decode_messages(response.body)]


def _pull_all(broker: StandaloneBroker) -> list[bytes]:
    bodies: list[bytes] = []
    while True:
        code, found = _pull(broker, len(bodies))
        if not found:
            return bodies
        bodies.extend(found)


def _remaining_buffers(broker: StandaloneBroker) -> str:
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        answer = client.invoke(create_request(RequestCode.GET_BROKER_RUNTIME_INFO, {}), 10_000)
    return fastjson.loads(answer.body)["table"]["remainTransientStoreBufferNumbs"]


def _sample(broker: StandaloneBroker) -> dict:
    sampler = Sampler(attach_store(broker.store_dir))
    try:
        return sampler.sample()
    finally:
        sampler.close()


def test_reads_wait_for_the_commit_and_the_instruments_count_commits(tmp_path):
    work_dir = tmp_path / "b"
    more = LEAST_PAGES * 4096 // BODY_BYTES + 2
    total = 2 + more
    with StandaloneBroker(work_dir, dict(POOL)) as broker:
        first = _sample(broker)
        offsets = asyncio.run(_send(broker, [0]))       # first turn: committed at once
        broker.wait_max_offset(TOPIC, 0, 1)
        offsets += asyncio.run(_send(broker, [1]))      # 1 page pending: stays in the pool
        held = _sample(broker)
        assert held["positions"]["written"] <= offsets[1], held["positions"]
        code, found = _pull(broker, 1)
        assert found == [] and code != ResponseCode.SUCCESS
        # The drain that makes LEAST_PAGES pages pending commits everything pending then.
        offsets += asyncio.run(_send(broker, range(2, total)))
        last = _sample(broker)
        committed = last["positions"]["written"]
        kept = sum(1 for offset in offsets if offset < committed)
        assert 2 < kept < total, (kept, offsets, committed)
        broker.wait_max_offset(TOPIC, 0, kept)
        assert _pull_all(broker) == [body(number) for number in range(kept)]
        assert _remaining_buffers(broker) == "1"        # of 2: one attached to the file
    counters = {name: last["counters"][name] - first["counters"][name]
                for name in ("commits", "committed_bytes", "put_messages")}
    assert counters["put_messages"] == total
    assert counters["commits"] == 2, counters
    assert counters["committed_bytes"] == committed - first["positions"]["written"]
    commit_us = last["histograms"]["commit_us"]
    assert commit_us["count"] - first["histograms"]["commit_us"]["count"] == 2
    # A clean stop commits what the pool still held.
    with StandaloneBroker(work_dir, dict(POOL)) as broker:
        assert _pull_all(broker) == [body(number) for number in range(total)]


def test_sync_flush_leaves_the_pool_off_as_java_does(tmp_path):
    with StandaloneBroker(tmp_path / "b", dict(POOL, flushDiskType="SYNC_FLUSH")) as broker:
        asyncio.run(_send(broker, range(3)))
        broker.wait_max_offset(TOPIC, 0, 3)
        sample = _sample(broker)
        assert _pull_all(broker) == [body(number) for number in range(3)]
        assert _remaining_buffers(broker) == str(2 ** 31 - 1)    # Java's "no pool" answer
        log_text = broker._log_text()
    assert sample["counters"]["commits"] == 0
    assert "transientStorePoolEnable=true is not acted on" in log_text


def test_kill_9_keeps_every_committed_message_and_loses_only_uncommitted_ones(tmp_path):
    work_dir = tmp_path / "b"
    broker = StandaloneBroker(work_dir, dict(POOL)).start()
    try:
        count = LEAST_PAGES * 4096 // BODY_BYTES * 3 + 5
        offsets = asyncio.run(_send(broker, range(count)))
        sample = _sample(broker)
        committed = sample["positions"]["written"]
        # Nothing commits now: no send, 60 s thorough interval.
        kept = sum(1 for offset in offsets if offset < committed)
        assert 0 < kept < count, (kept, count)
        try:
            broker.wait_max_offset(TOPIC, 0, kept)
        except AssertionError as failure:
            raise AssertionError(f"{failure}; kept {kept}, offsets {offsets}, positions then "
                                 f"{sample['positions']}, now {_sample(broker)['positions']}, "
                                 f"counters {sample['counters']}") from None
    finally:
        broker.kill()
    with StandaloneBroker(work_dir, dict(POOL)) as broker:
        recovered = _pull_all(broker)
        # Java's promise: what was committed (in the page cache) survives a process crash;
        # acknowledged sends still in the pool are lost, and the store stays a prefix.
        assert recovered == [body(number) for number in range(kept)]
        asyncio.run(_send(broker, [count]))
        broker.wait_max_offset(TOPIC, 0, kept + 1)
        assert _pull(broker, kept)[1] == [body(count)]


def test_a_slave_receives_only_committed_bytes(tmp_path):
    """HA ships what readers may read: the master's committed offset, never pool bytes."""
    with HACluster(tmp_path, overrides=dict(POOL)) as cluster:
        master, slave = cluster.masters[0], cluster.slaves[0][0]

        def sent(client, number: int) -> int:
            response = send(client, TOPIC, body(number), 0, f"k{number}")
            assert response.code == ResponseCode.SUCCESS, response.remark
            return decode_offset_message_id(response.ext_fields["msgId"])[2]

        def caught_up() -> bool:
            return position(slave.store_dir, "written_position") == \
                position(master.store_dir, "written_position")
        with client_for(master.address) as client:
            sent(client, 0)                                  # committed at once
            held_offset = sent(client, 1)                    # stays in the pool
            wait_for(caught_up, 30, "the slave at the master's committed offset")
            assert 0 < position(slave.store_dir, "written_position") <= held_offset
            more = LEAST_PAGES * 4096 // BODY_BYTES + 1
            offsets = [sent(client, number) for number in range(2, 2 + more)]
            wait_for(lambda: caught_up() and position(
                slave.store_dir, "written_position") > held_offset, 30,
                "the slave past the committed run")
        end = position(master.store_dir, "written_position")
        assert held_offset < end <= offsets[-1] + BODY_BYTES + 512
        file_size = int(POOL["mappedFileSizeCommitLog"])
        assert commitlog_bytes(slave.commitlog_dir, end, file_size) == \
            commitlog_bytes(master.commitlog_dir, end, file_size)
