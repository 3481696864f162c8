"""tests/parallel.py's lock waits are bounded: a worker that still holds its own shared lock on
the run's tests.lock (a descriptor a test leaked, as the one that hung CI at 96 %) fails its
serial test, naming the lock and the pid holding it, instead of waiting for itself for good.

Method: in this process, hold a flock on a run directory's lock file through a descriptor of
our own (as the leaked one did), then take a test's locks through tests/parallel.py with a
short wait, in a thread joined with a bound, so that an unbounded wait (the old code) fails
this test instead of hanging it; and check that a lock released during the wait is granted,
and that an expired wait fails the test at setup with its message.
"""
import fcntl
import os
import threading
import types

import pytest

from tests import parallel

WAIT_S = 0.3
JOIN_S = 30.0       # far above WAIT_S: past it the wait hung


def _outcome(take) -> object:
    """What ``take()`` ended with - "granted" or its exception - taken in a thread."""
    outcome: list[object] = []

    def run():
        try:
            with take():
                outcome.append("granted")
        except Exception as error:  # noqa: BLE001 - the test looks at what it was
            outcome.append(error)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(JOIN_S)
    assert not thread.is_alive(), f"the lock wait hung (still waiting after {JOIN_S:g} s)"
    return outcome[0]


def _hold(path, operation) -> int:
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(descriptor, operation)
    return descriptor


def test_a_serial_test_behind_its_own_shared_lock_fails_naming_lock_and_holder(tmp_path):
    leaked = _hold(tmp_path / "tests.lock", fcntl.LOCK_SH)
    try:
        outcome = _outcome(lambda: parallel.alone(tmp_path, wait_s=WAIT_S))
    finally:
        os.close(leaked)
    assert isinstance(outcome, parallel.LockWaitExpired), outcome
    message = str(outcome)
    assert f"exclusive lock on {tmp_path / 'tests.lock'}" in message
    assert f"held by pid(s) {os.getpid()} (this process" in message
    # The turnstile it held while waiting went back: the next test passes it.
    assert _outcome(lambda: parallel.among_others(tmp_path, wait_s=WAIT_S)) == "granted"


def test_a_test_behind_a_serial_one_that_never_ends_fails_too(tmp_path):
    serial = _hold(tmp_path / "tests.lock", fcntl.LOCK_EX)
    try:
        outcome = _outcome(lambda: parallel.among_others(tmp_path, wait_s=WAIT_S))
        assert isinstance(outcome, parallel.LockWaitExpired), outcome
        assert f"shared lock on {tmp_path / 'tests.lock'}" in str(outcome)
        assert parallel.lock_holders(tmp_path / "tests.lock") == [os.getpid()]
    finally:
        os.close(serial)


def test_a_lock_released_during_the_wait_is_granted(tmp_path):
    holder = _hold(tmp_path / "tests.lock", fcntl.LOCK_SH)
    threading.Timer(0.2, os.close, (holder,)).start()
    assert _outcome(lambda: parallel.alone(tmp_path, wait_s=10.0)) == "granted"
    assert parallel.lock_holders(tmp_path / "tests.lock") == []


def test_an_expired_wait_fails_the_test_at_setup():
    item = types.SimpleNamespace(stash=pytest.Stash())
    parallel.pytest_runtest_setup(item)                 # nothing expired: nothing happens
    item.stash[parallel.LOCK_FAILURE] = "waited 0.3 s for the exclusive lock on x/tests.lock"
    with pytest.raises(pytest.fail.Exception, match="exclusive lock on x/tests.lock"):
        parallel.pytest_runtest_setup(item)
