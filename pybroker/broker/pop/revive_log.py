# POP check-points and acks: records of rmq_sys_REVIVE_LOG_<cluster>, put as timer messages.
"""The records POP puts on its revive topic, built as Java 5.3.3's broker builds them.

A check-point (tag ``ck``) is a timer message due one second before its revive time, an ack
(``ack``) or batch ack (``bAck``) one due at it (``TIMER_DELIVER_MS``), so that read in due
order every ack of a check-point follows it (Java PopMessageProcessor.buildCkMsg,
AckMessageProcessor.appendAck). Each carries Java's UNIQ_KEY (topic@queue@offset@group@popTime@
broker@tag). Born and store host are the broker's; born time is now. They go through the
process's own putter like any put, so they are replicated, flushed and recovered as sends are,
and a POP or ack is answered only once its record is written (under SYNC_FLUSH: flushed).
Where the timer rule applies (5.x timer messages) the put-time redirect parks them on the timer
wheel; without it they reach the revive topic at once, and the revive service (broker/pop/
revive.py) checks due times itself.
"""
from pybroker.broker import send
from pybroker.protocol.constants import PopConstants, Property
from pybroker.protocol.properties import encode_properties
from pybroker.store.message_store import PutResult
from pybroker.store.pop_checkpoint import AckMsg, BatchAckMsg, PopCheckPoint

__all__ = ["checkpoint_message", "ack_message", "put_revive_record", "ReviveRecord"]


class ReviveRecord:
    """One record to put: its bytes, topic and revive queue."""

    __slots__ = ("records", "topic", "queue_id")

    def __init__(self, records: bytearray, topic: str, queue_id: int):
        self.records = records
        self.topic = topic
        self.queue_id = queue_id


def _unique_id(*parts: object) -> str:
    return PopConstants.SPLIT.join("null" if part is None else str(part) for part in parts)


def _record(revive_topic: str, revive_qid: int, tag: str, body: bytes, deliver_ms: int,
            unique_id: str, store_host: tuple[bytes, int], now_ms: int) -> ReviveRecord:
    properties = {Property.TAGS: tag, Property.TIMER_DELIVER_MS: str(deliver_ms),
                  Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: unique_id}
    records = send.encode_message(revive_topic, revive_qid, 0, body,
                                  encode_properties(properties), 0, now_ms, store_host,
                                  store_host)
    return ReviveRecord(records, revive_topic, revive_qid)


def checkpoint_message(ck: PopCheckPoint, revive_topic: str, revive_qid: int,
                       store_host: tuple[bytes, int], now_ms: int) -> ReviveRecord:
    """The record of check-point ``ck`` on revive queue ``revive_qid``."""
    unique_id = _unique_id(ck.topic, ck.queue_id, ck.start_offset, ck.cid, ck.pop_time,
                           ck.broker_name, PopConstants.CK_TAG)
    return _record(revive_topic, revive_qid, PopConstants.CK_TAG, ck.encode(),
                   ck.revive_time - PopConstants.ACK_TIME_INTERVAL_MS, unique_id, store_host,
                   now_ms)


def ack_message(ack: AckMsg, revive_topic: str, revive_qid: int, deliver_ms: int,
                store_host: tuple[bytes, int], now_ms: int) -> ReviveRecord:
    """The record of ``ack`` (or a batch ack) due at ``deliver_ms`` (its check-point's revive
    time). Java names both kinds by the single-ack id (appendAck overwrites the batch id)."""
    tag = PopConstants.BATCH_ACK_TAG if isinstance(ack, BatchAckMsg) else PopConstants.ACK_TAG
    unique_id = _unique_id(ack.topic, ack.queue_id, ack.ack_offset, ack.consumer_group,
                           ack.pop_time, ack.broker_name, PopConstants.ACK_TAG)
    return _record(revive_topic, revive_qid, tag, ack.encode(), deliver_ms, unique_id,
                   store_host, now_ms)


async def put_revive_record(putter, record: ReviveRecord) -> PutResult:
    """Put ``record`` and wait until it is stored (the putter's durability condition)."""
    return await putter.put(record.records, record.topic, record.queue_id, 1, 0, True)
