"""A stalled broker worker answers "busy" like Java and is restarted by the watchdog.

Method: a real `pybroker standalone`. The appender is stopped with SIGSTOP (as a stuck disk or
a debugger would stop it) for 15 s while a client keeps sending: every send must get an answer
within about waitTimeMillsInSendQueue (200 ms) plus scheduling slack - SYSTEM_BUSY with Java's
"[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: ..."
remark - and none of those messages may ever be stored. Within workerHangTimeoutMillis (10 s)
plus a second the supervisor's watchdog must log the hang, kill the appender and start a new
generation that serves again; no acknowledged message is lost. A second case stops the
appender in the middle of a drain (found through the control block's busy_since_ms) so that
new sends are refused "[PC_SYNCHRONIZED]" after osPageCacheBusyTimeOutMills (1 s); a third
stops a remoting worker, which the watchdog must restart too.
"""
import os
import signal
import threading
import time

import psutil
import pytest

from pybroker._fast import record
from pybroker._testbase.cluster import StandaloneBroker
from pybroker.protocol import properties as props
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.remoting.client import SyncRemotingClient
from pybroker.store.control_block import APPENDER, ControlBlock
from pybroker.store import paths

# serial: the verdict is a time (busy answers within 1.5 s of a stopped appender); in a parallel
# run it runs alone (tests/parallel.py).
pytestmark = [pytest.mark.slow, pytest.mark.crash, pytest.mark.serial, pytest.mark.timeout(180)]

TOPIC = "StallTopic"
TIMEOUT_MS = 5000
STALL_S = 15.0
# The watchdog's 10 s, its 1 s check period, the appender's 1 s idle sleep, and slack for a
# loaded 2-core machine.
RESTART_WITHIN_S = 16.0
BUSY_ANSWER_MAX_S = 1.5


def _send(client, body: bytes):
    properties = props.encode_properties({"WAIT": "true", "UNIQ_KEY": body.hex()[:32]})
    ext = {"a": "stall_producer", "b": TOPIC, "c": "TBW102", "d": "1", "e": "0", "f": "0",
           "g": "1700000000000", "h": "0", "i": properties, "j": "0", "k": "false", "m": "false"}
    return client.invoke(create_request(RequestCode.SEND_MESSAGE_V2, ext, body), TIMEOUT_MS)


def _worker(broker, name: str) -> psutil.Process:
    for child in psutil.Process(broker.process.pid).children():
        if child.name() == f"pb-{name}":
            return child
    raise AssertionError(f"no pb-{name}")


def _stored_bodies(broker) -> list[bytes]:
    found, offset = [], 0
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        while True:
            ext = {"consumerGroup": "stall_consumer", "topic": TOPIC, "queueId": "0",
                   "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": "4",
                   "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
                   "subVersion": "0", "expressionType": "TAG"}
            response = client.invoke(create_request(RequestCode.PULL_MESSAGE, ext), TIMEOUT_MS)
            if response.code != ResponseCode.SUCCESS:
                return found
            data, position = bytes(response.body), 0
            while position < len(data):
                message = record.decode(data, position)
                found.append(bytes(message.body))
                position += message.total_size
            offset = int(response.ext_fields["nextBeginOffset"])


def _wait_for_log(broker, text: str, after: int, timeout_s: float) -> float:
    started = time.monotonic()
    while text not in broker._log_text()[after:]:
        assert time.monotonic() - started < timeout_s, broker._log_text()[after:][-3000:]
        time.sleep(0.1)
    return time.monotonic() - started


def _send_until_served(broker, body: bytes, deadline_s: float = 30.0):
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            with SyncRemotingClient() as client:
                client.connect(broker.broker_addr)
                response = _send(client, body)
            if response.code == ResponseCode.SUCCESS:
                return response
        except (OSError, TimeoutError):
            pass
        assert time.monotonic() < deadline, "the broker did not serve again"
        time.sleep(0.2)


