# Test-session setup shared by every suite.
"""Shared fixtures: a seeded random generator whose repr is its seed, the compat-peer switch and
the cost markers.

Peer availability: peer tests skip with a reason when a Java/Go peer is missing, unless
``PYBROKER_REQUIRE_PEERS=1`` (set by ``.ci/run``) turns those skips into failures.

Cost markers (registered in pyproject.toml, tests/README.md says which to run): every test gets
its directory's marker at collection (COST_BY_DIRECTORY); a test of tests/unit marked
``dataplane`` (it starts processes of its own) is not ``unit``; ``compat`` (the old name) adds
``peer``. A ``unit`` test that forks, spawns or runs a Python child other than a source checker
fails, so ``pytest tests/unit -m unit`` stays in one process.

Parallel runs (pytest-xdist, README's test command): tests/parallel.py, registered here, shares
one run directory between the workers, runs ``serial`` tests alone, serialises ``fixed_port``
tests and orders the files; tests/peers.py installs the peers once per run.
"""
import multiprocessing.util
import os
import pathlib
import random
import subprocess
import sys

import pytest

TESTS = pathlib.Path(__file__).resolve().parent
COST_BY_DIRECTORY = {"unit": "unit", "broker": "broker", "client": "broker", "compat": "peer",
                     "crash": "crash"}
# Python children a unit test may run: the source checkers of tests/unit/repository/test_source.py.
CHECKERS = (("-m", "mypy"), (str(TESTS.parent / "tools" / "tidy.py"),))
CALL_FAILED = pytest.StashKey[bool]()


class SeededRandom(random.Random):
    """random.Random that prints its seed, so any failing random test can be replayed."""

    def __init__(self, seed: int):
        super().__init__(seed)
        self.seed_value = seed

    def __repr__(self) -> str:
        return f"SeededRandom(seed={self.seed_value})"


@pytest.fixture
def rand(request) -> SeededRandom:
    seed = int(request.config.getoption("--seed") or random.SystemRandom().randrange(1 << 32))
    generator = SeededRandom(seed)
    request.node.user_properties.append(("seed", seed))
    # Shown in the report of a failing test.
    print(f"seed={seed}")  # noqa: T201 (tests may print)
    return generator


def pytest_addoption(parser):
    parser.addoption("--seed", action="store", default=None,
                     help="seed for the `rand` fixture (replays a failing random test)")
    parser.addoption("--damage-cases", action="store", type=int, default=300,
                     help="cases of tests/crash/test_damage_property.py (in-process restarts)")
    parser.addoption("--damage-broker-cases", action="store", type=int, default=3,
                     help="of those, restarted through a real broker process as well")


def require_peers() -> bool:
    """True when missing compat peers must fail instead of skip (CI)."""
    return os.environ.get("PYBROKER_REQUIRE_PEERS", "") not in ("", "0")


def pytest_collection_modifyitems(config, items):
    for item in items:
        parts = pathlib.Path(str(item.path)).relative_to(TESTS).parts
        cost = COST_BY_DIRECTORY.get(parts[0]) if len(parts) > 1 else None
        if cost == "unit" and item.get_closest_marker("dataplane"):
            cost = None
        if cost is not None:
            item.add_marker(cost)
        if item.get_closest_marker("compat") and not item.get_closest_marker("peer"):
            item.add_marker("peer")


def _python_code_child(args) -> bool:
    words = [os.fspath(args)] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
    words = [os.fsdecode(word) for word in words]
    python = bool(words) and (words[0] == sys.executable
                              or os.path.basename(words[0]).startswith("python"))
    if not python:
        return False
    return not any(tuple(words[1:1 + len(checker)]) == checker for checker in CHECKERS)


@pytest.fixture(autouse=True)
def _unit_starts_no_process(request, monkeypatch):
    """Fails a ``unit`` test that starts a process running pybroker or test code."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    started: list[str] = []

    def refuse(what: str):
        started.append(what)
        raise AssertionError(f"a `unit` test started {what}: mark it `dataplane`")

    popen_init = subprocess.Popen.__init__

    def checked_popen_init(self, args, *more, **options):
        if _python_code_child(args):
            refuse(f"a Python child {str(args)[:80]}")
        popen_init(self, args, *more, **options)

    monkeypatch.setattr(os, "fork", lambda: refuse("a forked process"))
    monkeypatch.setattr(multiprocessing.util, "spawnv_passfds",
                        lambda *args: refuse("a spawned process"))
    monkeypatch.setattr(subprocess.Popen, "__init__", checked_popen_init)
    yield
    if started and not request.node.stash.get(CALL_FAILED, False):     # swallowed in the test
        pytest.fail(f"{request.node.nodeid}: a `unit` test started {started[0]}; mark it "
                    f"`dataplane` (tests/README.md)", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.stash[CALL_FAILED] = report.failed
    return report


def pytest_configure(config):
    from tests import parallel, progress
    progress.attach(config)
    if not config.pluginmanager.is_registered(parallel):
        config.pluginmanager.register(parallel, "pybroker-parallel")


def pytest_collection_finish(session):
    """Peers are installed here, before the first test, never half way through the run."""
    if session.config.option.collectonly:
        return
    if any(item.get_closest_marker("peer") for item in session.items):
        from tests import peers
        peers.prepare_all(session.config)
