"""A forked child takes the supervisor's stop request however early it comes.

Method: real forks through fork_child. The supervisor may stop a generation right after "boot
success", while a worker is still starting (CI caught the ha worker killed by SIGUSR1's default
action, "worker ha exited: killed by signal 10"): the request must wait until the child's
handler exists, then be delivered to it. Group signals (SIGTERM, SIGINT) stay ignored.
"""
import os
import signal
import time

import pytest

from pybroker.proc.children import STOP_SIGNAL, accept_stop, fork_child

HANDLER_LATE_S = 0.3
WAIT_S = 5.0
NOT_STOPPED = 3

pytestmark = [pytest.mark.dataplane]


def _late_handler_main() -> int:
    time.sleep(HANDLER_LATE_S)            # the stop request arrives in this window
    received = []
    signal.signal(STOP_SIGNAL, lambda number, frame: received.append(number))
    accept_stop()
    deadline = time.monotonic() + WAIT_S
    while not received and time.monotonic() < deadline:
        time.sleep(0.01)
    return 0 if received == [STOP_SIGNAL] else NOT_STOPPED


def _exit_of(pid: int) -> tuple[str, int]:
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return "signal", os.WTERMSIG(status)
    return "exit", os.WEXITSTATUS(status)


def test_a_stop_sent_before_the_handler_is_delivered_to_it():
    pid = fork_child("early-stop", _late_handler_main)
    os.kill(pid, STOP_SIGNAL)
    assert _exit_of(pid) == ("exit", 0)


def test_group_signals_are_ignored_and_the_stop_still_arrives():
    pid = fork_child("group-signals", _late_handler_main)
    os.kill(pid, signal.SIGTERM)
    os.kill(pid, signal.SIGINT)
    time.sleep(HANDLER_LATE_S / 3)
    os.kill(pid, STOP_SIGNAL)
    assert _exit_of(pid) == ("exit", 0)


def test_no_stop_no_exit_by_signal():
    pid = fork_child("no-stop", lambda: 0 if accept_stop() is None else 1)
    assert _exit_of(pid) == ("exit", 0)
