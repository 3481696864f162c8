"""kill -9 of a SYNC_MASTER with 64 sends in flight and its slave behind loses no acknowledged
message: each one is on the slave, found by reading the slave's files.

Method: a real SYNC_MASTER and its slave (pybroker/_testbase/ha_cluster.py). 64 senders (4 on
each of 16 connections, one connection per send form of tests/send_forms.py: codes 10, 310,
320 with one and three messages, JSON and ROCKETMQ headers, fast and Python path; 16 KiB
bodies) each keep one send in flight without pause. Once thousands are acknowledged the
slave's ha worker stalls (SIGSTOP, as a slave on a busy or swapping machine does) for
STALL_S, shorter than slaveTimeout, the load going on; then the master's whole process group
is killed with SIGKILL while sends are in flight (the test checks how many were), and the
slave resumes. A master killed only when its slave has caught up (as the older HA tests did)
cannot tell an acknowledgement given before replication from one given after; a slave
behind at the kill can: answering SEND_OK before the slave acknowledged, checked once by
building the broker that way, loses acknowledged messages here. Then the slave is stopped
and its store is read from disk, independently of the broker and of the send path: every
consume-queue unit of the topic, the CommitLog record it points at (size, magic, body CRC,
topic, queue id and offset checked with zlib and struct here, not with pybroker's codec), and
the record's UNIQ_KEY. Every acknowledged message must be there.
"""
import asyncio
import os
import struct
import time
import zlib

import pytest

from pybroker._testbase.ha_cluster import HACluster
from pybroker.protocol.codes import ResponseCode
from pybroker.remoting.client import RemotingClient
from pybroker.store import layout
from tests.ha_support import client_for, commitlog_names, send, wait_for
from tests.send_forms import ALL_FORMS, freeze, thaw

pytestmark = [pytest.mark.crash, pytest.mark.slow, pytest.mark.timeout(300)]

TOPIC = "KillUnderLoad"
QUEUES = 4
PER_CONNECTION = 4
ACKED_BEFORE_STALL = 2000
INFLIGHT_AT_KILL_MIN = 32
TIMEOUT_MS = 10000
PAD_BYTES = 16 * 1024
STALL_S = 1.0           # slaveTimeout is 3 s: the held sends are still waiting at the kill


class _Load:
    """64 senders; acknowledged UNIQ_KEYs, and the sends in flight right now."""

    def __init__(self, address: str):
        self.address = address
        self.acked: set[str] = set()
        self.inflight = 0
        self.failed: dict[str, int] = {}
        self.killed = False

    async def sender(self, client, form, number: int) -> None:
        sequence = 0
        while not self.killed:
            tag = f"{form.name}-{number}-{sequence}"
            sequence += 1
            self.inflight += 1
            try:
                response = await client.invoke(
                    form.request(TOPIC, sequence % QUEUES, tag, PAD_BYTES), TIMEOUT_MS)
            except (ConnectionError, TimeoutError) as error:
                name = type(error).__name__
                self.failed[name] = self.failed.get(name, 0) + 1
                return
            finally:
                self.inflight -= 1
            if response.code == ResponseCode.SUCCESS:
                self.acked.update(f"{tag}-{index}" for index in range(form.messages))
            else:
                self.failed[str(response.code)] = self.failed.get(str(response.code), 0) + 1


async def _load_and_kill(master, slave_ha: list[int]) -> tuple[_Load, int]:
    load = _Load(master.address)
    clients, senders = [], []
    for form in ALL_FORMS:
        client = RemotingClient(serialize_type=int(form.encoding))
        await client.connect(master.address)
        clients.append(client)
        senders += [asyncio.create_task(load.sender(client, form, number))
                    for number in range(PER_CONNECTION)]
    deadline = time.monotonic() + 120
    while len(load.acked) < ACKED_BEFORE_STALL:
        assert time.monotonic() < deadline, f"only {len(load.acked)} acknowledged in 120 s"
        assert not load.failed, load.failed
        await asyncio.sleep(0.01)
    freeze(slave_ha)
    try:
        await asyncio.sleep(STALL_S)
        inflight = load.inflight
        master.kill()
        load.killed = True
    finally:
        thaw(slave_ha)
    await asyncio.gather(*senders)
    for client in clients:
        client.close()
    return load, inflight


