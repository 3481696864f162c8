"""Clients that flood the broker and never read their replies harm only themselves.

Method: a real `pybroker standalone` with two remoting workers. Flooders open raw sockets with a
tiny receive buffer and pipeline HEART_BEAT, UPDATE_CONSUMER_OFFSET and GET_ALL_TOPIC_CONFIG
requests (all forwarded to the metadata service) without reading a byte, for several seconds.
While they still hold their connections, 100 new connections each send a heartbeat, commit and
query a consumer offset and ask an admin question: all 100 must be served, within a Java
client's usual timeout. The broker's memory and log must stay bounded (no traceback storm),
and no remark reaching a client may carry a local path. A second case cuts the internal links
between the remoting workers and the metadata service (shutdown(2) of the supervisor's ends
through pidfd_getfd): the workers must reconnect and again serve 100 of 100 new connections;
the clients that ask while the links are down get SUCCESS or SYSTEM_BUSY, never a remark with
the internal socket's path (before, they got SYSTEM_ERROR "ConnectionError: not connected to
<store>/run/metadata.sock").
"""
import contextlib
import ctypes
import os
import socket
import threading
import time

import orjson
import psutil
import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker.proc.service_socket import SOCKET_NAME
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request, encode
from pybroker.remoting.client import SyncRemotingClient

pytestmark = [pytest.mark.slow]

TIMEOUT_MS = 5000            # well above a healthy answer, at the Java client's 3 s scale
FLOOD_SECONDS = 8.0
FLOODERS = 4
NEW_CONNECTIONS = 100
RSS_GROWTH_MAX_BYTES = 256 << 20
LOG_GROWTH_MAX_BYTES = 2 << 20
_SYS_PIDFD_GETFD = 438


