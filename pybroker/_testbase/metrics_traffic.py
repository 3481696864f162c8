# The traffic the metrics tests and the Java metrics capture drive through a broker.
"""One scenario that gives every Java 5.x metric family a series (docs/statistics.md,
"Prometheus endpoint"): run against Java 5.3.3 by tools/java_capture/capture_metrics.py (the
golden scrape) and against pybroker by tests/broker/test_prometheus.py, which then compares
the two endpoints' family and label names and checks the figures this traffic fixes: 50
messages in, 20 of them pulled, one message sent to a DLQ, a transaction committed, one rolled
back and one left open.
"""
import asyncio

from pybroker.client import (ConsumeFromWhere, ConsumeStatus, LitePullConsumer,
                             LocalTransactionState, Message, Producer, PushConsumer,
                             TransactionProducer)
from pybroker.tasks import within

__all__ = ["traffic", "TOPIC", "DLQ_TOPIC", "TX_TOPIC", "PULL_GROUP", "DLQ_GROUP", "SENT",
           "PULLED"]

TOPIC, DLQ_TOPIC, TX_TOPIC = "MetricsTopic", "MetricsDlqTopic", "MetricsTxTopic"
PULL_GROUP, DLQ_GROUP = "metrics_pull_group", "metrics_dlq_group"
SENT, PULLED = 50, 20


class _Decisions:
    def execute_local_transaction(self, message, arg):
        return {b"commit": LocalTransactionState.COMMIT_MESSAGE,
                b"rollback": LocalTransactionState.ROLLBACK_MESSAGE}.get(
            message.body, LocalTransactionState.UNKNOW)

    def check_local_transaction(self, message):
        return LocalTransactionState.UNKNOW


async def traffic(namesrv_addr: str, settle_s: float = 0.0, while_online=None):
    """Drive the scenario; ``settle_s``: keep the DLQ consumer online that long at the end
    (Java computes its lag families every 30 s); ``while_online``: a coroutine function run
    then, while a consumer and its connection are still there (its result is returned)."""
    async with Producer("metrics_producer", namesrv_addr) as producer:
        for index in range(SENT):
            await producer.send(Message(TOPIC, b"m%03d" % index))
        await producer.send(Message(DLQ_TOPIC, b"to the DLQ"))
    transactions = TransactionProducer("metrics_tx_producer", namesrv_addr,
                                       transaction_listener=_Decisions())
    await transactions.start()
    try:
        for body in (b"commit", b"rollback", b"open"):
            await transactions.send_message_in_transaction(Message(TX_TOPIC, body))
    finally:
        await transactions.shutdown()
    pull = LitePullConsumer(PULL_GROUP, namesrv_addr,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    pull.subscribe(TOPIC)
    async with pull:
        taken = 0
        while taken < PULLED:
            taken += len(await pull.poll(5000))
    failed = asyncio.Event()

    async def refuse(messages, context):
        failed.set()
        return ConsumeStatus.RECONSUME_LATER
    push = PushConsumer(DLQ_GROUP, namesrv_addr, max_reconsume_times=0,
                        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    push.subscribe(DLQ_TOPIC)
    push.register_message_listener(refuse)
    async with push:
        await within(failed.wait(), 60)
        await asyncio.sleep(settle_s)
        return await while_online() if while_online is not None else None
