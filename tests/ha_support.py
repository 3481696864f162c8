# Shared by the HA tests: raw sends and pulls, positions, CommitLog comparison, bounded waits.
"""Building blocks of the replication tests (broker, crash and compat suites).

Requests are raw remoting frames over :class:`SyncRemotingClient` (SEND_MESSAGE_V2, PULL_MESSAGE
and the admin codes), so the checks do not depend on any client library. Positions come from
the broker's control block (``<store>/run/control``), which is what the processes publish.
"""
import os
import socket
import time

from pybroker._testbase.raw_client import (  # noqa: F401 - the suites import them from here
    TIMEOUT_MS, client_for, pull, read_queue, records_of)
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.store.control_block import ControlBlock


def wait_for(predicate, timeout_s: float, what: str, interval_s: float = 0.05):
    """Poll ``predicate()`` until it returns a true value (returned); AssertionError after
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(interval_s)


def send(client, topic: str, body: bytes, queue_id: int, key: str, wait: bool = True,
         queues: int = 4, extra: dict[str, str] | None = None):
    """One SEND_MESSAGE_V2 as the Java producer sends it (``extra`` properties added, e.g. a
    5.x timer property); the response."""
    properties = props.encode_properties({"TAGS": "T", "KEYS": key, "UNIQ_KEY": key,
                                          "WAIT": "true" if wait else "false",
                                          **(extra or {})})
    ext = {"a": "ha_producer", "b": topic, "c": "TBW102", "d": str(queues), "e": str(queue_id),
           "f": "0", "g": str(time.time_ns() // 1_000_000), "h": "0", "i": properties,
           "j": "0", "k": "false", "m": "false"}
    return client.invoke(create_request(RequestCode.SEND_MESSAGE_V2, ext, body), TIMEOUT_MS)


def send_until_accepted(client, topic: str, body: bytes, queue_id: int, key: str):
    """:func:`send`, sent again after a flow-control answer as a Java producer retries it:
    SYSTEM_BUSY [TIMEOUT_CLEAN_QUEUE] (the send waited longer than waitTimeMillsInSendQueue)
    and [PC_SYNCHRONIZED] (a put held the store longer than osPageCacheBusyTimeOutMills) are
    what a loaded box answers to big writes; neither stored the message. Any other answer is
    returned."""
    while True:
        response = send(client, topic, body, queue_id, key)
        busy = response.code == ResponseCode.SYSTEM_BUSY or (
            response.code == ResponseCode.SYSTEM_ERROR
            and "[PC_SYNCHRONIZED]" in (response.remark or ""))
        if not busy:
            return response
        time.sleep(0.05)


def wait_topic_synced(client, topic: str, timeout_s: float = 40) -> None:
    """Wait until a slave knows ``topic``: like Java's, a slave learns topics from its master's
    config every SYNC_INTERVAL_S (10 s) and answers TOPIC_NOT_EXIST before that."""
    codes = []

    def known() -> bool:
        codes.append(pull(client, topic, 0, 0).code)
        return codes[-1] != ResponseCode.TOPIC_NOT_EXIST
    wait_for(known, timeout_s, f"the slave's topic config sync of {topic} (codes {codes[-3:]})",
             interval_s=0.25)


def control(store_dir: str) -> ControlBlock:
    return ControlBlock(os.path.join(store_dir, "run", "control"), create=False)


def position(store_dir: str, field: str) -> int:
    """A published position of a running broker (-1 when its control block is gone)."""
    try:
        with control(store_dir) as block:
            return block.load(field)
    except (FileNotFoundError, ValueError):
        return -1


def commitlog_names(commitlog_dir: str) -> list[str]:
    """The CommitLog's file names in order: a file being made is ``<name>.<pid>.tmp`` until
    it is renamed (store/mapped_file.py), not yet one of them."""
    return sorted(name for name in os.listdir(commitlog_dir) if name.isdigit())


def commitlog_bytes(commitlog_dir: str, end: int, file_size: int) -> bytes:
    """The CommitLog's bytes [first file, end) read from disk (files must be contiguous)."""
    data = bytearray()
    names = commitlog_names(commitlog_dir)
    for name in names:
        base = int(name)
        if base >= end:
            break
        with open(os.path.join(commitlog_dir, name), "rb") as source:
            data += source.read(min(file_size, end - base))
    return bytes(data)


def assert_commitlogs_identical(master_dir: str, slave_dir: str, end: int,
                                file_size: int) -> None:
    """Same file names below ``end`` and the same bytes up to ``end`` (Java's BLANK fillers
    included: the slave copies whole files)."""
    master_names = [n for n in commitlog_names(master_dir) if int(n) < end]
    slave_names = [n for n in commitlog_names(slave_dir) if int(n) < end]
    assert master_names == slave_names, (master_names, slave_names)
    master = commitlog_bytes(master_dir, end, file_size)
    slave = commitlog_bytes(slave_dir, end, file_size)
    assert len(master) == len(slave), (len(master), len(slave))
    if master != slave:
        first = next(i for i, (a, b) in enumerate(zip(master, slave, strict=True)) if a != b)
        raise AssertionError(f"CommitLogs differ first at byte {first} (of {len(master)})")


def rogue_peer(ha_address: str, source: str = "127.0.0.1") -> socket.socket:
    """A raw TCP connection to an HA port (``host:port``) from ``source`` (a loopback address:
    127.0.0.2 is "another host" for an allow-list of 127.0.0.1), 5 s timeouts."""
    host, port = ha_address.rsplit(":", 1)
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(5)
    sock.connect((host, int(port)))
    return sock


def received_until_closed(sock: socket.socket, timeout_s: float = 5) -> bytes:
    """Everything the master sent until it closed the connection; AssertionError when it
    keeps it open past ``timeout_s``."""
    sock.settimeout(timeout_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        raise AssertionError(f"the master kept the rogue connection open ({len(data)} bytes "
                             "received)") from None
    except ConnectionResetError:
        pass
    return data
