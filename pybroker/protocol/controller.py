# Controller mode on the wire: the JSON bodies of the 5.x controller codes.
"""Bodies between a broker, its controller and the admin tool (RocketMQ 5.x controller mode;
codes in :mod:`pybroker.protocol.codes`, 1001-1013 and 904; answers 2000-2016).

The headers are in :mod:`pybroker.protocol.headers` with every other request's; the bodies are
the JSON Java's ``RemotingSerializable`` (fastjson) writes: keys in alphabetical order, broker
ids as JSON numbers, sets as arrays. Readers are lenient where fastjson is
(bare keys, absent fields take Java's defaults) and raise ValueError on anything else.
"""
import dataclasses
from typing import Any

import orjson

from pybroker.protocol import fastjson

__all__ = [
    "MASTER_BROKER_ID", "FIRST_BROKER_CONTROLLER_ID", "SyncStateSet", "ElectMasterBody",
    "ReplicaIdentity", "ReplicasInfo", "encode_sync_state_set", "decode_sync_state_set",
    "decode_elect_master_body", "encode_broker_names", "decode_broker_names",
    "encode_epoch_entry_cache", "decode_epoch_entry_cache", "decode_broker_replicas_info",
    "encode_broker_replicas_info",
]

MASTER_BROKER_ID = 0              # the id a master registers with at the NameServer
FIRST_BROKER_CONTROLLER_ID = 1    # the controller assigns ids from 1 (Java MixAll)

# --- bodies ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SyncStateSet:
    """The in-sync replicas of a broker set (controller ids) and the set's epoch."""
    members: frozenset[int]
    epoch: int


@dataclasses.dataclass(frozen=True)
class ElectMasterBody:
    """An elect-master answer's body: the new set and the group's members (id -> address)."""
    sync_state_set: frozenset[int]
    broker_addrs: dict[int, str]


@dataclasses.dataclass(frozen=True)
class ReplicaIdentity:
    broker_name: str
    broker_id: int
    broker_address: str
    alive: bool

    def __str__(self) -> str:       # Java's ReplicaIdentity.toString (mqadmin prints it)
        return (f"ReplicaIdentity{{brokerName='{self.broker_name}', brokerId={self.broker_id}, "
                f"brokerAddress='{self.broker_address}', alive={str(self.alive).lower()}}}")


@dataclasses.dataclass(frozen=True)
class ReplicasInfo:
    """One broker set in a get-sync-state-data answer (Java BrokerReplicasInfo.ReplicasInfo)."""
    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set_epoch: int
    in_sync: tuple[ReplicaIdentity, ...]
    not_in_sync: tuple[ReplicaIdentity, ...]


def _dumps(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _object(data, what: str) -> dict:
    value = fastjson.loads(data) if not isinstance(data, dict) else data
    if not isinstance(value, dict):
        raise ValueError(f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


def _integer(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what}: expected an integer, got {value!r:.40}")
    return value


def _ids(value: Any, what: str) -> frozenset[int]:
    if value is None:
        return frozenset()
    if not isinstance(value, list):
        raise ValueError(f"{what}: expected an array of broker ids")
    return frozenset(_integer(item, what) for item in value)


def encode_sync_state_set(members, epoch: int) -> bytes:
    return _dumps({"syncStateSet": sorted(members), "syncStateSetEpoch": epoch})


def decode_sync_state_set(data) -> SyncStateSet:
    obj = _object(data, "SyncStateSet")
    return SyncStateSet(_ids(obj.get("syncStateSet"), "SyncStateSet.syncStateSet"),
                        _integer(obj.get("syncStateSetEpoch", 0), "syncStateSetEpoch"))


def decode_elect_master_body(data) -> ElectMasterBody:
    obj = _object(data, "ElectMasterResponseBody")
    group = obj.get("brokerMemberGroup") or {}
    addrs = _object(group, "BrokerMemberGroup").get("brokerAddrs") or {}
    return ElectMasterBody(_ids(obj.get("syncStateSet"), "ElectMasterResponseBody"),
                           {int(key): str(value) for key, value in addrs.items()})


def encode_broker_names(names) -> bytes:
    """A get-sync-state-data request body: the broker names asked for."""
    return _dumps(list(names))


def decode_broker_names(data) -> list[str]:
    value = fastjson.loads(data)
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise ValueError("expected a JSON array of broker names")
    return value


def encode_epoch_entry_cache(cluster_name: str, broker_name: str, broker_id: int,
                             entries, max_offset: int) -> bytes:
    """A GET_BROKER_EPOCH_CACHE answer (Java EpochEntryCache); ``entries`` are
    :class:`pybroker.store.epoch_file.EpochEntry`."""
    return _dumps({
        "brokerId": broker_id, "brokerName": broker_name, "clusterName": cluster_name,
        "epochList": [{"endOffset": entry.end_offset, "epoch": entry.epoch,
                       "startOffset": entry.start_offset} for entry in entries],
        "maxOffset": max_offset})


def decode_epoch_entry_cache(data) -> dict:
    """(admin side) the fields of an EpochEntryCache, entries as (epoch, start, end) tuples."""
    obj = _object(data, "EpochEntryCache")
    entries = [(_integer(item.get("epoch"), "epoch"), _integer(item.get("startOffset"), "start"),
                _integer(item.get("endOffset"), "end")) for item in obj.get("epochList") or []]
    return {"cluster_name": obj.get("clusterName"), "broker_name": obj.get("brokerName"),
            "broker_id": _integer(obj.get("brokerId", -1), "brokerId"), "entries": entries,
            "max_offset": _integer(obj.get("maxOffset", -1), "maxOffset")}


def _replica(obj: Any) -> ReplicaIdentity:
    item = _object(obj, "ReplicaIdentity")
    return ReplicaIdentity(str(item.get("brokerName")), _integer(item.get("brokerId"), "id"),
                           str(item.get("brokerAddress")), bool(item.get("alive")))


def decode_broker_replicas_info(data) -> dict[str, ReplicasInfo]:
    """A get-sync-state-data answer: broker name -> :class:`ReplicasInfo`."""
    table = _object(data, "BrokerReplicasInfo").get("replicasInfoTable") or {}
    result = {}
    for name, value in _object(table, "replicasInfoTable").items():
        info = _object(value, "ReplicasInfo")
        master_id = info.get("masterBrokerId")
        result[name] = ReplicasInfo(
            None if master_id is None else _integer(master_id, "masterBrokerId"),
            info.get("masterAddress"), _integer(info.get("masterEpoch", 0), "masterEpoch"),
            _integer(info.get("syncStateSetEpoch", 0), "syncStateSetEpoch"),
            tuple(_replica(item) for item in info.get("inSyncReplicas") or []),
            tuple(_replica(item) for item in info.get("notInSyncReplicas") or []))
    return result


def encode_broker_replicas_info(table: dict[str, ReplicasInfo]) -> bytes:
    """(tests) the JSON a controller sends for ``table``."""
    def replica(item: ReplicaIdentity) -> dict:
        return {"alive": item.alive, "brokerAddress": item.broker_address,
                "brokerId": item.broker_id, "brokerName": item.broker_name}
    return _dumps({"replicasInfoTable": {name: {
        "inSyncReplicas": [replica(item) for item in info.in_sync],
        "masterAddress": info.master_address, "masterBrokerId": info.master_broker_id,
        "masterEpoch": info.master_epoch,
        "notInSyncReplicas": [replica(item) for item in info.not_in_sync],
        "syncStateSetEpoch": info.sync_state_set_epoch} for name, info in table.items()}})
