"""A broker's processes do not keep the CommitLog mapped behind them, and lose nothing by it.

Method: a real `pybroker standalone` (32 MiB CommitLog files, so the writes cross files) takes
96 MiB of 512 KiB messages over a real socket; every message is pulled back and compared byte for
byte. What each process maps of the CommitLog is the kernel's count: the ``Rss`` of its mappings
of the commitlog/ files in ``/proc/<pid>/smaps``. Without store/drop_behind.py the appender and
the dispatcher each map all 96 MiB and the flusher that plus its prefault window; with it they
keep at most the step and the kept MiB (pybroker/store/drop_behind.py), and a remoting worker
keeps the newest READER_KEEP_BYTES after its once-a-second sweep. Then kill -9 of the whole
broker and a restart: every message is still there (the dropped pages were dirty, in the page
cache, not in the processes).
"""
import os
import time

import psutil
import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.client.message import decode_messages
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.remoting.client import SyncRemotingClient
from pybroker.store.drop_behind import KEEP_BYTES, STEP_BYTES
from pybroker.store.read_only_store import READER_KEEP_BYTES, READER_SWEEP_INTERVAL_S

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

MIB = 1 << 20
TOPIC = "DropBehindTopic"
BODY_BYTES = 512 * 1024
MESSAGES = 192                   # 96 MiB
TIMEOUT_MS = 10000
# A writer keeps less than a step plus the kept bytes mapped, and the page it writes.
WRITER_BOUND_BYTES = STEP_BYTES + KEEP_BYTES + 1 * MIB


def _body(index: int) -> bytes:
    return (b"%06d" % index) * (BODY_BYTES // 6) + b"x" * (BODY_BYTES % 6)


def _send(client, index: int):
    properties = props.encode_properties({"WAIT": "true", "UNIQ_KEY": "%032d" % index})
    ext = {"a": "drop_producer", "b": TOPIC, "c": "TBW102", "d": "1", "e": "0", "f": "0",
           "g": "1700000000000", "h": "0", "i": properties, "j": "0", "k": "false", "m": "false"}
    return client.invoke(create_request(RequestCode.SEND_MESSAGE_V2, ext, _body(index)),
                         TIMEOUT_MS)


def _pull(client, offset: int):
    ext = {"consumerGroup": "drop_consumer", "topic": TOPIC, "queueId": "0",
           "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": "4",
           "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
           "subVersion": "0", "expressionType": "TAG"}
    return client.invoke(create_request(RequestCode.PULL_MESSAGE, ext), TIMEOUT_MS)


def _pulled_bodies(client) -> list[bytes]:
    bodies: list[bytes] = []
    while True:
        response = _pull(client, len(bodies))
        if response.code != ResponseCode.SUCCESS:
            return bodies
        bodies.extend(bytes(message.body) for message in decode_messages(response.body))


def _commitlog_rss_bytes(pid: int, commitlog_dir: str) -> int:
    total, inside = 0, False
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if fields and "-" in fields[0] and not fields[0].endswith(":"):
                inside = len(fields) >= 6 and fields[-1].startswith(commitlog_dir + os.sep)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


def _workers(broker) -> dict[str, int]:
    return {child.name()[3:]: child.pid
            for child in psutil.Process(broker.process.pid).children()
            if child.name().startswith("pb-")}


def test_processes_map_only_the_newest_commitlog_pages_and_nothing_is_lost(tmp_path):
    broker = StandaloneBroker(tmp_path, {"mappedFileSizeCommitLog": str(32 * MIB)})
    commitlog_dir = os.path.join(broker.store_dir, "commitlog")
    with broker:
        with SyncRemotingClient() as client:
            client.connect(broker.broker_addr)
            for index in range(MESSAGES):
                response = _send(client, index)
                assert response.code == ResponseCode.SUCCESS, response.remark
            bodies = _pulled_bodies(client)
            assert len(bodies) == MESSAGES
            assert all(body == _body(index) for index, body in enumerate(bodies))
            time.sleep(READER_SWEEP_INTERVAL_S + 0.2)
            _pull(client, MESSAGES - 1)       # a read after the interval runs the sweep
            time.sleep(0.5)                   # the flusher's and dispatcher's last turns
            workers = _workers(broker)
            mapped = {role: _commitlog_rss_bytes(pid, commitlog_dir)
                      for role, pid in workers.items()}
        for role in ("appender", "dispatcher", "flusher"):
            assert mapped[role] <= WRITER_BOUND_BYTES, mapped
        readers = sum(size for role, size in mapped.items() if role.startswith("remoting"))
        assert readers <= READER_KEEP_BYTES + 1 * MIB, mapped
        assert readers > 0, mapped              # the reads did map the newest pages
        broker.kill()                           # kill -9 of every process of the broker
    with broker:
        with SyncRemotingClient() as client:
            client.connect(broker.broker_addr)
            bodies = _pulled_bodies(client)
    assert len(bodies) == MESSAGES
    assert all(body == _body(index) for index, body in enumerate(bodies))
