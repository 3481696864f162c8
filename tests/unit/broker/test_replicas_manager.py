"""What a controller-mode generation runs as: the role's config, and the epoch file a new master
writes before its processes start.

Method: a ReplicasManager over a real temp store (no controller: the decisions are fed as the
controller's answers would make them) is asked for the generation's config and prepares the
generation: a newly elected master appends its epoch at the recovered end, the same master's
next generation leaves the entry where it began, a newer epoch in the file than the
controller's goes, and epochs that end before the oldest CommitLog file are dropped. A master's
SyncStateSet expansion over a real control block, with the controller's answers scripted (the
real Java controller refuses the same way in tests/crash/test_controller_failover.py): a slave
whose proposal is refused, which then reconnects, is proposed again and joins.
"""
import asyncio
import os
import types

from pybroker.broker.controller_client import ControllerError
from pybroker.broker.replicas_manager import ReplicasManager, Role
from pybroker.config import load_broker_config
from pybroker.store.control_block import ControlBlock
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


class _ScriptedController:
    """``alter_sync_state_set`` answers from ``answers``: an exception is raised, a set taken."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.asked: list[frozenset[int]] = []

    async def alter_sync_state_set(self, broker_name, broker_id, master_epoch, members,
                                   set_epoch):
        self.asked.append(frozenset(members))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return types.SimpleNamespace(members=frozenset(answer), epoch=set_epoch + 1)


def _line(broker_id: int, now_ms: int, ack_offset: int, required_from: int) -> dict:
    return {"broker_id": broker_id, "flags": 0, "caught_up_ms": now_ms, "ack_offset": ack_offset,
            "required_from": required_from, "peer": 1, "connected_ms": now_ms, "slot": 0}


def test_a_refused_proposal_is_withdrawn_and_the_slave_proposed_again(tmp_path):
    """Java's controller refuses a replica it has no heartbeat of yet ("don't alive"); the
    slave's data plane then restarts (a new HA connection). Once caught up again it must be
    proposed again: a proposal left pending kept it out of the candidates for good (the
    rejoin failure: the SyncStateSet stayed {2, 3} for 60 s)."""
    replicas = manager(tmp_path / "store")
    replicas.broker_id = 2
    replicas._change_to_master(2, frozenset({2}), 3)
    replicas.prepare_generation(0)
    refused = ControllerError(2006, "Rejecting alter syncStateSet request because the replicas "
                              "{1} don't alive", "CONTROLLER_ALTER_SYNC_STATE_SET")
    controller = _ScriptedController(refused, {1, 2})
    replicas._client = controller
    now = 10_000
    with ControlBlock(str(tmp_path / "control"), create=True) as control:
        replicas._control = control

        async def steps() -> None:
            await replicas._maybe_expand([_line(1, now, 500, 0)], now)      # a candidate
            assert replicas.joining == {1} and control.sync_state()[1] == (1,)
            await replicas._maybe_expand([_line(1, now, 500, 501)], now)    # ready: refused
            assert controller.asked == [{1, 2}]
            assert replicas.sync.confirmed == {2} and replicas.sync.proposed is None
            await replicas._maybe_expand([], now)                           # disconnected
            assert replicas.joining == frozenset() and control.sync_state()[1] == ()
            await replicas._maybe_expand([_line(1, now, 900, 0)], now)      # back, caught up
            assert replicas.joining == {1}
            await replicas._maybe_expand([_line(1, now, 900, 901)], now)    # ready again
        asyncio.run(steps())
    assert controller.asked == [{1, 2}, {1, 2}]
    assert replicas.sync.confirmed == {1, 2} and replicas.sync.epoch == 4
    assert replicas.joining == frozenset()
