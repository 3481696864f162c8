"""What the statistics instruments cost per request, with statsInstrumentsEnable on and off.

Method: pytest-benchmark over the recordings one request makes in a remoting worker, through the
real Recorder over a real region (an anonymous map, created on or off): (1) a send answered by
the Python handler (request started, put latency, TOPIC_PUT, request finished), (2) a found
pull (request started, store get, GROUP_GET, pull offset, page residency, request finished),
and (3) the appender's per-drain figures (5 counters, 3 histograms). The on/off pair of each
case ran in the same session is the figure: the difference is what the instruments cost per
request (the e2e on/off run, benchmarks/e2e/bench_stats_on_off.py, cannot resolve it on a
shared box).
"""
import mmap

import pytest

from pybroker._fast import stats as fast_stats
from pybroker.stats.recorder import Recorder
from pybroker._fast.stats import StatsCounter as C
from pybroker._fast.stats import StatsHistogram as H
from pybroker.store.control_block import remoting_worker, stats_section_count

SETTINGS = {"on": True, "off": False}


def _writer(enabled: bool, slot: int) -> fast_stats.StatsWriter:
    writers = stats_section_count(1)
    buffer = mmap.mmap(-1, fast_stats.region_size(writers))
    fast_stats.initialise(buffer, writers, 0, enabled)
    return fast_stats.StatsWriter(buffer, slot)


@pytest.mark.parametrize("setting", SETTINGS)
def test_send_recordings(benchmark, setting):
    recorder = Recorder(_writer(SETTINGS[setting], remoting_worker(0).stats_section))

    def one_send():
        token = recorder.request_started("send")
        recorder.put_latency(250_000)
        recorder.topic_put("BenchTopic", 1, 128)
        recorder.request_finished("send", token, 300)

    benchmark(one_send)


@pytest.mark.parametrize("setting", SETTINGS)
def test_pull_recordings(benchmark, setting):
    recorder = Recorder(_writer(SETTINGS[setting], remoting_worker(0).stats_section))

    def one_pull():
        token = recorder.request_started("pull")
        recorder.store_get(True, 32, 4096, 40_000)
        recorder.group_get("BenchTopic", "bench_group", 32, 4096)
        recorder.pull_offset("BenchTopic", "bench_group", 3, 1024, 123)
        recorder.pull_residency(2, 0, False, 30_000)
        recorder.request_finished("pull", token, 300)

    benchmark(one_pull)


@pytest.mark.parametrize("setting", SETTINGS)
def test_appender_drain_recordings(benchmark, setting):
    writer = _writer(SETTINGS[setting], 0)

    def one_drain():
        writer.record(H.APPEND_DRAIN_US, 120)
        writer.add(C.PUT_REQUESTS, 64)
        writer.add(C.PUT_MESSAGES, 64)
        writer.add(C.PUT_BYTES, 64 * 300)
        writer.add(C.GROUP_COMMITS)
        writer.record(H.GROUP_COMMIT_MESSAGES, 64)
        writer.record(H.GROUP_COMMIT_BYTES, 64 * 300)
        writer.set(C.PAGE_CACHE_LOCK_BEGIN_MS, 0)

    benchmark(one_drain)
