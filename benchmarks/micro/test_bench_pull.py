"""A remoting worker's CPU per pull of 32 records of 128 B, request frame in to answer written.

Method: benchmarks/micro/pull_harness.py: a store of 4 x 8192 records written through
MessageStore, read through a MessageStoreReader as a remoting worker reads it; each round hands
one RemotingConnection (a stub transport) one read of 4 PULL_MESSAGE frames as Apache's
benchmark Consumer sends them and runs the loop until the 4 answers are written (statistics on,
the committed offsets forwarded as the worker forwards them), through the Python handler
(``python``) and through the pull fast path (``fast``). extra_info has us_per_pull and
us_per_message. For instruction counts of the same round: tools/count_pull_instructions.py.
"""
import importlib.util
import pathlib

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "pull_harness", pathlib.Path(__file__).with_name("pull_harness.py"))
assert _SPEC is not None and _SPEC.loader is not None
pull_harness = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(pull_harness)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("pull") / "store")
    return root, pull_harness.write_store(root)


@pytest.mark.parametrize("path", ["python", "fast"])
def test_pull_round(benchmark, figure, store, path):
    worker = pull_harness.PullWorker(*store, fast=path == "fast")
    try:
        assert worker.round() > pull_harness.QUEUES * pull_harness.BATCH * 128
        benchmark(worker.round)
        figure("us_per_pull", lambda seconds: round(seconds * 1e6 / pull_harness.QUEUES, 1))
        figure("us_per_message", lambda seconds: round(
            seconds * 1e6 / pull_harness.QUEUES / pull_harness.BATCH, 2))
        fast_pulls = worker.port.path.fast_pulls_total if worker.port is not None else 0
        assert (fast_pulls > 0) == (path == "fast")
    finally:
        worker.close()
