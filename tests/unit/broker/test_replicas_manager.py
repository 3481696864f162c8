"""What a controller-mode generation runs as: the role's config, and the epoch file a new master
writes before its processes start.

Method: a ReplicasManager over a real temp store (no controller: the decisions are fed as the
controller's answers would make them) is asked for the generation's config and prepares the
generation: a newly elected master appends its epoch at the recovered end, the same master's
next generation leaves the entry where it began, a newer epoch in the file than the
controller's goes, and epochs that end before the oldest CommitLog file are dropped.
"""
import os

from pybroker.broker.replicas_manager import ReplicasManager, Role
from pybroker.config import load_broker_config
from pybroker.store.epoch_file import EpochFile
from pybroker.store.settings import BrokerRole


def manager(tmp_path) -> ReplicasManager:
    config = load_broker_config(None, {
        "enableControllerMode": "true", "controllerAddr": "127.0.0.1:9878", "brokerId": "-1",
        "brokerRole": "SLAVE", "storePathRootDir": str(tmp_path), "brokerIP1": "127.0.0.1"})
    return ReplicasManager(config)


def entries(replicas) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in EpochFile.load(replicas.epoch_path).entries]


def test_fenced_then_master_then_same_epoch_again(tmp_path):
    replicas = manager(tmp_path)
    fenced = replicas.generation_config(replicas.config)
    assert fenced.store.broker_role is BrokerRole.SLAVE and fenced.broker.broker_id == 1
    assert replicas.prepare_generation(0).role is Role.FENCED and entries(replicas) == []
    replicas.broker_id = 2
    replicas._change_to_master(3, frozenset({2}), 5)
    master = replicas.generation_config(replicas.config)
    assert master.store.broker_role is BrokerRole.SYNC_MASTER and master.broker.broker_id == 0
    assert replicas.prepare_generation(4096).role is Role.MASTER
    assert entries(replicas) == [(3, 4096)]
    replicas.prepare_generation(9000)          # a worker died: same epoch, same start
    assert entries(replicas) == [(3, 4096)]


def test_newer_epoch_in_the_file_goes_and_expired_epochs_drop(tmp_path):
    replicas = manager(tmp_path)
    epochs = EpochFile.load(replicas.epoch_path)
    for epoch, start in ((1, 0), (2, 100), (7, 5000)):
        epochs.append(epoch, start)
    os.makedirs(replicas.config.store.commitlog_dir)
    open(os.path.join(replicas.config.store.commitlog_dir, str(4096).zfill(20)), "wb").close()
    replicas.broker_id = 1
    replicas._change_to_master(5, frozenset({1}), 1)
    replicas.prepare_generation(6000)
    assert entries(replicas) == [(2, 100), (5, 6000)]
