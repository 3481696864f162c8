"""A forked child takes the supervisor's stop request however early it comes.

Method: real forks through fork_child. The supervisor may stop a generation right after "boot
success", while a worker is still starting (CI caught the ha worker killed by SIGUSR1's default
action, "worker ha exited: killed by signal 10"): the request must wait until the child's
handler exists, then be delivered to it. Group signals (SIGTERM, SIGINT) stay ignored. And a
child's garbage collector leaves the pages of the parent's objects shared (measured in the
child's /proc/self/smaps_rollup).
"""
import gc
import os
import signal
import time

import pytest

from pybroker.proc.children import STOP_SIGNAL, accept_stop, fork_child, thaw

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


# --- memory: the parent's objects stay shared with a child that collects its garbage --------
PARENT_OBJECTS = 300_000             # small lists: some 20 MiB of objects the collector tracks
COLLECTED_COPY_KIB_MAX = 4 * 1024     # a child's full collection may copy (all of them: >20 MiB)


def _private_dirty_kib() -> int:
    with open("/proc/self/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Private_Dirty:"):
                return int(line.split()[1])
    raise AssertionError("no Private_Dirty in /proc/self/smaps_rollup")


def test_a_childs_full_collection_leaves_the_parents_objects_shared():
    """The pages of objects made before the fork are not copied into a child by its garbage
    collector (fork_child freezes them): a full collection in the child copies less than a
    fifth of them (without the freeze it writes every object's header, every page)."""
    kept = [[index] for index in range(PARENT_OBJECTS)]
    read, write = os.pipe()

    def child_main() -> int:
        before = _private_dirty_kib()
        gc.collect()
        os.write(write, str(_private_dirty_kib() - before).encode())
        return 0
    try:
        pid = fork_child("gc-freeze", child_main)
        assert _exit_of(pid) == ("exit", 0)
        copied_kib = int(os.read(read, 64))
    finally:
        thaw()
        os.close(read)
        os.close(write)
    assert len(kept) == PARENT_OBJECTS
    assert copied_kib < COLLECTED_COPY_KIB_MAX, f"the child's collection copied {copied_kib} KiB"


def test_thaw_gives_the_frozen_objects_back_to_the_collector():
    pid = fork_child("thaw", lambda: 0)
    assert _exit_of(pid) == ("exit", 0)
    assert gc.get_freeze_count() > 0
    thaw()
    assert gc.get_freeze_count() == 0
