# `pybroker admin haStatus`: replication of a master's slaves, or a slave's master (mqadmin 5.x).
"""haStatus: GET_BROKER_HA_STATUS (907) of a broker (-b) or of every master of a cluster (-c),
printed as Java 5.x's mqadmin prints it; -i repeats it every few seconds. Figures pybroker does
not measure come back as Java's zero defaults (docs/admin.md)."""
import asyncio
import time

from pybroker.admin.broker_commands import Command, invoke, masters
from pybroker.protocol import fastjson
from pybroker.protocol.codes import RequestCode

__all__ = ["COMMANDS"]


def _human_ms(ms: int) -> str:
    """Java's UtilAll.timeMillisToHumanString2: yyyy-MM-dd HH:mm:ss,SSS (local time)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f",{ms % 1000:03d}"


def _print_status(out, address: str, info: dict) -> None:
    if info.get("master"):
        slaves = info.get("haConnectionInfo", [])
        out.line(f"\n#MasterAddr\t{address}\n#MasterCommitLogMaxOffset\t"
                 f"{info.get('masterCommitLogMaxOffset', 0)}\n#SlaveNum\t{len(slaves)}\n"
                 f"#InSyncSlaveNum\t{info.get('inSyncSlaveNums', 0)}")
        out.line(f"{'#SlaveAddr':<32}  {'#SlaveAckOffset':<16} {'#Diff':>16} "
                 f"{'#TransferSpeed(KB/s)':>16} {'#Status':>16} {'#TransferFromWhere':>16}")
        for slave in slaves:
            status = "OK" if slave.get("inSync") else "Fall Behind"
            out.line(f"{slave.get('addr', ''):<32}  {slave.get('slaveAckOffset', 0):<16d} "
                     f"{slave.get('diff', 0):16d} "
                     f"{slave.get('transferredByteInSecond', 0) / 1024.0:16.2f} {status:>16} "
                     f"{slave.get('transferFromWhere', 0):16d}")
        return
    client = info.get("haClientRuntimeInfo", {})
    out.line(f"\n#MasterAddr\t{client.get('masterAddr', '')}\n#CommitLogMaxOffset\t"
             f"{client.get('maxOffset', 0)}\n#TransferSpeed(KB/s)\t"
             f"{client.get('transferredByteInSecond', 0) / 1024.0:.2f}\n#LastReadTime\t"
             f"{_human_ms(client.get('lastReadTimestamp', 0))}\n#LastWriteTime\t"
             f"{_human_ms(client.get('lastWriteTimestamp', 0))}\n#MasterFlushOffset\t"
             f"{client.get('masterFlushOffset', 0)}")


async def ha_status(admin, args, out) -> int:
    if not args.broker_addr and not args.cluster:
        out.progress("pybroker admin haStatus: give -b brokerAddr or -c clusterName")
        return 2
    rounds = 0
    while True:
        documents = {}
        for _, address in await masters(admin, args):
            response = await invoke(admin, address, RequestCode.GET_BROKER_HA_STATUS)
            documents[address] = fastjson.loads(response.body or b"{}")
            if not out.json:
                _print_status(out, address, documents[address])
        if out.json:
            out.document(documents)
        rounds += 1
        if args.interval is None or (args.rounds and rounds >= args.rounds):
            return 0
        await asyncio.sleep(args.interval or 3)


COMMANDS: dict[str, Command] = {
    "haStatus": (ha_status, "replication status of a broker or of a cluster's masters", (
        ("-b", "broker_addr", {"help": "broker ip:port"}),
        ("-c", "cluster", {"help": "every master of this cluster"}),
        ("-i", "interval", {"type": int, "nargs": "?", "const": 3,
                            "help": "repeat every this many seconds (default 3)"}),
        ("--rounds", "rounds", {"type": int, "default": 0,
                                "help": "with -i, stop after this many rounds (pybroker; 0: "
                                        "never, as mqadmin)"}))),
}
