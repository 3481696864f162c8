# DELETE_EXPIRED_COMMITLOG (329) and CLEAN_EXPIRED_CONSUMEQUEUE (306): an admin's cleanup now.
"""Handlers of mqadmin deleteExpiredCommitLog and cleanExpiredCQ, run in the metadata service.

Both hand a request to the dispatcher, the only process that deletes store files
(:mod:`pybroker.store.cleanup_requests`), and answer SUCCESS at once; the dispatcher acts at
its next cleanup pass (within ``cleanResourceInterval`` ms, 10 s by default) and logs it.
Java's deleteExpiredCommitLog works the same way (it sets a flag its next passes read).
Java's cleanExpiredCQ runs at once and also drops a queue whose messages all expired, with its
queue offsets (its next message is stored at offset 0 again); pybroker deletes the expired
files of such a queue but keeps its last file and its offsets (docs/admin.md).
"""
from pybroker.broker.context import MetadataContext, MetadataHandler
from pybroker.broker.interfaces import ClientChannel
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response
from pybroker.store import cleanup_requests

__all__ = ["HANDLERS"]


async def _request(ctx: MetadataContext, request: RemotingCommand,
                   kind: str) -> RemotingCommand:
    try:
        cleanup_requests.request_cleanup(ctx.config.store.store_path_root_dir, kind)
    except OSError as error:
        return create_response(request, ResponseCode.SYSTEM_ERROR,
                               f"cannot hand {kind} to the dispatcher: {error}")
    return create_response(request, ResponseCode.SUCCESS)


async def handle_delete_expired_commitlog(ctx: MetadataContext, channel: ClientChannel,
                                          request: RemotingCommand) -> RemotingCommand | None:
    """DELETE_EXPIRED_COMMITLOG (329): expired CommitLog files go at the next passes."""
    return await _request(ctx, request, cleanup_requests.DELETE_EXPIRED_COMMITLOG)


async def handle_clean_expired_consume_queue(ctx: MetadataContext, channel: ClientChannel,
                                             request: RemotingCommand) -> RemotingCommand | None:
    """CLEAN_EXPIRED_CONSUMEQUEUE (306): expired consume-queue files go at the next pass."""
    return await _request(ctx, request, cleanup_requests.CLEAN_EXPIRED_CONSUME_QUEUE)


HANDLERS: dict[int, MetadataHandler] = {
    RequestCode.DELETE_EXPIRED_COMMITLOG: handle_delete_expired_commitlog,
    RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE: handle_clean_expired_consume_queue,
}
