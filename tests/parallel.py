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
"""
import contextlib
import fcntl
import os
import pathlib
import shutil
import tempfile

import pytest

RUN_DIR_KEY = "pybroker_run_dir"
FIXED_PORT_LOCKS = pathlib.Path(tempfile.gettempdir()) / "pybroker-fixed-ports"
# Cost markers (tests/conftest.py), most expensive first: files are scheduled in this order.
COST_ORDER = ("crash", "peer", "broker", "dataplane")
_RUN_DIR = pytest.StashKey[str]()


def is_worker(config) -> bool:
    """True in an xdist worker process."""
    return hasattr(config, "workerinput")


def run_dir(config) -> pathlib.Path | None:
    """The directory every worker of this run shares; None outside xdist."""
    if not is_worker(config):
        return None
    return pathlib.Path(config.workerinput[RUN_DIR_KEY])


@contextlib.contextmanager
def locked(path: pathlib.Path, exclusive: bool):
    """Hold ``flock`` on ``path`` (created if missing), shared or exclusive, until the block
    ends. Blocks until granted: every holder is a test bounded by its own timeout."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(descriptor)            # releases the lock


@contextlib.contextmanager
def _alone(directory: pathlib.Path):
    # The turnstile first: tests arriving from now on wait at it, those running finish.
    with locked(directory / "turnstile.lock", True), locked(directory / "tests.lock", True):
        yield


@contextlib.contextmanager
def _among_others(directory: pathlib.Path):
    descriptor = os.open(directory / "tests.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        with locked(directory / "turnstile.lock", False):     # passes unless one waits alone
            fcntl.flock(descriptor, fcntl.LOCK_SH)
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
        for port in fixed_ports(item):
            held.enter_context(locked(FIXED_PORT_LOCKS / f"{port}.lock", True))
        directory = run_dir(item.config)
        if directory is not None:
            serial = item.get_closest_marker("serial") is not None
            held.enter_context(_alone(directory) if serial else _among_others(directory))
        return (yield)
