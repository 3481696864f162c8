# Answers to the broker's calls into a client: running info, direct consume, offset reset.
"""Handlers of broker -> client requests (protocol.md §2.12).

* GET_CONSUMER_RUNNING_INFO (307): a ConsumerRunningInfo document as Java's fastjson writes it
  (``mqTable`` keyed by MessageQueue objects), which mqadmin ``consumerStatus`` parses.
* CONSUME_MESSAGE_DIRECTLY (309): consume the record in the body once with the group's
  listener; answer a ConsumeMessageDirectlyResult.
* GET_CONSUMER_STATUS_FROM_CLIENT (221): the group's offsets of a topic in this client.
* RESET_CONSUMER_CLIENT_OFFSET (220): ``{"offsetTable":{<MessageQueue>:offset}}`` (object keys,
  read with :func:`pybroker.protocol.fastjson.loads`); the consumer restarts those queues there.

Each handler is ``async (instance, connection, command) -> RemotingCommand | None``; the
instance binds them into its request table.
"""
import inspect
import logging
import os
import time
from typing import Any, Optional

import orjson

from pybroker.client.message import decode_messages
from pybroker.errors import HeaderError, ProtocolError
from pybroker.protocol import bodies, fastjson, headers
from pybroker.protocol.bodies import MessageQueue
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response
from pybroker.protocol.constants import CURRENT_VERSION, ConsumeType

LOGGER = logging.getLogger("pybroker.client")
_MIB = 1 << 20
# ConsumerRunningInfo property names Java defines (mqadmin reads the last three).
PROP_NAMESERVER_ADDR = "PROP_NAMESERVER_ADDR"
PROP_THREADPOOL_CORE_SIZE = "PROP_THREADPOOL_CORE_SIZE"
PROP_CLIENT_VERSION = "PROP_CLIENT_VERSION"
PROP_CONSUME_ORDERLY = "PROP_CONSUMEORDERLY"
PROP_CONSUME_TYPE = "PROP_CONSUME_TYPE"
PROP_CONSUMER_START_TIMESTAMP = "PROP_CONSUMER_START_TIMESTAMP"
_ZERO_STATUS = {"consumeFailedMsgs": 0, "consumeFailedTPS": 0.0, "consumeOKTPS": 0.0,
                "consumeRT": 0.0, "pullRT": 0.0, "pullTPS": 0.0}


def _error(command: RemotingCommand, remark: str) -> RemotingCommand:
    return create_response(command, ResponseCode.SYSTEM_ERROR, remark)


def _queue_key(queue: MessageQueue) -> bytes:
    return orjson.dumps(bodies.message_queue_to_json(queue))


def _process_queue_info(consumer, queue: MessageQueue, process_queue) -> dict[str, Any]:
    offsets = sorted(process_queue.messages)
    return {
        "cachedMsgCount": len(offsets), "cachedMsgMaxOffset": offsets[-1] if offsets else 0,
        "cachedMsgMinOffset": offsets[0] if offsets else 0,
        "cachedMsgSizeInMiB": process_queue.body_bytes // _MIB,
        "commitOffset": max(consumer.offset_store.cached_offset(queue), 0),
        "droped": process_queue.dropped, "lastConsumeTimestamp":
        process_queue.last_consume_timestamp_ms,
        "lastLockTimestamp": process_queue.last_lock_timestamp_ms,
        "lastPullTimestamp": process_queue.last_pull_timestamp_ms,
        "locked": process_queue.locked, "transactionMsgCount": 0,
        "transactionMsgMaxOffset": 0, "transactionMsgMinOffset": 0,
        "tryUnlockTimes": process_queue.try_unlock_times}


def _properties(instance, consumer) -> dict[str, str]:
    values = {
        PROP_NAMESERVER_ADDR: ";".join(instance.namesrv_addresses),
        PROP_THREADPOOL_CORE_SIZE: str(consumer.consume_thread_max),
        PROP_CLIENT_VERSION: CURRENT_VERSION.name,
        PROP_CONSUME_ORDERLY: "true" if consumer.orderly else "false",
        PROP_CONSUME_TYPE: ConsumeType.CONSUME_PASSIVELY.name,
        PROP_CONSUMER_START_TIMESTAMP: str(consumer.start_timestamp_ms),
        "consumerGroup": consumer.group, "messageModel": consumer.message_model.name,
        "consumeFromWhere": consumer.consume_from_where.name,
        "consumeMessageBatchMaxSize": str(consumer.consume_message_batch_max_size),
        "pullBatchSize": str(consumer.pull_batch_size),
        "pullThresholdForQueue": str(consumer.pull_threshold_for_queue),
        "maxReconsumeTimes": str(consumer.max_reconsume_times),
        "clientIP": instance.client_id.split("@", 1)[0], "instanceName":
        instance.client_id.split("@", 1)[-1], "pid": str(os.getpid())}
    return values


def consumer_running_info(instance, consumer) -> bytes:
    """The ConsumerRunningInfo body of ``consumer``: fastjson's text, MessageQueue keys as
    objects, so Java's ``ConsumerRunningInfo.decode`` reads it."""
    subscriptions = [bodies._subscription_json(s)   # the heartbeat's shape, same fields
                     for s in sorted(consumer.subscriptions.values(), key=lambda s: s.topic)]
    queue_entries = [
        _queue_key(queue) + b":" + orjson.dumps(_process_queue_info(consumer, queue, pq))
        for queue, pq in sorted(consumer.process_queues.items(),
                                key=lambda item: (item[0].topic, item[0].broker_name,
                                                  item[0].queue_id))]
    stats = getattr(consumer, "stats", None)
    status_table = {topic: stats.status(topic) if stats is not None else _ZERO_STATUS
                    for topic in sorted(consumer.subscriptions)}
    head = orjson.dumps({"properties": _properties(instance, consumer),
                         "statusTable": status_table, "subscriptionSet": subscriptions},
                        option=orjson.OPT_SORT_KEYS)
    return head[:-1] + b',"mqTable":{' + b",".join(queue_entries) + b"}}"


