# Requests about the 5.x timer: GET_TIMER_CHECK_POINT (60), GET_TIMER_METRICS (61), RECALL_MESSAGE.
"""Handlers of the timer's request codes, answered in the remoting worker that received them.

* GET_TIMER_CHECK_POINT (60): the 56 bytes of ``config/timercheck`` (a Java 5.x slave asks its
  master every 3 s; store/timer_checkpoint.py), SYSTEM_ERROR "The checkpoint is null" without
  the timer. The file is what the timer worker last flushed (every ``timerFlushIntervalMs``
  and after every delivered slot); Java answers from memory, at most that much newer.
* GET_TIMER_METRICS (61): ``config/timermetrics`` as compact JSON (store/timer_metrics.py),
  SYSTEM_ERROR "The timer message store is null" without the timer.
* RECALL_MESSAGE (370): Java's RecallMessageProcessor, check for check with its codes and
  remarks; the recall is a cancel mark sent like any timer message (to the handle's topic,
  delivery time the handle's, ``TIMER_DEL_UNIQKEY`` = topic+UNIQ_KEY), so it is parked in the
  recalled message's slot and drops it there (broker/timer.py).
"""
from pybroker.broker import send
from pybroker.broker.context import BrokerContext, Handler
from pybroker.broker.interfaces import ClientChannel
from pybroker.broker.timer_message import delete_key, parse_recall_handle
from pybroker.protocol import headers
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response
from pybroker.protocol.constants import Perm, Property
from pybroker.protocol.properties import encode_properties
from pybroker.store import paths
from pybroker.store.timer_checkpoint import CheckpointValues, read_checkpoint
from pybroker.store.timer_metrics import load_timer_metrics

__all__ = ["HANDLERS", "RECALL_MESSAGE_TAG"]

RECALL_MESSAGE_TAG = "_RECALL_TAG_"
_RECALL_BODY = b"0"
_UNAVAILABLE = "recall failed, broker service not available"


async def handle_get_timer_check_point(ctx: BrokerContext, channel: ClientChannel,
                                       request: RemotingCommand) -> RemotingCommand:
    """GET_TIMER_CHECK_POINT (60): the checkpoint body, or SYSTEM_ERROR without the timer."""
    if not ctx.config.store.timer_wheel_enable:
        return create_response(request, ResponseCode.SYSTEM_ERROR, "The checkpoint is null")
    path = paths.config_path(ctx.config.store.store_path_root_dir, paths.TIMER_CHECK_CONFIG)
    values = read_checkpoint(path) or CheckpointValues()
    return create_response(request, ResponseCode.SUCCESS, None, body=values.encode())


async def handle_get_timer_metrics(ctx: BrokerContext, channel: ClientChannel,
                                   request: RemotingCommand) -> RemotingCommand:
    """GET_TIMER_METRICS (61): the metrics document, or SYSTEM_ERROR without the timer."""
    if not ctx.config.store.timer_wheel_enable:
        return create_response(request, ResponseCode.SYSTEM_ERROR,
                               "The timer message store is null")
    path = paths.config_path(ctx.config.store.store_path_root_dir, paths.TIMER_METRICS_CONFIG)
    try:
        metrics = load_timer_metrics(path)
    except (OSError, ValueError) as error:
        return create_response(request, ResponseCode.SYSTEM_ERROR, str(error))
    return create_response(request, ResponseCode.SUCCESS, None, body=metrics.encode())


def _recall_refusal(ctx: BrokerContext, header) -> tuple[int, str] | None:
    """Java RecallMessageProcessor's checks before the put, in its order."""
    broker, store = ctx.config.broker, ctx.config.store
    if not store.recall_message_enable:
        return ResponseCode.NO_PERMISSION, "recall failed, operation is forbidden"
    if ctx.config.store.is_slave:
        return ResponseCode.SLAVE_NOT_AVAILABLE, _UNAVAILABLE
    if not broker.broker_permission & Perm.WRITE and \
            not store.allow_recall_when_broker_not_writeable:
        return ResponseCode.SERVICE_NOT_AVAILABLE, _UNAVAILABLE
    if ctx.metadata.topic_config(header.topic) is None:
        return ResponseCode.TOPIC_NOT_EXIST, f"recall failed, the topic[{header.topic}] not exist"
    return None


