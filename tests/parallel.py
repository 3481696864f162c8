# A parallel run (pytest-xdist): a shared run directory, tests run alone, fixed ports, file order.
"""A pytest plugin, registered by tests/conftest.py (and by ``-p tests.parallel`` in the test that
checks it): README's test command runs the suite on pytest-xdist workers, whole files per worker
(``--dist loadfile``: a module-scoped Java broker is started once).

- **Run directory.** The controller makes one temp directory per run and gives its path to every
  worker (``pytest_configure_node``); the locks below and tests/peers.py's one-time install live
  there. Removed when the run ends.
- **``@pytest.mark.serial``: runs alone.** For a test whose verdict depends on a quiet machine
  (it measures time or counts wake-ups): while it runs, no other test of the run does. Every
  other test holds a shared lock on the run directory's ``tests.lock`` from its setup to its
  teardown; a serial test takes it exclusively. A ``turnstile.lock`` keeps a waiting serial test
  from being starved: while it waits, no other test starts. The waits happen before
  pytest-timeout's clock starts, so a test's timeout is its own time. Serial files are scheduled
  last, so they drain the workers once, at the end. Outside xdist every test runs alone anyway.
- **``@pytest.mark.fixed_port(9876, ...)``: a test that must bind a fixed port** (Apache's timer
  benchmark reads the NameServer from localhost:9876 only) holds an exclusive lock per port,
  in the machine's temp directory, so two such tests never overlap, in this run or in another
  pytest run on the machine. free_port (pybroker/_testbase/ports.py) never hands out such ports.
- **File order.** Under xdist the files are handed to workers in collection order (the
  scheduler's reordering by test count is turned off), so the order is the schedule: the most
  expensive files first (crash, peer, broker, dataplane, unit by their markers; ``slow`` first
  within each), so that the longest files do not start last, and serial files at the end.

Every lock is a ``flock`` on a file: released by the kernel when the process holding it dies.
A wait for one is bounded (``LOCK_WAIT_S``): a lock nobody will release - a worker that still
holds its own shared lock through a descriptor a test leaked waits for itself - fails the test
at setup, naming the lock and the pid(s) holding it, instead of hanging the run.
"""
import contextlib
import fcntl
import os
import pathlib
import shutil
import tempfile
import time

import pytest

RUN_DIR_KEY = "pybroker_run_dir"
FIXED_PORT_LOCKS = pathlib.Path(tempfile.gettempdir()) / "pybroker-fixed-ports"
# Cost markers (tests/conftest.py), most expensive first: files are scheduled in this order.
COST_ORDER = ("crash", "peer", "broker", "dataplane")
_RUN_DIR = pytest.StashKey[str]()
# How long a test waits for one lock. Every holder is a test bounded by its own timeout (900 s
# the longest), so a legitimate wait is shorter (a serial test waits for the running tests to
# end); past this, the lock is one nobody will release.
LOCK_WAIT_S = 1200.0
# Why a test could not take its locks: it fails at setup with this.
LOCK_FAILURE = pytest.StashKey[str]()


class LockWaitExpired(Exception):
    """A lock was not granted within its wait; the message names it and its holders."""


def is_worker(config) -> bool:
    """True in an xdist worker process."""
    return hasattr(config, "workerinput")


def run_dir(config) -> pathlib.Path | None:
    """The directory every worker of this run shares; None outside xdist."""
    if not is_worker(config):
        return None
    return pathlib.Path(config.workerinput[RUN_DIR_KEY])


def lock_holders(path: pathlib.Path) -> list[int]:
    """The pids /proc/locks names as holding a lock on ``path`` (the process that took each
    flock; waiters left out); empty where it cannot tell."""
    try:
        status = os.stat(path)
        with open("/proc/locks", encoding="ascii") as table:
            lines = table.read().splitlines()
    except OSError:
        return []
    # "3: FLOCK  ADVISORY  WRITE 17431 fe:00:9986221 0 EOF"; a waiter's line has "->" second.
    key = f"{os.major(status.st_dev):02x}:{os.minor(status.st_dev):02x}:{status.st_ino}"
    return sorted({int(fields[4]) for fields in map(str.split, lines)
                   if len(fields) > 5 and fields[1] != "->" and fields[5] == key})


