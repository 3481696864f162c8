# `pybroker admin` commands of controller mode: SyncStateSet, epochs, controller metadata.
"""getControllerMetaData, getSyncStateSet (both ask a controller, ``-a``) and getBrokerEpoch
(asks every broker of a broker set or cluster, found through the name servers), printed as
mqadmin 5.3.3 prints them; ``--json`` gives the same as one document. They work against
Apache's controller with pybroker and Java brokers alike."""
from pybroker.admin.broker_commands import invoke
from pybroker.protocol import controller as bodies
from pybroker.protocol import headers
from pybroker.protocol.codes import RequestCode

__all__ = ["COMMANDS"]


def _controller(args) -> str:
    return args.controller_addr.strip().split(";")[0]


async def get_controller_metadata(admin, args, out) -> int:
    response = await invoke(admin, _controller(args), RequestCode.CONTROLLER_GET_METADATA_INFO)
    meta = headers.GET_METADATA_RESPONSE.parse(response.ext_fields)
    peers = [peer for peer in (meta.peers or "").split(";") if peer]
    if out.json:
        out.document({"group": meta.group, "controllerLeaderId": meta.controller_leader_id,
                      "controllerLeaderAddress": meta.controller_leader_address,
                      "isLeader": meta.is_leader, "peers": peers})
        return 0
    lines = [f"#ControllerGroup\t{meta.group}", f"#ControllerLeaderId\t{meta.controller_leader_id}",
             f"#ControllerLeaderAddress\t{meta.controller_leader_address}"]
    out.line("\n" + "\n".join(lines + [f"#Peer:\t{peer}" for peer in peers]))
    return 0


async def _broker_names(admin, args) -> list[str]:
    if args.broker_name:
        return [args.broker_name]
    info = await admin.cluster_info()
    return sorted(info.cluster_addr_table.get(args.cluster, []))


async def get_sync_state_set(admin, args, out) -> int:
    names = await _broker_names(admin, args)
    if not names:
        raise ValueError("give -b brokerName or -c clusterName (with brokers)")
    response = await invoke(admin, _controller(args), RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
                            body=bodies.encode_broker_names(names))
    table = bodies.decode_broker_replicas_info(response.body or b"{}")
    if out.json:
        out.document({name: {
            "masterBrokerId": info.master_broker_id, "masterAddress": info.master_address,
            "masterEpoch": info.master_epoch, "syncStateSetEpoch": info.sync_state_set_epoch,
            "inSyncReplicas": [vars(item) for item in info.in_sync],
            "notInSyncReplicas": [vars(item) for item in info.not_in_sync]}
            for name, info in table.items()})
        return 0
    for name, info in table.items():
        out.line(f"\n#brokerName\t{name}\n#MasterBrokerId\t{info.master_broker_id}\n"
                 f"#MasterAddr\t{info.master_address}\n#MasterEpoch\t{info.master_epoch}\n"
                 f"#SyncStateSetEpoch\t{info.sync_state_set_epoch}\n"
                 f"#SyncStateSetNums\t{len(info.in_sync)}")
        for member in info.in_sync:
            out.line(f"\nInSyncReplica:\t{member}")
        for member in info.not_in_sync:
            out.line(f"\nNotInSyncReplica:\t{member}")
    return 0


async def _broker_addresses(admin, args) -> list[str]:
    info = await admin.cluster_info()
    names = [args.broker_name] if args.broker_name else \
        info.cluster_addr_table.get(args.cluster, [])
    return sorted(address for name in names if name in info.broker_addr_table
                  for address in info.broker_addr_table[name].broker_addrs.values())


async def get_broker_epoch(admin, args, out) -> int:
    addresses = await _broker_addresses(admin, args)
    if not addresses:
        raise ValueError("no broker found: give -b brokerName or -c clusterName")
    documents = []
    for address in addresses:
        response = await invoke(admin, address, RequestCode.GET_BROKER_EPOCH_CACHE)
        cache = bodies.decode_epoch_entry_cache(response.body or b"{}")
        entries = list(cache["entries"])
        if entries:        # mqadmin shows the last epoch ending at the broker's max offset
            epoch, start, _ = entries[-1]
            entries[-1] = (epoch, start, cache["max_offset"])
        documents.append(dict(cache, broker_addr=address, entries=entries))
        out.line(f"\n#clusterName\t{cache['cluster_name']}\n#brokerName\t{cache['broker_name']}"
                 f"\n#brokerAddr\t{address}\n#brokerId\t{cache['broker_id']}" + "".join(
                     f"\n#Epoch: EpochEntry{{epoch={epoch}, startOffset={start}, "
                     f"endOffset={end}}}" for epoch, start, end in entries))
    if out.json:
        out.document(documents)
    return 0


_CONTROLLER = ("-a", "controller_addr", {"required": True, "help": "controller ip:port"})
_NAME_OR_CLUSTER = (("-b", "broker_name", {"help": "broker name"}),
                    ("-c", "cluster", {"help": "cluster name"}))
COMMANDS = {
    "getControllerMetaData": (get_controller_metadata,
                              "the controller group, its leader and peers", (_CONTROLLER,)),
    "getSyncStateSet": (get_sync_state_set,
                        "a broker set's master, epochs and SyncStateSet (controller mode)",
                        (_CONTROLLER, *_NAME_OR_CLUSTER)),
    "getBrokerEpoch": (get_broker_epoch, "each broker's epoch entries (controller mode)",
                       _NAME_OR_CLUSTER),
}
