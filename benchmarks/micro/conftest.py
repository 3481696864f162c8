# Figures derived from a benchmark's timings, recorded only when it was timed.
"""The ``figure`` fixture: ``figure(name, convert, statistic="median")`` stores
``convert(seconds)`` (the run's statistic in seconds) in the benchmark's extra_info. Under
``--benchmark-disable`` pytest-benchmark runs each case once untimed and has no statistics,
so nothing is recorded then and the case still checks what it asserts."""
from collections.abc import Callable

import pytest


@pytest.fixture
def figure(benchmark) -> Callable[..., None]:
    def record(name: str, convert: Callable[[float], object], statistic: str = "median"):
        if benchmark.disabled:
            return
        benchmark.extra_info[name] = convert(getattr(benchmark.stats.stats, statistic))
    return record