def _units(store_dir: str) -> list[tuple[int, int, int, int]]:
    """(queue id, queue offset, physical offset, size) of every consume-queue unit of TOPIC."""
    units = []
    unit_bytes = layout.CQ_STORE_UNIT_SIZE
    root = os.path.join(store_dir, "consumequeue", TOPIC)
    for queue in sorted(os.listdir(root), key=int):
        queue_offset = 0
        for name in sorted(os.listdir(os.path.join(root, queue))):
            with open(os.path.join(root, queue, name), "rb") as file:
                data = file.read()
            for at in range(0, len(data) - unit_bytes + 1, unit_bytes):
                physical_offset, size = struct.unpack_from(">qi", data, at)
                if size == 0:
                    break
                units.append((int(queue), queue_offset, physical_offset, size))
                queue_offset += 1
    return units


def _read(commitlog_dir: str, physical_offset: int, size: int) -> bytes:
    base = max(int(name) for name in commitlog_names(commitlog_dir)
               if int(name) <= physical_offset)
    with open(os.path.join(commitlog_dir, "%020d" % base), "rb") as file:
        file.seek(physical_offset - base)
        return file.read(size)


def _uniq_key(record: bytes, queue_id: int, queue_offset: int, physical_offset: int) -> str:
    """The UNIQ_KEY of a v1 CommitLog record, every field the unit names checked."""
    total, magic, body_crc, record_queue, _flag, record_queue_offset, record_physical, \
        sys_flag = struct.unpack_from(">iiiiiqqi", record, 0)
    assert (total, magic) == (len(record), layout.MESSAGE_MAGIC_CODE_V1)
    assert (record_queue, record_queue_offset, record_physical) == (
        queue_id, queue_offset, physical_offset)
    at = 48 + (20 if sys_flag & 0x10 else 8) + 8 + (20 if sys_flag & 0x20 else 8) + 4 + 8
    body_length = struct.unpack_from(">i", record, at)[0]
    body = record[at + 4:at + 4 + body_length]
    assert zlib.crc32(body) & 0x7FFFFFFF == body_crc
    at += 4 + body_length
    topic_length = record[at]
    assert record[at + 1:at + 1 + topic_length] == TOPIC.encode()
    at += 1 + topic_length
    properties_length = struct.unpack_from(">h", record, at)[0]
    properties = record[at + 2:at + 2 + properties_length].decode()
    pairs = dict(pair.split("\x01", 1) for pair in properties.split("\x02") if pair)
    return pairs["UNIQ_KEY"]


def test_sync_master_kill_with_64_sends_in_flight_loses_nothing_acknowledged(tmp_path):
    with HACluster(tmp_path, role="SYNC_MASTER") as cluster:
        master, slave = cluster.masters[0], cluster.slaves[0][0]
        with client_for(master.address) as client:
            assert send(client, TOPIC, b"first", 0, "first").code == ResponseCode.SUCCESS
        slave_ha = [slave.supervisor_children()["pb-ha"]]
        load, inflight = asyncio.run(_load_and_kill(master, slave_ha))
        assert inflight >= INFLIGHT_AT_KILL_MIN, inflight
        # The master is dead: what the slave has now is all it will have.
        wait_for(lambda: slave.published("dispatched_position")
                 == slave.published("written_position") > 0, 30, "slave dispatch")
        assert slave.stop() == 0
        units = _units(slave.store_dir)
        stored = {_uniq_key(_read(slave.commitlog_dir, physical, size), queue_id,
                            queue_offset, physical)
                  for queue_id, queue_offset, physical, size in units}
        missing = load.acked - stored
        print(f"acknowledged {len(load.acked)}, in flight at the kill {inflight}, "  # noqa: T201
              f"on the slave {len(stored)}, not acknowledged {load.failed}")
        assert not missing, f"{len(missing)} acknowledged messages not on the slave, " \
            f"e.g. {sorted(missing)[:5]}"
