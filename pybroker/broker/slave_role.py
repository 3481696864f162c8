# What a broker with brokerRole=SLAVE refuses before any handler work: the one table.
"""Refusals of the SLAVE role on the data path (protocol.md §6.2; Java 4.9.x).

A Java slave's store refuses every put (``DefaultMessageStore.checkStoreStatus``:
SERVICE_NOT_AVAILABLE); the send processor maps that to SERVICE_NOT_AVAILABLE with its "messages
are put to the slave" remark, and the send-back processor to SYSTEM_ERROR with the status name.
Java only gets there after msgCheck, which may auto-create a topic on the slave; 5.x refuses
sends before any work (``rejectRequest``). pybroker refuses first, with 4.9.x's codes, so a
slave never creates a topic from a send. The remoting workers wrap these handlers with
:func:`guard`; the slave's processes also get a putter that refuses
(:class:`pybroker.proc.dataplane.SlavePutter`), the metadata handlers refuse topic and group
changes themselves (``broker/admin/``), and END_TRANSACTION answers SLAVE_NOT_AVAILABLE
(``broker/end_transaction.py``). Pulls are served (suggesting the master unless
slaveReadEnable), and consumer offset commits are accepted, as on a Java 4.9.x slave: clients
that lost the master keep consuming from the slave.
"""
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_response
from pybroker.store.status import PutStatus, send_response

__all__ = ["SLAVE_REFUSALS", "guard"]

_SEND_REFUSAL = send_response(PutStatus.SERVICE_NOT_AVAILABLE)
SLAVE_REFUSALS: dict[int, tuple[int, str | None]] = {
    RequestCode.SEND_MESSAGE: _SEND_REFUSAL,
    RequestCode.SEND_MESSAGE_V2: _SEND_REFUSAL,
    RequestCode.SEND_BATCH_MESSAGE: _SEND_REFUSAL,
    RequestCode.CONSUMER_SEND_MSG_BACK: (ResponseCode.SYSTEM_ERROR,
                                         PutStatus.SERVICE_NOT_AVAILABLE.name),
}


def guard(code: int, handler):
    """``handler`` for a slave: the refusal of ``code`` (None for a oneway request), or the
    handler itself when the slave serves ``code``."""
    refusal = SLAVE_REFUSALS.get(code)
    if refusal is None:
        return handler
    response_code, remark = refusal

    async def refuse(ctx, channel, request):
        if request.is_oneway:
            return None
        return create_response(request, response_code, remark)
    return refuse