async def handle_recall_message(ctx: BrokerContext, channel: ClientChannel,
                                request: RemotingCommand) -> RemotingCommand | None:
    """RECALL_MESSAGE (370): SUCCESS with ``msgId`` (the recalled UNIQ_KEY) once the cancel
    mark is stored; the refusals as Java (see the module docstring)."""
    header = headers.parse_request_header(request.code, request.ext_fields)
    fields = {Property.MSG_REGION: ctx.config.broker.region_id}
    refusal = _recall_refusal(ctx, header)
    if refusal is None:
        try:
            handle = parse_recall_handle(header.recall_handle)
        except ValueError as error:
            refusal = ResponseCode.ILLEGAL_OPERATION, str(error)
        else:
            refusal = _check_handle(ctx, header, handle)
    if refusal is not None:
        return send.answer(request, refusal[0], refusal[1], fields)
    try:
        stored = await _put_cancel_mark(ctx, channel, header, handle)
    except send.SendRefused:
        stored = False
    if not stored:
        return send.answer(request, ResponseCode.SYSTEM_ERROR, "recall failed, execute error",
                           fields)
    fields["msgId"] = handle.message_id
    return send.answer(request, ResponseCode.SUCCESS, None, fields)


def _check_handle(ctx: BrokerContext, header, handle) -> tuple[int, str] | None:
    if header.topic != handle.topic:
        return ResponseCode.ILLEGAL_OPERATION, "recall failed, topic not match"
    if ctx.config.broker.broker_name != handle.broker_name:
        return ResponseCode.ILLEGAL_OPERATION, _UNAVAILABLE
    try:
        timestamp = int(handle.timestamp)
    except ValueError:
        timestamp = -1
    time_left = timestamp - ctx.now_ms()
    if time_left <= 0 or time_left >= ctx.config.store.timer_max_delay_sec * 1000:
        return ResponseCode.ILLEGAL_OPERATION, "recall failed, timestamp invalid"
    return None


async def _put_cancel_mark(ctx: BrokerContext, channel: ClientChannel, header, handle) -> bool:
    """Build and put the cancel mark as Java's buildMessage, through the put-time rule."""
    now_ms = ctx.now_ms()
    properties = {Property.TAGS: RECALL_MESSAGE_TAG,
                  Property.TIMER_DEL_UNIQKEY: delete_key(handle.topic, handle.message_id),
                  Property.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: handle.message_id,
                  Property.TIMER_DELIVER_MS: handle.timestamp,
                  Property.BORN_TIMESTAMP: str(now_ms),
                  "TRACE_CONTEXT": "",
                  Property.PRODUCER_GROUP: header.producer_group}
    topic, queue_id = send.redirect_scheduled(handle.topic, 0, properties,
                                              len(ctx.config.derived.delay_levels_ms),
                                              send.timer_rules(ctx), now_ms)
    records = send.encode_message(topic, queue_id, 0, _RECALL_BODY,
                                  encode_properties(properties), 0, now_ms,
                                  send.born_host_of(channel.remote_address), ctx.store_host)
    result = await send.timed_put(ctx, records, topic, queue_id, 1, 0, True)
    return result.status.stored


HANDLERS: dict[int, Handler] = {
    RequestCode.GET_TIMER_CHECK_POINT: handle_get_timer_check_point,
    RequestCode.GET_TIMER_METRICS: handle_get_timer_metrics,
    RequestCode.RECALL_MESSAGE: handle_recall_message,
}