def _flock(descriptor: int, path: pathlib.Path, exclusive: bool, wait_s: float) -> None:
    """``flock`` shared or exclusive, polled until granted; LockWaitExpired after wait_s."""
    operation = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    deadline = time.monotonic() + wait_s
    pause = 0.01
    while True:
        try:
            fcntl.flock(descriptor, operation)
            return
        except BlockingIOError:
            pass
        left = deadline - time.monotonic()
        if left <= 0:
            holders = lock_holders(path)
            own = " (this process: a descriptor it still holds)" if os.getpid() in holders \
                else ""
            raise LockWaitExpired(
                f"waited {wait_s:g} s for the {'exclusive' if exclusive else 'shared'} lock on "
                f"{path}; held by pid(s) {', '.join(map(str, holders)) or 'unknown'}{own}")
        time.sleep(min(pause, left))
        pause = min(2 * pause, 0.5)


@contextlib.contextmanager
def locked(path: pathlib.Path, exclusive: bool, wait_s: float = LOCK_WAIT_S):
    """Hold ``flock`` on ``path`` (created if missing), shared or exclusive, until the block
    ends. Waits until granted, at most ``wait_s`` (then LockWaitExpired)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        _flock(descriptor, path, exclusive, wait_s)
        yield
    finally:
        os.close(descriptor)            # releases the lock


@contextlib.contextmanager
def alone(directory: pathlib.Path, wait_s: float = LOCK_WAIT_S):
    """A serial test's locks: no other test of the run runs while they are held."""
    # The turnstile first: tests arriving from now on wait at it, those running finish.
    with locked(directory / "turnstile.lock", True, wait_s), \
            locked(directory / "tests.lock", True, wait_s):
        yield


@contextlib.contextmanager
def among_others(directory: pathlib.Path, wait_s: float = LOCK_WAIT_S):
    """Any other test's locks: it runs while no serial test does."""
    path = directory / "tests.lock"
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        with locked(directory / "turnstile.lock", False, wait_s):  # passes unless one waits
            _flock(descriptor, path, False, wait_s)
        yield
    finally:
        os.close(descriptor)


def fixed_ports(item) -> list[int]:
    """The ports of the item's ``fixed_port`` markers, sorted (the order locks are taken in)."""
    ports = {int(port) for marker in item.iter_markers("fixed_port") for port in marker.args}
    return sorted(ports)


def pytest_configure(config):
    if config.pluginmanager.hasplugin("xdist") and not is_worker(config):
        # The file order of pytest_collection_modifyitems below is the schedule.
        config.option.loadscopereorder = False


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """Controller: the run directory, made once, handed to each worker."""
    config = node.config
    if _RUN_DIR not in config.stash:
        config.stash[_RUN_DIR] = tempfile.mkdtemp(prefix="pybroker-run-")
    node.workerinput[RUN_DIR_KEY] = config.stash[_RUN_DIR]


def pytest_unconfigure(config):
    if _RUN_DIR in config.stash:
        shutil.rmtree(config.stash[_RUN_DIR], ignore_errors=True)


def _file_rank(items) -> tuple[int, int, int]:
    serial = any(item.get_closest_marker("serial") for item in items)
    cost = min((COST_ORDER.index(name) for item in items for name in COST_ORDER
                if item.get_closest_marker(name)), default=len(COST_ORDER))
    slow = any(item.get_closest_marker("slow") for item in items)
    return int(serial), cost, int(not slow)


@pytest.hookimpl(trylast=True)      # after tests/conftest.py has given the cost markers
def pytest_collection_modifyitems(config, items):
    if not is_worker(config):
        return
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    ranked = sorted(files.values(), key=_file_rank)      # stable: collection order within a rank
    items[:] = [item for file_items in ranked for item in file_items]


@pytest.hookimpl(wrapper=True, tryfirst=True)      # outside pytest-timeout's clock
def pytest_runtest_protocol(item, nextitem):
    with contextlib.ExitStack() as held:
        try:
            for port in fixed_ports(item):
                held.enter_context(locked(FIXED_PORT_LOCKS / f"{port}.lock", True))
            directory = run_dir(item.config)
            if directory is not None:
                serial = item.get_closest_marker("serial") is not None
                held.enter_context(alone(directory) if serial else among_others(directory))
        except LockWaitExpired as expired:
            held.close()                # what was granted goes back; the test fails at setup
            item.stash[LOCK_FAILURE] = str(expired)
        return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A test whose locks were not granted fails here, saying which lock and whose."""
    failure = item.stash.get(LOCK_FAILURE, None)
    if failure is not None:
        pytest.fail(failure, pytrace=False)
