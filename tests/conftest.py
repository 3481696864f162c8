# Test-session setup shared by every suite.
"""Shared fixtures: a seeded random generator whose repr is its seed, and the compat-peer switch.

Peer availability: compat tests skip with a reason when a Java/Go peer is missing, unless
``PYBROKER_REQUIRE_PEERS=1`` (set by ``.ci/run``) turns those skips into failures.
"""
import os
import random

import pytest


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


def require_peers() -> bool:
    """True when missing compat peers must fail instead of skip (CI)."""
    return os.environ.get("PYBROKER_REQUIRE_PEERS", "") not in ("", "0")


def pytest_configure(config):
    from tests import progress
    progress.attach(config)


def pytest_collection_finish(session):
    """Peers are installed here, before the first test, never half way through the run."""
    if session.config.option.collectonly:
        return
    if any(item.get_closest_marker("compat") for item in session.items):
        from tests import peers
        peers.prepare_all()
