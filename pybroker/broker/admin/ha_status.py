# GET_BROKER_HA_STATUS (907, mqadmin haStatus): replication as the control block shows it.
"""The HARuntimeInfo of Java 5.x, from what the ha worker publishes in the control block.

A master answers ``master: true``, its CommitLog end (``masterCommitLogMaxOffset``) and one
line per connected slave: its address, the offset it acknowledged, the distance from the end
(``diff``), in sync when that distance is below ``haMaxGapNotInSync`` (Java's rule), and the
count in sync. A slave answers ``master: false`` with its master's HA address and its own
CommitLog end.

What pybroker does not measure is answered as Java's zero default, and docs/admin.md says so:
``transferredByteInSecond`` (master and slave), a slave's ``lastReadTimestamp`` and
``lastWriteTimestamp``, and ``masterFlushOffset`` (Java fills it only in controller mode).
``transferFromWhere`` is the slave's acknowledged offset: where a transfer restarts.
"""
import ipaddress

import orjson

from pybroker.broker.context import MetadataContext, MetadataHandler
from pybroker.broker.interfaces import ClientChannel
from pybroker.config import BrokerRole
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response
from pybroker.store import paths

__all__ = ["HANDLERS", "ha_runtime_info", "peer_address"]

_SORTED = orjson.OPT_SORT_KEYS


def peer_address(word: int) -> str:
    """The control block's peer word (IPv4 << 16 | port) as ``ip:port``."""
    if word <= 1:
        return "unknown"
    return f"{ipaddress.IPv4Address(word >> 16)}:{word & 0xFFFF}"


def _master_address(store_root: str) -> str:
    try:
        with open(paths.ha_master_address_path(store_root), encoding="utf-8") as source:
            return source.read().strip()
    except OSError:
        return ""


def ha_runtime_info(ctx: MetadataContext) -> dict:
    """The HARuntimeInfo document of this broker."""
    service = ctx.stats_service
    assert service is not None, "GET_BROKER_HA_STATUS needs the supervisor's control block"
    control = service.control
    written = control.written_position
    client = {"activated": False, "lastReadTimestamp": 0, "lastWriteTimestamp": 0,
              "masterAddr": "", "masterFlushOffset": 0, "maxOffset": 0,
              "transferredByteInSecond": 0}
    if ctx.config.store.broker_role == BrokerRole.SLAVE:
        address = _master_address(ctx.config.store.store_path_root_dir)
        client.update(activated=bool(address), masterAddr=address, maxOffset=written)
        return {"haClientRuntimeInfo": client, "haConnectionInfo": [], "inSyncSlaveNums": 0,
                "master": False, "masterCommitLogMaxOffset": 0}
    gap = ctx.config.store.ha_max_gap_not_in_sync
    connections = []
    for ack_offset, peer, _ in control.ha_slaves():
        diff = written - ack_offset
        connections.append({"addr": peer_address(peer), "diff": diff, "inSync": diff < gap,
                            "slaveAckOffset": ack_offset, "transferFromWhere": ack_offset,
                            "transferredByteInSecond": 0})
    return {"haClientRuntimeInfo": client, "haConnectionInfo": connections,
            "inSyncSlaveNums": sum(connection["inSync"] for connection in connections),
            "master": True, "masterCommitLogMaxOffset": written}


async def handle_get_broker_ha_status(ctx: MetadataContext, channel: ClientChannel,
                                      request: RemotingCommand) -> RemotingCommand | None:
    """GET_BROKER_HA_STATUS (907)."""
    return create_response(request, ResponseCode.SUCCESS,
                           body=orjson.dumps(ha_runtime_info(ctx), option=_SORTED))


HANDLERS: dict[int, MetadataHandler] = {
    RequestCode.GET_BROKER_HA_STATUS: handle_get_broker_ha_status,
}
