"""A Java deployment's broker.conf runs pybroker standalone as Java would run it.

Method: real `pybroker standalone` processes on free 127.0.0.1 ports. (1) broker.conf names the
NameServer (namesrvAddr) and no --namesrv-port is given: the embedded NameServer listens there
and the broker registers with it. (2) 1 MiB CommitLog files with the default 4 MiB
maxMessageSize (a Java test profile) load; a message whose record does not fit one CommitLog
file is refused with MESSAGE_ILLEGAL and stores nothing, smaller ones roll files and read back,
also after kill -9 and recovery.
"""
import time

import pytest

from pybroker._fast import record
from pybroker._testbase.cluster import StandaloneBroker, free_port
from pybroker.cli import standalone_namesrv
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.remoting.client import SyncRemotingClient

pytestmark = [pytest.mark.slow]
TIMEOUT_MS = 10_000
MIB = 1 << 20


def _send(client, topic: str, body: bytes):
    properties = props.encode_properties({"TAGS": "T", "WAIT": "true"})
    ext = {"a": "conf_producer", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
           "g": "1700000000000", "h": "0", "i": properties, "j": "0", "k": "false",
           "m": "false"}
    return client.invoke(create_request(RequestCode.SEND_MESSAGE_V2, ext, body), TIMEOUT_MS)


def _pull_all(client, topic: str, expected_count: int) -> list[bytes]:
    """Every body of queue 0, waiting (with a deadline) until the dispatcher has them all."""
    deadline = time.monotonic() + 20
    while True:
        bodies = _pull_once(client, topic)
        if len(bodies) >= expected_count or time.monotonic() > deadline:
            return bodies
        time.sleep(0.05)


def _pull_once(client, topic: str) -> list[bytes]:
    bodies: list[bytes] = []
    while True:
        ext = {"consumerGroup": "conf_group", "topic": topic, "queueId": "0",
               "queueOffset": str(len(bodies)), "maxMsgNums": "32", "sysFlag": "4",
               "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
               "subVersion": "0", "expressionType": "TAG"}
        response = client.invoke(create_request(RequestCode.PULL_MESSAGE, ext), TIMEOUT_MS)
        if response.code != ResponseCode.SUCCESS:
            return bodies
        data, position = bytes(response.body), 0
        while position < len(data):
            message = record.decode(data, position)
            bodies.append(bytes(message.body))
            position += message.total_size


@pytest.mark.parametrize("option_n, option_port, in_file, expected", [
    (None, None, None, (9876, "127.0.0.1:9876")),
    (None, None, "127.0.0.1:9877", (9877, "127.0.0.1:9877")),
    (None, None, "localhost:9878;10.1.1.1:9876", (9878, "localhost:9878;10.1.1.1:9876")),
    (None, None, "10.1.1.1:9876", (9876, "127.0.0.1:9876;10.1.1.1:9876")),
    (None, 9999, "127.0.0.1:9877", (9999, "127.0.0.1:9999")),
    ("10.2.2.2:9876", None, "127.0.0.1:9877", (9877, "10.2.2.2:9876")),
    ("10.2.2.2:9876", 9999, None, (9999, "10.2.2.2:9876")),
])
def test_standalone_namesrv_choice(option_n, option_port, in_file, expected):
    assert standalone_namesrv(option_n, option_port, in_file) == expected


def test_standalone_honours_namesrv_addr_from_the_file(tmp_path):
    port = free_port()
    broker = StandaloneBroker(tmp_path, {"namesrvAddr": f"127.0.0.1:{port}"},
                              pass_namesrv_port=False)
    broker.namesrv_port = port
    with broker, SyncRemotingClient() as namesrv:
        namesrv.connect(f"127.0.0.1:{port}")
        info = namesrv.invoke(create_request(RequestCode.GET_BROKER_CLUSTER_INFO), TIMEOUT_MS)
        assert info.code == ResponseCode.SUCCESS, info.remark
        assert broker.broker_addr in bytes(info.body).decode()


def test_small_commitlog_files_refuse_a_record_that_fits_no_file(tmp_path):
    broker = StandaloneBroker(tmp_path, {"mappedFileSizeCommitLog": str(MIB),
                                         "maxMessageSize": str(4 * MIB)})
    fitting = [bytes([65 + index]) * (900 * 1024) for index in range(3)]
    with broker:
        with SyncRemotingClient() as client:
            client.connect(broker.broker_addr)
            for size in (2 * MIB, MIB):   # under maxMessageSize, over one CommitLog file
                refused = _send(client, "SmallFiles", b"x" * size)
                assert refused.code == ResponseCode.MESSAGE_ILLEGAL, refused.remark
                assert "message is illegal" in refused.remark
            for body in fitting:          # each rolls to a new 1 MiB file
                response = _send(client, "SmallFiles", body)
                assert response.code == ResponseCode.SUCCESS, response.remark
            assert _pull_all(client, "SmallFiles", len(fitting)) == fitting
        commitlog_files = sorted((tmp_path / "store" / "commitlog").iterdir())
        # One record per 1 MiB file; the allocator may have made the next two files ready
        # ahead of the writer (store/allocate.py, as Java's), empty, by the time of the look.
        written, ahead = commitlog_files[:3], commitlog_files[3:]
        assert [path.stat().st_size for path in commitlog_files] == [MIB] * len(commitlog_files)
        assert len(written) == 3, commitlog_files
        assert all(body in path.read_bytes() for path, body in zip(written, fitting, strict=True))
        assert len(ahead) <= 2 and not any(any(path.read_bytes()) for path in ahead), ahead
        broker.kill()
        broker.start()
        with SyncRemotingClient() as client:
            client.connect(broker.broker_addr)
            assert _pull_all(client, "SmallFiles", len(fitting)) == fitting
