# `pybroker admin` commands that ask brokers to delete expired files now (mqadmin's names).
"""deleteExpiredCommitLog, cleanExpiredCQ: to one broker (-b) or every master of a cluster
(-c; every cluster when neither is given). Each broker takes the request at its next cleanup
pass (pybroker/store/cleanup_requests.py); mqadmin prints ``success`` or ``false`` without a
newline, pybroker the same with one."""
from pybroker.admin.broker_commands import Command, masters
from pybroker.client.instance import request
from pybroker.protocol.codes import RequestCode, ResponseCode

__all__ = ["COMMANDS"]


async def _ask_all(admin, args, out, code: int) -> int:
    results = {}
    for _, address in await masters(admin, args):
        response = await admin.instance.invoke(address, request(code))
        results[address] = response.code == ResponseCode.SUCCESS
        if not results[address]:
            out.progress(f"{address}: {response.remark or f'code {response.code}'}")
    ok = bool(results) and all(results.values())
    if out.json:
        out.document(results)
    out.line("success" if ok else "false")
    return 0 if ok else 1


async def delete_expired_commit_log(admin, args, out) -> int:
    return await _ask_all(admin, args, out, RequestCode.DELETE_EXPIRED_COMMITLOG)


async def clean_expired_cq(admin, args, out) -> int:
    return await _ask_all(admin, args, out, RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE)


_BROKER_OR_CLUSTER = (("-b", "broker_addr", {"help": "broker ip:port"}),
                      ("-c", "cluster", {"help": "every master of this cluster"}))
COMMANDS: dict[str, Command] = {
    "deleteExpiredCommitLog": (delete_expired_commit_log, "delete CommitLog files older than "
                               "fileReservedTime now, not at deleteWhen", _BROKER_OR_CLUSTER),
    "cleanExpiredCQ": (clean_expired_cq, "delete consume-queue files whose messages all "
                       "expired", _BROKER_OR_CLUSTER),
}