def _heartbeat(client_id: str, group: str) -> bytes:
    return orjson.dumps({"clientID": client_id, "producerDataSet": [],
                         "consumerDataSet": [{"groupName": group,
                                              "consumeType": "CONSUME_PASSIVELY",
                                              "messageModel": "CLUSTERING",
                                              "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                                              "unitMode": False, "subscriptionDataSet": []}]})


def _flood_frames() -> bytes:
    frames = [encode(create_request(RequestCode.HEART_BEAT, None,
                                    _heartbeat("flood@1", "flood_group"))),
              encode(create_request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                  "consumerGroup": "flood_group", "topic": "FloodTopic", "queueId": "0",
                  "commitOffset": "1"})),
              encode(create_request(RequestCode.GET_ALL_TOPIC_CONFIG))]
    return b"".join(frames) * 50


def _broker_rss(broker) -> int:
    total = 0
    for process in [psutil.Process(broker.process.pid)] + \
            psutil.Process(broker.process.pid).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            total += process.memory_info().rss
    return total


class Flood:
    """FLOODERS raw connections that write requests and never read (until closed)."""

    def __init__(self, address: str):
        host, port = address.rsplit(":", 1)
        self.sockets = []
        for _ in range(FLOODERS):
            flooder = socket.socket()
            flooder.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            flooder.connect((host, int(port)))
            flooder.setblocking(False)
            self.sockets.append(flooder)
        self.written = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        data = _flood_frames()
        while not self.stop.is_set():
            progress = False
            for flooder in self.sockets:
                with contextlib.suppress(BlockingIOError, ConnectionError):
                    self.written += flooder.send(data)
                    progress = True
            if not progress:
                self.stop.wait(0.01)

    def __enter__(self) -> "Flood":
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop.set()
        self.thread.join(5)
        for flooder in self.sockets:
            flooder.close()


def _probe_requests(index: int) -> list:
    """A new client's usual metadata round trips: heartbeat, offset commit and query, admin."""
    group = f"probe_group_{index % 7}"
    return [
        create_request(RequestCode.HEART_BEAT, None, _heartbeat(f"probe@{index}", group)),
        create_request(RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": group, "topic": "ProbeTopic", "queueId": "0",
            "commitOffset": str(index + 1)}),
        create_request(RequestCode.QUERY_CONSUMER_OFFSET, {
            "consumerGroup": group, "topic": "ProbeTopic", "queueId": "0"}),
        create_request(RequestCode.GET_BROKER_RUNTIME_INFO)]


def _served(broker, index: int) -> list[str]:
    """Problems of one new client doing the usual metadata round trips (empty: all served)."""
    problems = []
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        for request in _probe_requests(index):
            try:
                response = client.invoke(request, TIMEOUT_MS)
            except (TimeoutError, ConnectionError) as error:
                problems.append(f"code {request.code}: {error}")
                continue
            if response.code != ResponseCode.SUCCESS:
                problems.append(f"code {request.code}: {response.code} {response.remark}")
            if response.remark and "/" in response.remark:
                problems.append(f"code {request.code}: path in remark {response.remark!r}")
    return problems


def _assert_all_served(broker) -> None:
    problems = {index: found for index in range(NEW_CONNECTIONS)
                if (found := _served(broker, index))}
    assert not problems, f"{len(problems)} of {NEW_CONNECTIONS} connections not served: " \
                         f"{list(problems.items())[:5]}"


@pytest.fixture
def broker(tmp_path):
    with StandaloneBroker(tmp_path) as running:
        yield running


def test_clients_that_never_read_do_not_starve_new_connections(broker):
    log_before = len(broker._log_text())
    rss_before = _broker_rss(broker)
    with Flood(broker.broker_addr) as flood:
        time.sleep(FLOOD_SECONDS)
        assert flood.written > 1 << 20, flood.written
        _assert_all_served(broker)
        rss_growth = _broker_rss(broker) - rss_before
    assert rss_growth < RSS_GROWTH_MAX_BYTES, f"broker grew by {rss_growth >> 20} MiB"
    log = broker._log_text()[log_before:]
    assert len(log) < LOG_GROWTH_MAX_BYTES, f"{len(log)} log bytes during the flood"
    assert log.count("Traceback") <= 20, log[-3000:]
    assert "link to the metadata service lost" not in log
    # The flooders are gone: everything is still served.
    _assert_all_served(broker)


def _shut_down_links(broker) -> int:
    """shutdown(2) every accepted socket of the supervisor's metadata service; returns how
    many (the socket is a duplicate of the supervisor's descriptor: the link really breaks)."""
    supervisor = psutil.Process(broker.process.pid)
    # Bound as /proc/self/fd/<run dir>/metadata.sock (pybroker/proc/service_socket.py).
    accepted = [connection.fd for connection in supervisor.net_connections(kind="unix")
                if connection.laddr.endswith("/" + SOCKET_NAME) and connection.fd >= 0]
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(broker.process.pid)
    cut = 0
    try:
        for fd in accepted:
            copy = libc.syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0)
            if copy < 0:
                continue
            with socket.socket(fileno=copy) as duplicate:
                if duplicate.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                    continue          # the listener itself
                duplicate.shutdown(socket.SHUT_RDWR)
                cut += 1
    finally:
        os.close(pidfd)
    return cut


def _answers_while_links_recover(broker, clients: int) -> list[str]:
    """Answers to new clients right after the cut that are neither served nor "busy", or
    that carry a local path or a traceback in their remark."""
    bad = []
    for index in range(clients):
        with SyncRemotingClient() as client:
            client.connect(broker.broker_addr)
            for request in _probe_requests(index):
                with contextlib.suppress(TimeoutError, ConnectionError):
                    response = client.invoke(request, TIMEOUT_MS)
                    remark = response.remark or ""
                    if response.code not in (ResponseCode.SUCCESS, ResponseCode.SYSTEM_BUSY) \
                            or "/" in remark or "Traceback" in remark:
                        bad.append(f"code {request.code}: {response.code} {remark!r}")
    return bad


def test_workers_reconnect_when_their_internal_link_dies(broker):
    _assert_all_served(broker)
    log_before = len(broker._log_text())
    assert _shut_down_links(broker) == 2           # one link per remoting worker
    bad = _answers_while_links_recover(broker, 10)
    assert not bad, bad[:5]
    deadline = time.monotonic() + 10
    while broker._log_text()[log_before:].count("link to the metadata service re-established") \
            < 2:
        assert time.monotonic() < deadline, broker._log_text()[log_before:][-3000:]
        time.sleep(0.1)
    _assert_all_served(broker)
    assert broker.process.poll() is None
    assert "died" not in broker._log_text()[log_before:]
