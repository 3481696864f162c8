"""A gRPC worker's send ring has grpcSendRingSizeBytes (by default sized from maxMessageSize), a
remoting worker's sendRingSizeBytes.

Method: the supervisor's own DataPlane.create over a store in tmp_path, for a broker with two
remoting workers and one gRPC worker; each slot's ring is read back from its mapped header.
"""
import pytest

from pybroker import config
from pybroker.proc.dataplane import DataPlane
from pybroker.store import paths
from pybroker.store.control_block import grpc_worker

pytestmark = pytest.mark.dataplane
MIB = 1 << 20


def _capacities(tmp_path, **settings) -> list[int]:
    loaded = config.load_broker_config(overrides={
        "storePathRootDir": str(tmp_path / "store"), "remotingWorkers": "2",
        "grpcWorkers": "1", **settings})
    root = loaded.store.store_path_root_dir
    plane = DataPlane.create(loaded, paths.run_dir(root), 3, 0)
    try:
        return [region.ring.capacity_bytes for region in plane.rings]
    finally:
        plane.close()


def test_the_grpc_workers_ring_is_sized_from_the_largest_record(tmp_path):
    slot = grpc_worker(0, 2).slot
    capacities = _capacities(tmp_path)
    assert capacities[slot] == 16 * MIB           # two 4 MiB messages' records fit, not in 8
    assert [capacity for index, capacity in enumerate(capacities) if index != slot] \
        == [32 * MIB] * (len(capacities) - 1)     # remoting workers, supervisor, timer


def test_the_grpc_workers_ring_follows_the_setting_and_its_default_not_above_the_others(tmp_path):
    slot = grpc_worker(0, 2).slot
    assert _capacities(tmp_path, grpcSendRingSizeBytes=str(64 * MIB))[slot] == 64 * MIB
    small = _capacities(tmp_path, sendRingSizeBytes=str(MIB), maxMessageSize=str(64 << 10))
    assert small[slot] == 256 << 10 and small[0] == MIB
