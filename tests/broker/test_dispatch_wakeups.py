# The dispatcher wakes only the processes that wait for it: workers holding long polls.
"""A remoting worker asks the dispatcher for wake-ups only while it holds a pull, and a held
pull is still answered as soon as its message is dispatched; under load the dispatcher paces
itself (a pass per millisecond, as Java's reput) and an idle one sleeps without a timer.

Method: a real `pybroker standalone`; a raw PULL_MESSAGE with the SUSPEND flag on an empty queue
is held by the broker (a 30 s suspend). While it is held, the control block's waiter mask of
``dispatched_position`` (the real mapped file under the store) must carry a remoting worker's
bit; a send to that queue must answer the held pull with the message long before the worker's
5 s safety sweep could have. Afterwards, with nothing held and sends going on, no remoting
worker or supervisor bit may be left in the mask (their wake-up per dispatch batch is what this
change removed). Then several client threads send as fast as they can: the dispatcher must
dispatch everything written in at most about one batch per millisecond of the load, and once
the load stops it must go back to sleeping on its flag (a few timer wake-ups and the flushes'
writeback waits, no measurable CPU in two idle seconds, where pacing on would be ~2,000
wake-ups).
"""
import contextlib
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
from pybroker.store import paths
from pybroker.store.control_block import APPENDER, DISPATCHER, ControlBlock

pytestmark = [pytest.mark.slow]

TOPIC = "DispatchWakeupTopic"
TIMEOUT_MS = 40_000
SUSPEND_MS = 30_000
# Slots below this are remoting workers and the supervisor; the data-plane workers use the top
# slots of the mask (pybroker/proc/wake.py).
CLIENT_SLOTS_MASK = (1 << 16) - 1
WAIT_S = 20.0
PROMPT_S = 4.0        # below the worker's 5 s sweep of held pulls


@contextlib.contextmanager
def _client(broker):
    with SyncRemotingClient() as client:
        client.connect(broker.broker_addr)
        yield client


def _send(client, body: bytes):
    fields = {"a": "wakeup_producer", "b": TOPIC, "c": "TBW102", "d": "4", "e": "0", "f": "0",
              "g": str(int(time.time() * 1000)), "h": "0",
              "i": props.encode_properties({"WAIT": "true"}), "j": "0", "k": "false",
              "m": "false"}
    answer = client.invoke(create_request(RequestCode.SEND_MESSAGE_V2, fields, body),
                           TIMEOUT_MS)
    assert answer.code == ResponseCode.SUCCESS, (answer.code, answer.remark)
    return int(answer.ext_fields["queueOffset"])


def _pull(client, queue_offset: int):
    fields = {"consumerGroup": "wakeup_group", "topic": TOPIC, "queueId": "0",
              "queueOffset": str(queue_offset), "maxMsgNums": "32", "sysFlag": "6",
              "commitOffset": "0", "suspendTimeoutMillis": str(SUSPEND_MS),
              "subscription": "*", "subVersion": "0", "expressionType": "TAG"}
    return client.invoke(create_request(RequestCode.PULL_MESSAGE, fields), TIMEOUT_MS)


def _wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {WAIT_S} s waiting for {what}")
        time.sleep(0.01)


def test_only_a_worker_holding_a_pull_waits_for_dispatch(tmp_path):
    with StandaloneBroker(tmp_path) as broker, _client(broker) as sender, \
            _client(broker) as puller:
        next_offset = _send(sender, b"first") + 1       # creates the topic; queue 0 has one
        control = ControlBlock(paths.control_block_path(broker.store_dir), create=False)
        try:
            # The pull below must find queue 0 holding "first" (then it waits for offset 1);
            # sent a moment before dispatch it would find the queue empty and not be held.
            _wait_for(lambda: control.dispatched_position >= control.written_position,
                      "the first message dispatched")
            answers = []
            held = threading.Thread(target=lambda: answers.append(_pull(puller, next_offset)))
            held.start()
            _wait_for(lambda: control.waiters("dispatched_position") & CLIENT_SLOTS_MASK,
                      "a remoting worker's waiter bit on dispatched_position")
            sent_at = time.monotonic()
            assert _send(sender, b"second") == next_offset
            held.join(WAIT_S)
            answered_s = time.monotonic() - sent_at
            assert not held.is_alive(), "the held pull was never answered"
            answer = answers[0]
            assert answer.code == ResponseCode.SUCCESS, (answer.code, answer.remark)
            assert bytes(record.decode(bytes(answer.body), 0).body) == b"second"
            assert answered_s < PROMPT_S, f"held pull answered {answered_s:.2f} s after send"
            # Nothing held now: sends go on, and no client-side process asks for wake-ups.
            for index in range(20):
                _send(sender, b"more-%d" % index)
            _wait_for(lambda: control.dispatched_position >= control.written_position,
                      "dispatch to catch up")
            # A worker drops its bit on its loop turn after the held pull was answered, which
            # may come after dispatch caught up: wait for it to go (it must not stay).
            _wait_for(lambda: control.waiters("dispatched_position") & CLIENT_SLOTS_MASK == 0,
                      "no remoting worker or supervisor bit left on dispatched_position")
        finally:
            control.close()


