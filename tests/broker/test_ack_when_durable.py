"""No send form is acknowledged SEND_OK before its last byte is flushed (SYNC_FLUSH) or on the
slave (SYNC_MASTER), and its stored bytes are counted as they are.

Method: real brokers (a standalone SYNC_FLUSH broker; a SYNC_MASTER master with one slave) and
a raw remoting client. Every send form (tests/send_forms.py: codes 10, 310 and 320 with one and
with three messages, JSON and ROCKETMQ headers, through the C fast path and the Python
handlers, and single 5.x timer sends parked on rmq_sys_wheel_timer by either path) is sent as
the first request after the flusher process (SYNC_FLUSH) or the whole slave (SYNC_MASTER) was
frozen with SIGSTOP, with everything before it flushed and replicated:
the only answer it may get is FLUSH_DISK_TIMEOUT (10) after syncFlushTimeout /
FLUSH_SLAVE_TIMEOUT (12) after slaveTimeout, as Java 4.9.8 answers
(tests/compat/test_ack_forms_java.py runs the SYNC_MASTER table against the Java broker).
After SIGCONT the same form must be answered SEND_OK. Then every message is counted back
from the consume queue files, and the bytes the broker's statistics counted for the topic
must be the bytes of the records in them.
"""
import os
import time

import psutil
import pytest

from pybroker._testbase.cluster import StandaloneBroker
from pybroker._testbase.ha_cluster import HACluster
from pybroker.protocol import bodies
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from pybroker.stats.region import StatsKeyKind, StatsRegion
from pybroker.store import layout, paths
from tests.ha_support import client_for, position, pull, records_of, send, wait_for
from tests.send_forms import (ALL_FORMS, TIMER_FORMS, answers_while_stopped, freeze,
                              process_tree, thaw)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TOPIC = "DurableForms"
WHEEL_TOPIC = "rmq_sys_wheel_timer"
FORMS = ALL_FORMS + TIMER_FORMS
TIMEOUT_MS = 600
# The timer and a loaded 2-core box: an answer may come this late after the timeout.
LATE_S = 3.0


def _worker_pid(supervisor_pid: int, name: str) -> int:
    for child in psutil.Process(supervisor_pid).children():
        if child.name() == f"pb-{name}":
            return child.pid
    raise AssertionError(f"no pb-{name} under {supervisor_pid}")


def _caught_up(store_dir: str, field: str):
    def check() -> bool:
        written = position(store_dir, "written_position")
        return written > 0 and position(store_dir, field) >= written
    return check


def _check(answers, timeout_code: int) -> None:
    wrong = [(answer.form.name, answer.code, round(answer.waited_s, 2), answer.code_after)
             for answer in answers
             if answer.code != timeout_code or answer.code_after != ResponseCode.SUCCESS
             or not TIMEOUT_MS / 1000 <= answer.waited_s < TIMEOUT_MS / 1000 + LATE_S]
    assert not wrong, f"(form, answer while stopped, waited s, answer after): {wrong}"


def _consume_queue_units(store_dir: str, topic: str) -> list[tuple[int, int]]:
    """(physical offset, size) of every unit of the topic's consume queues, read from the
    files (not through the broker)."""
    units = []
    root = os.path.join(store_dir, "consumequeue", topic)
    for queue in sorted(os.listdir(root)):
        for name in sorted(os.listdir(os.path.join(root, queue))):
            with open(os.path.join(root, queue, name), "rb") as file:
                data = file.read()
            unit = layout.CQ_STORE_UNIT_SIZE
            for at in range(0, len(data) - unit + 1, unit):
                offset = int.from_bytes(data[at:at + 8], "big")
                size = int.from_bytes(data[at + 8:at + 12], "big")
                if size == 0:
                    break
                units.append((offset, size))
    return units


def _counted_put(store_dir: str, topic: str) -> tuple[int, int]:
    """(messages, bytes) the broker's statistics counted as put into ``topic``."""
    region = StatsRegion.attach(paths.stats_region_path(store_dir))
    try:
        totals = region.snapshot().keys()[(int(StatsKeyKind.KEY_TOPIC_PUT), topic)]
        return totals.messages, totals.size_bytes
    finally:
        region.close()


def _expected_messages() -> int:
    # One warm-up, then each form twice (while stopped, and after).
    return 1 + 2 * sum(form.messages for form in ALL_FORMS)


def _expected_parked() -> int:
    # Each timer form twice, parked on the wheel topic (due in a day: still there).
    return 2 * len(TIMER_FORMS)


