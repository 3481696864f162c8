# What every admin handler answers with: SUCCESS, errors, fastjson's sorted and MessageQueue maps.
"""The shared answers of the admin handlers (:mod:`pybroker.broker.admin`).

Bodies are what Java's fastjson writes, so ``mqadmin`` parses them: compact JSON with bean
fields in alphabetical order (:func:`sorted_json`). Maps keyed by a MessageQueue
(TopicStatsTable, ConsumeStats, ResetOffsetBody) use fastjson's object-valued keys, which are
not standard JSON: ``{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{...}}}``.
"""
import orjson

from pybroker.config import BrokerRole
from pybroker.protocol import bodies, constants
from pybroker.protocol.codes import ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response

__all__ = ["SLAVE_REMARK", "answer_error", "answer_ok", "encode_message_queue_map",
           "encode_offset_map", "is_slave", "language_name", "message_queue", "sorted_json"]

_SORTED = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
SLAVE_REMARK = ("Can't modify topic or subscription group from slave broker, please execute it "
                "from master broker.")


def answer_ok(request: RemotingCommand, body: bytes | None = None) -> RemotingCommand:
    return create_response(request, ResponseCode.SUCCESS, body=body)


def answer_error(request: RemotingCommand, remark: str,
                 code: int = ResponseCode.SYSTEM_ERROR) -> RemotingCommand:
    return create_response(request, code, remark)


def is_slave(ctx) -> bool:
    return ctx.config.store.broker_role == BrokerRole.SLAVE


def sorted_json(value) -> bytes:
    return orjson.dumps(value, option=_SORTED)


def language_name(language: int) -> str:
    try:
        return constants.LanguageCode(language).name
    except ValueError:
        return constants.LanguageCode.OTHER.name


def message_queue(ctx, topic: str, queue_id: int) -> bodies.MessageQueue:
    return bodies.MessageQueue(topic, ctx.config.broker.broker_name, queue_id)


def encode_message_queue_map(entries) -> bytes:
    """A Java ``Map<MessageQueue, V>`` as fastjson writes it: each key a MessageQueue object,
    each value ``V`` as a JSON object with sorted fields. ``entries``: (MessageQueue, dict)."""
    parts = [bodies.encode_message_queue(queue) + b":" + sorted_json(value)
             for queue, value in entries]
    return b"{" + b",".join(parts) + b"}"


def encode_offset_map(entries) -> bytes:
    """A Java ``Map<MessageQueue, Long>`` as fastjson writes it (ResetOffsetBody's
    offsetTable, GetConsumerStatusBody's tables). ``entries``: (MessageQueue, int)."""
    parts = [bodies.encode_message_queue(queue) + b":" + str(int(offset)).encode()
             for queue, offset in entries]
    return b"{" + b",".join(parts) + b"}"