LOAD_THREADS = 6
LOAD_S = 3.0
IDLE_S = 2.0
# Asleep: the 1 s idle re-check, the consume-queue flush timer and cleanup timer, and the
# flushes' msync of the pages the load left dirty, each of which blocks for its writeback as
# often as the disk makes it (a voluntary switch each: 10 in a full CI run with four workers
# writing). Pacing left on would be ~2,000 (one wait per millisecond), a wake-up per appender
# drain more still: the bound tells those apart with a wide margin on a busy disk.
IDLE_SWITCHES_MAX = 40
IDLE_CPU_S_MAX = 0.05


def _dispatcher(broker) -> psutil.Process:
    for child in psutil.Process(broker.process.pid).children():
        if child.name() == "pb-dispatcher":
            return child
    raise AssertionError("no pb-dispatcher process under the broker")


def test_dispatcher_paces_under_load_and_sleeps_when_idle(tmp_path):
    with StandaloneBroker(tmp_path) as broker, _client(broker) as first:
        _send(first, b"first")                          # creates the topic
        control = ControlBlock(paths.control_block_path(broker.store_dir), create=False)
        try:
            dispatcher = _dispatcher(broker)
            drains, batches = control.worker(APPENDER.slot), control.worker(DISPATCHER.slot)
            drains_before, batches_before = drains.batches, batches.batches
            errors: list[BaseException] = []
            stop_at = time.monotonic() + LOAD_S

            def load() -> None:
                try:
                    with _client(broker) as client:
                        while time.monotonic() < stop_at:
                            _send(client, b"load")
                except BaseException as error:   # reported by the test below
                    errors.append(error)
            started = time.monotonic()
            threads = [threading.Thread(target=load) for _ in range(LOAD_THREADS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(LOAD_S + WAIT_S)
            elapsed_ms = (time.monotonic() - started) * 1000
            assert not errors, errors
            assert not any(thread.is_alive() for thread in threads), "a load thread hung"
            _wait_for(lambda: control.dispatched_position >= control.written_position,
                      "dispatch to catch up with the load")
            dispatched_batches = batches.batches - batches_before
            appender_drains = drains.batches - drains_before
            assert appender_drains > 0
            # One pass per millisecond while paced, plus one per start of pacing.
            assert dispatched_batches <= elapsed_ms + 50, \
                (dispatched_batches, appender_drains, elapsed_ms)
            time.sleep(0.2)             # the last paced wait finds nothing: pacing ends
            cpu, switches = dispatcher.cpu_times(), dispatcher.num_ctx_switches()
            time.sleep(IDLE_S)
            cpu_after, switches_after = dispatcher.cpu_times(), dispatcher.num_ctx_switches()
            idle_switches = switches_after.voluntary - switches.voluntary
            idle_cpu_s = (cpu_after.user + cpu_after.system) - (cpu.user + cpu.system)
            assert idle_switches <= IDLE_SWITCHES_MAX, (idle_switches, idle_cpu_s)
            assert idle_cpu_s <= IDLE_CPU_S_MAX, idle_cpu_s
            # A lone send after the idle seconds is dispatched too (the flag's wake-up).
            _send(first, b"lone")
            _wait_for(lambda: control.dispatched_position >= control.written_position,
                      "the lone send dispatched")
        finally:
            control.close()