def test_sync_flush_holds_every_form_until_its_last_byte_is_flushed(tmp_path):
    overrides = {"flushDiskType": "SYNC_FLUSH", "syncFlushTimeout": str(TIMEOUT_MS)}
    with StandaloneBroker(tmp_path, overrides) as broker:
        with client_for(broker.broker_addr) as client:
            assert send(client, TOPIC, b"warm-up", 0, "warm-up").code == ResponseCode.SUCCESS
        flusher = [_worker_pid(broker.process.pid, "flusher")]
        answers = answers_while_stopped(
            broker.broker_addr, TOPIC, FORMS, lambda: freeze(flusher), lambda: thaw(flusher),
            _caught_up(broker.store_dir, "flushed_position"), TIMEOUT_MS)
        _check(answers, ResponseCode.FLUSH_DISK_TIMEOUT)
        _counts_match(broker.store_dir)


def _counts_match(store_dir: str) -> None:
    """Every message is in the consume queues (the held ones too: stored, not yet durable
    when answered), and the statistics counted the bytes of those records."""
    wait_for(lambda: position(store_dir, "dispatched_position")
             == position(store_dir, "written_position"), 30, "dispatch")
    units = _consume_queue_units(store_dir, TOPIC)
    assert len(units) == _expected_messages()
    assert _counted_put(store_dir, TOPIC) == (len(units), sum(size for _, size in units))
    parked = _consume_queue_units(store_dir, WHEEL_TOPIC)
    assert len(parked) == _expected_parked()
    assert _counted_put(store_dir, WHEEL_TOPIC) == (len(parked),
                                                    sum(size for _, size in parked))


def test_sync_master_holds_every_form_until_the_slave_has_its_last_byte(tmp_path):
    overrides = {"slaveTimeout": str(TIMEOUT_MS)}
    with HACluster(tmp_path, role="SYNC_MASTER", overrides=overrides) as cluster:
        master, slave = cluster.masters[0], cluster.slaves[0][0]
        with client_for(master.address) as client:
            assert send(client, TOPIC, b"warm-up", 0, "warm-up").code == ResponseCode.SUCCESS
        slave_pids = process_tree(slave.process.pid)
        answers = answers_while_stopped(
            master.address, TOPIC, FORMS, lambda: freeze(slave_pids),
            lambda: thaw(slave_pids),
            _caught_up(master.store_dir, "replicated_position"), TIMEOUT_MS)
        _check(answers, ResponseCode.FLUSH_SLAVE_TIMEOUT)
        _counts_match(master.store_dir)


def _runtime_info(client) -> dict[str, str]:
    answer = client.invoke(create_request(RequestCode.GET_BROKER_RUNTIME_INFO), 5000)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return bodies.decode_kv_table(answer.body)


def test_sync_flush_serves_consumers_only_flushed_messages(tmp_path):
    """Java 5.3.3's reput ends at the confirm offset, flushedWhere under SYNC_FLUSH: a send
    answered without waiting for the flush (WAIT=false) is written, but no consumer sees it
    until the flusher has flushed it; dispatchBehindBytes (confirm - reput) stays 0 meanwhile,
    as Java's ReputMessageService.behind. (Before, it was pulled at once: checked once.)"""
    overrides = {"flushDiskType": "SYNC_FLUSH", "syncFlushTimeout": str(TIMEOUT_MS)}
    with StandaloneBroker(tmp_path, overrides) as broker, \
            client_for(broker.broker_addr) as client:
        store_dir = broker.store_dir
        assert send(client, TOPIC, b"flushed", 0, "first").code == ResponseCode.SUCCESS
        wait_for(lambda: pull(client, TOPIC, 0, 0).code == ResponseCode.SUCCESS, 30,
                 "the flushed message pulled")
        flusher = [_worker_pid(broker.process.pid, "flusher")]
        freeze(flusher)
        try:
            assert send(client, TOPIC, b"not flushed", 0, "second",
                        wait=False).code == ResponseCode.SUCCESS
            written = position(store_dir, "written_position")
            assert position(store_dir, "flushed_position") < written
            # Time enough for a dispatch (the first message took milliseconds).
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                assert pull(client, TOPIC, 0, 1).code != ResponseCode.SUCCESS
                assert position(store_dir, "dispatched_position") < written
                time.sleep(0.1)
            assert _runtime_info(client)["dispatchBehindBytes"] == "0"
        finally:
            thaw(flusher)
        wait_for(lambda: pull(client, TOPIC, 0, 1).code == ResponseCode.SUCCESS, 30,
                 "the message pulled once flushed")
        [message] = records_of(pull(client, TOPIC, 0, 1).body)
        assert bytes(message.body) == b"not flushed"