async def on_get_consumer_running_info(instance, connection, command: RemotingCommand
                                       ) -> RemotingCommand:
    """GET_CONSUMER_RUNNING_INFO (307)."""
    try:
        header = headers.GET_CONSUMER_RUNNING_INFO_REQUEST.parse(command.ext_fields)
    except HeaderError as error:
        return _error(command, error.remark)
    consumer = instance.consumers.get(header.consumer_group)
    if consumer is None or not hasattr(consumer, "process_queues"):
        return _error(command, f"The Consumer Group <{header.consumer_group}> not exist in "
                               "this consumer")
    return create_response(command, ResponseCode.SUCCESS,
                           body=consumer_running_info(instance, consumer))


def _direct_result(order: bool, result: str, remark: Optional[str], spent_ms: int) -> bytes:
    return orjson.dumps({"autoCommit": True, "consumeResult": result, "order": order,
                         "remark": remark, "spentTimeMills": spent_ms})


async def on_consume_message_directly(instance, connection, command: RemotingCommand
                                      ) -> RemotingCommand:
    """CONSUME_MESSAGE_DIRECTLY (309): one listener call with the message in the body."""
    try:
        header = headers.CONSUME_MESSAGE_DIRECTLY_REQUEST.parse(command.ext_fields)
        messages = decode_messages(command.body or b"", header.broker_name or "")
    except (HeaderError, ProtocolError) as error:
        return _error(command, str(error))
    consumer = instance.consumers.get(header.consumer_group)
    if consumer is None or not hasattr(consumer, "consume_directly"):
        return _error(command, f"The Consumer Group <{header.consumer_group}> not exist in "
                               "this consumer")
    if len(messages) != 1:
        return _error(command, f"expected one message in the body, got {len(messages)}")
    started = time.monotonic()
    result, remark = await consumer.consume_directly(messages[0])
    spent_ms = int((time.monotonic() - started) * 1000)
    return create_response(command, ResponseCode.SUCCESS,
                           body=_direct_result(consumer.orderly, result, remark, spent_ms))


def decode_reset_offset_body(data) -> dict[MessageQueue, int]:
    """The offset table of a ResetOffsetBody (fastjson object keys). ValueError when bad."""
    document = fastjson.loads(data)
    if not isinstance(document, dict) or not isinstance(document.get("offsetTable", {}), dict):
        raise ValueError("ResetOffsetBody: offsetTable is not an object")
    table = {}
    for key, offset in document.get("offsetTable", {}).items():
        queue = bodies.message_queue_from_json(orjson.loads(key), "ResetOffsetBody key")
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise ValueError(f"ResetOffsetBody: offset of {key} is not an integer")
        table[queue] = offset
    return table


async def on_reset_consumer_client_offset(instance, connection, command: RemotingCommand
                                          ) -> Optional[RemotingCommand]:
    """RESET_CONSUMER_CLIENT_OFFSET (220): move the group's queues of ``topic`` to the given
    offsets (Java brokers send it oneway; a two-way request gets SUCCESS)."""
    try:
        header = headers.RESET_OFFSET_REQUEST.parse(command.ext_fields)
        offsets = decode_reset_offset_body(command.body or b'{"offsetTable":{}}')
    except (HeaderError, ProtocolError, ValueError, orjson.JSONDecodeError) as error:
        LOGGER.warning("bad RESET_CONSUMER_CLIENT_OFFSET: %s", error)
        return _error(command, str(error))
    consumer = instance.consumers.get(header.group)
    if consumer is not None and hasattr(consumer, "reset_offset"):
        offsets = {q: o for q, o in offsets.items() if q.topic == header.topic}
        outcome = consumer.reset_offset(offsets)
        if inspect.isawaitable(outcome):
            await outcome
    return create_response(command, ResponseCode.SUCCESS)


async def on_get_consumer_status_from_client(instance, connection, command: RemotingCommand
                                             ) -> RemotingCommand:
    """GET_CONSUMER_STATUS_FROM_CLIENT (221): the group's offsets of ``topic`` in this client,
    as GetConsumerStatusBody (MessageQueue object keys, fastjson style)."""
    try:
        header = headers.GET_CONSUMER_STATUS_REQUEST.parse(command.ext_fields)
    except HeaderError as error:
        return _error(command, error.remark)
    consumer = instance.consumers.get(header.group)
    queues = [] if consumer is None else sorted(
        (queue for queue in consumer.process_queues if queue.topic == header.topic),
        key=lambda queue: (queue.broker_name, queue.queue_id))
    entries = [bodies.encode_message_queue(queue) + b":"
               + str(max(consumer.offset_store.cached_offset(queue), 0)).encode()
               for queue in queues]
    body = b'{"consumerTable":{},"messageQueueTable":{' + b",".join(entries) + b"}}"
    return create_response(command, ResponseCode.SUCCESS, body=body)


HANDLERS = {RequestCode.GET_CONSUMER_RUNNING_INFO: on_get_consumer_running_info,
            RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT: on_get_consumer_status_from_client,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: on_consume_message_directly,
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET: on_reset_consumer_client_offset}