def test_stopped_appender_answers_busy_then_the_watchdog_restarts_it(tmp_path):
    with StandaloneBroker(tmp_path) as broker:
        acked = []
        with SyncRemotingClient() as client:
            client.connect(broker.broker_addr)
            for index in range(30):
                body = b"before-%d" % index
                assert _send(client, body).code == ResponseCode.SUCCESS
                acked.append(body)
        appender = _worker(broker, "appender")
        log_offset = len(broker._log_text())
        os.kill(appender.pid, signal.SIGSTOP)
        refused, answers = [], []
        try:
            with SyncRemotingClient() as client:
                client.connect(broker.broker_addr)
                for index in range(5):
                    body = b"busy-%d" % index
                    started = time.monotonic()
                    response = _send(client, body)
                    answers.append(time.monotonic() - started)
                    assert response.code == ResponseCode.SYSTEM_BUSY, \
                        (response.code, response.remark)
                    assert response.remark.startswith(
                        "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, "
                        "period in queue: "), response.remark
                    refused.append(body)
            restart_s = _wait_for_log(broker, "made no progress", log_offset, RESTART_WITHIN_S)
            _wait_for_log(broker, "boot success", log_offset, 30)
        finally:
            try:
                os.kill(appender.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        assert max(answers) < BUSY_ANSWER_MAX_S, answers
        assert "worker appender" in broker._log_text()[log_offset:]
        acked.append(b"after")
        _send_until_served(broker, b"after")
        stored = _stored_bodies(broker)
        assert [body for body in stored if body in acked] == acked      # nothing acked lost
        assert not set(refused) & set(stored), "a message answered busy was stored"
        print(f"busy answers {max(answers):.3f} s max; "  # noqa: T201
              f"watchdog after {restart_s:.1f} s")


class _Load:
    """Threads sending continuously (answers of any code), until stopped."""

    def __init__(self, broker, threads: int = 4):
        self.broker = broker
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(n,), daemon=True)
                        for n in range(threads)]

    def _run(self, number: int) -> None:
        index = 0
        while not self.stop.is_set():
            try:
                with SyncRemotingClient() as client:
                    client.connect(self.broker.broker_addr)
                    while not self.stop.is_set():
                        _send(client, b"load-%d-%d" % (number, index) + bytes(2000))
                        index += 1
            except (OSError, TimeoutError):
                self.stop.wait(0.1)

    def __enter__(self) -> "_Load":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(10)


def _stop_mid_drain(broker, appender, control: ControlBlock, attempts: int = 500) -> bool:
    """SIGSTOP the appender while it is inside a drain (busy_since_ms set)."""
    counters = control.worker(APPENDER.slot)
    for _ in range(attempts):
        while not counters.busy_since_ms:
            pass
        os.kill(appender.pid, signal.SIGSTOP)
        time.sleep(0.05)
        if counters.busy_since_ms:
            return True
        os.kill(appender.pid, signal.SIGCONT)
        time.sleep(0.01)
    return False


def test_put_while_the_append_is_stuck_is_refused_pc_synchronized(tmp_path):
    with StandaloneBroker(tmp_path, {"workerHangTimeoutMillis": "60000"}) as broker:
        control = ControlBlock(paths.control_block_path(broker.store_dir), create=False)
        appender = _worker(broker, "appender")
        try:
            with _Load(broker):
                time.sleep(1.0)
                assert _stop_mid_drain(broker, appender, control), "never caught a drain"
            time.sleep(1.2)           # past osPageCacheBusyTimeOutMills
            with SyncRemotingClient() as client:
                client.connect(broker.broker_addr)
                started = time.monotonic()
                response = _send(client, b"pc-busy")
                took = time.monotonic() - started
            assert (response.code, response.remark) == (
                ResponseCode.SYSTEM_ERROR,
                "[PC_SYNCHRONIZED]broker busy, start flow control for a while"), response.remark
            assert took < BUSY_ANSWER_MAX_S
        finally:
            os.kill(appender.pid, signal.SIGCONT)
            control.close()
        assert "pc-busy".encode() not in _stored_bodies(broker)


def test_stopped_remoting_worker_is_restarted(tmp_path):
    with StandaloneBroker(tmp_path) as broker:
        worker = _worker(broker, "remoting-0")
        log_offset = len(broker._log_text())
        os.kill(worker.pid, signal.SIGSTOP)
        try:
            _wait_for_log(broker, "worker remoting-0", log_offset, RESTART_WITHIN_S)
            _wait_for_log(broker, "boot success", log_offset, 30)
        finally:
            try:
                os.kill(worker.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        assert "made no progress" in broker._log_text()[log_offset:]
        _send_until_served(broker, b"served-again")
